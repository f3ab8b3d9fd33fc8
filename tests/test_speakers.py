"""Diarization over real voices: Resemblyzer embeddings of the shared clips, clustered into speakers."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from mediaindex.errors import ConfigError
from mediaindex.media.decode import decode_audio
from mediaindex.media.ffmpeg_bin import ffmpeg_exe
from mediaindex.models.speakers import (
    MAX_CLUSTERED,
    SpeakerEncoder,
    SpeakerTrack,
    agglomerate,
    check_speakers,
    cluster,
    mel_spectrogram,
    speaker_at,
)
from mediaindex.models.speech import speech_regions
from tests.conftest import media

SR = 16_000


@pytest.fixture(scope="module")
def encoder() -> SpeakerEncoder:
    return SpeakerEncoder("cpu", threads=1)


def _channel(name: str) -> np.ndarray:
    raw = subprocess.run([ffmpeg_exe(), "-v", "error", "-i", str(media("audio/stereo_diarization.wav")), "-af",
                          f"pan=mono|c0={name}", "-ar", str(SR), "-f", "f32le", "-"], capture_output=True, check=True)
    return np.frombuffer(raw.stdout, dtype=np.float32).copy()


def _turns(encoder: SpeakerEncoder, audio: np.ndarray, **kw):
    track = SpeakerTrack(encoder)
    track.add(audio, 0.0, speech_regions(audio))
    return track, track.turns(**kw)


def test_two_voices_in_turn_get_two_labels_and_one_voice_one(encoder: SpeakerEncoder) -> None:
    jfk, libri = decode_audio(media("audio/jfk.flac")), decode_audio(media("audio/2412-153948-0000.flac"))
    pause = np.zeros(SR // 2, np.float32)
    mix = np.concatenate([jfk, pause, libri, pause, jfk])
    _, turns = _turns(encoder, mix)
    assert {t.speaker for t in turns} == {"S1", "S2"}
    first, second = len(jfk) / SR, (len(jfk) + len(pause) + len(libri)) / SR
    assert speaker_at(turns, 1.0, first - 1.0) == "S1"  # who speaks first is S1
    assert speaker_at(turns, first + 1.5, second - 1.0) == "S2"
    assert speaker_at(turns, second + 1.5, second + 9.0) == "S1"  # the same voice again: the same label
    changes = [t.start for t, before in zip(turns[1:], turns, strict=False) if t.speaker != before.speaker]
    assert min(abs(c - (first + 0.5)) for c in changes) < 1.0  # the turn is found where it happens
    regions = [(a / SR, b / SR) for a, b in speech_regions(mix)]
    spoken = [t for t in turns if any(a - 0.01 <= t.start and t.end <= b + 0.01 for a, b in regions)]
    assert spoken == turns  # turns follow the speech: none spans a pause
    _, alone = _turns(encoder, jfk)
    assert {t.speaker for t in alone} == {"S1"}


def test_the_stereo_channels_are_two_speakers(encoder: SpeakerEncoder) -> None:
    left, right = _channel("FL"), _channel("FR")
    _, turns = _turns(encoder, np.concatenate([left, np.zeros(SR // 2, np.float32), right]))
    assert len({t.speaker for t in turns}) == 2
    _, forced = _turns(encoder, np.concatenate([left, right]), speakers=1)
    assert {t.speaker for t in forced} == {"S1"}


def test_no_speech_and_very_short_speech(encoder: SpeakerEncoder) -> None:
    silent = decode_audio(media("video/cockatoo.mp4"))
    assert _turns(encoder, silent)[1] == []
    short = decode_audio(media("audio/chinese.flac"))  # one second of speech
    _, turns = _turns(encoder, short)
    assert {t.speaker for t in turns} <= {"S1"}
    assert speaker_at([], 0.0, 1.0) is None


@pytest.mark.parametrize("bad", [0, -2, 21, 1.5, True, "2"])
def test_a_bad_number_of_speakers_is_refused(bad) -> None:
    with pytest.raises(ConfigError, match="number of speakers must be a whole number from 1 to 20"):
        check_speakers(bad)
    assert check_speakers(None) is None and check_speakers(3) == 3


def test_a_long_recording_is_clustered_in_bounded_memory(encoder: SpeakerEncoder) -> None:
    """Windows are kept as embeddings only (part by part); past MAX_CLUSTERED windows a spread sample is
    clustered and every window joins the nearest speaker."""
    jfk, libri = decode_audio(media("audio/jfk.flac")), decode_audio(media("audio/2412-153948-0000.flac"))
    track = SpeakerTrack(encoder)
    for i, clip in enumerate([jfk, libri, jfk]):  # three parts, as the stream hands them over
        track.add(clip, i * 20.0, speech_regions(clip))
    x = np.stack(track.vectors)
    assert x.shape[1] == 256 and len(track.centres) == len(x)
    part = np.searchsorted([20.0, 40.0], track.centres, side="right")  # which clip each window came from
    repeat = (3 * MAX_CLUSTERED) // len(x) + 1
    many = np.repeat(x, repeat, axis=0) + np.random.default_rng(0).normal(0, 0.01, (len(x) * repeat, x.shape[1]))
    many = (many / np.linalg.norm(many, axis=1, keepdims=True)).astype(np.float32)
    labels = cluster(many, None, 0.25)[::repeat]
    assert len(many) > MAX_CLUSTERED and len(labels) == len(x)

    def voice(i: int) -> int:
        return int(np.bincount(labels[part == i]).argmax())

    assert voice(0) == voice(2) != voice(1)  # Kennedy twice, the LibriSpeech reader between


@pytest.mark.parametrize("seconds", [0.06, 0.4, 1.6, 11.0])
def test_the_mel_spectrogram_is_resemblyzers_own(seconds: float) -> None:
    """Computed here without librosa (whose feature module takes seconds to import), with the values of
    Resemblyzer's `wav_to_mel_spectrogram` (librosa's melspectrogram) on real speech, for any length."""
    from resemblyzer.audio import wav_to_mel_spectrogram

    wav = decode_audio(str(media("audio/jfk.flac")))[: int(seconds * SR)]
    ours, theirs = mel_spectrogram(wav), wav_to_mel_spectrogram(wav)
    assert ours.shape == theirs.shape and ours.dtype == np.float32
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-6 * float(np.abs(theirs).max()))


def test_the_clustering_is_scikit_learns_average_linkage(encoder: SpeakerEncoder) -> None:
    """SciPy's hierarchy gives the same clusters as scikit-learn's AgglomerativeClustering (cosine, average
    linkage), by distance and by count, on the window embeddings of two real voices."""
    from sklearn.cluster import AgglomerativeClustering

    left, right = _channel("c0"), _channel("c1")
    vectors = np.concatenate([encoder.windows(left)[0], encoder.windows(right)[0]])
    assert len(vectors) > 8
    for k, distance in [(None, 0.4), (None, 0.2), (2, 0.4), (3, 0.4)]:
        ours = agglomerate(vectors, k, distance)
        theirs = AgglomerativeClustering(n_clusters=k, metric="cosine", linkage="average",
                                         distance_threshold=None if k else distance).fit_predict(vectors)
        pairs = set(zip(ours.tolist(), theirs.tolist(), strict=True))
        assert len(pairs) == len(set(ours.tolist())) == len(set(theirs.tolist())), (k, distance, pairs)
