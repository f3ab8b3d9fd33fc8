"""Search filters, checked once when built so that both stores can trust them."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from mediaindex.segments import MODALITIES


@dataclass(frozen=True)
class SearchFilters:
    """Restrict a search. `start`/`end` keep segments that overlap that time range (seconds)."""

    video_id: str | None = None
    source_prefix: str | None = None  # a path prefix of the media file, e.g. a folder
    modality: str | tuple[str, ...] | None = None  # one modality or several
    language: str | None = None
    speaker: str | None = None  # a speech segment's speaker label within its file, e.g. "S2"
    start: float | None = None
    end: float | None = None

    def __post_init__(self) -> None:
        for name in ("video_id", "source_prefix", "language", "speaker"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ValueError(f"filter {name} must be a non-empty string, got {value!r}")
        mods = self.modalities
        if mods is not None:
            unknown = [m for m in mods if m not in MODALITIES]
            if unknown or not mods:
                raise ValueError(f"unknown modality {', '.join(unknown) or '(none)'}: use one of {', '.join(MODALITIES)}")
        for name in ("start", "end"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                      or not math.isfinite(value) or value < 0):
                raise ValueError(f"filter {name} must be a time in seconds (>= 0), got {value!r}")
        if self.start is not None and self.end is not None and self.end < self.start:
            raise ValueError(f"time range ends ({self.end}) before it starts ({self.start})")

    @property
    def modalities(self) -> tuple[str, ...] | None:
        if self.modality is None:
            return None
        if isinstance(self.modality, str):
            return tuple(m.strip() for m in self.modality.split(",") if m.strip())
        return tuple(self.modality)

    def is_empty(self) -> bool:
        return all(getattr(self, n) is None for n in ("video_id", "source_prefix", "modality", "language",
                                                       "speaker", "start", "end"))


@dataclass(frozen=True)
class Condition:
    """One payload condition, in terms both Qdrant APIs (edge and client) express the same way."""

    key: str
    kind: Literal["equals", "prefix", "any", "at_least", "at_most"]
    value: Any


def conditions(filters: SearchFilters | None) -> list[Condition]:
    """The filters as payload conditions that must all hold (empty: no filter)."""
    if filters is None or filters.is_empty():
        return []
    out = [Condition(key, "equals", getattr(filters, key)) for key in ("video_id", "language", "speaker")
           if getattr(filters, key) is not None]
    if filters.source_prefix is not None:
        out.append(Condition("source", "prefix", filters.source_prefix))
    if filters.modalities:
        out.append(Condition("modality", "any", list(filters.modalities)))
    # Overlap with [start, end]: a segment ends after `start` and starts before `end`.
    if filters.start is not None:
        out.append(Condition("end", "at_least", filters.start))
    if filters.end is not None:
        out.append(Condition("start", "at_most", filters.end))
    return out
