"""Guided decoding: a request may carry a grammar that its output must match.

Each guided request gets an xgrammar matcher. Before sampling, tokens the grammar cannot accept next are masked
out of that request's logits; after sampling, the matcher advances by the chosen token. When the grammar is
complete only end-of-sequence tokens remain allowed, so the request stops by itself. Unguided requests in the
same batch are untouched.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from mediaindex.serving.errors import InvalidRequestError, ServingError
from mediaindex.serving.hooks import Finish
from mediaindex.serving.stats import GUIDE, EngineStats

if TYPE_CHECKING:
    import xgrammar
    from transformers import PreTrainedTokenizerBase

    from mediaindex.serving.sequence import Sequence

MAX_GRAMMAR_CHARS = 200_000


@dataclass(frozen=True)
class Guide:
    """A grammar in xgrammar's EBNF dialect (rule `root` is the whole output). Plain text, so it travels with the
    request's SamplingParams to actors and across the prefill/decode handoff."""

    ebnf: str

    def __post_init__(self) -> None:
        if not isinstance(self.ebnf, str) or not self.ebnf.strip():
            raise InvalidRequestError("a guide needs a non-empty EBNF grammar")
        if len(self.ebnf) > MAX_GRAMMAR_CHARS:
            raise InvalidRequestError(f"the grammar has {len(self.ebnf)} characters, at most {MAX_GRAMMAR_CHARS}")

    @classmethod
    def json_schema(cls, schema: dict[str, Any] | str) -> Guide:
        """Output must be one JSON value matching the schema (compact separators, no free whitespace, so a small
        model cannot wander off into blank space)."""
        import xgrammar as xgr

        text = schema if isinstance(schema, str) else json.dumps(schema)
        try:
            grammar = xgr.Grammar.from_json_schema(text, any_whitespace=False)
        except Exception as exc:  # xgrammar reports schema errors as several exception types
            raise InvalidRequestError(f"invalid JSON schema for guided decoding: {exc}") from exc
        return cls(str(grammar))

    @classmethod
    def regex(cls, pattern: str) -> Guide:
        import xgrammar as xgr

        try:
            return cls(str(xgr.Grammar.from_regex(pattern)))
        except Exception as exc:
            raise InvalidRequestError(f"invalid regular expression for guided decoding: {exc}") from exc


class GuideCompiler:
    """Compiles guides against one tokenizer (compiled grammars are cached by xgrammar) and makes matchers."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, vocab_size: int, stop_ids: set[int]) -> None:
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.stop_ids = sorted(stop_ids)
        self._compiler: xgrammar.GrammarCompiler | None = None

    def _get_compiler(self) -> xgrammar.GrammarCompiler:
        if self._compiler is None:  # built on first use: reading the vocabulary takes a moment
            import xgrammar as xgr

            info = xgr.TokenizerInfo.from_huggingface(self.tokenizer, vocab_size=self.vocab_size,
                                                      stop_token_ids=self.stop_ids or None)
            self._compiler = xgr.GrammarCompiler(info, max_threads=1)
        return self._compiler

    def matcher(self, guide: Guide) -> xgrammar.GrammarMatcher:
        import xgrammar as xgr

        try:
            compiled = self._get_compiler().compile_grammar(guide.ebnf)
        except Exception as exc:
            raise InvalidRequestError(f"the guide's grammar does not compile: {exc}") from exc
        return xgr.GrammarMatcher(compiled)


def mask_disallowed(logits: torch.Tensor, seqs: list[Sequence]) -> torch.Tensor:
    """Logits (one row per sequence, float32) with every token its grammar forbids set to -inf."""
    rows = [i for i, s in enumerate(seqs) if s.matcher is not None]
    if not rows:
        return logits
    import xgrammar as xgr

    vocab = logits.shape[-1]
    bitmask = xgr.allocate_token_bitmask(len(seqs), vocab)
    for i in rows:
        seqs[i].matcher.fill_next_token_bitmask(bitmask, i)
    masked = logits.float()  # the rows were gathered by index: a copy, so masking in place is safe
    if masked.device.type not in ("cpu", "cuda"):  # xgrammar masks on these two
        masked = masked.cpu()
    xgr.apply_token_bitmask_inplace(masked, bitmask.to(masked.device), vocab_size=vocab, indices=rows)
    return masked


def advance(seq: Sequence, token: int) -> str | None:
    """Move the sequence's matcher past `token`; returns an error message if the grammar rejects it."""
    if seq.matcher is None or seq.matcher.is_terminated():
        return None
    if not seq.matcher.accept_token(token):
        return f"token {token} does not match the request's grammar"
    return None


class GuideHook:
    """Guided decoding at the step's two named points: before sampling it masks what each guided request's grammar
    forbids; after a token it advances that request's grammar. Both are timed as the "guide" phase."""

    def __init__(self, stats: EngineStats) -> None:
        self.stats = stats

    def mask(self, logits: torch.Tensor, seqs: list[Sequence]) -> torch.Tensor:
        with self.stats.timed(GUIDE):
            return mask_disallowed(logits, seqs)

    def after_token(self, seq: Sequence, token: int) -> Finish | None:
        with self.stats.timed(GUIDE):
            mismatch = advance(seq, token)
        # Cannot happen with a masked sample (only with a token sampled elsewhere); off-grammar text is never
        # handed out silently.
        return None if mismatch is None else Finish("error", ServingError(mismatch))
