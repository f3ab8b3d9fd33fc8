"""Disaggregated prefill/decode vs one engine on CPU: tokens/s, handoff bytes per token, token agreement.

SmolLM2-135M-Instruct (float32), real chat prompts from the test media, all requests added at once, greedy, a fixed
number of new tokens (EOS ignored). Every system decodes with FP8 KV pages (the disaggregated default) unless the
row says otherwise; the prefill worker keeps fp32 pages. Rows:

- single engine: one LLMEngine doing both phases, in this process.
- disaggregated, in process: PrefillWorker and DecodeWorker in this process, stepped in turn (the handoff cost with
  no transport), once per handoff wire dtype (fp32 = the prefill cache's own values, bf16, fp8_e4m3).
- disaggregated, Ray: the two workers as Ray actors (one CPU and one torch thread each), handoffs by reference.

Tokens/s = generated tokens / wall time of `generate`, after one warm-up call (actor start-up and model loading are
left out). Agreement = share of generated tokens equal, position by position, to the single FP8 engine's; identical =
requests whose whole output is equal to it.

Prefix sharing is off by default (`--prefix-sharing` turns it on): the chat template gives every prompt the same
system-prompt prefix, which the warm-up leaves in the cache, and a single FP8 engine then prefills the rest of each
prompt against that prefix read back from FP8 pages, while the prefill worker reads it from its fp32 pages. Both are
valid, but they are different computations, so the outputs cannot be compared token for token.
Usage: ``python benchmarks/serving_disagg.py [--requests 8] [--new-tokens 32] [--threads 2] [--no-ray] [--json F]``.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from serving_common import machine, real_prompts  # noqa: E402

import mediaindex.raylib  # noqa: E402,F401  (Ray's environment is set before Ray is imported)
from mediaindex.serving import EngineConfig, LLMEngine, SamplingParams  # noqa: E402
from mediaindex.serving.config import DisaggConfig, WorkerResources  # noqa: E402
from mediaindex.serving.disagg import DisaggregatedLLM  # noqa: E402
from mediaindex.serving.model_runner import load_smollm2  # noqa: E402

BATCH = 4096  # every prompt in one step, so FP8 scales calibrate on the same tokens in every system


def _engine_config(kv: str, n: int, sharing: bool) -> EngineConfig:
    return EngineConfig(kv_cache_dtype=kv, max_num_seqs=n, max_num_batched_tokens=BATCH, enable_prefix_sharing=sharing)


def _timed(run, prompts, params) -> tuple[list[list[int]], float, float]:
    run(prompts[:1], SamplingParams(max_tokens=2, ignore_eos=True))  # warm-up
    t0, c0 = time.perf_counter(), time.process_time()
    outs = run(prompts, params)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert all(o.error is None for o in outs), [o.error for o in outs if o.error]
    return [o.token_ids for o in outs], wall, cpu


def _agreement(got: list[list[int]], ref: list[list[int]]) -> float:
    same = sum(a == b for x, y in zip(got, ref, strict=True) for a, b in zip(x, y, strict=True))
    return same / sum(len(t) for t in ref)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2, help="torch threads of the in-process systems")
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray actor row")
    parser.add_argument("--prefix-sharing", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    model, tok = load_smollm2()
    n = args.requests
    prompts = real_prompts(n)
    texts = [tok.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in prompts]
    prompt_lens = [len(tok(t, add_special_tokens=False)["input_ids"]) for t in texts]
    params = SamplingParams(max_tokens=args.new_tokens, ignore_eos=True)
    generated = n * args.new_tokens
    rows: list[dict[str, object]] = []
    ref: dict[str, list[list[int]]] = {}

    def record(system: str, kv: str, wire: str, tokens, wall: float, cpu: float, stats=None) -> None:
        row = {
            "system": system, "decode_kv": kv, "wire": wire, "tok_s": round(generated / wall, 2),
            "tok_per_cpu_s": round(generated / cpu, 2) if cpu > 0.05 else None, "wall_s": round(wall, 2),
            "agreement_vs_single_fp8": round(_agreement(tokens, ref["fp8_e4m3"]), 4),
            "identical": f"{sum(a == b for a, b in zip(tokens, ref['fp8_e4m3'], strict=True))}/{n}",
        }
        if stats:
            pre, dec = stats["prefill"], stats["decode"]
            row["handoff_bytes_per_token"] = round(pre["handoff_bytes"] / pre["handoff_tokens"])
            # warm-up included: both counters cover n + 1 handoffs
            row["export_ms_per_handoff"] = round(1000 * pre["export_seconds"] / (n + 1), 2)
            row["import_ms_per_handoff"] = round(1000 * dec["import_seconds"] / (n + 1), 2)
            # export runs inside prefill steps; imports run outside decode steps
            busy = pre["step_seconds"] + dec["step_seconds"] + dec["import_seconds"]
            row["handoff_share_of_worker_time"] = round((pre["export_seconds"] + dec["import_seconds"]) / busy, 4)
        rows.append(row)
        print(row, flush=True)

    for kv in ("fp8_e4m3", "fp32"):
        engine = LLMEngine(copy.deepcopy(model), tok, _engine_config(kv, n, args.prefix_sharing))
        tokens, wall, cpu = _timed(engine.generate, prompts, params)
        ref.setdefault(kv, tokens)
        record("single engine", kv, "-", tokens, wall, cpu)

    for wire in ("fp32", "bf16", "fp8_e4m3"):
        cfg = DisaggConfig(
            prefill=_engine_config("fp32", n, args.prefix_sharing),
            decode=_engine_config("fp8_e4m3", n, args.prefix_sharing),
            handoff_dtype=wire,
        )
        llm = DisaggregatedLLM.local(copy.deepcopy(model), tok, cfg)
        tokens, wall, cpu = _timed(llm.generate, prompts, params)
        record("disaggregated, in process", "fp8_e4m3", wire, tokens, wall, cpu, llm.stats())

    if not args.no_ray:
        from mediaindex.config import load_settings
        from mediaindex.workers.runtime import ensure_ray, shutdown_ray

        tmp = Path(tempfile.mkdtemp(prefix="disagg-"))
        ensure_ray(load_settings("cpu", index_dir=tmp / "index", cache_dir=tmp / "cache"))
        one = WorkerResources(num_cpus=1, torch_threads=1)
        cfg = DisaggConfig(
            prefill=_engine_config("fp32", n, args.prefix_sharing), decode=_engine_config("fp8_e4m3", n, args.prefix_sharing),
            prefill_resources=one, decode_resources=one,
        )
        llm = DisaggregatedLLM.start("smollm2", cfg)
        try:
            tokens, wall, _ = _timed(llm.generate, prompts, params)
            record("disaggregated, Ray actors (1 thread each)", "fp8_e4m3", "fp32", tokens, wall, 0.0, llm.stats())
        finally:
            llm.close()
            shutdown_ray()

    result = {
        "machine": machine(), "requests": n, "prompt_tokens": prompt_lens,
        "prefix_sharing": args.prefix_sharing, "new_tokens": args.new_tokens,
        "rows": rows,
    }
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}))


if __name__ == "__main__":
    main()
