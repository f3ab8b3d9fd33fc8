"""Cost of KV-page integrity checks: the checking tracker against the no-op tracker, paired rounds in one engine.

    python benchmarks/integrity_overhead.py --rounds 12 --requests 16 --new-tokens 32 [--device cuda]

One engine and one model for both trackers, so weights, KV pages and allocator state are the same memory; the
tracker is swapped between rounds while no request holds a page. Rounds run in ABBA order (no-op, checking,
checking, no-op, ...) so load that drifts during the run hits both alike. Each round's pair gives a ratio; the
report is the median ratio with its interquartile range, which a noisy shared machine moves far less than any
single throughput number. The time spent inside the check itself is measured directly as well.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from serving_common import machine, real_prompts  # noqa: E402
from serving_throughput import bench_engine, encode  # noqa: E402

from mediaindex.serving import EngineConfig, LLMEngine  # noqa: E402
from mediaindex.serving.integrity import CheckingTracker, IntegrityTracker, NoOpTracker  # noqa: E402
from mediaindex.serving.model_runner import load_smollm2  # noqa: E402


def use_tracker(engine: LLMEngine, checking: bool) -> IntegrityTracker:
    """Swap the engine's tracker; only valid while every page is free (between rounds)."""
    assert engine.block_manager.num_free == engine.block_manager.num_pages, "pages still held"
    pages = engine.block_manager.num_pages
    tracker = CheckingTracker(pages, engine.kv_cache.device) if checking else NoOpTracker()
    engine.tracker = tracker
    engine.block_manager.tracker = tracker
    return tracker


def quartiles(xs: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3
    return q[0], statistics.median(xs), q[2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=12, help="pairs of (no-op, checking) runs")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    model, tok = load_smollm2()
    prompts = [encode(tok, m) for m in real_prompts(args.requests)]
    cfg = EngineConfig(page_size=16, num_pages=2048, max_num_seqs=64, max_num_batched_tokens=512, device=args.device)
    engine = LLMEngine(model, tok, cfg)
    engine.record_token_times = True
    bench_engine(engine, prompts, 2)  # warm-up; also caches the prompts, so every round does the same work

    runs: dict[str, list[dict]] = {"noop": [], "checking": []}
    check_seconds = step_seconds = 0.0
    checks = 0
    for r in range(args.rounds):
        order = ("noop", "checking") if r % 2 == 0 else ("checking", "noop")
        for mode in order:
            tracker = use_tracker(engine, mode == "checking")
            before = engine.metrics().extra
            runs[mode].append(bench_engine(engine, prompts, args.new_tokens))
            after = engine.metrics().extra
            if mode == "checking":
                check_seconds += after["integrity_check_seconds"] - before["integrity_check_seconds"]
                step_seconds += after["step_seconds"] - before["step_seconds"]
                checks += tracker.num_checks  # type: ignore[attr-defined]
        print(f"round {r + 1}/{args.rounds}: no-op {runs['noop'][-1]['tok_per_s']:.1f} tok/s, "
              f"checking {runs['checking'][-1]['tok_per_s']:.1f} tok/s", flush=True)

    def paired(key: str) -> list[float]:
        return [c[key] / n[key] for n, c in zip(runs["noop"], runs["checking"], strict=True)]

    report = {"machine": machine(), "rounds": args.rounds, "requests": len(prompts), "new_tokens": args.new_tokens,
              "checks": checks, "check_time_share_pct": 100 * check_seconds / step_seconds}
    for key, label, sign in (("tok_per_s", "throughput", -1), ("tok_per_cpu_s", "throughput per CPU-second", -1),
                             ("p95_token_latency_ms", "p95 per-token latency", 1)):
        lo, mid, hi = quartiles(paired(key))
        # Loss for throughput (ratio below 1 is worse), increase for latency (ratio above 1 is worse).
        change = [sign * 100 * (x - 1) for x in (mid, lo, hi)]
        report[key] = {"median_ratio": mid, "q1_ratio": lo, "q3_ratio": hi,
                       "noop_median": statistics.median(r[key] for r in runs["noop"]),
                       "checking_median": statistics.median(r[key] for r in runs["checking"])}
        word = "loss" if sign < 0 else "increase"
        print(f"{label}: median {word} {change[0]:+.2f}% (interquartile range of paired ratios "
              f"{min(change[1:]):+.2f}% .. {max(change[1:]):+.2f}%)")
    print(f"time inside the check: {report['check_time_share_pct']:.3f}% of step time over {checks} checks")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
