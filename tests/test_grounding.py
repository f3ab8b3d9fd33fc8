"""The lexical checks that keep generated text tied to its sources, in scripts written without spaces between
words (Chinese, Japanese) or with particles joined to them (Korean), over the reference transcripts of real
recordings."""

from __future__ import annotations

from pathlib import Path

import pytest

from mediaindex.agents.grounding import grounded, overlap, relevant, repetitive, sentences, supported, terms
from tests.conftest import media

VAL = Path(media("audio/jfk.flac")).parents[2] / "media-val"


def _reference(locale: str) -> str:
    """What is read in media-val's ko_portal_projects.wav or de_portal_projects.wav (its reference transcript)."""
    path = VAL / "groundtruth" / f"azure_customspeech_{locale}_training_trans.txt"
    if not path.is_file():
        pytest.skip(f"{path} is not there")
    line = next(ln for ln in path.read_text(encoding="utf-8-sig").splitlines() if ln.startswith("audio1.wav"))
    return line.split("\t", 1)[1]


def _korean_reference() -> list[str]:
    """The seven sentences read in ko_portal_projects.wav."""
    return sentences(_reference("ko-KR"))


def _manifest_text(name: str) -> str:
    """A file's reference text from ../shared/media's MANIFEST.md (its last column)."""
    row = next(ln for ln in Path(media("MANIFEST.md")).read_text(encoding="utf-8").splitlines()
               if ln.startswith(f"| {name} |"))
    return row.strip().strip("|").split("|")[-1].strip()


def test_korean_sentences_are_split_and_compared_inside_their_words() -> None:
    said = _korean_reference()
    assert len(said) == 7 and said[5].startswith("프로젝트를 만든 후 4개 탭이 표시됩니다")
    source = said[5]  # "프로젝트를 만든 후 4개 탭이 표시됩니다: 데이터, 테스트, 학습 및 배포."
    # The same words with other particles and endings: held by the source (before, 0.17: "데이터와", "테스트와",
    # "학습과" were words of their own).
    answer = "프로젝트를 만들면 데이터와 테스트와 학습과 배포 탭이 나타납니다."
    assert overlap(answer, source) >= 0.6 and grounded(answer, source)
    # Sentences of the same recording about something else, and a claim about nothing in it.
    for other in (said[1], said[2], "서울은 한국의 수도입니다."):
        assert not grounded(other, source) and not supported(other, source), (other, overlap(other, source))
    assert supported(source, " ".join(said))
    # A question's own words count neither way: the answer must add what the source holds.
    assert overlap("탭은 데이터, 테스트, 학습 및 배포입니다.", source, given="어떤 탭이 표시됩니까?") >= 0.6


def test_chinese_is_compared_by_pairs_of_characters() -> None:
    heard = "扎自己的脚"  # Whisper base's transcript of ../shared/media's chinese.flac
    reference = _manifest_text("chinese.flac")
    assert reference == "砸自己的脚"
    assert terms(reference) == ["砸自", "自己", "己的", "的脚"]
    assert overlap(reference, heard) == pytest.approx(0.75)
    assert overlap("我们今天去北京", heard) == 0.0
    # A query of Chinese words shares most of its pairs with the hit that holds them.
    assert relevant("自己的脚", heard, score=0.0, min_score=0.5)
    assert not relevant("北京天气", heard, score=0.0, min_score=0.5)


def test_sentences_end_at_full_width_stops_and_before_letters_without_capitals() -> None:
    text = "첫 번째 프로젝트입니다. 두 번째입니다. 他扎了自己的脚。我们今天去北京！ It ends. and goes on. Yes."
    assert sentences(text) == ["첫 번째 프로젝트입니다.", "두 번째입니다.", "他扎了自己的脚。", "我们今天去北京！",
                               "It ends. and goes on.", "Yes."]


def test_a_loop_in_korean_is_repetitive_and_latin_words_keep_their_stems() -> None:
    assert repetitive("프로젝트 프로젝트 프로젝트 프로젝트 프로젝트 프로젝트")
    assert not repetitive(_korean_reference()[0])
    assert terms("Communists asked the workers") == ["commu", "ask", "worke"]
    # A word of Latin letters joined to a particle keeps its own stem beside the run's characters.
    assert terms("ComfyUI를 설치합니다") == ["를", "comfy", "설치", "치합", "합니", "니다"]


def test_a_korean_key_word_title_lists_words_without_their_particles() -> None:
    from mediaindex.agents.summarize import keyword_title, korean_bases

    # Before: "데이터, 사용하는, 프로젝트를, 만들려면", "프로젝트" counted apart with each of its particles.
    assert keyword_title(" ".join(_korean_reference())) == "음성, 프로젝트, 사용하는, 만들려면"
    assert korean_bases(["프로젝트를", "프로젝트는", "프로젝트로", "데이터"]) == ["프로젝트"] * 3 + ["데이터"]
    # A noun of its own is kept whole ("사용자", a user, is not "사용", use, with an ending), and a verb with its ending.
    assert korean_bases(["사용자", "사용하는", "국가"]) == ["사용자", "사용하는", "국가"]


def test_a_chapters_first_sentence_ends_at_a_full_width_stop() -> None:
    from mediaindex.agents.summarize import _first_sentence

    # Before: a Chinese reply was one "sentence" up to 400 characters, the chapter summary all of it.
    assert _first_sentence("视频里有人扎了自己的脚。然后他去了医院。") == "视频里有人扎了自己的脚。"
    assert _first_sentence("It costs 3.5 dollars! Then it rains.") == "It costs 3.5 dollars!"
    assert _first_sentence("Cut short in the midd", cut_short=True) == ""


def test_function_words_of_spanish_french_and_german_count_neither_way() -> None:
    # Before: "los", "del", "pour", "dans", "für", "auf" were content words, held by any text of the language.
    assert overlap("Los perros del parque", "perros en un parque") == 1.0
    assert overlap("Les chiens jouent dans le parc pour leur plaisir", "plaisir: chiens, parc, jouent") == 1.0
    assert overlap("Für die Aussicht auf das Ufer", "Aussicht Ufer") == 1.0


def test_a_key_word_title_writes_its_words_as_the_text_does() -> None:
    from mediaindex.agents.summarize import keyword_title

    # Before: "Daten, projekt, registerkarten, bereitstellung" and "Fellow, americans, country, kennedy".
    assert keyword_title(_reference("de-DE")) == "Daten, Projekt, Registerkarten, Bereitstellung"
    jfk = "And so my fellow Americans, ask not what your country can do for you. Kennedy said it. Kennedy."
    assert keyword_title(jfk) == "Fellow, Americans, country, Kennedy"
    # A common word capitalised at a sentence's start is written as it is elsewhere.
    assert keyword_title("They unite. Workers of the world, the workers say.") == "Unite, workers, world"


def test_an_extract_of_chinese_or_japanese_is_cut_at_its_length_in_words() -> None:
    from mediaindex.agents.grounding import first_words

    # Before: Chinese speech is one "word" per segment, so 30 words of a window were all of it.
    chinese = "大家好今天我们来谈谈巴黎公社的历史 它发生在一八七一年的春天 工人们占领了城市"
    assert first_words(chinese, 5) == "大家好今天我们来谈谈 …"
    assert first_words("視聴者の皆さん、こんにちは", 3) == "視聴者の皆さ …"
    assert first_words("이 도구를 사용하면 모든 오디오", 3) == "이 도구를 사용하면 …"  # Korean is spaced: by its words
    assert first_words("And so my fellow Americans", 3) == "And so my …"
    assert first_words("And so my", 3) == "And so my"
