"""The page marks the words the search matched: the index's own stemming, stop words and numbers."""

from __future__ import annotations

import pytest

from mediaindex.api.highlight import highlights
from mediaindex.index.sparse import SparseEncoder
from tests.corpus import manifesto, references


@pytest.fixture(scope="module")
def encoder() -> SparseEncoder:
    return SparseEncoder()


def marked(query: str, text: str, encoder: SparseEncoder) -> list[str]:
    return [text[a:b] for a, b in highlights(query, text, encoder)]


def test_the_query_words_are_marked_and_stop_words_and_prefixes_are_not(encoder: SparseEncoder) -> None:
    jfk = next(s.text for s in references() if "fellow" in s.text.lower())
    assert sorted(set(marked("ask not what your country can do", jfk, encoder))) == ["ask", "country"]
    librispeech = next(s.text for s in references() if "antecedents" in s.text.lower())
    # "not" is no word of the search, so "nothing" is not one of its matches.
    assert [w.lower() for w in marked("ask not what your country can do", librispeech, encoder)] == ["country"]


def test_stems_and_numbers_are_marked_as_the_search_matched_them(encoder: SparseEncoder) -> None:
    assert marked("countries", "my native country", encoder) == ["country"]
    assert marked("one two three", "1, 2, 3 and four", encoder) == ["1", "2", "3"]
    caption = next(s.text for s in manifesto() if "spectre" in s.text.lower())
    assert [w.lower() for w in marked("a spectre haunting Europe", caption, encoder)] == ["spectre", "haunting",
                                                                                          "europe"]


def test_korean_and_chinese_words_are_found_inside_longer_words(encoder: SparseEncoder) -> None:
    assert marked("앵무새", "a photo of a cockatoo, 앵무새가 있다", encoder) == ["앵무새가"]
    assert marked("砸自己的脚", "砸自己的脚", encoder) == ["砸自己的脚"]


def test_an_address_marks_its_name_or_a_spelling_like_it_never_its_domain(encoder: SparseEncoder) -> None:
    heard = "You can find the text version of this audiobook at www .muxists .org"
    assert marked("marxists.org", heard, encoder) == ["muxists"]
    assert marked("www.bcastell.com", "www.bcastell.com / Copyright 2013", encoder) == ["bcastell"]
    assert marked("github.com", heard, encoder) == []
    assert marked("ComfyUI", "start Confu i and load the graph", encoder) == ["Confu"]


@pytest.mark.parametrize(("query", "text"), [("", "some text"), ("words", ""), ("the of and", "the of and")])
def test_nothing_to_mark(encoder: SparseEncoder, query: str, text: str) -> None:
    assert highlights(query, text, encoder) == []
