"""The CPU grouped-experts kernel (``grouped_experts.c``): build once with the system C compiler, call through ctypes.

torch has no CPU matmul that reads several experts' low-bit weights in one call (``grouped_mm`` takes float
weights only, the int8/int4 weight-only kernels take one matrix per call), so a MoE layer would need a Python
loop over experts, dequantizing each. The C kernel takes the HQQ buffers as they are and runs one projection of
all experts per call, dequantizing one 16-row tile at a time into a per-thread panel that stays in cache.

The shared library is built at first use (:mod:`native`); when it cannot be, :func:`load_kernel` returns None with
the reason, and the layer keeps the PyTorch path.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch
from torch import Tensor

from mediaindex.serving.quant.native import load_library

SOURCE = Path(__file__).with_name("grouped_experts.c")
LANES = 16  # the kernel's vector width in floats: K and the group size must be multiples of it
# How the kernel rounds dequantized weights, so its products equal the PyTorch path's in that dtype.
_ROUND = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}


@functools.cache
def _load() -> tuple[ctypes.CDLL | None, str | None]:
    lib, reason = load_library(SOURCE)
    if lib is None:
        return None, reason
    p, i64, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
    lib.mi_grouped_matmul.argtypes = [p, i64, p, p, p, p, i64, i64, i64, i64, i32, i32, p, i32]
    lib.mi_grouped_matmul_bf16.argtypes = [p, i64, p, p, p, p, i64, i64, i64, i64, i32, p, i32]
    lib.mi_grouped_matmul.restype = lib.mi_grouped_matmul_bf16.restype = lib.mi_has_bf16_dot.restype = i32
    return lib, None


def load_kernel() -> tuple[ctypes.CDLL | None, str | None]:
    """The loaded kernel library, or None and why it cannot be used."""
    return _load()


def unsupported(in_features: int, group_size: int, axis: int, dtype: torch.dtype) -> str | None:
    """Why the kernel cannot run a projection with these settings, or None if it can."""
    if axis != 1:
        return "the kernel reads HQQ's axis=1 layout only"
    if in_features % LANES or group_size % LANES:
        return f"in_features ({in_features}) and group_size ({group_size}) must be multiples of {LANES}"
    if dtype not in _ROUND:
        return f"compute dtype {dtype} is not float32, bfloat16 or float16"
    return None


def grouped_matmul(
    x: Tensor,
    ends: Tensor,
    codes: Tensor,
    scale: Tensor,
    zero: Tensor,
    *,
    out_features: int,
    group_size: int,
    bits: int,
    compute_dtype: torch.dtype,
) -> Tensor:
    """``y[r] = x[r] @ W_e.T`` for the rows ``r`` of each expert ``e``: rows ``[ends[e-1], ends[e])``.

    ``x`` [rows, in] in the compute dtype, sorted by expert; ``ends`` int64 [E], cumulative;
    ``codes``/``scale``/``zero`` the layer's stacked HQQ buffers. Returns fp32 [rows, out] (sums in fp32);
    rows past ``ends[-1]`` are zero.
    """
    lib, reason = load_kernel()
    if lib is None:
        raise RuntimeError(reason)
    if codes.dtype != torch.uint8 or scale.dtype != torch.float16 or zero.dtype != torch.float16:
        raise ValueError("the kernel reads uint8 codes with float16 scales and zeros (HQQ's buffers as stored)")
    if ends.dtype != torch.int64 or ends.shape != (codes.shape[0],):
        raise ValueError(f"ends must be int64 with one entry per expert ({codes.shape[0]}), not {ends.dtype} {tuple(ends.shape)}")
    rows, in_features = x.shape
    ends, codes, scale, zero = (t.contiguous() for t in (ends, codes, scale, zero))
    out = torch.empty(rows, out_features, dtype=torch.float32)
    weights = (ends.data_ptr(), codes.data_ptr(), scale.data_ptr(), zero.data_ptr(), codes.shape[0])
    shape = (out_features, in_features, group_size, bits)
    if compute_dtype == torch.bfloat16 and lib.mi_has_bf16_dot() and not (in_features % 32 or group_size % 32):
        # bf16 products summed in fp32 by the CPU's bf16 dot instruction (AVX512-BF16).
        x = x.to(torch.bfloat16).contiguous()
        status = lib.mi_grouped_matmul_bf16(
            x.data_ptr(), rows, *weights, *shape, out.data_ptr(), torch.get_num_threads()
        )
    else:
        x = x.float().contiguous()
        status = lib.mi_grouped_matmul(
            x.data_ptr(), rows, *weights, *shape, _ROUND[compute_dtype], out.data_ptr(), torch.get_num_threads()
        )
    if status != 0:
        raise RuntimeError(f"the CPU grouped-experts kernel refused its arguments (status {status})")
    return out
