"""Quality measures for speech: text normalisation, word error rate, caption agreement."""

from __future__ import annotations

import re

_ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
_TENS = ["_", "_", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


def _below_100(n: int) -> str:
    if n < 20:
        return _ONES[n]
    return _TENS[n // 10] + ("" if n % 10 == 0 else " " + _ONES[n % 10])


def number_words(n: int) -> str:
    """Numbers spelled out; 1100-1999 read as years ("eighteen thirteen"), as speech does."""
    if 1100 <= n <= 1999 and n % 100:
        return f"{_below_100(n // 100)} {_below_100(n % 100)}"
    if n < 100:
        return _below_100(n)
    if n < 1000:
        rest = n % 100
        return f"{_ONES[n // 100]} hundred" + (f" {_below_100(rest)}" if rest else "")
    if n < 1_000_000:
        rest = n % 1000
        return f"{number_words(n // 1000)} thousand" + (f" {number_words(rest)}" if rest else "")
    return " ".join(_ONES[int(d)] for d in str(n))


def normalise(text: str) -> list[str]:
    """Lower case, numbers spelled out, punctuation stripped (apostrophes inside words kept)."""
    text = text.lower().replace("-", " ")
    text = re.sub(r"\d+", lambda m: f" {number_words(int(m.group()))} ", text)
    text = re.sub(r"[^\w' ]+", " ", text)
    return [w.strip("'") for w in text.split() if w.strip("'")]


def wer(reference: str, hypothesis: str) -> float:
    """Word error rate: word-level edit distance over the reference length, after normalising."""
    ref, hyp = normalise(reference), normalise(hypothesis)
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, start=1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, start=1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1] / max(1, len(ref))


def caption_agreement(
    cues: list[tuple[float, float, str]], segments: list[tuple[float, float, str]], min_shared: float = 0.6
) -> float:
    """Fraction of caption cues that overlap in time a transcript segment holding the same words:
    at least `min_shared` of the cue's words appear in the segment(s) it overlaps."""
    if not cues:
        return 0.0
    hits = 0
    for start, end, text in cues:
        words = normalise(text)
        overlapping = [t for s, e, t in segments if s < end and e > start]
        if not words or not overlapping:
            continue
        found = set(normalise(" ".join(overlapping)))
        if sum(w in found for w in words) / len(words) >= min_shared:
            hits += 1
    return hits / len(cues)


def read_srt(text: str) -> list[tuple[float, float, str]]:
    cues = []
    stamp = re.compile(r"(\d+):(\d+):(\d+)[,.](\d+)\s*-->\s*(\d+):(\d+):(\d+)[,.](\d+)")
    for block in text.strip().split("\n\n"):
        lines = [ln for ln in block.strip().splitlines() if ln.strip()]
        for i, line in enumerate(lines):
            m = stamp.search(line)
            if m:
                h1, m1, s1, f1, h2, m2, s2, f2 = (int(x) for x in m.groups())
                cues.append((h1 * 3600 + m1 * 60 + s1 + f1 / 1000, h2 * 3600 + m2 * 60 + s2 + f2 / 1000,
                             " ".join(lines[i + 1:])))
                break
    return cues
