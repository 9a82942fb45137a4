# The torchtitan-style PyTorch baseline (bench/torchtitan_style_bench.py) computes sluice's model:
# its --check against sluice's CPU backend on the same weights and tokens (tests/dump_grads), and
# its benchmark loop at tiny widths on the CPU (tests/torchtitan_style_check.sh). Debian's torch
# 1.13 runs its fallback paths (grouped GEMMs as a loop, attention without SDPA).
add_test(NAME test_torchtitan_style_check
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/torchtitan_style_check.sh $<TARGET_FILE:dump_grads>
                 ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/torchtitan_style)
set_tests_properties(test_torchtitan_style_check PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                     LABELS "model;torch" ENVIRONMENT "OMP_NUM_THREADS=2")
