"""Bytes of weights at BF16, HQQ 8-bit and HQQ 4-bit (group size 64, fp16 scale and zero per group).

Models: SmolLM2-135M-Instruct (bundled GGUF), a random ~105M-parameter Qwen3-MoE (32 experts x 4
layers, quantized for real, checkpoint written to disk), and the shapes of Qwen3-30B-A3B (128
experts x 48 layers; counted on the meta device, no weights exist). Sizes do not depend on HQQ's
solver, so quantization here uses plain rounding (``optimize=False``) to save time.
Usage: ``python benchmarks/quant_size.py [--json out.json]``.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.quant_common import load_smollm2, machine  # noqa: E402
from mediaindex.serving.quant import (  # noqa: E402
    QuantConfig,
    QuantExperts,
    QuantLinear,
    count_quantized,
    plan_quantization,
    quantize_model,
    save_quantized,
    weight_bytes,
)
from mediaindex.serving.quant.model import _set_module  # noqa: E402


def _mb(n: int) -> float:
    return round(n / 1e6, 2)


def measure(model: nn.Module, label: str, save: bool) -> dict[str, object]:
    bf16 = weight_bytes(model)["total"]
    row: dict[str, object] = {"model": label, "bf16_MB": _mb(bf16)}
    for bits in (8, 4):
        q = quantize_model(copy.deepcopy(model), QuantConfig(bits=bits, optimize=False))
        sizes = weight_bytes(q)
        row[f"int{bits}_MB"] = _mb(sizes["total"])
        row[f"int{bits}_ratio"] = round(sizes["total"] / bf16, 4)
        row[f"int{bits}_quantized_part_MB"] = _mb(sizes["quantized"])
        row[f"int{bits}_high_precision_part_MB"] = _mb(sizes["other"])
        row["counts"] = count_quantized(q)
        if save:
            with tempfile.TemporaryDirectory() as tmp:
                save_quantized(q, tmp)
                row[f"int{bits}_checkpoint_MB"] = _mb(sum(p.stat().st_size for p in Path(tmp).iterdir()))
        del q
    return row


def _qwen3_moe_small() -> nn.Module:
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    torch.manual_seed(0)
    config = Qwen3MoeConfig(
        vocab_size=1024,
        hidden_size=512,
        intermediate_size=1024,
        moe_intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=64,
        num_experts=32,
        num_experts_per_tok=2,
    )
    return Qwen3MoeForCausalLM(config).to(torch.bfloat16).eval()


def meta_sizes() -> dict[str, object]:
    """Qwen3-30B-A3B shapes on the meta device, with quantized modules swapped in as skeletons."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    config = Qwen3MoeConfig(
        vocab_size=151936,
        hidden_size=2048,
        intermediate_size=6144,
        moe_intermediate_size=768,
        num_hidden_layers=48,
        num_attention_heads=32,
        num_key_value_heads=4,
        head_dim=128,
        num_experts=128,
        num_experts_per_tok=8,
        tie_word_embeddings=False,
    )
    with torch.device("meta"):
        model = Qwen3MoeForCausalLM(config).to(torch.bfloat16)
    bf16 = weight_bytes(model)["total"]
    row: dict[str, object] = {"model": "Qwen3-30B-A3B shapes (meta device)", "bf16_MB": _mb(bf16)}
    for bits in (8, 4):
        cfg = QuantConfig(bits=bits)
        with torch.device("meta"):
            skeleton = Qwen3MoeForCausalLM(config).to(torch.bfloat16)
        plan = plan_quantization(skeleton, cfg)
        for name in plan.linears:
            lin = skeleton.get_submodule(name)
            _set_module(
                skeleton,
                name,
                QuantLinear(
                    lin.in_features,
                    lin.out_features,
                    bits=bits,
                    group_size=64,
                    axis=1,
                    bias=lin.bias is not None,
                    compute_dtype=torch.bfloat16,
                    device="meta",
                ),
            )
        for name in plan.experts:
            _set_module(skeleton, name, QuantExperts.skeleton_like(skeleton.get_submodule(name), cfg, "meta"))
        sizes = weight_bytes(skeleton)
        row[f"int{bits}_MB"] = _mb(sizes["total"])
        row[f"int{bits}_ratio"] = round(sizes["total"] / bf16, 4)
        row["counts"] = count_quantized(skeleton)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    smol, _ = load_smollm2(torch.bfloat16)
    rows = [measure(smol, "SmolLM2-135M-Instruct", save=True)]
    del smol
    rows.append(
        measure(_qwen3_moe_small(), "random Qwen3-MoE (32 experts x 4 layers, hidden 512)", save=True)
    )
    rows.append(meta_sizes())
    report = {"machine": machine(), "rows": rows}
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
