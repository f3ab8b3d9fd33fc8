"""GPU benchmark: decode tokens/s at 1, 8, 32 and 64 concurrent requests with BF16 vs FP8 KV pages on a
long-context workload, and the largest concurrency reached before the first preemption for one KV budget.
Exits cleanly (status 0, a message) when no CUDA device is present.

    python benchmarks/serving_gpu.py [--model DIR_OR_ID] [--context 2048] [--new-tokens 128]
                                     [--kv-budget-gib 2] [--json out.json]

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
from mediaindex.serving.model_runner import load_pretrained, load_smollm2  # noqa: E402


def long_prompts(tok, n: int, context: int) -> list[list[int]]:
    """n distinct prompts of `context` tokens made of real transcript text (repeated to length)."""
    out = []
    for i, messages in enumerate(real_prompts(n)):
        ids = tok(messages[0]["content"], add_special_tokens=False)["input_ids"]
        reps = ids * (context // max(1, len(ids)) + 1)
        out.append([i % 100 + 1] + reps[: context - 1])  # a distinct first token defeats prefix sharing
    return out


def run_level(model, tok, kind: str, prompts: list[list[int]], new: int, budget: int) -> dict:
    cfg = EngineConfig(
        device="cuda", kv_cache_dtype=kind, kv_cache_memory_bytes=budget, page_size=16,
        max_num_seqs=len(prompts), max_num_batched_tokens=8192,
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model")
    ap.add_argument("--context", type=int, default=2048)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--kv-budget-gib", type=float, default=2.0)
    ap.add_argument("--levels", default="1,8,32,64")
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
    rows = []
    for level in (int(x) for x in args.levels.split(",")):
        prompts = long_prompts(tok, level, args.context)
        for kind in ("bf16", "fp8_e4m3"):
            row = run_level(model, tok, kind, prompts, args.new_tokens, budget)
            rows.append(row)
            print(f"{kind:9} concurrency {level:3d}: decode {row['decode_tok_per_s']:9.1f} tok/s, total "
                  f"{row['total_tok_per_s']:9.1f} tok/s, preemptions {row['preemptions']}, max running before "
                  f"preemption {row['max_running_before_preemption']}")
    if args.json:
        args.json.write_text(json.dumps({"machine": machine(), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
