# io/safetensors.c: the safetensors reader and writer (uses /usr/bin/python3 + numpy for
# the interop checks when available).
sluice_test(test_safetensors SOURCES test_safetensors.c LABELS trainer io)
