"""Split words that OCR ran together on stylised titles ("Manifestoofthe" -> "Manifesto of the").

Keyword search needs real words; the split uses wordninja's English unigram costs and is applied
only when the run-together token is not itself a word and every piece is one.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import wordninja

_WORD = re.compile(r"[A-Za-z]+")
_MIN_SPLIT_LEN = 6  # shorter tokens are names or abbreviations far more often than merged words
_SHORT_PIECE_RANK = 3000  # a piece of 2-4 letters must be this common ("of", "the"), not "sy" or "fier"


@lru_cache(maxsize=1)
def _model() -> wordninja.LanguageModel:
    import wordninja

    return wordninja.DEFAULT_LANGUAGE_MODEL


def _is_word(token: str) -> bool:
    return token.lower() in _model()._wordcost


def _is_common(piece: str) -> bool:
    model = _model()
    # wordninja's cost is log(rank * log(vocabulary size)), so a cost bound is a rank bound.
    bound = math.log(_SHORT_PIECE_RANK * math.log(len(model._wordcost)))
    return model._wordcost.get(piece.lower(), math.inf) <= bound


def split_word(token: str) -> list[str]:
    """The pieces of one alphabetic token; the token itself when it should stay whole."""
    if len(token) < _MIN_SPLIT_LEN or not token.isascii() or not token.isalpha() or _is_word(token):
        return [token]
    # Camel case ("CommunistParty") marks the word boundaries itself.
    camel = re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+", token)
    if len(camel) > 1 and "".join(camel) == token and all(_is_word(p) for p in camel):
        pieces = [q for p in camel for q in split_word(p)]
        return pieces
    pieces = _model().split(token)
    if len(pieces) < 2 or not all(len(p) > 1 and _is_word(p) and (len(p) > 4 or _is_common(p)) for p in pieces):
        return [token]
    return pieces


def normalise_text(text: str) -> str:
    """OCR text with run-together words split ("CommunistParty" -> "Communist Party") and an
    ampersand between words spaced ("Marx&Engels" -> "Marx & Engels"); everything else kept."""
    text = _WORD.sub(lambda m: " ".join(split_word(m.group())), text)
    return re.sub(r"(?<=\w)&(?=\w)", " & ", text)
