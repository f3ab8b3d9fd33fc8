"""Resemblyzer's voice encoder in numpy: the same window embeddings as Resemblyzer's torch model on real
voices, its checkpoint read safely, and no torch in the process."""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mediaindex.errors import ConfigError, ModelLoadError
from mediaindex.media.decode import decode_audio
from mediaindex.models.speakers import WINDOWS_PER_SECOND, SpeakerEncoder
from mediaindex.models.voice_encoder import (
    BATCH,
    WEIGHTS_SHA256,
    VoiceEncoderNet,
    raise_volume,
    weights_path,
    window_slices,
)
from tests.conftest import REPO, media

SR = 16_000
# manifesto.mp4's 88 s of reading: more windows than one BATCH
CLIPS = ["audio/jfk.flac", "audio/2412-153948-0000.flac", "audio/LJ002-0020.wav", "audio/chinese.flac",
         "video/manifesto.mp4"]


@pytest.fixture(scope="module")
def encoder() -> SpeakerEncoder:
    return SpeakerEncoder("cpu", threads=1)


def _resemblyzer_windows(wav: np.ndarray) -> np.ndarray:
    """Resemblyzer's own window embeddings (torch, librosa's mel spectrogram), as `SpeakerEncoder.windows`
    asks for them: volume normalised, WINDOWS_PER_SECOND windows, the last kept from half coverage."""
    import torch
    from resemblyzer import VoiceEncoder
    from resemblyzer.audio import normalize_volume as their_normalize
    from resemblyzer.audio import wav_to_mel_spectrogram

    model = VoiceEncoder("cpu", verbose=False)
    wav = their_normalize(wav, -30, increase_only=True).astype(np.float32)
    slices, mel_slices = model.compute_partial_slices(len(wav), WINDOWS_PER_SECOND, 0.5)
    wav = np.pad(wav, (0, max(0, slices[-1].stop - len(wav))))
    mel = wav_to_mel_spectrogram(wav)
    with torch.no_grad():
        return model(torch.from_numpy(np.array([mel[s] for s in mel_slices]))).numpy()


@pytest.mark.parametrize("clip", CLIPS)
def test_window_embeddings_are_resemblyzers(encoder: SpeakerEncoder, clip: str) -> None:
    wav = decode_audio(str(media(clip)))
    ours, centres = encoder.windows(wav)
    theirs = _resemblyzer_windows(wav)
    assert ours.shape == theirs.shape and ours.dtype == np.float32 and len(centres) == len(ours)
    assert len(ours) >= 1 and (len(ours) > BATCH) == clip.endswith(".mp4")
    cosine = np.sum(ours * theirs, axis=1) / np.linalg.norm(theirs, axis=1)
    assert cosine.min() > 1 - 1e-4, cosine.min()
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(ours, theirs, atol=1e-4)


def test_the_window_slices_and_volume_are_resemblyzers() -> None:
    from resemblyzer.audio import normalize_volume as their_normalize
    from resemblyzer.voice_encoder import VoiceEncoder

    for n in [1, 159, 160, 4000, 25_599, 25_600, 25_601, 40_000, 176_000, 1_000_003]:
        for rate, coverage in [(WINDOWS_PER_SECOND, 0.5), (1.3, 0.75), (0.625, 1.0), (10.0, 0.1)]:
            assert window_slices(n, rate, coverage) == VoiceEncoder.compute_partial_slices(n, rate, coverage)
    with pytest.raises(ValueError, match="out of range"):
        window_slices(16_000, 0.5, 0.5)  # fewer windows than would cover the audio
    jfk = decode_audio(str(media("audio/jfk.flac")))
    for wav in [jfk, jfk * 0.01, np.clip(jfk * 20, -1, 1)]:  # raised, raised a lot, already loud (kept)
        ours, theirs = raise_volume(wav, -30), their_normalize(wav, -30, increase_only=True)
        assert ours.dtype == theirs.dtype
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-7)


def _copy(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "pretrained.pt"
    path.write_bytes(data)
    return path


def test_a_different_file_is_refused_by_its_hash(tmp_path: Path) -> None:
    data = bytearray(weights_path().read_bytes())
    assert hashlib.sha256(data).hexdigest() == WEIGHTS_SHA256
    data[-100] ^= 1  # one bit of one weight
    with pytest.raises(ModelLoadError, match="are not Resemblyzer 0.1.4's pretrained.pt .*SHA-256"):
        VoiceEncoderNet.load(_copy(tmp_path, bytes(data)))
    with pytest.raises(ModelLoadError, match="cannot read the voice encoder weights"):
        VoiceEncoderNet.load(tmp_path / "missing.pt")


@pytest.mark.parametrize("keep", [0, 10, 137, 5000, 6667, 6700, 100_000, -1])
def test_a_truncated_checkpoint_is_a_clear_error(tmp_path: Path, keep: int) -> None:
    """Unhashed (as a file of another version would be read), every cut gives the same kind of error:
    inside the header, the tensors' pickle, the storage list, or the weights."""
    data = weights_path().read_bytes()
    with pytest.raises(ModelLoadError, match="the voice encoder weights cannot be read"):
        VoiceEncoderNet.load(_copy(tmp_path, data[:keep]), sha256=None)


def _legacy_file(payload: bytes) -> bytes:
    """A file in torch's legacy format whose object pickle is `payload`."""
    header = b"".join(pickle.dumps(x, protocol=2) for x in
                      [0x1950A86A20F9469CFC6C, 1001, {"protocol_version": 1001, "little_endian": True}])
    return header + payload + pickle.dumps([], protocol=2)


class _Trap:
    def __reduce__(self) -> tuple:
        return (os.system, ("echo unpickled > trapped",))


def test_a_checkpoint_that_would_run_code_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    evil = _legacy_file(pickle.dumps({"model_state": _Trap()}, protocol=2))
    with pytest.raises(ModelLoadError, match=r"refers to (posix|os)\.system.*refused, not loaded"):
        VoiceEncoderNet.load(_copy(tmp_path, evil), sha256=None)
    assert not (tmp_path / "trapped").exists()
    stream = io.BytesIO()
    pickle.Pickler(stream, protocol=2).dump({"model_state": {}})
    with pytest.raises(ModelLoadError, match=r"have no linear.weight of shape \(256, 256\) \(missing\)"):
        VoiceEncoderNet.load(_copy(tmp_path, _legacy_file(stream.getvalue())), sha256=None)
    with pytest.raises(ModelLoadError, match="wrong magic number"):
        VoiceEncoderNet.load(_copy(tmp_path, pickle.dumps(123) + b"rest"), sha256=None)


def test_the_encoder_runs_on_the_cpu_only() -> None:
    with pytest.raises(ConfigError, match="runs on the CPU, not 'cuda'"):
        SpeakerEncoder("cuda")


def test_diarizing_imports_neither_torch_nor_resemblyzer() -> None:
    script = (
        "import sys\n"
        "from mediaindex.media.decode import decode_audio\n"
        "from mediaindex.models.speakers import SpeakerEncoder, SpeakerTrack\n"
        "from mediaindex.models.speech import speech_regions\n"
        f"wav = decode_audio({str(media('audio/jfk.flac'))!r})\n"
        "track = SpeakerTrack(SpeakerEncoder('cpu', threads=1))\n"
        "track.add(wav, 0.0, speech_regions(wav))\n"
        "print(len(track.vectors), [t.speaker for t in track.turns()])\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'resemblyzer', 'librosa')))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=REPO,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    windows, modules = done.stdout.strip().splitlines()
    assert windows == "10 ['S1', 'S1', 'S1', 'S1', 'S1']"  # Kennedy alone: one speaker, a turn per stretch of speech
    assert modules == "[]"
