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


@dataclass
class StepMetadata:
    kv_cache: PagedKVCache
    slot_mapping: torch.Tensor  # [T] flat slot for each token of the batch
    num_decode: int  # the first num_decode tokens are single-token requests
    decode_block_tables: torch.Tensor | None = None  # [num_decode, P]
    decode_context_lens: torch.Tensor | None = None  # [num_decode]
    prefills: list[PrefillSpan] = field(default_factory=list)
    decode_attention: DecodeAttention = torch_decode_attention


_STEP: contextvars.ContextVar[StepMetadata | None] = contextvars.ContextVar("mediaindex_step", default=None)


@contextlib.contextmanager
def step_context(meta: StepMetadata) -> Iterator[None]:
    token = _STEP.set(meta)
    try:
        yield
    finally:
        _STEP.reset(token)


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
    meta = _STEP.get()
    if meta is None:
        raise RuntimeError(
            f"attention implementation {ATTN_IMPLEMENTATION!r} only runs inside LLMEngine steps; "
            "use another attn_implementation for plain forward calls"
        )
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
        out[d:] = _packed_prefill(cache, layer, q[d:], k[d:], v[d:], meta.prefills, scaling, window, gqa)

    cache.write(layer, meta.slot_mapping, k, v)
    return out[None], None


def _packed_prefill(
    cache: PagedKVCache,
    layer: int,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    spans: list[PrefillSpan],
    scaling: float | None,
    window: int | None,
    gqa: bool,
) -> torch.Tensor:
    """Attention of every prefill chunk of the step in one call. q [T, H, Dk], k/v [T, Hkv, D]: the chunks' tokens,
    packed back to back in span order. Keys are every span's cached context (one gather over all their block
    tables) followed by all new tokens; a mask keeps each query to its own request, causal and within the window.
    The mask is dense (queries x keys of the whole step); the step's token budget bounds it."""
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
        kc, vc = cache.gather(layer, tables, q.dtype)  # [S, width * page_size, Hkv, D]
        pos = torch.arange(kc.shape[1], device=dev)
        held = pos[None, :] < ctx[:, None]
        keys.insert(0, kc[held])
        values.insert(0, vc[held])
        k_span.insert(0, ids.repeat_interleave(ctx))
        k_pos.insert(0, pos[None, :].expand(len(spans), -1)[held])
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
