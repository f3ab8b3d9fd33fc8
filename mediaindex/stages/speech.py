"""The speech stage: stream a file's audio in chunks and transcribe it into speech segments.

In the pipeline it runs beside the video decode and the vision stage, from the file's path:
transcribing never waits for the pictures (its `SpeechResult` joins the item before it is embedded or
summarised). Given a decoded `MediaItem` instead, it adds the speech segments to it directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from mediaindex.config import Settings
from mediaindex.errors import MediaError
from mediaindex.media.decode import AudioStream
from mediaindex.media.probe import MediaInfo, probe
from mediaindex.segments import Segment
from mediaindex.stages.item import MediaItem

if TYPE_CHECKING:
    from mediaindex.models.speech import Transcript


@dataclass
class SpeechResult:
    """A file's transcript, made without its decoded item: `join` adds it to that item."""

    segments: list[Segment] = field(default_factory=list)  # video id and thumbnails are set by `join`
    language: str | None = None
    notes: list[str] = field(default_factory=list)
    failure: str | None = None  # why the audio could not be read

    def join(self, item: MediaItem) -> MediaItem:
        """The decoded item with this transcript. Unreadable audio fails an audio-only file; a video
        keeps its pictures, with a note saying why it has no transcript."""
        if self.failure is not None:
            if not (item.info.has_video and item.keyframes):
                raise MediaError(item.source, self.failure)
            item.notes.append(f"audio skipped: {self.failure}")
            return item
        spoken = [replace(s, video_id=item.video_id, source=item.source, thumbnail=item.thumbnail_at(s.start))
                  for s in self.segments]
        item.segments = spoken + item.segments
        item.language = self.language or item.language
        item.notes.extend(self.notes)
        return item


class SpeechStage:
    def __init__(self, settings: Settings) -> None:
        from mediaindex.models.speech import SpeechModel

        self.settings = settings
        self.model = SpeechModel(settings.speech, settings.cache_dir)

    def process(self, item: MediaItem | str) -> MediaItem | SpeechResult:
        """A file path gives its `SpeechResult`; a decoded item comes back with its speech segments
        (from `item.audio` when a caller decoded it already, else streamed from the file)."""
        if isinstance(item, str):
            try:
                info = probe(item)
            except MediaError as exc:  # the decode beside this fails the file with its own reason
                return SpeechResult(failure=exc.reason)
            return self.transcribe_file(item, info)
        if item.audio is not None:
            result = self._result(self.model.transcribe(item.audio), item.source)
            item.audio = None
        else:
            result = self.transcribe_file(item.source, item.info)
        return result.join(item)

    def transcribe_file(self, path: str, info: MediaInfo) -> SpeechResult:
        if not info.has_audio:
            return SpeechResult()
        stream = AudioStream(path, chunk_seconds=self.settings.speech.chunk_seconds,
                             timeout=self.settings.ingest.file_timeout)
        try:
            transcript = self.model.transcribe_stream(stream)
        except MediaError as exc:
            return SpeechResult(failure=exc.reason)
        result = self._result(transcript, path)
        if stream.warning:
            result.notes.append(stream.warning)
        elif info.duration - stream.decoded_seconds > 1.0:
            result.notes.append(f"audio ends early at {stream.decoded_seconds:.1f} s of {info.duration:.1f} s")
        return result

    @staticmethod
    def _result(transcript: Transcript, source: str) -> SpeechResult:
        result = SpeechResult(language=transcript.language)
        for seg in transcript.segments:
            result.segments.append(Segment(
                video_id="", source=source, start=seg.start, end=seg.end,
                modality="speech", text=seg.text, language=seg.language or transcript.language,
                confidence=seg.avg_logprob, thumbnail=None,
                extra={"words": [[w.start, w.end, w.text] for w in seg.words],
                       "no_speech_prob": round(seg.no_speech_prob, 4)},
            ))
        if not transcript.segments:
            result.notes.append("no speech found")
        return result
