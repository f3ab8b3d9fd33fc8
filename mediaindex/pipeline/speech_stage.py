"""The speech stage: transcribe a file's audio into speech segments."""

from __future__ import annotations

from mediaindex.config import Settings
from mediaindex.pipeline.item import MediaItem
from mediaindex.segments import Segment


class SpeechStage:
    def __init__(self, settings: Settings) -> None:
        from mediaindex.models.speech import SpeechModel

        self.model = SpeechModel(settings.speech, settings.cache_dir)

    def process(self, item: MediaItem) -> MediaItem:
        if item.audio is None:
            return item
        transcript = self.model.transcribe(item.audio)
        item.audio = None
        item.language = transcript.language
        for seg in transcript.segments:
            item.segments.append(Segment(
                video_id=item.video_id, source=item.source, start=seg.start, end=seg.end,
                modality="speech", text=seg.text, language=transcript.language,
                confidence=seg.avg_logprob, thumbnail=item.thumbnail_at(seg.start),
                extra={"words": [[w.start, w.end, w.text] for w in seg.words]},
            ))
        if not transcript.segments:
            item.notes.append("no speech found")
        return item
