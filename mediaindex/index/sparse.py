"""Sparse "exact word" vectors: Qdrant's own BM25 term weighting (from qdrant-edge), IDF in the engine.

Documents get BM25 term-frequency weights (k, b, average length); queries get weight 1 per distinct
token. The collection's sparse vector has the IDF modifier, so the engine weighs rare words up at query
time over the whole corpus (or the filtered part of it). The same encoder serves both stores, so an
index written in embedded mode and one on a server tokenise alike.

The engine's tokeniser cuts at spaces, so a Chinese or Japanese sentence is one token: a run of Chinese characters
or kana also indexes as its overlapping pairs of characters (`segments.character_pairs`, as search engines' CJK
analysers index it), and a query's run is looked up by its pairs too, so that a word inside a sentence is found.
Korean, written with spaces, keeps its words whole: a pair that spans a particle or an ending ("에서", "니다")
would meet nearly every Korean sentence.
"""

from __future__ import annotations

import re

from mediaindex.index.store import SparseVec
from mediaindex.segments import HAN_KANA, character_pairs

# Segments are short (a sentence of speech, a line of on-screen text): about 20 tokens, not BM25's 256.
AVG_SEGMENT_TOKENS = 20.0
# "CommunistParty" (OCR often drops spaces) also indexes as "communist party".
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])")
_WORD = re.compile(r"\w+")
_UNSPACED_RUN = re.compile(f"[{HAN_KANA}]+")
# Speech recognition writes numbers as digits or as words ("1 2 3", "eight"): index both as digits.
_UNITS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
          "sixteen seventeen eighteen nineteen")
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety"
_NUMBERS = {w: str(i) for i, w in enumerate(_UNITS.split())}  # noqa: SIM905
_NUMBERS.update({w: str(10 * (i + 2)) for i, w in enumerate(_TENS.split())})  # noqa: SIM905
_NUMBER_WORD = re.compile(r"\b(" + "|".join(_NUMBERS) + r")\b", re.IGNORECASE)


class SparseEncoder:
    def __init__(self, language: str = "english") -> None:
        from qdrant_edge import Bm25, Bm25Config

        # English stemming and stopwords suit the bundled models' main language; tokens of other
        # languages still index as whole words.
        self._bm25 = Bm25(Bm25Config(language=language, avg_len=AVG_SEGMENT_TOKENS, ascii_folding=True))

    @staticmethod
    def _prepare(text: str, split_camel: bool, pairs: bool = True) -> str:
        text = _NUMBER_WORD.sub(lambda m: _NUMBERS[m.group(1).lower()], text)
        parts = [_CAMEL.sub(" ", w) for w in _WORD.findall(text) if _CAMEL.search(w)] if split_camel else []
        if pairs:
            parts += [pair for run in _UNSPACED_RUN.findall(text) for pair in character_pairs(run) if pair != run]
        return " ".join([text, *parts])

    def document(self, text: str) -> SparseVec:
        vec = self._bm25.embed_document(self._prepare(text or "", split_camel=True))
        return SparseVec(list(vec.indices), list(vec.values))

    def query(self, text: str, pairs: bool = True) -> SparseVec:
        """The query's tokens; `pairs=False`: its words alone, without the pairs of characters of its CJK runs (what
        the relevance model counts as the query's words, as it was fitted)."""
        # Not split: a query's "iPhone" is one word to find (a document's "iPhone" indexes both forms), not
        # "phone" half-matched.
        vec = self._bm25.embed_query(self._prepare(text or "", split_camel=False, pairs=pairs))
        return SparseVec(list(vec.indices), list(vec.values))
