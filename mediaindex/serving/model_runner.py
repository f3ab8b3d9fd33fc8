"""Runs one engine step through a transformers causal LM as a single flat batch over the paged KV cache."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from mediaindex.serving import attention
from mediaindex.serving.attention import (
    DecodeAttention,
    LatentDecodeAttention,
    PrefillSpan,
    StepMetadata,
    step_context,
    torch_decode_attention,
    torch_latent_decode_attention,
)
from mediaindex.serving.attention_backend import select_decode_attention, select_latent_decode_attention
from mediaindex.serving.config import AttentionBackend
from mediaindex.serving.integrity import (
    SCRATCH_TAG,
    CheckingTracker,
    IntegrityTracker,
    NoOpTracker,
    StepCheck,
    expected_entries,
)
from mediaindex.serving.kv_cache import PagedKVCache

# Loading lives in `loader`; these two stay importable from here, where callers have always found them.
from mediaindex.serving.loader import load_pretrained as load_pretrained
from mediaindex.serving.loader import load_smollm2 as load_smollm2
from mediaindex.serving.mla import use_latent_attention
from mediaindex.serving.sequence import Sequence, is_decode
from mediaindex.serving.stats import INTEGRITY_CHECK, EngineStats

log = logging.getLogger(__name__)


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


@dataclass
class StepInputs:
    """One forward's flat batch, as handed to the model and the kernels. `spans` is (seq, first token, tokens)
    for each request."""

    input_ids: list[int]
    positions: list[int]
    meta: StepMetadata
    logit_rows: list[int]
    row_map: list[LogitRows]
    spans: list[tuple[Sequence, int, int]]


class ModelRunner:
    """Packs scheduled tokens into one flat batch (decode tokens first, then prefill chunks) with explicit
    positions, runs the model with the paged attention function, and returns logits for requests that reached
    their last pending token.

    With split precision (`decode_model` given and not `model`), a step's prompt tokens run through `model` and
    its decode tokens through `decode_model`: two forwards over the one paged KV cache.

    With a checking tracker, the page ids of every forward (slot mapping and block tables) are checked against
    what their requests own before the model runs (see `integrity`)."""

    def __init__(
        self,
        model: PreTrainedModel,
        kv_cache: PagedKVCache,
        decode_model: PreTrainedModel | None = None,
        attention_backend: AttentionBackend = "auto",
        tracker: IntegrityTracker | None = None,
        stats: EngineStats | None = None,
    ) -> None:
        self.model = model.eval()
        self.decode_model = model if decode_model is None else decode_model.eval()
        self.kv_cache = kv_cache
        self.decode_attention: DecodeAttention = torch_decode_attention
        self.latent_decode_attention: LatentDecodeAttention = torch_latent_decode_attention
        if kv_cache.layout.latent:  # MLA over latent pages: the attention modules themselves change (see `mla`)
            self.attention_backend, self.latent_decode_attention = select_latent_decode_attention(
                attention_backend, kv_cache
            )
            for m in (self.model, self.decode_model):
                use_latent_attention(m)
        else:
            self.attention_backend, self.decode_attention = select_decode_attention(attention_backend, kv_cache)
        self.device = kv_cache.device
        self.page_size = kv_cache.page_size
        self.tracker = tracker or NoOpTracker()
        self.stats = stats or EngineStats()
        use_paged_attention(model)
        if self.decode_model is not model:
            use_paged_attention(self.decode_model)

    @property
    def split(self) -> bool:
        return self.decode_model is not self.model

    def slots(self, seq: Sequence, start: int, end: int) -> list[int]:
        """Flat cache slots (page * page_size + offset) of seq's positions [start, end)."""
        ps = self.page_size
        table = seq.page_table
        return [table[p // ps] * ps + p % ps for p in range(start, end)]

    @torch.inference_mode()
    def run(self, batch: list[tuple[Sequence, int]]) -> tuple[torch.Tensor, list[LogitRows], list[StepCheck]]:
        """Run one step. Returns logits [R, vocab], which rows belong to which sequence, and the integrity checks
        of its forwards (empty when checks are off; read their verdict after sampling).

        A sequence gets a row for its last token when the step reaches the end of what it has to compute (that
        row is sampled); sequences asking for prompt log-probabilities get a row for every token of the chunk."""
        if not self.split:
            return self._forward(self.model, batch)
        decodes = [(s, n) for s, n in batch if is_decode(s, n)]
        prefills = [(s, n) for s, n in batch if not is_decode(s, n)]
        if not decodes or not prefills:
            return self._forward(self.decode_model if decodes else self.model, batch)
        logits_d, rows_d, checks_d = self._forward(self.decode_model, decodes)
        logits_p, rows_p, checks_p = self._forward(self.model, prefills)
        for r in rows_p:
            r.first_row += logits_d.shape[0]
        return torch.cat([logits_d, logits_p]), rows_d + rows_p, checks_d + checks_p

    def _layout(self, batch: list[tuple[Sequence, int]]) -> StepInputs:
        decodes = [(s, n) for s, n in batch if n == 1]
        prefills = [(s, n) for s, n in batch if n > 1]
        ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        logit_rows: list[int] = []
        row_map: list[LogitRows] = []
        spans: list[tuple[Sequence, int, int]] = []
        prefill_spans: list[tuple[int, int, int, list[int]]] = []
        ps = self.page_size
        for seq, n in decodes + prefills:
            start = seq.num_computed
            all_ids = seq.all_ids
            offset = len(ids)
            spans.append((seq, offset, n))
            ids.extend(all_ids[start : start + n])
            positions.extend(range(start, start + n))
            slots.extend(self.slots(seq, start, start + n))
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
            decode_attention=self.decode_attention,
            latent_decode_attention=self.latent_decode_attention,
        )
        if decodes:
            ctx = [s.num_computed for s, _ in decodes]
            width = max(1, -(-max(ctx) // ps))
            pad = self.tracker.scratch_page if self.tracker.enabled else 0  # type: ignore[attr-defined]
            tables = [(s.page_table[:width] + [pad] * width)[:width] for s, _ in decodes]
            meta.decode_block_tables = torch.tensor(tables, dtype=torch.int64, device=dev)
            meta.decode_context_lens = torch.tensor(ctx, dtype=torch.int64, device=dev)
        meta.prefills = [
            PrefillSpan(a, b, c, torch.tensor(t, dtype=torch.int64, device=dev)) for a, b, c, t in prefill_spans
        ]
        return StepInputs(ids, positions, meta, logit_rows, row_map, spans)

    def _guard(self, inputs: StepInputs) -> StepCheck:
        """Check the page ids of `inputs` and divert the writes of failing requests to the scratch page."""
        tracker = self.tracker
        assert isinstance(tracker, CheckingTracker)
        ps = self.page_size
        meta = inputs.meta
        exp_pages: list[int] = []
        exp_tags: list[int] = []
        runs: list[tuple[int, int]] = []  # (request index into spans, consecutive entries it owns)
        # Writes: the page each token's slot points at must be the one acquired for its position.
        for i, (seq, _, n) in enumerate(inputs.spans):
            start = seq.num_computed
            for pos in range(start, start + n):
                p, t = expected_entries(seq, pos // ps, pos // ps + 1)
                exp_pages += p
                exp_tags += t
            runs.append((i, n))
        # Reads: every block-table entry, padding included (it must be the scratch page).
        reads: list[torch.Tensor] = []
        if meta.decode_block_tables is not None:
            width = meta.decode_block_tables.shape[1]
            for i in range(meta.num_decode):
                seq = inputs.spans[i][0]
                own = min(len(seq.page_table), width)
                p, t = expected_entries(seq, 0, own)
                exp_pages += p + [tracker.scratch_page] * (width - own)
                exp_tags += t + [SCRATCH_TAG] * (width - own)
            runs += [(i, width) for i in range(meta.num_decode)]
            reads.append(meta.decode_block_tables.flatten())
        for j, span in enumerate(meta.prefills):
            i = meta.num_decode + j
            p, t = expected_entries(inputs.spans[i][0], 0, span.block_table.numel())
            exp_pages += p
            exp_tags += t
            runs.append((i, span.block_table.numel()))
            reads.append(span.block_table)
        slots = meta.slot_mapping
        positions = torch.tensor(inputs.positions, dtype=torch.int64, device=self.device)
        entries = torch.cat([torch.div(slots, ps, rounding_mode="floor"), *reads])
        check = tracker.check([s for s, _, _ in inputs.spans], entries, exp_tags, exp_pages, runs,
                              misplaced=slots % ps != positions % ps)
        # A failing request writes nowhere it could damage: its tokens go to the scratch page.
        token_owner = check.owner[: slots.numel()]
        scratch = tracker.scratch_page * ps + torch.arange(slots.numel(), device=self.device) % ps
        meta.slot_mapping = torch.where(check.bad_seq[token_owner], scratch, slots)
        return check

    def _forward(
        self, model: PreTrainedModel, batch: list[tuple[Sequence, int]]
    ) -> tuple[torch.Tensor, list[LogitRows], list[StepCheck]]:
        inputs = self._layout(batch)
        checks: list[StepCheck] = []
        if self.tracker.enabled:
            with self.stats.timed(INTEGRITY_CHECK):
                checks.append(self._guard(inputs))
        dev = self.device
        input_ids = torch.tensor([inputs.input_ids], dtype=torch.int64, device=dev)
        position_ids = torch.tensor([inputs.positions], dtype=torch.int64, device=dev)
        # Steps made only of mid-prompt chunks need no logits; one row is still computed to keep a single call path.
        keep = inputs.logit_rows or [len(inputs.input_ids) - 1]
        with step_context(inputs.meta):
            out = model(
                input_ids=input_ids,
                position_ids=position_ids,
                use_cache=False,
                logits_to_keep=torch.tensor(keep, dtype=torch.int64, device=dev),
            )
        logits = out.logits[0] if inputs.logit_rows else out.logits[0, :0]
        return logits, inputs.row_map, checks
