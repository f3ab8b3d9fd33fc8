"""How much finding each word of a query says: rare words more than common ones, a name only as a whole.

A segment's exact-word evidence is the weighted share of the query's words it holds. Counted plainly,
"when does he say banana" is half found by any sentence with "say" in it, and "Manchester United" by
"Workers of the world, united". Two rules make the share mean what a person means by it:

- Each word weighs its information in ordinary language: ZIPF_TOP minus its Zipf frequency (wordfreq's
  log10 of occurrences per billion words; the highest of LANGUAGES' small lists, so the German "ein" of
  "ein Hund" is as common as it is in German, not as rare as in English), at least MIN_WEIGHT. "say"
  (Zipf 5.9) weighs 2.1, "banana" (4.0) 4.0, a word no list holds (Zipf < 3 or unknown) ZIPF_TOP. The
  archive's own frequencies cannot do this: in a small archive every word is rare.
- The words of a name of two or three capitalised words ("Manchester United", "Angela Merkel") count
  only together: a segment with "United" alone does not hold a part of that name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

from mediaindex.models.text_language import LANGUAGES

if TYPE_CHECKING:
    from mediaindex.index.sparse import SparseEncoder

ZIPF_TOP = 8.0  # above the most frequent word of any list ("the" is 7.7)
MIN_WEIGHT = 1.0
MAX_NAME_WORDS = 3  # longer runs of capitals are a title-cased sentence, not a name
# Korean and Japanese words weigh as unknown: their lists need MeCab to tokenise (they rarely meet the index's words,
# which are stemmed as English).
_TOKEN = re.compile(r"[^\W_]+")


@lru_cache(maxsize=4096)
def information(word: str) -> float:
    """What finding `word` says, from how rare it is in ordinary language."""
    from wordfreq import zipf_frequency

    common = max(zipf_frequency(word, lang, wordlist="small") for lang in LANGUAGES)
    return max(MIN_WEIGHT, ZIPF_TOP - common)


def names(query: str) -> list[list[str]]:
    """Runs of two or three capitalised words: names that count only as a whole."""
    tokens = _TOKEN.findall(query)
    if len(tokens) > MAX_NAME_WORDS and all(t[:1].isupper() for t in tokens):
        return []  # A Title-Cased Query Is Not A Name
    runs: list[list[str]] = []
    run: list[str] = []
    for token in [*tokens, ""]:
        if token[:1].isupper():
            run.append(token)
            continue
        if 2 <= len(run) <= MAX_NAME_WORDS:
            runs.append(run)
        run = []
    return runs


@dataclass(frozen=True)
class WordWeights:
    """A query's word ids with their weights, and the groups of ids that form one name."""

    weights: dict[int, float] = field(default_factory=dict)
    names: tuple[frozenset[int], ...] = ()

    @classmethod
    def of(cls, query: str, encoder: SparseEncoder) -> WordWeights:
        ids_of = {token: encoder.query(token, pairs=False).indices for token in _TOKEN.findall(query)}
        weights: dict[int, float] = {}
        for token, ids in ids_of.items():
            for i in ids:
                weights[i] = max(weights.get(i, 0.0), information(token.casefold()))
        groups = [group for run in names(query) if len(group := frozenset(i for t in run for i in ids_of[t])) > 1]
        return cls(weights, tuple(groups))

    def share(self, query_ids: set[int], held: dict[int, float]) -> float:
        """The weighted share of `query_ids` that `held` (id -> how surely held, 0..1) holds."""
        if not query_ids:
            return 0.0
        held = dict(held)
        for group in self.names:
            if not group <= held.keys():
                for i in group:
                    held.pop(i, None)
        total = sum(self.weights.get(i, ZIPF_TOP) for i in query_ids)
        found = sum(self.weights.get(i, ZIPF_TOP) * held[i] for i in query_ids if i in held)
        return min(1.0, found / total)
