"""The speech stage: stream a file's audio in chunks and transcribe it into speech segments.

In the pipeline it runs beside the video decode and the vision stage, from the file's path:
transcribing never waits for the pictures (its `SpeechResult` joins the item before it is embedded or
summarised). Given a decoded `MediaItem` instead, it adds the speech segments to it directly.

A stereo file whose two channels carry different sound (a speaker per channel, as in a call or a
two-microphone interview) is transcribed channel by channel: mixed to mono, two people talking at once
lie over each other and the model hears one of them.

A file with several audio tracks (dubbed languages, a commentary) has each transcribed, up to
`speech.audio_tracks`: the default track's sentences are the file's speech; another track's sentences are kept
beside them, named by their track, unless the default track said them already.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from mediaindex.config import Settings
from mediaindex.errors import MediaError
from mediaindex.media.decode import AudioStream, channel_look
from mediaindex.media.probe import MediaInfo, probe, track_label, track_order
from mediaindex.pipeline.stages.contract import StageContract, StageName
from mediaindex.pipeline.stages.item import MediaItem
from mediaindex.segments import TRACK_FIELD, Segment

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
    tracks: int = 0  # how many of the file's audio tracks were transcribed (0: not told)

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
        if self.tracks:  # a track asked for later is told apart from one left out by the setting of this run
            item.info = replace(item.info, transcribed_tracks=self.tracks)
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
            from mediaindex.models.speakers import shared_speaker_encoder

            speakers = Future()
            threading.Thread(target=_load_into, args=(speakers, lambda: shared_speaker_encoder(
                settings.speech.cpu_threads or 1)), daemon=True, name="load-speakers").start()
        try:
            self.model = SpeechModel(settings.speech, settings.cache_dir)
        finally:
            self.speakers = speakers.result() if speakers is not None else None
        self._share: float | None = None

    def progress(self) -> float | None:
        """The share of the file in hand transcribed so far (None between files): read from another thread
        while `process` runs, for the ingest's progress display."""
        return self._share

    def _heard(self, duration: float) -> Callable[[float], None]:
        self._share = 0.0

        def heard(seconds: float) -> None:
            self._share = min(1.0, seconds / duration) if duration > 0 else None
        return heard

    def process(self, item: MediaItem | str) -> MediaItem | SpeechResult:
        """A file path gives its `SpeechResult`; a decoded item comes back with its speech segments
        (from `item.audio` when a caller decoded it already, else streamed from the file)."""
        try:
            return self._process(item)
        finally:
            self._share = None

    def _process(self, item: MediaItem | str) -> MediaItem | SpeechResult:
        if isinstance(item, str):
            try:
                info = probe(item)
            except MediaError as exc:  # the decode beside this fails the file with its own reason
                return SpeechResult(failure=exc.reason)
            return self.transcribe_file(item, info, self._heard(info.duration))
        if item.audio is not None:
            speakers = self._speaker_track()
            transcript = self.model.transcribe_stream([item.audio], on_part=speakers.add if speakers else None,
                                                      narrowband=self._narrowband(item.info.sample_rate))
            result = self._result(transcript, item.source, self._turns(speakers))
            item.audio = None
        else:
            result = self.transcribe_file(item.source, item.info, self._heard(item.info.duration))
        return result.join(item)

    def transcribe_file(self, path: str, info: MediaInfo, on_progress: Callable[[float], None] | None = None,
                        only: int | None = None) -> SpeechResult:
        """The file's transcript: each of its audio tracks up to `speech.audio_tracks`, the default one first (or
        the one audio stream `only`, counted from 0); `on_progress` hears the seconds of audio transcribed so far,
        part by part."""
        if not info.has_audio:
            return SpeechResult()
        if only is not None:
            return self._transcribe_track(path, info, only, on_progress, diarize=True)
        order = track_order(info.audio_tracks) or [0]  # a record probed before tracks were listed: the first
        chosen = order[: self.settings.speech.audio_tracks]
        results = []
        for n, track in enumerate(chosen):
            # Together the tracks' passes transcribe the file's length once.
            done = functools.partial(_part, on_progress, n * info.duration, len(chosen)) if on_progress else None
            results.append(self._transcribe_track(path, info, track, done, diarize=True))
        return _join_tracks(results, chosen, info)

    def _transcribe_track(self, path: str, info: MediaInfo, track: int,
                          on_progress: Callable[[float], None] | None, diarize: bool) -> SpeechResult:
        """One audio stream's transcript (`track`, counted among the audio streams); with `diarize`, its
        speakers."""
        sound = info.audio_tracks[track] if track < len(info.audio_tracks) else {}
        channels, rate = sound.get("channels", info.channels), sound.get("sample_rate", info.sample_rate)
        if (channels or 1) >= 2:
            try:
                separate = channel_look(path, timeout=self.settings.ingest.file_timeout, track=track).separate
            except MediaError as exc:
                return SpeechResult(failure=exc.reason)
            if separate:
                return self._transcribe_channels(path, info, track, rate, on_progress, diarize)
        stream = AudioStream(path, chunk_seconds=self.settings.speech.chunk_seconds,
                             timeout=self.settings.ingest.file_timeout, track=track)
        speakers = self._speaker_track() if diarize else None
        try:
            transcript = self.model.transcribe_stream(stream, on_part=speakers.add if speakers else None,
                                                      narrowband=self._narrowband(rate), on_done=on_progress)
        except MediaError as exc:
            return SpeechResult(failure=exc.reason)
        result = self._result(transcript, path, self._turns(speakers))
        length = sound.get("duration") or info.duration  # a track may rightly be shorter than the file
        if stream.warning:
            result.notes.append(stream.warning)
        elif length - stream.decoded_seconds > 1.0:
            result.notes.append(f"audio ends early at {stream.decoded_seconds:.1f} s of {length:.1f} s")
        return result

    def _transcribe_channels(self, path: str, info: MediaInfo, track: int, rate: int | None,
                             on_progress: Callable[[float], None] | None, diarize: bool) -> SpeechResult:
        """Each channel of a stereo track transcribed on its own; a channel is one speaker."""
        results: list[SpeechResult] = []
        for channel, name in enumerate(CHANNELS):
            stream = AudioStream(path, chunk_seconds=self.settings.speech.chunk_seconds,
                                 timeout=self.settings.ingest.file_timeout, channels=2, track=track)
            chunks: Iterable[np.ndarray] = (chunk[:, channel].copy() for chunk in stream)
            # Both passes together transcribe the file's length once.
            done = functools.partial(_part, on_progress, channel * info.duration, 2) if on_progress else None
            try:
                transcript = self.model.transcribe_stream(chunks, narrowband=self._narrowband(rate), on_done=done)
            except MediaError as exc:
                return SpeechResult(failure=exc.reason)
            result = self._result(transcript, path)
            for seg in result.segments:
                seg.extra["channel"] = name
            if stream.warning:
                result.notes.append(f"{name} channel: {stream.warning}")
            results.append(result)
        return _join_channels(results, speakers=diarize and self.speakers is not None)

    def _narrowband(self, sample_rate: int | None) -> bool:
        """Telephone or radio band audio, decoded with its own VAD threshold (`SpeechSettings.narrowband_rate`)."""
        from mediaindex.models.speech import is_narrowband

        return is_narrowband(sample_rate, self.settings.speech)

    def _speaker_track(self) -> SpeakerTrack | None:
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
            result.notes.append(NO_SPEECH)
        return result


def _load_into(future: Future[SpeakerEncoder], load: Callable[[], SpeakerEncoder]) -> None:
    try:
        future.set_result(load())
    except BaseException as exc:
        future.set_exception(exc)


CHANNELS = ("left", "right")
NO_SPEECH = "no speech found"


def _join_channels(results: list[SpeechResult], speakers: bool) -> SpeechResult:
    """The channels' transcripts as one, in time order. A sentence one channel also picked up from the
    other (a microphone hearing the other speaker) is kept once, from the channel that heard it better;
    with diarization on, each channel is its own speaker (S1 speaks first)."""
    left, right = results
    heard_twice = [(x, y) for x in left.segments for y in right.segments if _same_speech(x, y)]
    worse = {id(x if (x.confidence or 0.0) < (y.confidence or 0.0) else y) for x, y in heard_twice}
    for result in results:
        result.segments = [s for s in result.segments if id(s) not in worse]
    joined = SpeechResult(notes=["the channels carry different speech: each was transcribed on its own"])
    spoken = [r for r in results if r.segments]
    order = sorted(spoken, key=lambda r: r.segments[0].start)
    for n, result in enumerate(order, start=1):
        joined.segments.extend(replace(s, speaker=f"S{n}") if speakers else s for s in result.segments)
        joined.notes.extend(note for note in result.notes if note != NO_SPEECH)
    joined.segments.sort(key=lambda s: (s.start, s.end))
    if spoken:
        joined.language = max(spoken, key=lambda r: sum(s.end - s.start for s in r.segments)).language
    else:
        joined.notes.append(NO_SPEECH)
    return joined


def _join_tracks(results: list[SpeechResult], tracks: list[int], info: MediaInfo) -> SpeechResult:
    """The default track's transcript, with each other track's sentences beside it named by their track (`TRACK_
    FIELD`), but for those the default track said too (a description or commentary mixed over the original
    sound); another track's speakers are numbered after those already named (its voices are other people: a
    dub's actors, a commentary's speakers). A default track that cannot be read fails the transcript as a file's
    only track does."""
    main = results[0]
    if main.failure is not None or len(results) == 1:
        _say_tracks(main, len(tracks), info.audio_streams)
        return replace(main, tracks=len(tracks))
    joined = SpeechResult(list(main.segments), main.language, [n for n in main.notes if n != NO_SPEECH],
                          tracks=len(tracks))
    for track, result in zip(tracks[1:], results[1:], strict=True):
        label = track_label(info.audio_tracks, track)
        if result.failure is not None:
            joined.notes.append(f"{label} not transcribed: {result.failure}")
            continue
        said = joined.segments
        beside = [s for s in result.segments if not any(_same_speech(s, k) for k in said)]
        for seg in beside:
            seg.extra[TRACK_FIELD] = label
        _number_speakers_after(beside, said)
        joined.segments = said + beside
        if not main.segments:  # nothing heard on the default track: the file's language is the first one heard
            joined.language = joined.language or result.language
        joined.notes.extend(f"{label}: {note}" for note in result.notes if note != NO_SPEECH)
    joined.segments.sort(key=lambda s: (s.start, s.end))
    if not joined.segments:
        joined.notes.append(NO_SPEECH)
    _say_tracks(joined, len(tracks), info.audio_streams)
    return joined


def _number_speakers_after(segments: list[Segment], named: list[Segment]) -> None:
    """`segments`' speakers (S1, S2, … of their own track) renamed, in order of first appearance, to follow the
    highest number among `named`."""
    taken = [int(s.speaker[1:]) for s in named if s.speaker and s.speaker[1:].isdigit()]
    start, names = max(taken, default=0), dict[str, str]()
    for seg in segments:
        if seg.speaker:
            seg.speaker = names.setdefault(seg.speaker, f"S{start + len(names) + 1}")


def _say_tracks(result: SpeechResult, transcribed: int, streams: int) -> None:
    if streams > transcribed:
        result.notes.append(f"{streams} audio tracks: {transcribed} transcribed (speech.audio_tracks)")
    elif streams > 1:
        result.notes.append(f"{streams} audio tracks: each transcribed")


def _same_speech(a: Segment, b: Segment) -> bool:
    """Two sentences at about the same time with nearly the same words (one speech heard twice)."""
    from difflib import SequenceMatcher

    overlap = min(a.end, b.end) - max(a.start, b.start)
    if overlap <= 0.5 * min(a.end - a.start, b.end - b.start):
        return False
    return SequenceMatcher(None, a.text.lower().split(), b.text.lower().split()).ratio() >= 0.8


def _part(on_progress: Callable[[float], None], before: float, parts: int, done: float) -> None:
    on_progress((before + done) / parts)


STAGE = StageContract(
    StageName.SPEECH, SpeechStage, resources=lambda s: s.ray.stages.speech, on_cpu=lambda s: s.speech.device == "cpu",
    threads=lambda s: s.speech.cpu_threads,
    with_threads=lambda s, n: s.model_copy(update={"speech": s.speech.model_copy(update={"cpu_threads": n})}))
