"""Guided decoding: a request's output always matches its grammar, whatever the (random) model prefers, and its
neighbours in the batch are untouched."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from mediaindex.serving import EngineConfig, Guide, InvalidRequestError, LLMEngine, SamplingParams
from mediaindex.serving.config import DisaggConfig
from mediaindex.serving.disagg import DisaggregatedLLM

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"enum": ["search", "get_transcript"]},
        "arguments": {
            "type": "object",
            "properties": {"query": {"type": "string", "minLength": 1, "maxLength": 12},
                           "limit": {"type": "integer", "minimum": 1, "maximum": 9}},
            "required": ["query", "limit"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "arguments"],
    "additionalProperties": False,
}
PATTERN = r"[0-9]{3}-[a-z]{2}( ok)?"


def _text(tok, out) -> str:
    """The char tokenizer has no decoder (its decode() puts spaces between tokens): join the pieces."""
    return "".join(t for t in tok.convert_ids_to_tokens(out.token_ids) if t != tok.eos_token)


def _engine(model, tok, **kw) -> LLMEngine:
    return LLMEngine(model, tok, EngineConfig(**{"page_size": 4, "num_pages": 64, **kw}))


@pytest.mark.parametrize("arch", ["llama", "qwen3_moe", "deepseek_v3"])
def test_output_matches_the_json_schema_and_neighbours_are_untouched(arch, tiny_models, char_tokenizer, h):
    model, ref_model = tiny_models(arch)
    prompts = h.random_prompts([7, 12, 5])
    free = SamplingParams(max_tokens=20, ignore_eos=True)
    guided = SamplingParams(max_tokens=120, guide=Guide.json_schema(SCHEMA))
    sampled = SamplingParams(max_tokens=120, guide=Guide.json_schema(SCHEMA), temperature=1.0, seed=3)
    outs = _engine(model, char_tokenizer).generate(prompts, [guided, free, sampled])
    for o in (outs[0], outs[2]):
        assert o.error is None and o.finish_reason == "stop", (o.text, o.finish_reason)
        jsonschema.validate(json.loads(_text(char_tokenizer, o)), SCHEMA)
    alone = _engine(ref_model, char_tokenizer).generate([prompts[1]], free)[0]
    assert outs[1].token_ids == alone.token_ids  # the guided rows' masks did not leak into the free row


def test_regex_guide_and_preemption(tiny_models, char_tokenizer, h):
    """A pool too small for all requests at once: preempted guided requests resume their grammar where they were."""
    model, _ = tiny_models("llama")
    prompts = h.random_prompts([9, 9, 9, 9], seed=1)
    params = SamplingParams(max_tokens=12, guide=Guide.regex(PATTERN))
    engine = _engine(model, char_tokenizer, num_pages=12)
    outs = engine.generate(prompts, params)
    for o in outs:
        assert o.error is None and re.fullmatch(PATTERN, _text(char_tokenizer, o)), _text(char_tokenizer, o)
    assert engine.metrics().num_preemptions > 0


def test_guided_requests_through_prefill_and_decode_workers(tiny_models, char_tokenizer, h):
    """The prefill worker samples the first token under the grammar; the decode worker continues it."""
    model, ref_model = tiny_models("qwen3_moe")
    prompts = h.random_prompts([6, 11])
    params = SamplingParams(max_tokens=120, guide=Guide.json_schema(SCHEMA))
    expected = [o.token_ids for o in _engine(ref_model, char_tokenizer).generate(prompts, params)]
    config = DisaggConfig(prefill=EngineConfig(page_size=4, num_pages=64),
                          decode=EngineConfig(page_size=4, num_pages=64, kv_cache_dtype="fp32"))
    outs = DisaggregatedLLM.local(model, char_tokenizer, config).generate(prompts, params)
    assert [o.token_ids for o in outs] == expected
    for o in outs:
        jsonschema.validate(json.loads(_text(char_tokenizer, o)), SCHEMA)


@pytest.mark.parametrize(("make", "message"), [
    (lambda: Guide(""), "non-empty EBNF"),
    (lambda: Guide("x" * 300_000), "at most"),
    (lambda: Guide.json_schema({"type": "no-such-type"}), "invalid JSON schema"),
    (lambda: Guide.regex("(unclosed"), "invalid regular expression"),
    (lambda: SamplingParams(guide="root ::= \"a\""), "guide must be a Guide"),
])
def test_bad_guides_are_refused(make, message):
    with pytest.raises(InvalidRequestError, match=message):
        make()


def test_a_grammar_that_does_not_compile_fails_only_its_request(tiny_models, char_tokenizer, h):
    model, _ = tiny_models("llama")
    engine = _engine(model, char_tokenizer)
    with pytest.raises(InvalidRequestError, match="does not compile"):
        engine.add_request(h.random_prompts([5])[0], SamplingParams(guide=Guide("root ::= undefined_rule")))
    out = engine.generate(h.random_prompts([5]), SamplingParams(max_tokens=8, guide=Guide.regex("[ab]{8}")))[0]
    assert out.error is None and re.fullmatch("[ab]{8}", _text(char_tokenizer, out))
