"""Int8 weights on torch's packed CPU matmul: close to the full-precision layer, and the real model still
predicts the same tokens."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from mediaindex.serving.quant.cpu_int8 import Int8Linear, int8_kernel_available, quantize_int8_cpu

pytestmark = pytest.mark.skipif(not int8_kernel_available(), reason="no aten::_weight_int8pack_mm in this torch")


def test_one_layer_matches_its_full_precision_result() -> None:
    torch.manual_seed(0)
    linear = nn.Linear(576, 1536, bias=True)
    x = torch.randn(3, 5, 576)
    q = Int8Linear.from_linear(linear)
    assert q.codes.dtype == torch.int8 and q.codes.shape == (1536, 576) and q.scales.shape == (1536,)
    ref, out = linear(x), q(x)
    assert out.shape == ref.shape and out.dtype == x.dtype
    assert ((out - ref).norm() / ref.norm()).item() < 0.02


def test_smollm2_predicts_the_same_tokens() -> None:
    from mediaindex.serving.model_runner import load_smollm2

    # Two reference transcripts of the sample media (jfk.flac, 2412-153948-0000.flac): 57 tokens. A token can
    # flip only where bf16 itself barely chose (its top two logits within bf16's own step there, ~0.125):
    # on an AMD EPYC 2 of the 16 of the first text did, at margins of 0.12, so 16 tokens alone said 0.875.
    texts = ["And so, my fellow Americans: ask not what your country can do for you",
             "If the reader will excuse me, I will say nothing of my antecedents, nor of the circumstances which "
             "led me to leave my native country. The narrative would be tedious to him and painful to myself."]
    model, tok = load_smollm2(dtype=torch.bfloat16)
    ids = [tok(t, return_tensors="pt").input_ids for t in texts]
    with torch.no_grad():
        ref = torch.cat([model(i).logits.float()[0] for i in ids])
        replaced = quantize_int8_cpu(model)
        out = torch.cat([model(i).logits.float()[0] for i in ids])
    assert replaced == sum(isinstance(m, Int8Linear) for m in model.modules()) > 100
    assert not isinstance(model.lm_head, Int8Linear)
    same = ref.argmax(-1) == out.argmax(-1)
    top2 = ref.topk(2, -1).values
    clear = top2[:, 0] - top2[:, 1] > 0.5  # bf16 chose with a margin of four of its steps or more
    assert clear.sum() > 20 and bool(same[clear].all()), (top2[:, 0] - top2[:, 1])[~same]
    assert same.float().mean().item() >= 0.9, same.float().mean().item()


def test_the_cpu_weights_setting_names_its_choices_and_reads_the_former_key(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from mediaindex.config import LLMSettings, load_settings
    from mediaindex.errors import ConfigError

    monkeypatch.delenv("MEDIAINDEX_LLM__CPU_WEIGHTS", raising=False)  # the suite's own choice would win over files

    assert LLMSettings(cpu_int8=True).cpu_weights == "int8"  # the former boolean still means int8
    assert LLMSettings(cpu_int8=False).cpu_weights == "bf16"
    assert LLMSettings(cpu_int8="true").cpu_weights == "int8"  # as an environment variable gives it
    profile = tmp_path / "p.yaml"
    for body, message in [("cpu_weights: int3", "'bf16', 'int8' or 'int4'"),
                          ("cpu_group_size: 48", "32, 64, 128 or 256"),
                          ("cpu_activations: int4", "'int8' or 'bf16'"),
                          ("cpu_int8: sometimes", "llm.cpu_int8 is now llm.cpu_weights"),
                          ("cpu_int8: true\n  cpu_weights: int4", "disagree"),
                          ("cpu_weights: int4\n  weights: {decode: int4}", "exclude each other")]:
        profile.write_text(f"llm:\n  {body}\n")
        with pytest.raises(ConfigError, match=message):
            load_settings(profile)
    profile.write_text("llm:\n  cpu_weights: int4\n  cpu_head: int8\n  cpu_group_size: 128\n")
    llm = load_settings(profile).llm
    assert (llm.cpu_weights, llm.cpu_head, llm.cpu_group_size, llm.cpu_prefill) == ("int4", "int8", 128, "bf16")
    # The head follows the weights unless set: int8 under int8 / int4, bf16 under bf16.
    assert LLMSettings(cpu_weights="int4").cpu_head_weights == "int8"
    assert LLMSettings(cpu_weights="bf16").cpu_head_weights == "bf16" and LLMSettings().cpu_group_size == 32
    # The default decodes on int8 weights, unless HQQ weights are configured (they replace the CPU formats).
    assert (LLMSettings().cpu_weights, LLMSettings().cpu_head_weights) == ("int8", "int8")
    assert LLMSettings().cpu_activations == "int8"  # decode batches on the batched kernel where it can run
    assert LLMSettings(weights={"decode": "int4"}).cpu_weights == "bf16"
    assert LLMSettings(cpu_weights="int8", cpu_head="bf16").cpu_head_weights == "bf16"


def test_codes_off_a_64_byte_boundary_are_realigned_before_the_kernel_reads_them() -> None:
    # Tensors read from a cache file start wherever the file puts them; the int8 kernel crashed the process on
    # such codes for some row counts.
    torch.manual_seed(2)
    reference = Int8Linear.from_linear(nn.Linear(896, 256, bias=False))
    raw = torch.empty(reference.codes.numel() + 8, dtype=torch.int8)
    shifted = raw[8:].view(256, 896)
    shifted.copy_(reference.codes)
    assert shifted.data_ptr() % 64 != 0
    layer = Int8Linear(shifted, reference.scales, None)
    assert layer.codes.data_ptr() % 64 == 0
    for rows in range(1, 32):
        x = torch.randn(rows, 896)
        assert torch.equal(layer(x), reference(x))
