"""Per-token logits of a Qwen3-Next export run by Hugging Face transformers' own
Qwen3NextForCausalLM, compared with the logits `sluice eval --dump-logits` wrote.

Usage: PYTHON hf_qwen3_next.py EXPORT_DIR LOGITS.safetensors   (PYTHON: one with transformers
>= 4.57, where Qwen3-Next arrived, and PyTorch; tests/test_qwen3_next_export.sh hf finds it)
Exit 0 when max |sluice - transformers| <= 1e-4 * max |transformers| + 1e-5 (both float32), 1
otherwise. The model runs with eager attention in float32 on the CPU.
"""
import sys

import torch
from transformers import Qwen3NextForCausalLM

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from torch_reference import load_safetensors  # noqa: E402  (the logits file reader)


def main(export_dir, logits_path):
    model = Qwen3NextForCausalLM.from_pretrained(export_dir, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    dump = load_safetensors(logits_path)
    ids, want = dump["tokens"], dump["logits"].float()
    with torch.no_grad():
        got = model(input_ids=ids[None, :].long(), use_cache=False).logits[0].float()
    err = (got - want).abs().max().item()
    scale = got.abs().max().item()
    tol = 1e-4 * scale + 1e-5
    print(f"  transformers {export_dir}: {ids.shape[0]} tokens, max |sluice - transformers| {err:.3g} "
          f"(largest logit {scale:.3g}, tolerance {tol:.3g})")
    return 0 if err <= tol else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
