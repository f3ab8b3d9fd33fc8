"""Packed CPU weights are built once and cached; a truncated, bit-flipped or unrecorded cache file is found by
its hash, reported and rebuilt (never loaded), and the model computes the same outputs either way."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from mediaindex.serving.quant.cpu_int4 import int4_kernel_available
from mediaindex.serving.quant.cpu_weights import CpuQuantReport, CpuWeights, quantize_cpu, source_fingerprint
from mediaindex.serving.quant.packed_cache import packed_cache_path

pytestmark = pytest.mark.skipif(not int4_kernel_available(), reason="no aten::_weight_int4pack_mm_for_cpu here")

WEIGHTS = CpuWeights(body="int4", head="int8", group_size=64, prefill="quantized")
IDS = torch.randint(0, 512, (1, 12), generator=torch.Generator().manual_seed(5))


def _model() -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=512, hidden_size=256, intermediate_size=640, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    return Qwen2ForCausalLM(config).to(torch.bfloat16).eval()


def _load(cache: Path) -> tuple[CpuQuantReport, torch.Tensor]:
    model = _model()
    report = quantize_cpu(model, WEIGHTS, model_id="tiny-qwen", name="tiny-qwen", cache_dir=cache)
    with torch.no_grad():
        return report, model(IDS).logits


@pytest.fixture
def built(tmp_path: Path) -> tuple[Path, torch.Tensor]:
    report, logits = _load(tmp_path)
    assert not report.from_cache and report.cache_path is not None and report.cache_path.exists()
    assert report.cache_path.name.startswith("tiny-qwen-int4-head-int8-")
    return report.cache_path, logits


def test_the_second_load_reads_the_cache_with_the_same_outputs(built: tuple[Path, torch.Tensor],
                                                               tmp_path: Path) -> None:
    path, first = built
    record = json.loads(path.with_suffix(".json").read_text())
    assert len(record["sha256"]) == 64 and record["bytes"] == path.stat().st_size
    assert record["build"]["torch"] == torch.__version__ and record["build"]["group_size"] == 64
    report, again = _load(tmp_path)
    assert report.from_cache and report.int4_layers == 14 and report.int8_layers == 1
    assert torch.equal(again, first)


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _flip_a_bit(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) - 100] ^= 0x10  # inside the last tensor's bytes: the size stays, the hash does not
    path.write_bytes(bytes(data))


def _drop_the_record(path: Path) -> None:
    path.with_suffix(".json").write_text("{not json")


@pytest.mark.parametrize("damage", [_truncate, _flip_a_bit, _drop_the_record])
def test_a_damaged_cache_is_rebuilt_not_loaded(built: tuple[Path, torch.Tensor], tmp_path: Path,
                                               caplog: pytest.LogCaptureFixture,
                                               damage: Callable[[Path], None]) -> None:
    path, first = built
    damage(path)
    with caplog.at_level(logging.WARNING, logger="mediaindex.serving.quant.packed_cache"):
        report, again = _load(tmp_path)
    assert not report.from_cache
    assert any("rebuilding" in r.getMessage() and str(path) in r.getMessage() for r in caplog.records)
    assert torch.equal(again, first)
    report, third = _load(tmp_path)  # the rebuilt entry is whole again
    assert report.from_cache and torch.equal(third, first)


def test_entries_differ_by_format_group_and_torch_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    build = {"name": "m", "model": "m", "format": "int4-head-bf16", "group_size": 64}
    base = packed_cache_path(tmp_path, build)
    assert packed_cache_path(tmp_path, {**build, "group_size": 128}) != base
    assert packed_cache_path(tmp_path, {**build, "format": "int8-head-bf16"}) != base
    monkeypatch.setattr(torch, "__version__", "0.0.0")
    assert packed_cache_path(tmp_path, build) != base


def test_a_changed_checkpoint_gets_a_new_fingerprint(tmp_path: Path) -> None:
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"x" * 10)
    first = source_fingerprint(str(tmp_path))
    weights.write_bytes(b"y" * 11)
    assert source_fingerprint(str(tmp_path)) != first
    assert source_fingerprint("Qwen/Qwen2.5-0.5B") == "Qwen/Qwen2.5-0.5B"


def test_an_unwritable_cache_is_reported_and_the_model_still_runs(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the cache folder should be")
    with caplog.at_level(logging.WARNING, logger="mediaindex.serving.quant.packed_cache"):
        report, logits = _load(blocker)
    assert not report.from_cache and torch.isfinite(logits.float()).all()
    assert any("cannot write the packed weights cache" in r.getMessage() for r in caplog.records)
