"""KV-page integrity on the data path: the page ids handed to the attention and cache-write kernels point only at
pages the request owns, in the generation it acquired them.

Every allocation of a page issues a new tag, unique over the engine's life (a global counter), kept per page in a
device tensor next to the KV pages; sharing through prefix caching leaves it alone. A request records the tag of
each page as it acquires it. Each step, the tensors the kernels will read — the slot mapping (where each token's
K/V is written) and the block tables (which pages each request reads) — are checked in one vectorised comparison
on the device against the tags their requests recorded, over exactly the pages the step touches. A mismatch means
page-table corruption, a write redirected into another request's page, or a read of a page freed and handed out
again. Such a request's writes are diverted to a scratch page in the same step (so it never corrupts anyone
else's pages), and the per-request verdict is read back with the sampled tokens, after the host already waits for
the step: no extra synchronisation. Only the affected requests are aborted.

Fault drills that break these invariants on purpose live in `mediaindex.serving.testing`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from mediaindex.serving.errors import KVIntegrityError
from mediaindex.serving.sequence import Sequence
from mediaindex.serving.stats import INTEGRITY_CHECK, EngineStats

log = logging.getLogger(__name__)

# Expected tag of a block-table entry past what a request acquired: no page carries it, so it always mismatches.
MISSING_TAG = -3
SCRATCH_TAG = -1  # the scratch page's tag: padding entries of block tables point there and expect it


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

    def bump_tag(self, page: int) -> None:
        """Change a page's live tag without telling its holders (fault drills)."""


class NoOpTracker(IntegrityTracker):
    pass


@dataclass
class StepCheck:
    """The verdict of one step's check, still on the device until `failures()` reads it.

    `entries`: every page id the step's kernels use (writes first, then reads), `expected`: the tag each one must
    carry, `owner`: the index into `seqs` of the request it serves (on the device); the host copies of
    `expected_pages` (the page each entry should be, from what the request acquired) only describe a failure."""

    seqs: list[Sequence]
    entries: torch.Tensor
    found: torch.Tensor
    bad_entry: torch.Tensor
    bad_seq: torch.Tensor
    expected_tags: list[int]
    expected_pages: list[int]
    owner: torch.Tensor

    def failures(self) -> dict[int, KVIntegrityError]:
        """id(seq) -> error, for each request that failed; empty on a clean step."""
        bad = self.bad_seq.tolist()  # read after the step's own synchronisation (the sampled tokens)
        if not any(bad):
            return {}
        bad_entry = self.bad_entry.tolist()
        entries = self.entries.tolist()
        found = self.found.tolist()
        owners = self.owner.tolist()
        errors: dict[int, KVIntegrityError] = {}
        for i, is_bad in enumerate(bad_entry):
            seq = self.seqs[owners[i]]
            if is_bad and id(seq) not in errors:
                errors[id(seq)] = KVIntegrityError(
                    seq.request_id, self.expected_pages[i], self.expected_tags[i], found[i], entries[i]
                )
        return errors


class CheckingTracker(IntegrityTracker):
    """Tags live in a device tensor next to the KV pages (one extra entry for the scratch page); `issued` is the
    host copy of what the allocator handed out, which is what requests record. The two only differ when something
    modified pages behind the allocator."""

    enabled = True

    def __init__(self, num_pages: int, device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)
        self.num_pages = num_pages
        self.scratch_page = num_pages
        self.issued = [0] * num_pages
        self._next_tag = 1
        self.tags = torch.zeros(num_pages + 1, dtype=torch.int64, device=self.device)
        self.tags[self.scratch_page] = SCRATCH_TAG
        self._dirty: set[int] = set()
        self.num_checks = 0

    def on_allocate(self, pages: list[int]) -> None:
        for p in pages:
            self.issued[p] = self._next_tag
            self._next_tag += 1
        self._dirty.update(pages)

    def record(self, seq: Sequence, pages: list[int]) -> None:
        seq.recorded_pages.extend(pages)
        seq.recorded_tags.extend(self.issued[p] for p in pages)

    def owned_pages(self, seq: Sequence) -> list[int]:
        # A page whose tag moved on was handed to someone else: returning it would free their page.
        return [p for p, t in zip(seq.recorded_pages, seq.recorded_tags, strict=True) if self.issued[p] == t]

    def flush(self) -> None:
        """Allocation tag updates are batched into one device write per step."""
        if self._dirty:
            pages = sorted(self._dirty)
            idx = torch.tensor(pages, dtype=torch.int64, device=self.device)
            self.tags[idx] = torch.tensor([self.issued[p] for p in pages], dtype=torch.int64, device=self.device)
            self._dirty.clear()

    def bump_tag(self, page: int) -> None:
        self.flush()
        self.tags[page] += 1_000_000_007  # a value no allocation issued

    def check(
        self,
        seqs: list[Sequence],
        entries: torch.Tensor,
        expected_tags: list[int],
        expected_pages: list[int],
        runs: list[tuple[int, int]],
        misplaced: torch.Tensor | None = None,
    ) -> StepCheck:
        """Compare the page ids the kernels will use (`entries`, on the device) with the tags their requests
        recorded; `runs` says which request each stretch of entries serves ((request index, entries), in order).
        Out-of-range ids fail too, and so do entries flagged in `misplaced` (a write at the wrong offset
        of its page; covers the first len(misplaced) entries). Nothing here waits for the device."""
        self.flush()
        self.num_checks += 1
        dev = self.device
        expected = torch.tensor(expected_tags, dtype=torch.int64, device=dev)
        who, count = zip(*runs, strict=True) if runs else ((), ())
        owner = torch.repeat_interleave(torch.tensor(who, dtype=torch.int64, device=dev),
                                        torch.tensor(count, dtype=torch.int64, device=dev))
        in_range = (entries >= 0) & (entries <= self.scratch_page)
        found = self.tags[entries.clamp(0, self.scratch_page)]
        bad_entry = (found != expected) | ~in_range
        if misplaced is not None and misplaced.numel():
            bad_entry[: misplaced.numel()] |= misplaced
        bad_seq = torch.zeros(len(seqs), dtype=torch.int32, device=dev).index_add_(0, owner, bad_entry.int()) > 0
        return StepCheck(seqs, entries, found, bad_entry, bad_seq, expected_tags, expected_pages, owner)


def expected_entries(seq: Sequence, start: int, stop: int) -> tuple[list[int], list[int]]:
    """(pages, tags) the request acquired at page-table indices [start, stop); MISSING_TAG past what it acquired."""
    pages = seq.recorded_pages[start:stop]
    tags = seq.recorded_tags[start:stop]
    short = stop - start - len(tags)
    if short > 0:
        pages = pages + [-1] * short
        tags = tags + [MISSING_TAG] * short
    return pages, tags


def read_verdicts(checks: list[StepCheck], stats: EngineStats) -> dict[int, KVIntegrityError]:
    """id(seq) -> error for each request whose page ids failed a check of this step; each failure is logged and
    counted. Called once the sampled tokens are on the host, so reading the verdicts waits for nothing more."""
    with stats.timed(INTEGRITY_CHECK):
        failed = {k: e for c in checks for k, e in c.failures().items()}
    for err in failed.values():
        log.error("%s", err)
    stats.integrity_aborts += len(failed)
    return failed
