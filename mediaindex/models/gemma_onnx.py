"""EmbeddingGemma on onnxruntime: the converted file of `gemma_export`, its tokenizer, its prompts. Importing
and using this module loads neither torch nor transformers, so a one-shot search starts quickly."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mediaindex.errors import ModelLoadError
from mediaindex.models.gemma_export import load_tokenizer, read_prompts, tokenize

# Passages are embedded longest first in batches of at most this many tokens (padding included), so a batch of
# long passages does not build one huge attention tensor.
BATCH_TOKENS = 8192


class GemmaOnnxEmbedder:
    """EmbeddingGemma-300M through onnxruntime; vectors are L2-normalised (the graph ends with the normalisation).

    Its int8 layers quantize their input with one scale per batch, so a passage's vector moves slightly (cosine
    about 0.995) with the passages it is batched with, as much as int8 differs from torch fp32.

    Its threads wait passively between operators (no spinning): beside the other stages on the same cores a
    spinning thread holds a core that the work it waits for needs."""

    def __init__(self, model_file: Path, folder: Path, name: str = "embeddinggemma", threads: int = 0,
                 batch_size: int = 64) -> None:
        import onnxruntime as ort

        self.name = name
        self.batch_size = batch_size
        self._prompts = read_prompts(folder)
        self._tokenizer = load_tokenizer(folder / "tokenizer.json")
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads  # 0: onnxruntime's default, one per physical core
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        try:
            self._session = ort.InferenceSession(str(model_file), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own exception types for unreadable models
            raise ModelLoadError(f"cannot load the converted embedder {model_file}: {exc}") from exc
        shape = self._session.get_outputs()[0].shape
        if not isinstance(shape[-1], int):
            raise ModelLoadError(f"the converted embedder {model_file} does not say its embedding size")
        self.dim = int(shape[-1])

    def _run(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        out = self._session.run(None, {"input_ids": ids, "attention_mask": mask})[0]
        return np.asarray(out, dtype=np.float32)

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return self._embed([self._prompts.document + t for t in texts])

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self._embed([self._prompts.query + t for t in texts])

    def _embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        ids, mask = tokenize(self._tokenizer, texts)
        lengths = mask.sum(axis=1)
        order = np.argsort(-lengths, kind="stable")
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        start = 0
        while start < len(order):
            longest = int(lengths[order[start]])  # sorted longest first: the batch pads to its first text
            size = max(1, min(self.batch_size, BATCH_TOKENS // max(longest, 1)))
            chosen = order[start : start + size]
            out[chosen] = self._run(ids[chosen, :longest], mask[chosen, :longest])
            start += size
        return out

    def embed_query(self, text: str) -> np.ndarray:
        ids, mask = tokenize(self._tokenizer, [self._prompts.query + text])
        return self._run(ids, mask)[0]
