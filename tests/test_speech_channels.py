"""Stereo files whose channels carry different speech are transcribed channel by channel."""

import re
from dataclasses import replace

import pytest

from mediaindex.config import Settings
from mediaindex.media.decode import AudioStream, channel_look
from mediaindex.media.probe import probe
from mediaindex.pipeline.stages.speech import SpeechResult, SpeechStage, _join_channels
from tests.conftest import media

LEFT = "he began a confused complaint against the wizard who had vanished behind the curtain on the left"
RIGHT = "the horizon seems extremely distant"


def _words(text: str) -> str:
    return " ".join(re.sub(r"[^a-z' ]", " ", text.lower()).split())


@pytest.fixture(scope="module")
def stage(session_settings: Settings) -> SpeechStage:
    return SpeechStage(session_settings)


def test_channel_look_tells_a_speaker_per_channel_from_one_sound_in_both() -> None:
    two = channel_look(media("audio/stereo_diarization.wav"))
    assert two.separate and abs(two.correlation) < 0.1 and two.one_sided > 0.5
    for same in ("audio/jfk.flac", "video/manifesto.mp4"):  # stereo, one voice in both channels
        look = channel_look(media(same))
        assert not look.separate and look.correlation > 0.95, (same, look)
    for music in ("video/big_buck_bunny_0_30.webm", "video/chaplin.mp4"):  # wide stereo, no speaker per side
        look = channel_look(media(music))
        assert not look.separate and look.one_sided < 0.1, (music, look)
    assert not channel_look(media("video/cockatoo.mp4")).separate  # digital silence


def test_stereo_stream_gives_both_channels() -> None:
    chunks = list(AudioStream(media("audio/stereo_diarization.wav"), chunk_seconds=2.0, channels=2))
    assert all(c.ndim == 2 and c.shape[1] == 2 for c in chunks)
    assert sum(len(c) for c in chunks) == 5 * 16_000
    with pytest.raises(ValueError, match="mono or stereo"):
        AudioStream(media("audio/jfk.flac"), channels=6)


@pytest.mark.slow  # Whisper base, loaded by the stage
def test_both_speakers_of_a_stereo_file_are_transcribed(stage: SpeechStage) -> None:
    # Mixed to mono, the right channel's sentence (said over the left one's) was never transcribed.
    path = str(media("audio/stereo_diarization.wav"))
    result = stage.transcribe_file(path, probe(path))
    said = {s.extra["channel"]: _words(s.text) for s in result.segments}
    assert said == {"left": LEFT, "right": RIGHT}
    right = next(s for s in result.segments if s.extra["channel"] == "right")
    assert right.start < 0.6 and 1.8 < right.end < 2.8  # the right channel speaks from 0.25 s to about 2.5 s
    assert [s.start for s in result.segments] == sorted(s.start for s in result.segments)
    assert result.language == "en" and any("each was transcribed on its own" in n for n in result.notes)
    if stage.speakers is not None:
        assert {s.extra["channel"]: s.speaker for s in result.segments} == {"left": "S1", "right": "S2"}


@pytest.mark.slow  # Whisper base, loaded by the stage
def test_speech_heard_by_both_channels_is_kept_once(stage: SpeechStage) -> None:
    path = str(media("audio/jfk.flac"))  # stereo, the same voice in both channels: mixed, transcribed once
    mixed = stage.transcribe_file(path, probe(path))
    assert len(mixed.segments) == 1 and "channel" not in mixed.segments[0].extra
    heard = mixed.segments[0]
    # As if each channel's microphone had picked it up, one more clearly than the other.
    quieter = replace(heard, start=heard.start + 0.1, confidence=(heard.confidence or 0.0) - 0.3)
    joined = _join_channels([SpeechResult(segments=[heard], language="en"),
                             SpeechResult(segments=[quieter], language="en")], speakers=True)
    assert joined.segments == [replace(heard, speaker="S1")]


@pytest.mark.slow  # Whisper base, loaded by the stage
def test_stages_of_one_process_share_whisper_and_the_voice_encoder_and_transcribe_side_by_side(
        stage: SpeechStage, session_settings: Settings) -> None:
    """A second stage (another small job of `ingest --watch`) loads nothing; two files transcribed at once on two
    threads, one per stage, give what each gives alone."""
    import threading

    other = SpeechStage(session_settings)
    assert other.model.model is stage.model.model and other.model is not stage.model
    assert other.speakers is stage.speakers
    paths = [str(media("audio/stereo_diarization.wav")), str(media("audio/jfk.flac"))]
    alone = [s.transcribe_file(p, probe(p)).segments for s, p in zip((stage, other), paths, strict=True)]
    together: list[list] = [[], []]

    def run(n: int, s: SpeechStage) -> None:
        together[n] = s.transcribe_file(paths[n], probe(paths[n])).segments

    threads = [threading.Thread(target=run, args=(n, s)) for n, s in enumerate((stage, other))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert together == alone and [len(a) for a in alone] == [2, 1]
