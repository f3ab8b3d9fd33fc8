"""The speech stage: stream a file's audio in chunks and transcribe it into speech segments."""

from __future__ import annotations

from mediaindex.config import Settings
from mediaindex.errors import MediaError
from mediaindex.pipeline.decode import AudioStream
from mediaindex.pipeline.item import MediaItem
from mediaindex.segments import Segment


class SpeechStage:
    def __init__(self, settings: Settings) -> None:
        from mediaindex.models.speech import SpeechModel

        self.settings = settings
        self.model = SpeechModel(settings.speech, settings.cache_dir)

    def process(self, item: MediaItem) -> MediaItem:
        """Transcribe `item.audio` when a caller decoded it already, else stream it from the file.

        An audio track that cannot be decoded fails an audio-only file; a video keeps its
        pictures, with a note saying why it has no transcript.
        """
        if item.audio is not None:
            transcript = self.model.transcribe(item.audio)
            item.audio = None
        elif item.info.has_audio:
            timeout = self.settings.ingest.file_timeout
            stream = AudioStream(item.source, chunk_seconds=self.settings.speech.chunk_seconds, timeout=timeout)
            try:
                transcript = self.model.transcribe_stream(stream)
            except MediaError as exc:
                if not (item.info.has_video and item.keyframes):
                    raise
                item.notes.append(f"audio skipped: {exc.reason}")
                return item
            if stream.warning:
                item.notes.append(stream.warning)
            elif item.info.duration - stream.decoded_seconds > 1.0:
                item.notes.append(f"audio ends early at {stream.decoded_seconds:.1f} s of {item.info.duration:.1f} s")
        else:
            return item
        item.language = transcript.language
        for seg in transcript.segments:
            item.segments.append(Segment(
                video_id=item.video_id, source=item.source, start=seg.start, end=seg.end,
                modality="speech", text=seg.text, language=transcript.language,
                confidence=seg.avg_logprob, thumbnail=item.thumbnail_at(seg.start),
                extra={"words": [[w.start, w.end, w.text] for w in seg.words],
                       "no_speech_prob": round(seg.no_speech_prob, 4)},
            ))
        if not transcript.segments:
            item.notes.append("no speech found")
        return item
