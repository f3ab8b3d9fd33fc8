"""Engine decode and prefill tokens/s on CPU with full-precision, HQQ 8-bit, HQQ 4-bit and split-precision weights.

SmolLM2-135M-Instruct, real chat prompts from the test media, all requests added at once (one prefill, then pure
decode steps), greedy, fixed length. Rates come from the engine's own metrics. The quantized weights are made
once with plain rounding (speed does not depend on HQQ's solver) and handed to the engine already quantized.
On CPU HQQ's PyTorch path de-quantizes each weight on every call, so quantized decode is expected to be slower.
Usage: ``python benchmarks/serving_quant.py [--threads 2] [--requests 4] [--new-tokens 32] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from serving_common import machine, real_prompts  # noqa: E402

from mediaindex.serving import EngineConfig, LLMEngine, SamplingParams  # noqa: E402
from mediaindex.serving.model_runner import load_smollm2  # noqa: E402
from mediaindex.serving.quant import QuantConfig, build_split_precision, quantize_model  # noqa: E402

FAST = QuantConfig(optimize=False)


def weight_sets(dtype: torch.dtype) -> dict[str, object]:
    """name -> what the engine is given (a model or a SplitPrecisionModel), built one at a time."""
    base, _ = load_smollm2(dtype=dtype)
    high = "bf16" if dtype == torch.bfloat16 else "fp32"
    return {
        high: lambda: copy.deepcopy(base),
        "int8": lambda: quantize_model(copy.deepcopy(base), FAST.model_copy(update={"bits": 8})),
        "int4": lambda: quantize_model(copy.deepcopy(base), FAST.model_copy(update={"bits": 4})),
        "split int8/int4": lambda: build_split_precision(copy.deepcopy(base), prefill="int8", decode="int4", config=FAST),
        f"split {high}/int4": lambda: build_split_precision(
            copy.deepcopy(base), prefill="bf16", decode="int4", config=FAST
        ),
    }  # type: ignore[return-value]


def bench(model: object, tok, prompts: list[list[int]], new: int) -> dict[str, float]:
    engine = LLMEngine(model, tok, EngineConfig(max_num_seqs=len(prompts), max_num_batched_tokens=4096))  # type: ignore[arg-type]
    engine.generate(prompts[:1], SamplingParams(max_tokens=3, ignore_eos=True))  # warm-up, left out below
    before = _totals(engine)
    t0 = time.perf_counter()
    engine.generate(prompts, SamplingParams(max_tokens=new, ignore_eos=True))
    wall = time.perf_counter() - t0
    after = _totals(engine)
    rates = {k: (after[k][0] - before[k][0]) / max(after[k][1] - before[k][1], 1e-9) for k in after}
    return {
        "decode_tok_s": round(rates["decode"], 1),
        "prefill_tok_s": round(rates["prefill"], 1),
        "wall_s": round(wall, 2),
    }


def _totals(engine: LLMEngine) -> dict[str, tuple[int, float]]:
    """phase -> (tokens, seconds) so far, from the engine's metrics."""
    m = engine.metrics()
    return {
        "decode": (m.decode_tokens, m.decode_tokens / m.decode_tokens_per_s if m.decode_tokens_per_s else 0.0),
        "prefill": (m.prefill_tokens, m.prefill_tokens / m.prefill_tokens_per_s if m.prefill_tokens_per_s else 0.0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--requests", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    dtype = getattr(torch, args.dtype)
    _, tok = load_smollm2(dtype=dtype)
    prompts = [
        list(tok.apply_chat_template(p, add_generation_prompt=True, tokenize=True, return_dict=False))
        for p in real_prompts(args.requests)
    ]
    results: dict[str, dict[str, float]] = {}
    for name, build in weight_sets(dtype).items():
        results[name] = bench(build(), tok, prompts, args.new_tokens)  # type: ignore[operator]
        print(name, results[name], flush=True)
    report = {
        "machine": machine(),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "requests": args.requests,
        "prompt_tokens": [len(p) for p in prompts],
        "new_tokens": args.new_tokens,
        "results": results,
    }
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
