"""The engine's counters, and the one place that times the phases of a step."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from mediaindex.serving.sequence import Sequence, is_decode

# Phases timed with `EngineStats.timed`, as they appear in `EngineMetrics.extra` (with "_seconds" appended).
STEP = "step"
GUIDE = "guide"  # masking logits and advancing grammars (guided requests only)
INTEGRITY_CHECK = "integrity_check"  # preparing the page-id checks and reading their verdicts


@dataclass
class EngineStats:
    prefill_tokens: int = 0
    decode_tokens: int = 0
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    steps: int = 0  # steps that ran the model
    integrity_aborts: int = 0
    imported_tokens: int = 0  # prompt tokens whose K/V came from a prefill worker
    phase_seconds: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))

    @contextmanager
    def timed(self, phase: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.phase_seconds[phase] += time.perf_counter() - t0

    @contextmanager
    def forward(self, batch: list[tuple[Sequence, int]]) -> Iterator[None]:
        """Time one forward over `batch` (entered before the step advances its sequences) and count its tokens.
        The time of a mixed step is split by token share, so both rates stay meaningful."""
        n_decode = sum(1 for seq, n in batch if is_decode(seq, n))
        n_prefill = sum(n for _, n in batch) - n_decode
        t0 = time.perf_counter()
        yield
        elapsed = time.perf_counter() - t0
        total = n_prefill + n_decode
        self.prefill_seconds += elapsed * n_prefill / total
        self.decode_seconds += elapsed * n_decode / total
        self.prefill_tokens += n_prefill
        self.decode_tokens += n_decode
        self.steps += 1

    @property
    def prefill_tokens_per_s(self) -> float:
        return self.prefill_tokens / self.prefill_seconds if self.prefill_seconds else 0.0

    @property
    def decode_tokens_per_s(self) -> float:
        return self.decode_tokens / self.decode_seconds if self.decode_seconds else 0.0
