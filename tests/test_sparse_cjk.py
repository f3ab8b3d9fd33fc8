"""Exact words in Chinese and Japanese: a run of their characters is indexed and looked up by its pairs of
characters, so that a word inside a sentence (written without spaces) is found by the words alone; Korean, written
with spaces, is not paired: its words index whole and by their stems, without particles and endings. Over real
sentences: ../shared/media's Chinese clip's reference and media-val's Korean recording's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mediaindex.index.catalog import VideoRecord
from mediaindex.index.index import MediaIndex
from mediaindex.index.sparse import SparseEncoder, korean_stem
from mediaindex.search.searcher import judged
from mediaindex.segments import Segment
from tests.conftest import make_settings, media

CHINESE = "砸自己的脚"  # chinese.flac's reference (../shared/media/MANIFEST.md): "to drop a rock on one's own foot"


def _korean_sentences() -> list[str]:
    path = media("MANIFEST.md").parent.parent / "media-val" / "groundtruth" / "azure_customspeech_ko-KR_training_trans.txt"
    text = " ".join(line.split("\t", 1)[1] for line in path.read_text(encoding="utf-8-sig").splitlines() if "\t" in line)
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()]


@pytest.fixture(scope="module")
def index(embedder, tmp_path_factory: pytest.TempPathFactory, cache_dir: Path):
    texts = [*_korean_sentences(), CHINESE, "Workers of the world, unite!"]
    segments = [Segment("v1", "/media/talk.wav", 5.0 * i, 5.0 * i + 4, "speech", t) for i, t in enumerate(texts)]
    idx = MediaIndex(make_settings(tmp_path_factory.mktemp("cjk"), cache_dir), embedder.dim, embedder.name)
    idx.replace_video(VideoRecord("v1", "/media/talk.wav", "v1", 1, 1, None, "ko", len(segments), {}, 0.0),
                      segments, embedder.embed_passages(texts))
    yield idx
    idx.close()


def test_a_chinese_run_indexes_its_pairs_and_a_query_looks_them_up() -> None:
    enc = SparseEncoder()
    doc = set(enc.document(CHINESE).indices)
    assert set(enc.query("自己的脚").indices) & doc
    assert set(enc.query("的脚").indices) <= doc  # a two-character word is its own pair
    # What the relevance model counts as the query's words: each run whole, as it was fitted.
    assert set(enc.query("自己的脚", pairs=False).indices).isdisjoint(doc)
    assert set(enc.query("Workers unite").indices) == set(enc.query("Workers unite", pairs=False).indices)
    korean = "사용자 지정 음성 포털에서 프로젝트로 구성됩니다"
    # Its words and the stems of the three that take a particle or an ending; no pairs ("자지" would be one).
    assert len(enc.document(korean).indices) == len(korean.split()) + 3


def test_a_korean_noun_is_its_own_word_whatever_particle_it_takes() -> None:
    enc = SparseEncoder()
    doc = set(enc.document("사용자 지정 음성 포털에서 프로젝트로 구성됩니다").indices)
    for query in ["포털", "포털에서", "포털로", "프로젝트는", "구성", "구성하는"]:
        assert set(enc.query(query).indices) & doc, query
    assert set(enc.query("포털에서").indices) <= doc  # the word as written too
    assert set(enc.query("도메인").indices).isdisjoint(doc)
    # Stacked particles, the plural, a noun + 하다 verb, the copula.
    assert [korean_stem(w) for w in ["언어에만", "사람들이", "사용하는", "것입니다", "결정할"]] == \
        ["언어", "사람", "사용", "것", "결정"]
    # Nouns that end like a particle keep their last syllable where that would leave one syllable.
    assert [korean_stem(w) for w in ["아이", "평가", "마을", "탭이", "도메인"]] == ["아이", "평가", "마을", "탭이", "도메인"]
    assert korean_stem("집에서") == "집" and korean_stem("영어를") == "영어"  # these no noun ends in


def test_a_korean_noun_finds_the_sentences_that_inflect_it(index: MediaIndex, embedder) -> None:
    """Every sentence of the recording's reference that holds "프로젝트" in some form, and no other, found by the
    bare noun through the exact-word index alone."""
    holding = [s for s in _korean_sentences() if "프로젝트" in s]
    assert {w for s in holding for w in s.split() if w.startswith("프로젝트")} >= {"프로젝트는", "프로젝트를"}
    found = judged(index, embedder, "프로젝트", limit=10, mode="sparse")
    assert sorted(j.hit.text for j in found) == sorted(holding)


def test_a_word_inside_a_chinese_sentence_is_found_by_the_words_alone(index: MediaIndex, embedder) -> None:
    found = judged(index, embedder, "自己的脚", limit=3, mode="sparse")
    assert [j.hit.text for j in found] == [CHINESE]
