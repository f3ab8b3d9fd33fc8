"""The speech stage: stream a file's audio in chunks and transcribe it into speech segments.

In the pipeline it runs beside the video decode and the vision stage, from the file's path:
transcribing never waits for the pictures (its `SpeechResult` joins the item before it is embedded or
summarised). Given a decoded `MediaItem` instead, it adds the speech segments to it directly.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from mediaindex.config import Settings
from mediaindex.errors import MediaError
from mediaindex.media.decode import SAMPLE_RATE, AudioStream
from mediaindex.media.probe import MediaInfo, probe
from mediaindex.segments import Segment
from mediaindex.stages.item import MediaItem

if TYPE_CHECKING:
    from mediaindex.models.speakers import SpeakerEncoder, SpeakerTrack, Turn
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
        # The voice encoder loads (and warms up) on a thread beside Whisper's load: most of Whisper's is in
        # CTranslate2, which leaves the interpreter free for the encoder's imports.
        speakers: Future[SpeakerEncoder] | None = None
        if settings.speech.diarize:
            from mediaindex.models.speakers import SpeakerEncoder

            speakers = Future()
            threading.Thread(target=_load_into, args=(speakers, lambda: SpeakerEncoder(
                "cpu", threads=settings.speech.cpu_threads or 1)), daemon=True, name="load-speakers").start()
        try:
            self.model = SpeechModel(settings.speech, settings.cache_dir)
        finally:
            self.speakers = speakers.result() if speakers is not None else None

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
            track = self._track()
            transcript = self.model.transcribe_stream([item.audio], on_part=track.add if track else None)
            result = self._result(transcript, item.source, self._turns(track))
            item.audio = None
        else:
            result = self.transcribe_file(item.source, item.info)
        return result.join(item)

    def transcribe_file(self, path: str, info: MediaInfo,
                        on_progress: Callable[[float], None] | None = None) -> SpeechResult:
        """The file's transcript; `on_progress` hears the seconds of audio read so far, chunk by chunk."""
        if not info.has_audio:
            return SpeechResult()
        stream = AudioStream(path, chunk_seconds=self.settings.speech.chunk_seconds,
                             timeout=self.settings.ingest.file_timeout)
        track = self._track()
        try:
            transcript = self.model.transcribe_stream(_reporting(stream, on_progress) if on_progress else stream,
                                                      on_part=track.add if track else None)
        except MediaError as exc:
            return SpeechResult(failure=exc.reason)
        result = self._result(transcript, path, self._turns(track))
        if stream.warning:
            result.notes.append(stream.warning)
        elif info.duration - stream.decoded_seconds > 1.0:
            result.notes.append(f"audio ends early at {stream.decoded_seconds:.1f} s of {info.duration:.1f} s")
        return result

    def _track(self) -> SpeakerTrack | None:
        """Where the speaker embeddings of one file gather while its audio streams past (None: no diarization)."""
        from mediaindex.models.speakers import SpeakerTrack

        return SpeakerTrack(self.speakers) if self.speakers is not None else None

    def _turns(self, track: SpeakerTrack | None) -> list[Turn]:
        if track is None:
            return []
        return track.turns(self.settings.speech.speakers, self.settings.speech.speaker_threshold)

    @staticmethod
    def _result(transcript: Transcript, source: str, turns: list[Turn] | None = None) -> SpeechResult:
        from mediaindex.models.speakers import speaker_at

        result = SpeechResult(language=transcript.language)
        for seg in transcript.segments:
            result.segments.append(Segment(
                video_id="", source=source, start=seg.start, end=seg.end,
                modality="speech", text=seg.text, language=seg.language or transcript.language,
                confidence=seg.avg_logprob, thumbnail=None, speaker=speaker_at(turns or [], seg.start, seg.end),
                extra={"words": [[w.start, w.end, w.text] for w in seg.words],
                       "no_speech_prob": round(seg.no_speech_prob, 4)},
            ))
        if not transcript.segments:
            result.notes.append("no speech found")
        return result


def _load_into(future: Future[SpeakerEncoder], load: Callable[[], SpeakerEncoder]) -> None:
    try:
        future.set_result(load())
    except BaseException as exc:
        future.set_exception(exc)


def _reporting(chunks: Iterable[np.ndarray], on_progress: Callable[[float], None]) -> Iterator[np.ndarray]:
    done = 0.0
    for chunk in chunks:
        yield chunk
        done += len(chunk) / SAMPLE_RATE
        on_progress(done)
