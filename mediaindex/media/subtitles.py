"""Timed text that comes with a media file: its text subtitle streams, and subtitle files beside it.

A file's subtitle streams (SubRip, WebVTT, ASS/SSA, MP4 timed text) are decoded with PyAV. So are the files named
after it ("talk.srt", "talk.en.vtt", "talk.de.ass", and SAMI, LRC lyrics, MicroDVD, SubViewer and YouTube's SBV),
after their bytes are read as UTF-8 (legacy files are often Windows-1252 or EUC-KR, which FFmpeg refuses). TTML
(DFXP) and Scenarist closed captions (SCC), which FFmpeg does not read, are converted to SubRip by ttconv first.
Picture subtitles (DVD, Blu-ray, DVB, VobSub) would need OCR: they are left out with a note. Captions that roll,
as automatic captions do (each line shown again under the next), keep each line once.
"""

from __future__ import annotations

import html
import io
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from pathlib import Path
from typing import Any

# FFmpeg's demuxer for each suffix it reads; ".sub" is MicroDVD or SubViewer, told apart by its first line.
_FORMATS = {".srt": "srt", ".vtt": "webvtt", ".ass": "ass", ".ssa": "ass", ".smi": "sami", ".sami": "sami",
            ".lrc": "lrc", ".sbv": "subviewer", ".sub": "subviewer"}
# Read by ttconv and handed on as SubRip.
_CONVERTED = {".ttml": "TTML", ".dfxp": "TTML", ".scc": "SCC"}
_TTML_NAMESPACE = "http://www.w3.org/ns/ttml"
_TTAF_NAMESPACES = ("http://www.w3.org/2006/10/ttaf1", "http://www.w3.org/2006/04/ttaf1")
SUBTITLE_SUFFIXES = tuple(sorted({*_FORMATS, *_CONVERTED}))
PICTURE_CODECS = frozenset({"dvd_subtitle", "dvdsub", "hdmv_pgs_subtitle", "pgssub", "dvb_subtitle", "dvbsub",
                            "xsub", "dvb_teletext"})
# A subtitle file larger than this is not a subtitle file (a feature film's has a few hundred kB).
MAX_FILE_BYTES = 20 * 2**20
_OVERRIDE = re.compile(r"\{[^{}]*\}")  # ASS style overrides: {\i1}, {\an8}, {\c&HFF&}
_TAG = re.compile(r"</?[a-zA-Z][^<>]*>")  # HTML-like tags some decoders leave: <i>, <font color=...>
_MICRODVD = re.compile(r"\{\d+\}\{\d*\}")  # "{25}{75}text": frames, not times
_MICRODVD_RATE = re.compile(r"\{1\}\{1\}\s*\d+(\.\d+)?\s*$")  # a first cue "{1}{1}23.976" gives the frame rate
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Cue:
    start: float
    end: float
    text: str


@dataclass(frozen=True)
class SubtitleTrack:
    origin: str  # "stream 2" of the media file, or the subtitle file's name
    language: str | None  # two-letter code from the stream's tag or the file's name; None when neither says
    cues: tuple[Cue, ...]


@dataclass
class Subtitles:
    tracks: list[SubtitleTrack]
    notes: list[str]  # what could not be read, for the user


def subtitle_files(media: Path) -> list[Path]:
    """The subtitle files beside a media file, named after it: "talk.srt", "talk.en.vtt", "talk.forced.ass"."""
    folder = media.parent
    try:
        names = _subtitle_names(str(folder), folder.stat().st_mtime_ns)
    except OSError:
        return []
    stem = media.stem.casefold()
    return [folder / name for name in names
            if name.casefold().startswith(stem + ".") and name != media.name and (folder / name).is_file()]


def subtitle_signature(media: Path) -> list[list[str | int]]:
    """[name, size, mtime_ns] of each subtitle file beside a media file: what an unchanged file's index entry is
    compared with, so that a subtitle file added, changed or removed later is read by the next ingest."""
    out: list[list[str | int]] = []
    for file in subtitle_files(media):
        try:
            st = file.stat()
        except OSError:
            continue
        out.append([file.name, st.st_size, st.st_mtime_ns])
    return out


@lru_cache(maxsize=64)
def _subtitle_names(folder: str, stamp: int) -> tuple[str, ...]:
    """The names of a folder's subtitle files, listed once while the folder is unchanged (`stamp`, its mtime):
    files of a large folder each look their subtitles up in it."""
    with os.scandir(folder) as entries:
        return tuple(sorted(e.name for e in entries if os.path.splitext(e.name)[1].casefold() in SUBTITLE_SUFFIXES))


def language_code(tag: str | None) -> str | None:
    """A stream's language tag or a file name's part as a two-letter code ("eng" → "en", "pt-BR" → "pt"); None for
    what names no language with one ("und", "forced", "sdh")."""
    if not tag:
        return None
    import langcodes

    try:
        language = langcodes.Language.get(tag.strip()).language
    except (ValueError, LookupError):
        return None
    return language if language and len(language) == 2 else None


def read_subtitles(media: Path, streams: int = 0) -> Subtitles:
    """Every text subtitle track of a media file: its own streams (read only when the probe found `streams`) and
    the subtitle files beside it. A track that cannot be read becomes a note; the others are kept."""
    out = Subtitles([], [])
    if streams:
        _read_streams(media, out)
    for file in subtitle_files(media):
        try:
            track = _read_file(file, media)
        except _Unreadable as exc:
            out.notes.append(f"subtitle file {file.name} not read: {exc}")
            continue
        if track.cues:
            out.tracks.append(track)
        else:
            out.notes.append(f"subtitle file {file.name} holds no cues")
    return out


class _Unreadable(Exception):
    pass


def _read_streams(media: Path, out: Subtitles) -> None:
    import av

    try:
        with av.open(str(media), metadata_errors="ignore", timeout=60.0) as container:
            offset = (container.start_time or 0) / 1_000_000
            text = []
            for stream in container.streams.subtitles:
                if stream.codec_context.name in PICTURE_CODECS:
                    out.notes.append(f"subtitle stream {stream.index} ({stream.codec_context.name}) is pictures, "
                                     "not text: not read")
                else:
                    text.append(stream)
            if not text:
                return
            cues = _decode(container, text, offset)
            out.tracks += [SubtitleTrack(f"stream {s.index}", language_code(s.metadata.get("language")),
                                         cues[s.index]) for s in text if cues[s.index]]
    except (av.error.FFmpegError, UnicodeDecodeError, ValueError) as exc:
        out.notes.append(f"subtitle streams not read: {exc}")


def _read_file(file: Path, media: Path) -> SubtitleTrack:
    import av

    try:
        if file.stat().st_size > MAX_FILE_BYTES:
            raise _Unreadable(f"larger than {MAX_FILE_BYTES // 2**20} MB")
        data = file.read_bytes()
    except OSError as exc:
        raise _Unreadable(exc.strerror or str(exc)) from exc
    suffix = file.suffix.casefold()
    if suffix == ".sub" and data.startswith(b"\x00\x00\x01\xba"):  # an MPEG program stream: VobSub's pictures
        raise _Unreadable("VobSub pictures, not text")
    text = _as_text(data)
    if not text.strip():
        raise _Unreadable("empty")
    kind = _CONVERTED.get(suffix) or suffix.lstrip(".").upper()
    form, options = _FORMATS.get(suffix, "srt"), {}
    if suffix == ".sub" and _MICRODVD.match(first := text.lstrip()):
        form, kind = "microdvd", "MicroDVD"
        if not _MICRODVD_RATE.match(first.split("\n", 1)[0]) and (rate := _frame_rate(media)):
            options["subfps"] = rate  # cues count the video's frames, as players read them
    if suffix in _CONVERTED:
        cues = _timed_text_cues(text, kind)
    else:
        try:
            with av.open(io.BytesIO(text.encode("utf-8")), format=form, options=options) as container:
                if not container.streams.subtitles:
                    raise _Unreadable("no subtitles in it")
                stream = container.streams.subtitles[0]
                cues = _decode(container, [stream], 0.0)[stream.index]
        except av.error.FFmpegError as exc:
            raise _Unreadable(f"not a {kind} file ({exc.strerror or type(exc).__name__})") from exc
    between = file.name[len(media.stem) + 1:-len(file.suffix)]  # "en" of "talk.en.srt"; "" of "talk.srt"
    language = next((code for part in reversed(between.split(".")) if (code := language_code(part))), None)
    return SubtitleTrack(file.name, language, cues)


def _timed_text_cues(text: str, kind: str) -> tuple[Cue, ...]:
    """The cues of a TTML or SCC document, read by ttconv: each paragraph a cue (one shown until further notice
    ends where the next begins)."""
    import logging
    import xml.etree.ElementTree as ElementTree

    from ttconv.imsc import reader as ttml_reader
    from ttconv.scc import reader as scc_reader

    # ttconv logs every caption wider than a TV line, every overlap it resolves and why a document is refused:
    # the file's note says the last, the others are nothing a reader can act on.
    logging.getLogger("ttconv").setLevel(logging.CRITICAL)
    try:
        if kind == "SCC":
            document = scc_reader.to_model(text)
        else:
            for old in _TTAF_NAMESPACES:  # DFXP of Flash-era players is in the namespace of TTML's drafts
                text = text.replace(old, _TTML_NAMESPACE)
            document = ttml_reader.to_model(ElementTree.ElementTree(ElementTree.fromstring(text.lstrip("\ufeff"))))
        if document is None:
            raise _Unreadable(f"not a {kind} file")
        timed = sorted(((b, e, lines) for b, e, words in _paragraphs(document) if (lines := _text_lines(words))),
                       key=lambda p: p[0])
    except _Unreadable:
        raise
    except Exception as exc:  # ttconv raises what its parsers meet (ValueError, KeyError, ParseError, ...)
        raise _Unreadable(f"not a {kind} file ({exc or type(exc).__name__})") from exc
    ends = [end if end is not None else timed[i + 1][0] if i + 1 < len(timed) else begin
            for i, (begin, end, _) in enumerate(timed)]
    return _each_line_once((begin, until, lines) for (begin, _, lines), until in zip(timed, ends, strict=True))


def _paragraphs(document: Any) -> list[tuple[float, float | None, str]]:
    """(begin, end, text) of every paragraph of a ttconv document, in seconds from its start, in document order.

    A paragraph's words are taken over the whole time it is shown: words timed within it (SCC's paint-on text,
    karaoke spans) appear during that time. ttconv's own SubRip writer computes the whole screen at every time
    anything changes, which takes time growing with the square of the cues (14 s for a 3,000-cue film).
    Times nest as TTML's `par` containers do: an element's offsets count from its parent's begin, and it ends by
    its parent's end."""
    from ttconv import model

    out: list[tuple[float, float | None, str]] = []

    def text_of(element: Any) -> str:
        if isinstance(element, model.Text):
            return str(element.get_text())
        if isinstance(element, model.Br):
            return "\n"
        if isinstance(element, model.Rt | model.Rtc | model.Rp):  # ruby's reading aids, not the text
            return ""
        return "".join(text_of(child) for child in element)

    def visit(element: Any, parent_begin: Fraction, parent_end: Fraction | None) -> None:
        begin = parent_begin + (element.get_begin() or 0)
        end = parent_end if element.get_end() is None else parent_begin + element.get_end()
        if end is not None and parent_end is not None:
            end = min(end, parent_end)
        if end is not None and end <= begin:
            return
        if isinstance(element, model.P):
            out.append((float(begin), None if end is None else float(end), text_of(element)))
            return
        for child in element:
            visit(child, begin, end)

    body = document.get_body()
    if body is not None:
        visit(body, Fraction(0), None)
    return out


def _frame_rate(media: Path) -> str | None:
    """The media file's video frame rate ("25", "24000/1001"), or None when it has no video or cannot be read."""
    import av

    try:
        with av.open(str(media), metadata_errors="ignore", timeout=60.0) as container:
            rate = container.streams.video[0].average_rate if container.streams.video else None
    except (av.error.FFmpegError, OSError):
        return None
    return str(rate) if rate else None


def _as_text(data: bytes) -> str:
    """A subtitle file's bytes as text: UTF-8 (with or without a byte-order mark) or UTF-16 as marked, else the
    encoding its bytes most likely are."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16", errors="replace")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        pass
    from charset_normalizer import from_bytes

    best = from_bytes(data).best()
    if best is None:
        raise _Unreadable("not text")
    return str(best)


def _decode(container: Any, streams: list[Any], offset: float) -> dict[int, tuple[Cue, ...]]:
    """Each stream's cues in time order (by stream index), in one pass over the file; each line once: a line the
    stream's cue before showed is not repeated."""
    import av

    events: dict[int, list[tuple[float, float, list[str]]]] = {s.index: [] for s in streams}
    for packet in container.demux(*streams):
        if packet.pts is None or not packet.size:
            continue
        index = packet.stream.index
        start = max(0.0, float(packet.pts * packet.time_base) - offset)
        end = start + float((packet.duration or 0) * packet.time_base)
        try:
            decoded = packet.decode()
        except av.error.FFmpegError:  # a cue its decoder refuses (SAMI's empty "&nbsp;" cue that clears the screen)
            continue
        events[index].append((start, end, [line for sub in decoded for line in _lines(sub)]))
    return {index: _each_line_once(found) for index, found in events.items()}


def _each_line_once(events: Iterable[tuple[float, float, list[str]]]) -> tuple[Cue, ...]:
    """Cues of (start, end, lines shown) in the order shown, in time order; a line the cue before showed is not
    repeated (captions that roll show each line again under the next)."""
    cues, shown = [], []
    for start, end, lines in events:
        if new := [line for line in lines if line not in shown]:
            cues.append(Cue(round(start, 3), round(end, 3), " ".join(new)))
        shown = lines
    return tuple(sorted(cues, key=lambda c: (c.start, c.end)))


def _lines(sub: Any) -> list[str]:
    """The text lines of one decoded subtitle, without styling."""
    raw = getattr(sub, "dialogue", None)
    if raw is None:
        return []
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw)
    return _text_lines(html.unescape(_TAG.sub("", _OVERRIDE.sub("", text))))


def _text_lines(text: str) -> list[str]:
    return [line for part in text.splitlines() if (line := _SPACE.sub(" ", part).strip())]


# How long a passage of cues may grow: about as long as the speech stage's longer segments (Whisper's segments of
# ../shared/media: 90th percentile 22 words and 8.5 s), so that a passage reads to search like a spoken one.
MAX_PASSAGE_CHARS = 140
MAX_PASSAGE_SECONDS = 9.0
# A pause longer than this between cues ends a passage.
MAX_GAP = 1.0
_SENTENCE_END = re.compile(r"[.!?…。！？]['\")\]]*$")


def passages(cues: tuple[Cue, ...] | list[Cue]) -> list[Cue]:
    """Cues joined into passages: a cue continues the one before while that one ends no sentence, the pause
    between them is short and the passage stays about as long as a spoken segment."""
    out: list[Cue] = []
    for cue in cues:
        last = out[-1] if out else None
        if (last is not None and not _SENTENCE_END.search(last.text) and cue.start - last.end <= MAX_GAP
                and len(last.text) + 1 + len(cue.text) <= MAX_PASSAGE_CHARS
                and cue.end - last.start <= MAX_PASSAGE_SECONDS):
            out[-1] = Cue(last.start, max(last.end, cue.end), f"{last.text} {cue.text}")
        else:
            out.append(cue)
    return out
