"""KV capacity for one memory budget: tokens and concurrent sequences that fit with FP8 vs BF16 pages.

    python benchmarks/serving_capacity.py [--budget-gib 8] [--context 4096] [--page-size 16] [--json out.json]

Page counts come from the same function the engine uses to size its pool (scales and the per-page integrity tag
are charged to the budget). DeepSeek-V3 is counted with latent pages (what the engine caches) and, for comparison,
with the per-head decompressed K/V it cached before. The SmolLM2 row also allocates both caches for real at a 256 MiB budget and checks
their measured size against the budget.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from transformers import DeepseekV3Config, LlamaConfig, MixtralConfig, Qwen3MoeConfig  # noqa: E402

from mediaindex.serving.kv_cache import (  # noqa: E402
    PER_PAGE_METADATA_BYTES,
    KVLayout,
    PagedKVCache,
    bytes_per_page,
    pages_for_budget,
)

# Attention shapes of the deployment's model families (no weights needed).
MODELS = {
    "SmolLM2-135M": LlamaConfig(hidden_size=576, num_attention_heads=9, num_key_value_heads=3, num_hidden_layers=30),
    "Qwen3-30B-A3B": Qwen3MoeConfig(
        hidden_size=2048, num_attention_heads=32, num_key_value_heads=4, head_dim=128, num_hidden_layers=48
    ),
    "Mixtral-8x7B": MixtralConfig(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, num_hidden_layers=32),
    "DeepSeek-V3 (MLA, latent + rope key)": DeepseekV3Config(
        hidden_size=7168, num_attention_heads=128, num_key_value_heads=128, num_hidden_layers=61, kv_lora_rank=512,
        qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
    ),
}
# What the engine cached for DeepSeek-V3 before latent pages: per-head decompressed K (128 + 64) and V (128).
DECOMPRESSED_MLA = ("DeepSeek-V3 (MLA, decompressed per-head K/V)", KVLayout(61, 128, 192, 128))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget-gib", type=float, default=8.0)
    ap.add_argument("--context", type=int, default=4096, help="tokens per sequence when counting sequences")
    ap.add_argument("--page-size", type=int, default=16)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    budget = int(args.budget_gib * 2**30)
    ps = args.page_size
    pages_per_seq = -(-args.context // ps)
    rows = []
    print(f"budget {args.budget_gib} GiB, page size {ps}, sequences of {args.context} tokens")
    print(f"{'model':46} {'bf16 tokens':>12} {'fp8 tokens':>12} {'bf16 seqs':>10} {'fp8 seqs':>9} {'ratio':>6}")
    layouts = [(name, KVLayout.from_config(cfg)) for name, cfg in MODELS.items()] + [DECOMPRESSED_MLA]
    for name, layout in layouts:
        bf16 = pages_for_budget(budget, layout, ps, "bf16")
        fp8 = pages_for_budget(budget, layout, ps, "fp8_e4m3")
        row = {
            "model": name,
            "bf16_tokens": bf16 * ps,
            "fp8_tokens": fp8 * ps,
            "bf16_sequences": bf16 // pages_per_seq,
            "fp8_sequences": fp8 // pages_per_seq,
            "token_ratio": fp8 / bf16,
        }
        rows.append(row)
        print(f"{name:46} {row['bf16_tokens']:12d} {row['fp8_tokens']:12d} {row['bf16_sequences']:10d} "
              f"{row['fp8_sequences']:9d} {row['token_ratio']:6.3f}")

    # MLA: bytes per cached token against the latent's own size, and tokens per byte against the decompressed cache.
    latent = KVLayout.from_config(MODELS["DeepSeek-V3 (MLA, latent + rope key)"])
    own_values = latent.num_layers * (latent.k_head_dim + latent.v_head_dim)
    mla = {}
    for kind, elem in (("bf16", 2), ("fp8_e4m3", 1)):
        per_token = (bytes_per_page(latent, ps, kind) + PER_PAGE_METADATA_BYTES) / ps
        gain = pages_for_budget(budget, latent, ps, kind) / pages_for_budget(budget, DECOMPRESSED_MLA[1], ps, kind)
        mla[kind] = {"bytes_per_token": per_token, "latent_bytes": own_values * elem,
                     "overhead": per_token / (own_values * elem), "tokens_vs_decompressed": gain}
        print(f"DeepSeek-V3 {kind} latent pages: {per_token:.1f} bytes per token ({mla[kind]['overhead']:.3f}x the "
              f"latent's {own_values * elem} bytes), {gain:.1f}x the tokens of decompressed K/V per byte")
    assert all(m["overhead"] <= 1.25 and m["tokens_vs_decompressed"] >= 50 for m in mla.values())

    # Real allocation check on a small budget.
    small = 256 * 2**20
    layout = KVLayout.from_config(MODELS["SmolLM2-135M"])
    measured = {}
    for kind in ("bf16", "fp8_e4m3"):
        n = pages_for_budget(small, layout, ps, kind)
        cache = PagedKVCache(layout, n, ps, kind)
        used = cache.nbytes + 8 * n
        assert used <= small, (kind, used, small)
        measured[kind] = {"pages": n, "bytes": used}
        del cache
    for kind in ("bf16", "fp8_e4m3"):  # the DeepSeek-V3 latent layout, allocated for real at the same budget
        n = pages_for_budget(small, latent, ps, kind)
        cache = PagedKVCache(latent, n, ps, kind)
        used = cache.nbytes + 8 * n
        assert used <= small, ("latent", kind, used, small)
        measured[f"deepseek_v3_latent_{kind}"] = {"pages": n, "bytes": used}
        print(f"allocated for real, DeepSeek-V3 latent {kind} at 256 MiB: {n} pages ({n * ps} tokens), {used} bytes")
        del cache
    ratio = measured["fp8_e4m3"]["pages"] / measured["bf16"]["pages"]
    print(f"allocated for real, SmolLM2 at 256 MiB: bf16 {measured['bf16']['pages']} pages, fp8 "
          f"{measured['fp8_e4m3']['pages']} pages (ratio {ratio:.3f}), both within budget")
    # Per-token FP8 scales cost 8 bytes per token and KV head: 1.88x at head dim 64, 1.94x at 128.
    assert all(r["token_ratio"] >= 1.85 for r in rows) and ratio >= 1.85
    if args.json:
        args.json.write_text(json.dumps({"budget_bytes": budget, "rows": rows, "mla": mla, "allocated": measured}, indent=2))


if __name__ == "__main__":
    main()
