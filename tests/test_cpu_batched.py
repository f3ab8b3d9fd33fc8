"""The batched decode kernel (cpu_batched.c): 8-bit activations times int4 / int8 weights give exactly the sums
its quantization defines, for any number of rows, and the packed layers use it for decode batches only."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from mediaindex.serving.quant import cpu_batched
from mediaindex.serving.quant.config import QuantizationError
from mediaindex.serving.quant.cpu_int4 import Int4Linear, unpack_int4pack
from mediaindex.serving.quant.cpu_int8 import BATCHED_ROWS, Int8Linear
from mediaindex.serving.quant.cpu_weights import CpuWeights, quantize_cpu

pytestmark = pytest.mark.skipif(cpu_batched.unavailable() is not None,
                                reason=f"the batched kernel cannot run here: {cpu_batched.unavailable()}")

ROWS = [1, 3, 4, 7, 8, 13, 16, 21, 32]  # every chunking of the kernel (16, 8, 4, 1 rows) and their remainders


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def _quantized_activations(x: torch.Tensor) -> torch.Tensor:
    """What the kernel multiplies: per 32 inputs of a row, round(x * 127 / max|x|) * max|x| / 127, in fp32."""
    blocks = x.float().view(x.shape[0], -1, 32)
    amax = blocks.abs().amax(-1, keepdim=True)
    inv = torch.where(amax > 0, torch.tensor(127.0) / amax, torch.zeros_like(amax))
    q = torch.round(blocks * inv).clamp(-127, 127)
    return (q.double() * (amax.double() / 127.0)).view_as(x)


def _weights(out_features: int, in_features: int, seed: int) -> nn.Linear:
    torch.manual_seed(seed)
    linear = nn.Linear(in_features, out_features, bias=False)
    linear.weight.data.normal_(0.0, 0.05)
    return linear


@pytest.mark.parametrize("rows", ROWS)
def test_int4_sums_are_exactly_those_of_the_quantized_activations(rows: int) -> None:
    layer = Int4Linear.from_linear(_weights(192, 320, rows), group_size=32, optimize=False)
    assert layer.use_batched_kernel() is None and layer.batched is not None
    x = torch.randn(rows, 320, generator=torch.Generator().manual_seed(rows)).bfloat16()
    pairs = layer.scales_and_zeros.float().transpose(0, 1)  # [out, groups, 2]: bf16 (scale, offset) pairs
    scale = pairs[..., 0].double().repeat_interleave(32, 1)
    bias = (pairs[..., 1] - 8.0 * pairs[..., 0]).bfloat16().double().repeat_interleave(32, 1)  # stored as bf16
    codes = unpack_int4pack(layer.packed, 192, 320)
    assert codes is not None
    weight = codes.double() * scale + bias
    expected = _quantized_activations(x) @ weight.t()
    got = cpu_batched.batched_matmul(x, *layer.batched, 192, 4)
    assert got.dtype == torch.float32 and got.shape == (rows, 192)
    assert _rel(got, expected) < 1e-5  # integer sums exact; only fp32 scaling rounds
    assert _rel(got, x.double() @ layer.dequantize().double().t()) < 0.02  # the activations' 8 bits cost little


@pytest.mark.parametrize("rows", ROWS)
def test_int8_sums_are_exactly_those_of_the_quantized_activations(rows: int) -> None:
    layer = Int8Linear.from_linear(_weights(144, 256, rows))
    assert layer.use_batched_kernel() is None and layer.batched is not None
    x = torch.randn(rows, 256, generator=torch.Generator().manual_seed(rows)).bfloat16()
    weight = layer.codes.double() * layer.scales.double()[:, None]  # the scale as stored (bf16), unrounded product
    expected = _quantized_activations(x) @ weight.t()
    got = cpu_batched.batched_matmul(x, *layer.batched, 144, 8)
    assert _rel(got, expected) < 1e-5
    assert _rel(got, x.double() @ layer.dequantize().double().t()) < 0.02


def test_zero_rows_and_zero_blocks_give_zero() -> None:
    layer = Int8Linear.from_linear(_weights(32, 64, 0))
    layer.use_batched_kernel()
    assert layer.batched is not None
    x = torch.zeros(3, 64)
    x[1, 32:] = 1.0  # one block of zeros, one of ones in the same row
    got = cpu_batched.batched_matmul(x, *layer.batched, 32, 8)
    assert torch.equal(got[0], torch.zeros(32)) and torch.equal(got[2], torch.zeros(32))
    assert _rel(got[1], layer.dequantize().float()[:, 32:].sum(1)) < 1e-2


def test_layers_run_decode_batches_on_the_kernel_and_prompt_chunks_on_bf16() -> None:
    linear = _weights(256, 512, 5)
    layer = Int4Linear.from_linear(linear, group_size=32, optimize=False)
    layer.keep_dense(linear.weight)
    x = torch.randn(BATCHED_ROWS + 8, 512)
    weight_only = layer._kernel(x[:BATCHED_ROWS].bfloat16()).float()  # torch's kernel on bf16 activations
    assert layer.use_batched_kernel() is None
    batch = layer(x[:BATCHED_ROWS])
    assert batch.dtype == x.dtype and _rel(batch, weight_only) < 0.02
    assert not torch.equal(batch.bfloat16(), weight_only.bfloat16())  # it did take the 8-bit activations
    chunk = layer(x)  # longer than a decode batch: the kept bf16 weight
    assert _rel(chunk, linear(x).detach()) < 0.01


def test_shapes_the_kernel_cannot_take_keep_torchs_kernels() -> None:
    assert "multiple of 32" in (cpu_batched.unsupported(64, 48, None) or "")
    assert "multiple of 16" in (cpu_batched.unsupported(40, 64, None) or "")
    assert "group size must be 32" in (cpu_batched.unsupported(64, 128, 64) or "")
    wide_groups = Int4Linear.from_linear(_weights(128, 256, 1), group_size=64, optimize=False)
    assert "group size" in (wide_groups.use_batched_kernel() or "") and wide_groups.batched is None
    odd = Int8Linear.from_linear(_weights(40, 64, 2))  # 40 outputs: not whole tiles of 16
    assert odd.use_batched_kernel() is not None and odd.batched is None
    x = torch.randn(2, 64)
    assert _rel(odd(x), x.double() @ odd.dequantize().double().t()) < 0.02  # torch's kernel still runs it
    with pytest.raises(RuntimeError, match="refused"):
        cpu_batched.batched_matmul(torch.randn(2, 48), torch.zeros(48 * 16, dtype=torch.uint8),
                                   torch.zeros(16, dtype=torch.int16), 16, 8)


def _tiny_qwen() -> nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=512, hidden_size=256, intermediate_size=640, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    return Qwen2ForCausalLM(config).to(torch.bfloat16).eval()


def _decoded(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """Logits of a batch fed one position a step on the model's cache: every call is a decode batch."""
    past, logits = None, []
    with torch.no_grad():
        for i in range(ids.shape[1]):
            step = model(ids[:, i : i + 1], past_key_values=past, use_cache=True)
            past = step.past_key_values
            logits.append(step.logits.float())
    return torch.cat(logits, dim=1)


def test_a_small_model_decodes_on_the_kernel_and_keeps_its_predictions() -> None:
    ids = torch.randint(0, 512, (4, 16), generator=torch.Generator().manual_seed(3))
    ref = _decoded(_tiny_qwen(), ids)
    runs = {}
    for activations in ("bf16", "int8"):
        model = _tiny_qwen()
        weights = CpuWeights(body="int4", head="int8", group_size=32, prefill="quantized", activations=activations)
        report = quantize_cpu(model, weights, model_id="tiny-qwen")
        assert report.batched_layers == (15 if activations == "int8" else 0)
        runs[activations] = _decoded(model, ids)
    # 8-bit activations move the logits far less than 4-bit weights do (random weights: 0.02 against 0.17), and
    # rarely the top token the weight-only kernel picks
    assert _rel(runs["int8"], runs["bf16"]) < 0.05 < _rel(runs["bf16"], ref)
    same = (runs["int8"].argmax(-1) == runs["bf16"].argmax(-1)).float().mean().item()
    assert same >= 0.9, same


def test_the_kernels_layouts_are_cached_with_the_packed_weights(tmp_path: Path) -> None:
    ids = torch.randint(0, 512, (4, 6), generator=torch.Generator().manual_seed(5))
    weights = CpuWeights(body="int4", head="int8", group_size=32, prefill="quantized")
    runs = []
    for _ in range(2):
        model = _tiny_qwen()
        report = quantize_cpu(model, weights, model_id="tiny-qwen", cache_dir=tmp_path)
        runs.append((report, _decoded(model, ids)))
    (first, built), (second, read) = runs
    assert not first.from_cache and second.from_cache and second.cache_path == first.cache_path
    assert second.batched_layers == first.batched_layers == 15
    assert torch.equal(built, read)  # the same layouts, read back
    # Another activation choice is another entry: its layers carry no batched layout.
    plain = quantize_cpu(_tiny_qwen(), CpuWeights(body="int4", head="int8", group_size=32, prefill="quantized",
                                                  activations="bf16"), model_id="tiny-qwen", cache_dir=tmp_path)
    assert plain.cache_path != first.cache_path and plain.batched_layers == 0


def test_a_cached_layout_that_does_not_fit_its_layer_is_refused() -> None:
    layer = Int4Linear.from_linear(_weights(64, 128, 3), group_size=32, optimize=False)
    assert layer.use_batched_kernel() is None and layer.batched is not None
    codes, scales = layer.batched
    with pytest.raises(QuantizationError, match="does not fit"):
        layer.set_batched(codes[:-64], scales)
    eight = Int8Linear.from_linear(_weights(64, 128, 4))
    with pytest.raises(QuantizationError, match="does not fit"):
        eight.set_batched(codes, scales)
