"""Decode batches over int4 / int8 weights with 8-bit activations: the C kernel ``cpu_batched.c`` (AVX512-VNNI).

torch's weight-only kernels take time in proportion to the rows they are given, so a decode batch of 16
sequences reads like 16 single-row calls, and bf16's dense matmul reads 2 bytes a weight. This kernel quantizes
the call's activations to int8 (one scale per 32 inputs of a row) and reads each weight once per call for every
row. Its layouts are built here from the packed layers' codes (:func:`int4_layout`, :func:`int8_layout`).
Machines without AVX512-VNNI, or without a C compiler, keep torch's kernels (:func:`unavailable` says why).
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch
from torch import Tensor

from mediaindex.serving.quant.native import load_library

SOURCE = Path(__file__).with_name("cpu_batched.c")
TILE = 16  # output features per tile
BLOCK = 32  # inputs per activation scale and per int4 group


@functools.cache
def _load() -> tuple[ctypes.CDLL | None, str | None]:
    lib, reason = load_library(SOURCE)
    if lib is None:
        return None, reason
    lib.mi_batched_available.restype = ctypes.c_int
    if not lib.mi_batched_available():
        return None, "this CPU has no AVX512-VNNI (or the compiler did not target it)"
    p, i64, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
    for fn in (lib.mi_batched_int4, lib.mi_batched_int8):
        fn.argtypes = [p, i64, i64, p, p, i64, p, i32]
        fn.restype = i32
    return lib, None


def unavailable() -> str | None:
    """Why the batched kernel cannot run here, or None if it can."""
    return _load()[1]


def unsupported(out_features: int, in_features: int, group_size: int | None) -> str | None:
    """Why a layer of this shape (and int4 group size; None for int8) cannot use the kernel, or None."""
    if in_features % BLOCK:
        return f"in_features ({in_features}) must be a multiple of {BLOCK}"
    if out_features % TILE:
        return f"out_features ({out_features}) must be a multiple of {TILE}"
    if group_size is not None and group_size != BLOCK:
        return f"int4 group size must be {BLOCK}"
    return None


def int4_layout(codes: Tensor, scale: Tensor, bias: Tensor) -> tuple[Tensor, Tensor]:
    """4-bit codes ``[out, in]`` (0..15) and per-group fp32 ``scale``, ``bias`` ``[out, in/32]`` (w = q * s + b) →
    the kernel's packed codes and bf16 (scale, bias) tiles."""
    n, k = codes.shape
    groups = k // BLOCK
    c = codes.to(torch.uint8).view(n // TILE, TILE, groups, 4, 2, 4).permute(0, 2, 3, 4, 1, 5)  # t g c half j b
    packed = (c[:, :, :, 0] | (c[:, :, :, 1] << 4)).contiguous().view(-1)
    pairs = torch.stack([scale.float(), bias.float()], dim=-1).to(torch.bfloat16)  # [out, groups, 2]
    sb = pairs.view(n // TILE, TILE, groups, 2).permute(0, 2, 3, 1).contiguous().view(-1)
    return packed, sb.view(torch.int16)


def int8_layout(codes: Tensor, scales: Tensor) -> tuple[Tensor, Tensor]:
    """Symmetric int8 codes ``[out, in]`` and per-output scales → the kernel's packed codes and bf16 scales."""
    n, k = codes.shape
    shifted = (codes.to(torch.int16) + 128).to(torch.uint8)
    packed = shifted.view(n // TILE, TILE, k // BLOCK, 8, 4).permute(0, 2, 3, 1, 4).contiguous().view(-1)
    return packed, scales.to(torch.bfloat16).view(torch.int16).clone()  # its own copy: cached beside the layer's


def batched_matmul(x: Tensor, packed: Tensor, scales: Tensor, out_features: int, bits: int) -> Tensor:
    """``x`` [rows, in] (cast to bf16) times the layer's weight, fp32 [rows, out]."""
    lib, reason = _load()
    if lib is None:
        raise RuntimeError(reason)
    x = x.to(torch.bfloat16).contiguous()
    rows, in_features = x.shape
    y = torch.empty(rows, out_features, dtype=torch.float32)
    fn = lib.mi_batched_int4 if bits == 4 else lib.mi_batched_int8
    status = fn(x.data_ptr(), rows, in_features, packed.data_ptr(), scales.data_ptr(), out_features, y.data_ptr(),
                torch.get_num_threads())
    if status != 0:
        raise RuntimeError(f"the batched CPU kernel refused its arguments (status {status})")
    return y
