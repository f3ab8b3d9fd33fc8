"""The one transcript export: subtitles (SRT, WebVTT) cut from word timestamps, JSON, plain text and TSV.

Input is speech segments as the index stores them (payload dicts: start, end, text, language, speaker,
confidence, extra.words = [[start, end, word], ...]). Subtitle cues follow the usual subtitling rules,
as the whisper command lines do: at most `max_line_count` lines of at most `max_line_width`
columns (a Chinese, Japanese or Korean character takes two, as on screen: 21 of them fill a 42-column line)
and `max_duration` seconds each, never cut inside a word, cut preferably where a sentence
or clause ends or the speaker pauses. A cue never spans two sentences, two speakers or two languages,
so its words and times are exactly the transcript's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.cells import cell_len

from mediaindex.errors import TranscriptFormatError
from mediaindex.segments import IN_CHAPTER_FIELD, join_words

FORMATS = ("srt", "vtt", "json", "txt", "tsv")
_SENTENCE_END = (".", "?", "!", "…", "。", "？", "！")
_CLAUSE_END = (",", ";", ":", "，", "、", "；", "：", "—")
MIN_CUE_S = 5 / 6  # the shortest a cue of a longer sentence should stay on screen (subtitling guides: 20 frames)


@dataclass(frozen=True)
class CueLimits:
    """How big one subtitle cue may be (the whisper CLIs' `--max_line_width`, `--max_line_count`)."""

    max_line_width: int = 42
    max_line_count: int = 2
    max_duration: float = 7.0

    def __post_init__(self) -> None:
        for name, low in (("max_line_width", 10), ("max_line_count", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= 1000:
                raise TranscriptFormatError(f"{name.replace('_', '-')} must be a whole number from {low} to 1000, "
                                            f"got {value!r}")
        if isinstance(self.max_duration, bool) or not 0.5 <= float(self.max_duration) <= 3600:
            raise TranscriptFormatError(f"max-duration must be from 0.5 to 3600 seconds, got {self.max_duration!r}")


@dataclass(frozen=True)
class Cue:
    start: float
    end: float
    lines: tuple[str, ...]
    speaker: str | None = None
    language: str | None = None

    @property
    def text(self) -> str:
        return " ".join(self.lines)


Word = tuple[float, float, str]


def _clock(t: float, sep: str) -> str:
    ms = max(0, int(round(t * 1000)))
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, ms = divmod(rest, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def _text(seg: Mapping[str, Any]) -> str:
    return " ".join(str(seg.get("text") or "").split())


def _words(seg: Mapping[str, Any]) -> list[Word]:
    """The segment's stored words; a segment stored without them gets its text spread over its time."""
    start, end = float(seg["start"]), float(seg["end"])
    stored = [(float(w[0]), float(w[1]), str(w[2]).strip()) for w in (seg.get("extra") or {}).get("words") or []]
    stored = [w for w in stored if w[2]]
    if stored:
        return stored
    tokens = _text(seg).split()
    step = (end - start) / max(1, len(tokens))
    return [(start + i * step, start + (i + 1) * step, t) for i, t in enumerate(tokens)]


def _layout(words: Sequence[str], width: int, language: str | None, first_reserve: int = 0) -> list[list[str]]:
    """Words into the fewest lines of at most `width` columns, the lines as even as can be."""
    words = list(words)
    if cell_len(join_words(words, language)) + first_reserve <= width or len(words) < 2:
        return [words]
    # Greedy fill gives the line count; with two lines, the break moves to where they are most even.
    lines: list[list[str]] = [[]]
    for word in words:
        limit = width - (first_reserve if len(lines) == 1 else 0)
        if lines[-1] and cell_len(join_words([*lines[-1], word], language)) > limit:
            lines.append([])
        lines[-1].append(word)
    if len(lines) == 2:
        best = None
        for i in range(1, len(words)):
            a = cell_len(join_words(words[:i], language)) + first_reserve
            b = cell_len(join_words(words[i:], language))
            if a <= width and b <= width:
                score = max(a, b) - (3 if words[i - 1].endswith(_CLAUSE_END) else 0)
                if best is None or score < best[0]:
                    best = (score, i)
        if best is not None:
            return [words[: best[1]], words[best[1]:]]
    return lines


def _fits(words: Sequence[Word], limits: CueLimits, language: str | None, reserve: int) -> bool:
    if len(words) == 1:
        return True  # a lone word is never cut, however long
    if words[-1][1] - words[0][0] > limits.max_duration:
        return False
    lines = _layout([w[2] for w in words], limits.max_line_width, language, reserve)
    # A line may be too long only when it is one word (words are never cut).
    return len(lines) <= limits.max_line_count and all(
        cell_len(join_words(line, language)) + (reserve if i == 0 else 0) <= limits.max_line_width or len(line) == 1
        for i, line in enumerate(lines))


def _break_cost(words: Sequence[Word], at: int) -> float:
    """How bad a cue boundary before words[at] is: free after a sentence, cheap after a clause or a pause."""
    before = words[at - 1][2].rstrip("\"'”’)]}»")
    if before.endswith(_SENTENCE_END):
        return 0.0
    pause = max(0.0, words[at][0] - words[at - 1][1])
    return (0.2 if before.endswith(_CLAUSE_END) else 1.5) * max(0.0, 1.0 - 2.0 * pause)


def _split(words: Sequence[Word], limits: CueLimits, language: str | None, reserve: int) -> list[Sequence[Word]]:
    """Cues that fit, as few as can be cut well (dynamic programming over the cut points)."""
    n = len(words)
    capacity = limits.max_line_count * (limits.max_line_width + 1)  # an upper bound on what fits
    best: list[tuple[float, int] | None] = [(0.0, 0)] + [None] * n
    for end in range(1, n + 1):
        for start in range(end - 1, -1, -1):
            piece = words[start:end]
            if end - start > 1 and (piece[-1][1] - piece[0][0] > limits.max_duration
                                    or sum(cell_len(w[2]) + 1 for w in piece) > capacity):
                break  # pieces starting earlier are longer still
            if not _fits(piece, limits, language, reserve):
                continue
            prev = best[start]
            if prev is None:
                continue
            # One cue more is worth a cut at a clause or a pause rather than inside a phrase, and so is one that
            # is not gone before it can be read (a sentence's last word alone, a third of a second).
            flash = len(piece) < n and piece[-1][1] - piece[0][0] < MIN_CUE_S
            cost = prev[0] + 1.0 + (_break_cost(words, start) if start > 0 else 0.0) + float(flash)
            held = best[end]
            if held is None or cost < held[0]:
                best[end] = (cost, start)
    cuts, end = [], n
    while end > 0:
        start = best[end][1]  # type: ignore[index]
        cuts.append(words[start:end])
        end = start
    return cuts[::-1]


def _prefix(speaker: str | None) -> str:
    return f"{speaker}: " if speaker else ""


def cues(segments: Iterable[Mapping[str, Any]], limits: CueLimits | None = None, *,
         speaker_reserve: bool = True) -> list[Cue]:
    """Subtitle cues of the speech segments, in time order."""
    limits = limits or CueLimits()
    out: list[Cue] = []
    for seg in sorted(segments, key=lambda s: float(s["start"])):
        words = _words(seg)
        if not words:
            continue
        language, speaker = seg.get("language"), seg.get("speaker")
        reserve = len(_prefix(speaker)) if speaker_reserve else 0
        for piece in _split(words, limits, language, reserve):
            lines = _layout([w[2] for w in piece], limits.max_line_width, language, reserve)
            start, end = piece[0][0], max(piece[-1][1], piece[0][0] + 0.001)
            out.append(Cue(round(start, 3), round(end, 3), tuple(join_words(line, language) for line in lines),
                           speaker, language))
    return out


def _srt_line(text: str) -> str:
    return text.replace("-->", "->")  # a timing line would be read there


def _vtt_line(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def to_srt(segments: Iterable[Mapping[str, Any]], limits: CueLimits | None = None) -> str:
    blocks = []
    for i, cue in enumerate(cues(segments, limits), start=1):
        lines = [_srt_line(line) for line in cue.lines]
        lines[0] = _prefix(cue.speaker) + lines[0]
        blocks.append(f"{i}\n{_clock(cue.start, ',')} --> {_clock(cue.end, ',')}\n" + "\n".join(lines) + "\n")
    return "\n".join(blocks)


def to_vtt(segments: Iterable[Mapping[str, Any]], limits: CueLimits | None = None) -> str:
    blocks = []
    for cue in cues(segments, limits, speaker_reserve=False):
        lines = [_vtt_line(line) for line in cue.lines]
        if cue.speaker:  # a voice span, closed on the cue's last line
            lines[0] = f"<v {cue.speaker}>" + lines[0]
            lines[-1] += "</v>"
        blocks.append(f"{_clock(cue.start, '.')} --> {_clock(cue.end, '.')}\n" + "\n".join(lines) + "\n")
    return "WEBVTT\n\n" + "\n".join(blocks)


def to_json(segments: Iterable[Mapping[str, Any]], meta: Mapping[str, Any]) -> str:
    items = []
    for seg in sorted(segments, key=lambda s: float(s["start"])):
        extra = seg.get("extra") or {}
        items.append({
            "start": float(seg["start"]), "end": float(seg["end"]), "text": seg.get("text") or "",
            "language": seg.get("language"), "speaker": seg.get("speaker"), "avg_logprob": seg.get("confidence"),
            "chapter": extra.get(IN_CHAPTER_FIELD),
            "words": [{"start": w[0], "end": w[1], "word": w[2]} for w in extra.get("words", [])],
        })
    return json.dumps({**meta, "segments": items}, ensure_ascii=False, indent=2) + "\n"


def to_txt(segments: Iterable[Mapping[str, Any]]) -> str:
    """One sentence a line; a new speaker's first line says who speaks. Where the file marks its chapters, each
    chapter's lines come under its title ("# Opening credits", after a blank line), the speaker said again."""
    lines: list[str] = []
    last, chapter = None, None
    for seg in sorted(segments, key=lambda s: float(s["start"])):
        text = _text(seg)
        if not text:
            continue
        if (title := (seg.get("extra") or {}).get(IN_CHAPTER_FIELD)) and title != chapter:
            lines += [*([""] if lines else []), f"# {title}"]
            chapter, last = title, None
        speaker = seg.get("speaker")
        lines.append((_prefix(speaker) if speaker and speaker != last else "") + text)
        last = speaker
    return "".join(f"{line}\n" for line in lines)


def to_tsv(segments: Iterable[Mapping[str, Any]]) -> str:
    """start and end in milliseconds (as whisper writes them), speaker, language, text."""
    rows = ["start\tend\tspeaker\tlanguage\ttext"]
    for seg in sorted(segments, key=lambda s: float(s["start"])):
        text = _text(seg).replace("\t", " ")
        if text:
            rows.append(f"{round(float(seg['start']) * 1000)}\t{round(float(seg['end']) * 1000)}\t"
                        f"{seg.get('speaker') or ''}\t{seg.get('language') or ''}\t{text}")
    return "\n".join(rows) + "\n"


def check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise TranscriptFormatError(f"unknown transcript format {fmt!r}: use one of {', '.join(FORMATS)}")
    return fmt


def shifted(segments: Sequence[Mapping[str, Any]], offset: float) -> list[dict[str, Any]]:
    """The segments as a copy of the file that starts `offset` seconds in hears them: times less `offset`,
    the segments that end before it left out, a word or segment begun before it starting at 0."""
    out = []
    for seg in segments:
        if float(seg["end"]) <= offset:
            continue
        words = [[max(0.0, float(w[0]) - offset), float(w[1]) - offset, w[2]]
                 for w in (seg.get("extra") or {}).get("words") or [] if float(w[1]) > offset]
        out.append({**seg, "start": max(0.0, float(seg["start"]) - offset), "end": float(seg["end"]) - offset,
                    "extra": {**(seg.get("extra") or {}), "words": words}})
    return out


def export(segments: Sequence[Mapping[str, Any]], fmt: str, meta: Mapping[str, Any],
           limits: CueLimits | None = None) -> str:
    check_format(fmt)
    if fmt == "srt":
        return to_srt(segments, limits)
    if fmt == "vtt":
        return to_vtt(segments, limits)
    if fmt == "json":
        return to_json(segments, meta)
    if fmt == "txt":
        return to_txt(segments)
    return to_tsv(segments)
