"""Int4 weights on torch's packed CPU matmul: HQQ's codes packed into the kernel's layout compute HQQ's own
dequantized weight, a small random model keeps its predictions, and the real bundled model its greedy text."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transformers import Qwen2Config, Qwen2ForCausalLM

from mediaindex.serving.quant.config import QuantizationError
from mediaindex.serving.quant.cpu_int4 import (
    DENSE_ROWS,
    EXPAND_ROWS,
    Int4Linear,
    hqq_to_int4pack,
    int4_kernel_available,
    unpack_int4pack,
)
from mediaindex.serving.quant.cpu_int8 import Int8Linear
from mediaindex.serving.quant.cpu_weights import CpuWeights, quantize_cpu
from mediaindex.serving.quant.layers import PackSpec, dequantize_weight, quantize_weight

pytestmark = pytest.mark.skipif(not int4_kernel_available(), reason="no aten::_weight_int4pack_mm_for_cpu here")


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


@pytest.mark.parametrize("group_size", [32, 64, 128])
def test_packed_codes_compute_hqqs_own_weight(group_size: int) -> None:
    torch.manual_seed(0)
    linear = nn.Linear(896, 320, bias=True)
    spec = PackSpec(320, 896, 4, group_size, 1)
    codes, scale, zero = quantize_weight(linear.weight.data, spec, optimize=True)
    hqq_weight = dequantize_weight(codes, scale, zero, spec, torch.float32)
    packed, scales_and_zeros = hqq_to_int4pack(codes, scale, zero, spec)
    layer = Int4Linear(packed, scales_and_zeros, group_size, linear.bias)
    assert packed.dtype == torch.uint8 and tuple(packed.shape) == (320, 448)
    assert tuple(scales_and_zeros.shape) == (896 // group_size, 320, 2)
    # Only bf16's rounding of the scale and offset separates the kernel's weight from HQQ's.
    assert _rel(layer.dequantize(), hqq_weight) < 0.01
    x = torch.randn(3, 896)
    ref = x @ hqq_weight.t() + linear.bias
    out = layer(x)
    assert out.dtype == x.dtype and out.shape == (3, 320)
    assert _rel(out, ref) < 0.015
    # ... and HQQ's 4-bit error itself is what separates it from the original layer.
    assert 0.02 < _rel(hqq_weight, linear.weight) < 0.15


def test_unpacking_reads_the_kernels_own_layout() -> None:
    codes = torch.randint(0, 16, (192, 256), dtype=torch.int32)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, 1)
    unpacked = unpack_int4pack(packed, 192, 256)
    assert unpacked is not None and torch.equal(unpacked.int(), codes)
    assert unpack_int4pack(packed[:48], 48, 256) is None  # rows not in blocks of 64: no known layout


def test_prompt_chunks_take_the_dense_paths_with_the_same_result() -> None:
    torch.manual_seed(1)
    linear = nn.Linear(256, 384, bias=False)
    layer = Int4Linear.from_linear(linear, 64, optimize=False)
    assert layer.unpackable
    x = torch.randn(EXPAND_ROWS, 256)
    kernel = layer._kernel(x.bfloat16())
    expanded = layer(x)  # no dense weight kept: the codes are expanded for this call
    assert _rel(expanded, kernel) < 0.01
    layer.keep_dense(linear.weight)
    dense = layer(x[:DENSE_ROWS])
    assert _rel(dense, linear(x[:DENSE_ROWS])) < 0.01  # the original weight, as bf16
    with pytest.raises(QuantizationError, match="does not match"):
        layer.keep_dense(torch.zeros(3, 3))


def test_shapes_the_kernel_cannot_take_are_refused_clearly() -> None:
    with pytest.raises(QuantizationError, match="group_size must be one of"):
        Int4Linear.from_linear(nn.Linear(256, 64), group_size=48)
    with pytest.raises(QuantizationError, match="not a multiple of group_size"):
        Int4Linear.from_linear(nn.Linear(96, 64), group_size=64)


def _tiny_qwen(seed: int = 0) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=512, hidden_size=256, intermediate_size=640, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    return Qwen2ForCausalLM(config).to(torch.bfloat16).eval()


@pytest.mark.parametrize("head", ["bf16", "int8", "int4"])
def test_a_small_model_keeps_its_predictions(head: str) -> None:
    model = _tiny_qwen()
    ids = torch.randint(0, 512, (1, 48), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref = model(ids).logits.float()[0]
        report = quantize_cpu(model, CpuWeights(body="int4", head=head, group_size=64, prefill="quantized"),
                              model_id="tiny-qwen")
        out = model(ids).logits.float()[0]
    assert report.int4_layers == 2 * 7 + (head == "int4") and report.int8_layers == (head == "int8")
    assert isinstance(model.model.layers[0].mlp.down_proj, Int4Linear)
    assert isinstance(model.lm_head, {"bf16": nn.Linear, "int8": Int8Linear, "int4": Int4Linear}[head])
    agree = (ref.argmax(-1) == out.argmax(-1)).float().mean().item()
    assert agree >= 0.8, agree
    assert _rel(out, ref) < (0.3 if head == "int4" else 0.2)  # random weights: 4 bits cost more than on trained ones


def test_int8_layers_and_the_split_prefill() -> None:
    model = _tiny_qwen(1)
    ids = torch.randint(0, 512, (1, 40), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        ref = model(ids).logits.float()[0]
        report = quantize_cpu(model, CpuWeights(body="int8", head="bf16", prefill="bf16"), model_id="tiny-qwen")
        prompt = model(ids).logits.float()[0]  # 40 rows: every layer runs its kept bf16 weight
        one = model(ids[:, :1]).logits.float()[0]  # one row: the int8 kernel
    assert report.int8_layers == 14 and report.int4_layers == 0
    assert _rel(prompt, ref) < 0.01
    assert _rel(one, ref[:1]) < 0.05
