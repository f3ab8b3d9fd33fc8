"""Admission of requests prefilled elsewhere (disaggregated serving): their prompt K/V arrive with them and wait
here until this engine has pages to store them; once stored, the requests decode with the others."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import torch

from mediaindex.serving.block_manager import BlockManager
from mediaindex.serving.handoff import PrefilledRequest
from mediaindex.serving.kv_cache import PagedKVCache
from mediaindex.serving.scheduler import Scheduler
from mediaindex.serving.sequence import Sequence
from mediaindex.serving.stats import EngineStats

SlotsOf = Callable[[Sequence, int, int], list[int]]  # flat cache slots of a sequence's positions [start, end)


def continued_sequence(req: PrefilledRequest) -> Sequence:
    """The request as a sequence of this engine, with what the prefill side already produced (its sampling
    stream's state and prompt scores); the first token is appended by the caller."""
    seq = Sequence(req.request_id, list(req.prompt_ids), req.params)
    if seq.generator is not None and req.generator_state is not None:
        seq.generator.set_state(req.generator_state)  # continue the sampling stream, not restart it
    if req.prompt_logprobs is not None:
        seq.prompt_logprobs = list(req.prompt_logprobs)
        seq.prompt_argmax = list(req.prompt_argmax or [])
    return seq


class PrefilledAdmission:
    """Prefilled requests waiting for pages, admitted in arrival order as pages and the sequence limit allow; all
    admitted together have their K/V stored in one write per layer."""

    def __init__(self, scheduler: Scheduler, block_manager: BlockManager, kv_cache: PagedKVCache, slots: SlotsOf,
                 stats: EngineStats) -> None:
        self.scheduler = scheduler
        self.block_manager = block_manager
        self.kv_cache = kv_cache
        self.slots = slots
        self.stats = stats
        self._queue: deque[tuple[Sequence, PrefilledRequest]] = deque()

    def __len__(self) -> int:
        return len(self._queue)

    def queue(self, seq: Sequence, req: PrefilledRequest) -> None:
        self._queue.append((seq, req))

    def discard(self, seq: Sequence) -> None:
        """Forget a queued request (it was aborted before it got pages)."""
        if any(s is seq for s, _ in self._queue):
            self._queue = deque((s, r) for s, r in self._queue if s is not seq)

    def admit(self) -> list[Sequence]:
        """Give queued requests pages and store their K/V, stopping at the first that does not fit; returns the
        requests admitted, now running."""
        admitted: list[tuple[Sequence, PrefilledRequest]] = []
        while self._queue and len(self.scheduler.running) + len(admitted) < self.scheduler.max_num_seqs:
            seq, req = self._queue[0]
            if not self.block_manager.ensure_capacity(seq, len(seq.prompt_ids)):
                break
            self._queue.popleft()
            admitted.append((seq, req))
        if admitted:
            self._store(admitted)
        for seq, _ in admitted:
            seq.num_computed = len(seq.prompt_ids)
            self.scheduler.admit_running(seq)
            self.block_manager.register_full_pages(seq)
            self.stats.imported_tokens += len(seq.prompt_ids)
        return [seq for seq, _ in admitted]

    def _store(self, admitted: list[tuple[Sequence, PrefilledRequest]]) -> None:
        device = self.kv_cache.device
        slots = torch.tensor([slot for seq, _ in admitted for slot in self.slots(seq, 0, len(seq.prompt_ids))],
                             dtype=torch.int64, device=device)
        # One write per layer for the whole group.
        for layer in range(self.kv_cache.layout.num_layers):
            k = torch.cat([req.k[layer] for _, req in admitted]).to(device)
            v = torch.cat([req.v[layer] for _, req in admitted]).to(device)
            self.kv_cache.write(layer, slots, k, v)
