"""One MoE experts layer on CPU: transformers' bf16 ``grouped_mm`` against HQQ int8 and int4 experts.

A Qwen3-MoE experts module (``--experts`` experts, top-``--top-k``, hidden ``--hidden``, expert width
``--intermediate``, random weights) runs ``forward(hidden, top_k_index, top_k_weights)`` at 1, 16 and 256 tokens
with random distinct top-k routing. Sides: ``bf16`` is transformers' own experts forward with
``experts_implementation="grouped_mm"`` (``torch.nn.functional.grouped_mm``); ``int8`` / ``int4`` are
:class:`QuantExperts` made from the same weights (bf16 compute, group 64), on their grouped path (the C kernel);
``--reference`` adds the loop over experts that dequantizes each one (HQQ's PyTorch path, the old forward).
Every round times every side once per token count, in an order that rotates from round to round, and the
reported time is the median over rounds, so load from other processes hits all sides alike. The load average is
printed before and after.
Usage: ``python benchmarks/quant_experts_cpu.py [--threads 1] [--rounds 15] [--reference] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import Qwen3MoeConfig
from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeExperts

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.quant_common import machine  # noqa: E402
from mediaindex.serving.quant import QuantConfig, QuantExperts  # noqa: E402

TOKENS = (1, 16, 256)


def experts_layer(args: argparse.Namespace) -> Qwen3MoeExperts:
    config = Qwen3MoeConfig(
        hidden_size=args.hidden,
        moe_intermediate_size=args.intermediate,
        num_experts=args.experts,
        num_experts_per_tok=args.top_k,
        experts_implementation="grouped_mm",
    )
    layer = Qwen3MoeExperts(config)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        layer.gate_up_proj.normal_(0, 0.02, generator=gen)
        layer.down_proj.normal_(0, 0.02, generator=gen)
    return layer.to(torch.bfloat16).eval()


def routing(tokens: int, experts: int, top_k: int, hidden: int) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(tokens)
    x = torch.randn(tokens, hidden, generator=gen).to(torch.bfloat16)
    index = torch.stack([torch.randperm(experts, generator=gen)[:top_k] for _ in range(tokens)])
    weights = torch.softmax(torch.randn(tokens, top_k, generator=gen), dim=-1).to(torch.bfloat16)
    return x, index, weights


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


@torch.inference_mode()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--experts", type=int, default=64)
    parser.add_argument("--top-k", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--intermediate", type=int, default=512)
    parser.add_argument("--reference", action="store_true", help="also time the old loop over experts")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    bf16 = experts_layer(args)
    sides: dict[str, Callable[..., torch.Tensor]] = {"bf16 grouped_mm": bf16}
    for bits in (8, 4):
        quant = QuantExperts.from_experts(bf16, QuantConfig(bits=bits, optimize=False)).eval()
        assert quant.grouped_path(torch.device("cpu")) == "cpu", "the C kernel is not in use"
        sides[f"int{bits}"] = quant
        if args.reference:
            sides[f"int{bits} loop (old)"] = quant.forward_reference
    inputs = {t: routing(t, args.experts, args.top_k, args.hidden) for t in TOKENS}
    for fn in sides.values():  # warm-up (first call builds / loads the kernel)
        for t in TOKENS:
            fn(*inputs[t])

    load_before = _load()
    times: dict[str, dict[int, list[float]]] = {name: {t: [] for t in TOKENS} for name in sides}
    names = list(sides)
    for r in range(args.rounds):
        for t in TOKENS:
            for name in names[r % len(names) :] + names[: r % len(names)]:
                start = time.perf_counter()
                sides[name](*inputs[t])
                times[name][t].append(time.perf_counter() - start)
    load_after = _load()

    ms = {name: {t: round(1e3 * statistics.median(v), 3) for t, v in per.items()} for name, per in times.items()}
    base = ms["bf16 grouped_mm"]
    report = {
        "machine": machine(),
        "shape": f"{args.experts} experts, top-{args.top_k}, hidden {args.hidden}, intermediate {args.intermediate}",
        "rounds": args.rounds,
        "load_average_before": load_before,
        "load_average_after": load_after,
        "median_ms": ms,
        "ratio_to_bf16": {n: {t: round(v[t] / base[t], 2) for t in TOKENS} for n, v in ms.items()},
    }
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
