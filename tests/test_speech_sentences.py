"""Sentences cut from word timestamps (pure functions; the real transcripts are checked in test_speech)."""

from __future__ import annotations

from mediaindex.models.sentences import TimedWord, sentence_text, sentences
from mediaindex.segments import join_words


def _words(text: str, start: float = 0.0, step: float = 0.4, language: str = "en",
           pauses: dict[int, float] | None = None) -> list[TimedWord]:
    out, t = [], start
    for i, word in enumerate(text.split()):
        t += (pauses or {}).get(i, 0.0)
        out.append(TimedWord(round(t, 3), round(t + step - 0.05, 3), word, 0.9, -0.2, 0.01, language))
        t += step
    return out


def _texts(groups: list[list[TimedWord]]) -> list[str]:
    return [sentence_text(g) for g in groups]


def test_sentences_end_at_punctuation_and_keep_every_word() -> None:
    words = _words("Hello there my friend. This is an example video for you. Dr. Smith said so too today!")
    groups = sentences(words)
    assert _texts(groups) == ["Hello there my friend.", "This is an example video for you.",
                              "Dr. Smith said so too today!"]  # "Dr." is no sentence end
    assert [w for g in groups for w in g] == words


def test_a_spoken_web_address_ends_its_sentence_before_a_capital() -> None:
    words = _words("You can find the text version of this audiobook at www .muxas .org Workers of the World United")
    assert _texts(sentences(words)) == ["You can find the text version of this audiobook at www .muxas .org",
                                        "Workers of the World United"]
    # Inside a sentence, or before a word that is not capitalised, an address ends nothing.
    words = _words("Go to example.org for the rest of the text and read it")
    assert len(sentences(words)) == 1
    words = _words("I read wikipedia.org Yes that is right")  # too short to stand alone: joined again
    assert len(sentences(words)) == 1


def test_short_sentences_join_the_closer_neighbour_but_not_across_a_long_pause() -> None:
    words = _words("Hello. This is an example video for you. Yes.", pauses={8: 20.0})
    assert _texts(sentences(words)) == ["Hello. This is an example video for you.", "Yes."]


def test_a_quick_whole_sentence_stands_alone_a_fragment_does_not() -> None:
    # "Workers of the world unite." said in 1.4 s after a spoken address is a sentence of its own (a
    # translation of it finds it there); three quick words without a full stop are a fragment and join.
    address = _words("You can find the text at www .muxists .org")
    quick = _words("Workers of the world unite.", start=address[-1].end + 0.6, step=0.28)
    assert quick[-1].end - quick[0].start < 1.5
    assert _texts(sentences(address + quick)) == ["You can find the text at www .muxists .org",
                                                  "Workers of the world unite."]
    said = _words("This is an example video for you.")
    fragment = _words("Yes it is", start=said[-1].end + 0.3, step=0.35)
    assert len(sentences(said + fragment)) == 1


def test_long_sentences_are_cut_at_their_widest_pause() -> None:
    text = " ".join(f"w{i}," if i == 20 else f"w{i}" for i in range(60))  # 24 s without a full stop
    groups = sentences(_words(text, pauses={21: 0.8, 40: 0.3}), max_seconds=12.0)
    assert all(g[-1].end - g[0].start <= 12.0 for g in groups)
    assert groups[0][-1].text == "w20,"  # the pause after the comma, not the middle of a phrase
    assert sum(len(g) for g in groups) == 60


def test_a_change_of_language_ends_a_sentence() -> None:
    words = _words("the above copyright notice shall be included", language="en") + \
        _words("Jeden der diese Software erhält", start=3.3, language="de")
    groups = sentences(words)
    assert [(g[0].language, len(g)) for g in groups] == [("en", 7), ("de", 5)]


def test_unspaced_languages_join_without_spaces() -> None:
    assert join_words(["砸", "自己", "的", "脚"], "zh") == "砸自己的脚"
    assert join_words(["ask", "not", ""], "en") == "ask not"
