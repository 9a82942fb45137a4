# The pages themselves: every relative Markdown link of the tracked pages names a file of the tree
# and, with an #anchor, a heading of the target page (tests/test_doc_links.py). The keys of
# docs/config.md are checked against the parser by test_config (tests/test_config_docs.c), the
# flags of each command against its --help by test_cli_flags (tests/cli.cmake).
add_test(NAME test_doc_links
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/test_doc_links.py ${CMAKE_SOURCE_DIR})
set_tests_properties(test_doc_links PROPERTIES TIMEOUT 60 LABELS "docs")
# A measured figure quoted on several pages agrees with its measurement (the tiny staged
# schedule's wall time: docs/results.md, README.md, docs/stages.md; tests/test_doc_figures.py).
add_test(NAME test_doc_figures
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/test_doc_figures.py ${CMAKE_SOURCE_DIR})
set_tests_properties(test_doc_figures PROPERTIES TIMEOUT 60 LABELS "docs")
