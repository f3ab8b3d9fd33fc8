"""Continuous batching: which requests run in the next step, and how many tokens each."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterable, Mapping

from mediaindex.serving.block_manager import BlockManager
from mediaindex.serving.errors import KVIntegrityError, ServingError
from mediaindex.serving.hooks import ReleaseHook, TokenHook, first_verdict
from mediaindex.serving.sequence import Sequence, Status

log = logging.getLogger(__name__)


class Scheduler:
    """Each step: running requests first (decodes, then unfinished prefill chunks), oldest first, then waiting
    requests while the token budget and the sequence limit allow. A prompt longer than the remaining budget is
    prefilled in chunks over several steps, so a long prompt never stalls the decodes.

    When the pool runs out, the newest running request is preempted: its pages are freed and it goes back to the
    head of the queue, to be recomputed (prompt + tokens generated so far) when pages are available again.

    After each forward, `update` advances the requests, appends their sampled tokens and finishes the ones that
    end: `token_hooks` decide that after every token (stop conditions, grammars), `release_hooks` see each request
    that finishes while it still holds its pages.
    """

    def __init__(
        self,
        block_manager: BlockManager,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        token_hooks: Iterable[TokenHook] = (),
        release_hooks: Iterable[ReleaseHook] = (),
    ) -> None:
        self.bm = block_manager
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.token_hooks = list(token_hooks)
        self.release_hooks = list(release_hooks)
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

    # -- after the forward ----------------------------------------------------------------------------------------
    def update(self, batch: list[tuple[Sequence, int]], sampled: list[tuple[Sequence, int]],
               failed: Mapping[int, KVIntegrityError]) -> list[Sequence]:
        """Advance each scheduled request by the tokens the forward computed, fail those whose integrity check
        failed (`failed`, by id of the sequence), and append the sampled tokens. Returns the requests that
        changed (failed, got a token, finished), in that order."""
        for seq, n in batch:
            if id(seq) in failed:
                continue  # its pages may hold foreign data: never advanced, never published for sharing
            seq.num_computed += n
            self.bm.register_full_pages(seq)
        changed = [seq for seq, _ in batch if id(seq) in failed]
        for seq in changed:
            self._quarantine(seq, failed[id(seq)])
        now = time.perf_counter()
        for seq, token in sampled:
            if not seq.finished:  # unless it failed its check in this step
                self.append(seq, token, now)
                changed.append(seq)
        return changed

    def append(self, seq: Sequence, token: int, now: float) -> None:
        """Give seq its next token (generated at `now`, a perf_counter time); the token hooks may finish it."""
        seq.output_ids.append(token)
        seq.token_times.append(now)
        # Every hook sees every token (each keeps its own state: stop text, grammar position).
        verdict = first_verdict([v for hook in self.token_hooks if (v := hook(seq, token)) is not None])
        if verdict is not None:
            self.finish(seq, verdict.reason, verdict.error)

    def finish(self, seq: Sequence, reason: str, error: Exception | None = None) -> None:
        """End seq (a normal stop, "abort" or "error"): the release hooks see it, then its pages go back."""
        seq.status = Status.FINISHED
        seq.finish_reason = reason
        seq.error = error
        for hook in self.release_hooks:
            hook(seq)
        self.remove(seq)

    def fail_stalled(self) -> list[Sequence]:
        """When nothing runs and the head of the queue still does not fit, the pages it waits for are held by no
        request this scheduler knows: it fails instead of waiting forever. Returns the failed request, if any."""
        if not self.waiting or self.running:
            return []
        seq = self.waiting[0]
        self.finish(seq, "error", ServingError(
            f"request {seq.request_id!r} cannot get KV pages: {self.bm.num_free} of {self.bm.num_pages} pages are "
            "free"))
        return [seq]

    def _quarantine(self, seq: Sequence, error: KVIntegrityError) -> None:
        """Fail a request whose page ids failed their check; the pages involved are no longer shared."""
        for page in (error.page, error.found_page):
            if 0 <= page < self.bm.num_pages:
                self.bm.invalidate(page)
        self.finish(seq, "error", error)
