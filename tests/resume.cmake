# Exact resume after kill -9 at np 1, 2 and 4, and resume on other numbers of ranks
# (tests/test_resume.sh, issue 10).
add_test(NAME test_resume
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_resume.sh $<TARGET_FILE:sluice>
                 ${CMAKE_CURRENT_BINARY_DIR}/resume ${MPIEXEC_EXECUTABLE})
set_tests_properties(test_resume PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77
                     LABELS "checkpoint;parallel" ENVIRONMENT "OMP_NUM_THREADS=1")
# SIGKILL at random moments over a run's length (often inside a save), 20 rounds or more: at
# least 5 kills resumed from the middle of the run and 1 landed in a save, and every run that
# completes ends with the uninterrupted run's final weights (tests/test_resume_torture.sh).
add_test(NAME test_resume_torture
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_resume_torture.sh $<TARGET_FILE:sluice>
                 ${CMAKE_CURRENT_BINARY_DIR}/resume_torture 20)
set_tests_properties(test_resume_torture PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77
                     LABELS "checkpoint" ENVIRONMENT "OMP_NUM_THREADS=1")
# A stop signal (SIGTERM to one process, SIGUSR1 to mpirun -np 2, SIGTERM to one rank of two)
# ends the run after a committed checkpoint with exit 75; --resume auto finishes it
# (tests/test_stop_signal.sh).
add_test(NAME test_stop_signal
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_stop_signal.sh $<TARGET_FILE:sluice>
                 ${CMAKE_CURRENT_BINARY_DIR}/stop_signal ${MPIEXEC_EXECUTABLE})
set_tests_properties(test_stop_signal PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77
                     LABELS "checkpoint;parallel" ENVIRONMENT "OMP_NUM_THREADS=1")
