"""Matmul backends for quantized linears: HQQ's PyTorch path everywhere, Gemlite kernels on CUDA.

Quantized experts pick their grouped kernel by device on their own (``QuantExperts.grouped_path``).

``gemlite`` (the optional ``gpu`` extra) is imported lazily and only when CUDA is present: the
package raises at import time on machines without a GPU. Gemlite tunes its kernels per shape; the
tuned configuration is cached per GPU model under ``<data_dir>/gemlite/<gpu-name>.json`` so a restart
does not tune again. Whenever a backend cannot be used, the reason is logged and the layers keep
HQQ's PyTorch path (dequantize, then a dense matmul), which is always correct.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

import torch
from torch import Tensor, nn

from mediaindex.serving.quant.config import QuantizationError
from mediaindex.serving.quant.layers import PackSpec, QuantExperts, QuantLinear, unpack_codes
from mediaindex.serving.quant.model import quantized_modules

log = logging.getLogger(__name__)

Backend = Literal["auto", "pytorch", "gemlite"]
# Gemlite's A16Wn kernels take fp16 or bf16 activations only.
_GEMLITE_DTYPES = (torch.float16, torch.bfloat16)


def gpu_name(device: torch.device | None = None) -> str:
    return torch.cuda.get_device_name(device)


def autotune_cache_path(data_dir: str | os.PathLike[str], device_name: str) -> Path:
    """Where Gemlite's tuned kernel configs for one GPU model live, e.g. ``gemlite/nvidia-h100-80gb-hbm3.json``."""
    slug = re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-") or "unknown-gpu"
    return Path(data_dir) / "gemlite" / f"{slug}.json"


def _model_device(model: nn.Module) -> torch.device:
    for module in quantized_modules(model).values():
        for buf in module.buffers(recurse=False):
            return buf.device
    raise QuantizationError(
        "the model has no quantized layers; call quantize_model() or load_quantized() first"
    )


def _cuda_usable(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_available()


def _import_gemlite() -> ModuleType:
    return importlib.import_module("gemlite")


def resolve_backend(requested: Backend, device: torch.device) -> tuple[str, str | None]:
    """The backend to use on ``device`` and, when it differs from the request, why."""
    if requested not in ("auto", "pytorch", "gemlite"):
        raise QuantizationError(f"unknown quantization backend {requested!r}; use auto, pytorch or gemlite")
    if requested == "pytorch":
        return "pytorch", None
    if not _cuda_usable(device):
        return "pytorch", f"Gemlite needs a CUDA device and the model is on {device}"
    try:
        _import_gemlite()
    except Exception as exc:  # noqa: BLE001 - any import failure means the kernels are unusable
        return "pytorch", f"gemlite cannot be imported ({type(exc).__name__}: {exc}); install the 'gpu' extra"
    return "gemlite", None


def _gemlite_kernel(
    gemlite: ModuleType,
    codes: Tensor,
    scale: Tensor,
    zero: Tensor,
    spec: PackSpec,
    bias: Tensor | None,
    dtype: torch.dtype,
) -> Any:
    # Gemlite packs HQQ's unpacked uint8 codes itself (same zero/scale convention as HQQ, axis 1).
    w_q = unpack_codes(codes, spec.bits, dtype=torch.uint8).reshape(spec.out_features, spec.in_features)
    helper = gemlite.helper if hasattr(gemlite, "helper") else importlib.import_module("gemlite.helper")
    return helper.A16Wn(device=codes.device).from_weights(
        w_q, scale.to(dtype), zero.to(dtype), spec.bits, spec.group_size, bias=bias
    )


def apply_backend(
    model: nn.Module,
    backend: Backend | None = None,
    *,
    data_dir: str | os.PathLike[str] | None = None,
) -> str:
    """Attach the matmul backend to every quantized layer of ``model``; returns the one in use.

    ``backend`` defaults to the model's ``quant_config.backend``. With Gemlite, the autotune cache
    for this GPU is read from ``data_dir`` when present; call :func:`save_autotune_cache` after a
    warm-up to store it. The HQQ buffers stay in place, so the model can still be saved.
    """
    config = getattr(model, "quant_config", None)
    requested: Backend = backend or (config.backend if config is not None else "auto")
    device = _model_device(model)
    chosen, reason = resolve_backend(requested, device)
    layers = quantized_modules(model)
    if chosen == "pytorch":
        if reason is not None and requested == "gemlite":
            log.warning("Gemlite backend requested but unavailable, using HQQ's PyTorch path: %s", reason)
        elif reason is not None:
            log.info("using HQQ's PyTorch path: %s", reason)
        for layer in layers.values():
            _detach(layer)
        model.quant_backend = "pytorch"  # type: ignore[assignment]
        return "pytorch"

    gemlite = _import_gemlite()
    if data_dir is not None:
        cache = autotune_cache_path(data_dir, gpu_name(device))
        if cache.is_file():
            try:
                gemlite.load_config(str(cache))
                log.info("loaded Gemlite autotune cache %s", cache)
            except Exception as exc:  # noqa: BLE001 - a stale cache only costs tuning time
                log.warning("ignoring unreadable Gemlite autotune cache %s: %s", cache, exc)
    fallback = 0
    # Experts are not Gemlite's: on CUDA they run the Triton fused-experts kernel, one launch per projection
    # for all experts (QuantExperts.grouped_path), instead of two Gemlite calls per expert.
    linears = {name: layer for name, layer in layers.items() if isinstance(layer, QuantLinear)}
    for name, layer in linears.items():
        if layer.spec.axis != 1 or layer.compute_dtype not in _GEMLITE_DTYPES:
            log.warning(
                "%s stays on HQQ's PyTorch path: Gemlite needs axis=1 and fp16/bf16 compute (got axis=%d, %s)",
                name,
                layer.spec.axis,
                layer.compute_dtype,
            )
            _detach(layer)
            fallback += 1
            continue
        layer._kernel = _gemlite_kernel(
            gemlite, layer.W_q, layer.scale, layer.zero, layer.spec, layer.bias, layer.compute_dtype
        )
    log.info(
        "Gemlite kernels on %d quantized linears (%d on the PyTorch path)", len(linears) - fallback, fallback
    )
    model.quant_backend = "gemlite"  # type: ignore[assignment]
    return "gemlite"


def _detach(layer: QuantLinear | QuantExperts) -> None:
    if isinstance(layer, QuantLinear):
        layer._kernel = None


def save_autotune_cache(data_dir: str | os.PathLike[str], device: torch.device | None = None) -> Path | None:
    """Store Gemlite's tuned configs for this GPU under ``data_dir``; None when Gemlite is not in use."""
    gemlite = sys.modules.get("gemlite")
    if gemlite is None or not torch.cuda.is_available():
        return None
    path = autotune_cache_path(data_dir, gpu_name(device))
    path.parent.mkdir(parents=True, exist_ok=True)
    gemlite.cache_config(str(path))
    log.info("saved Gemlite autotune cache %s", path)
    return path
