# moe/: router, permutation, grouped GEMM, SwiGLU, and the composed MoE block.
sluice_test(test_moe_gemm SOURCES test_moe_gemm.c LABELS moe)
sluice_test(test_moe_router SOURCES test_moe_router.c LABELS moe)
sluice_test(test_moe_permute SOURCES test_moe_permute.c LABELS moe)
sluice_test(test_moe_ops_chain SOURCES test_moe_ops_chain.c LABELS moe)
sluice_test(test_moe_block SOURCES test_moe_block.c LABELS moe)
