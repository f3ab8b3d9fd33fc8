"""Paged K/V storage: per layer, [num_pages, page_size, kv_heads, head_dim] for K and V.

For MLA models (DeepSeek-V3) the pages hold the compressed latent instead (see `KVLayout.latent`): the K part is
the KV latent after its RMSNorm (kv_lora_rank values, one "head"), the V part the rotary key shared by all heads
(qk_rope_head_dim values). `mla` turns them into attention without decompressing per head.

FP8 pages are stored as uint8 bytes and viewed as float8_e4m3fn, with one fp32 scale per (token, KV head) for K
and one for V, stored next to the pages (the token's own amax over the head dim maps to e4m3's largest value).
A token's stored bytes therefore depend on its own K/V alone: never on which requests were written before it (a
scale shared by all tokens and fixed by the first write would make every later request's output depend on
traffic), and no value saturates. The scales cost 8 bytes per token and head against 2 * head_dim bytes of FP8 data (+6% at
head dim 64, +3% at 128).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PretrainedConfig

FP8_MAX = 448.0  # largest finite float8_e4m3fn

_ELEM_BYTES = {"fp32": 4, "bf16": 2, "fp8_e4m3": 1}
_STORAGE = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp8_e4m3": torch.uint8}


# Model types whose attention `mla` runs over latent pages (transformers' DeepseekV3Attention; Kanana-2 and
# Kimi-K2 checkpoints load as deepseek_v3).
LATENT_MODEL_TYPES = frozenset({"deepseek_v3"})


@dataclass(frozen=True)
class KVLayout:
    """Per-layer shape of what a token leaves in the cache: two parts of num_kv_heads x k_head_dim and
    num_kv_heads x v_head_dim values. For attention caches they are K and V; with `latent` (MLA) they are the
    KV latent (one head of kv_lora_rank) and the shared rotary key (one head of qk_rope_head_dim)."""

    num_layers: int
    num_kv_heads: int
    k_head_dim: int
    v_head_dim: int
    latent: bool = False

    @classmethod
    def from_config(cls, config: PretrainedConfig) -> KVLayout:
        cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
        n_layers = cfg.num_hidden_layers
        if getattr(cfg, "kv_lora_rank", None) and getattr(cfg, "qk_nope_head_dim", None):
            if getattr(cfg, "model_type", None) in LATENT_MODEL_TYPES:
                return cls(n_layers, 1, cfg.kv_lora_rank, cfg.qk_rope_head_dim, latent=True)
            # Other MLA variants: transformers decompresses the latent into per-head K and V before calling the
            # attention function, and this cache holds those.
            return cls(
                n_layers,
                cfg.num_attention_heads,
                cfg.qk_nope_head_dim + cfg.qk_rope_head_dim,
                cfg.v_head_dim,
            )
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        return cls(n_layers, kv_heads, head_dim, head_dim)


def bytes_per_page(layout: KVLayout, page_size: int, kind: str) -> int:
    """Pages and, for FP8, their per-token scales (fp32, K and V, per layer and head)."""
    per_token_head = (layout.k_head_dim + layout.v_head_dim) * _ELEM_BYTES[kind] + (8 if kind == "fp8_e4m3" else 0)
    return layout.num_layers * page_size * layout.num_kv_heads * per_token_head


def fixed_bytes(layout: KVLayout, kind: str) -> int:
    """Memory the cache needs besides pages (none: FP8 scales live with their pages)."""
    return 0


PER_PAGE_METADATA_BYTES = 8  # the int64 integrity tag; counted even when checks are off so capacity is stable


def pages_for_budget(budget_bytes: int, layout: KVLayout, page_size: int, kind: str) -> int:
    usable = budget_bytes - fixed_bytes(layout, kind)
    return max(0, usable // (bytes_per_page(layout, page_size, kind) + PER_PAGE_METADATA_BYTES))


def quantize_fp8_per_token(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [T, heads, D] as float8_e4m3fn bytes and its scales [T, heads] (each token and head's amax -> FP8_MAX)."""
    xf = x.float()
    scale = (xf.abs().amax(dim=-1) / FP8_MAX).clamp_min_(torch.finfo(torch.float32).tiny)
    q = (xf / scale[..., None]).clamp_(-FP8_MAX, FP8_MAX)
    return q.to(torch.float8_e4m3fn).view(torch.uint8), scale


def quantize_fp8(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x [T, heads, D] divided by a per-head scale [heads], saturated to e4m3's range, as float8_e4m3fn bytes."""
    q = (x.float() / scale[None, :, None]).clamp_(-FP8_MAX, FP8_MAX)
    return q.to(torch.float8_e4m3fn).view(torch.uint8)


def fp8_bytes_to_float(b: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Decode float8_e4m3fn bytes. On CPU, torch's element-wise float8 conversion is slow; moving the bits into an
    fp16 pattern (sign, exponent, mantissa shifted into place) and rescaling by 2**8 for the exponent-bias difference
    (15 - 7) is exact for every finite e4m3 value, subnormals included, and several times cheaper. Pages never hold
    the NaN code (writes saturate)."""
    if b.device.type != "cpu":
        return b.view(torch.float8_e4m3fn).to(dtype)
    x = b.to(torch.int16)
    bits = ((x & 0x7F) << 7) | ((x & 0x80) << 8)
    return bits.view(torch.float16).to(dtype) * 256.0


class PagedKVCache:
    def __init__(
        self,
        layout: KVLayout,
        num_pages: int,
        page_size: int,
        kind: str,
        device: torch.device | str = "cpu",
    ) -> None:
        if kind not in _STORAGE:
            raise ValueError(f"unknown KV cache dtype {kind!r}; expected one of {sorted(_STORAGE)}")
        self.layout = layout
        self.num_pages = num_pages
        self.page_size = page_size
        self.kind = kind
        self.device = torch.device(device)
        storage = _STORAGE[kind]
        shape_k = (num_pages, page_size, layout.num_kv_heads, layout.k_head_dim)
        shape_v = (num_pages, page_size, layout.num_kv_heads, layout.v_head_dim)
        self.k = [torch.zeros(shape_k, dtype=storage, device=self.device) for _ in range(layout.num_layers)]
        self.v = [torch.zeros(shape_v, dtype=storage, device=self.device) for _ in range(layout.num_layers)]
        self.is_fp8 = kind == "fp8_e4m3"
        # Per (layer, page, slot, kv head); only FP8 pages have them (a 1-element placeholder otherwise).
        scale_shape = (layout.num_layers, num_pages, page_size, layout.num_kv_heads) if self.is_fp8 else (1, 1, 1, 1)
        self.k_scale = torch.zeros(scale_shape, dtype=torch.float32, device=self.device)
        self.v_scale = torch.zeros_like(self.k_scale)

    @property
    def nbytes(self) -> int:
        pages = sum(t.numel() * t.element_size() for t in self.k + self.v)
        return pages + (self.k_scale.numel() + self.v_scale.numel()) * 4 * int(self.is_fp8)

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store k [T, kv_heads, Dk] and v [T, kv_heads, Dv] at flat slots (page * page_size + offset)."""
        if self.is_fp8:
            k, k_scale = quantize_fp8_per_token(k)
            v, v_scale = quantize_fp8_per_token(v)
            self.k_scale[layer].view(-1, k_scale.shape[1]).index_copy_(0, slots, k_scale)
            self.v_scale[layer].view(-1, v_scale.shape[1]).index_copy_(0, slots, v_scale)
        else:
            k = k.to(self.k[layer].dtype)
            v = v.to(self.v[layer].dtype)
        self.k[layer].view(-1, *k.shape[1:]).index_copy_(0, slots, k)
        self.v[layer].view(-1, *v.shape[1:]).index_copy_(0, slots, v)

    def gather(self, layer: int, block_tables: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V of the pages in block_tables [B, P] as [B, P * page_size, kv_heads, D] in `dtype`,
        dequantised for fp8 pages."""
        k = self.k[layer][block_tables].flatten(1, 2)
        v = self.v[layer][block_tables].flatten(1, 2)
        if self.is_fp8:
            # The product in fp32, rounded once to `dtype` (per-token scales rounded to bf16 first would add noise).
            ks = self.k_scale[layer][block_tables].flatten(1, 2)[..., None]
            vs = self.v_scale[layer][block_tables].flatten(1, 2)[..., None]
            k = (fp8_bytes_to_float(k, torch.float32) * ks).to(dtype)
            v = (fp8_bytes_to_float(v, torch.float32) * vs).to(dtype)
        else:
            k = k.to(dtype)
            v = v.to(dtype)
        return k, v

    def read(self, layer: int, pages: list[int], num_tokens: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """K [T, kv_heads, Dk] and V [T, kv_heads, Dv] of one request's first `num_tokens` tokens, held in `pages`
        (its page table), in `dtype`."""
        table = torch.tensor([pages], dtype=torch.int64, device=self.device)
        k, v = self.gather(layer, table, dtype)
        return k[0, :num_tokens], v[0, :num_tokens]

    def scribble(self, page: int, generator: torch.Generator) -> None:
        """Fault injection: overwrite one page with unrelated data in every layer."""
        for layer in range(self.layout.num_layers):
            for store in (self.k[layer], self.v[layer]):
                noise = torch.randn(store[page].shape, generator=generator) * 3.0
                if self.is_fp8:
                    store[page] = noise.to(torch.float8_e4m3fn).view(torch.uint8).to(store.device)
                else:
                    store[page] = noise.to(store.dtype).to(store.device)
