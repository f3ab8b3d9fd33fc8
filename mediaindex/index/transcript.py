"""Transcripts as SRT, WebVTT or JSON, from a video's stored speech segments."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

FORMATS = ("srt", "vtt", "json")


def _clock(t: float, sep: str) -> str:
    ms = max(0, int(round(t * 1000)))
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, ms = divmod(rest, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def _cues(segments: Iterable[Mapping[str, Any]]) -> list[tuple[float, float, str]]:
    cues = []
    for seg in segments:
        text = " ".join(str(seg.get("text") or "").split())
        start, end = float(seg["start"]), float(seg["end"])
        if text and end > start:
            cues.append((start, end, text))
    return sorted(cues)


def to_srt(segments: Iterable[Mapping[str, Any]]) -> str:
    blocks = [f"{i}\n{_clock(a, ',')} --> {_clock(b, ',')}\n{text}\n" for i, (a, b, text) in
              enumerate(_cues(segments), start=1)]
    return "\n".join(blocks)


def to_vtt(segments: Iterable[Mapping[str, Any]]) -> str:
    # "-->" may not appear inside a cue's text in WebVTT.
    blocks = [f"{_clock(a, '.')} --> {_clock(b, '.')}\n{text.replace('-->', '->')}\n" for a, b, text in
              _cues(segments)]
    return "WEBVTT\n\n" + "\n".join(blocks)


def to_json(segments: Iterable[Mapping[str, Any]], meta: Mapping[str, Any]) -> str:
    items = []
    for seg in sorted(segments, key=lambda s: float(s["start"])):
        extra = seg.get("extra") or {}
        items.append({
            "start": float(seg["start"]), "end": float(seg["end"]), "text": seg.get("text") or "",
            "language": seg.get("language"), "avg_logprob": seg.get("confidence"),
            "words": [{"start": w[0], "end": w[1], "word": w[2]} for w in extra.get("words", [])],
        })
    return json.dumps({**meta, "segments": items}, ensure_ascii=False, indent=2)


def export(segments: list[Mapping[str, Any]], fmt: str, meta: Mapping[str, Any]) -> str:
    if fmt == "srt":
        return to_srt(segments)
    if fmt == "vtt":
        return to_vtt(segments)
    if fmt == "json":
        return to_json(segments, meta)
    raise ValueError(f"unknown transcript format {fmt!r}: use one of {', '.join(FORMATS)}")
