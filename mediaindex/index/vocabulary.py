"""Sound-alike names: the words the archive's speech and on-screen text hold, and the closest spellings
of a query's names that are not among them (the page marks those spellings in a hit's text).

Speech recognition writes names it does not know as the nearest words it does ("Guizot" as "Guizhou",
"ComfyUI" as "Confu i"), and OCR misreads letters. A query word that looks like a name (capitalised, mixed
case or with digits; or a web address's own word), is long enough to compare and occurs nowhere in the
archive is spelt like the archive's words with the same first letter and an edit similarity of at least
ALIKE_MIN. Other lower-case words (and a query's sentence-cased first word) are never respelt, so "weather
report" does not turn into "whether".
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

from mediaindex.segments import WEB_ADDRESS_PARTS, is_web_address

WORDED = ("speech", "ocr")  # what people and OCR may have spelt differently from the query
# Names shorter than this (folded letters) have too many near neighbours to respell.
MIN_NAME_LETTERS = 5
MIN_WORD_LETTERS = 4
ALIKE_MIN = 0.75  # rapidfuzz's normalised Indel similarity, 0..1
MAX_ALIKES = 3
# Speech recognition splits an unknown name into a word and a fragment ("Confu i"): such neighbours are
# also kept joined.
_FRAGMENT = 2
_TOKEN = re.compile(r"[^\W_]+")
_NAMELIKE = re.compile(r"[A-Z]|\d")


def fold(word: str) -> str:
    """Lower case, accents dropped ("Länder" -> "lander"), as words are compared here."""
    decomposed = unicodedata.normalize("NFKD", word.casefold())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def words_of(texts: Iterable[str]) -> set[str]:
    """The folded words of some segment texts worth comparing, and each word with a neighbouring fragment
    ("confu i")."""
    found: set[str] = set()
    for text in texts:
        tokens = [fold(t) for t in _TOKEN.findall(text or "")]
        found.update(t for t in tokens if len(t) >= MIN_WORD_LETTERS and not t.isdigit())
        for a, b in zip(tokens, tokens[1:], strict=False):
            if min(len(a), len(b)) <= _FRAGMENT and len(a) + len(b) >= MIN_NAME_LETTERS:
                found.add(f"{a} {b}")
    return found


def names_in(query: str) -> list[str]:
    """The query's words that look like names, as typed, in order; a web address's own words are names
    however they are cased ("marxists" in "marxists.org", which speech may hear as "muxists")."""
    out: list[str] = []
    tokens = _TOKEN.findall(query)
    if is_web_address(query):
        named = [t for t in tokens if t.casefold() not in WEB_ADDRESS_PARTS and len(fold(t)) >= MIN_NAME_LETTERS]
        return list(dict.fromkeys(named))
    for i, token in enumerate(tokens):
        word = fold(token)
        if i == 0 and len(tokens) > 1 and token[1:].islower():
            continue  # "Weather report": capitalised as the query's first word, not as a name
        if _NAMELIKE.search(token) and len(word) >= MIN_NAME_LETTERS and not word.isdigit() and token not in out:
            out.append(token)
    return out


def sound_alikes(query: str, vocabulary: set[str] | frozenset[str]) -> dict[str, list[tuple[str, float]]]:
    """For each name of the query (as typed) the archive does not hold: the archive's words spelt most
    like it, with their similarity, best first."""
    names = [n for n in names_in(query) if fold(n) not in vocabulary]
    if not names or not vocabulary:
        return {}
    from rapidfuzz import fuzz, process

    out: dict[str, list[tuple[str, float]]] = {}
    for name in names:
        folded = fold(name)
        pool = {w.replace(" ", ""): w for w in vocabulary if w[0] == folded[0]}
        found = process.extract(folded, list(pool), scorer=fuzz.ratio, score_cutoff=100 * ALIKE_MIN,
                                limit=MAX_ALIKES)
        if found:
            out[name] = [(pool[joined], round(score / 100, 4)) for joined, score, _ in found]
    return out
