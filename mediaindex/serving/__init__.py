"""LLM serving core: continuous batching over a paged KV cache (FP32/BF16 or FP8 pages) on transformers models.

Disaggregated prefill/decode (two Ray actors with a checksummed KV handoff): `mediaindex.serving.disagg`.

The names below are imported when first used: a module of the package (its errors, `digest`) is importable without
torch and the engine."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mediaindex.serving.config import DisaggConfig, EngineConfig, WeightsConfig, WorkerResources
    from mediaindex.serving.engine import EngineMetrics, LLMEngine, RequestOutput
    from mediaindex.serving.errors import (
        InvalidRequestError,
        KVHandoffError,
        KVIntegrityError,
        ServingError,
        UnknownRequestError,
        UnsupportedModelError,
    )
    from mediaindex.serving.guided import Guide
    from mediaindex.serving.sampling import SamplingParams

_FROM = {
    **dict.fromkeys(("DisaggConfig", "EngineConfig", "WeightsConfig", "WorkerResources"), "config"),
    **dict.fromkeys(("EngineMetrics", "LLMEngine", "RequestOutput"), "engine"),
    **dict.fromkeys(("InvalidRequestError", "KVHandoffError", "KVIntegrityError", "ServingError",
                     "UnknownRequestError", "UnsupportedModelError"), "errors"),
    "Guide": "guided",
    "SamplingParams": "sampling",
}


def __getattr__(name: str) -> Any:
    if name not in _FROM:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_FROM[name]}"), name)
    globals()[name] = value
    return value


__all__ = [
    "DisaggConfig",
    "EngineConfig",
    "EngineMetrics",
    "Guide",
    "InvalidRequestError",
    "KVHandoffError",
    "KVIntegrityError",
    "LLMEngine",
    "RequestOutput",
    "SamplingParams",
    "ServingError",
    "UnknownRequestError",
    "UnsupportedModelError",
    "WeightsConfig",
    "WorkerResources",
]
