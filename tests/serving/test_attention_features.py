"""Attention features beyond plain causal attention: sliding windows are honoured token-exactly in prefill, chunked
prefill and decode; features the paged path does not implement (logit softcapping, attention sinks) make the
engine refuse the model at load instead of serving output that silently differs from the model's own."""

from __future__ import annotations

import pytest
import torch
from transformers import (
    Gemma2Config,
    Gemma2ForCausalLM,
    GptOssConfig,
    GptOssForCausalLM,
    MixtralConfig,
    MixtralForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
)

from mediaindex.serving import EngineConfig, LLMEngine, SamplingParams, UnsupportedModelError

WINDOW = 16
COMMON = dict(
    vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=512, initializer_range=0.1, eos_token_id=None,
    bos_token_id=None, pad_token_id=None,
)


def _windowed(arch: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if arch == "mixtral":
        model = MixtralForCausalLM(
            MixtralConfig(num_local_experts=4, num_experts_per_tok=2, sliding_window=WINDOW, **COMMON)
        )
    else:
        cfg = Qwen3MoeConfig(
            head_dim=16, moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2, decoder_sparse_step=1,
            use_sliding_window=True, sliding_window=WINDOW, **COMMON,
        )
        assert cfg.sliding_window == WINDOW
        model = Qwen3MoeForCausalLM(cfg)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model.eval()


@pytest.mark.parametrize("arch", ["mixtral", "qwen3_moe"])
@pytest.mark.parametrize("budget", [512, 7], ids=["whole-prompt", "chunked"])
def test_sliding_window_matches_transformers(arch, budget, char_tokenizer, h):
    """Prompts shorter than, equal to and well beyond the window, generating past it: every token equals
    transformers' greedy output. The chunked run splits prompts into 7-token chunks that read earlier chunks
    (partly outside the window) from the pages."""
    model = _windowed(arch)
    prompts = h.random_prompts([5, WINDOW, 40], seed=3)
    refs = [h.hf_greedy(model, p, 24) for p in prompts]
    cfg = EngineConfig(page_size=4, num_pages=128, max_num_batched_tokens=budget)
    engine = LLMEngine(_windowed(arch), char_tokenizer, cfg)
    outs = engine.generate(prompts, SamplingParams(max_tokens=24, ignore_eos=True))
    assert [o.token_ids for o in outs] == refs


def test_window_changes_the_output(char_tokenizer, h):
    """The comparison above has teeth: the same weights without the window give other tokens past it."""
    windowed = _windowed("mixtral")
    full = _windowed("mixtral")
    full.config.sliding_window = None
    prompt = h.random_prompts([40], seed=3)[0]
    assert h.hf_greedy(windowed, prompt, 24) != h.hf_greedy(full, prompt, 24)


def _gemma2() -> torch.nn.Module:
    cfg = Gemma2Config(head_dim=16, attn_logit_softcapping=50.0, final_logit_softcapping=None, **COMMON)
    return Gemma2ForCausalLM(cfg).eval()


def _gpt_oss() -> torch.nn.Module:
    common = {k: v for k, v in COMMON.items() if k != "intermediate_size"}
    cfg = GptOssConfig(head_dim=16, intermediate_size=32, num_local_experts=4, num_experts_per_tok=2, **common)
    return GptOssForCausalLM(cfg).eval()


@pytest.mark.parametrize(("build", "feature"), [(_gemma2, "softcapping"), (_gpt_oss, "attention sinks")])
def test_unimplemented_features_are_refused_at_load(build, feature, char_tokenizer):
    with pytest.raises(UnsupportedModelError, match=feature):
        LLMEngine(build(), char_tokenizer, EngineConfig(page_size=4, num_pages=16))
