"""Which characters of a hit's text match words of the query (for <mark> in the page).

A word is marked when the index's own word encoder reads it as one of the query's words: the same
stemming, stop words and number spelling the search matched with, so "countries" is marked for
"country" and "three" for "3", while "nothing" is not marked for "not" and "your" not at all. Scripts
written without spaces (Chinese, Japanese) and Korean words with particles attached ("앵무새가") are
marked where a query word occurs inside them. As in the search, a web address's "www" and domain are
none of its words, and a name of the query that the text holds only spelt otherwise is marked where it
is spelt like the name ("www .muxists .org" for "marxists.org").
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from mediaindex.index.vocabulary import fold, sound_alikes, words_of
from mediaindex.search.ranking import address_part_ids
from mediaindex.segments import is_web_address

if TYPE_CHECKING:
    from mediaindex.index.sparse import SparseEncoder

_WORD = re.compile(r"\w+", re.UNICODE)


def highlights(query: str, text: str, encoder: SparseEncoder) -> list[tuple[int, int]]:
    """Spans of the words of `text` that are words of `query`."""
    if not query or not text:
        return []
    wanted = set(encoder.query(query).indices)
    if is_web_address(query):
        wanted -= address_part_ids(encoder)
    if not wanted:
        return []
    # A fragment joined to a respelt word ("Confu i") is left unmarked: a letter or two says nothing.
    alikes = {part for found in sound_alikes(query, words_of([text])).values() for word, _ in found
              for part in word.split() if len(part) > 2}
    # Non-Latin query words, as typed: a Korean noun is found inside the word its particle is attached to.
    inside = [w for w in _WORD.findall(query.casefold()) if not w.isascii() and set(encoder.query(w).indices)]
    spans: list[tuple[int, int]] = []
    for m in _WORD.finditer(text):
        word = m.group(0)
        if (set(encoder.query(word).indices) & wanted or any(w in word.casefold() for w in inside)
                or fold(word) in alikes):
            spans.append((m.start(), m.end()))
    return spans
