"""KV-page integrity: a request never reads a page that stopped being its own.

Every physical page carries a generation tag that changes each time the page is (re)allocated; sharing through
prefix caching leaves it alone. A request records (page, tag) pairs as it acquires pages. Before each step one
vectorised comparison, on the device holding the pages, checks every running request's recorded pairs against its
live page table and the live tags. A mismatch aborts only that request.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from mediaindex.serving.errors import KVIntegrityError, UnknownRequestError
from mediaindex.serving.sequence import Sequence

if TYPE_CHECKING:
    from mediaindex.serving.engine import LLMEngine

log = logging.getLogger(__name__)


class IntegrityTracker:
    """Interface, and the no-op default: nothing is recorded and nothing is checked."""

    enabled = False

    def on_allocate(self, pages: list[int]) -> None:
        """Pages were just handed out for new content."""

    def record(self, seq: Sequence, pages: list[int]) -> None:
        """seq acquired `pages` (appended to its page table in this order)."""

    def owned_pages(self, seq: Sequence) -> list[int]:
        """The pages seq may return to the pool."""
        return list(seq.page_table)

    def check(self, seqs: list[Sequence]) -> list[KVIntegrityError]:
        """One error per sequence whose pages no longer match what it acquired."""
        return []

    def bump_tag(self, page: int) -> None:
        """Fault injection: change a page's live tag without telling its holders."""


class NoOpTracker(IntegrityTracker):
    pass


class CheckingTracker(IntegrityTracker):
    """Tags live in a device tensor next to the KV pages; `issued` is the host copy of what the allocator handed
    out, which is what requests record. The two only differ when something modified pages behind the allocator."""

    enabled = True

    def __init__(self, num_pages: int, device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)
        self.issued = [0] * num_pages
        self.tags = torch.zeros(num_pages, dtype=torch.int64, device=self.device)
        self._dirty: set[int] = set()
        self.num_checks = 0

    def on_allocate(self, pages: list[int]) -> None:
        for p in pages:
            self.issued[p] += 1
        self._dirty.update(pages)

    def record(self, seq: Sequence, pages: list[int]) -> None:
        seq.recorded_pages.extend(pages)
        seq.recorded_tags.extend(self.issued[p] for p in pages)

    def owned_pages(self, seq: Sequence) -> list[int]:
        # A page whose tag moved on was handed to someone else: returning it would free their page.
        return [p for p, t in zip(seq.recorded_pages, seq.recorded_tags, strict=True) if self.issued[p] == t]

    def _flush(self) -> None:
        # Allocation tag updates are batched into one device write per step.
        if self._dirty:
            pages = sorted(self._dirty)
            idx = torch.tensor(pages, dtype=torch.int64, device=self.device)
            self.tags[idx] = torch.tensor([self.issued[p] for p in pages], dtype=torch.int64, device=self.device)
            self._dirty.clear()

    def bump_tag(self, page: int) -> None:
        self._flush()
        self.tags[page] += 1

    def check(self, seqs: list[Sequence]) -> list[KVIntegrityError]:
        self._flush()
        self.num_checks += 1
        live: list[int] = []
        rec_pages: list[int] = []
        rec_tags: list[int] = []
        for s in seqs:
            n = len(s.recorded_pages)
            table = s.page_table
            if len(table) == n:
                live.extend(table)
            else:  # a table that grew or shrank behind the allocator's back: pad/truncate so it mismatches
                live.extend((table + [-1] * n)[:n])
            rec_pages.extend(s.recorded_pages)
            rec_tags.extend(s.recorded_tags)
        if not rec_pages:
            return []
        lengths_ok = all(len(s.page_table) == len(s.recorded_pages) for s in seqs)
        data = torch.tensor([live, rec_pages, rec_tags], dtype=torch.int64, device=self.device)
        live_t, rec_p, rec_t = data[0], data[1], data[2]
        found = self.tags[live_t.clamp(min=0)]
        bad = (live_t != rec_p) | (found != rec_t)
        if lengths_ok and not bool(bad.any()):
            return []
        # Slow path, only taken on a violation: locate the first bad entry of each affected request.
        bad_list = bad.tolist()
        found_list = found.tolist()
        errors: list[KVIntegrityError] = []
        offset = 0
        for s in seqs:
            n = len(s.recorded_pages)
            for i in range(offset, offset + n):
                if bad_list[i]:
                    err = KVIntegrityError(s.request_id, rec_pages[i], rec_tags[i], found_list[i], live[i])
                    errors.append(err)
                    break
            else:
                if len(s.page_table) != n:
                    errors.append(KVIntegrityError(s.request_id, -1, n, len(s.page_table), -1))
            offset += n
        return errors


@dataclass
class FaultRecord:
    """What an injection did; `holders` are the requests pointing at the damaged entries when it was injected."""

    kind: str
    pages: list[int]
    holders: set[str] = field(default_factory=set)


class FaultInjector:
    """Hooks for tests and drills that break page ownership the way real bugs do."""

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

    def reassign_live_page(self, request_id: str) -> FaultRecord | None:
        """Hand one of the request's full pages to whoever allocates next, while the request still uses it."""
        seq = self._running(request_id)
        ps = self.engine.block_manager.page_size
        full = min(seq.num_computed // ps, len(seq.page_table))
        if full < 1:
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
        ps = self.engine.block_manager.page_size
        full = min(seq.num_computed // ps, len(seq.page_table))
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
        """Swap two entries of one request's page table, or one entry each of two requests."""
        a = self._running(request_a)
        ps = self.engine.block_manager.page_size
        if request_b is None:
            full = min(a.num_computed // ps, len(a.page_table))
            if full < 2 or a.page_table[0] == a.page_table[1]:
                return None
            a.page_table[0], a.page_table[1] = a.page_table[1], a.page_table[0]
            rec = FaultRecord("swap", [a.page_table[0], a.page_table[1]], {a.request_id})
        else:
            b = self._running(request_b)
            fa = min(a.num_computed // ps, len(a.page_table))
            fb = min(b.num_computed // ps, len(b.page_table))
            if fa < 1 or fb < 1 or a.page_table[fa - 1] == b.page_table[fb - 1]:
                return None
            i, j = fa - 1, fb - 1
            a.page_table[i], b.page_table[j] = b.page_table[j], a.page_table[i]
            rec = FaultRecord("swap", [a.page_table[i], b.page_table[j]], {a.request_id, b.request_id})
        self.records.append(rec)
        return rec
