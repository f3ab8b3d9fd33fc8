"""Paged K/V storage: per layer, [num_pages, page_size, kv_heads, head_dim] for K and V.

FP8 pages are stored as uint8 bytes and viewed as float8_e4m3fn; each (layer, kv head) has one scale for K and one
for V, computed from the first data written to that layer (amax with headroom). The engine makes that first write
a fixed calibration pass at load (`serving.calibration`), so scales never depend on traffic. Values beyond the
range saturate.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PretrainedConfig

FP8_MAX = 448.0  # largest finite float8_e4m3fn
# Scales are fixed once calibrated (changing them would reinterpret pages already written), so leave room for
# later tokens larger than the calibration batch. e4m3's relative precision does not depend on the scale, only the
# smallest representable magnitudes do, so headroom is cheap.
SCALE_HEADROOM = 2.0

_ELEM_BYTES = {"fp32": 4, "bf16": 2, "fp8_e4m3": 1}
_STORAGE = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp8_e4m3": torch.uint8}


@dataclass(frozen=True)
class KVLayout:
    """Per-layer K/V shape. K and V head dims differ for MLA models (DeepSeek-V3)."""

    num_layers: int
    num_kv_heads: int
    k_head_dim: int
    v_head_dim: int

    @classmethod
    def from_config(cls, config: PretrainedConfig) -> KVLayout:
        cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
        n_layers = cfg.num_hidden_layers
        if getattr(cfg, "kv_lora_rank", None) and getattr(cfg, "qk_nope_head_dim", None):
            # MLA: transformers decompresses the latent into per-head K and V before calling the attention
            # function, so this cache holds decompressed per-head K/V. Latent caching is not done here.
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
    return layout.num_layers * page_size * layout.num_kv_heads * (layout.k_head_dim + layout.v_head_dim) * _ELEM_BYTES[kind]


def fixed_bytes(layout: KVLayout, kind: str) -> int:
    """Memory the cache needs besides pages: the fp8 scales (fp32, K and V, per layer and head)."""
    return 2 * layout.num_layers * layout.num_kv_heads * 4 if kind == "fp8_e4m3" else 0


PER_PAGE_METADATA_BYTES = 8  # the int64 integrity tag; counted even when checks are off so capacity is stable


def pages_for_budget(budget_bytes: int, layout: KVLayout, page_size: int, kind: str) -> int:
    usable = budget_bytes - fixed_bytes(layout, kind)
    return max(0, usable // (bytes_per_page(layout, page_size, kind) + PER_PAGE_METADATA_BYTES))


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
        self.k_scale = torch.ones(layout.num_layers, layout.num_kv_heads, dtype=torch.float32, device=self.device)
        self.v_scale = torch.ones_like(self.k_scale)
        self.calibrated = [False] * layout.num_layers

    @property
    def nbytes(self) -> int:
        pages = sum(t.numel() * t.element_size() for t in self.k + self.v)
        return pages + (self.k_scale.numel() + self.v_scale.numel()) * 4 * int(self.is_fp8)

    def _calibrate(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        tiny = torch.finfo(torch.float32).tiny
        k_amax = k.detach().abs().float().amax(dim=(0, 2))
        v_amax = v.detach().abs().float().amax(dim=(0, 2))
        self.k_scale[layer] = (k_amax * SCALE_HEADROOM / FP8_MAX).clamp_min(tiny)
        self.v_scale[layer] = (v_amax * SCALE_HEADROOM / FP8_MAX).clamp_min(tiny)
        self.calibrated[layer] = True

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store k [T, kv_heads, Dk] and v [T, kv_heads, Dv] at flat slots (page * page_size + offset)."""
        if self.is_fp8:
            if not self.calibrated[layer]:
                self._calibrate(layer, k, v)
            k = quantize_fp8(k, self.k_scale[layer])
            v = quantize_fp8(v, self.v_scale[layer])
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
            k = fp8_bytes_to_float(k, dtype) * self.k_scale[layer].to(dtype)[:, None]
            v = fp8_bytes_to_float(v, dtype) * self.v_scale[layer].to(dtype)[:, None]
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
