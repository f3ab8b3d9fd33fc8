import re
from pathlib import Path

import numpy as np
import pytest

from mediaindex.config import SpeechSettings
from mediaindex.errors import ModelLoadError
from mediaindex.models.speech import SpeechModel
from mediaindex.pipeline.decode import decode_audio
from tests.conftest import media

JFK = "and so my fellow americans ask not what your country can do for you ask what you can do for your country"


def _words(text: str) -> str:
    return " ".join(re.sub(r"[^a-z' ]", " ", text.lower()).split())


@pytest.fixture(scope="session")
def whisper_base(cache_dir: Path) -> SpeechModel:
    return SpeechModel(SpeechSettings(model="whisper-base"), cache_dir)


def test_jfk_transcribed_word_for_word(whisper_base: SpeechModel) -> None:
    transcript = whisper_base.transcribe(decode_audio(media("audio/jfk.flac")))
    assert _words(transcript.text) == JFK
    assert transcript.language == "en"
    americans = next(w for s in transcript.segments for w in s.words if w.text.lower().startswith("americans"))
    assert abs(americans.start - 1.8) < 0.3
    assert all(s.avg_logprob < 0 for s in transcript.segments)


def test_digital_silence_gives_no_text(whisper_base: SpeechModel) -> None:
    transcript = whisper_base.transcribe(np.zeros(16_000 * 5, dtype=np.float32))
    assert transcript.segments == [] and transcript.language is None


def test_tiny_english_model_is_bundled(cache_dir: Path) -> None:
    model = SpeechModel(SpeechSettings(model="tiny.en"), cache_dir)
    text = _words(model.transcribe(decode_audio(media("audio/jfk.flac"))).text)
    assert "ask not what your country can do for you" in text


def test_bad_model_paths_are_refused(tmp_path: Path, cache_dir: Path) -> None:
    with pytest.raises(ModelLoadError, match="no model.bin"):
        SpeechModel(SpeechSettings(model=str(tmp_path)), cache_dir)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "model.bin").write_bytes(b"not a model")
    with pytest.raises(ModelLoadError, match="cannot load speech model"):
        SpeechModel(SpeechSettings(model=str(broken)), cache_dir)
