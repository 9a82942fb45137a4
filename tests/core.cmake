# core/: tensors, backend dispatch, core CPU kernels.
sluice_test(test_core_ops SOURCES test_core_ops.c LABELS core)
