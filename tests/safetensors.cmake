# io/safetensors_*.c: the safetensors reader and writer (uses /usr/bin/python3 + numpy for
# the interop checks when available; their absence fails under CI=true).
sluice_test(test_safetensors SOURCES test_safetensors.c test_safetensors_corrupt.c LABELS trainer io)
