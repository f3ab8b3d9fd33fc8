"""Search filters, checked once when built so that both stores can trust them."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from mediaindex.segments import MODALITIES

# A file's metadata (a manifest's columns, a downloaded file's web address) lies in each segment's `extra`; a key is
# named in a JSON path inside quotes, so it may hold spaces and dots but not these; nor "=", which ends it in
# KEY=VALUE.
_BAD_KEY = re.compile(r'["=\\\x00-\x1f\x7f]')
MAX_KEY_CHARS, MAX_VALUE_CHARS = 200, 1000


def check_metadata(pairs: tuple[tuple[str, str], ...]) -> None:
    """Refuse a metadata condition that could not name a key or a value, or names a key twice (the same words in
    every surface)."""
    keys: set[str] = set()
    for pair in pairs:
        if not (isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            raise ValueError(f"a metadata filter is a key and a value, got {pair!r}")
        key, value = pair
        if not key.strip() or len(key) > MAX_KEY_CHARS or _BAD_KEY.search(key):
            raise ValueError(f"metadata key {key!r} must be 1 to {MAX_KEY_CHARS} characters without quotes, "
                             "'=', backslashes or control characters")
        if not value.strip() or len(value) > MAX_VALUE_CHARS:
            raise ValueError(f"metadata {key!r} needs a value of 1 to {MAX_VALUE_CHARS} characters")
        if key in keys:
            raise ValueError(f"metadata {key!r} is given twice: one value per key")
        keys.add(key)


_BOOLEANS = {"true": True, "false": False}


def metadata_values(value: str) -> list[str | float | bool]:
    """What a value given as text may be stored as: the text, and a number or a boolean where it reads as one (a
    CSV manifest's year is "1999", a JSON one's 1999; a JSON manifest's `true` is asked for as "true")."""
    flag = _BOOLEANS.get(value.strip().lower())
    if flag is not None:
        return [value, flag]
    try:
        number = float(value)
    except ValueError:
        return [value]
    return [value, number] if math.isfinite(number) else [value]


def _same_value(stored: Any, wanted: str | float | bool) -> bool:
    """Equal as a search finds payloads: text to text in any case (`metadata_spellings`), a number to a number of
    equal value, a boolean to a boolean (true is not 1)."""
    if isinstance(stored, bool) or isinstance(wanted, bool):
        return isinstance(stored, bool) and isinstance(wanted, bool) and stored == wanted
    if isinstance(wanted, str):
        return isinstance(stored, str) and stored.casefold() == wanted.casefold()
    return not isinstance(stored, str) and stored == wanted


def metadata_matches(metadata: dict[str, Any], pairs: tuple[tuple[str, str], ...]) -> bool:
    """Whether a file's metadata meets every condition, as the engine judges its segments' payloads."""
    def holds(stored: Any, value: str) -> bool:
        if isinstance(stored, list):
            return any(holds(item, value) for item in stored)
        return any(_same_value(stored, v) for v in metadata_values(value))

    return all(key in metadata and holds(metadata[key], value) for key, value in pairs)


def metadata_spellings(texts: Callable[[str], Iterable[str]],
                       pairs: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """(key, text) for each way the files spell a condition's value in another case ("Physics" where "physics" is
    asked for); `texts(key)` gives the texts the files hold under a key. The engine compares text exactly, so a
    search asks for these spellings too."""
    out: dict[tuple[str, str], None] = {}
    for key, value in pairs:
        wanted = value.casefold()
        out.update(((key, text), None) for text in texts(key) if text != value and text.casefold() == wanted)
    return tuple(out)


def where_pairs(where: dict[str, str | int | float | bool] | None) -> tuple[tuple[str, str], ...]:
    """A JSON `where` ({"tags": "physics", "year": 1999, "reviewed": true}) as metadata conditions (a number or a
    boolean as its text, matched as either)."""
    return tuple((k, str(v).lower() if isinstance(v, bool) else str(v)) for k, v in (where or {}).items())


def parse_where(texts: list[str]) -> tuple[tuple[str, str], ...]:
    """`KEY=VALUE` texts (a CLI option, a query parameter) as metadata conditions."""
    pairs = []
    for text in texts:
        key, sep, value = text.partition("=")
        if not sep:
            raise ValueError(f"a metadata filter is KEY=VALUE (e.g. tags=physics), got {text!r}")
        pairs.append((key.strip(), value.strip()))
    check_metadata(tuple(pairs))
    return tuple(pairs)


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
    # (key, value) conditions on the file's metadata, all of which must hold; a list (tags) holds a value when
    # one of its items is it. Text matches in any case: `spellings` are the other cases the files hold
    # (`metadata_spellings`, filled in by the index before a search, `MediaIndex.spelled`).
    metadata: tuple[tuple[str, str], ...] = ()
    spellings: tuple[tuple[str, str], ...] = ()

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
        if not isinstance(self.metadata, tuple):
            raise ValueError(f"metadata filters are (key, value) pairs, got {self.metadata!r}")
        check_metadata(self.metadata)
        if not (isinstance(self.spellings, tuple) and all(
                isinstance(p, tuple) and len(p) == 2 and all(isinstance(x, str) for x in p) for p in self.spellings)):
            raise ValueError(f"metadata spellings are (key, text) pairs, got {self.spellings!r}")

    @property
    def modalities(self) -> tuple[str, ...] | None:
        if self.modality is None:
            return None
        if isinstance(self.modality, str):
            return tuple(m.strip() for m in self.modality.split(",") if m.strip())
        return tuple(self.modality)

    def is_empty(self) -> bool:
        return all(getattr(self, n) is None for n in ("video_id", "source_prefix", "modality", "language",
                                                       "speaker", "start", "end")) and not self.metadata


@dataclass(frozen=True)
class Condition:
    """One payload condition, in terms both Qdrant APIs (edge and client) express the same way."""

    key: str
    kind: Literal["equals", "prefix", "any", "at_least", "at_most", "one_of"]
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
    # "one_of": the payload value is one of these (text or a boolean equal, a number of equal value, int or float).
    out += [Condition(f'extra."{key}"', "one_of",
                      [*metadata_values(value), *(text for k, text in filters.spellings if k == key)])
            for key, value in filters.metadata]
    return out
