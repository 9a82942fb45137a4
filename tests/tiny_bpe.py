"""tests/tiny_bpe.py - the tests' tiny byte-level BPE tokenizer as a Hugging Face tokenizer.json:
byte b has id b (in GPT-2's byte-to-character map), the given merges take ids 256 on, and
<|endoftext|> is an added special token (id 300 unless told). NFC normalizer, ByteLevel
pre-tokenizer with GPT-2's regex, post-processor and decoder. Used by tests/test_tokenizer_cli.sh
and tests/test_weights_cli.sh:

    sys.path.insert(0, TESTS_DIR); import tiny_bpe
    tiny_bpe.write("tok", [("t", "h"), ("th", "e"), (" ", "the")], config=True)
"""
import json
import os


def byte_char(b):
    """GPT-2's printable character for byte b."""
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    extra = [x for x in range(256) if x not in keep]
    return chr(b) if b in keep else chr(256 + extra.index(b))


def byte_level(s):
    """The byte-level form of text s."""
    return "".join(byte_char(b) for b in s.encode())


def tokenizer_json(merges, eot_id=300):
    """The tokenizer.json object for merges [(a, b), ...] (texts, in merge order)."""
    vocab = {byte_char(b): b for b in range(256)}
    for i, (a, b) in enumerate(merges):
        vocab[byte_level(a + b)] = 256 + i
    level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    return {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [{"id": eot_id, "content": "<|endoftext|>", "single_word": False,
                              "lstrip": False, "rstrip": False, "normalized": False, "special": True}],
            "normalizer": {"type": "NFC"},
            "pre_tokenizer": dict(level, trim_offsets=True, use_regex=True),
            "post_processor": level, "decoder": level,
            "model": {"type": "BPE", "dropout": None, "unk_token": None,
                      "continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": False,
                      "byte_fallback": False, "vocab": vocab,
                      "merges": [[byte_level(a), byte_level(b)] for a, b in merges]}}


def write(directory, merges, eot_id=300, config=False):
    """DIRECTORY/tokenizer.json (and with config a tokenizer_config.json naming the end-of-text
    token); returns the tokenizer.json object."""
    tj = tokenizer_json(merges, eot_id)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "tokenizer.json"), "w") as f:
        json.dump(tj, f, ensure_ascii=False)
    if config:
        with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
            json.dump({"eos_token": "<|endoftext|>", "tokenizer_class": "PreTrainedTokenizerFast"}, f)
    return tj
