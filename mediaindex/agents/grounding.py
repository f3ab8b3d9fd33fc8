"""Cheap lexical checks that keep generated text tied to the archive.

A small model invents things; these checks catch the worst of it without a second model: generated text must
reuse the words of its sources, and a search hit counts as relevant only with a high score or shared words.
"""

from __future__ import annotations

import re
from collections import Counter

from mediaindex.segments import CJK_LETTER, CJK_RUN, HAN_KANA, character_pairs

_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)
_STOP = frozenset(str.split("""
a about above after again against all also am an and any are as at be because been before being below between
both but by can could did do does doing down during each few for from further had has have having he her here
hers him his how i if in into is it its itself just me more most my no nor not now of off on once only or other
our out over own same she should so some such than that the their them then there these they this those through
to too under until up very was we were what when where which while who whom why will with would you your yours
video speaker says say said talk talks about part clip excerpt transcript summary title chapter moment archive
der die das und ist nicht ein eine zu den mit von dem des sich auch als wie bei nach aus auf für sie wir ich
sind hat haben war wird werden einer eines einem einen oder aber
le la les et est un une de des du que qui pour dans sur pas par avec sont ont aux ces cette mais nous vous ils
elle son ses leur
el los las del por con para una uno que como más pero sus este esta son fue han hay muy
"""))


# A word with its apostrophes ("don't", "Kennedy's", "l'homme"): split there, "don't" read as "don" would be a word.
_WORD_APOSTROPHES = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)*", re.UNICODE)


def _unelided(word: str) -> str:
    """The content of a word written with apostrophes: "l'homme" and "qu'il" the word after a short elided one,
    "kennedy's" the name before a possessive; other contractions ("don't", "you're", "they've") none."""
    parts = re.split(r"['’]", word)
    if len(parts) == 1:
        return word
    if len(parts[0]) <= 2:
        return parts[-1]
    return parts[0] if len(parts) == 2 and parts[1] == "s" else ""




def content_words(text: str) -> list[str]:
    """The words that carry a text's content, lower case, as written (a run of CJK characters is one word)."""
    words = (_unelided(m.lower()) for m in _WORD_APOSTROPHES.findall(text))
    return [w for w in words if len(w) >= (2 if CJK_RUN.search(w) else 3) and w not in _STOP]


def written_forms(text: str) -> dict[str, str]:
    """Each word of `text` (lower case, as `content_words` gives it) as the text writes it: lower case where it is
    ever written so (a common word capitalised at a sentence's start), else its most frequent spelling (a name, a
    German noun)."""
    forms: dict[str, Counter[str]] = {}
    for match in _WORD_APOSTROPHES.findall(text):
        word = _unelided(match)
        if word:
            forms.setdefault(word.lower(), Counter())[word] += 1
    return {low: low if low in seen else seen.most_common(1)[0][0] for low, seen in forms.items()}


def terms(text: str) -> list[str]:
    """What a text's content is compared by: its content words by stem, each run of CJK characters as its
    overlapping pairs (a lone character as itself)."""
    out: list[str] = []
    for word in content_words(text):
        runs = CJK_RUN.findall(word)
        if not runs:
            out.append(_stem(word))
            continue
        out += [pair for run in runs for pair in character_pairs(run)]
        out += [_stem(rest) for rest in CJK_RUN.split(word) if len(rest) >= 3 and rest not in _STOP]
    return out


def _stem(word: str) -> str:
    # Drop a common suffix, then keep five letters: "asks"/"ask", "communist"/"communism" match.
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            word = word[: -len(suffix)]
            break
    return word[:5]


def overlap(text: str, source: str, given: str = "") -> float:
    """Share of the content words of `text` that occur (by stem, CJK by pairs of characters: `terms`) in `source`; 0
    when text has none. Words of `given` (the question an answer restates) count neither way."""
    known = set(terms(given))
    all_terms = terms(text)
    own = [t for t in all_terms if t not in known]
    if not own:  # nothing but the question's own words (or nothing at all)
        return 1.0 if known and all_terms else 0.0
    held = set(terms(source))
    return sum(t in held for t in own) / len(own)


def grounded(text: str, source: str, threshold: float = 0.6, given: str = "") -> bool:
    return overlap(text, source, given) >= threshold


_FILLER = frozenset(str.split("""
a an the is are was were be been of to and or in on at by it its this that these those there here he she they him
her his their them what which who whom when where why how does do did says say said tells told speaker video
"""))


def numbers_from(text: str, source: str, given: str = "") -> bool:
    """Every number in `text` occurs in `source` or `given` (word checks ignore digits: "he says banana at 0:12"
    citing the moment at 0:40 has every word right and the time wrong)."""
    known = set(re.findall(r"\d+", source)) | set(re.findall(r"\d+", given))
    return all(n in known for n in re.findall(r"\d+", text))


def adds_to(answer: str, question: str) -> bool:
    """The answer says something the question does not: a word or number of its own beyond fillers ("ask not
    what your country can do for you" adds "not", "your", "can" to "what does he ask Americans to do for their
    country"; "The speaker says banana." adds nothing to "When does the speaker say banana?")."""
    def terms(text: str) -> set[str]:
        return {_stem(w) for w in (m.lower() for m in _WORD.findall(text)) if w not in _FILLER} | set(
            re.findall(r"\d+", text))

    return bool(terms(answer) - terms(question))


def repetitive(text: str, min_words: int = 6, max_share: float = 0.5) -> bool:
    """A small model caught in a loop ("the Party of the Party of the Party ..."): few distinct content words."""
    words = terms(text)
    return len(words) >= min_words and len(set(words)) / len(words) < max_share


def relevant(query: str, hit_text: str, score: float, min_score: float) -> bool:
    """A hit answers a query if its score clears the bar, or it shares most of the query's content words."""
    if score >= min_score:
        return True
    words = set(terms(query))
    if not words:
        return False
    held = set(terms(hit_text))
    shared = sum(w in held for w in words)
    return shared >= 1 and shared / len(words) >= 0.5


_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b([A-ZÄÖÜ][\w'-]+|\d[\d.,:]*)", re.UNICODE)
# A sentence ends at a stop before a capital, a digit or a quote, or before a letter of a script without capitals
# (Korean, Chinese, Japanese); at a full-width stop whatever follows.
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[\"'A-ZÄÖÜ0-9]|" + CJK_LETTER + r")|(?<=[。！？])\s*(?=\S)")
SUPPORT = 0.75  # share of a generated sentence's content words its sources must hold


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text.strip()) if s.strip()]


def names(sentence: str) -> list[str]:
    """Capitalised words inside the sentence (not its first word) and numbers: the claims a model invents."""
    body = sentence.strip()
    return [m.group(1) for m in _NAME.finditer(body) if m.start() > 0]


_TOKEN = re.compile(r"\w+", re.UNICODE)


def quoted(sentence: str, source: str) -> bool:
    """The sentence is the source's own words, in order (a quote cut with "…" too): whatever they say, the source
    says it, even where they hold no content word to weigh ("S C / D" read off the screen)."""
    words = _TOKEN.findall(sentence.removesuffix("…").lower())
    return bool(words) and f" {' '.join(words)} " in f" {' '.join(_TOKEN.findall(source.lower()))} "


def supported(sentence: str, source: str, threshold: float = SUPPORT) -> bool:
    """A generated sentence is supported by `source` when it quotes it, or when every name and number in it occurs
    there and most of its content words do ("the manifesto of the Communist Party of the United States" fails on
    "United")."""
    if quoted(sentence, source):
        return True
    known = set(terms(source)) | set(re.findall(r"\d+", source))
    said = {w.lower() for w in _WORD.findall(source)}  # short words too ("Go", "UN")
    for name in names(sentence):
        digits = re.findall(r"\d+", name)
        if digits and not all(d in known for d in digits):
            return False
        word = name.lower()
        if not digits and word not in said and _stem(word) not in known and word not in _STOP:
            return False
    return overlap(sentence, source) >= threshold and not repetitive(sentence)


def unsupported(text: str, source: str) -> list[str]:
    return [s for s in sentences(text) if not supported(s, source)]


_ENDS = (".", "!", "?", "…")


def finished_sentences(text: str, cut_short: bool) -> list[str]:
    """A reply's sentences; when the model was stopped at its token limit, without the last one if it ends
    mid-sentence ("The video begins with a long")."""
    found = sentences(text)
    if cut_short and found and not found[-1].rstrip("\"'”’)*").endswith(_ENDS):
        found.pop()
    return found


# A phrase of four or more words said again at once, after a comma or "and": a small model's loop.
_SAID_AGAIN = re.compile(r"\b((?:\w+\W+){3,}?\w+)(,?\s+(?:and\s+)?)\1\b", re.IGNORECASE | re.UNICODE)


def said_once(text: str) -> str:
    """The text with a phrase repeated at once said once ("the need for shores, and the need for shores")."""
    while (shorter := _SAID_AGAIN.sub(r"\1", text)) != text:
        text = shorter
    return text


def distinct(sentences_: list[str]) -> list[str]:
    """The sentences that say something the earlier ones did not: one whose content words an earlier sentence
    holds (by SUPPORT, as `supported` weighs a source) repeats it. Small models loop across a batch: "The video
    begins with ..." three times in one summary."""
    kept: list[str] = []
    for sentence in sentences_:
        if not any(overlap(sentence, k) >= SUPPORT for k in kept):
            kept.append(sentence)
    return kept


# Chinese and Japanese put no spaces between words: their text is counted two characters to a word, about a word's
# length in Chinese (Korean puts spaces between words and is counted by them).
_UNSPACED = re.compile(f"[{HAN_KANA}]")


def first_words(text: str, n: int) -> str:
    """The text's first `n` words, with "…" where it was cut."""
    units: list[tuple[str, bool]] = []  # (a word or two characters, joined to the one before it)
    for token in text.split():
        if _UNSPACED.search(token):
            units += [(token[i:i + 2], i > 0) for i in range(0, len(token), 2)]
        else:
            units.append((token, False))
    kept = "".join(unit if joined or not i else f" {unit}" for i, (unit, joined) in enumerate(units[:n]))
    return kept + (" …" if len(units) > n else "")
