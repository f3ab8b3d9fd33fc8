"""Sound-alike spellings of names the archive holds only as misheard (what the page marks), and nothing else
respelt."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from mediaindex.index.catalog import VideoRecord
from mediaindex.index.index import MediaIndex
from mediaindex.index.sparse import SparseEncoder
from mediaindex.index.vocabulary import names_in, sound_alikes, words_of
from mediaindex.pipeline.stages.speech import SpeechStage
from mediaindex.search.features import ocr_text_match
from tests.conftest import make_settings, media, transcript_of
from tests.corpus import manifesto


@pytest.fixture(scope="module")
def heard(whisper_base) -> dict[str, list]:
    """What Whisper base writes for two real files with names it does not know."""
    out = {}
    for rel in ("audio/hotwords.mp3", "audio/jfk.flac"):
        path = media(rel)
        out[rel] = SpeechStage._result(transcript_of(rel, whisper_base), str(path)).segments
    return out


def _add(idx: MediaIndex, embedder, vid: str, source: str, segments: list) -> None:
    for seg in segments:
        seg.video_id = vid
    record = VideoRecord(vid, source, vid, 1, 1, None, "en", len(segments), {}, 0.0)
    idx.replace_video(record, segments, embedder.embed_passages([s.text for s in segments]))


@pytest.fixture(scope="module")
def index(heard, embedder, tmp_path_factory: pytest.TempPathFactory, cache_dir: Path):
    idx = MediaIndex(make_settings(tmp_path_factory.mktemp("alikes"), cache_dir), embedder.dim, embedder.name)
    _add(idx, embedder, "hotwords", str(media("audio/hotwords.mp3")), heard["audio/hotwords.mp3"])
    _add(idx, embedder, "jfk", str(media("audio/jfk.flac")), heard["audio/jfk.flac"])
    captions = manifesto()  # the audiobook's own captions
    _add(idx, embedder, captions[0].video_id, captions[0].source, captions)
    yield idx
    idx.close()


def test_names_only_are_respelt_and_only_when_the_archive_lacks_them(index: MediaIndex) -> None:
    vocabulary = index.vocabulary()
    assert {"guizot", "europe"} <= vocabulary
    assert names_in("Weather report") == [] and names_in("weather") == []
    assert names_in("what did Guizot and ComfyUI say in 2024") == ["Guizot", "ComfyUI"]
    assert sound_alikes("Guizot", vocabulary) == {}  # the captions spell it: nothing to respell
    assert sound_alikes("Guizhou", vocabulary)["Guizhou"][0][0] == "guizot"
    assert sound_alikes("Guizhou", frozenset({"quizzes", "whether"})) == {}  # another first letter


def test_the_name_in_a_web_address_is_respelt_however_it_is_cased() -> None:
    # Whisper base heard the narrator's "www.marxists.org" as "www .muxists .org".
    assert names_in("www.marxists.org") == ["marxists"] and names_in("https://github.com/x") == ["github"]
    assert names_in("a.org") == [] and names_in("marxists org") == []  # too short to respell; no address
    heard = frozenset({"muxists", "manifesto", "audiobook"})
    assert sound_alikes("marxists.org", heard) == {"marxists": [("muxists", 0.8)]}


def test_the_vocabulary_follows_the_catalog_and_is_rebuilt_for_older_indexes(index: MediaIndex, embedder,
                                                                             heard) -> None:
    before = index.vocabulary()
    said = words_of(s.text for s in heard["audio/jfk.flac"])
    assert said and said <= before
    # An index written before words were recorded: its files get them from their stored segments.
    with sqlite3.connect(index.dir / "catalog.db") as db:
        db.execute("DELETE FROM words")
        db.execute("DELETE FROM worded")
    assert index.vocabulary() == before
    index.remove_video("jfk")
    assert not (said - words_of(s.text for s in heard["audio/hotwords.mp3"] + manifesto())) & index.vocabulary()
    _add(index, embedder, "jfk", str(media("audio/jfk.flac")), heard["audio/jfk.flac"])
    assert index.vocabulary() == before


def test_short_chance_runs_are_no_on_screen_text_match() -> None:
    assert ocr_text_match("mozart", "Audible / Socialism / Manifesto of the / Communist") == 0.0
    assert ocr_text_match("manifesto", "Audible / Socialism / Manifesto of the / Communist") == 1.0


def test_a_query_word_is_not_split_at_its_capitals_but_a_document_word_is() -> None:
    enc = SparseEncoder()
    assert set(enc.query("iPhone").indices) == set(enc.query("iphone").indices)
    assert set(enc.query("iPhone").indices) < set(enc.document("iPhone").indices)
    assert set(enc.query("party").indices) <= set(enc.document("CommunistParty").indices)
