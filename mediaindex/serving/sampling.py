"""Sampling parameters and the sampler that turns last-token logits into next tokens."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from mediaindex.serving.errors import InvalidRequestError
from mediaindex.serving.guided import Guide

# Beyond these the request is almost certainly a mistake (a swapped argument, a percentage for a probability).
MAX_TEMPERATURE = 100.0
MAX_NEW_TOKENS = 1_000_000


@dataclass
class SamplingParams:
    """How to pick tokens for one request. temperature == 0 means greedy."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0  # 0 disables top-k
    max_tokens: int = 64
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    ignore_eos: bool = False
    # report log p(prompt token i+1 | tokens <= i) and the top token at each prompt position (perplexity, agreement)
    prompt_logprobs: bool = False
    # the output must match this grammar (guided decoding); None = free text
    guide: Guide | None = None

    def __post_init__(self) -> None:
        self.validate()

    def validate(self, vocab_size: int | None = None) -> None:
        """Raise InvalidRequestError naming the first bad value."""
        t = self.temperature
        if not isinstance(t, (int, float)) or math.isnan(t) or not 0.0 <= t <= MAX_TEMPERATURE:
            raise InvalidRequestError(f"temperature must be between 0 and {MAX_TEMPERATURE}, got {t!r}")
        if not isinstance(self.top_p, (int, float)) or math.isnan(self.top_p) or not 0.0 < self.top_p <= 1.0:
            raise InvalidRequestError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not isinstance(self.top_k, int) or self.top_k < 0:
            raise InvalidRequestError(f"top_k must be a non-negative integer (0 = off), got {self.top_k!r}")
        if vocab_size is not None and self.top_k > vocab_size:
            raise InvalidRequestError(f"top_k={self.top_k} exceeds the vocabulary size {vocab_size}")
        if not isinstance(self.max_tokens, int) or not 1 <= self.max_tokens <= MAX_NEW_TOKENS:
            raise InvalidRequestError(f"max_tokens must be an integer in [1, {MAX_NEW_TOKENS}], got {self.max_tokens!r}")
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        if any(not isinstance(s, str) or s == "" for s in self.stop):
            raise InvalidRequestError(f"stop must be a list of non-empty strings, got {self.stop!r}")
        if self.seed is not None and (not isinstance(self.seed, int) or not 0 <= self.seed < 2**63):
            raise InvalidRequestError(f"seed must be a non-negative 64-bit integer, got {self.seed!r}")
        if isinstance(self.guide, dict):  # as it comes back from dataclasses.asdict
            self.guide = Guide(**self.guide)
        if self.guide is not None and not isinstance(self.guide, Guide):
            raise InvalidRequestError(f"guide must be a Guide (an EBNF grammar), got {type(self.guide).__name__}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


class Sampler:
    """Greedy rows are sampled in one argmax; stochastic rows each use their request's own generator.

    A per-request generator (seeded from SamplingParams.seed) makes a seeded request reproducible no matter which
    other requests share its batch.
    """

    def __call__(
        self, logits: torch.Tensor, params: list[SamplingParams], generators: list[torch.Generator | None]
    ) -> list[int]:
        logits = logits.float()
        out = logits.argmax(dim=-1).tolist()
        for row, p in enumerate(params):
            if p.greedy:
                continue
            # Per-request generators live on the CPU; one vocabulary-sized row per sampled request is cheap to move.
            out[row] = self._sample_row(logits[row].cpu(), p, generators[row])
        return out

    @staticmethod
    def _sample_row(logits: torch.Tensor, p: SamplingParams, gen: torch.Generator | None) -> int:
        logits = logits / p.temperature
        if p.top_k:
            kth = torch.topk(logits, p.top_k).values[-1]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if p.top_p < 1.0:
            sorted_logits, order = torch.sort(logits, descending=True)
            probs = sorted_logits.softmax(-1)
            # Keep the smallest prefix whose mass reaches top_p (always at least the best token).
            drop = probs.cumsum(-1) - probs >= p.top_p
            sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
            logits = torch.full_like(logits, float("-inf")).scatter(0, order, sorted_logits)
        probs = logits.softmax(-1)
        return int(torch.multinomial(probs, 1, generator=gen).item())
