# trainer/plan.c and `sluice plan`: hand counts for configs/qwen-gated-15a2b.json on 8 GPUs
# with EP 8, the fit advice, and the command line's outputs and bad flags.
sluice_test(test_plan SOURCES test_plan.c LABELS core plan)
target_compile_definitions(test_plan PRIVATE SLUICE_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
add_test(NAME test_plan_cli
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_plan_cli.sh $<TARGET_FILE:sluice>
                 ${CMAKE_SOURCE_DIR})
set_tests_properties(test_plan_cli PROPERTIES TIMEOUT 60 LABELS "plan;cli")
# bench/overlap_count (docs/parallelism.md, "Overlap"): hand counts for the same config.
add_test(NAME test_overlap_count
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_overlap_count.sh $<TARGET_FILE:overlap_count>
                 ${CMAKE_SOURCE_DIR})
set_tests_properties(test_overlap_count PROPERTIES TIMEOUT 60 LABELS "plan;cli")
# bench/perf_model.py's activation count against the model's (sluice plan --json).
add_test(NAME test_perf_model_counts
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_perf_model_counts.sh $<TARGET_FILE:sluice>
                 ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/perf_model_counts)
set_tests_properties(test_perf_model_counts PROPERTIES TIMEOUT 60 LABELS "plan;cli")
# sluice plan's per-component step time against single-GPU steps measured on a GPU
# (bench/results/*.json: the shapes, measured step times and profile rows, with provenance).
# The steps of 2026-11-28 (a12893b's defaults, pairs of micro-batches; its groups of 4; EP-8),
# the call the rates were read from.
sluice_test(test_plan_measured SOURCES test_plan_measured.c LABELS core plan
            ARGS ${CMAKE_SOURCE_DIR} ${CMAKE_SOURCE_DIR}/bench/results/h200-2026-11-28.json)
# The same against the steps of 2026-11-27 (b88c081's defaults: the experts' weight gradients
# over pairs of micro-batches; slower kernels than the rates': the plan is 6-7% under them).
add_test(NAME test_plan_measured_1127
         COMMAND test_plan_measured ${CMAKE_SOURCE_DIR}
                 ${CMAKE_SOURCE_DIR}/bench/results/h200-2026-11-27.json)
set_tests_properties(test_plan_measured_1127 PROPERTIES TIMEOUT 60 LABELS "core;plan")
# trainer/plan_rates.c's H200 rates against the stored bench outputs they were read from
# (bench/results/h200-2026-11-28/call1/, bench/plan_rates.py check).
add_test(NAME test_plan_rates_source
         COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/bench/plan_rates.py check
                 ${CMAKE_SOURCE_DIR}/bench/results/h200-2026-11-28/call1
                 ${CMAKE_SOURCE_DIR}/trainer/plan_rates.c --gpu h200)
set_tests_properties(test_plan_rates_source PROPERTIES TIMEOUT 60 LABELS "plan")
