"""Engine configuration."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

KVCacheDType = Literal["auto", "bf16", "fp32", "fp8_e4m3"]
PrefillWeights = Literal["bf16", "fp32", "int8"]
DecodeWeights = Literal["int4", "int8", "bf16", "fp32"]
AttentionBackend = Literal["auto", "torch", "triton"]


class WeightsConfig(BaseModel):
    """Precision of the weights each phase runs through. bf16 / fp32 are the unquantized weights cast to that
    dtype; int8 / int4 are HQQ (see `mediaindex.serving.quant`). Different prefill and decode values make two
    weight sets over shared embeddings, norms, router gates and output head (split precision)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prefill: PrefillWeights = "bf16"
    decode: DecodeWeights = "int4"

    @model_validator(mode="after")
    def _one_unquantized_dtype(self) -> WeightsConfig:
        high = {self.prefill, self.decode} - {"int4", "int8"}
        if len(high) > 1:
            raise ValueError(f"prefill {self.prefill} with decode {self.decode}: the unquantized weights have one dtype")
        return self

    @property
    def quantized(self) -> bool:
        return "int4" in (self.prefill, self.decode) or "int8" in (self.prefill, self.decode)


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
    integrity_checks: bool = Field(False, description="verify KV page ownership before every step (a request never reads pages that changed owner)")
    device: str = "cpu"
    attention_backend: AttentionBackend = Field(
        "auto",
        description="decode attention: auto = Triton paged kernel on CUDA when available, else the PyTorch reference "
        "(gather + SDPA); torch / triton force one (see mediaindex.serving.attention_backend)",
    )
    weights: WeightsConfig | None = Field(None, description="prefill / decode weight precision; None: as loaded")
    quant_group_size: int = Field(64, ge=8, le=4096, description="HQQ group size for int8 / int4 weights")

    @model_validator(mode="after")
    def _needs_pool_size(self) -> EngineConfig:
        if self.kv_cache_memory_bytes is None and self.num_pages is None:
            # A modest default keeps tests and laptops safe; servers set a budget explicitly.
            self.kv_cache_memory_bytes = 256 * 1024 * 1024
        return self

    def resolved_kv_dtype(self) -> Literal["bf16", "fp32", "fp8_e4m3"]:
        if self.kv_cache_dtype == "auto":
            return "bf16" if self.device.startswith("cuda") else "fp32"
        return self.kv_cache_dtype


HandoffDType = Literal["auto", "fp32", "bf16", "fp8_e4m3"]


class WorkerResources(BaseModel):
    """What one disaggregated worker's Ray actor reserves. GPU fractions let workers share a device; with two or
    more GPUs in the cluster the prefill and decode workers are placed on different GPUs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_cpus: float = Field(1.0, ge=0)
    num_gpus: float = Field(0.0, ge=0, le=1)
    torch_threads: int = Field(0, ge=0, description="torch threads in the worker; 0 = num_cpus rounded, at least 1")

    @property
    def threads(self) -> int:
        return self.torch_threads or max(1, round(self.num_cpus))


class DisaggConfig(BaseModel):
    """Disaggregated serving: a prefill worker and a decode worker, each an engine of its own."""

    model_config = ConfigDict(extra="forbid")

    prefill: EngineConfig = Field(default_factory=EngineConfig, description="high-precision KV (fp32 / bf16)")
    decode: EngineConfig = Field(default_factory=lambda: EngineConfig(kv_cache_dtype="fp8_e4m3"))
    handoff_dtype: HandoffDType = Field(
        "auto", description="dtype of the K/V sent from prefill to decode; auto = the prefill worker's KV dtype"
    )
    prefill_resources: WorkerResources = Field(default_factory=WorkerResources)
    decode_resources: WorkerResources = Field(default_factory=WorkerResources)

    @model_validator(mode="after")
    def _devices_have_gpus(self) -> DisaggConfig:
        if self.prefill.resolved_kv_dtype() == "fp8_e4m3":
            raise ValueError("the prefill worker keeps high-precision KV; set kv_cache_dtype fp8_e4m3 on decode only")
        for name, engine, res in (
            ("prefill", self.prefill, self.prefill_resources),
            ("decode", self.decode, self.decode_resources),
        ):
            if engine.device.startswith("cuda") and res.num_gpus == 0:
                raise ValueError(f"the {name} worker runs on {engine.device} but its resources reserve no GPU")
        return self
