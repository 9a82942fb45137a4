# The command line as a whole: every flag a command parses (launch/cmd_*.c) is listed in its
# --help or a subcommand's, `sluice --help` lists every command, and an unknown flag is refused
# with one line naming it (tests/test_cli_flags.py).
add_test(NAME test_cli_flags
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/test_cli_flags.py
                 $<TARGET_FILE:sluice> ${CMAKE_SOURCE_DIR})
set_tests_properties(test_cli_flags PROPERTIES TIMEOUT 120 LABELS "cli")
# launch/quickstart.sh --np N: the batch it sets fits N ranks (--dry-run), and sluice train's batch
# error suggests a micro_batch_size or global_batch_tokens that fits (tests/test_quickstart_batch.sh).
add_test(NAME test_quickstart_batch
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_quickstart_batch.sh $<TARGET_FILE:sluice>
                 ${CMAKE_CURRENT_BINARY_DIR}/quickstart_batch)
set_tests_properties(test_quickstart_batch PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77 LABELS "cli"
                     ENVIRONMENT "OMP_NUM_THREADS=1")
# sluice eval and generate: --weights (directory, file, checkpoint, bf16), the tokenizer of text and
# prompts, --max-tokens, --prompts, one process (tests/test_weights_cli.sh).
add_test(NAME test_weights_cli
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_weights_cli.sh $<TARGET_FILE:sluice>
                 ${CMAKE_CURRENT_BINARY_DIR}/weights_cli)
set_tests_properties(test_weights_cli PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                     LABELS "model;cli" ENVIRONMENT "OMP_NUM_THREADS=2")
# sluice train checks every data path of its schedule at start-up: one line naming the config and
# the key, before the banner, the model's allocation and a checkpoint's load, once under mpirun -np
# 2, exit status 1 (tests/test_train_data_check.sh).
add_test(NAME test_train_data_check
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_train_data_check.sh $<TARGET_FILE:sluice>
                 ${CMAKE_CURRENT_BINARY_DIR}/train_data_check ${MPIEXEC_EXECUTABLE})
set_tests_properties(test_train_data_check PROPERTIES TIMEOUT 120 LABELS "trainer;cli"
                     PROCESSORS 2 ENVIRONMENT "OMP_NUM_THREADS=1")
# On the CPU backend sluice train checks that a node's ranks fit its free memory before they
# allocate: one line, once under mpirun -np 2, exit status 1; SLUICE_HOST_MEMORY (off, a size)
# (tests/test_train_host_memory.sh).
add_test(NAME test_train_host_memory
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_train_host_memory.sh $<TARGET_FILE:sluice>
                 ${CMAKE_CURRENT_BINARY_DIR}/train_host_memory ${MPIEXEC_EXECUTABLE})
set_tests_properties(test_train_host_memory PROPERTIES TIMEOUT 120 LABELS "trainer;cli"
                     PROCESSORS 2 ENVIRONMENT "OMP_NUM_THREADS=1")
# sluice eval and generate on the CPU: the same check for the weights, a forward's
# activations and the KV cache (tests/test_eval_host_memory.sh).
add_test(NAME test_eval_host_memory
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_eval_host_memory.sh $<TARGET_FILE:sluice>
                 ${CMAKE_CURRENT_BINARY_DIR}/eval_host_memory)
set_tests_properties(test_eval_host_memory PROPERTIES TIMEOUT 120 LABELS "model;cli"
                     ENVIRONMENT "OMP_NUM_THREADS=1")
