"""Frames spread evenly over a span whose end is not known yet, chosen while decoding streams by.

A shot's first frame is often a transition (a fade, a blend of two shots) and says little about what
the shot shows; frames from inside the shot do. Shots end when the next cut is detected, so the
frames to keep cannot be chosen by position in advance. `SpanSampler` keeps a bounded buffer of
candidates that thins itself as the span grows (every other one dropped, spacing doubled), and
when the span closes picks the candidates nearest to evenly spread positions inside it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Sampled(Generic[T]):
    time: float  # presentation time in seconds
    value: T


def spread(candidates: list[Sampled[T]], start: float, end: float, count: int) -> list[Sampled[T]]:
    """Up to `count` candidates nearest to the centres of `count` equal slices of [start, end),
    in time order, each at most once."""
    if count >= len(candidates):
        return list(candidates)
    step = (end - start) / count
    chosen: list[int] = []
    for i in range(count):
        target = start + (i + 0.5) * step
        free = [j for j in range(len(candidates)) if j not in chosen]
        chosen.append(min(free, key=lambda j: abs(candidates[j].time - target)))
    return [candidates[j] for j in sorted(chosen)]


@dataclass
class SpanSampler(Generic[T]):
    """Candidates of the open span [start, ...): at most `2 * keep` of them however long it runs.

    `make` turns a decoded frame into what is kept (the small display image); it is called only
    for frames that become candidates, not for every decoded frame.
    """

    count: int  # frames wanted per span
    min_spacing: float = 0.1  # seconds between candidates while the span is young
    start: float = 0.0
    candidates: list[Sampled[T]] = field(default_factory=list)
    keep: int = 0  # candidates left after thinning; 0 = 2 * count (at least 6)

    def __post_init__(self) -> None:
        self.keep = self.keep or max(6, 2 * self.count)
        self.spacing = self.min_spacing

    def wants(self, t: float) -> bool:
        return not self.candidates or t - self.candidates[-1].time >= self.spacing - 1e-6

    def offer(self, t: float, make: Callable[[], T]) -> None:
        if not self.wants(t):
            return
        self.candidates.append(Sampled(t, make()))
        if len(self.candidates) > 2 * self.keep:
            self.candidates = self.candidates[::2]
            self.spacing *= 2

    def close(self, end: float) -> list[Sampled[T]]:
        """The chosen frames of the span [start, end); the next span starts at `end`."""
        chosen = spread(self.candidates, self.start, end, self.count)
        self.candidates = []
        self.spacing = self.min_spacing
        self.start = end
        return chosen
