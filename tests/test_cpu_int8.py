"""Int8 weights on torch's packed CPU matmul: close to the full-precision layer, and the real model still
predicts the same tokens."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from mediaindex.serving.quant.cpu_int8 import Int8Linear, int8_kernel_available, quantize_int8_cpu

pytestmark = pytest.mark.skipif(not int8_kernel_available(), reason="no aten::_weight_int8pack_mm in this torch")


def test_one_layer_matches_its_full_precision_result() -> None:
    torch.manual_seed(0)
    linear = nn.Linear(576, 1536, bias=True)
    x = torch.randn(3, 5, 576)
    q = Int8Linear(linear)
    assert q.codes.dtype == torch.int8 and q.codes.shape == (1536, 576) and q.scales.shape == (1536,)
    ref, out = linear(x), q(x)
    assert out.shape == ref.shape and out.dtype == x.dtype
    assert ((out - ref).norm() / ref.norm()).item() < 0.02


def test_smollm2_predicts_the_same_tokens() -> None:
    from mediaindex.serving.model_runner import load_smollm2

    model, tok = load_smollm2(dtype=torch.bfloat16)
    ids = tok("And so, my fellow Americans: ask not what your country can do for you", return_tensors="pt").input_ids
    with torch.no_grad():
        ref = model(ids).logits.float()
        replaced = quantize_int8_cpu(model)
        out = model(ids).logits.float()
    assert replaced == sum(isinstance(m, Int8Linear) for m in model.modules()) > 100
    assert not isinstance(model.lm_head, Int8Linear)
    agree = (ref.argmax(-1) == out.argmax(-1)).float().mean().item()
    assert agree >= 0.9, agree
