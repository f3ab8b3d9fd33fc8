"""Prompt scoring: the log-probability of each prompt token given the ones before it, for requests that ask."""

from __future__ import annotations

import torch

from mediaindex.serving.model_runner import LogitRows


def record_prompt_logprobs(rows: LogitRows, logits: torch.Tensor) -> None:
    """Extend the request's prompt log-probabilities (and the model's top token at each position) by the prompt
    positions these logit rows cover."""
    seq = rows.seq
    ids = seq.prompt_ids
    # Positions already scored (before a preemption, or via shared prefix pages skipped) are not repeated.
    lo = max(rows.first_pos, len(seq.prompt_logprobs))
    hi = min(rows.first_pos + rows.count, len(ids) - 1)
    if lo >= hi or lo != len(seq.prompt_logprobs):
        return
    part = logits[rows.first_row + lo - rows.first_pos : rows.first_row + hi - rows.first_pos].float()
    targets = torch.tensor(ids[lo + 1 : hi + 1], device=part.device)
    logprobs = part.log_softmax(-1)
    seq.prompt_logprobs.extend(logprobs.gather(1, targets[:, None])[:, 0].tolist())
    seq.prompt_argmax.extend(logprobs.argmax(-1).tolist())
