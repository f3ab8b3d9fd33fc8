"""The tools the model may call, over the index: search, get_transcript, get_frames_text.

Arguments are checked against strict JSON schemas (no extra keys, typed, bounded) before anything runs; a
bad call comes back as a `ToolError` whose message is shown to the model.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from mediaindex.config import VisionSettings
from mediaindex.index.catalog import VideoRecord
from mediaindex.index.index import MediaIndex
from mediaindex.index.naming import one_file_named
from mediaindex.index.store import SearchFilters, hit_from_payload
from mediaindex.models.text_embed import TextEmbedder
from mediaindex.segments import (
    MEDIA_MODALITIES,
    MODALITIES,
    SUBTITLE,
    Hit,
    default_track,
    standing_for_speech,
)

MAX_RESULT_CHARS = 1200  # what one tool result may add to the context
CONTEXT_GAP = 1.5  # seconds of silence across which a spoken hit takes in the sentence after it
CONTEXT_CHARS = 450  # at most this much text per widened moment
# Answers search deeper than a person's search: the best moments with no threshold, for the model to judge.
ANSWER_LIMIT = 10
ANSWER_CONFIDENCE = "none"
SHOWN_AS = {"speech": "said", "ocr": "on screen", "visual": "seen", "subtitle": "subtitles",
            "marker": "chapter marker", "summary": "summary", "chapter": "chapter"}

_RANGE = {
    "video_id": {"type": "string", "minLength": 1, "maxLength": 64, "description": "id of an indexed video"},
    "start": {"type": "number", "minimum": 0, "description": "seconds from the start of the video"},
    "end": {"type": "number", "minimum": 0, "description": "seconds from the start of the video"},
}

TOOL_SCHEMAS: dict[str, dict[str, Any]] = {
    "search": {
        "description": "Search the archive in plain language; returns moments (video id, start, end, text).",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 1, "maxLength": 300},
                "video_id": {"type": "string", "minLength": 1, "maxLength": 64},
                "modality": {"type": "string", "enum": list(MODALITIES)},
                "limit": {"type": "integer", "minimum": 1, "maximum": 10},
                "min_confidence": {"type": "string", "enum": ["high", "medium", "low", "none"],
                                   "description": "how sure a moment must be to be returned (default none: the "
                                                  "best moments, for you to judge)"},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    },
    "get_transcript": {
        "description": "The speech transcript of a video between start and end seconds.",
        "parameters": {"type": "object", "properties": _RANGE, "required": ["video_id", "start", "end"],
                       "additionalProperties": False},
    },
    "get_frames_text": {
        "description": "On-screen text and visual concepts of a video between start and end seconds.",
        "parameters": {"type": "object", "properties": _RANGE, "required": ["video_id", "start", "end"],
                       "additionalProperties": False},
    },
}


class ToolError(ValueError):
    """A tool call that cannot run; the message is written for the model to correct itself."""


def tool_specs() -> list[dict[str, Any]]:
    """OpenAI / Hermes function specs, as chat templates and system prompts show them."""
    return [{"type": "function", "function": {"name": name, **spec}} for name, spec in TOOL_SCHEMAS.items()]


def validate_arguments(name: str, arguments: Any) -> dict[str, Any]:
    import jsonschema

    if name not in TOOL_SCHEMAS:
        raise ToolError(f"unknown tool {name!r}; the tools are {', '.join(TOOL_SCHEMAS)}")
    if not isinstance(arguments, dict):
        raise ToolError(f"arguments of {name} must be a JSON object, got {type(arguments).__name__}")
    try:
        jsonschema.validate(arguments, TOOL_SCHEMAS[name]["parameters"])
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "arguments"
        raise ToolError(f"bad arguments for {name}: {where}: {exc.message}") from None
    for key in ("start", "end"):
        if key in arguments and not math.isfinite(arguments[key]):
            raise ToolError(f"bad arguments for {name}: {key} must be a finite number")
    return arguments


@dataclass
class ToolResult:
    name: str
    arguments: dict[str, Any]
    moments: list[Hit]
    note: str = ""

    def for_model(self) -> str:
        """Compact JSON the model reads; long results are cut to keep the context bounded."""
        items: list[dict[str, Any]] = []
        used = 0
        for h in self.moments:
            text = h.text[:300]
            used += len(text) + 60
            if items and used > MAX_RESULT_CHARS:
                break
            items.append({"video_id": h.video_id, "start": round(h.start, 2), "end": round(h.end, 2),
                          "modality": h.modality, "text": text})
        out: dict[str, Any] = {"results": items}
        if self.note:
            out["note"] = self.note
        return json.dumps(out, ensure_ascii=False)

    def numbered(self, number: Callable[[Hit], int], name: Callable[[str], str]) -> str:
        """Compact lines a small model can cite by number, the moment's words first:
        `[3] "what was said" (said in file.mp4, video ID, 12.0-19.5 s)`; `number` gives each moment its number
        for the whole job, `name` a video id's file name."""
        if not self.moments:
            return f"{self.name}: {self.note or 'nothing'}"
        lines: list[str] = []
        used = 0
        for h in self.moments:
            text = " ".join(h.text.split())[:300]
            used += len(text) + 60
            if lines and used > MAX_RESULT_CHARS:
                break
            lines.append(f"[{number(h)}] \"{text}\" ({SHOWN_AS.get(h.modality, h.modality)} in {name(h.video_id)}, "
                         f"video {h.video_id}, {h.start:.1f}-{h.end:.1f} s)")
        return "\n".join(lines)


@dataclass
class Archive:
    """Read access to an index for the agentic jobs: videos, their segments, and search."""

    index: MediaIndex
    embedder: TextEmbedder
    vision: VisionSettings | None = None  # CLIP's text tower joins the search when it is configured
    _segments: dict[str, list[Hit]] = field(default_factory=dict)
    # Jobs may share one archive from several threads (their model calls share one batch); reads take turns.
    _lock: threading.RLock = field(default_factory=threading.RLock)

    def video(self, video_id: str) -> VideoRecord | None:
        return self.index.catalog.get(video_id)

    def has_metadata(self, video_id: str, metadata: tuple[tuple[str, str], ...]) -> bool:
        """Whether the file's segments carry these metadata values (as a search's filter finds them)."""
        return self.index.store.count(self.index.spelled(SearchFilters(video_id=video_id, metadata=metadata))) > 0

    def resolve(self, ref: str) -> VideoRecord | None:
        """A video id, a unique id prefix, or the path / file name it was ingested from; a name or prefix that fits
        several files is refused, naming them (`index.naming.NoSuchFileError`)."""
        ref = ref.strip()
        if not ref:
            return None
        return self.index.catalog.get(ref) or one_file_named(self.index.catalog.all(), ref)

    def segments(self, video_id: str) -> list[Hit]:
        """Every indexed segment of a video, in time order (cached per job)."""
        with self._lock:
            return self._segments_of(video_id)

    def _segments_of(self, video_id: str) -> list[Hit]:
        if video_id not in self._segments:
            hits = [hit_from_payload(p, 0.0) for p in self.index.store.segments_of(video_id)]
            self._segments[video_id] = sorted(self._clamp(hits), key=lambda h: (h.start, h.end, h.modality))
        return self._segments[video_id]

    def search(self, query: str, video_id: str | None = None, modality: str | None = None,
               limit: int = 5, min_confidence: str = ANSWER_CONFIDENCE,
               metadata: tuple[tuple[str, str], ...] = ()) -> list[Hit]:
        """Moments of the media; generated summaries and chapters only when asked for by modality, so that an
        answer cites what was said or shown, not what a model wrote about it. By default every ranked moment
        (min_confidence "none"): the language model judges what answers the question."""
        from mediaindex.search.searcher import Searcher

        filters = SearchFilters(video_id=video_id, modality=modality or MEDIA_MODALITIES, metadata=metadata)
        with self._lock:
            hits = Searcher(self.index, self.embedder, self.vision).text(query, limit=limit, filters=filters,
                                                                         min_confidence=min_confidence)
            # A picture without words gives the language model nothing to read or to quote.
            return self._clamp([h for h in hits if h.text.strip()])

    def in_context(self, hits: list[Hit], gap: float = CONTEXT_GAP, max_chars: int = CONTEXT_CHARS) -> list[Hit]:
        """Each spoken moment as what was said in it (a moment merged from several sentences shows them all,
        not only its best one's snippet), with the sentence after it when that follows within `gap` seconds
        and the text stays under `max_chars` (the answer to a question is often said right after the words it
        shares with the question). A moment inside one already listed is left out; score and band stay the
        hit's own."""
        out: list[Hit] = []
        for h in hits:
            if any(o.video_id == h.video_id and o.modality == h.modality and o.start <= h.start and o.end >= h.end
                   for o in out):
                continue
            said = [s for s in self.segments(h.video_id) if s.modality == "speech"] if h.modality == "speech" else []
            inside = [i for i, s in enumerate(said) if s.start < h.end and s.end > h.start]
            if not inside:
                out.append(h)
                continue
            lo, hi = inside[0], inside[-1]
            last = hi + 1 if hi + 1 < len(said) and said[hi + 1].start - said[hi].end <= gap else hi
            if last > hi and sum(len(s.text) + 1 for s in said[lo:last + 1]) > max_chars:
                last = hi
            run = said[lo:last + 1]
            out.append(replace(h, start=min(h.start, run[0].start), end=max(h.end, run[-1].end),
                               text=" ".join(s.text.strip() for s in run)))
        return out

    def _clamp(self, hits: list[Hit]) -> list[Hit]:
        """Speech segments can end a little after the container's duration; moments never do."""
        out = []
        for h in hits:
            record = self.video(h.video_id)
            if record is not None and record.duration is not None and h.end > record.duration:
                h = replace(h, end=max(record.duration, h.start))
            out.append(h)
        return out

    # -- tools ----------------------------------------------------------------------------------------------------
    def run_tool(self, name: str, arguments: Any) -> ToolResult:
        args = validate_arguments(name, arguments)
        if name == "search":
            vid = args.get("video_id")
            if vid is not None and self.video(vid) is None:
                raise ToolError(f"no video with id {vid!r} in the index")
            try:
                hits = self.search(args["query"], vid, args.get("modality"), args.get("limit", ANSWER_LIMIT),
                                   args.get("min_confidence", ANSWER_CONFIDENCE))
            except ValueError as exc:  # e.g. a query of punctuation only
                raise ToolError(str(exc)) from exc
            return ToolResult(name, args, hits, "" if hits else "no results")
        record = self.video(args["video_id"])
        if record is None:
            raise ToolError(f"no video with id {args['video_id']!r} in the index")
        start, end = float(args["start"]), float(args["end"])
        if end <= start:
            raise ToolError(f"end ({end}) must be after start ({start})")
        if record.duration is not None and start >= record.duration:
            raise ToolError(f"start {start} is past the end of the video ({record.duration:.1f} s)")
        segments = self.segments(record.video_id)
        if name == "get_transcript":
            said = default_track([h for h in segments if h.modality == "speech"], lambda h: h.track) or standing_for_speech(
                [h for h in segments if h.modality == SUBTITLE], lambda h: h.language, record.language)
        else:
            said = [h for h in segments if h.modality in ("ocr", "visual")]
        # A shot without a confident label has no text: nothing to show the model.
        moments = [h for h in said if h.text and h.start < end and h.end > start]
        note = "" if moments else (
            "no speech or subtitles in this range" if name == "get_transcript"
            else "no on-screen text or visual concepts indexed for this range")
        return ToolResult(name, args, moments, note)
