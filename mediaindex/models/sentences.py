"""Sentences cut from word timestamps: the unit speech is indexed and cited at.

Whisper's own segments follow its 30-second windows and often run for a paragraph; a search hit should
point at the sentence that was said. Sentences end at sentence punctuation, at a clear pause, where the
language changes or after a spoken web address followed by a capital; a sentence longer than
`max_seconds` is cut at its widest pause (preferring a comma), and a very short one joins the neighbour
it is closest to, so that it still carries some meaning.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from mediaindex.segments import WEB_DOMAIN_END, join_words

_SENTENCE_END = (".", "?", "!", "…", "。", "？", "！", "؟", "।")
_CLAUSE_END = (",", ";", ":", "，", "、", "；", "：", "—", "-")
# Words whose final period is not a sentence end.
_ABBREVIATION = re.compile(r"^(mr|mrs|ms|dr|prof|st|sr|jr|vs|etc|e\.g|i\.e|no|vol|fig|ca|approx|z\.b|bzw|usw|"
                           r"[a-z])\.$", re.I)
# A spoken web address: Whisper writes no full stop after one, so a capitalised word after it begins the
# next sentence ("… at www .muxas .org Workers of the world, unite!").
_WEB_ADDRESS_END = re.compile(rf"{WEB_DOMAIN_END}$", re.I)
PAUSE_SECONDS = 1.5  # a silence this long ends a sentence whatever the punctuation says
MIN_SECONDS = 1.5  # shorter pieces that are no whole sentence (and any of fewer than MIN_WORDS words) join a neighbour
MIN_WORDS = 3


@dataclass(frozen=True)
class TimedWord:
    """A word with where it came from: its whisper segment's confidence and its language."""

    start: float
    end: float
    text: str
    probability: float
    avg_logprob: float
    no_speech_prob: float
    language: str | None


def _ends_sentence(word: TimedWord) -> bool:
    text = word.text.rstrip("\"'”’)]}»")
    return text.endswith(_SENTENCE_END) and not _ABBREVIATION.match(text)


def _ends_at_address(word: TimedWord, nxt: TimedWord) -> bool:
    first = nxt.text.strip()[:1]
    return bool(_WEB_ADDRESS_END.search(word.text.strip())) and first.isupper()


def _split_long(words: list[TimedWord], max_seconds: float) -> list[list[TimedWord]]:
    """Cut at the widest pause (a comma adds a little), recursively, until every piece fits."""
    if len(words) < 2 or words[-1].end - words[0].start <= max_seconds:
        return [words]
    best, best_at = -1.0, 0
    for i in range(1, len(words)):
        left, right = words[i - 1].end - words[0].start, words[-1].end - words[i].start
        if min(left, right) < min(2.0, max_seconds / 3):
            continue  # never leave a scrap of a word or two
        gap = words[i].start - words[i - 1].end
        score = gap + (0.3 if words[i - 1].text.endswith(_CLAUSE_END) else 0.0)
        if score > best:
            best, best_at = score, i
    if best < 0:  # nothing balanced: halve by time
        middle = (words[0].start + words[-1].end) / 2
        best_at = next((i for i in range(1, len(words)) if words[i].start >= middle), len(words) // 2)
    return _split_long(words[:best_at], max_seconds) + _split_long(words[best_at:], max_seconds)


def _short(words: Sequence[TimedWord]) -> bool:
    if len(words) < MIN_WORDS:
        return True
    # A whole sentence of a few quick words ("Workers of the world unite.") says something on its own.
    return words[-1].end - words[0].start < MIN_SECONDS and not _ends_sentence(words[-1])


def _merge_short(pieces: list[list[TimedWord]], max_seconds: float) -> list[list[TimedWord]]:
    out = [list(p) for p in pieces]
    i = 0
    while i < len(out):
        piece = out[i]
        if not _short(piece) or len(out) == 1:
            i += 1
            continue
        options = []
        for j in (i - 1, i + 1):
            if 0 <= j < len(out) and out[j][0].language == piece[0].language:
                first, last = (out[j], piece) if j < i else (piece, out[j])
                gap = last[0].start - first[-1].end
                if gap <= PAUSE_SECONDS and last[-1].end - first[0].start <= max_seconds:
                    options.append((gap, j))
        if not options:
            i += 1
            continue
        _, j = min(options)
        lo = min(i, j)
        out[lo : lo + 2] = [out[lo] + out[lo + 1]]
        i = lo  # the joined piece may still be short
    return out


def sentences(words: Sequence[TimedWord], max_seconds: float = 12.0) -> list[list[TimedWord]]:
    """The words grouped into sentences, in order; each word in exactly one."""
    pieces: list[list[TimedWord]] = []
    current: list[TimedWord] = []
    for i, word in enumerate(words):
        nxt = words[i + 1] if i + 1 < len(words) else None
        current.append(word)
        if (nxt is None or _ends_sentence(word) or nxt.start - word.end >= PAUSE_SECONDS
                or nxt.language != word.language or _ends_at_address(word, nxt)):
            pieces.append(current)
            current = []
    cut = [p for piece in pieces for p in _split_long(piece, max_seconds)]
    return _merge_short(cut, max_seconds)


def sentence_text(words: Sequence[TimedWord]) -> str:
    return join_words([w.text for w in words], words[0].language if words else None)
