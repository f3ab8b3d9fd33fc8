"""The attention function the engine registers with transformers' AttentionInterface.

transformers' attention modules compute Q/K/V (with rotary embeddings) and then call the registered function with
[batch, heads, tokens, dim] tensors. The engine packs every scheduled token of every request into one flat batch
(batch size 1) with explicit position ids, and passes the per-step page layout through a context variable, since
the model's forward does not know about pages.

Policy ("high precision for prefill, cache precision for decode"): the tokens computed in this step attend to each
other using the freshly computed K/V at model precision; earlier context is read from the pages (dequantised from
FP8 when the cache is FP8). The new K/V are written to the pages after attending.

Decode tokens go through one of two implementations with the same numerics policy (see `attention_backend`): the
PyTorch reference below (gather pages, dequantise, `scaled_dot_product_attention`; any device) or the Triton
paged kernel in `triton_decode` (CUDA, reads FP8 pages directly). Prefill always uses the reference path.

MLA models with a latent cache do not come through `paged_attention_forward`: their attention module (see `mla`)
calls the latent decode attention and the packed prefill below itself.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import torch
import torch.nn.functional as F
from transformers import AttentionInterface

from mediaindex.serving.errors import UnsupportedModelError
from mediaindex.serving.kv_cache import PagedKVCache

ATTN_IMPLEMENTATION = "mediaindex_paged"

# Keyword arguments transformers' attention modules pass for features the paged path does not implement.
_FEATURES = {"softcap": "attention logit softcapping", "s_aux": "attention sinks"}


@dataclass
class PrefillSpan:
    """One request's chunk of several tokens in the flat batch."""

    start: int
    end: int
    context_len: int  # tokens of this request already in the cache before this chunk
    block_table: torch.Tensor  # [pages covering context_len]


def torch_decode_attention(
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
    """Reference decode attention. q [d, H, Dk], k [d, Hkv, Dk] and v [d, Hkv, Dv]: one new token per request;
    block_tables [d, P], context_lens [d]: its pages and the tokens already in them. `window`: a sliding window
    (the token sees itself and the window - 1 tokens before it), None for full attention. Returns [d, H, Dv]."""
    kc, vc = cache.gather(layer, block_tables, q.dtype)  # [d, L, Hkv, D]
    length = kc.shape[1]
    # The current token's own K/V go last, at model precision.
    kd = torch.cat([kc, k[:, None]], dim=1).transpose(1, 2)
    vd = torch.cat([vc, v[:, None]], dim=1).transpose(1, 2)
    pos = torch.arange(length + 1, device=q.device)
    mask = pos[None, :] < context_lens[:, None]
    if window is not None:
        mask &= pos[None, :] > context_lens[:, None] - window
    mask |= pos[None, :] == length
    o = F.scaled_dot_product_attention(
        q[:, :, None], kd, vd, attn_mask=mask[:, None, None, :], scale=scaling, enable_gqa=q.shape[1] != k.shape[1]
    )
    return o[:, :, 0]


# (cache, layer, q, k, v, block_tables, context_lens, scaling, window) -> [d, H, Dv]
DecodeAttention = Callable[
    [PagedKVCache, int, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, float | None, int | None],
    torch.Tensor,
]


def torch_latent_decode_attention(
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
    """Reference decode attention over latent pages (MLA with the up-projections absorbed, see `mla`).

    q_latent [d, H, R]: each head's no-rope query already mapped into latent space; q_rope [d, H, Dr]: its rotary
    part. latent [d, R] and rope_key [d, Dr]: the new token's own, at model precision. A key is a token's latent
    and rotary key side by side, and its value is the latent itself: every head attends over the same keys (one
    shared "KV head"). Returns each head's attention-weighted latent [d, H, R]."""
    lc, rc = cache.gather(layer, block_tables, q_latent.dtype)  # [d, L, 1, R], [d, L, 1, Dr]
    length = lc.shape[1]
    own = torch.cat([latent, rope_key], dim=-1)[:, None]  # the current token goes last, at model precision
    keys = torch.cat([torch.cat([lc, rc], dim=-1)[:, :, 0], own], dim=1)  # [d, L + 1, R + Dr]
    rank = q_latent.shape[-1]
    pos = torch.arange(length + 1, device=q_latent.device)
    mask = (pos[None, :] < context_lens[:, None]) | (pos[None, :] == length)
    # The heads are the queries of one shared key set (no per-head copies of the keys).
    o = F.scaled_dot_product_attention(
        torch.cat([q_latent, q_rope], dim=-1)[:, None], keys[:, None], keys[:, None, :, :rank],
        attn_mask=mask[:, None, None, :], scale=scaling,
    )
    return o[:, 0]


# (cache, layer, q_latent, q_rope, latent, rope_key, block_tables, context_lens, scaling) -> [d, H, R]
LatentDecodeAttention = Callable[
    [PagedKVCache, int, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, float],
    torch.Tensor,
]

# (block tables [S, P], context lengths [S]) -> (K [N, Hkv, Dk], V [N, Hkv, Dv]): the cached context of a step's
# prefill chunks, each span's first context_len tokens, spans back to back (N = sum of the lengths).
ContextReader = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def gather_context(
    cache: PagedKVCache, layer: int, tables: torch.Tensor, lengths: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """Both parts of each table's first `lengths` tokens in `dtype`, packed as a ContextReader returns them."""
    first, second = cache.gather(layer, tables, dtype)  # [S, P * page_size, heads, D]
    held = torch.arange(first.shape[1], device=tables.device)[None, :] < lengths[:, None]
    return first[held], second[held]


@dataclass
class StepMetadata:
    kv_cache: PagedKVCache
    slot_mapping: torch.Tensor  # [T] flat slot for each token of the batch
    num_decode: int  # the first num_decode tokens are single-token requests
    decode_block_tables: torch.Tensor | None = None  # [num_decode, P]
    decode_context_lens: torch.Tensor | None = None  # [num_decode]
    prefills: list[PrefillSpan] = field(default_factory=list)
    decode_attention: DecodeAttention = torch_decode_attention
    latent_decode_attention: LatentDecodeAttention = torch_latent_decode_attention  # latent (MLA) caches


_STEP: contextvars.ContextVar[StepMetadata | None] = contextvars.ContextVar("mediaindex_step", default=None)


@contextlib.contextmanager
def step_context(meta: StepMetadata) -> Iterator[None]:
    token = _STEP.set(meta)
    try:
        yield
    finally:
        _STEP.reset(token)


def current_step() -> StepMetadata:
    """The page layout of the engine step being run (set by the model runner around the model's forward)."""
    meta = _STEP.get()
    if meta is None:
        raise RuntimeError(
            f"attention implementation {ATTN_IMPLEMENTATION!r} only runs inside LLMEngine steps; "
            "use another attn_implementation for plain forward calls"
        )
    return meta


def paged_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: object,
) -> tuple[torch.Tensor, None]:
    meta = current_step()
    layer = cast(int, module.layer_idx)  # transformers' attention modules number their layer with an int
    cache = meta.kv_cache
    for feature in ("softcap", "s_aux"):
        if kwargs.get(feature) is not None:  # refused at load (unsupported_features); never drop it silently
            raise UnsupportedModelError(f"paged attention does not implement {_FEATURES[feature]}")
    sliding = cast("int | None", kwargs.get("sliding_window"))
    window = int(sliding) if sliding else None
    # [1, H, T, D] -> [T, H, D]
    q = query[0].transpose(0, 1)
    k = key[0].transpose(0, 1)
    v = value[0].transpose(0, 1)
    n_tokens, n_heads, _ = q.shape
    gqa = n_heads != k.shape[1]
    out = q.new_empty(n_tokens, n_heads, v.shape[-1])

    d = meta.num_decode
    if d:
        assert meta.decode_block_tables is not None and meta.decode_context_lens is not None
        out[:d] = meta.decode_attention(
            cache, layer, q[:d], k[:d], v[:d], meta.decode_block_tables, meta.decode_context_lens, scaling, window
        )

    if meta.prefills:

        def context(tables: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return gather_context(cache, layer, tables, lengths, q.dtype)

        out[d:] = packed_prefill_attention(context, q[d:], k[d:], v[d:], meta.prefills, scaling, window, gqa)

    cache.write(layer, meta.slot_mapping, k, v)
    return out[None], None


def packed_prefill_attention(
    context: ContextReader,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    spans: list[PrefillSpan],
    scaling: float | None,
    window: int | None,
    gqa: bool,
) -> torch.Tensor:
    """Attention of every prefill chunk of the step in one call. q [T, H, Dk], k/v [T, Hkv, D]: the chunks' tokens,
    packed back to back in span order. Keys are every span's cached context (`context` reads them for all block
    tables at once) followed by all new tokens; a mask keeps each query to its own request, causal and within the
    window. The mask is dense (queries x keys of the whole step); the step's token budget bounds it."""
    dev = q.device
    lens = torch.tensor([sp.end - sp.start for sp in spans], device=dev)
    ctx = torch.tensor([sp.context_len for sp in spans], device=dev)
    ids = torch.arange(len(spans), device=dev)
    q_span = ids.repeat_interleave(lens)
    first = torch.cumsum(lens, 0) - lens
    q_pos = torch.arange(q.shape[0], device=dev) - first[q_span] + ctx[q_span]
    keys, values, k_span, k_pos = [k], [v], [q_span], [q_pos]
    if int(ctx.max()) > 0:
        width = max(sp.block_table.numel() for sp in spans)
        tables = torch.zeros(len(spans), width, dtype=torch.int64, device=dev)
        for i, sp in enumerate(spans):
            tables[i, : sp.block_table.numel()] = sp.block_table
        kc, vc = context(tables, ctx)
        keys.insert(0, kc)
        values.insert(0, vc)
        ctx_first = torch.cumsum(ctx, 0) - ctx
        k_span.insert(0, ids.repeat_interleave(ctx))
        k_pos.insert(0, torch.arange(kc.shape[0], device=dev) - ctx_first.repeat_interleave(ctx))
    ks, vs, ksp, kps = torch.cat(keys), torch.cat(values), torch.cat(k_span), torch.cat(k_pos)
    mask = (ksp[None, :] == q_span[:, None]) & (kps[None, :] <= q_pos[:, None])
    if window is not None:
        mask &= kps[None, :] > q_pos[:, None] - window
    o = F.scaled_dot_product_attention(
        q.transpose(0, 1)[None], ks.transpose(0, 1)[None], vs.transpose(0, 1)[None], attn_mask=mask[None, None],
        scale=scaling, enable_gqa=gqa,
    )
    return o[0].transpose(0, 1)


def unsupported_features(model: torch.nn.Module) -> list[str]:
    """Attention features of `model` that the paged path would otherwise drop silently (so output would differ
    from the model's own). Sliding windows are honoured and not listed."""
    config: Any = model.config  # a transformers config (nn.Module types attributes as Tensor | Module)
    cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
    found: list[str] = []
    if getattr(cfg, "attn_logit_softcapping", None) is not None:
        found.append(_FEATURES["softcap"])
    if any(isinstance(getattr(m, "sinks", None), torch.Tensor) for m in model.modules()):
        found.append(_FEATURES["s_aux"])
    if getattr(cfg, "attention_chunk_size", None) or "chunked_attention" in (getattr(cfg, "layer_types", None) or []):
        found.append("chunked attention")
    return found


def register() -> str:
    """Register the function under ATTN_IMPLEMENTATION (idempotent) and return the name."""
    AttentionInterface.register(ATTN_IMPLEMENTATION, paged_attention_forward)
    return ATTN_IMPLEMENTATION
