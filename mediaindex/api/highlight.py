"""Which characters of a hit's text match words of the query (for <mark> in the page)."""

from __future__ import annotations

import re

_WORD = re.compile(r"\w+", re.UNICODE)
_STOP = frozenset({"a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "from", "in", "is", "it", "of",
                   "on", "or", "the", "to", "was", "what", "with"})


def _terms(query: str) -> list[str]:
    terms = set()
    for word in _WORD.findall(query.casefold()):
        # Latin words under three letters are mostly noise; one CJK character is a word.
        if word in _STOP or (len(word) < 3 and word.isascii()):
            continue
        terms.add(word)
    return sorted(terms, key=len, reverse=True)


def highlights(query: str, text: str) -> list[tuple[int, int]]:
    """Spans of words in `text` that start with a query term (so "country" marks "countryside")."""
    terms = _terms(query)
    if not terms or not text:
        return []
    folded = text.casefold()
    if len(folded) != len(text):  # casefold changed lengths (e.g. ß): fall back to lower()
        folded = text.lower()
        if len(folded) != len(text):
            return []
    spans: list[tuple[int, int]] = []
    for m in _WORD.finditer(folded):
        word = m.group(0)
        for term in terms:
            if word.startswith(term) or (not term.isascii() and term in word):
                spans.append((m.start(), m.end()))
                break
    return spans
