"""CPU speed of SmolLM2-135M-Instruct at BF16, HQQ 8-bit and HQQ 4-bit (HQQ's PyTorch path).

Runs plain transformers ``generate`` / forward: decode tokens/s at batch 1 and 4 (time for N new
tokens minus time for 1, divided by N - 1) and prefill tokens/s on a 256-token prompt, best of
``--repeats``. The quantized layers dequantize their weights on every call on CPU, so this
measures that cost; the fused GPU kernels are measured by ``quant_gpu.py``.
Usage: ``python benchmarks/quant_speed_cpu.py [--threads 2] [--new-tokens 32] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.quant_common import Timer, load_smollm2, machine, real_texts  # noqa: E402
from mediaindex.serving.quant import QuantConfig, quantize_model  # noqa: E402


@torch.no_grad()
def _generate_seconds(model: nn.Module, ids: torch.Tensor, new_tokens: int) -> float:
    with Timer() as t:
        model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=0,
        )
    return t.seconds


@torch.no_grad()
def _forward_seconds(model: nn.Module, ids: torch.Tensor) -> float:
    with Timer() as t:
        model(input_ids=ids)
    return t.seconds


def bench(
    model: nn.Module, prompt: torch.Tensor, long_prompt: torch.Tensor, new_tokens: int, repeats: int
) -> dict[str, float]:
    row: dict[str, float] = {}
    _generate_seconds(model, prompt, 2)  # warm-up
    for batch in (1, 4):
        ids = prompt.repeat(batch, 1)
        one = min(_generate_seconds(model, ids, 1) for _ in range(repeats))
        full = min(_generate_seconds(model, ids, new_tokens) for _ in range(repeats))
        row[f"decode_tok_s_batch{batch}"] = round(batch * (new_tokens - 1) / max(full - one, 1e-9), 2)
    prefill = min(_forward_seconds(model, long_prompt) for _ in range(repeats))
    row["prefill_tok_s"] = round(long_prompt.numel() / prefill, 1)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    bf16, tokenizer = load_smollm2(torch.bfloat16)
    text = " ".join(real_texts().values())
    all_ids = tokenizer(text, return_tensors="pt").input_ids
    prompt, long_prompt = all_ids[:, :32], all_ids[:, :256]
    results = {"bf16": bench(bf16, prompt, long_prompt, args.new_tokens, args.repeats)}
    for bits in (8, 4):
        # Speed does not depend on HQQ's solver; plain rounding quantizes faster.
        model = quantize_model(copy.deepcopy(bf16), QuantConfig(bits=bits, optimize=False))
        results[f"int{bits}"] = bench(model, prompt, long_prompt, args.new_tokens, args.repeats)
        del model
    report = {
        "machine": machine(),
        "runner": "transformers generate/forward (the serving engine is not part of this measurement)",
        "new_tokens": args.new_tokens,
        "results": results,
    }
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
