"""The named points of an engine step where small hooks run, so that the step itself reads as the algorithm
(schedule, run, update) and each concern lives beside its own data:

- after the forward: prompt scoring (`prompt_logprobs`) for requests that asked for it;
- before sampling: the logits may be narrowed to what each request may say (`guided.GuideHook.mask`);
- after sampling: the integrity verdicts name requests whose page ids failed their check
  (`integrity.read_verdicts`);
- after each token a request gets: token hooks may end it (`stopping.StopConditions`,
  `guided.GuideHook.after_token`);
- when a request ends, before its pages go back: release hooks (a prefill worker exports the K/V there).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mediaindex.serving.sequence import Sequence


@dataclass(frozen=True)
class Finish:
    """A token hook's verdict: the request ends here."""

    reason: str  # "stop" | "length" | "error"
    error: Exception | None = None


# Called with the request that just got `token` (already appended to its output).
TokenHook = Callable[[Sequence, int], Finish | None]
# Called with a request that has just finished (`finish_reason` set) and still holds its pages.
ReleaseHook = Callable[[Sequence], None]


def first_verdict(verdicts: list[Finish]) -> Finish | None:
    """The verdict that decides how a request ends when several hooks end it at once: an error beats a stop."""
    errors = [v for v in verdicts if v.error is not None]
    chosen = errors or verdicts
    return chosen[0] if chosen else None
