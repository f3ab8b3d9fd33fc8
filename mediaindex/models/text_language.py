"""The language a query (or a longer text: a subtitle track) is written in, when its letters or words say so plainly.

A multilingual embedder scores a sentence against its translation lower than against a sentence of
its own language: e5-small gives "Ein Gespenst geht um in Europa" and "A specter is haunting Europe"
0.81, while an unrelated German query reaches 0.83 against German text. Judged by one line, every
translation falls below it. The searcher therefore judges a query against a segment in another
language by that pair's own line, and needs the query's language to know which pairs those are.

Scripts decide most languages at once (Hangul is Korean). Among the Latin-script languages whose
common words wordfreq lists, a query counts as one of them only when it has at least MIN_WORDS words
that are not capitalised and they are, on average, clearly more common there than in any other;
names, numbers and single words ("Houston", "1813") are no language's. Unsure means None: the
segment's own line applies.
"""

from __future__ import annotations

import re
from functools import lru_cache

# Latin-script languages whose common words wordfreq's small lists hold (a few MB each in memory); search weighs a
# query's words by them too (`search.wordweights`). Korean and Japanese lists need MeCab to tokenise.
LANGUAGES = ("en", "de", "fr", "es")

# Letters that name their language (or the one a search archive most likely holds in them).
SCRIPTS = (
    ("ko", re.compile(r"[\uac00-\ud7a3\u1100-\u11ff\u3130-\u318f]")),
    ("ja", re.compile(r"[\u3040-\u30ff]")),
    ("zh", re.compile(r"[\u4e00-\u9fff]")),
    ("ru", re.compile(r"[\u0400-\u04ff]")),
    ("el", re.compile(r"[\u0370-\u03ff]")),
    ("ar", re.compile(r"[\u0600-\u06ff]")),
    ("he", re.compile(r"[\u0590-\u05ff]")),
    ("hi", re.compile(r"[\u0900-\u097f]")),
    ("th", re.compile(r"[\u0e00-\u0e7f]")),
)
MIN_WORDS = 3
MIN_LEAD = 0.8  # Zipf points per word by which the winning language must lead the runner-up
_WORD = re.compile(r"[^\W\d_]+")


@lru_cache(maxsize=1024)
def query_language(text: str) -> str | None:
    """The query's language code (Whisper's codes), or None when its words do not say."""
    for language, letters in SCRIPTS:
        if letters.search(text):
            return language
    # Capitalised words are left out: names ("Brandon Castellano") are no language's, and the common
    # words around them say enough (German nouns go with them; "geht", "aller", "sehr" remain).
    words = [w for w in _WORD.findall(text) if not w[:1].isupper()]
    if len(words) < MIN_WORDS:
        return None
    from wordfreq import zipf_frequency

    totals = sorted(((sum(zipf_frequency(w, lang, wordlist="small") for w in words), lang) for lang in LANGUAGES),
                    reverse=True)
    (best, language), (second, _) = totals[0], totals[1]
    return language if best - second >= MIN_LEAD * len(words) else None


def text_language(text: str, words: int = 200) -> str | None:
    """The language of a longer text (a subtitle track), judged by its first `words` words as a query's is."""
    return query_language(" ".join(text.split()[:words]))
