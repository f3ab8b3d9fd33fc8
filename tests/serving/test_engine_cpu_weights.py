"""The engine on int8 / int4 CPU weights (torch's weight-only kernels): greedy output equals transformers'
generate on the same packed model, with the prompts batched and decoded together."""

from __future__ import annotations

import pytest
import torch

from mediaindex.serving import EngineConfig, LLMEngine, SamplingParams
from mediaindex.serving.quant.cpu_int4 import Int4Linear, int4_kernel_available
from mediaindex.serving.quant.cpu_weights import CpuWeights, quantize_cpu

pytestmark = pytest.mark.skipif(not int4_kernel_available(), reason="no aten::_weight_int4pack_mm_for_cpu here")

LENGTHS = [5, 11, 1, 8]
NEW = 6


@pytest.mark.parametrize("body", ["int8", "int4"])
def test_engine_on_packed_cpu_weights_matches_generate(body, tiny_models, char_tokenizer, h):
    model, ref = tiny_models("llama")
    # Every call on the packed kernels: with bf16 weights kept (prefill="bf16") a batch of 8 rows or more takes the
    # dense path, so batching prompts together would change which path a prompt's rows take.
    weights = CpuWeights(body=body, head="int8", group_size=32, prefill="quantized")
    for m in (model, ref):  # HQQ's solver is deterministic: both copies get the same codes
        quantize_cpu(m, weights, model_id="tiny-llama")
    assert any(isinstance(m, Int4Linear) for m in model.modules()) == (body == "int4")
    prompts = h.random_prompts(LENGTHS)
    with torch.inference_mode():
        want = [h.hf_greedy(ref, p, NEW) for p in prompts]
    engine = LLMEngine(model, char_tokenizer, EngineConfig(page_size=4, num_pages=64))
    outs = engine.generate(prompts, SamplingParams(max_tokens=NEW, ignore_eos=True))
    assert all(o.error is None and o.finish_reason == "length" for o in outs), [o.error for o in outs]
    assert [o.token_ids for o in outs] == want
