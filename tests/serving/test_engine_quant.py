"""The engine on quantized weights: greedy output with 8-bit weights equals transformers' generate on the same
quantized model; with split precision (prefill int8, decode int4) it equals a reference that runs each prompt
through the int8 view and each decode step through the int4 view; bad `weights` settings are refused."""

from __future__ import annotations

import copy

import pytest
import torch
from pydantic import ValidationError
from transformers import DynamicCache

from mediaindex.serving import EngineConfig, LLMEngine, SamplingParams, WeightsConfig
from mediaindex.serving.quant import QuantConfig, QuantizationError, build_split_precision, quantize_model

ARCHS = ["llama", "qwen3_moe"]
LENGTHS = [5, 11, 1, 8]
NEW = 6
GROUP = 32  # fits the tiny models' 32-wide expert MLPs, so the experts are quantized too


def _engine_greedy(model, tok, prompts: list[list[int]], calls: list[str] | None = None, **cfg) -> list[list[int]]:
    """Greedy engine output; `calls` (when given) collects which weight set each forward of each step used."""
    engine = LLMEngine(model, tok, EngineConfig(page_size=4, num_pages=64, quant_group_size=GROUP, **cfg))
    if calls is not None:
        runner = engine.runner
        forward = runner._forward

        def traced(model, batch):
            calls.append("decode" if model is runner.decode_model else "prefill")
            return forward(model, batch)

        runner._forward = traced  # type: ignore[method-assign]
        step = engine.step

        def traced_step():
            calls.append("|")
            return step()

        engine.step = traced_step  # type: ignore[method-assign]
    outs = engine.generate(prompts, SamplingParams(max_tokens=NEW, ignore_eos=True))
    assert all(o.error is None and o.finish_reason == "length" for o in outs), [o.error for o in outs]
    return [o.token_ids for o in outs]


def _split_reference(prefill_model, decode_model, prompt: list[int]) -> list[int]:
    """Prompt through the prefill view, then each generated token through the decode view, one shared cache."""
    cache = DynamicCache(config=prefill_model.config)
    with torch.inference_mode():
        logits = prefill_model(input_ids=torch.tensor([prompt]), past_key_values=cache, use_cache=True).logits
        out = [int(logits[0, -1].argmax())]
        while len(out) < NEW:
            logits = decode_model(input_ids=torch.tensor([out[-1:]]), past_key_values=cache, use_cache=True).logits
            out.append(int(logits[0, -1].argmax()))
    return out


@pytest.mark.parametrize("arch", ARCHS)
def test_int8_engine_matches_generate_of_the_quantized_model(arch, tiny_models, char_tokenizer, h):
    model, ref = tiny_models(arch)
    quantize_model(ref, QuantConfig(bits=8, group_size=GROUP))
    prompts = h.random_prompts(LENGTHS)
    want = [h.hf_greedy(ref, p, NEW) for p in prompts]
    # Quantized by the engine from its config, and handed over already quantized: both match.
    assert _engine_greedy(model, char_tokenizer, prompts, weights={"prefill": "int8", "decode": "int8"}) == want
    _, again = tiny_models(arch)
    quantize_model(again, QuantConfig(bits=8, group_size=GROUP))
    assert _engine_greedy(again, char_tokenizer, prompts) == want


@pytest.mark.parametrize("arch", ARCHS)
def test_split_precision_matches_int8_prefill_int4_decode_reference(arch, tiny_models, char_tokenizer, h):
    model, ref = tiny_models(arch)
    split = build_split_precision(ref, prefill="int8", decode="int4", config=QuantConfig(group_size=GROUP))
    prompts = h.random_prompts(LENGTHS)
    want = [_split_reference(split.prefill_model, split.decode_model, p) for p in prompts]
    int4_only = [_split_reference(split.decode_model, split.decode_model, p) for p in prompts]
    int8_only = [_split_reference(split.prefill_model, split.prefill_model, p) for p in prompts]
    assert want != int4_only and want != int8_only, "the test must tell the two weight sets apart"
    weights = {"prefill": "int8", "decode": "int4"}
    assert _engine_greedy(copy.deepcopy(model), char_tokenizer, prompts, weights=weights) == want
    # A 6-token budget chunks the prompts, so some steps mix prompt chunks with decodes: two forwards each.
    calls: list[str] = []
    got = _engine_greedy(model, char_tokenizer, prompts, calls, weights=weights, max_num_batched_tokens=6)
    assert got == want
    steps = "".join(c[0] for c in calls).split("|")
    assert "dp" in steps and "p" in steps and "d" in steps, steps


def test_split_precision_model_is_accepted_and_weights_then_refused(tiny_models, char_tokenizer, h):
    model, _ = tiny_models("llama")
    split = build_split_precision(model, prefill="int8", decode="int4", config=QuantConfig(group_size=GROUP))
    prompts = h.random_prompts(LENGTHS[:2])
    want = [_split_reference(split.prefill_model, split.decode_model, p) for p in prompts]
    assert _engine_greedy(split, char_tokenizer, prompts) == want
    with pytest.raises(QuantizationError, match="already quantized"):
        LLMEngine(split, char_tokenizer, EngineConfig(num_pages=8, weights=WeightsConfig(prefill="int8")))


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ({"prefill": "int4", "decode": "int4"}, "prefill"),
        ({"prefill": "fp8", "decode": "int4"}, "prefill"),
        ({"prefill": "int8", "decode": "int2"}, "decode"),
        ({"prefill": "bf16", "decode": "fp32"}, "one dtype"),
        ({"prefill": "int8", "decode": "int4", "bits": 3}, "bits"),
    ],
)
def test_bad_weights_settings_are_refused(weights, message):
    with pytest.raises(ValidationError, match=message):
        EngineConfig(weights=weights)


def test_bad_group_size_is_refused(tiny_models, char_tokenizer):
    model, _ = tiny_models("llama")
    with pytest.raises(ValidationError, match="quant_group_size"):
        EngineConfig(quant_group_size=4)
    with pytest.raises(QuantizationError, match="multiple of 8"):
        LLMEngine(model, char_tokenizer, EngineConfig(num_pages=8, weights={"decode": "int8"}, quant_group_size=60))


def test_llm_settings_pass_weights_to_the_engine_config():
    from mediaindex.agents.llm import engine_config
    from mediaindex.config import load_settings
    from mediaindex.errors import ConfigError

    settings = load_settings("gpu")
    assert settings.llm.weights is not None
    cfg = engine_config(settings.llm.model_copy(update={"device": "cpu"}))
    assert cfg.weights == WeightsConfig(prefill="int8", decode="int4") and cfg.quant_group_size == 64
    assert engine_config(load_settings("cpu").llm).weights is None
    with pytest.raises(ConfigError, match="llm.weights.decode"):
        load_settings("cpu", llm={"weights": {"prefill": "int8", "decode": "int3"}})
