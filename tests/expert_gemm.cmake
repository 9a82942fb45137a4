# bench/expert_gemm_bench --check: the expert GEMMs of one MoE layer (forward, data and weight
# gradients) under each strategy of moe/grouped_matmul.cu against the CPU backend, bf16 and fp32
# (label cuda: the emulated build in CI, or a GPU; skipped without one); a bad flag exits 2.
if(SLUICE_WITH_CUDA)
  add_test(NAME test_expert_gemm_bench
           COMMAND bash -c "$0 --check && $0 --check --dtype f32 && { $0 --rows x; test $? = 2; } && { $0 --check --ablate; test $? = 2; }"
                   $<TARGET_FILE:expert_gemm_bench>)
  set_tests_properties(test_expert_gemm_bench PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77
                       LABELS "moe;cuda" ENVIRONMENT "OMP_NUM_THREADS=2")
  # the Hopper grouped GEMM's weight gradient with its opt-in L2 prefetch of the old dW
  add_test(NAME test_expert_gemm_bench_prefetch COMMAND expert_gemm_bench --check)
  set_tests_properties(test_expert_gemm_bench_prefetch PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77
                       LABELS "moe;cuda"
                       ENVIRONMENT "OMP_NUM_THREADS=2;SLUICE_EXPERT_GEMM_PREFETCH=1")
  # ... and with its opt-in add-reduction epilogue (beta 1: the bench's weight gradients add to
  # a non-zero dW)
  add_test(NAME test_expert_gemm_bench_dw_reduce COMMAND expert_gemm_bench --check)
  set_tests_properties(test_expert_gemm_bench_dw_reduce PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77
                       LABELS "moe;cuda"
                       ENVIRONMENT "OMP_NUM_THREADS=2;SLUICE_EXPERT_GEMM_DW_REDUCE=1")
  # ... and with the experts' activation in the first projection's epilogue
  # (SLUICE_EXPERT_GEMM_SWIGLU=1, opt-in since 2026-11-27: check_swiglu requires the fused path
  # where the plain GEMM ran on the Hopper kernel, and the two-kernel path by default)
  add_test(NAME test_expert_gemm_bench_swiglu COMMAND expert_gemm_bench --check)
  set_tests_properties(test_expert_gemm_bench_swiglu PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77
                       LABELS "moe;cuda"
                       ENVIRONMENT "OMP_NUM_THREADS=2;SLUICE_EXPERT_GEMM_SWIGLU=1")
  # --ablate (bench/expert_gemm_ablate.c): the Hopper kernel's GEMMs timed with parts left out;
  # under the emulator the timings mean nothing and its checks run: without the epilogue the
  # outputs keep their fill, with nothing left out again the forward gives its first result
  add_test(NAME test_expert_gemm_bench_ablate
           COMMAND expert_gemm_bench --ablate --rows 150 --experts 3 --hidden 136 --ffn 72 --reps 1)
  set_tests_properties(test_expert_gemm_bench_ablate PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77
                       LABELS "moe;cuda" ENVIRONMENT "OMP_NUM_THREADS=2"
                       FAIL_REGULAR_EXPRESSION "FAIL")
  # another value stops the run with one message naming the variable and its values
  add_test(NAME test_expert_gemm_bench_swiglu_bad
           COMMAND bash -c "$0 --check; rc=$?; test $rc = 77 && exit 77; echo exit $rc; test $rc != 0"
                   $<TARGET_FILE:expert_gemm_bench>)
  set_tests_properties(test_expert_gemm_bench_swiglu_bad PROPERTIES TIMEOUT 120
                       SKIP_RETURN_CODE 77 LABELS "moe;cuda"
                       ENVIRONMENT "OMP_NUM_THREADS=2;SLUICE_EXPERT_GEMM_SWIGLU=2"
                       PASS_REGULAR_EXPRESSION "SLUICE_EXPERT_GEMM_SWIGLU=2: expected 0 or 1.*exit [1-9]")
endif()
