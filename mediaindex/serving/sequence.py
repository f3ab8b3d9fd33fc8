"""State of one request as it moves through the engine."""

from __future__ import annotations

import enum
import itertools
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:  # at run time a sequence only reads its params, so the modules below it may import this one
    from mediaindex.serving.sampling import SamplingParams


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


_counter = itertools.count()


@dataclass(eq=False)
class Sequence:
    """Token ids, progress and KV pages of a request.

    `num_computed` counts tokens whose K/V are in the cache; the tokens after it are what the next step feeds.
    """

    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    arrival: int = field(default_factory=lambda: next(_counter))
    arrival_time: float = field(default_factory=time.perf_counter)
    output_ids: list[int] = field(default_factory=list)
    status: Status = Status.WAITING
    num_computed: int = 0
    page_table: list[int] = field(default_factory=list)
    # (page, tag) pairs recorded when the pages were acquired; only filled when integrity checks are on.
    recorded_pages: list[int] = field(default_factory=list)
    recorded_tags: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    error: Exception | None = None
    text: str = ""
    num_preemptions: int = 0
    generator: torch.Generator | None = None
    num_emitted: int = 0  # output tokens already reported to the caller
    token_times: list[float] = field(default_factory=list)
    # chain hashes of this sequence's full pages, for prefix sharing (index i covers tokens [0, (i+1)*page_size))
    page_hashes: list[int] = field(default_factory=list)
    prompt_logprobs: list[float] = field(default_factory=list)
    prompt_argmax: list[int] = field(default_factory=list)
    matcher: Any = None  # xgrammar GrammarMatcher of a guided request (its state follows output_ids)

    def __post_init__(self) -> None:
        if self.params.seed is not None:
            self.generator = torch.Generator().manual_seed(self.params.seed)

    @property
    def all_ids(self) -> list[int]:
        return self.prompt_ids + self.output_ids

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    @property
    def num_pending(self) -> int:
        return len(self) - self.num_computed

    @property
    def in_prefill(self) -> bool:
        return self.num_pending > 1

    @property
    def finished(self) -> bool:
        return self.status is Status.FINISHED

    def reset_for_recompute(self) -> None:
        """After preemption: the pages are gone, so everything (prompt and generated tokens) is recomputed."""
        self.num_computed = 0
        self.page_table = []
        self.recorded_pages = []
        self.recorded_tags = []
        self.page_hashes = []
        self.num_preemptions += 1


def is_decode(seq: Sequence, num_tokens: int) -> bool:
    """Whether scheduling `num_tokens` of seq is a decode: feeding back one generated token whose prompt is in the
    cache. Everything else (prompt chunks, recomputation after preemption) is prefill."""
    return num_tokens == 1 and seq.num_computed >= len(seq.prompt_ids)
