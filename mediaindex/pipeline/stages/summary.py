"""The summary stage (ingest.summaries): summarise each video with chapters while it is being indexed.

It runs after speech and vision, on the item's transcript, on-screen text and visual concepts, with the same
map-reduce summariser as `mediaindex summarize` (`agents.summarize.summarize_segments`). The summary and its
chapters become `summary` / `chapter` segments (`agents.stored`), embedded by the next stage and indexed like
any other segment; the summary segment keeps the whole structured summary for `mediaindex summarize`.

A file indexed earlier without summaries comes to this stage again, without being decoded: `indexed_item` makes
its MediaItem from the index (segments, probe data, thumbnails), and the ingest adds only the new segments.
"""

from __future__ import annotations

import logging
from dataclasses import fields, replace
from typing import TYPE_CHECKING

import numpy as np

from mediaindex.config import Settings
from mediaindex.errors import MediaIndexError, ModelLoadError
from mediaindex.media.probe import MediaInfo
from mediaindex.pipeline.stages.contract import StageContract, StageName
from mediaindex.pipeline.stages.item import Keyframe, MediaItem
from mediaindex.segments import MEDIA_MODALITIES, TRACK_FIELD, Hit, Segment

if TYPE_CHECKING:
    from mediaindex.index.index import MediaIndex

log = logging.getLogger(__name__)

NO_SUMMARY = "no summary: "  # the note on an item whose summary failed; the reason follows
_SEGMENT_FIELDS = {f.name for f in fields(Segment)}
_INFO_FIELDS = {f.name for f in fields(MediaInfo)}  # a catalog record's probe data may come from another version


class SummaryStage:
    """Loads the language model (one serving engine) and the text embedder once per actor."""

    def __init__(self, settings: Settings) -> None:
        from mediaindex.agents.llm import ChatEngine
        from mediaindex.models.text_embed import load_text_embedder

        self.settings = settings
        self.llm = ChatEngine(settings.llm)
        # Chapters are cut where the topic shifts: the embedder compares neighbouring passages.
        self.embedder = load_text_embedder(settings.embed, settings.cache_dir)

    def process(self, item: MediaItem) -> MediaItem:
        from mediaindex.agents.stored import CHAPTER, SUMMARY, summary_segments
        from mediaindex.agents.summarize import VideoRef, summarize_segments

        # A re-run of the same item (a restarted actor) must not summarise or index its own output.
        item.summary_failure = None
        item.segments = [s for s in item.segments if s.modality not in (SUMMARY, CHAPTER)]
        duration = item.info.duration if item.info.duration and item.info.duration > 0 else None
        hits = sorted((_hit(s, duration) for s in item.segments), key=lambda h: (h.start, h.end, h.modality))
        try:
            summary = summarize_segments(VideoRef(item.video_id, item.source, duration, item.language), hits,
                                         self.embedder.embed_passages, self.llm, self.settings.llm)
        except ModelLoadError:
            raise
        except Exception as exc:  # the transcript is still worth indexing: say why there is no summary
            log.exception("summary of %s failed", item.source)
            item.summary_failure = f"{type(exc).__name__}: {exc}"
            item.notes.append(f"{NO_SUMMARY}{item.summary_failure}")
            return item
        item.segments.extend(summary_segments(summary, item.language, item.thumbnail_at))
        return item


def _hit(seg: Segment, duration: float | None) -> Hit:
    """A segment as the summariser reads it; speech can end a little after the container's duration."""
    hit = Hit(source=seg.source, video_id=seg.video_id, start=seg.start, end=seg.end, score=0.0,
              modality=seg.modality, text=seg.text, language=seg.language, thumbnail=seg.thumbnail,
              track=seg.extra.get(TRACK_FIELD))
    if duration is not None and hit.end > duration:
        hit = replace(hit, end=max(duration, hit.start))
    return hit


def indexed_item(index: MediaIndex, video_id: str) -> MediaItem:
    """An indexed file as this stage reads it, from the index alone: nothing is decoded or transcribed again."""
    record = index.catalog.get(video_id)
    if record is None:
        raise MediaIndexError(f"video {video_id} is no longer in the index")
    segments = [Segment(**{k: v for k, v in payload.items() if k in _SEGMENT_FIELDS})
                for payload in index.store.segments_of(video_id)]
    info = MediaInfo(**{k: v for k, v in record.probe.items() if k in _INFO_FIELDS})
    return MediaItem(source=record.source, video_id=record.video_id, content_hash=record.content_hash,
                     size=record.size, mtime_ns=record.mtime_ns, info=info, segments=segments,
                     language=record.language, keyframes=_thumbnails(segments))


def _thumbnails(segments: list[Segment]) -> list[Keyframe]:
    """Stand-ins for the keyframes, so that summary and chapter segments get thumbnails as at first ingest:
    every media segment kept the thumbnail of the keyframe before its start."""
    times = {s.start: s.thumbnail for s in segments if s.modality in MEDIA_MODALITIES and s.thumbnail}
    empty = np.empty((0, 0, 3), np.uint8)
    return [Keyframe(t, t, empty, thumb) for t, thumb in sorted(times.items())]

STAGE = StageContract(
    StageName.SUMMARY, SummaryStage, resources=lambda s: s.ray.stages.summary, on_cpu=lambda s: s.llm.device == "cpu",
    threads=lambda s: s.llm.cpu_threads,
    with_threads=lambda s, n: s.model_copy(update={"llm": s.llm.model_copy(update={"cpu_threads": n})}), auto_threads=False)
