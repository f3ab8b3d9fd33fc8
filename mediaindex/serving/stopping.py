"""When a request stops generating: the token hook that checks end-of-sequence tokens, stop strings and length."""

from __future__ import annotations

from collections.abc import Callable

from mediaindex.serving.hooks import Finish
from mediaindex.serving.sequence import Sequence


class StopConditions:
    """Ends a request on an end-of-sequence token (unless its params ignore them), on one of its stop strings (its
    text is cut before the first one found), or when it reaches max_tokens or the context limit."""

    def __init__(self, eos_ids: set[int], max_model_len: int, detokenize: Callable[[list[int]], str]) -> None:
        self.eos_ids = eos_ids
        self.max_model_len = max_model_len
        self.detokenize = detokenize

    def __call__(self, seq: Sequence, token: int) -> Finish | None:
        p = seq.params
        if not p.ignore_eos and token in self.eos_ids:
            return Finish("stop")
        if p.stop:
            text = self.detokenize(seq.output_ids)
            hits = [i for i in (text.find(s) for s in p.stop) if i >= 0]
            seq.text = text[: min(hits)] if hits else text
            if hits:
                return Finish("stop")
        if len(seq.output_ids) >= p.max_tokens or len(seq) >= self.max_model_len:
            return Finish("length")
        return None
