"""EmbeddingGemma on onnxruntime: the converted file of `gemma_export`, its tokenizer, its prompts. Importing
and using this module loads neither torch nor transformers, so a one-shot search starts quickly.

The tokenizer is read from its SentencePiece model (`tokenizer.model`, 0.07 s), not from `tokenizer.json`
(the conversion's, a second to parse): the same ids (tests compare them over real subtitles), except that markers
such as "<eos>" written in a text are read as text, not as the model's own tokens."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mediaindex.errors import ModelLoadError
from mediaindex.models.gemma_export import MAX_TOKENS, read_prompts

# Passages are embedded longest first in batches of at most this many tokens (padding included), so a batch of
# long passages does not build one huge attention tensor.
BATCH_TOKENS = 8192


class SentencePieceTokens:
    """Token ids and attention masks as the model reads them: <bos>, the text's pieces (cut to fit MAX_TOKENS),
    <eos>, padded on the right with 0."""

    def __init__(self, path: Path) -> None:
        import sentencepiece

        try:
            self._model = sentencepiece.SentencePieceProcessor(model_file=str(path))
        except (OSError, RuntimeError) as exc:  # a missing or damaged model file
            raise ModelLoadError(f"cannot read the tokenizer {path}: {exc}") from exc
        self._bos, self._eos = self._model.bos_id(), self._model.eos_id()

    def __call__(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        rows = [[self._bos, *pieces[:MAX_TOKENS - 2], self._eos] for pieces in self._model.encode(texts)]
        ids = np.zeros((len(rows), max(map(len, rows))), dtype=np.int64)
        mask = np.zeros_like(ids)
        for i, row in enumerate(rows):
            ids[i, :len(row)] = row
            mask[i, :len(row)] = 1
        return ids, mask


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
        self._tokenize = SentencePieceTokens(folder / "tokenizer.model")
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
        ids, mask = self._tokenize(texts)
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
        ids, mask = self._tokenize([self._prompts.query + text])
        return self._run(ids, mask)[0]
