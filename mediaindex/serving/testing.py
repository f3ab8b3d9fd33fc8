"""Fault drills for tests and benchmarks: break KV-page ownership on purpose, the way real bugs do.

Nothing in the engine imports this module. Faults act on the allocator's state (a premature free, a page table
edited behind its back, a tag changed) or on the data path itself: the next forward's slot mapping or block table,
intercepted between the runner laying out the batch and the kernels reading it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from mediaindex.serving.engine import LLMEngine
from mediaindex.serving.errors import UnknownRequestError
from mediaindex.serving.model_runner import StepInputs
from mediaindex.serving.sequence import Sequence


@dataclass
class FaultRecord:
    """What an injection did; `holders` are the requests whose reads or writes the damage hits (those the checks
    must abort, and no one else)."""

    kind: str
    pages: list[int]
    holders: set[str] = field(default_factory=set)


class FaultInjector:
    """Hooks that break page ownership; each returns a FaultRecord, or None when the state does not allow it."""

    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine
        self.records: list[FaultRecord] = []
        self._gen = torch.Generator().manual_seed(1234)

    def _running(self, request_id: str) -> Sequence:
        for s in self.engine.scheduler.running:
            if s.request_id == request_id:
                return s
        raise UnknownRequestError(request_id)

    def _holders(self, page: int) -> set[str]:
        return {s.request_id for s in self.engine.scheduler.running if page in s.page_table}

    def _full_pages(self, seq: Sequence) -> int:
        return min(seq.num_computed // self.engine.block_manager.page_size, len(seq.page_table))

    # -- allocator state -----------------------------------------------------------------------------------------
    def reassign_live_page(self, request_id: str) -> FaultRecord | None:
        """Use after free: hand one of the request's full pages to whoever allocates next, while the request still
        reads it."""
        seq = self._running(request_id)
        if self._full_pages(seq) < 1:
            return None
        page = seq.page_table[0]
        rec = FaultRecord("reassign", [page], self._holders(page))
        self.engine.block_manager.inject_premature_free(page)
        self.records.append(rec)
        return rec

    def bump_tag(self, request_id: str) -> FaultRecord | None:
        """Change a page's tag and overwrite its content, as if it had been reallocated and rewritten behind the
        allocator's back."""
        seq = self._running(request_id)
        full = self._full_pages(seq)
        if full < 1:
            return None
        page = seq.page_table[full - 1]
        rec = FaultRecord("bump_tag", [page], self._holders(page))
        self.engine.tracker.bump_tag(page)
        self.engine.kv_cache.scribble(page, self._gen)
        self.engine.block_manager.invalidate(page)
        self.records.append(rec)
        return rec

    def swap_page_table_entries(self, request_a: str, request_b: str | None = None) -> FaultRecord | None:
        """Page-table corruption: swap one request's first and last page (the one being written; swapping two
        context pages alone would go unnoticed by attention, which does not depend on key order), or the last
        full page of two different requests."""
        a = self._running(request_a)
        if request_b is None:
            table = a.page_table
            if len(table) < 2 or table[0] == table[-1]:
                return None
            table[0], table[-1] = table[-1], table[0]
            rec = FaultRecord("swap", [table[0], table[-1]], {a.request_id})
        else:
            b = self._running(request_b)
            fa, fb = self._full_pages(a), self._full_pages(b)
            if fa < 1 or fb < 1 or a.page_table[fa - 1] == b.page_table[fb - 1]:
                return None
            i, j = fa - 1, fb - 1
            a.page_table[i], b.page_table[j] = b.page_table[j], a.page_table[i]
            rec = FaultRecord("swap", [a.page_table[i], b.page_table[j]], {a.request_id, b.request_id})
        self.records.append(rec)
        return rec

    # -- the data path: the next forward's tensors ---------------------------------------------------------------
    def _intercept_next_layout(self, edit: Callable[[StepInputs], bool]) -> None:
        """Apply `edit` to each forward's layout until it returns True (done)."""
        runner = self.engine.runner
        original = runner._layout

        def layout(batch: list[tuple[Sequence, int]]) -> StepInputs:
            inputs = original(batch)
            if edit(inputs):
                del runner._layout  # back to the class's method
            return inputs

        runner._layout = layout  # type: ignore[method-assign]

    def redirect_writes(self, request_id: str, into: str) -> FaultRecord | None:
        """A slot-mapping bug: the request's K/V of the next step are written into `into`'s last full page (same
        offsets) instead of its own page. Only the writer is affected when checks divert its write; without
        checks both requests' outputs go wrong."""
        a, b = self._running(request_id), self._running(into)
        fb = self._full_pages(b)
        if fb < 1 or a is b:
            return None
        ps = self.engine.block_manager.page_size
        target = b.page_table[fb - 1]
        rec = FaultRecord("redirect", [target], {a.request_id})

        def edit(inputs: StepInputs) -> bool:
            for seq, first, n in inputs.spans:
                if seq is a:
                    slots = inputs.meta.slot_mapping
                    slots[first : first + n] = target * ps + slots[first : first + n] % ps
                    rec.pages.insert(0, seq.page_table[seq.num_computed // ps])
                    return True
            return False

        self._intercept_next_layout(edit)
        self.records.append(rec)
        return rec

    def corrupt_block_table(self, request_id: str, steps: int = 4) -> FaultRecord | None:
        """A block-table bug: for its next `steps` forwards the request reads another request's first page (the
        pool's last page when it runs alone) in place of its own first context page."""
        seq = self._running(request_id)
        if self._full_pages(seq) < 1:
            return None
        others = [s.page_table[0] for s in self.engine.scheduler.running if s is not seq and s.page_table]
        others = [p for p in others if p not in seq.page_table]
        wrong = others[0] if others else self.engine.block_manager.num_pages - 1
        rec = FaultRecord("bad_table", [seq.page_table[0], wrong], {seq.request_id})
        left = [steps]

        def edit(inputs: StepInputs) -> bool:
            tables = inputs.meta.decode_block_tables
            hit = False
            for i, (s, _, _) in enumerate(inputs.spans[: inputs.meta.num_decode]):
                if s is seq and tables is not None:
                    tables[i, 0] = wrong
                    hit = True
            for span, (s, _, _) in zip(inputs.meta.prefills, inputs.spans[inputs.meta.num_decode :], strict=True):
                if s is seq and span.block_table.numel():
                    span.block_table[0] = wrong
                    hit = True
            left[0] -= hit
            return left[0] <= 0 or seq.finished

        self._intercept_next_layout(edit)
        self.records.append(rec)
        return rec
