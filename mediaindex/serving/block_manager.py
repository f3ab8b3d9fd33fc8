"""The KV page pool: free list, reference counts and prefix sharing of identical full pages."""

from __future__ import annotations

import logging
from collections import OrderedDict

from mediaindex.serving.integrity import IntegrityTracker, NoOpTracker
from mediaindex.serving.sequence import Sequence

log = logging.getLogger(__name__)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class BlockManager:
    """Hands out pages to sequences and takes them back.

    Freed pages that hold a complete, hashed page of tokens keep their hash while they sit in the free list, so an
    identical prefix arriving later can revive them instead of recomputing; a page loses its hash only when it is
    handed out again for new content. The free list is FIFO so cached prefixes survive as long as possible.
    """

    def __init__(
        self,
        num_pages: int,
        page_size: int,
        enable_prefix_sharing: bool = True,
        tracker: IntegrityTracker | None = None,
    ) -> None:
        self.num_pages = num_pages
        self.page_size = page_size
        self.enable_prefix_sharing = enable_prefix_sharing
        self.tracker = tracker or NoOpTracker()
        self.ref_counts = [0] * num_pages
        self.free: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_pages))
        self.hash_to_page: dict[int, int] = {}
        self.page_hash: dict[int, int] = {}
        self.page_tokens: dict[int, tuple[int, ...]] = {}
        # Allocations that handed out a page still referenced by someone: only a bug (or fault injection) does this.
        self.live_reallocations: list[int] = []
        self.prefix_hit_tokens = 0

    # -- accounting -------------------------------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        return len(self.free)

    @property
    def num_used(self) -> int:
        return self.num_pages - len(self.free)

    def pages_for(self, num_tokens: int) -> int:
        return _cdiv(num_tokens, self.page_size)

    # -- allocation ---------------------------------------------------------------------------------------------
    def _pop_free(self) -> int:
        page, _ = self.free.popitem(last=False)
        if self.ref_counts[page] > 0:
            self.live_reallocations.append(page)
        self._drop_hash(page)
        self.ref_counts[page] = 1
        return page

    def _drop_hash(self, page: int) -> None:
        h = self.page_hash.pop(page, None)
        if h is not None and self.hash_to_page.get(h) == page:
            del self.hash_to_page[h]
        self.page_tokens.pop(page, None)

    def ensure_capacity(self, seq: Sequence, num_tokens: int) -> bool:
        """Make seq's page table cover `num_tokens` tokens. All or nothing: False if the pool is short."""
        need = self.pages_for(num_tokens) - len(seq.page_table)
        if need <= 0:
            return True
        if need > len(self.free):
            return False
        pages = [self._pop_free() for _ in range(need)]
        self.tracker.on_allocate(pages)
        seq.page_table.extend(pages)
        self.tracker.record(seq, pages)
        return True

    def match_prefix(self, seq: Sequence) -> list[int]:
        """Pages already holding seq's leading full pages. The last prompt token is never matched: the model must
        run at least one token to produce logits."""
        if not self.enable_prefix_sharing or seq.params.prompt_logprobs:
            return []  # scoring needs logits at every prompt position, so nothing may be skipped
        ids = seq.all_ids
        ps = self.page_size
        matched: list[int] = []
        h: int | None = None
        for i in range((len(ids) - 1) // ps):
            chunk = tuple(ids[i * ps : (i + 1) * ps])
            h = hash((h, chunk))
            page = self.hash_to_page.get(h)
            if page is None or self.page_tokens.get(page) != chunk:
                break
            matched.append(page)
        return matched

    def admit(self, seq: Sequence, budget: int) -> int:
        """Give a waiting sequence its shared prefix pages plus fresh pages for the next chunk of at most `budget`
        tokens. Returns the chunk length, or 0 (and changes nothing) if the pool is short."""
        assert not seq.page_table and seq.num_computed == 0
        matched = self.match_prefix(seq)
        revived = sum(1 for p in matched if self.ref_counts[p] == 0)
        cached_tokens = len(matched) * self.page_size
        n = min(len(seq) - cached_tokens, budget)
        need = self.pages_for(cached_tokens + n) - len(matched)
        if need + revived > len(self.free):
            return 0
        for p in matched:
            if self.ref_counts[p] == 0:
                del self.free[p]
            self.ref_counts[p] += 1
        # Sharing does not change a page's tag: the content is the same one the tag was issued for.
        seq.page_table.extend(matched)
        self.tracker.record(seq, matched)
        ids = seq.all_ids
        h: int | None = None
        for i in range(len(matched)):
            h = hash((h, tuple(ids[i * self.page_size : (i + 1) * self.page_size])))
            seq.page_hashes.append(h)
        seq.num_computed = cached_tokens
        self.prefix_hit_tokens += cached_tokens
        ok = self.ensure_capacity(seq, cached_tokens + n)
        assert ok, "free-page count was checked above"
        return n

    def register_full_pages(self, seq: Sequence) -> None:
        """After a step wrote them, publish seq's newly completed pages for sharing."""
        if not self.enable_prefix_sharing:
            return
        ps = self.page_size
        full = min(seq.num_computed // ps, len(seq.page_table))
        ids = seq.all_ids
        while len(seq.page_hashes) < full:
            i = len(seq.page_hashes)
            chunk = tuple(ids[i * ps : (i + 1) * ps])
            h = hash((seq.page_hashes[-1] if seq.page_hashes else None, chunk))
            seq.page_hashes.append(h)
            page = seq.page_table[i]
            if h not in self.hash_to_page and page not in self.page_hash:
                self.hash_to_page[h] = page
                self.page_hash[page] = h
                self.page_tokens[page] = chunk

    def free_seq(self, seq: Sequence) -> None:
        """Return seq's pages. Only pages the request still owns go back (see IntegrityTracker.owned_pages)."""
        for page in reversed(self.tracker.owned_pages(seq)):
            if self.ref_counts[page] <= 0:
                # Only reachable after page-table corruption with checks off; keep the counts sane.
                log.warning("page %d freed with reference count %d", page, self.ref_counts[page])
                continue
            self.ref_counts[page] -= 1
            if self.ref_counts[page] == 0:
                self.free[page] = None
        seq.page_table = []
        seq.recorded_pages = []
        seq.recorded_tags = []
        seq.page_hashes = []

    def invalidate(self, page: int) -> None:
        """Stop offering a page for prefix sharing (its content is suspect)."""
        self._drop_hash(page)

    # -- fault injection -----------------------------------------------------------------------------------------
    def inject_premature_free(self, page: int) -> None:
        """Put a page that is still in use at the head of the free list, as a double-free bug would: the next
        allocation hands it to someone else while its holders still point at it."""
        self._drop_hash(page)
        self.free[page] = None
        self.free.move_to_end(page, last=False)
