"""Fixed lists of passages embedded once per embedder and kept in the model cache (the search's background
passages, the image classifier's class names): embedding them takes seconds that a one-shot command should
pay once, not each run."""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from mediaindex.models.text_embed import TextEmbedder


def embedded_once(embedder: TextEmbedder, texts: list[str], cache_dir: Path | None, kind: str) -> np.ndarray:
    """`texts` embedded by `embedder` as passages, each normalised, (len(texts), dim) float32. Kept under
    `cache_dir`/search/`kind`-<digest of the embedder's name and the texts>.npy; a file that cannot be read or
    does not fit is made again, an unwritable cache only costs the time again."""
    cached = cache_file(embedder.name, texts, cache_dir, kind) if cache_dir is not None else None
    vectors: np.ndarray | None = None
    if cached is not None and cached.is_file():
        with contextlib.suppress(OSError, ValueError, EOFError):
            vectors = np.load(cached, allow_pickle=False)
    if vectors is None or vectors.shape != (len(texts), embedder.dim) or not np.isfinite(vectors).all():
        vectors = np.asarray(embedder.embed_passages(texts), dtype=np.float32)
        vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        if cached is not None:
            with contextlib.suppress(OSError):
                cached.parent.mkdir(parents=True, exist_ok=True)
                partial = cached.with_suffix(f".{os.getpid()}.partial")
                with partial.open("wb") as out:
                    np.save(out, vectors, allow_pickle=False)
                os.replace(partial, cached)
    return vectors


def cache_file(embedder_name: str, texts: list[str], cache_dir: Path, kind: str) -> Path:
    """Where `embedded_once` keeps these texts' vectors."""
    digest = hashlib.sha256("\n".join([embedder_name, *texts]).encode()).hexdigest()[:16]
    return cache_dir / "search" / f"{kind}-{digest}.npy"
