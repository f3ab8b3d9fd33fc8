"""Transcript lines of one video as JSON, SRT or WebVTT."""

from __future__ import annotations

from mediaindex.api.models import TranscriptLine


def _clock(t: float, sep: str) -> str:
    ms = int(round(max(t, 0.0) * 1000))
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, ms = divmod(rest, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def _clean(text: str) -> str:
    # A blank line ends a cue in both formats, and "-->" would be read as a timing line.
    return "\n".join(line for line in text.replace("-->", "->").splitlines() if line.strip()) or "…"


def to_srt(lines: list[TranscriptLine]) -> str:
    return "".join(f"{i}\n{_clock(x.start, ',')} --> {_clock(x.end, ',')}\n{_clean(x.text)}\n\n"
                   for i, x in enumerate(lines, 1))


def to_vtt(lines: list[TranscriptLine]) -> str:
    return "WEBVTT\n\n" + "".join(f"{_clock(x.start, '.')} --> {_clock(x.end, '.')}\n{_clean(x.text)}\n\n"
                                  for x in lines)
