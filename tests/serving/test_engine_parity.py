"""Greedy output of the engine with a high-precision (fp32) KV cache equals transformers' own generate, token for
token, for every supported architecture: single requests, batches of different lengths, chunked prefill, and
runs where the pool is so small that requests get preempted and recomputed."""

from __future__ import annotations

import pytest

from mediaindex.serving import EngineConfig, LLMEngine, SamplingParams

ARCHS = ["llama", "qwen3_moe", "mixtral", "deepseek_v3"]
LENGTHS = [5, 17, 9, 23, 1]
NEW = 16


@pytest.fixture(scope="module")
def references(tiny_models, h):
    """arch -> transformers greedy continuations of the prompts (computed once per arch)."""
    cache: dict[str, list[list[int]]] = {}

    def get(arch: str) -> list[list[int]]:
        if arch not in cache:
            _, ref = tiny_models(arch)
            cache[arch] = [h.hf_greedy(ref, p, NEW) for p in h.random_prompts(LENGTHS)]
        return cache[arch]

    return get


def _run(model, tok, prompts, **cfg) -> tuple[list[list[int]], LLMEngine]:
    engine = LLMEngine(model, tok, EngineConfig(**cfg))
    outs = engine.generate(prompts, SamplingParams(max_tokens=NEW, ignore_eos=True))
    assert all(o.error is None and o.finish_reason == "length" for o in outs), [o.error for o in outs]
    assert engine.block_manager.num_used == 0, "all pages return to the pool"
    return [o.token_ids for o in outs], engine


@pytest.mark.parametrize("arch", ARCHS)
def test_single_requests_match_generate(arch, tiny_models, char_tokenizer, references, h):
    model, _ = tiny_models(arch)
    engine = LLMEngine(model, char_tokenizer, EngineConfig(page_size=4, num_pages=64))
    for prompt, ref in zip(h.random_prompts(LENGTHS), references(arch), strict=True):
        (out,) = engine.generate([prompt], SamplingParams(max_tokens=NEW, ignore_eos=True))
        assert out.token_ids == ref


@pytest.mark.parametrize("arch", ARCHS)
def test_batched_requests_match_generate(arch, tiny_models, char_tokenizer, references, h):
    model, _ = tiny_models(arch)
    got, engine = _run(model, char_tokenizer, h.random_prompts(LENGTHS), page_size=4, num_pages=64)
    assert got == references(arch)
    assert engine.metrics().num_preemptions == 0


@pytest.mark.parametrize("arch", ARCHS)
def test_chunked_prefill_matches_generate(arch, tiny_models, char_tokenizer, references, h):
    model, _ = tiny_models(arch)
    # A 7-token budget splits the 17- and 23-token prompts over several steps, mixed with other requests' decodes.
    got, engine = _run(
        model, char_tokenizer, h.random_prompts(LENGTHS), page_size=4, num_pages=64, max_num_batched_tokens=7
    )
    assert got == references(arch)
    assert engine.metrics().prefill_tokens == sum(LENGTHS)


@pytest.mark.parametrize("arch", ARCHS)
def test_preemption_matches_generate(arch, tiny_models, char_tokenizer, references, h):
    model, _ = tiny_models(arch)
    # 10 pages of 4 tokens: the longest request alone needs 10 (23 + 16 tokens), so requests must take turns.
    got, engine = _run(model, char_tokenizer, h.random_prompts(LENGTHS), page_size=4, num_pages=10)
    assert got == references(arch)
    assert engine.metrics().num_preemptions > 0
