"""Speech is indexed as sentences: a search hit starts at the words it matched, not a paragraph before."""

from __future__ import annotations

from pathlib import Path

import pytest

from mediaindex.index.catalog import VideoRecord
from mediaindex.index.index import MediaIndex
from mediaindex.index.search import search
from mediaindex.media.decode import AudioStream
from mediaindex.stages.speech import SpeechStage
from tests.conftest import make_settings, media


@pytest.fixture(scope="module")
def spoken_index(whisper_base, embedder, tmp_path_factory: pytest.TempPathFactory, cache_dir: Path):
    idx = MediaIndex(make_settings(tmp_path_factory.mktemp("sentences"), cache_dir), embedder.dim, embedder.name)
    words = {}
    for rel in ("video/auto-editor_example.mp4", "audio/jfk.flac"):
        path = media(rel)
        transcript = whisper_base.transcribe_stream(AudioStream(path, chunk_seconds=120))
        segments = SpeechStage._result(transcript, str(path)).segments
        vid = path.stem.replace("-", "")[:16]
        for seg in segments:
            seg.video_id = vid
        record = VideoRecord(vid, str(path), vid, 1, 1, transcript.duration, transcript.language, len(segments), {}, 0.0)
        idx.replace_video(record, segments, embedder.embed_passages([s.text for s in segments]))
        words[rel] = [w for s in transcript.segments for w in s.words]
    yield idx, words
    idx.close()


def test_banana_lands_at_the_spoken_word(spoken_index, embedder) -> None:
    index, words = spoken_index
    hit = search(index, embedder, "banana", limit=3)[0]
    assert Path(hit.source).name == "auto-editor_example.mp4"
    spoken = [w.start for w in words["video/auto-editor_example.mp4"] if "banana" in w.text.lower()]
    assert spoken and min(abs(hit.start - t) for t in spoken) < 1.0, (hit, spoken)
    assert hit.end - hit.start < 12


def test_every_speech_segment_keeps_its_words_and_starts_at_the_first(spoken_index) -> None:
    index, _ = spoken_index
    stored = [p for vid in ("autoeditorexampl", "jfk") for p in index.store.segments_of(vid, "speech")]
    assert stored
    for seg in stored:
        words = seg["extra"]["words"]
        assert words and words[0][0] == seg["start"] and words[-1][1] == seg["end"]
        assert seg["end"] - seg["start"] <= 12.0
    jfk = [s for s in stored if s["video_id"] == "jfk"]
    assert len(jfk) == 1 and jfk[0]["language"] == "en"  # one sentence, word for word
