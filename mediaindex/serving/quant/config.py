"""Quantization settings and the errors this package raises."""

from __future__ import annotations

import fnmatch
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from mediaindex.errors import ConfigError, ModelLoadError

# Module names (fnmatch patterns on the dotted name) kept in high precision by default. Router
# gates decide which experts run, so their error is amplified; the output head sets the logits
# directly. Embeddings and norms are never nn.Linear, so they are not listed.
DEFAULT_SKIP: tuple[str, ...] = (
    "lm_head",
    "*.lm_head",
    "*.gate",
    "*.router",
    "*.shared_expert_gate",
)

_DTYPES: dict[str, torch.dtype] = {
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float32": torch.float32,
}


class QuantizationError(ConfigError):
    """A model or setting cannot be quantized as asked."""


class QuantCheckpointError(ModelLoadError):
    """A quantized checkpoint on disk is missing, corrupt, truncated or does not match."""


class QuantConfig(BaseModel):
    """How to quantize the large linear weights of a model with HQQ.

    ``bits``: 4 or 8. ``group_size``: weights per (scale, zero) pair along ``axis`` (1 = along the
    input features, which the Gemlite kernels need). ``skip``: fnmatch patterns of module names kept
    in high precision. ``backend``: ``auto`` picks Gemlite on CUDA when installed, else HQQ's
    PyTorch path. ``compute_dtype``: the dtype matmuls run in; ``auto`` keeps each weight's own dtype.
    ``optimize``: HQQ's calibration-free proximal solver for the zero points (off = plain min/max
    rounding, much faster to quantize). ``None`` (default) runs it for 4-bit only: at 8 bits plain
    rounding is already within noise of the original, where the solver can only add error (see
    benchmarks/README.md).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    bits: Literal[4, 8] = 4
    group_size: int = Field(default=64, ge=8, le=4096)
    axis: Literal[0, 1] = 1
    skip: tuple[str, ...] = DEFAULT_SKIP
    quantize_experts: bool = True
    backend: Literal["auto", "pytorch", "gemlite"] = "auto"
    compute_dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    optimize: bool | None = None

    @field_validator("group_size")
    @classmethod
    def _group_size_multiple_of_8(cls, value: int) -> int:
        # HQQ packs along the group dimension and requires a multiple of 8.
        if value % 8:
            raise ValueError(f"group_size must be a multiple of 8, got {value}")
        return value

    @classmethod
    def parse(cls, data: dict[str, Any] | QuantConfig | None = None, **overrides: Any) -> QuantConfig:
        """Build a config from a mapping, turning validation failures into a ConfigError."""
        base = data.model_dump() if isinstance(data, QuantConfig) else dict(data or {})
        base.update(overrides)
        try:
            return cls.model_validate(base)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'config'}: {err['msg']}" for err in exc.errors()
            )
            raise QuantizationError(f"invalid quantization config: {problems}") from exc

    @property
    def solve(self) -> bool:
        """Whether HQQ's solver runs for these settings."""
        return self.bits < 8 if self.optimize is None else self.optimize

    def skips(self, module_name: str) -> bool:
        return any(fnmatch.fnmatchcase(module_name, pattern) for pattern in self.skip)

    def resolve_dtype(self, weight_dtype: torch.dtype) -> torch.dtype:
        if self.compute_dtype == "auto":
            # Integer or float64 weights make no sense as a compute dtype; fall back to float32.
            return weight_dtype if weight_dtype in _DTYPES.values() else torch.float32
        return _DTYPES[self.compute_dtype]


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def dtype_from_name(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise QuantCheckpointError(f"unknown dtype {name!r}")
    return dtype
