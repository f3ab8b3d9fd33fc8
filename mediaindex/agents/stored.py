"""Summaries made while ingesting (the pipeline's summary stage), as segments of the index and back.

A video's summary becomes one `summary` segment spanning its chapters and every chapter a `chapter` segment over
the chapter's time range: both are embedded and searched like speech, so a search for a topic finds the chapter
about it. The summary segment's `extra["summary"]` keeps the whole VideoSummary (chapters, citations, notes),
so `mediaindex summarize VIDEO` returns it without running the model again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from pydantic import ValidationError

from mediaindex.agents.schema import VideoSummary
from mediaindex.agents.tools import Archive
from mediaindex.segments import Segment

log = logging.getLogger(__name__)

SUMMARY, CHAPTER = "summary", "chapter"
STORED_NOTE = "made while indexing (ingest.summaries); `mediaindex summarize --recompute` runs the model again"


def summary_segments(summary: VideoSummary, language: str | None = None,
                     thumbnail_at: Callable[[float], str | None] | None = None) -> list[Segment]:
    """The segments that index a summary: none when there was nothing to summarise."""
    if summary.status == "nothing_to_summarise" or not summary.chapters:
        return []

    def segment(modality: str, start: float, end: float, text: str, extra: dict) -> Segment:
        return Segment(video_id=summary.video_id, source=summary.source, start=start, end=end, modality=modality,
                       text=text, language=language, thumbnail=thumbnail_at(start) if thumbnail_at else None,
                       extra=extra)

    start = min(c.start for c in summary.chapters)
    end = max(c.end for c in summary.chapters)
    out = [segment(SUMMARY, start, end, summary.summary, {SUMMARY: summary.model_dump(mode="json")})]
    if summary.status == "summarised":
        # Chapters of a visual-only summary restate the visual segments word for word: not indexed twice.
        for number, ch in enumerate(summary.chapters, 1):
            out.append(segment(CHAPTER, ch.start, ch.end, ch.summary, {CHAPTER: {
                "number": number, "title": ch.title, "generated": ch.generated,
                "citations": [c.model_dump(mode="json") for c in ch.citations]}}))
    return out


def stored_summary(archive: Archive, video: str) -> VideoSummary | None:
    """The summary stored when `video` was indexed, or None (not indexed with summaries, or unreadable)."""
    record = archive.resolve(video) if (video or "").strip() else None
    if record is None:
        return None
    for payload in archive.index.store.segments_of(record.video_id, modality=SUMMARY):
        data = (payload.get("extra") or {}).get(SUMMARY)
        if not isinstance(data, dict):
            continue
        try:
            stored = VideoSummary.model_validate(data)
        except ValidationError as exc:  # written by another version: summarise again rather than fail
            log.warning("stored summary of %s is not readable (%s); summarising again", record.video_id, exc)
            return None
        return stored.model_copy(update={"source": record.source, "notes": [*stored.notes, STORED_NOTE]})
    return None
