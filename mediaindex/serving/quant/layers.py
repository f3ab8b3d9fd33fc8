"""HQQ-quantized replacements for ``nn.Linear`` and for fused mixture-of-experts weights.

Storage follows HQQ's own layout (``hqq.core.quantize.Quantizer``): a weight ``[out, in]`` is cut
into groups of ``group_size`` values along ``axis`` (1 = along the input features), each group keeps
an fp16 scale and zero point, and the integer codes are packed into uint8 (two 4-bit codes per
byte, HQQ's ``4bit_u8`` packing). Everything lives in registered buffers, so ``state_dict`` is a
plain mapping of tensors that safetensors can store and the modules can be built on the ``meta``
device and filled later without ever holding the full-precision weight.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from hqq.core.bitpack import BitPack
from hqq.core.quantize import Quantizer
from torch import Tensor, nn

from mediaindex.serving.quant import grouped_cpu
from mediaindex.serving.quant.config import QuantConfig, QuantizationError
from mediaindex.serving.quant.routing import SortedSlots, sort_by_expert

log = logging.getLogger(__name__)
_FALLBACKS_LOGGED: set[tuple[str, str]] = set()

# Scales and zero points stay fp16 whatever the compute dtype: bf16 has too few mantissa bits for
# an 8-bit zero point (values up to 255), and fp32 would push 4-bit weights past 30% of bf16 size.
META_DTYPE = torch.float16
_SMALL_WEIGHT = 1 << 18


@dataclass(frozen=True)
class PackSpec:
    """Shapes of the packed codes and of the per-group scale/zero for one 2-D weight."""

    out_features: int
    in_features: int
    bits: int
    group_size: int
    axis: int

    @property
    def numel(self) -> int:
        return self.out_features * self.in_features

    @property
    def n_groups(self) -> int:
        return self.numel // self.group_size

    @property
    def codes_shape(self) -> tuple[int, int]:
        # HQQ reshapes to [groups, group_size] (axis 1) or [group_size, groups] (axis 0), then
        # packs 4-bit codes by pairing the first and second half of the rows.
        rows, cols = (self.n_groups, self.group_size) if self.axis == 1 else (self.group_size, self.n_groups)
        if self.bits == 4:
            rows //= 2
        return rows, cols

    @property
    def meta_shape(self) -> tuple[int, int]:
        return (self.n_groups, 1) if self.axis == 1 else (1, self.n_groups)

    def check(self) -> str | None:
        """Why this weight cannot be quantized with these settings, or None if it can."""
        if self.axis == 1 and self.in_features % self.group_size:
            return f"in_features={self.in_features} is not a multiple of group_size={self.group_size}"
        if self.numel % self.group_size:
            return f"{self.numel} weights are not a multiple of group_size={self.group_size}"
        rows = self.n_groups if self.axis == 1 else self.group_size
        if self.bits == 4 and rows % 2:
            return "4-bit packing needs an even number of rows"
        return None


@contextmanager
def _threads_for(numel: int) -> Iterator[None]:
    # HQQ's solver runs ~20 elementwise passes; on small weights the thread pool's start-up cost
    # dominates them, so those run single-threaded.
    previous = torch.get_num_threads()
    if numel < _SMALL_WEIGHT and previous > 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if torch.get_num_threads() != previous:
            torch.set_num_threads(previous)


def quantize_weight(
    weight: Tensor, spec: PackSpec, *, optimize: bool = True
) -> tuple[Tensor, Tensor, Tensor]:
    """Quantize one ``[out, in]`` weight with HQQ; returns (packed uint8 codes, scale, zero)."""
    reason = spec.check()
    if reason is not None:
        raise QuantizationError(f"cannot quantize a {tuple(weight.shape)} weight: {reason}")
    with _threads_for(spec.numel):
        codes, meta = Quantizer.quantize(
            weight.detach(),
            nbits=spec.bits,
            channel_wise=True,
            group_size=spec.group_size,
            optimize=optimize,
            # Same choice as HQQ's own default config (hqq_base_quant_config).
            round_zero=spec.bits == 4,
            axis=spec.axis,
            bitpack=True,
            device=str(weight.device),
        )
    codes = codes.to(torch.uint8).contiguous()
    scale = meta["scale"].to(META_DTYPE).contiguous()
    zero = meta["zero"].to(META_DTYPE).contiguous()
    if tuple(codes.shape) != spec.codes_shape or tuple(scale.shape) != spec.meta_shape:
        raise QuantizationError(
            f"unexpected HQQ layout {tuple(codes.shape)}/{tuple(scale.shape)} for {spec}; "
            "this hqq version is not supported"
        )
    return codes, scale, zero


def unpack_codes(codes: Tensor, bits: int, dtype: torch.dtype = torch.float32) -> Tensor:
    if bits == 4:
        return BitPack.unpack_4bit_u8(codes, dtype=dtype)
    return BitPack.unpack_8bit_u8(codes, dtype=dtype)


def dequantize_weight(
    codes: Tensor, scale: Tensor, zero: Tensor, spec: PackSpec, dtype: torch.dtype
) -> Tensor:
    """HQQ's dequantization ``(q - zero) * scale``, computed in fp32 and cast once at the end."""
    q = unpack_codes(codes, spec.bits)
    s = scale.float()
    # addcmul does q * s - zero * s in one pass over the large tensor.
    w = torch.addcmul(-(zero.float() * s), q, s)
    return w.reshape(spec.out_features, spec.in_features).to(dtype)


def _empty(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str | None) -> Tensor:
    return torch.empty(shape, dtype=dtype, device=device)


class QuantLinear(nn.Module):
    """Drop-in for ``nn.Linear`` holding HQQ-packed weights; dequantizes per call (HQQ's PyTorch path)
    unless a GPU kernel was attached by :func:`mediaindex.serving.quant.backends.apply_backend`."""

    # Registered buffers, declared so they type as tensors (nn.Module.__getattr__ says Tensor | Module).
    W_q: Tensor
    scale: Tensor
    zero: Tensor

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        bits: int,
        group_size: int,
        axis: int,
        bias: bool,
        compute_dtype: torch.dtype,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.spec = PackSpec(out_features, in_features, bits, group_size, axis)
        reason = self.spec.check()
        if reason is not None:
            raise QuantizationError(f"cannot build a quantized linear {out_features}x{in_features}: {reason}")
        self.compute_dtype = compute_dtype
        self.register_buffer("W_q", _empty(self.spec.codes_shape, torch.uint8, device))
        self.register_buffer("scale", _empty(self.spec.meta_shape, META_DTYPE, device))
        self.register_buffer("zero", _empty(self.spec.meta_shape, META_DTYPE, device))
        self.bias: Tensor | None
        if bias:
            self.register_buffer("bias", _empty((out_features,), compute_dtype, device))
        else:
            self.bias = None
        # A fused GPU kernel (Gemlite); kept out of state_dict on purpose.
        self._kernel: Callable[[Tensor], Tensor] | None = None

    @property
    def bits(self) -> int:
        return self.spec.bits

    @classmethod
    def from_linear(cls, linear: nn.Linear, config: QuantConfig) -> QuantLinear:
        weight = linear.weight
        compute_dtype = config.resolve_dtype(weight.dtype)
        layer = cls(
            linear.in_features,
            linear.out_features,
            bits=config.bits,
            group_size=config.group_size,
            axis=config.axis,
            bias=linear.bias is not None,
            compute_dtype=compute_dtype,
            device=weight.device,
        )
        codes, scale, zero = quantize_weight(weight.data, layer.spec, optimize=config.solve)
        layer.W_q, layer.scale, layer.zero = codes, scale, zero
        if linear.bias is not None:
            layer.bias = linear.bias.detach().to(compute_dtype).clone()
        return layer

    def dequantize(self, dtype: torch.dtype | None = None) -> Tensor:
        return dequantize_weight(self.W_q, self.scale, self.zero, self.spec, dtype or self.compute_dtype)

    def forward(self, x: Tensor) -> Tensor:
        if self._kernel is not None:
            # Kernels take 2-D activations; keep the caller's leading dimensions.
            flat = x.reshape(-1, self.in_features).to(self.compute_dtype)
            return self._kernel(flat).reshape(*x.shape[:-1], self.out_features).to(x.dtype)
        out = F.linear(x.to(self.compute_dtype), self.dequantize(), self.bias)
        return out.to(x.dtype)

    def extra_repr(self) -> str:
        s = self.spec
        return (
            f"in_features={s.in_features}, out_features={s.out_features}, bits={s.bits}, "
            f"group_size={s.group_size}, axis={s.axis}, bias={self.bias is not None}, "
            f"compute_dtype={self.compute_dtype}"
        )


def is_fused_experts(module: nn.Module) -> bool:
    """True for transformers 5.x experts modules that keep all experts in 3-D parameters."""
    gate_up = getattr(module, "gate_up_proj", None)
    down = getattr(module, "down_proj", None)
    return (
        isinstance(gate_up, torch.Tensor)
        and isinstance(down, torch.Tensor)
        and gate_up.dim() == 3
        and down.dim() == 3
    )


def check_experts_layout(module: nn.Module) -> tuple[int, int, int]:
    """(num_experts, hidden, intermediate) of a fused experts module, or a clear error if its layout
    is one this package does not run (transposed, biased, gateless or interleaved experts)."""
    name = type(module).__name__
    flags = {
        "is_transposed": (getattr(module, "is_transposed", False), False),
        "has_bias": (getattr(module, "has_bias", False), False),
        "has_gate": (getattr(module, "has_gate", True), True),
        "is_concatenated": (getattr(module, "is_concatenated", True), True),
    }
    for flag, (value, wanted) in flags.items():
        if bool(value) != wanted:
            raise QuantizationError(
                f"{name}: experts with {flag}={value} are not supported; add the module to QuantConfig.skip"
            )
    gate_up: Tensor = module.gate_up_proj  # type: ignore[assignment]
    down: Tensor = module.down_proj  # type: ignore[assignment]
    n_experts, two_inter, hidden = gate_up.shape
    if two_inter % 2 or tuple(down.shape) != (n_experts, hidden, two_inter // 2):
        raise QuantizationError(
            f"{name}: gate_up_proj {tuple(gate_up.shape)} and down_proj {tuple(down.shape)} do not form "
            "[E, 2I, H] / [E, H, I]"
        )
    return n_experts, hidden, two_inter // 2


class QuantExperts(nn.Module):
    """Replacement for a fused experts module (Qwen3-MoE, Mixtral, DeepSeek-V3, ...) with every expert
    quantized on its own and stacked: ``gate_up_W_q[e]`` is expert ``e``'s packed ``[2I, H]`` weight.

    ``forward(hidden_states [T, H], top_k_index [T, K], top_k_weights [T, K])`` has the signature of
    the transformers experts it replaces. Token slots are sorted by expert and each projection is one grouped
    call over all experts that reads the packed codes directly: the C kernel on CPU, a Triton kernel on CUDA.
    """

    # Registered buffers, declared so they type as tensors (nn.Module.__getattr__ says Tensor | Module).
    gate_up_W_q: Tensor
    gate_up_scale: Tensor
    gate_up_zero: Tensor
    down_W_q: Tensor
    down_scale: Tensor
    down_zero: Tensor

    def __init__(
        self,
        num_experts: int,
        hidden_dim: int,
        intermediate_dim: int,
        act_fn: nn.Module | Callable[[Tensor], Tensor],
        *,
        bits: int,
        group_size: int,
        axis: int,
        compute_dtype: torch.dtype,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        self.num_experts = num_experts
        self.hidden_dim = hidden_dim
        self.intermediate_dim = intermediate_dim
        self.act_fn = act_fn
        self.compute_dtype = compute_dtype
        self.gate_up_spec = PackSpec(2 * intermediate_dim, hidden_dim, bits, group_size, axis)
        self.down_spec = PackSpec(hidden_dim, intermediate_dim, bits, group_size, axis)
        for spec in (self.gate_up_spec, self.down_spec):
            reason = spec.check()
            if reason is not None:
                raise QuantizationError(
                    f"cannot quantize experts with weights {spec.out_features}x{spec.in_features}: {reason}"
                )
        for prefix, spec in (("gate_up", self.gate_up_spec), ("down", self.down_spec)):
            self.register_buffer(
                f"{prefix}_W_q", _empty((num_experts, *spec.codes_shape), torch.uint8, device)
            )
            self.register_buffer(
                f"{prefix}_scale", _empty((num_experts, *spec.meta_shape), META_DTYPE, device)
            )
            self.register_buffer(
                f"{prefix}_zero", _empty((num_experts, *spec.meta_shape), META_DTYPE, device)
            )
        # "auto" picks the grouped path by device (see grouped_path); tests force "triton" or "reference".
        self.kernel: str = "auto"
        self._paths: dict[str, str] = {}

    @property
    def bits(self) -> int:
        return self.gate_up_spec.bits

    @classmethod
    def skeleton_like(
        cls, experts: nn.Module, config: QuantConfig, device: torch.device | str | None
    ) -> QuantExperts:
        n_experts, hidden, inter = check_experts_layout(experts)
        weight: Tensor = experts.gate_up_proj  # type: ignore[assignment]
        act_fn: Any = experts.act_fn
        return cls(
            n_experts,
            hidden,
            inter,
            act_fn,
            bits=config.bits,
            group_size=config.group_size,
            axis=config.axis,
            compute_dtype=config.resolve_dtype(weight.dtype),
            device=device,
        )

    @classmethod
    def from_experts(cls, experts: nn.Module, config: QuantConfig) -> QuantExperts:
        gate_up: Tensor = experts.gate_up_proj  # type: ignore[assignment]
        down: Tensor = experts.down_proj  # type: ignore[assignment]
        layer = cls.skeleton_like(experts, config, gate_up.device)
        # One expert at a time: HQQ works in fp32, so this bounds the extra memory to one expert.
        for e in range(layer.num_experts):
            for prefix, source, spec in (
                ("gate_up", gate_up, layer.gate_up_spec),
                ("down", down, layer.down_spec),
            ):
                codes, scale, zero = quantize_weight(source[e].data, spec, optimize=config.solve)
                getattr(layer, f"{prefix}_W_q")[e].copy_(codes)
                getattr(layer, f"{prefix}_scale")[e].copy_(scale)
                getattr(layer, f"{prefix}_zero")[e].copy_(zero)
        return layer

    def dequantize_expert(self, expert: int, dtype: torch.dtype | None = None) -> tuple[Tensor, Tensor]:
        dtype = dtype or self.compute_dtype
        gate_up = dequantize_weight(
            self.gate_up_W_q[expert],
            self.gate_up_scale[expert],
            self.gate_up_zero[expert],
            self.gate_up_spec,
            dtype,
        )
        down = dequantize_weight(
            self.down_W_q[expert], self.down_scale[expert], self.down_zero[expert], self.down_spec, dtype
        )
        return gate_up, down

    def forward(self, hidden_states: Tensor, top_k_index: Tensor, top_k_weights: Tensor) -> Tensor:
        path = self.grouped_path(hidden_states.device)
        if path == "reference":
            return self.forward_reference(hidden_states, top_k_index, top_k_weights)
        slots = sort_by_expert(top_k_index, top_k_weights, self.num_experts)
        x = hidden_states.to(self.compute_dtype)
        if path == "triton":
            from mediaindex.serving.quant import triton_moe  # imports triton: CUDA (or its interpreter) only

            y = triton_moe.fused_experts(self, x, slots) * slots.weight_of[:, None]
            # index_add_ on CUDA adds duplicate indices with atomics, in no fixed order; summing each token's
            # top-k slots in place keeps the output the same from run to run.
            per_token = y[slots.inverse_order].view(*top_k_index.shape, -1)
            return per_token.sum(dim=1).to(hidden_states.dtype)
        y = self._grouped_cpu(x[slots.token_of], slots) * slots.weight_of[:, None]
        final = torch.zeros_like(hidden_states)
        # One index_add over all slots in sorted order: each token's contributions are added in the order the
        # reference loop adds them.
        return final.index_add_(0, slots.token_of, y.to(final.dtype))

    def _grouped_cpu(self, x: Tensor, slots: SortedSlots) -> Tensor:
        def project(inputs: Tensor, prefix: str, spec: PackSpec) -> Tensor:
            out = grouped_cpu.grouped_matmul(
                inputs,
                slots.ends,
                getattr(self, f"{prefix}_W_q"),
                getattr(self, f"{prefix}_scale"),
                getattr(self, f"{prefix}_zero"),
                out_features=spec.out_features,
                group_size=spec.group_size,
                bits=spec.bits,
                compute_dtype=self.compute_dtype,
            )
            return out.to(self.compute_dtype)

        gate, up = project(x, "gate_up", self.gate_up_spec).chunk(2, dim=-1)
        return project(self.act_fn(gate) * up, "down", self.down_spec)

    def grouped_path(self, device: torch.device) -> str:
        """Which path runs the experts on ``device``: ``triton`` (CUDA: one fused kernel per projection),
        ``cpu`` (the C grouped kernel) or ``reference`` (a loop over experts, dequantizing each; the fallback,
        with the reason logged once). ``self.kernel`` forces one (tests run ``triton`` in the interpreter)."""
        if self.kernel != "auto":
            return self.kernel
        cached = self._paths.get(device.type)
        if cached is not None:
            return cached
        reason = None
        if device.type == "cuda":
            path = "triton"
            if importlib.util.find_spec("triton") is None:
                reason = "triton is not installed"
            elif self.gate_up_spec.axis != 1 or self.gate_up_spec.group_size % 16:
                reason = "the Triton kernel needs axis=1 and a group size that is a multiple of 16"
        elif device.type == "cpu":
            path = "cpu"
            reason = grouped_cpu.unsupported(
                self.intermediate_dim, self.gate_up_spec.group_size, self.gate_up_spec.axis, self.compute_dtype
            ) or grouped_cpu.unsupported(
                self.hidden_dim, self.gate_up_spec.group_size, self.gate_up_spec.axis, self.compute_dtype
            )
            reason = reason or grouped_cpu.load_kernel()[1]
        else:
            path, reason = "reference", f"no grouped kernel for {device.type} devices"
        if reason is not None:
            path = "reference"
            if (device.type, reason) not in _FALLBACKS_LOGGED:  # once, not once per layer
                _FALLBACKS_LOGGED.add((device.type, reason))
                log.warning("quantized experts run a loop over experts on %s: %s", device.type, reason)
        self._paths[device.type] = path
        return path

    def forward_reference(self, hidden_states: Tensor, top_k_index: Tensor, top_k_weights: Tensor) -> Tensor:
        """HQQ's PyTorch path: a loop over the experts with tokens, dequantizing each one. The fallback, and
        what the grouped paths are tested against."""
        final = torch.zeros_like(hidden_states)
        slots = sort_by_expert(top_k_index, top_k_weights, self.num_experts)
        start = 0
        for expert, count in enumerate(slots.counts.tolist()):
            if count == 0:
                continue
            rows = slots.token_of[start : start + count]
            weights = slots.weight_of[start : start + count, None]
            start += count
            x = hidden_states[rows].to(self.compute_dtype)
            gate_up_w, down_w = self.dequantize_expert(expert)
            gate, up = F.linear(x, gate_up_w).chunk(2, dim=-1)
            y = F.linear(self.act_fn(gate) * up, down_w)
            y = y * weights
            final.index_add_(0, rows, y.to(final.dtype))
        return final

    def extra_repr(self) -> str:
        s = self.gate_up_spec
        return (
            f"num_experts={self.num_experts}, hidden_dim={self.hidden_dim}, "
            f"intermediate_dim={self.intermediate_dim}, bits={s.bits}, group_size={s.group_size}, "
            f"axis={s.axis}, compute_dtype={self.compute_dtype}"
        )
