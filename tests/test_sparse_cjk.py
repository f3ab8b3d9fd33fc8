"""Exact words in Chinese and Japanese: a run of their characters is indexed and looked up by its pairs of
characters, so that a word inside a sentence (written without spaces) is found by the words alone; Korean, written
with spaces, keeps its words whole. Over real sentences: ../shared/media's Chinese clip's reference and media-val's
Korean recording's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mediaindex.index.catalog import VideoRecord
from mediaindex.index.index import MediaIndex
from mediaindex.index.sparse import SparseEncoder
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
    assert len(enc.document(korean).indices) == len(korean.split())  # its words, no pairs
    assert set(enc.query("포털").indices).isdisjoint(enc.document(korean).indices)  # Korean words stay whole
    assert set(enc.query("포털에서").indices) <= set(enc.document(korean).indices)


def test_a_word_inside_a_chinese_sentence_is_found_by_the_words_alone(index: MediaIndex, embedder) -> None:
    found = judged(index, embedder, "自己的脚", limit=3, mode="sparse")
    assert [j.hit.text for j in found] == [CHINESE]
