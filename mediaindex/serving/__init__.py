"""LLM serving core: continuous batching over a paged KV cache (FP32/BF16 or FP8 pages) on transformers models.

Disaggregated prefill/decode (two Ray actors with a checksummed KV handoff): `mediaindex.serving.disagg`."""

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
