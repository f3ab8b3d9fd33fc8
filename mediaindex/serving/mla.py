"""Multi-head latent attention (MLA, DeepSeek-V3) served from latent pages.

transformers' DeepseekV3Attention compresses each token into a KV latent (kv_lora_rank values, after
kv_a_layernorm) and one rotary key shared by all heads, then decompresses the latent with kv_b_proj into per-head
K (no-rope part) and V before calling the attention function. The engine's pages hold the latent and the rotary
key instead (see `KVLayout.latent`): 512 + 64 values per token and layer for DeepSeek-V3, against 128 heads x
(192 + 128) decompressed. Each attention module's class is swapped for `LatentDeepseekV3Attention`, whose forward
keeps transformers' projections, norms and rotary embedding and changes only what attention runs over:

- decode absorbs the up-projections. kv_b_proj holds, per head h, W_UK[h] [nope, R] and W_UV[h] [v, R]. The
  no-rope score q_nope . (W_UK[h] c) equals (q_nope W_UK[h]) . c, so the query is mapped into latent space once
  and scores run over the cached latents c directly (plus q_rope . rope key); the attention-weighted latent goes
  through W_UV[h] once per head. Nothing is decompressed per cached token.
- prefill decompresses (the chunk's tokens and its cached context) and runs the packed prefill attention, as
  transformers computes it: prompt chunks have many queries per key, where decompressing once is the cheaper side.

The numerics policy of K/V caches holds: the step's own tokens attend at model precision, cached context is read
from the pages (dequantised when FP8), and the step's latents are written after attending.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import nn
from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
    DeepseekV3Attention,
    apply_rotary_pos_emb,
    apply_rotary_pos_emb_interleave,
)

from mediaindex.serving.attention import (
    StepMetadata,
    current_step,
    gather_context,
    packed_prefill_attention,
)
from mediaindex.serving.errors import UnsupportedModelError


def _dense_weight(proj: nn.Module) -> torch.Tensor:
    """The [out, in] matrix a projection applies: an nn.Linear's own weight (a view, no copy), or a quantized
    layer's dequantized weight."""
    if isinstance(proj, nn.Linear):
        return proj.weight
    dequantize = getattr(proj, "dequantize", None)
    if callable(dequantize):
        weight = dequantize()
        if isinstance(weight, torch.Tensor) and weight.dim() == 2:
            return weight
    raise UnsupportedModelError(f"cannot read the weight of {type(proj).__name__} to absorb it into MLA decode")


class LatentDeepseekV3Attention(DeepseekV3Attention):
    """DeepseekV3Attention whose K/V context lives in latent pages (only runs inside engine steps)."""

    # Quantized kv_b_proj: its weight dequantized once (absorption needs the matrix, not the layer's matmul).
    _dense_kv_b: torch.Tensor | None = None

    @property
    def _nope_v(self) -> tuple[int, int]:
        # transformers types these config-given sizes as optional; a built MLA module always has them.
        return int(self.qk_nope_head_dim), int(cast(int, self.v_head_dim))

    def _up_projections(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(W_UK [H, nope, R], W_UV [H, v, R]): kv_b_proj's rows for each head's no-rope key and its value."""
        nope, v_dim = self._nope_v
        weight = self._dense_kv_b if self._dense_kv_b is not None else _dense_weight(self.kv_b_proj)
        per_head = weight.view(-1, nope + v_dim, self.kv_lora_rank)
        return per_head[:, :nope], per_head[:, nope:]

    def _decompress(self, latent: torch.Tensor, rope_key: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-head K [N, H, nope + rope] and V [N, H, v] of latents [N, R] and rotary keys [N, rope]."""
        nope, v_dim = self._nope_v
        kv = self.kv_b_proj(latent).view(latent.shape[0], -1, nope + v_dim)
        k_nope, v = torch.split(kv, [nope, v_dim], dim=-1)
        k = torch.cat([k_nope, rope_key[:, None].expand(-1, k_nope.shape[1], -1)], dim=-1)
        return k, v

    def forward(
        self,
        hidden_states: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        attention_mask: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, None]:
        meta = current_step()
        n_tokens = hidden_states.shape[1]  # batch 1: the engine's flat step batch
        # Projections, norms and rotary embedding exactly as transformers computes them.
        if self.q_proj is not None:
            q = self.q_proj(hidden_states)
        else:  # low-rank query: transformers types the three modules optional, and builds all of them together
            q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(hidden_states)))
        q = q.view(1, n_tokens, -1, self.qk_head_dim).transpose(1, 2)
        q_nope, q_rope = torch.split(q, [self.qk_nope_head_dim, self.qk_rope_head_dim], dim=-1)
        compressed = self.kv_a_proj_with_mqa(hidden_states)
        latent, rope_key = torch.split(compressed, [self.kv_lora_rank, self.qk_rope_head_dim], dim=-1)
        latent = self.kv_a_layernorm(latent)
        rope_key = rope_key.view(1, 1, n_tokens, self.qk_rope_head_dim)
        cos, sin = position_embeddings
        rotate = apply_rotary_pos_emb_interleave if self.config.rope_interleave else apply_rotary_pos_emb
        q_rope, rope_key = rotate(q_rope, rope_key, cos, sin)

        # [T, H, D] per token; latent [T, R], rope_key [T, rope].
        q_nope, q_rope = q_nope[0].transpose(0, 1), q_rope[0].transpose(0, 1)
        latent, rope_key = latent[0], rope_key[0, 0]
        out = q_nope.new_empty(n_tokens, self.num_heads, self._nope_v[1])
        d = meta.num_decode
        if d:
            out[:d] = self._absorbed_decode(meta, q_nope[:d], q_rope[:d], latent[:d], rope_key[:d])
        if meta.prefills:
            out[d:] = self._decompressed_prefill(meta, q_nope[d:], q_rope[d:], latent[d:], rope_key[d:])
        meta.kv_cache.write(self.layer_idx, meta.slot_mapping, latent[:, None], rope_key[:, None])
        return self.o_proj(out.reshape(1, n_tokens, -1)), None

    def _absorbed_decode(
        self, meta: StepMetadata, q_nope: torch.Tensor, q_rope: torch.Tensor, latent: torch.Tensor,
        rope_key: torch.Tensor,
    ) -> torch.Tensor:
        assert meta.decode_block_tables is not None and meta.decode_context_lens is not None
        w_uk, w_uv = self._up_projections()
        q_latent = torch.einsum("thn,hnr->thr", q_nope, w_uk.to(q_nope.dtype))
        o_latent = meta.latent_decode_attention(
            meta.kv_cache, self.layer_idx, q_latent, q_rope, latent, rope_key, meta.decode_block_tables,
            meta.decode_context_lens, self.scaling,
        )
        return torch.einsum("thr,hvr->thv", o_latent, w_uv.to(o_latent.dtype))

    def _decompressed_prefill(
        self, meta: StepMetadata, q_nope: torch.Tensor, q_rope: torch.Tensor, latent: torch.Tensor,
        rope_key: torch.Tensor,
    ) -> torch.Tensor:
        cache, layer, dtype = meta.kv_cache, self.layer_idx, q_nope.dtype

        def context(tables: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            cached_latent, cached_rope = gather_context(cache, layer, tables, lengths, dtype)  # [N, 1, R], [N, 1, Dr]
            return self._decompress(cached_latent[:, 0], cached_rope[:, 0])

        k, v = self._decompress(latent, rope_key)
        q = torch.cat([q_nope, q_rope], dim=-1)
        return packed_prefill_attention(context, q, k, v, meta.prefills, self.scaling, None, False)


def use_latent_attention(model: nn.Module) -> int:
    """Swap every DeepseekV3Attention of `model` for the latent-cache version (in place, idempotent). Returns how
    many modules run over latent pages; refuses a model with MLA layers of another kind."""
    count = 0
    for module in model.modules():
        if isinstance(module, DeepseekV3Attention):
            if type(module) is DeepseekV3Attention:
                module.__class__ = LatentDeepseekV3Attention
            if not isinstance(module, LatentDeepseekV3Attention):
                raise UnsupportedModelError(f"{type(module).__name__} cannot run over a latent cache")
            if not isinstance(module.kv_b_proj, nn.Linear) and module._dense_kv_b is None:
                module._dense_kv_b = _dense_weight(module.kv_b_proj).detach()
            count += 1
    if count == 0:
        raise UnsupportedModelError(
            f"{type(model).__name__} has an MLA config but no DeepseekV3Attention layers to run over a latent cache"
        )
    return count
