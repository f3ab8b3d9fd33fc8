"""LLM serving core: continuous batching over a paged KV cache (FP32/BF16 or FP8 pages) on transformers models."""

from mediaindex.serving.config import EngineConfig, WeightsConfig
from mediaindex.serving.engine import EngineMetrics, LLMEngine, RequestOutput
from mediaindex.serving.errors import InvalidRequestError, KVIntegrityError, ServingError, UnknownRequestError
from mediaindex.serving.sampling import SamplingParams

__all__ = [
    "EngineConfig",
    "EngineMetrics",
    "InvalidRequestError",
    "KVIntegrityError",
    "LLMEngine",
    "RequestOutput",
    "SamplingParams",
    "ServingError",
    "UnknownRequestError",
    "WeightsConfig",
]
