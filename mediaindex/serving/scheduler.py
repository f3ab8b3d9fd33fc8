"""Continuous batching: which requests run in the next step, and how many tokens each."""

from __future__ import annotations

import logging
from collections import deque

from mediaindex.serving.block_manager import BlockManager
from mediaindex.serving.sequence import Sequence, Status

log = logging.getLogger(__name__)


class Scheduler:
    """Each step: running requests first (decodes, then unfinished prefill chunks), oldest first, then waiting
    requests while the token budget and the sequence limit allow. A prompt longer than the remaining budget is
    prefilled in chunks over several steps, so a long prompt never stalls the decodes.

    When the pool runs out, the newest running request is preempted: its pages are freed and it goes back to the
    head of the queue, to be recomputed (prompt + tokens generated so far) when pages are available again.
    """

    def __init__(self, block_manager: BlockManager, max_num_seqs: int, max_num_batched_tokens: int) -> None:
        self.bm = block_manager
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions = 0

    def add(self, seq: Sequence) -> None:
        seq.status = Status.WAITING
        self.waiting.append(seq)

    def admit_running(self, seq: Sequence) -> None:
        """Add a sequence that already holds its pages and computed prompt (a prefilled request handed over)."""
        seq.status = Status.RUNNING
        self.running.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def remove(self, seq: Sequence) -> None:
        """Take a sequence out of the queues (finish or abort) and return its pages."""
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.bm.free_seq(seq)

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.bm.free_seq(seq)
        seq.reset_for_recompute()
        seq.status = Status.WAITING
        self.waiting.appendleft(seq)
        self.num_preemptions += 1
        log.debug("preempted %s (%d tokens to recompute)", seq.request_id, len(seq))

    def schedule(self) -> list[tuple[Sequence, int]]:
        budget = self.max_num_batched_tokens
        preemptions_before = self.num_preemptions
        scheduled: list[tuple[Sequence, int]] = []
        taken: set[int] = set()
        ordered = sorted(self.running, key=lambda s: (s.in_prefill, s.arrival))
        for seq in ordered:
            if budget == 0:
                break
            if seq.status is not Status.RUNNING:  # preempted earlier in this loop
                continue
            n = min(seq.num_pending, budget)
            while not self.bm.ensure_capacity(seq, seq.num_computed + n):
                victims = [s for s in self.running if s is not seq and id(s) not in taken]
                victim = max(victims, key=lambda s: s.arrival) if victims else seq
                self._preempt(victim)
                if victim is seq:
                    break
            else:
                scheduled.append((seq, n))
                taken.add(id(seq))
                budget -= n

        # After a preemption the pool is known to be short: admitting now would only take back the pages just
        # freed and force the same preemption next step.
        admit = self.num_preemptions == preemptions_before
        while admit and self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            # Shared prefix pages count as computed: the chunk covers only the rest.
            n = self.bm.admit(seq, budget)
            if n == 0:
                break
            self.waiting.popleft()
            seq.status = Status.RUNNING
            self.running.append(seq)
            scheduled.append((seq, n))
            budget -= n
        return scheduled
