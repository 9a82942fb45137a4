"""Mean cross-entropy of exported weights, computed by the independent PyTorch model of the
cross-check (tests/torch_reference.py, written from the reference card, not from sluice).

Usage: /usr/bin/python3 torch_eval_export.py RUN_CONFIG WEIGHTS_DIR TEXT SEQ
  RUN_CONFIG   the run configuration the model was trained with (its model section)
  WEIGHTS_DIR  a Hugging Face weights directory with one model.safetensors (`sluice ckpt export`)
  TEXT         a UTF-8 text file: byte tokens plus one end-of-document token (256), cut into
               windows of SEQ + 1 tokens that overlap by one, as `sluice eval --batch 1` does
Prints "loss <mean nats per token>" over every full window, with 4 decimals (as sluice eval).
"""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_reference as ref  # noqa: E402


def main(cfg_path, weights, text, seq):
    cfg, train, par = ref.load_input(cfg_path)
    par = dict(par, capacity_factor=0)  # evaluation routes dropless, without the selection bias
    p = ref.load_safetensors(os.path.join(weights, "model.safetensors"))
    toks = list(open(text, "rb").read()) + [256]
    R = ref.Routing(cfg, dict(train, global_batch_lbl=False), par, None)
    total, count, pos = 0.0, 0, 0
    with torch.no_grad():
        while pos + seq + 1 <= len(toks):
            w = torch.tensor(toks[pos:pos + seq + 1]).view(1, seq + 1)
            logits, _, _ = ref.forward(cfg, p, w[:, :-1], R)
            loss = torch.nn.functional.cross_entropy(logits.reshape(seq, -1), w[0, 1:], reduction="sum")
            total += loss.item()
            count += seq
            pos += seq
    print(f"loss {total / count:.4f} over {count} tokens (perplexity {math.exp(total / count):.3f})")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
