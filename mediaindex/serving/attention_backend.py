"""Which implementation runs decode attention: the Triton paged kernel on CUDA, the PyTorch reference elsewhere.

`auto` picks Triton when the KV cache is on CUDA, triton imports and the GPU can convert FP8 (when the pages are
FP8), and otherwise falls back to the reference path with the reason logged. `torch` forces the reference path;
`triton` forces the kernel and fails loudly when it cannot run. Forcing `triton` on CPU works only under Triton's
interpreter (TRITON_INTERPRET=1), which tests use. triton is imported only once the kernel is chosen, so CPU-only
installs never import it.
"""

from __future__ import annotations

import importlib
import logging
import os
from typing import cast

from mediaindex.serving.attention import (
    DecodeAttention,
    LatentDecodeAttention,
    torch_decode_attention,
    torch_latent_decode_attention,
)
from mediaindex.serving.config import AttentionBackend
from mediaindex.serving.errors import ServingError
from mediaindex.serving.kv_cache import PagedKVCache

log = logging.getLogger(__name__)

# float8e4nv conversions need Ada/Hopper (sm_89+); older GPUs read FP8 pages through the reference path.
FP8_MIN_CAPABILITY = (8, 9)


def _triton_obstacle(cache: PagedKVCache) -> str | None:
    """Why the kernel cannot run for this cache, or None."""
    if cache.device.type != "cuda":
        if os.environ.get("TRITON_INTERPRET") == "1":
            return None
        return f"the KV cache is on {cache.device.type}, not CUDA (TRITON_INTERPRET=1 runs the kernel on CPU)"
    if cache.is_fp8:
        import torch

        capability = torch.cuda.get_device_capability(cache.device)
        if capability < FP8_MIN_CAPABILITY:
            return f"FP8 pages need compute capability {FP8_MIN_CAPABILITY}, this GPU has {capability}"
    return None


def _select(requested: AttentionBackend, cache: PagedKVCache, kernel: str, what: str) -> tuple[str, object]:
    """(backend name, the Triton module's `kernel` function or None for the reference path)."""
    if requested == "torch":
        log.info("%s: PyTorch reference path (attention_backend=torch)", what)
        return "torch", None
    if requested == "auto" and cache.device.type != "cuda":
        log.info("%s: PyTorch reference path (the KV cache is on %s)", what, cache.device.type)
        return "torch", None
    obstacle = _triton_obstacle(cache)
    if obstacle is None:
        try:
            module = importlib.import_module("mediaindex.serving.triton_decode")
        except Exception as exc:  # ImportError, or a broken triton / compiler install
            obstacle = f"triton is unavailable: {type(exc).__name__}: {exc}"
    if obstacle is not None:
        if requested == "triton":
            raise ServingError(f"attention_backend='triton' cannot run: {obstacle}")
        log.warning("%s: falling back to the PyTorch reference path: %s", what, obstacle)
        return "torch", None
    log.info("%s: Triton paged kernel (%s pages)", what, cache.kind)
    return "triton", getattr(module, kernel)


def select_decode_attention(requested: AttentionBackend, cache: PagedKVCache) -> tuple[str, DecodeAttention]:
    """(backend name, decode attention function) for `requested` and this cache's device and dtype."""
    name, kernel = _select(requested, cache, "triton_decode_attention", "decode attention")
    return name, cast(DecodeAttention, kernel) if kernel is not None else torch_decode_attention


def select_latent_decode_attention(
    requested: AttentionBackend, cache: PagedKVCache
) -> tuple[str, LatentDecodeAttention]:
    """The same choice for MLA models over latent pages."""
    name, kernel = _select(requested, cache, "triton_latent_decode_attention", "latent decode attention")
    return name, cast(LatentDecodeAttention, kernel) if kernel is not None else torch_latent_decode_attention
