# model/model.c: the whole model's gradients, training, and the PyTorch cross-check.
sluice_test(test_model_grad SOURCES test_model_grad.c LABELS model)
add_executable(dump_grads dump_grads.c)
target_link_libraries(dump_grads PRIVATE sluice_testutil)
add_test(NAME test_torch_crosscheck
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/torch_crosscheck.sh $<TARGET_FILE:dump_grads>
                 ${CMAKE_CURRENT_BINARY_DIR}/torch_crosscheck)
set_tests_properties(test_torch_crosscheck PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77
                     LABELS "model;torch" ENVIRONMENT "OMP_NUM_THREADS=2")
add_test(NAME test_train_cli
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_train_cli.sh $<TARGET_FILE:sluice>
                 ${CMAKE_CURRENT_BINARY_DIR}/train_cli)
set_tests_properties(test_train_cli PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77 LABELS "model;cli"
                     ENVIRONMENT "OMP_NUM_THREADS=2")
# sluice eval --diagnostics/--json/--plot, the YaRN flags and sluice plot, end to end.
add_test(NAME test_eval_diag
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_eval_diag.sh $<TARGET_FILE:sluice>
                 ${CMAKE_CURRENT_BINARY_DIR}/eval_diag)
set_tests_properties(test_eval_diag PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS "model;cli")
# model.h memory modes: recompute ("attention", "layer") and forward-only evaluation give
# bitwise the losses, gradients and weights of "none"; the cuda variant runs the same on the
# CUDA backend in fp32 (emulated build, label cuda); the MPI variant is in parallel.cmake.
sluice_test(test_recompute SOURCES test_recompute.c ARGS cpu LABELS model TIMEOUT 300)
add_test(NAME test_recompute_cuda COMMAND test_recompute cuda)
set_tests_properties(test_recompute_cuda PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77
                     LABELS "cuda" ENVIRONMENT "OMP_NUM_THREADS=2")
# model/counts.h's activation count against the bytes the model's tensors hold on the CPU
# (sl_backend_tensor_bytes), in every memory mode: exact per token, small and fixed besides;
# the cuda variant in bf16 on the CUDA backend (emulated build, label cuda).
sluice_test(test_memory_counts SOURCES test_memory_counts.c LABELS model)
add_test(NAME test_memory_counts_cuda COMMAND test_memory_counts cuda)
set_tests_properties(test_memory_counts_cuda PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                     LABELS "cuda")
# A staged schedule (training.stages): metrics, retention of stage ends, the exported RoPE
# settings, exact resume at and after a boundary, and the schedule's validation messages.
add_test(NAME test_stages
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_stages.sh $<TARGET_FILE:sluice>
                 ${CMAKE_CURRENT_BINARY_DIR}/stages)
set_tests_properties(test_stages PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77 LABELS "model;cli"
                     ENVIRONMENT "OMP_NUM_THREADS=2")
# model/decode.c: decoding with a KV cache gives the full forward's logits at every position, and
# greedy / seeded generation (docs/generate.md); the cuda variant runs it on the CUDA backend in
# fp32 and bf16 (emulated build, label cuda).
sluice_test(test_generate SOURCES test_generate.c ARGS cpu LABELS model)
add_test(NAME test_generate_cuda COMMAND test_generate cuda)
set_tests_properties(test_generate_cuda PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77
                     LABELS "cuda" ENVIRONMENT "OMP_NUM_THREADS=2")
# model/sampler.c: greedy, temperature, top-k and top-p on a 6-token vocabulary with exact supports.
sluice_test(test_sampler SOURCES test_sampler.c LABELS model)
# sluice generate end to end (final weights, checkpoint, eval's logits, seeds, batches, flags)
# and training.sample_every (events, and training bitwise unchanged by sampling).
add_test(NAME test_generate_cli
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_generate_cli.sh $<TARGET_FILE:sluice>
                 ${CMAKE_CURRENT_BINARY_DIR}/generate_cli)
set_tests_properties(test_generate_cli PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77
                     LABELS "model;cli" ENVIRONMENT "OMP_NUM_THREADS=2")
# The Qwen3-Next export (ckpt export --format qwen3_next, training.export_format): per-token logits
# of an independent PyTorch Qwen3-Next forward equal sluice eval's for three models covering every
# transform; the hf variant runs transformers' Qwen3NextForCausalLM where a Python with
# transformers >= 4.57 exists (SLUICE_HF_PYTHON) and skips (77) elsewhere, CI included (the test
# says why).
add_test(NAME test_qwen3_next_export
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_qwen3_next_export.sh $<TARGET_FILE:sluice>
                 ${CMAKE_CURRENT_BINARY_DIR}/qwen3_next_export torch)
add_test(NAME test_qwen3_next_hf
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_qwen3_next_export.sh $<TARGET_FILE:sluice>
                 ${CMAKE_CURRENT_BINARY_DIR}/qwen3_next_hf hf)
set_tests_properties(test_qwen3_next_export test_qwen3_next_hf PROPERTIES TIMEOUT 600
                     SKIP_RETURN_CODE 77 LABELS "model;torch;cli" ENVIRONMENT "OMP_NUM_THREADS=2")
