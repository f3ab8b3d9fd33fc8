"""Quantized MoE experts in Triton: one kernel launch per projection for all experts of a layer (CUDA path).

The token slots are sorted by expert (:func:`~mediaindex.serving.quant.routing.sort_by_expert`) and cut into
blocks of ``BLOCK_M`` slots that never straddle two experts. Each program takes one block and one tile of
``BLOCK_N`` output features, reads the packed HQQ codes of its expert (axis 1, 8-bit or 4-bit, the checkpoint's own
layout), dequantizes them in registers with their group's scale and zero and multiplies them by the block's rows;
nothing dequantized is written to memory. The first projection gathers its rows straight from the hidden states
through the sorted slot order, so no sorted copy of the activations is made.

No host sync: the grid is sized from shapes alone (``ceil(slots / BLOCK_M) + min(E, slots)`` blocks, the most the
routing can need), and the blocks a routing does not use exit at once. Their description (expert, first and last
slot) is computed on the device by tensor ops.

Importing this module imports triton; :class:`~mediaindex.serving.quant.layers.QuantExperts` imports it only on
its Triton path. Set TRITON_INTERPRET=1 before triton is first imported to run the kernel on CPU tensors (tests).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import triton
import triton.language as tl
from torch import Tensor

from mediaindex.serving.quant.routing import SortedSlots

if TYPE_CHECKING:
    from mediaindex.serving.quant.layers import QuantExperts

BLOCK_M = 16  # slots per block; the smallest tile tl.dot takes


@triton.jit
def _bf16_values(x):
    """fp32 -> the nearest bf16 value (ties to even), still as fp32. The interpreter's own fp32 -> bf16 cast does
    not round to nearest, so there the rounding is done on the bits; a value that is already bf16 then casts
    exactly."""
    bits = x.to(tl.uint32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _grouped_projection_kernel(
    x_ptr, slot_row_ptr,  # activations [rows, K]; sorted slot -> row of x (GATHER only)
    codes_ptr, scale_ptr, zero_ptr,  # the layer's stacked HQQ buffers
    block_expert_ptr, block_start_ptr, block_stop_ptr,  # per block: expert (-1 = unused), slot range
    out_ptr,  # [slots, N], zero-initialised: slots no block covers stay zero
    N, K, stride_x, stride_out,
    GROUP: tl.constexpr, BITS: tl.constexpr, GATHER: tl.constexpr, DOT_DTYPE: tl.constexpr, IEEE: tl.constexpr,
    ROUND_BF16_BITS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    block = tl.program_id(0)
    expert = tl.load(block_expert_ptr + block).to(tl.int64)
    if expert < 0:
        return
    start = tl.load(block_start_ptr + block)
    stop = tl.load(block_stop_ptr + block)
    slots = start + tl.arange(0, BLOCK_M)
    slot_ok = slots < stop
    if GATHER:  # noqa: SIM108 - a constexpr branch, compiled away
        rows = tl.load(slot_row_ptr + slots, mask=slot_ok, other=0).to(tl.int64)
    else:
        rows = slots.to(tl.int64)
    n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = n < N
    # HQQ's 4-bit packing pairs output feature n < N/2 (high nibble) with n + N/2 (low nibble) in one byte.
    if BITS == 8:
        code_row = n.to(tl.int64)
        shift = tl.zeros([BLOCK_N], dtype=tl.int32)
        codes_e = codes_ptr + expert * N * K
    else:
        code_row = (n % (N // 2)).to(tl.int64)
        shift = tl.where(n < N // 2, 4, 0)
        codes_e = codes_ptr + expert * (N // 2) * K
    groups = K // GROUP
    meta = expert * N * groups + n.to(tl.int64) * groups
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(x_ptr + rows[:, None] * stride_x + k[None, :], mask=slot_ok[:, None], other=0.0)
        q = tl.load(codes_e + code_row[None, :] * K + k[:, None], mask=n_ok[None, :], other=0).to(tl.int32)
        if BITS == 4:
            q = (q >> shift[None, :]) & 15
        # BLOCK_K divides GROUP, so the whole tile shares one group per output feature.
        s = tl.load(scale_ptr + meta + k0 // GROUP, mask=n_ok, other=0.0).to(tl.float32)
        z = tl.load(zero_ptr + meta + k0 // GROUP, mask=n_ok, other=0.0).to(tl.float32)
        # HQQ's (q - zero) * scale as the PyTorch path computes it, then rounded to the compute dtype.
        w = q.to(tl.float32) * s[None, :] + (-(z * s))[None, :]
        if ROUND_BF16_BITS:
            w = _bf16_values(w)
        w = w.to(a.dtype)
        if IEEE:
            # fp32 operands would otherwise go through TF32.
            acc += tl.dot(a.to(DOT_DTYPE), w.to(DOT_DTYPE), input_precision="ieee")
        else:
            acc += tl.dot(a, w)
    if ROUND_BF16_BITS:
        acc = _bf16_values(acc)
    out = out_ptr + slots.to(tl.int64)[:, None] * stride_out + n[None, :]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=slot_ok[:, None] & n_ok[None, :])


def block_k_for(group_size: int) -> int | None:
    """The K tile: a power of two (tl.arange) of at least 16 (tl.dot) that divides the group; None if none does."""
    for block_k in (64, 32, 16):
        if group_size % block_k == 0:
            return block_k
    return None


def _blocks(slots: SortedSlots, num_slots: int) -> tuple[Tensor, Tensor, Tensor]:
    """(expert, first slot, end slot) of every possible block, -1 as the expert of the unused ones."""
    counts, ends = slots.counts, slots.ends
    num_experts = counts.shape[0]
    per_expert = (counts + BLOCK_M - 1) // BLOCK_M
    block_ends = torch.cumsum(per_expert, 0)
    most = -(-num_slots // BLOCK_M) + min(num_experts, num_slots)
    index = torch.arange(most, device=counts.device)
    expert = torch.searchsorted(block_ends, index, right=True)
    used = expert < num_experts
    e = expert.clamp(max=num_experts - 1)
    first_block = block_ends[e] - per_expert[e]
    start = ends[e] - counts[e] + (index - first_block) * BLOCK_M
    return torch.where(used, expert, -1), start, ends[e]


def grouped_projection(
    x: Tensor,
    slot_row: Tensor | None,
    blocks: tuple[Tensor, Tensor, Tensor],
    codes: Tensor,
    scale: Tensor,
    zero: Tensor,
    *,
    num_slots: int,
    out_features: int,
    group_size: int,
    bits: int,
) -> Tensor:
    """One launch: ``out[i] = x[row(i)] @ W_{expert(i)}.T`` for every sorted slot ``i`` (``row(i) = slot_row[i]``
    when given, else ``i``). ``out`` [num_slots, out_features] in ``x``'s dtype; slots of no local expert are 0."""
    block_k = block_k_for(group_size)
    if block_k is None:
        raise ValueError(f"group_size {group_size} has no power-of-two divisor of at least 16")
    in_features = x.shape[1]
    x = x.contiguous()
    out = torch.zeros(num_slots, out_features, dtype=x.dtype, device=x.device)
    block_n = 64 if out_features >= 64 else triton.next_power_of_2(out_features)
    # Triton's interpreter (CPU tensors) multiplies bf16 as raw integers (numpy has no bf16), so there the dot
    # runs in fp32 on the bf16-rounded values: the same products, exact in fp32.
    dot_dtype = {torch.float16: tl.float16, torch.float32: tl.float32}.get(
        x.dtype, tl.bfloat16 if x.is_cuda else tl.float32
    )
    expert, start, stop = blocks
    grid = (expert.shape[0], triton.cdiv(out_features, block_n))
    _grouped_projection_kernel[grid](
        x, slot_row if slot_row is not None else x,
        codes, scale, zero,
        expert, start, stop,
        out,
        out_features, in_features, x.stride(0), out.stride(0),
        GROUP=group_size, BITS=bits, GATHER=slot_row is not None, DOT_DTYPE=dot_dtype, IEEE=dot_dtype == tl.float32,
        ROUND_BF16_BITS=x.dtype == torch.bfloat16 and not x.is_cuda,
        BLOCK_M=BLOCK_M, BLOCK_N=block_n, BLOCK_K=block_k,
    )
    return out


def fused_experts(layer: QuantExperts, x: Tensor, slots: SortedSlots) -> Tensor:
    """The expert outputs of every sorted slot, [slots, hidden], before the routing weights: two launches
    (gate_up, down) whatever the number of experts or tokens. ``x`` [tokens, hidden] in the layer's compute dtype."""
    num_slots = slots.token_of.shape[0]
    blocks = _blocks(slots, num_slots)
    gate_up_spec, down_spec = layer.gate_up_spec, layer.down_spec
    gate_up = grouped_projection(
        x, slots.token_of, blocks, layer.gate_up_W_q, layer.gate_up_scale, layer.gate_up_zero,
        num_slots=num_slots, out_features=gate_up_spec.out_features, group_size=gate_up_spec.group_size,
        bits=gate_up_spec.bits,
    )
    gate, up = gate_up.chunk(2, dim=-1)
    return grouped_projection(
        layer.act_fn(gate) * up, None, blocks, layer.down_W_q, layer.down_scale, layer.down_zero,
        num_slots=num_slots, out_features=down_spec.out_features, group_size=down_spec.group_size,
        bits=down_spec.bits,
    )
