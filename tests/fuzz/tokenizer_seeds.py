"""tests/fuzz/tokenizer_seeds.py OUT_DIR - the seed corpus of tests/fuzz/fuzz_tokenizer.c.

Variations of the tests' tiny byte-level BPE (tests/tiny_bpe.py) on each pipeline shape the
loader accepts: GPT-2's (ByteLevel with its regex, NFC), Llama 3's (one Split with its pattern,
ignore_merges, TemplateProcessing), Qwen2's (NFC, Split, added tokens with lstrip / rstrip /
normalized), DeepSeek V3's (a Sequence of three Splits), and a String Split with a prefix space
and "a b" merges. Each seed is the tokenizer.json, a NUL byte, and a text to encode. The
regex-* seeds are byte 0x01, a pattern, a NUL byte and a text (the harness's regex mode).
"""
import copy
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import tiny_bpe  # noqa: E402

MERGES = [("t", "h"), ("th", "e"), (" ", "the"), ("i", "n"), ("a", "n"), ("e", "r"),
          (" ", "t"), ("o", "n"), ("1", "2"), ("12", "3"), (" ", "a"), ("in", "g"),
          ("'", "s"), ("\n", "\n"), (" ", " ")]
TEXT = ("The thing's 123 answer, then 4567 in English: caf\u00e9 cafe\u0301 \u4f60\u597d "
        "\U0001f600 <|endoftext|>  <|im_start|>user\n\n  ther\tTHE'LL\r\n")

LLAMA3 = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}"
          "\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
QWEN2 = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
         "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
DEEPSEEK = ["\\p{N}{1,3}", "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
            "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?"
            "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"]


def level(**kw):
    d = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
         "use_regex": False}
    d.update(kw)
    return d


def split(pattern, kind="Regex"):
    return {"type": "Split", "pattern": {kind: pattern}, "behavior": "Isolated",
            "invert": False}


def added(i, content, special=True, normalized=False, lstrip=False, rstrip=False):
    return {"id": i, "content": content, "single_word": False, "lstrip": lstrip,
            "rstrip": rstrip, "normalized": normalized, "special": special}


def template(name, i, after=None, j=None):
    """A single-sequence template: special token `name` (id i), the text, then `after` (id j)."""
    single = [{"SpecialToken": {"id": name, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]
    special = {name: {"id": name, "ids": [i], "tokens": [name]}}
    if after:
        single.append({"SpecialToken": {"id": after, "type_id": 0}})
        special[after] = {"id": after, "ids": [j], "tokens": [after]}
    return {"type": "TemplateProcessing", "single": single, "pair": [], "special_tokens": special}


def seeds():
    base = tiny_bpe.tokenizer_json(MERGES)
    yield "gpt2", base

    t = copy.deepcopy(base)
    t["normalizer"] = None
    t["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [split(LLAMA3), level()]}
    t["model"]["ignore_merges"] = True
    t["added_tokens"] = [added(300, "<|begin_of_text|>"), added(301, "<|end_of_text|>")]
    t["post_processor"] = {"type": "Sequence",
                           "processors": [level(), template("<|begin_of_text|>", 300,
                                                            "<|end_of_text|>", 301)]}
    yield "llama3", t

    t = copy.deepcopy(base)
    t["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [split(QWEN2), level()]}
    t["added_tokens"] = [added(300, "<|endoftext|>"), added(301, "<|im_start|>"),
                         added(302, "<|im_end|>", lstrip=True, rstrip=True),
                         added(303, "<think>", special=False, normalized=True),
                         added(304, "caf\u00e9", special=False, normalized=True)]
    yield "qwen2", t

    t = copy.deepcopy(base)
    t["normalizer"] = {"type": "Sequence", "normalizers": []}
    t["pre_tokenizer"] = {"type": "Sequence",
                          "pretokenizers": [split(p) for p in DEEPSEEK] + [level()]}
    t["added_tokens"] = [added(300, "<\uff5cend\u2581of\u2581sentence\uff5c>")]
    yield "deepseek", t

    t = copy.deepcopy(base)
    t["normalizer"] = None
    t["pre_tokenizer"] = {"type": "Sequence",
                          "pretokenizers": [split(" the", "String"), split("\\s+"),
                                            level(add_prefix_space=True, use_regex=True)]}
    t["model"]["merges"] = [" ".join(m) for m in t["model"]["merges"]]
    t["added_tokens"].append(added(301, "\u0120x", special=False))
    yield "string", t


GPT2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
# the constructs the translation handles specially (io/tokenizer_regex.c's table)
OTHER = "(?>\\w+|\\W)|\\h{2,}|\\d{,3}x|[\\x{4E00}-\\x{9FFF}\\u3040-\\u30ff]+?|(?<=a)b|(?i:abc)|\\v|.\\."


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, t in seeds():
        with open(os.path.join(out, name), "wb") as f:
            f.write(json.dumps(t, ensure_ascii=False).encode())
            f.write(b"\0")
            f.write(TEXT.encode())
    # byte 0x01: a pre-tokenizer pattern alone, then a text
    for i, p in enumerate([LLAMA3, QWEN2, GPT2, OTHER] + DEEPSEEK):
        with open(os.path.join(out, "regex-%d" % i), "wb") as f:
            f.write(b"\1" + p.encode() + b"\0" + TEXT.encode())


if __name__ == "__main__":
    main()
