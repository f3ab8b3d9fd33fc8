"""FP8 KV scales are a property of the model, not of the traffic: fixed by one calibration pass at load, so what
ran before a request never changes its tokens."""

from __future__ import annotations

import copy

import pytest
import torch

from mediaindex.serving import EngineConfig, LLMEngine, SamplingParams

QUESTIONS = [
    "What is the capital of France?",
    "Write a haiku about a video archive.",
    "How many minutes are in a day?",
    "Name three colours of the rainbow.",
]


def _fp8(model, tok, **cfg) -> LLMEngine:
    return LLMEngine(copy.deepcopy(model), tok, EngineConfig(page_size=16, num_pages=256, kv_cache_dtype="fp8_e4m3", **cfg))


def test_scales_are_set_at_load_and_identical_across_engines(tiny_models, char_tokenizer):
    model, _ = tiny_models("llama")
    first = _fp8(model, char_tokenizer)
    assert all(first.kv_cache.calibrated)
    assert first.block_manager.num_used == 0 and first.block_manager.num_free == 256
    scales = first.kv_cache.k_scale.clone(), first.kv_cache.v_scale.clone()
    first.generate(["hi"], SamplingParams(max_tokens=4, ignore_eos=True))
    second = _fp8(model, char_tokenizer)
    for a, b in zip(scales, (second.kv_cache.k_scale, second.kv_cache.v_scale), strict=True):
        assert torch.equal(a, b)
    assert torch.equal(first.kv_cache.k_scale, scales[0]), "traffic changed the scales"


def test_small_pool_and_short_context_still_calibrate(tiny_models, char_tokenizer):
    model, _ = tiny_models("llama")
    engine = LLMEngine(model, char_tokenizer, EngineConfig(page_size=4, num_pages=3, kv_cache_dtype="fp8_e4m3"))
    assert all(engine.kv_cache.calibrated) and engine.block_manager.num_free == 3


def _order_test(model, tok, params: SamplingParams) -> None:
    alone = _fp8(model, tok).generate(QUESTIONS, params)
    engine = _fp8(model, tok)
    engine.generate(["hi"], params)  # the request written first used to set the scales
    after = engine.generate(QUESTIONS, params)
    assert [o.token_ids for o in after] == [o.token_ids for o in alone]


def test_earlier_request_does_not_change_tokens_tiny(tiny_models, char_tokenizer):
    model, _ = tiny_models("qwen3_moe")
    _order_test(model, char_tokenizer, SamplingParams(max_tokens=16, ignore_eos=True))


@pytest.mark.slow
def test_earlier_request_does_not_change_tokens_smollm2(smollm2):
    model, tok = smollm2
    _order_test(model, tok, SamplingParams(max_tokens=32))
