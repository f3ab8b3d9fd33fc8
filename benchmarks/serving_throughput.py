"""CPU throughput of the serving engine on SmolLM2-135M-Instruct, against transformers' `generate` run request by
request and transformers' own continuous batching (`generate_batch`), in one run; plus the overhead of the KV
integrity checks (checking vs no-op tracker, same workload, runs interleaved).

    python benchmarks/serving_throughput.py [--requests 16] [--new-tokens 128] [--threads 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from serving_common import machine, percentile, real_prompts  # noqa: E402

from mediaindex.serving import EngineConfig, LLMEngine, SamplingParams  # noqa: E402
from mediaindex.serving.model_runner import load_smollm2  # noqa: E402


def encode(tok, messages) -> list[int]:
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tok(text, add_special_tokens=False)["input_ids"]


def _rates(n: int, wall: float, cpu: float) -> dict:
    # CPU seconds (all threads of this process) are reported beside wall time: on a shared machine the wall clock
    # mostly measures how much CPU the scheduler granted, while tokens per CPU-second measures the work done.
    return {"tokens": n, "seconds": wall, "tok_per_s": n / wall, "cpu_seconds": cpu, "tok_per_cpu_s": n / cpu}


def bench_sequential(model, prompts: list[list[int]], new: int) -> dict:
    c0 = time.process_time()
    t0 = time.perf_counter()
    n = 0
    with torch.inference_mode():
        for ids in prompts:
            x = torch.tensor([ids])
            out = model.generate(
                x, attention_mask=torch.ones_like(x), max_new_tokens=new, min_new_tokens=new, do_sample=False
            )
            n += out.shape[1] - len(ids)
    return _rates(n, time.perf_counter() - t0, time.process_time() - c0)


def bench_generate_batch(model, prompts: list[list[int]], new: int, page_size: int) -> dict:
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    total = sum(len(p) + new for p in prompts)
    cb = ContinuousBatchingConfig(
        page_size=page_size,
        num_blocks=2 * (total // page_size + len(prompts)),  # room for everyone: no preemption on either side
        max_batch_tokens=512,
        max_requests_per_batch=len(prompts),
    )
    gen = GenerationConfig(max_new_tokens=new, min_new_tokens=new, do_sample=False, eos_token_id=None, pad_token_id=0)
    with torch.inference_mode():
        model.generate_batch(prompts[:2], generation_config=gen, continuous_batching_config=cb)  # warm-up
        c0 = time.process_time()
        t0 = time.perf_counter()
        outs = model.generate_batch(prompts, generation_config=gen, continuous_batching_config=cb)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    n = sum(len(o.generated_tokens) for o in outs.values())
    return {**_rates(n, wall, cpu), "num_blocks": cb.num_blocks, "max_batch_tokens": 512}


def bench_engine(engine: LLMEngine, prompts: list[list[int]], new: int) -> dict:
    params = SamplingParams(max_tokens=new, ignore_eos=True)
    engine.last_token_times.clear()
    c0 = time.process_time()
    t0 = time.perf_counter()
    outs = engine.generate(prompts, params)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert all(o.error is None for o in outs)
    n = sum(len(o.token_ids) for o in outs)
    # Per-token latency: gaps between consecutive tokens of the same request (the first is time to first token).
    gaps: list[float] = []
    for seq_times in engine.last_token_times.values():
        gaps.extend(b - a for a, b in zip(seq_times, seq_times[1:], strict=False))
    return {**_rates(n, wall, cpu), "p95_token_latency_ms": percentile(gaps, 0.95) * 1e3}


def show(name: str, r: dict) -> None:
    print(f"{name:46} {r['tok_per_s']:8.1f} tok/s wall, {r['tok_per_cpu_s']:8.1f} tok per CPU-second", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=128)
    # One thread by default: on a shared 2-core machine a second thread mostly waits for CPU time.
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--integrity-rounds", type=int, default=3)
    ap.add_argument("--skip-baselines", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    model, tok = load_smollm2()
    prompts = [encode(tok, m) for m in real_prompts(args.requests)]
    new = args.new_tokens
    print(f"machine: {machine()}")
    print(f"workload: {len(prompts)} requests, prompt tokens {min(map(len, prompts))}-{max(map(len, prompts))}, "
          f"{new} new tokens each, greedy")
    results: dict = {"machine": machine(), "requests": len(prompts), "new_tokens": new}

    def make_engine(checks: bool) -> LLMEngine:
        cfg = EngineConfig(page_size=16, num_pages=2048, max_num_seqs=64, max_num_batched_tokens=512, integrity_checks=checks)
        return LLMEngine(copy.deepcopy(model), tok, cfg)

    engines = {False: make_engine(False), True: make_engine(True)}
    for e in engines.values():
        e.record_token_times = True
        bench_engine(e, prompts[:2], 4)  # warm-up
    results["engine"] = bench_engine(engines[False], prompts, new)
    show("engine (fp32 KV pages)", results["engine"])
    fp8 = LLMEngine(copy.deepcopy(model), tok, EngineConfig(page_size=16, num_pages=2048, kv_cache_dtype="fp8_e4m3"))
    fp8.record_token_times = True
    results["engine_fp8"] = bench_engine(fp8, prompts, new)
    show("engine (fp8 KV pages)", results["engine_fp8"])
    del fp8

    if not args.skip_baselines:
        results["hf_generate_sequential"] = bench_sequential(model, prompts, new)
        show("transformers generate, one request at a time", results["hf_generate_sequential"])
        results["hf_generate_batch"] = bench_generate_batch(copy.deepcopy(model), prompts, new, page_size=16)
        show("transformers generate_batch", results["hf_generate_batch"])
        for key in ("tok_per_s", "tok_per_cpu_s"):
            eng = results["engine"][key]
            seq_x = eng / results["hf_generate_sequential"][key]
            batch_x = eng / results["hf_generate_batch"][key]
            results[f"speedup_{key}"] = {"vs_sequential": seq_x, "vs_generate_batch": batch_x}
            print(f"engine speedup ({key}): {seq_x:.2f}x vs sequential, {batch_x:.2f}x vs generate_batch")

    # Integrity overhead: alternate no-op / checking runs so drifting machine load hits both alike.
    runs: dict[bool, list[dict]] = {False: [], True: []}
    for _ in range(args.integrity_rounds):
        for checks in (False, True):
            runs[checks].append(bench_engine(engines[checks], prompts, new))
    summary = {}
    for checks, rs in runs.items():
        summary["checking" if checks else "noop"] = {
            "tok_per_s": [r["tok_per_s"] for r in rs],
            "p95_token_latency_ms": [r["p95_token_latency_ms"] for r in rs],
            "best_tok_per_s": max(r["tok_per_s"] for r in rs),
            "best_tok_per_cpu_s": max(r["tok_per_cpu_s"] for r in rs),
            "median_p95_ms": sorted(r["p95_token_latency_ms"] for r in rs)[len(rs) // 2],
        }
    thr_loss = 1 - summary["checking"]["best_tok_per_s"] / summary["noop"]["best_tok_per_s"]
    lat_inc = summary["checking"]["median_p95_ms"] / summary["noop"]["median_p95_ms"] - 1
    summary["throughput_loss_pct"] = 100 * thr_loss
    summary["cpu_throughput_loss_pct"] = 100 * (
        1 - summary["checking"]["best_tok_per_cpu_s"] / summary["noop"]["best_tok_per_cpu_s"]
    )
    summary["p95_latency_increase_pct"] = 100 * lat_inc
    summary["checks_run"] = engines[True].tracker.num_checks
    # Direct cost accounting, insensitive to machine-load drift between runs: time inside the check / step time.
    extra = engines[True].metrics().extra
    summary["check_time_share_pct"] = 100 * extra["integrity_check_seconds"] / extra["step_seconds"]
    results["integrity"] = summary
    print(f"integrity checks: throughput {summary['noop']['best_tok_per_s']:.1f} -> "
          f"{summary['checking']['best_tok_per_s']:.1f} tok/s ({100 * thr_loss:+.2f}% loss), p95 per-token latency "
          f"{summary['noop']['median_p95_ms']:.1f} -> {summary['checking']['median_p95_ms']:.1f} ms "
          f"({100 * lat_inc:+.2f}%); per CPU-second loss {summary['cpu_throughput_loss_pct']:+.2f}%; time inside the check: {summary['check_time_share_pct']:.3f}% of step time "
          f"over {summary['checks_run']} checks")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
