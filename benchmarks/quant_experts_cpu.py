"""One MoE experts layer on CPU: transformers' bf16 ``grouped_mm`` against HQQ int8 and int4 experts.

A Qwen3-MoE experts module (``--experts`` experts, top-``--top-k``, hidden ``--hidden``, expert width
``--intermediate``, random weights) runs ``forward(hidden, top_k_index, top_k_weights)`` at 1, 16 and 256 tokens
with random distinct top-k routing. Sides: ``bf16`` is transformers' own experts forward with
``experts_implementation="grouped_mm"`` (``torch.nn.functional.grouped_mm``); ``int8`` / ``int4`` are
:class:`QuantExperts` made from the same weights (bf16 compute, group 64), on their grouped path (the C kernel);
``--reference`` adds the loop over experts that dequantizes each one (HQQ's PyTorch path, the old forward);
``--int8pack`` adds torch's own int8 weight-only CPU kernel (``torch._weight_int8pack_mm``, per-channel int8,
bf16 activations): it takes one matrix per call, so it runs in a loop over the experts that have tokens. It is
there to show why the layer does not use it (see benchmarks/README.md).
Every round times every side once per token count, in an order that rotates from round to round, and the
reported time is the median over rounds, so load from other processes hits all sides alike. Two clocks: wall time,
and the calling thread's CPU time (``time.thread_time``), which leaves out the time the thread waited for a core
on a loaded machine; with ``--threads 1`` all the work runs in that thread, so CPU time is the cost of the layer
itself. The load average is printed before and after.
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
    return layer.to(args.dtype).eval()


def routing(tokens: int, experts: int, top_k: int, hidden: int, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(tokens)
    x = torch.randn(tokens, hidden, generator=gen).to(dtype)
    index = torch.stack([torch.randperm(experts, generator=gen)[:top_k] for _ in range(tokens)])
    weights = torch.softmax(torch.randn(tokens, top_k, generator=gen), dim=-1).to(dtype)
    return x, index, weights


class Int8PackLoop:
    """The experts layer on ``torch._weight_int8pack_mm``: per-output-channel symmetric int8 codes of the same
    weights, one call per projection per active expert (the kernel is not grouped)."""

    def __init__(self, layer: Qwen3MoeExperts) -> None:
        self.act_fn = layer.act_fn
        self.weights = [self._pack(w) for w in (layer.gate_up_proj.detach(), layer.down_proj.detach())]

    @staticmethod
    def _pack(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scale = (w.float().abs().amax(dim=-1) / 127.0).clamp(min=1e-12)
        codes = torch.round(w.float() / scale[..., None]).clamp(-127, 127).to(torch.int8)
        return codes, scale.to(torch.bfloat16)

    def __call__(self, hidden: torch.Tensor, index: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        (gu_codes, gu_scale), (d_codes, d_scale) = self.weights
        top_k = index.shape[-1]
        order = torch.argsort(index.reshape(-1), stable=True)
        counts = torch.bincount(index.reshape(-1), minlength=gu_codes.shape[0]).tolist()
        token_of, weight_of = order // top_k, weights.reshape(-1)[order]
        final = torch.zeros_like(hidden)
        start = 0
        for e, count in enumerate(counts):
            if count == 0:
                continue
            rows = token_of[start : start + count]
            gate, up = torch._weight_int8pack_mm(hidden[rows], gu_codes[e], gu_scale[e]).chunk(2, dim=-1)
            y = torch._weight_int8pack_mm(self.act_fn(gate) * up, d_codes[e], d_scale[e])
            final.index_add_(0, rows, y * weight_of[start : start + count, None])
            start += count
        return final


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
    parser.add_argument("--int8pack", action="store_true", help="also time torch's int8 weight-only kernel")
    parser.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16",
                        help="weights and activations of both sides (float32 runs the kernel's fp32 path)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    args.dtype = getattr(torch, args.dtype)
    torch.set_num_threads(args.threads)

    bf16 = experts_layer(args)  # in --dtype
    dense = f"{'bf16' if args.dtype == torch.bfloat16 else 'fp32'} grouped_mm"
    sides: dict[str, Callable[..., torch.Tensor]] = {dense: bf16}
    for bits in (8, 4):
        quant = QuantExperts.from_experts(bf16, QuantConfig(bits=bits, optimize=False)).eval()
        assert quant.grouped_path(torch.device("cpu")) == "cpu", "the C kernel is not in use"
        sides[f"int{bits}"] = quant
        if args.reference:
            sides[f"int{bits} loop (old)"] = quant.forward_reference
    if args.int8pack:
        sides["int8 _weight_int8pack_mm loop"] = Int8PackLoop(bf16)
    inputs = {t: routing(t, args.experts, args.top_k, args.hidden, args.dtype) for t in TOKENS}
    for fn in sides.values():  # warm-up (first call builds / loads the kernel)
        for t in TOKENS:
            fn(*inputs[t])

    load_before = _load()
    times: dict[str, dict[int, list[float]]] = {name: {t: [] for t in TOKENS} for name in sides}
    cpu_times: dict[str, dict[int, list[float]]] = {name: {t: [] for t in TOKENS} for name in sides}
    names = list(sides)
    for r in range(args.rounds):
        for t in TOKENS:
            for name in names[r % len(names) :] + names[: r % len(names)]:
                start, cpu_start = time.perf_counter(), time.thread_time()
                sides[name](*inputs[t])
                cpu_times[name][t].append(time.thread_time() - cpu_start)
                times[name][t].append(time.perf_counter() - start)
    load_after = _load()

    def medians(table: dict[str, dict[int, list[float]]]) -> dict[str, dict[int, float]]:
        return {name: {t: round(1e3 * statistics.median(v), 3) for t, v in per.items()} for name, per in table.items()}

    ms, cpu_ms = medians(times), medians(cpu_times)

    def ratios(table: dict[str, dict[int, float]]) -> dict[str, dict[int, float]]:
        base = table[dense]
        return {n: {t: round(v[t] / base[t], 2) for t in TOKENS} for n, v in table.items()}

    report = {
        "machine": machine(),
        "dtype": str(args.dtype),
        "shape": f"{args.experts} experts, top-{args.top_k}, hidden {args.hidden}, intermediate {args.intermediate}",
        "rounds": args.rounds,
        "load_average_before": load_before,
        "load_average_after": load_after,
        "median_cpu_ms": cpu_ms,
        "cpu_ratio_to_bf16": ratios(cpu_ms),
        "median_wall_ms": ms,
        "wall_ratio_to_bf16": ratios(ms),
    }
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
