"""The query's language, where its letters or words say it plainly (models/text_language.py)."""

from __future__ import annotations

import pytest

from mediaindex.models.text_language import query_language


@pytest.mark.parametrize(("query", "language"), [
    ("Ein Gespenst geht um in Europa", "de"),
    ("Proletarier aller Länder, vereinigt euch", "de"),
    ("Wie backe ich einen Schokoladenkuchen", "de"),
    ("만국의 노동자여 단결하라", "ko"),
    ("앵무새", "ko"),  # one word is enough where the script says it
    ("幽霊がヨーロッパに出る", "ja"),
    ("Призрак бродит по Европе", "ru"),
    ("a spectre is haunting Europe", "en"),
    ("ask not what your country can do for you", "en"),
    ("un spectre hante l'Europe", "fr"),
    ("un fantasma recorre Europa", "es"),
])
def test_letters_and_common_words_name_the_language(query: str, language: str) -> None:
    assert query_language(query) == language


@pytest.mark.parametrize("query", [
    "Houston", "1813", "marxists.org", "Frederick Engels", "Angela Merkel", "press yard",  # names, numbers, short
    "Copyright 2013 Brandon Castellano",  # capitalised words are names, not Spanish ones
    "", "   ", "🙂🙂🙂", "xqzv plorth wimble",
])
def test_names_numbers_and_unknown_words_are_no_language(query: str) -> None:
    assert query_language(query) is None


def test_a_very_long_query_is_judged_by_its_words() -> None:
    assert query_language("the horizon seems extremely distant " * 2000) == "en"
