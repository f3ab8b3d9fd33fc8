"""Decode attention over paged K/V in Triton: the CUDA fast path of the engine's decode step.

One query token per request. The kernel walks each request's block table and reads K/V pages as stored: FP8
pages are uint8 bytes bitcast to float8 e4m3 and converted in registers (nothing dequantised is written back to
memory), BF16/FP16/FP32 pages are read as they are. Each tile is dequantised in registers with its tokens'
per-(token, KV head) FP8 scales.

Layout of the work (flash-decoding style):
- one program per (request, KV head, context split). The query heads that share a KV head (GQA) form the rows of
  one tile, so every K/V page is read once per group, not once per query head;
- each program runs an online softmax over BLOCK_N tokens at a time (a tile may span several pages) and keeps its
  running max, denominator and weighted sum in fp32;
- the engine's numerics policy holds: the current token's own K/V come from the model at model precision, not
  from the pages. Split 0 starts its running state from that token, so it is counted exactly once;
- with one split the program writes the normalised output; with several, a small second kernel merges the
  splits' partial states.

Importing this module imports triton; the engine imports it only when the Triton backend is selected.
Set TRITON_INTERPRET=1 before importing it to run the kernels on CPU tensors (tests).
"""

from __future__ import annotations

import functools
import math

import torch
import triton
import triton.language as tl

from mediaindex.serving.kv_cache import PagedKVCache

_LOG2E = 1.4426950408889634
MIN_SPLIT_TOKENS = 256  # below this, a split's fixed cost outweighs the parallelism it adds


@triton.jit
def _dot(a, b, IEEE: tl.constexpr):
    # fp32 operands would otherwise go through TF32 on CUDA; half-precision operands take the default path.
    if IEEE:
        return tl.dot(a, b, input_precision="ieee")
    else:
        return tl.dot(a, b)


@triton.jit
def _decode_kernel(
    q_ptr, kn_ptr, vn_ptr,  # this step: q [B, H, DK], own k [B, HKV, DK], own v [B, HKV, DV]
    kc_ptr, vc_ptr,  # one layer's pages [num_pages, PAGE_SIZE, HKV, D]
    k_scale_ptr, v_scale_ptr,  # [num_pages, PAGE_SIZE, HKV] fp32 per-token scales (FP8 pages only)
    bt_ptr, ctx_ptr,  # block tables [B, P] and context lengths [B] (tokens already in the pages)
    window,  # sliding window (the token sees itself and window - 1 cached tokens before it); 0 = full attention
    out_ptr,  # [B, H, DV], written when NUM_SPLITS_IS_ONE
    part_acc_ptr, part_ml_ptr,  # [B, H, S, DV] and [B, H, S, 2] fp32 partial states, otherwise
    qk_scale,  # softmax scale * log2(e): the kernel works in base 2
    num_splits, tokens_per_split,
    stride_qb, stride_qh, stride_knb, stride_knh, stride_vnb, stride_vnh,
    stride_kcp, stride_kct, stride_kch, stride_vcp, stride_vct, stride_vch,
    stride_btb, stride_ob, stride_oh, stride_sp, stride_st,
    H: tl.constexpr, GROUP: tl.constexpr, PAGE_SIZE: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
    BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_DK: tl.constexpr, BLOCK_DV: tl.constexpr,
    IS_FP8: tl.constexpr, DOT_DTYPE: tl.constexpr, IEEE: tl.constexpr, NUM_SPLITS_IS_ONE: tl.constexpr,
):
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    split = tl.program_id(2)

    g = tl.arange(0, BLOCK_G)
    dk = tl.arange(0, BLOCK_DK)
    dv = tl.arange(0, BLOCK_DV)
    heads = kvh * GROUP + g
    g_ok = g < GROUP
    dk_ok = dk < DK
    dv_ok = dv < DV

    q = tl.load(q_ptr + b * stride_qb + heads[:, None] * stride_qh + dk[None, :],
                mask=g_ok[:, None] & dk_ok[None, :], other=0.0)  # [BLOCK_G, BLOCK_DK], model dtype

    # The current token, at model precision, seeds split 0's running state; other splits start empty.
    k_own = tl.load(kn_ptr + b * stride_knb + kvh * stride_knh + dk, mask=dk_ok, other=0.0).to(tl.float32)
    v_own = tl.load(vn_ptr + b * stride_vnb + kvh * stride_vnh + dv, mask=dv_ok, other=0.0).to(tl.float32)
    s_own = tl.sum(q.to(tl.float32) * k_own[None, :], axis=1) * qk_scale  # [BLOCK_G]
    first = split == 0
    m_i = tl.where(first, s_own, float("-inf"))
    l_i = tl.zeros([BLOCK_G], dtype=tl.float32) + first.to(tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_DV], dtype=tl.float32) + first.to(tl.float32) * v_own[None, :]

    ctx = tl.load(ctx_ptr + b).to(tl.int32)
    start = split * tokens_per_split
    end = tl.minimum(start + tokens_per_split, ctx)
    lo = 0
    if window > 0:
        lo = tl.maximum(ctx + 1 - window, 0)
    # Tiles wholly before the window are skipped.
    first_tile = tl.maximum(start, lo - lo % BLOCK_N)
    for t0 in range(first_tile, end, BLOCK_N):
        t = t0 + tl.arange(0, BLOCK_N)
        t_ok = (t < end) & (t >= lo)
        page = tl.load(bt_ptr + b * stride_btb + t // PAGE_SIZE, mask=t_ok, other=0).to(tl.int64)
        slot = t % PAGE_SIZE
        k_rows = page * stride_kcp + slot * stride_kct + kvh * stride_kch
        k = tl.load(kc_ptr + k_rows[:, None] + dk[None, :], mask=t_ok[:, None] & dk_ok[None, :], other=0)
        if IS_FP8:
            # Dequantised in registers (fp32 product, rounded once to the model dtype, as the reference rounds it).
            s_rows = page * stride_sp + slot * stride_st + kvh
            k_scale = tl.load(k_scale_ptr + s_rows, mask=t_ok, other=0.0)  # [BLOCK_N]
            v_scale = tl.load(v_scale_ptr + s_rows, mask=t_ok, other=0.0)
            k = k.to(tl.float8e4nv, bitcast=True).to(tl.float32) * k_scale[:, None]
        s = _dot(q.to(DOT_DTYPE), tl.trans(k.to(DOT_DTYPE)), IEEE) * qk_scale  # [BLOCK_G, BLOCK_N] fp32
        s = tl.where(t_ok[None, :], s, float("-inf"))

        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        # A split whose tiles all lie before the window has seen nothing (-inf): keep its state empty, not NaN.
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m_i - m_safe)
        p = tl.exp2(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)

        v_rows = page * stride_vcp + slot * stride_vct + kvh * stride_vch
        v = tl.load(vc_ptr + v_rows[:, None] + dv[None, :], mask=t_ok[:, None] & dv_ok[None, :], other=0)
        if IS_FP8:
            v = v.to(tl.float8e4nv, bitcast=True).to(tl.float32) * v_scale[:, None]
        acc = acc * alpha[:, None] + _dot(p.to(DOT_DTYPE), v.to(DOT_DTYPE), IEEE)
        m_i = m_new

    if NUM_SPLITS_IS_ONE:
        o = acc / l_i[:, None]
        tl.store(out_ptr + b * stride_ob + heads[:, None] * stride_oh + dv[None, :],
                 o.to(out_ptr.dtype.element_ty), mask=g_ok[:, None] & dv_ok[None, :])
    else:
        row = (b * H + heads) * num_splits + split  # [BLOCK_G] index into [B, H, S]
        tl.store(part_acc_ptr + row[:, None] * DV + dv[None, :], acc, mask=g_ok[:, None] & dv_ok[None, :])
        tl.store(part_ml_ptr + row * 2, m_i, mask=g_ok)
        tl.store(part_ml_ptr + row * 2 + 1, l_i, mask=g_ok)


@triton.jit
def _latent_decode_kernel(
    ql_ptr, qr_ptr,  # this step: q_latent [B, H, R], q_rope [B, H, DR]
    ln_ptr, rn_ptr,  # own latent [B, R] and rotary key [B, DR], model precision
    lc_ptr, rc_ptr,  # one layer's pages: latents [num_pages, PAGE_SIZE, 1, R], rotary keys [..., DR]
    l_scale_ptr, r_scale_ptr,  # [num_pages, PAGE_SIZE, 1] fp32 per-token scales (FP8 pages only)
    bt_ptr, ctx_ptr,  # block tables [B, P] and context lengths [B]
    out_ptr,  # [B, H, R] attention-weighted latents, written when NUM_SPLITS_IS_ONE
    part_acc_ptr, part_ml_ptr,  # [B, H, S, R] and [B, H, S, 2] fp32 partial states, otherwise
    qk_scale, num_splits, tokens_per_split,
    stride_qlb, stride_qlh, stride_qrb, stride_qrh, stride_lnb, stride_rnb,
    stride_lcp, stride_lct, stride_rcp, stride_rct, stride_btb, stride_ob, stride_oh, stride_sp, stride_st,
    H: tl.constexpr, PAGE_SIZE: tl.constexpr, R: tl.constexpr, DR: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_DR: tl.constexpr,
    IS_FP8: tl.constexpr, DOT_DTYPE: tl.constexpr, IEEE: tl.constexpr, NUM_SPLITS_IS_ONE: tl.constexpr,
):
    """MLA decode over latent pages: every query head attends over the same keys (a token's latent and rotary
    key) and values (its latent), so one program takes BLOCK_H heads as the rows of its tiles and reads each page
    once for all of them."""
    b = tl.program_id(0)
    head_block = tl.program_id(1)
    split = tl.program_id(2)

    heads = head_block * BLOCK_H + tl.arange(0, BLOCK_H)
    r = tl.arange(0, BLOCK_R)
    dr = tl.arange(0, BLOCK_DR)
    h_ok = heads < H
    r_ok = r < R
    dr_ok = dr < DR

    q_lat = tl.load(ql_ptr + b * stride_qlb + heads[:, None] * stride_qlh + r[None, :],
                    mask=h_ok[:, None] & r_ok[None, :], other=0.0)  # [BLOCK_H, BLOCK_R], model dtype
    q_rot = tl.load(qr_ptr + b * stride_qrb + heads[:, None] * stride_qrh + dr[None, :],
                    mask=h_ok[:, None] & dr_ok[None, :], other=0.0)

    # The current token, at model precision, seeds split 0's running state; other splits start empty.
    l_own = tl.load(ln_ptr + b * stride_lnb + r, mask=r_ok, other=0.0).to(tl.float32)
    r_own = tl.load(rn_ptr + b * stride_rnb + dr, mask=dr_ok, other=0.0).to(tl.float32)
    s_own = (tl.sum(q_lat.to(tl.float32) * l_own[None, :], axis=1)
             + tl.sum(q_rot.to(tl.float32) * r_own[None, :], axis=1)) * qk_scale
    first = split == 0
    m_i = tl.where(first, s_own, float("-inf"))
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32) + first.to(tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_R], dtype=tl.float32) + first.to(tl.float32) * l_own[None, :]

    ctx = tl.load(ctx_ptr + b).to(tl.int32)
    start = split * tokens_per_split
    end = tl.minimum(start + tokens_per_split, ctx)
    for t0 in range(start, end, BLOCK_N):
        t = t0 + tl.arange(0, BLOCK_N)
        t_ok = t < end
        page = tl.load(bt_ptr + b * stride_btb + t // PAGE_SIZE, mask=t_ok, other=0).to(tl.int64)
        slot = t % PAGE_SIZE
        lat = tl.load(lc_ptr + (page * stride_lcp + slot * stride_lct)[:, None] + r[None, :],
                      mask=t_ok[:, None] & r_ok[None, :], other=0)  # [BLOCK_N, BLOCK_R]
        rot = tl.load(rc_ptr + (page * stride_rcp + slot * stride_rct)[:, None] + dr[None, :],
                      mask=t_ok[:, None] & dr_ok[None, :], other=0)
        if IS_FP8:
            s_rows = page * stride_sp + slot * stride_st
            l_scale = tl.load(l_scale_ptr + s_rows, mask=t_ok, other=0.0)
            r_scale = tl.load(r_scale_ptr + s_rows, mask=t_ok, other=0.0)
            lat = lat.to(tl.float8e4nv, bitcast=True).to(tl.float32) * l_scale[:, None]
            rot = rot.to(tl.float8e4nv, bitcast=True).to(tl.float32) * r_scale[:, None]
        lat = lat.to(DOT_DTYPE)
        s = (_dot(q_lat.to(DOT_DTYPE), tl.trans(lat), IEEE)
             + _dot(q_rot.to(DOT_DTYPE), tl.trans(rot.to(DOT_DTYPE)), IEEE)) * qk_scale  # [BLOCK_H, BLOCK_N]
        s = tl.where(t_ok[None, :], s, float("-inf"))

        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m_i - m_safe)
        p = tl.exp2(s - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + _dot(p.to(DOT_DTYPE), lat, IEEE)  # the values are the latents themselves
        m_i = m_new

    if NUM_SPLITS_IS_ONE:
        o = acc / l_i[:, None]
        tl.store(out_ptr + b * stride_ob + heads[:, None] * stride_oh + r[None, :],
                 o.to(out_ptr.dtype.element_ty), mask=h_ok[:, None] & r_ok[None, :])
    else:
        row = (b * H + heads) * num_splits + split
        tl.store(part_acc_ptr + row[:, None] * R + r[None, :], acc, mask=h_ok[:, None] & r_ok[None, :])
        tl.store(part_ml_ptr + row * 2, m_i, mask=h_ok)
        tl.store(part_ml_ptr + row * 2 + 1, l_i, mask=h_ok)


@triton.jit
def _merge_kernel(
    part_acc_ptr, part_ml_ptr, out_ptr, num_splits, stride_ob, stride_oh,
    H: tl.constexpr, DV: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_DV: tl.constexpr,
):
    """One program per (request, query head): rescale the splits' states to a common max and normalise."""
    b = tl.program_id(0)
    h = tl.program_id(1)
    s = tl.arange(0, BLOCK_S)
    dv = tl.arange(0, BLOCK_DV)
    s_ok = s < num_splits
    row = (b * H + h) * num_splits + s
    m = tl.load(part_ml_ptr + row * 2, mask=s_ok, other=float("-inf"))
    den = tl.load(part_ml_ptr + row * 2 + 1, mask=s_ok, other=0.0)
    acc = tl.load(part_acc_ptr + row[:, None] * DV + dv[None, :], mask=s_ok[:, None] & (dv[None, :] < DV), other=0.0)
    # Split 0 holds the current token, so the max is finite; empty splits (m = -inf) get weight 0.
    w = tl.exp2(m - tl.max(m, axis=0))
    o = tl.sum(acc * w[:, None], axis=0) / tl.sum(den * w, axis=0)
    tl.store(out_ptr + b * stride_ob + h * stride_oh + dv, o.to(out_ptr.dtype.element_ty), mask=dv < DV)


@functools.cache
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def _dot_dtype(q: torch.Tensor) -> tl.dtype:
    """Operand dtype of the two dots: the model's. Triton's interpreter (CPU tensors) multiplies bf16 as raw
    integers (numpy has no bf16), so there bf16 dots run in fp32; fp16 and fp32 are interpreted faithfully."""
    if q.dtype == torch.bfloat16:
        return tl.bfloat16 if q.is_cuda else tl.float32
    return {torch.float16: tl.float16, torch.float32: tl.float32}[q.dtype]


def default_block_n(block_d: int, dtype: torch.dtype, fp8: bool = False) -> int:
    """Tokens per tile, sized so the tile's K/V values and their 64-bit addresses stay in registers: compiled for
    sm_90 with 4 warps, 32 tokens at head dim 128 use about 170 registers (bf16) and no stack, while 64 tokens
    spill; FP8 pages, whose per-token scales are loaded beside the values, spill at 32 tokens (72 bytes of stack
    at head dim 128, 8 query heads per KV head) and take 16; fp32 models need half the tokens. Not yet tuned by
    timing on a GPU."""
    tokens = 32 if block_d <= 128 and not fp8 else 16
    return max(16, tokens // 2 if dtype == torch.float32 else tokens)


def _pow2(n: int, floor: int = 16) -> int:
    # tl.dot needs every dimension to be a power of two of at least 16; padding rows and columns are masked.
    return max(floor, triton.next_power_of_2(n))


def _split_context(max_tokens: int, block_n: int, programs: int, num_splits: int | None,
                   device: torch.device) -> tuple[int, int]:
    """(splits, tiles per split) of a context of at most `max_tokens` (known without a device sync), for
    `programs` programs per split; `num_splits` overrides the choice (tests)."""
    n_tiles = max(1, triton.cdiv(max_tokens, block_n))
    if num_splits is None:
        # Enough programs to fill the GPU when the batch alone does not, but never splits of a few tokens.
        target = 2 * _sm_count(device.index or 0) if device.type == "cuda" else 1
        num_splits = min(triton.cdiv(target, programs), triton.cdiv(max_tokens, MIN_SPLIT_TOKENS))
    tiles_per_split = triton.cdiv(n_tiles, max(1, num_splits))
    return triton.cdiv(n_tiles, tiles_per_split), tiles_per_split  # no split is empty for the longest context


def _partials(out: torch.Tensor, num_splits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each split's unnormalised output and (max, sum) for `_merge_splits`; `out` itself (unused) for one split."""
    if num_splits == 1:
        return out, out
    n_req, n_heads, width = out.shape
    return (torch.empty(n_req, n_heads, num_splits, width, dtype=torch.float32, device=out.device),
            torch.empty(n_req, n_heads, num_splits, 2, dtype=torch.float32, device=out.device))


def _merge_splits(part_acc: torch.Tensor, part_ml: torch.Tensor, out: torch.Tensor, block_width: int) -> None:
    n_req, n_heads, num_splits, width = part_acc.shape
    _merge_kernel[(n_req, n_heads)](
        part_acc, part_ml, out, num_splits, out.stride(0), out.stride(1),
        H=n_heads, DV=width, BLOCK_S=triton.next_power_of_2(num_splits), BLOCK_DV=block_width,
    )


def paged_decode_attention(
    q: torch.Tensor,
    k_new: torch.Tensor,
    v_new: torch.Tensor,
    k_pages: torch.Tensor,
    v_pages: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
    scale: float | None = None,
    out: torch.Tensor | None = None,
    num_splits: int | None = None,
    block_n: int | None = None,
    window: int | None = None,
) -> torch.Tensor:
    """Attention of one new token per request over its cached context plus itself.

    q [B, H, DK]; k_new [B, HKV, DK] and v_new [B, HKV, DV]: the token's own K/V at model precision. k_pages
    [num_pages, page_size, HKV, DK] and v_pages [..., DV]: one layer's pages, uint8 (FP8 e4m3 bytes, with
    per-token k_scale / v_scale [num_pages, page_size, HKV] fp32) or a float dtype. block_tables [B, P] (int64), context_lens [B]: tokens of
    each request already in the pages (0 is fine). `window`: sliding-window size, None for full attention. Returns (or fills `out`) [B, H, DV] in q's dtype.
    num_splits / block_n override the work split (tests)."""
    n_req, n_heads, dk = q.shape
    n_kv, dv = k_new.shape[1], v_new.shape[2]
    if n_heads % n_kv:
        raise ValueError(f"{n_heads} query heads cannot share {n_kv} KV heads evenly")
    is_fp8 = k_pages.dtype == torch.uint8
    if is_fp8 and (k_scale is None or v_scale is None):
        raise ValueError("FP8 pages need k_scale and v_scale")
    for t in (q, k_new, v_new, k_pages, v_pages, block_tables):
        if t.stride(-1) != 1:
            raise ValueError("the last dimension of every input must be contiguous")
    if out is None:
        out = q.new_empty(n_req, n_heads, dv)
    if n_req == 0:
        return out
    group = n_heads // n_kv
    page_size = k_pages.shape[1]
    block_dk, block_dv = _pow2(dk), _pow2(dv)
    if block_n is None:
        block_n = default_block_n(max(block_dk, block_dv), q.dtype, is_fp8)
    num_splits, tiles_per_split = _split_context(block_tables.shape[1] * page_size, block_n, n_req * n_kv,
                                                 num_splits, q.device)
    one = num_splits == 1
    part_acc, part_ml = _partials(out, num_splits)
    dot_dtype = _dot_dtype(q)
    qk_scale = (scale if scale is not None else 1.0 / math.sqrt(dk)) * _LOG2E
    scales, s_strides = _page_scales(*((k_scale, v_scale) if is_fp8 else (None, None)), context_lens,
                                     "k_scale and v_scale", "HKV")
    _decode_kernel[(n_req, n_kv, num_splits)](
        q, k_new, v_new, k_pages, v_pages, scales[0], scales[1], block_tables, context_lens, window or 0,
        out, part_acc, part_ml,
        qk_scale, num_splits, tiles_per_split * block_n,
        q.stride(0), q.stride(1), k_new.stride(0), k_new.stride(1), v_new.stride(0), v_new.stride(1),
        k_pages.stride(0), k_pages.stride(1), k_pages.stride(2), v_pages.stride(0), v_pages.stride(1),
        v_pages.stride(2), block_tables.stride(0), out.stride(0), out.stride(1), *s_strides,
        H=n_heads, GROUP=group, PAGE_SIZE=page_size, DK=dk, DV=dv,
        BLOCK_G=_pow2(group), BLOCK_N=block_n, BLOCK_DK=block_dk, BLOCK_DV=block_dv,
        IS_FP8=is_fp8, DOT_DTYPE=dot_dtype, IEEE=dot_dtype == tl.float32, NUM_SPLITS_IS_ONE=one,
    )
    if not one:
        _merge_splits(part_acc, part_ml, out, block_dv)
    return out


def _page_scales(a: torch.Tensor | None, b: torch.Tensor | None, placeholder: torch.Tensor, names: str,
                 heads: str) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[int, int]]:
    """FP8 pages' two per-token scale tensors with their (page, slot) strides, checked alike; without scales
    (float pages) a placeholder tensor the kernel never reads, and zero strides."""
    if a is None or b is None:
        return (placeholder, placeholder), (0, 0)
    if a.stride() != b.stride() or a.stride(-1) != 1 or a.dim() != 3:
        raise ValueError(f"{names} must be [num_pages, page_size, {heads}] tensors with the same strides")
    return (a, b), (a.stride(0), a.stride(1))


def triton_decode_attention(
    cache: PagedKVCache,
    layer: int,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scaling: float | None,
    window: int | None = None,
) -> torch.Tensor:
    """The engine's decode attention (same contract as `attention.torch_decode_attention`) on the kernel."""
    k_scale, v_scale = (cache.k_scale[layer], cache.v_scale[layer]) if cache.is_fp8 else (None, None)
    return paged_decode_attention(
        q, k, v, cache.k[layer], cache.v[layer], block_tables, context_lens, k_scale, v_scale, scale=scaling,
        window=window,
    )


LATENT_BLOCK_H = 16  # query heads per program: tl.dot's smallest row count, and DeepSeek-V3's 128 heads in 8
LATENT_BLOCK_N = 16  # tokens per tile: 16 x 512 latent values beside a [16 heads, 512] fp32 accumulator
LATENT_NUM_WARPS = 8  # the accumulator alone is 64 fp32 registers per thread at 4 warps


def paged_latent_decode_attention(
    q_latent: torch.Tensor,
    q_rope: torch.Tensor,
    latent_new: torch.Tensor,
    rope_new: torch.Tensor,
    latent_pages: torch.Tensor,
    rope_pages: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    latent_scale: torch.Tensor | None = None,
    rope_scale: torch.Tensor | None = None,
    num_splits: int | None = None,
    block_n: int | None = None,
) -> torch.Tensor:
    """MLA decode attention of one new token per request over latent pages (up-projections absorbed, see `mla`).

    q_latent [B, H, R], q_rope [B, H, DR]; latent_new [B, R] and rope_new [B, DR]: the token's own, at model
    precision. latent_pages [num_pages, page_size, 1, R] and rope_pages [..., DR]: one layer's pages, uint8 (FP8
    bytes with per-token latent_scale / rope_scale [num_pages, page_size, 1] fp32) or a float dtype. Returns each
    head's attention-weighted latent [B, H, R] in q_latent's dtype. num_splits / block_n override the work split."""
    n_req, n_heads, rank = q_latent.shape
    rope_dim = q_rope.shape[2]
    is_fp8 = latent_pages.dtype == torch.uint8
    if is_fp8 and (latent_scale is None or rope_scale is None):
        raise ValueError("FP8 pages need latent_scale and rope_scale")
    for t in (q_latent, q_rope, latent_new, rope_new, latent_pages, rope_pages, block_tables):
        if t.stride(-1) != 1:
            raise ValueError("the last dimension of every input must be contiguous")
    out = q_latent.new_empty(n_req, n_heads, rank)
    if n_req == 0:
        return out
    page_size = latent_pages.shape[1]
    block_r, block_dr = _pow2(rank), _pow2(rope_dim)
    if block_n is None:
        block_n = LATENT_BLOCK_N
    head_blocks = triton.cdiv(n_heads, LATENT_BLOCK_H)
    num_splits, tiles_per_split = _split_context(block_tables.shape[1] * page_size, block_n, n_req * head_blocks,
                                                 num_splits, q_latent.device)
    one = num_splits == 1
    part_acc, part_ml = _partials(out, num_splits)
    dot_dtype = _dot_dtype(q_latent)
    scales, s_strides = _page_scales(*((latent_scale, rope_scale) if is_fp8 else (None, None)), context_lens,
                                     "latent_scale and rope_scale", "1")
    _latent_decode_kernel[(n_req, head_blocks, num_splits)](
        q_latent, q_rope, latent_new, rope_new, latent_pages, rope_pages, scales[0], scales[1],
        block_tables, context_lens, out, part_acc, part_ml,
        scale * _LOG2E, num_splits, tiles_per_split * block_n,
        q_latent.stride(0), q_latent.stride(1), q_rope.stride(0), q_rope.stride(1), latent_new.stride(0),
        rope_new.stride(0), latent_pages.stride(0), latent_pages.stride(1), rope_pages.stride(0),
        rope_pages.stride(1), block_tables.stride(0), out.stride(0), out.stride(1), *s_strides,
        H=n_heads, PAGE_SIZE=page_size, R=rank, DR=rope_dim,
        BLOCK_H=LATENT_BLOCK_H, BLOCK_N=block_n, BLOCK_R=block_r, BLOCK_DR=block_dr,
        IS_FP8=is_fp8, DOT_DTYPE=dot_dtype, IEEE=dot_dtype == tl.float32, NUM_SPLITS_IS_ONE=one,
        num_warps=LATENT_NUM_WARPS,
    )
    if not one:
        _merge_splits(part_acc, part_ml, out, block_r)
    return out


def triton_latent_decode_attention(
    cache: PagedKVCache,
    layer: int,
    q_latent: torch.Tensor,
    q_rope: torch.Tensor,
    latent: torch.Tensor,
    rope_key: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scaling: float,
) -> torch.Tensor:
    """The engine's latent decode attention (contract of `attention.torch_latent_decode_attention`) on the kernel;
    the latent layout keeps latents in the cache's K part and rotary keys in its V part."""
    scales = (cache.k_scale[layer], cache.v_scale[layer]) if cache.is_fp8 else (None, None)
    return paged_latent_decode_attention(
        q_latent, q_rope, latent, rope_key, cache.k[layer], cache.v[layer], block_tables, context_lens, scaling,
        *scales,
    )
