"""Engine configuration."""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

KVCacheDType = Literal["auto", "bf16", "fp32", "fp8_e4m3"]


class EngineConfig(BaseModel):
    """Settings of one `LLMEngine`. All sizes are fixed at start: the KV pool is allocated once."""

    model_config = ConfigDict(extra="forbid")

    page_size: int = Field(16, ge=1, le=4096, description="tokens per KV page")
    kv_cache_dtype: KVCacheDType = Field(
        "auto",
        description="KV page storage: auto = bf16 on CUDA, fp32 on CPU; fp8_e4m3 stores bytes with per-layer/head scales",
    )
    kv_cache_memory_bytes: int | None = Field(
        None, ge=1, description="memory budget for KV pages; the pool gets as many pages as fit"
    )
    num_pages: int | None = Field(None, ge=1, description="explicit pool size; overrides kv_cache_memory_bytes")
    max_num_seqs: int = Field(64, ge=1, description="most requests running at once")
    max_num_batched_tokens: int = Field(512, ge=1, description="token budget of one step (chunked prefill)")
    max_model_len: int | None = Field(None, ge=2, description="context limit; default: the model's own")
    enable_prefix_sharing: bool = True
    integrity_checks: bool = Field(False, description="verify KV page ownership before every step (issue: KV integrity)")
    device: str = "cpu"

    @model_validator(mode="after")
    def _needs_pool_size(self) -> EngineConfig:
        if self.kv_cache_memory_bytes is None and self.num_pages is None:
            # A modest default keeps tests and laptops safe; servers set a budget explicitly.
            self.kv_cache_memory_bytes = 256 * 1024 * 1024
        return self

    def storage_dtype(self) -> torch.dtype:
        """The dtype K/V values have when read back (fp8 pages are dequantised to the compute dtype)."""
        kind = self.resolved_kv_dtype()
        return {"bf16": torch.bfloat16, "fp32": torch.float32, "fp8_e4m3": torch.float8_e4m3fn}[kind]

    def resolved_kv_dtype(self) -> Literal["bf16", "fp32", "fp8_e4m3"]:
        if self.kv_cache_dtype == "auto":
            return "bf16" if self.device.startswith("cuda") else "fp32"
        return self.kv_cache_dtype
