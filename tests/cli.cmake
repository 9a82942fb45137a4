# The command line as a whole: every flag a command parses (launch/cmd_*.c) is listed in its
# --help or a subcommand's, `sluice --help` lists every command, and an unknown flag is refused
# with one line naming it (tests/test_cli_flags.py).
add_test(NAME test_cli_flags
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/test_cli_flags.py
                 $<TARGET_FILE:sluice> ${CMAKE_SOURCE_DIR})
set_tests_properties(test_cli_flags PROPERTIES TIMEOUT 120 LABELS "cli")
