"""GPU benchmark: decode tokens/s at 1, 8, 32 and 64 concurrent requests with BF16 vs FP8 KV pages on a
long-context workload, for each decode-attention backend (the Triton paged kernel vs the PyTorch reference path
of gather + dequantise + SDPA), and the largest concurrency reached before the first preemption for one KV budget.
A second table times the decode attention call alone (one layer, synthetic pages of the model's shape), and the
MLA decode attention over latent pages at DeepSeek-V3's sizes (128 heads, latent 512, rope key 64).
Exits cleanly (status 0, a message) when no CUDA device is present.

    python benchmarks/serving_gpu.py [--model DIR_OR_ID] [--context 2048] [--new-tokens 128]
                                     [--kv-budget-gib 2] [--backends triton,torch] [--json out.json]

Without --model it uses SmolLM2-135M-Instruct from the bundled GGUF, in bf16.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from serving_common import machine, real_prompts  # noqa: E402

from mediaindex.serving import EngineConfig, LLMEngine, SamplingParams  # noqa: E402
from mediaindex.serving.attention_backend import (  # noqa: E402
    select_decode_attention,
    select_latent_decode_attention,
)
from mediaindex.serving.kv_cache import KVLayout, PagedKVCache  # noqa: E402
from mediaindex.serving.model_runner import load_pretrained, load_smollm2  # noqa: E402


def long_prompts(tok, n: int, context: int) -> list[list[int]]:
    """n distinct prompts of `context` tokens made of real transcript text (repeated to length)."""
    out = []
    for i, messages in enumerate(real_prompts(n)):
        ids = tok(messages[0]["content"], add_special_tokens=False)["input_ids"]
        reps = ids * (context // max(1, len(ids)) + 1)
        out.append([i % 100 + 1] + reps[: context - 1])  # a distinct first token defeats prefix sharing
    return out


def run_level(model, tok, kind: str, backend: str, prompts: list[list[int]], new: int, budget: int) -> dict:
    cfg = EngineConfig(
        device="cuda", kv_cache_dtype=kind, kv_cache_memory_bytes=budget, page_size=16,
        max_num_seqs=len(prompts), max_num_batched_tokens=8192, attention_backend=backend,
    )
    engine = LLMEngine(model, tok, cfg)
    params = SamplingParams(max_tokens=new, ignore_eos=True)
    for p in prompts:
        engine.add_request(p, params)
    max_running_before_preemption = 0
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    while engine.has_unfinished():
        engine.step()
        m = engine.metrics()
        if m.num_preemptions == 0:
            max_running_before_preemption = max(max_running_before_preemption, m.num_running)
    torch.cuda.synchronize()
    m = engine.metrics()
    result = {
        "kv": kind,
        "backend": engine.runner.attention_backend,
        "concurrency": len(prompts),
        "decode_tok_per_s": m.decode_tokens_per_s,
        "total_tok_per_s": len(prompts) * new / (time.perf_counter() - t0),
        "preemptions": m.num_preemptions,
        "max_running_before_preemption": max_running_before_preemption,
        "pages": m.pages_total,
    }
    del engine
    torch.cuda.empty_cache()
    return result


def time_attention(layout: KVLayout, n_heads: int, kind: str, backend: str, batch: int, context: int) -> float:
    """Microseconds per decode attention call of one layer: `batch` requests of `context` cached tokens each,
    pages scattered over the pool, bf16 queries."""
    page_size = 16
    per_req = -(-context // page_size)
    cache = PagedKVCache(layout, batch * per_req + 1, page_size, kind, "cuda")
    g = torch.Generator(device="cuda").manual_seed(0)
    tables = (torch.randperm(batch * per_req, generator=g, device="cuda") + 1).view(batch, per_req)
    slots = (tables[:, :, None] * page_size + torch.arange(page_size, device="cuda")).flatten()
    n = slots.numel()
    cache.write(0, slots, torch.randn(n, layout.num_kv_heads, layout.k_head_dim, device="cuda"),
                torch.randn(n, layout.num_kv_heads, layout.v_head_dim, device="cuda"))
    lens = torch.full((batch,), context, dtype=torch.int64, device="cuda")
    q = torch.randn(batch, n_heads, layout.k_head_dim, dtype=torch.bfloat16, device="cuda")
    k = torch.randn(batch, layout.num_kv_heads, layout.k_head_dim, dtype=torch.bfloat16, device="cuda")
    v = torch.randn(batch, layout.num_kv_heads, layout.v_head_dim, dtype=torch.bfloat16, device="cuda")
    _, fn = select_decode_attention(backend, cache)  # type: ignore[arg-type]
    for _ in range(3):  # compile (Triton) and warm the allocator
        fn(cache, 0, q, k, v, tables, lens, None)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    reps = 20
    start.record()
    for _ in range(reps):
        fn(cache, 0, q, k, v, tables, lens, None)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000 / reps


def time_latent_attention(kind: str, backend: str, batch: int, context: int, n_heads: int = 128, rank: int = 512,
                          rope: int = 64) -> float:
    """Microseconds per MLA decode attention call of one layer over latent pages (DeepSeek-V3 sizes by default):
    `batch` requests of `context` cached tokens each, pages scattered over the pool, bf16 queries."""
    page_size = 16
    per_req = -(-context // page_size)
    cache = PagedKVCache(KVLayout(1, 1, rank, rope, latent=True), batch * per_req + 1, page_size, kind, "cuda")
    g = torch.Generator(device="cuda").manual_seed(0)
    tables = (torch.randperm(batch * per_req, generator=g, device="cuda") + 1).view(batch, per_req)
    slots = (tables[:, :, None] * page_size + torch.arange(page_size, device="cuda")).flatten()
    n = slots.numel()
    cache.write(0, slots, torch.randn(n, 1, rank, device="cuda"), torch.randn(n, 1, rope, device="cuda"))
    lens = torch.full((batch,), context, dtype=torch.int64, device="cuda")
    q_latent = torch.randn(batch, n_heads, rank, dtype=torch.bfloat16, device="cuda")
    q_rope = torch.randn(batch, n_heads, rope, dtype=torch.bfloat16, device="cuda")
    latent = torch.randn(batch, rank, dtype=torch.bfloat16, device="cuda")
    rope_key = torch.randn(batch, rope, dtype=torch.bfloat16, device="cuda")
    _, fn = select_latent_decode_attention(backend, cache)  # type: ignore[arg-type]
    scale = (128 + rope) ** -0.5
    for _ in range(3):
        fn(cache, 0, q_latent, q_rope, latent, rope_key, tables, lens, scale)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    reps = 20
    start.record()
    for _ in range(reps):
        fn(cache, 0, q_latent, q_rope, latent, rope_key, tables, lens, scale)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000 / reps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model")
    ap.add_argument("--context", type=int, default=2048)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--kv-budget-gib", type=float, default=2.0)
    ap.add_argument("--levels", default="1,8,32,64")
    ap.add_argument("--backends", default="triton,torch", help="decode attention backends to compare")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("CUDA is not available: GPU serving benchmark skipped.")
        return
    if args.model:
        model, tok = load_pretrained(args.model, dtype=torch.bfloat16)
    else:
        model, tok = load_smollm2(dtype=torch.bfloat16)
    model = model.to("cuda")
    budget = int(args.kv_budget_gib * 2**30)
    print(f"machine: {machine()}; context {args.context}, {args.new_tokens} new tokens, KV budget {args.kv_budget_gib} GiB")
    backends = args.backends.split(",")
    levels = [int(x) for x in args.levels.split(",")]
    rows = []
    for level in levels:
        prompts = long_prompts(tok, level, args.context)
        for kind in ("bf16", "fp8_e4m3"):
            for backend in backends:
                row = run_level(model, tok, kind, backend, prompts, args.new_tokens, budget)
                rows.append(row)
                print(f"{kind:9} {row['backend']:6} concurrency {level:3d}: decode {row['decode_tok_per_s']:9.1f} "
                      f"tok/s, total {row['total_tok_per_s']:9.1f} tok/s, preemptions {row['preemptions']}, "
                      f"max running before preemption {row['max_running_before_preemption']}")
    full = KVLayout.from_config(model.config)
    layout = KVLayout(1, full.num_kv_heads, full.k_head_dim, full.v_head_dim)  # one layer is enough to time
    text_cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    n_heads = text_cfg.num_attention_heads
    kernel_rows = []
    for level in levels:
        for kind in ("bf16", "fp8_e4m3"):
            for backend in backends:
                if not layout.latent:
                    us = time_attention(layout, n_heads, kind, backend, level, args.context)
                    kernel_rows.append({"kv": kind, "backend": backend, "batch": level, "context": args.context,
                                        "us": us})
                    print(f"attention only, one layer: {kind:9} {backend:6} batch {level:3d} x {args.context} "
                          f"tokens: {us:9.1f} us")
                # MLA at DeepSeek-V3's attention sizes over latent pages, whatever the model served above.
                us = time_latent_attention(kind, backend, level, args.context)
                kernel_rows.append({"kv": kind, "backend": backend, "batch": level, "context": args.context,
                                    "us": us, "attention": "mla_latent_deepseek_v3"})
                print(f"MLA latent attention, one layer (128 heads, 512 + 64): {kind:9} {backend:6} batch "
                      f"{level:3d} x {args.context} tokens: {us:9.1f} us")
    if args.json:
        args.json.write_text(json.dumps({"machine": machine(), "rows": rows, "attention": kernel_rows}, indent=2))


if __name__ == "__main__":
    main()
