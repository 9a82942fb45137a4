#!/usr/bin/env python3
"""bench/tokenizer_bench_hf.py TOKENIZER_JSON TEXT [line|file] [IDS]

The Rust `tokenizers` library (its Python bindings, what transformers uses) on the same
documents as bench/tokenizer_bench.c: each non-empty line of TEXT (`line`, the default) or the
whole file (`file`). Prints its MB/s on one thread (encode, one document after the other; the
second of two passes) and on all threads (encode_batch, which runs on rayon's pool), like
tokenizer_bench's lines. With IDS (tokenizer_bench --ids-out's file) it also checks that the
ids are the same. bench/tokenizer_bench.sh runs it where `import tokenizers` works (a GPU
node's Python has it; this repository's CI machine does not).
"""
import os
import sys
import time

from tokenizers import Tokenizer


def main():
    path, text_path = sys.argv[1], sys.argv[2]
    mode = sys.argv[3] if len(sys.argv) > 3 else "line"
    ids_path = sys.argv[4] if len(sys.argv) > 4 else None
    tok = Tokenizer.from_file(path)
    text = open(text_path, encoding="utf-8", newline="").read()
    docs = [text] if mode == "file" else [d for d in text.split("\n") if d]
    nbytes = sum(len(d.encode("utf-8")) for d in docs)
    rates = []
    for _ in range(2):
        t0 = time.perf_counter()
        ids = [tok.encode(d).ids for d in docs]
        rates.append(nbytes / (time.perf_counter() - t0) / 1e6)
    t0 = time.perf_counter()
    batch = [e.ids for e in tok.encode_batch(docs)]
    brate = nbytes / (time.perf_counter() - t0) / 1e6
    ntok = sum(len(i) for i in ids)
    print(f"rust    1 thread : cold {rates[0]:7.2f} MB/s, warm {rates[1]:7.2f} MB/s, "
          f"{ntok} tokens")
    print(f"rust {os.cpu_count():2d} threads: encode_batch {brate:7.2f} MB/s")
    if batch != ids:
        print("rust: encode_batch gave other ids than encode")
        return 1
    if ids_path:
        with open(ids_path) as f:
            theirs = [[int(x) for x in line.split()] for line in f]
        same = theirs == ids
        print(f"ids: {'identical to' if same else 'DIFFERENT from'} sluice's")
        return 0 if same else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
