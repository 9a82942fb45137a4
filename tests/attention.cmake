# attention/: q/gate split, RoPE and YaRN tables, fused gated attention (CPU kernels).
sluice_test(test_attention_qgate SOURCES test_attention_qgate.c LABELS attention)
sluice_test(test_attention_rope SOURCES test_attention_rope.c LABELS attention)
sluice_test(test_attention_fwd SOURCES test_attention_fwd.c LABELS attention)
sluice_test(test_attention_grad SOURCES test_attention_grad.c LABELS attention)
# S = 16384: ~0.5 s optimized, ~2 min in a -O0 sanitizer build.
sluice_test(test_attention_long SOURCES test_attention_long.c LABELS attention TIMEOUT 900)
# The CUDA kernels against the CPU at 200-512 tokens and head dims 64/128/160 (fp32 and bf16);
# skipped without the CUDA backend. Under the emulator (-DSLUICE_CUDA=EMULATED) it runs on the CPU.
sluice_test(test_attention_cuda SOURCES test_attention_cuda.c LABELS attention cuda TIMEOUT 300)
# YaRN against Hugging Face transformers' formula on the exported config.json (NumPy reference).
sluice_test(test_rope_hf SOURCES test_rope_hf.c LABELS attention model)
target_compile_definitions(test_rope_hf PRIVATE SLUICE_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
# Per-document masking (seg): all-zero seg == plain causal bitwise, packed documents == each
# document alone, finite differences (CPU); the cuda variant runs the first two on the CUDA
# backend (emulated in CI), skipped without one.
sluice_test(test_attention_docs SOURCES test_attention_docs.c LABELS attention)
add_test(NAME test_attention_docs_cuda COMMAND test_attention_docs cuda)
set_tests_properties(test_attention_docs_cuda PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                     LABELS "attention;cuda" ENVIRONMENT "OMP_NUM_THREADS=2")
# The tensor-core kernels (bf16, D = 64/128) against the CPU: GQA 1/2/8, the three gates, tile-
# crossing and one-token sequences, documents of length 1. Deterministic dQ (and the same bits
# twice); then the atomic dQ mode, whose fp32 atomics sum in a schedule-dependent order: the
# emulator's race check (which replays each launch in a second thread order) is off for it.
sluice_test(test_attention_tc SOURCES test_attention_tc.c LABELS attention cuda TIMEOUT 300)
add_test(NAME test_attention_tc_atomic COMMAND test_attention_tc atomic)
set_tests_properties(test_attention_tc_atomic PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                     LABELS "attention;cuda" ENVIRONMENT "OMP_NUM_THREADS=2;SLUICE_EMU_RACECHECK=0")
# sm90_env_refused(NAME VAR VALUE EXPECTED): test_attention_tc deterministic sm90 with VAR=VALUE
# must stop with "VAR=VALUE: expected EXPECTED" and a non-zero exit (77, no kernel, skips).
function(sm90_env_refused name var value expected)
  add_test(NAME ${name}
           COMMAND bash -c "$0 deterministic sm90; rc=$?; test $rc = 77 && exit 77; echo exit $rc; test $rc != 0"
                   $<TARGET_FILE:test_attention_tc>)
  set_tests_properties(${name} PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                       LABELS "attention;cuda" ENVIRONMENT "OMP_NUM_THREADS=2;${var}=${value}"
                       PASS_REGULAR_EXPRESSION "${var}=${value}: expected ${expected}.*exit [1-9]")
endfunction()
# The same cases through the Hopper kernel "sm90" (wgmma, TMA, warp specialization; chosen by
# name, each case checks that it ran): deterministic (and the same bits twice), then atomic dQ.
# The deterministic one runs the separate dQ pass, the atomic one adds dQ from the dK/dV pass
# (the fused dQ, docs/attention.md) in any order. Emulated in CI (the emulated device reports
# compute capability 9.0); skipped on a GPU that cannot run it.
add_test(NAME test_attention_sm90 COMMAND test_attention_tc deterministic sm90)
add_test(NAME test_attention_sm90_atomic COMMAND test_attention_tc atomic sm90)
set_tests_properties(test_attention_sm90 PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                     LABELS "attention;cuda" ENVIRONMENT "OMP_NUM_THREADS=2")
set_tests_properties(test_attention_sm90_atomic PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                     LABELS "attention;cuda" ENVIRONMENT "OMP_NUM_THREADS=2;SLUICE_EMU_RACECHECK=0")
# SLUICE_ATTN_SM90_DQ=fused: the deterministic fused dQ, its additions ordered by key tile
# through per-tile counters (the emulator runs that kernel's blocks in index order and traps
# where a count is wrong); a value other than fused or pass stops the backward with a message
# naming the variable.
add_test(NAME test_attention_sm90_dqfused COMMAND test_attention_tc deterministic sm90)
set_tests_properties(test_attention_sm90_dqfused PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                     LABELS "attention;cuda" ENVIRONMENT "OMP_NUM_THREADS=2;SLUICE_ATTN_SM90_DQ=fused")
sm90_env_refused(test_attention_sm90_dq_bad SLUICE_ATTN_SM90_DQ atomic "fused or pass")
# At head dim 64 the dK/dV pass takes steps of 64 query rows by default (the tests above; the
# atomic mode's fused dQ halves are then 32 head-dim columns, a wgmma operand starting inside a
# swizzled row); SLUICE_ATTN_SM90_BWD_BM=128 runs FlashAttention-3's 128, deterministic (the dQ
# pass) and atomic (dQ halves of 64 query rows); another value stops the backward with a message
# naming the variable.
add_test(NAME test_attention_sm90_bm128
         COMMAND bash -c "$0 deterministic sm90 && SLUICE_EMU_RACECHECK=0 $0 atomic sm90"
                 $<TARGET_FILE:test_attention_tc>)
set_tests_properties(test_attention_sm90_bm128 PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                     LABELS "attention;cuda" ENVIRONMENT "OMP_NUM_THREADS=2;SLUICE_ATTN_SM90_BWD_BM=128")
sm90_env_refused(test_attention_sm90_bm_bad SLUICE_ATTN_SM90_BWD_BM 96 "64, 128 or auto")
# The forward at head dim 64 with two consumer warpgroups (SLUICE_ATTN_SM90_FWD_BM=128: query
# tiles of 128 rows, 384 threads; the default there is 192 since 2026-11-27, which the other
# tests run): the same cases (D = 128 has 128 rows either way), deterministic; another value
# stops the forward with a message naming the variable.
add_test(NAME test_attention_sm90_fwd128 COMMAND test_attention_tc deterministic sm90)
set_tests_properties(test_attention_sm90_fwd128 PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                     LABELS "attention;cuda" ENVIRONMENT "OMP_NUM_THREADS=2;SLUICE_ATTN_SM90_FWD_BM=128")
sm90_env_refused(test_attention_sm90_fwd_bm_bad SLUICE_ATTN_SM90_FWD_BM 256 "128, 192 or auto")
# The forward and the dQ pass as persistent blocks (SLUICE_ATTN_SM90_PERSISTENT=1: a block per
# SM taking query tiles from a counter, the next tile's Q (and dO) and keys loading under this
# one's last steps and epilogue): the deterministic cases at the default rows (192 at head dim
# 64), then at 128, on an emulated device of 3 SMs (SLUICE_EMU_SMS), so that each block walks several tiles
# of every case and the rings, the tile slots and the Q, dO and gate buffers change hands
# between tiles; race-checked. Broken on purpose, each failed (2026-11-27): Q's buffer
# released after a tile's first S instead of its last, or the producer not waiting for its
# release, the epilogue staging its rows in Q's buffer, the consumers' ring position not
# advanced between tiles (forward and dQ pass alike), the consumers reading one tile slot, the
# gate loaded before the epilogue's release. A value other than 0, 1, fwd or dq stops the run
# with a message naming the variable.
add_test(NAME test_attention_sm90_persistent
         COMMAND bash -c "$0 deterministic sm90 && SLUICE_ATTN_SM90_FWD_BM=128 $0 deterministic sm90"
                 $<TARGET_FILE:test_attention_tc>)
set_tests_properties(test_attention_sm90_persistent PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                     LABELS "attention;cuda"
                     ENVIRONMENT "OMP_NUM_THREADS=2;SLUICE_EMU_SMS=3;SLUICE_ATTN_SM90_PERSISTENT=1")
sm90_env_refused(test_attention_sm90_persistent_bad SLUICE_ATTN_SM90_PERSISTENT 2 "0, 1, fwd or dq")
# The dQ pass with each step's S and dP issued before the previous step's dQ GEMM has retired
# (SLUICE_ATTN_SM90_DQ_OVERLAP=1; a ring of three stages, a stage released a step later): the
# deterministic cases, then again as persistent blocks on 3 emulated SMs, race-checked. With
# the previous stage never released the emulator reported the deadlock, and with a step's S
# and dP read before they retired (wait_group 2) it reported the read, and with each stage
# released right after its dQ GEMM's issue (before the threads' waits) it reported the refill
# under the read (the emulator checks a wgmma's operands again at its warpgroup's last
# retiring wait, 2026-11-27). A value other than 0 or 1 stops the backward with a message
# naming the variable.
add_test(NAME test_attention_sm90_dq_overlap
         COMMAND bash -c "$0 deterministic sm90 && SLUICE_EMU_SMS=3 SLUICE_ATTN_SM90_PERSISTENT=dq $0 deterministic sm90"
                 $<TARGET_FILE:test_attention_tc>)
set_tests_properties(test_attention_sm90_dq_overlap PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                     LABELS "attention;cuda"
                     ENVIRONMENT "OMP_NUM_THREADS=2;SLUICE_ATTN_SM90_DQ_OVERLAP=1")
sm90_env_refused(test_attention_sm90_dq_overlap_bad SLUICE_ATTN_SM90_DQ_OVERLAP 2 "0 or 1")
# The dK/dV pass's consumers issuing their GEMMs in turns (SLUICE_ATTN_SM90_BWD_PINGPONG=1, the
# forward's ring of named barriers): the deterministic cases (the dQ pass; the fused dQ ignores
# the variable), every D = 64 and D = 128 case through that path, race-checked by the emulator
# (with a turn's pass left out it reported the consumers' deadlock); a value other than 0 or 1
# stops the backward with a message naming the variable.
add_test(NAME test_attention_sm90_pingpong COMMAND test_attention_tc deterministic sm90)
set_tests_properties(test_attention_sm90_pingpong PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                     LABELS "attention;cuda"
                     ENVIRONMENT "OMP_NUM_THREADS=2;SLUICE_ATTN_SM90_BWD_PINGPONG=1")
sm90_env_refused(test_attention_sm90_pingpong_bad SLUICE_ATTN_SM90_BWD_PINGPONG 2 "0 or 1")
# The dK/dV pass with 3 and 4 stages of Q, dO and statistics (SLUICE_ATTN_SM90_BWD_STAGES; the
# default is 2): the deterministic cases (the dQ pass; the fused dQ and BM 128 keep 2), every
# D = 64 and D = 128 case through each ring, whose queries' tiles wrap it (up to 9 steps a
# block), race-checked by the emulator; a value other than 2, 3, 4 or auto stops the backward
# with a message naming the variable.
add_test(NAME test_attention_sm90_stages
         COMMAND bash -c "SLUICE_ATTN_SM90_BWD_STAGES=3 $0 deterministic sm90 && SLUICE_ATTN_SM90_BWD_STAGES=4 $0 deterministic sm90"
                 $<TARGET_FILE:test_attention_tc>)
set_tests_properties(test_attention_sm90_stages PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                     LABELS "attention;cuda" ENVIRONMENT "OMP_NUM_THREADS=2")
sm90_env_refused(test_attention_sm90_stages_bad SLUICE_ATTN_SM90_BWD_STAGES 5 "2, 3, 4 or auto")
# The dK/dV pass's split of the GQA group (SLUICE_ATTN_SM90_HSPLIT, docs/attention.md): the two
# tests above run "auto", which at these shapes takes one query head per block (fp32 partials
# summed by the ordered reduce; deterministic: the same bits twice). hsplit1: the unsplit path
# (bf16 dK/dV written by the block), deterministic and atomic (with one head per block a dQ
# step's head would be right even if taken from the wrong step); hsplit2: chunks of
# 2 and 4 heads (GQA 4 and 8), in the atomic mode (the chunk indexing is the same code in both
# modes; 6 s instead of 25). A value that is not 1, 2, 4, 8 or auto stops the backward with a
# message naming the variable.
add_test(NAME test_attention_sm90_hsplit1 COMMAND test_attention_tc deterministic sm90)
set_tests_properties(test_attention_sm90_hsplit1 PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                     LABELS "attention;cuda" ENVIRONMENT "OMP_NUM_THREADS=2;SLUICE_ATTN_SM90_HSPLIT=1")
add_test(NAME test_attention_sm90_atomic_hsplit1 COMMAND test_attention_tc atomic sm90)
set_tests_properties(test_attention_sm90_atomic_hsplit1 PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                     LABELS "attention;cuda"
                     ENVIRONMENT "OMP_NUM_THREADS=2;SLUICE_EMU_RACECHECK=0;SLUICE_ATTN_SM90_HSPLIT=1")
add_test(NAME test_attention_sm90_hsplit2 COMMAND test_attention_tc atomic sm90)
set_tests_properties(test_attention_sm90_hsplit2 PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                     LABELS "attention;cuda"
                     ENVIRONMENT "OMP_NUM_THREADS=2;SLUICE_EMU_RACECHECK=0;SLUICE_ATTN_SM90_HSPLIT=2")
sm90_env_refused(test_attention_sm90_hsplit_bad SLUICE_ATTN_SM90_HSPLIT 3 "1, 2, 4, 8 or auto")
# The dK/dV pass's steps by query tile, from the sequence's last tile down to the diagonal,
# every head of the block's chunk at each tile (SLUICE_ATTN_SM90_BWD_ORDER=tiles; the default
# walks head by head from the diagonal up): whole GQA groups per block (HSPLIT=1, so that a
# tile's steps change heads), deterministic with the dQ pass, with 3 stages, with the ordered
# fused dQ (its key-tile turns taken in the new order), then the atomic fused dQ; race-checked
# but the atomic run. Another value stops the backward with a message naming the variable.
add_test(NAME test_attention_sm90_order
         COMMAND bash -c "$0 deterministic sm90 && SLUICE_ATTN_SM90_BWD_STAGES=3 $0 deterministic sm90 && SLUICE_ATTN_SM90_DQ=fused $0 deterministic sm90 && SLUICE_EMU_RACECHECK=0 $0 atomic sm90"
                 $<TARGET_FILE:test_attention_tc>)
set_tests_properties(test_attention_sm90_order PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                     LABELS "attention;cuda"
                     ENVIRONMENT "OMP_NUM_THREADS=2;SLUICE_ATTN_SM90_HSPLIT=1;SLUICE_ATTN_SM90_BWD_ORDER=tiles")
sm90_env_refused(test_attention_sm90_order_bad SLUICE_ATTN_SM90_BWD_ORDER down "heads or tiles")
# The dK/dV step with dV issued as soon as P^T is ready and dS^T computed while it runs
# (SLUICE_ATTN_SM90_BWD_EARLY_DV=1; the same products on the same values): each deterministic
# case's second backward runs with it and must give the default's bits (SLUICE_TEST_SECOND_RUN_ENV),
# D = 128 and 64, race-checked by the emulator (which also poisons the accumulators of a wgmma in
# flight: with dP^T's wait retiring one group too few the bits differed); then again with 3
# stages, where both runs take the 3-stage ring (the 4-stage instance differs from it in the
# ring's length alone, which test_attention_sm90_stages covers). Another value stops
# the backward with a message naming the variable, and so do the pairings the early dV is not
# built for: with SLUICE_ATTN_SM90_BWD_PINGPONG=1, with BM 128, with the fused dQ.
add_test(NAME test_attention_sm90_early_dv
         COMMAND bash -c "\"$0\" deterministic sm90 && SLUICE_ATTN_SM90_BWD_STAGES=3 \"$0\" deterministic sm90"
                 $<TARGET_FILE:test_attention_tc>)
set_tests_properties(test_attention_sm90_early_dv PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                     LABELS "attention;cuda"
                     ENVIRONMENT "OMP_NUM_THREADS=2;SLUICE_TEST_SECOND_RUN_ENV=SLUICE_ATTN_SM90_BWD_EARLY_DV=1")
sm90_env_refused(test_attention_sm90_early_dv_bad SLUICE_ATTN_SM90_BWD_EARLY_DV 2 "0 or 1")
foreach(pair "BWD_PINGPONG=1|does not combine with SLUICE_ATTN_SM90_BWD_PINGPONG=1"
             "BWD_BM=128|is built for the dK/dV pass beside the dQ pass with BM 64 only"
             "DQ=fused|is built for the dK/dV pass beside the dQ pass with BM 64 only")
  string(REPLACE "|" ";" pair "${pair}")
  list(GET pair 0 other)
  list(GET pair 1 message)
  string(REGEX REPLACE "=.*" "" name "${other}")
  string(REGEX REPLACE "^BWD_" "" name "${name}")
  string(TOLOWER "${name}" name)
  add_test(NAME test_attention_sm90_early_dv_${name}
           COMMAND bash -c "\"$0\" deterministic sm90; rc=$?; test $rc = 77 && exit 77; echo exit $rc; test $rc != 0"
                   $<TARGET_FILE:test_attention_tc>)
  set_tests_properties(test_attention_sm90_early_dv_${name} PROPERTIES TIMEOUT 300
                       SKIP_RETURN_CODE 77 LABELS "attention;cuda"
                       ENVIRONMENT "OMP_NUM_THREADS=2;SLUICE_ATTN_SM90_BWD_EARLY_DV=1;SLUICE_ATTN_SM90_${other}"
                       PASS_REGULAR_EXPRESSION "SLUICE_ATTN_SM90_BWD_EARLY_DV=1 ${message}.*exit [1-9]")
endforeach()
# bench/attn_bench --check at small shapes (tests/test_attn_bench.sh): cpu against the bench's
# double loops; cuda (label cuda: the emulated build in CI, or a GPU; skipped without one)
# against the CPU backend in bf16 and f32; --corrupt must fail the check, bad flags exit 2.
foreach(mode cpu cuda)
  add_test(NAME test_attn_bench_${mode}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_attn_bench.sh $<TARGET_FILE:attn_bench>
                   ${mode})
  set_tests_properties(test_attn_bench_${mode} PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                       ENVIRONMENT "OMP_NUM_THREADS=2")
endforeach()
set_tests_properties(test_attn_bench_cpu PROPERTIES LABELS "attention")
set_tests_properties(test_attn_bench_cuda PROPERTIES LABELS "attention;cuda")
# Which attention kernel runs (attention/attn_kernels.h): auto and sluice take sm90 (a Hopper
# GPU) or mma (elsewhere, the emulated build included) for bf16 at D 64/128 and simt otherwise,
# kernels by name (sm90 too where it runs, the emulated build included), refusals (unknown
# names, cudnn in the emulated build or on a deterministic backend, anything but auto/sluice on
# the cpu backend) that keep the previous choice. Label cuda: the emulated build in CI, or a GPU (where cudnn runs if it loads).
sluice_test(test_attention_kernels SOURCES test_attention_kernels.c LABELS attention cuda)
# The cudnn kernel (cuDNN's SDPA plus sluice's gate) against the CPU, forward and backward: GQA
# 1/2/8, D 64/128, every gate mode; and the model trained with it against sluice's kernels. Label
# gpu: a GPU with libcudnn 9 runs them; skipped (77) elsewhere, the emulated build included.
sluice_test(test_attention_cudnn SOURCES test_attention_cudnn.c LABELS attention gpu)
add_test(NAME test_attention_cudnn_train
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_attention_cudnn_train.sh
                 $<TARGET_FILE:sluice> ${CMAKE_CURRENT_BINARY_DIR}/attention_cudnn_train)
set_tests_properties(test_attention_cudnn_train PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77
                     LABELS "attention;gpu" ENVIRONMENT "OMP_NUM_THREADS=2")
# The same with emu's cuDNN test double (emu/cudnn/cudnn_emu.c, built where cudnn_graph.h is),
# which interprets the cuDNN graph on the CPU: CI runs the whole cudnn path but for what only a
# real cuDNN can say (that its fused engine takes the graph). Label cuda: the emulated build.
if(TARGET sluice_cudnn_emu)
  add_test(NAME test_attention_cudnn_emu
           COMMAND test_attention_cudnn $<TARGET_FILE:sluice_cudnn_emu>)
  add_test(NAME test_attention_kernels_cudnn_emu
           COMMAND test_attention_kernels $<TARGET_FILE:sluice_cudnn_emu>)
  add_test(NAME test_attention_cudnn_train_emu
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_attention_cudnn_train.sh
                   $<TARGET_FILE:sluice> ${CMAKE_CURRENT_BINARY_DIR}/attention_cudnn_train_emu
                   $<TARGET_FILE:sluice_cudnn_emu> elementwise)
  set_tests_properties(test_attention_cudnn_emu test_attention_kernels_cudnn_emu
                       test_attention_cudnn_train_emu PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77
                       LABELS "attention;cuda" ENVIRONMENT "OMP_NUM_THREADS=2")
  # The training runs without backend.deterministic (cuDNN's backward needs it), so the
  # embedding's and the scatters' fp32 atomics run: their sums depend on the order by design,
  # and the emulator's race check (which compares thread orders) would stop at the first
  # rounding that differs (it did, 2026-11-27, after the residual adds' rounding changed the
  # gradients' values). The deterministic kernels are race-checked by the other tests.
  set_tests_properties(test_attention_cudnn_train_emu PROPERTIES
                       ENVIRONMENT "OMP_NUM_THREADS=2;SLUICE_EMU_RACECHECK=0")
endif()
# bench/l2_reuse_model.py's counts at a small shape: the dK/dV pass's Q and dO reads
# under an LRU L2 per step order (tests/test_l2_reuse_model.sh).
add_test(NAME test_l2_reuse_model
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_l2_reuse_model.sh ${CMAKE_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/l2_reuse_model)
set_tests_properties(test_l2_reuse_model PROPERTIES TIMEOUT 60 LABELS "attention;bench")
