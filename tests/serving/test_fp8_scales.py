"""FP8 KV scales belong to each token, not to the traffic: what ran before a request never changes its tokens,
and a token's stored bytes depend on its own K/V alone."""

from __future__ import annotations

import copy

import pytest
import torch

from mediaindex.serving import EngineConfig, LLMEngine, SamplingParams
from mediaindex.serving.kv_cache import FP8_MAX, KVLayout, PagedKVCache

QUESTIONS = [
    "What is the capital of France?",
    "Write a haiku about a video archive.",
    "How many minutes are in a day?",
    "Name three colours of the rainbow.",
]


def test_scales_are_each_tokens_own_amax():
    cache = PagedKVCache(KVLayout(1, 2, 16, 8), 4, 4, "fp8_e4m3")
    g = torch.Generator().manual_seed(0)
    k = torch.randn(6, 2, 16, generator=g) * torch.tensor([0.01, 50.0])[None, :, None]  # heads of far apart ranges
    v = torch.randn(6, 2, 8, generator=g)
    slots = torch.tensor([5, 6, 7, 8, 0, 13])
    cache.write(0, slots, k, v)
    torch.testing.assert_close(cache.k_scale[0].view(-1, 2)[slots], k.abs().amax(-1) / FP8_MAX)
    kk, vv = cache.gather(0, torch.tensor([[1, 2, 0, 3]]), torch.float32)
    order = torch.tensor([1, 2, 3, 4, 8, 13])  # where slots 5, 6, 7, 8, 0, 13 land when pages 1, 2, 0, 3 are gathered
    # e4m3 keeps 3 mantissa bits: within 1/16 relative of each value's own token-and-head maximum.
    err = (kk[0, order] - k).abs() / k.abs().amax(-1, keepdim=True)
    assert err.max() <= 1 / 16
    # A token written again alone gets the same bytes: nothing depends on what else was written.
    before = cache.k[0].clone()
    cache.write(0, slots[2:3], k[2:3], v[2:3])
    assert torch.equal(before, cache.k[0])


def _fp8(model, tok, **cfg) -> LLMEngine:
    return LLMEngine(copy.deepcopy(model), tok,
                     EngineConfig(page_size=16, num_pages=256, kv_cache_dtype="fp8_e4m3", **cfg))


def _order_test(model, tok, params: SamplingParams) -> None:
    alone = _fp8(model, tok).generate(QUESTIONS, params)
    engine = _fp8(model, tok)
    engine.generate(["hi"], params)  # the request written first used to set the scales of everyone after it
    after = engine.generate(QUESTIONS, params)
    assert [o.token_ids for o in after] == [o.token_ids for o in alone]


def test_earlier_request_does_not_change_tokens_tiny(tiny_models, char_tokenizer):
    model, _ = tiny_models("qwen3_moe")
    _order_test(model, char_tokenizer, SamplingParams(max_tokens=16, ignore_eos=True))


@pytest.mark.slow
def test_earlier_request_does_not_change_tokens_smollm2(smollm2):
    model, tok = smollm2
    _order_test(model, tok, SamplingParams(max_tokens=32))
