"""Speech is indexed as sentences: a search hit starts at the words it matched, not a paragraph before."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mediaindex.index.catalog import VideoRecord
from mediaindex.index.filters import SearchFilters, conditions
from mediaindex.index.index import MediaIndex
from mediaindex.media.decode import decode_audio
from mediaindex.models.speakers import SpeakerEncoder, SpeakerTrack
from mediaindex.pipeline.stages.speech import SpeechStage
from mediaindex.search.searcher import search
from tests.conftest import make_settings, media, transcript_of


@pytest.fixture(scope="module")
def spoken_index(whisper_base, embedder, tmp_path_factory: pytest.TempPathFactory, cache_dir: Path):
    idx = MediaIndex(make_settings(tmp_path_factory.mktemp("sentences"), cache_dir), embedder.dim, embedder.name)
    words = {}
    for rel in ("video/auto-editor_example.mp4", "audio/jfk.flac", "audio/multilingual.mp3"):
        path = media(rel)
        transcript = transcript_of(rel, whisper_base)
        segments = SpeechStage._result(transcript, str(path)).segments
        vid = path.stem.replace("-", "")[:16]
        for seg in segments:
            seg.video_id = vid
        record = VideoRecord(vid, str(path), vid, 1, 1, transcript.duration, transcript.language, len(segments), {}, 0.0)
        idx.replace_video(record, segments, embedder.embed_passages([s.text for s in segments]))
        words[rel] = [w for s in transcript.segments for w in s.words]
    # Two people in turn (Kennedy, then a LibriSpeech reader), diarized while transcribed.
    jfk, libri = decode_audio(media("audio/jfk.flac")), decode_audio(media("audio/2412-153948-0000.flac"))
    track = SpeakerTrack(SpeakerEncoder("cpu", threads=1))
    transcript = whisper_base.transcribe_stream([np.concatenate([jfk, np.zeros(8000, np.float32), libri])],
                                                on_part=track.add)
    segments = SpeechStage._result(transcript, "/two/speakers.wav", track.turns()).segments
    for seg in segments:
        seg.video_id = "twospeakers"
    record = VideoRecord("twospeakers", "/two/speakers.wav", "twospeakers", 1, 1, transcript.duration, "en",
                         len(segments), {}, 0.0)
    idx.replace_video(record, segments, embedder.embed_passages([s.text for s in segments]))
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


def test_search_filters_by_speaker(spoken_index, embedder) -> None:
    index, _ = spoken_index
    stored = index.store.segments_of("twospeakers", "speech")
    assert {s["speaker"] for s in stored} == {"S1", "S2"}
    assert all(s["speaker"] == "S1" for s in stored if s["end"] < 10.5)  # Kennedy speaks first
    mine = SearchFilters(video_id="twospeakers", speaker="S1")
    hit = search(index, embedder, "ask not what your country can do for you", limit=3, filters=mine)[0]
    assert hit.speaker == "S1" and "country" in hit.text
    other = search(index, embedder, "the narrative would be tedious", limit=5,
                   filters=SearchFilters(video_id="twospeakers", speaker="S2"))
    assert other and all(h.speaker == "S2" for h in other) and "tedious" in other[0].text.lower()
    nobody = search(index, embedder, "country", limit=5, filters=SearchFilters(speaker="S9"))
    assert nobody == []
    assert ("speaker", "equals", "S2") in [(c.key, c.kind, c.value) for c in conditions(SearchFilters(speaker="S2"))]
    with pytest.raises(ValueError, match="speaker must be a non-empty string"):
        SearchFilters(speaker=" ")


def test_each_half_of_a_bilingual_file_is_found_in_its_language(spoken_index, embedder) -> None:
    index, _ = spoken_index
    german = search(index, embedder, "das Recht, die Software zu verwenden und zu veröffentlichen", limit=3)[0]
    assert german.video_id == "multilingual" and german.language == "de" and german.start >= 29.5
    assert german.end - german.start <= 12
    english = search(index, embedder, "permission is hereby granted, free of charge", limit=3)[0]
    assert english.video_id == "multilingual" and english.language == "en" and english.end <= 29.5
    only_german = search(index, embedder, "software", limit=10, filters=SearchFilters(language="de"))
    assert only_german and all(h.language == "de" and h.start >= 29.5 for h in only_german)
