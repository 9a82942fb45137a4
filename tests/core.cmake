# core/: tensors, backend dispatch, core CPU kernels.
sluice_test(test_core_ops SOURCES test_core_ops.c LABELS core)
sluice_test(test_cuda_backend SOURCES test_cuda_backend.c LABELS "core;gpu")
