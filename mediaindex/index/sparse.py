"""Sparse "exact word" vectors: Qdrant's own BM25 term weighting (from qdrant-edge), IDF in the engine.

Documents get BM25 term-frequency weights (k, b, average length); queries get weight 1 per distinct
token. The collection's sparse vector has the IDF modifier, so the engine weighs rare words up at query
time over the whole corpus (or the filtered part of it). The same encoder serves both stores, so an
index written in embedded mode and one on a server tokenise alike.

The engine's tokeniser cuts at spaces, so a Chinese or Japanese sentence is one token: a run of Chinese characters
or kana also indexes as its overlapping pairs of characters (`segments.character_pairs`, as search engines' CJK
analysers index it), and a query's run is looked up by its pairs too, so that a word inside a sentence is found.
Korean, written with spaces, is not paired (a pair that spans a particle or an ending, "에서", "니다", would meet
nearly every Korean sentence): a Korean word indexes whole and, where it ends in a particle or in an ending of 하다 /
되다 / 이다, also as its stem ("포털에서" as "포털", "사용하는" as "사용"), in documents and queries alike, so that a
noun is found whatever particle it takes. Only particles that leave a stem of two syllables are taken off, and those
that no noun ends in ("는", "를") or that are longer than one syllable from one: "아이" (a child) or "평가" (an
assessment) are nouns, not "아" or "평" with a particle.
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
_HANGUL_WORD = re.compile("[\uac00-\ud7a3]{2,}")
# Particles, and the endings of the verbs made from a noun with 하다 / 되다 and of the copula 이다, longest first.
_KOREAN_ENDINGS = sorted(set("""
    에서는 에서도 에서의 에게서 에게는 에게도 한테서 으로부터 으로는 으로도 으로서 으로써 이라고 이라는 이라도 이라면
    까지는 까지도 부터는 에서 에게 한테 께서 까지 부터 처럼 보다 으로 라고 라는 이나 이랑 이며 이란 하고 마다 조차
    밖에 만큼 에는 에도 와는 과는 로는 로도 로서 로써 은 는 이 가 을 를 에 의 로 와 과 도 만 랑
    하였습니다 되었습니다 했습니다 됐습니다 합니다 됩니다 입니다 하는 되는 하여 되어 해서 돼서 하면 되면 하지 되지
    한다 된다 하기 되기 했다 됐다 하게 되게 이다 할 될 한 된 함 됨
    """.split()), key=len, reverse=True)  # noqa: SIM905
_AFTER_ONE_SYLLABLE = frozenset(e for e in _KOREAN_ENDINGS if len(e) > 1) | {"는", "를"}


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
        parts += [stem for word in _HANGUL_WORD.findall(text) if (stem := korean_stem(word)) != word]
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


def korean_stem(word: str) -> str:
    """A Korean word without its particles or verb ending ("포털에서" → "포털", "언어에만" → "언어", "사람들이" →
    "사람"); the word itself where it ends in none, or where taking one off would leave too short a stem to be sure
    it is one."""
    for _stacked in range(2):  # particles stack: "에" + "만"
        ending = next((e for e in _KOREAN_ENDINGS
                       if word.endswith(e) and len(word) - len(e) >= (1 if e in _AFTER_ONE_SYLLABLE else 2)), None)
        if ending is None:
            break
        word = word[: -len(ending)]
    return word[:-1] if len(word) >= 3 and word.endswith("들") else word  # the plural
