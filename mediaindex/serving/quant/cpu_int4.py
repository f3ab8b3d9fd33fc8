"""Int4 weights (HQQ, group-wise) computed by torch's packed int4 CPU matmul, for decoding on a CPU.

Each ``nn.Linear`` is quantized once with HQQ's 4-bit group-wise scheme (asymmetric: a scale and a zero point per
group of ``group_size`` input features, zero points from HQQ's calibration-free solver), and the codes are then
packed once into the layout of ``aten::_weight_int4pack_mm_for_cpu`` (the tinygemm-style kernel torchao uses on
CPU). Every call runs that kernel on bf16 activations: the weights are read as 4-bit codes and never expanded.

The kernel dequantizes as ``w = (q - 8) * scale + offset``; HQQ as ``w = (q - zero) * scale``. So the kernel's
offset is ``(8 - zero) * scale``, with the scale unchanged (both stored as bf16 pairs, ``[groups, out, 2]``).

With 8-bit activations (:meth:`Int4Linear.use_batched_kernel`), calls of up to ``BATCHED_ROWS`` rows (decode
batches) run the project's own kernel instead (:mod:`cpu_batched`), which reads each weight once for all rows.

Prompt chunks (many rows at once) are faster through bf16's dense matmul than through the weight-only kernel:
a layer given the original bf16 weight (``keep_dense``, the split of prefill and decode precision) runs them on it;
without one, long chunks expand the codes for that call (a few vector passes over the kernel's packed layout).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from mediaindex.serving.quant import cpu_batched
from mediaindex.serving.quant.config import QuantizationError
from mediaindex.serving.quant.cpu_int8 import BATCHED_ROWS, aligned
from mediaindex.serving.quant.layers import PackSpec, quantize_weight, unpack_codes

GROUP_SIZES = (32, 64, 128, 256)  # what the CPU kernel accepts
_BLOCK_N = 64  # output rows the packed layout interleaves: row i and row i + 32 of a block share a byte
# The kernel's time grows with the rows it is given, bf16's dense matmul (AMX) barely does: from DENSE_ROWS rows on
# (a decode batch of 8 sequences, a prompt chunk) a kept bf16 weight is faster; from EXPAND_ROWS on, even the weight
# expanded for the call (the expansion is paid once per call, the kernel pays per row).
DENSE_ROWS = 8
EXPAND_ROWS = 256


def int4_kernel_available() -> bool:
    ops = torch.ops.aten
    return hasattr(ops, "_weight_int4pack_mm_for_cpu") and hasattr(ops, "_convert_weight_to_int4pack_for_cpu")


def check_int4_shape(out_features: int, in_features: int, group_size: int) -> str | None:
    """Why a ``[out, in]`` weight cannot go to the int4 kernel with this group size, or None if it can."""
    if group_size not in GROUP_SIZES:
        return f"group_size must be one of {GROUP_SIZES} for the int4 CPU kernel, got {group_size}"
    if in_features % group_size:
        return f"in_features={in_features} is not a multiple of group_size={group_size}"
    if out_features % 16:
        return f"out_features={out_features} is not a multiple of 16"
    return None


def hqq_to_int4pack(codes: Tensor, scale: Tensor, zero: Tensor, spec: PackSpec) -> tuple[Tensor, Tensor]:
    """HQQ's packed 4-bit codes and per-group (scale, zero) → the CPU kernel's packed weight and bf16
    ``[groups, out, 2]`` (scale, offset) pairs."""
    if spec.bits != 4 or spec.axis != 1:
        raise QuantizationError(f"the int4 CPU kernel needs 4-bit codes grouped along the inputs, got {spec}")
    q = unpack_codes(codes, 4, torch.uint8).reshape(spec.out_features, spec.in_features).to(torch.int32)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.contiguous(), 1)
    groups = spec.in_features // spec.group_size
    s = scale.float().reshape(spec.out_features, groups)
    offset = (8.0 - zero.float().reshape(spec.out_features, groups)) * s
    scales_and_zeros = torch.stack([s, offset], dim=-1).transpose(0, 1).contiguous().to(torch.bfloat16)
    return packed, scales_and_zeros


def unpack_int4pack(packed: Tensor, out_features: int, in_features: int) -> Tensor | None:
    """The 0..15 codes ``[out, in]`` of the kernel's packed weight, or None where the layout is not the one
    known here (rows not in blocks of 64): callers then keep to the kernel."""
    if out_features % _BLOCK_N or tuple(packed.shape) != (out_features, in_features // 2):
        return None
    blocks = packed.view(out_features // _BLOCK_N, in_features, _BLOCK_N // 2)  # [block, k, i]
    low, high = blocks & 0xF, blocks >> 4  # rows i and i + 32 of the block
    return torch.stack([low, high], dim=1).permute(0, 1, 3, 2).reshape(out_features, in_features)


class Int4Linear(nn.Module):
    """Drop-in for ``nn.Linear`` (CPU): packed int4 codes, bf16 (scale, offset) per group, optional bias."""

    # Registered buffers, declared so they type as tensors (nn.Module.__getattr__ says Tensor | Module).
    packed: Tensor
    scales_and_zeros: Tensor

    def __init__(self, packed: Tensor, scales_and_zeros: Tensor, group_size: int, bias: Tensor | None) -> None:
        super().__init__()
        self.out_features, half = packed.shape
        self.in_features = half * 2
        self.group_size = group_size
        reason = check_int4_shape(self.out_features, self.in_features, group_size)
        if reason is None and tuple(scales_and_zeros.shape) != (self.in_features // group_size, self.out_features, 2):
            reason = f"scales_and_zeros has shape {tuple(scales_and_zeros.shape)}"
        if reason is not None:
            raise QuantizationError(f"cannot build an int4 linear {self.out_features}x{self.in_features}: {reason}")
        self.register_buffer("packed", aligned(packed))
        self.register_buffer("scales_and_zeros", aligned(scales_and_zeros.to(torch.bfloat16)))
        self.bias = None if bias is None else nn.Parameter(bias.detach().to(torch.bfloat16), requires_grad=False)
        self.dense: Tensor | None = None  # kept out of state_dict: it is the loaded model's own weight
        self.batched: tuple[Tensor, Tensor] | None = None  # the batched kernel's layout, when in use
        # The expanding path for prompt chunks needs the layout known to unpack_int4pack; checked once here.
        codes = unpack_int4pack(self.packed, self.out_features, self.in_features)
        self.unpackable = codes is not None and bool(
            torch.equal(torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes[:_BLOCK_N].int().contiguous(), 1),
                        self.packed[:_BLOCK_N]))

    @classmethod
    def from_linear(cls, linear: nn.Linear, group_size: int = 64, optimize: bool = True) -> Int4Linear:
        reason = check_int4_shape(linear.out_features, linear.in_features, group_size)
        if reason is not None:
            raise QuantizationError(f"cannot quantize a {linear.out_features}x{linear.in_features} linear: {reason}")
        spec = PackSpec(linear.out_features, linear.in_features, 4, group_size, 1)
        codes, scale, zero = quantize_weight(linear.weight.data.float(), spec, optimize=optimize)
        packed, scales_and_zeros = hqq_to_int4pack(codes, scale, zero, spec)
        return cls(packed, scales_and_zeros, group_size, linear.bias)

    def dequantize(self) -> Tensor:
        """The bf16 weight ``[out, in]`` the kernel computes with."""
        codes = unpack_int4pack(self.packed, self.out_features, self.in_features)
        if codes is None:  # not the known layout: read the weight back through the kernel itself
            eye = torch.eye(self.in_features, dtype=torch.bfloat16)
            return self._kernel(eye).t().contiguous()
        groups = self.in_features // self.group_size
        pairs = self.scales_and_zeros.float().transpose(0, 1).contiguous()  # [out, groups, 2]
        scale, offset = pairs[..., :1], pairs[..., 1:]
        grouped = codes.view(self.out_features, groups, self.group_size).float()
        return torch.addcmul(offset - 8.0 * scale, grouped, scale).view(self.out_features, self.in_features).to(
            torch.bfloat16)

    def keep_dense(self, weight: Tensor | None) -> None:
        """Run prompt chunks on this bf16 weight (the layer's original); None drops it."""
        if weight is not None and tuple(weight.shape) != (self.out_features, self.in_features):
            raise QuantizationError(f"dense weight {tuple(weight.shape)} does not match {self.extra_repr()}")
        self.dense = None if weight is None else weight.detach().to(torch.bfloat16)

    def use_batched_kernel(self) -> str | None:
        """Run decode batches on the batched kernel with 8-bit activations; returns why not, or None."""
        reason = cpu_batched.unavailable() or cpu_batched.unsupported(self.out_features, self.in_features,
                                                                       self.group_size)
        codes = unpack_int4pack(self.packed, self.out_features, self.in_features) if reason is None else None
        if reason is None and (codes is None or not self.unpackable):
            reason = "the packed int4 layout is not the one known here"
        if reason is not None or codes is None:
            return reason
        pairs = self.scales_and_zeros.float().transpose(0, 1)  # [out, groups, 2]
        scale, offset = pairs[..., 0], pairs[..., 1]
        self.batched = cpu_batched.int4_layout(codes, scale, offset - 8.0 * scale)
        return None

    def set_batched(self, codes: Tensor, scales: Tensor) -> None:
        """Use a batched-kernel layout made earlier by :meth:`use_batched_kernel` (read back from a cache)."""
        groups = self.in_features // cpu_batched.BLOCK
        if (codes.dtype, codes.numel(), scales.numel()) != (torch.uint8, self.out_features * self.in_features // 2,
                                                            self.out_features * groups * 2):
            raise QuantizationError(f"batched layout {tuple(codes.shape)}, {tuple(scales.shape)} does not fit "
                                    f"{self.extra_repr()}")
        self.batched = (aligned(codes), aligned(scales))

    def _kernel(self, flat: Tensor) -> Tensor:
        return torch.ops.aten._weight_int4pack_mm_for_cpu(flat, self.packed, self.group_size, self.scales_and_zeros)

    def forward(self, x: Tensor) -> Tensor:
        flat = x.reshape(-1, self.in_features).to(torch.bfloat16).contiguous()
        rows = flat.shape[0]
        if self.batched is not None and rows <= BATCHED_ROWS:
            out = cpu_batched.batched_matmul(flat, *self.batched, self.out_features, 4).to(torch.bfloat16)
        elif rows >= DENSE_ROWS and self.dense is not None:
            out = torch.nn.functional.linear(flat, self.dense)
        elif rows >= EXPAND_ROWS and self.unpackable:
            out = torch.nn.functional.linear(flat, self.dequantize())
        else:
            out = self._kernel(flat)
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*x.shape[:-1], self.out_features).to(x.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int4 group {self.group_size}"
