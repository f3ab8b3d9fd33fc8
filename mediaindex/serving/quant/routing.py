"""Token-to-expert slots sorted by expert: what every grouped experts path starts from.

A token routed to ``top_k`` experts makes ``top_k`` slots. Sorting the slots by expert makes each expert's rows
one contiguous run, so one grouped call per projection covers every expert. Everything here is tensor ops of
static shape on the input's device: no host sync, whatever the routing.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class SortedSlots:
    """``token_of[i]`` / ``weight_of[i]``: the token and routing weight of sorted slot ``i``. Expert ``e`` owns
    slots ``[ends[e-1], ends[e])``; slots past ``ends[-1]`` name no local expert (expert parallelism marks slots
    another device owns with an index outside ``[0, E)``) and must contribute nothing. ``inverse_order[j]`` is the
    sorted position of unsorted slot ``j`` (token ``j // top_k``, its ``j % top_k``-th choice)."""

    token_of: Tensor
    weight_of: Tensor
    ends: Tensor
    counts: Tensor
    inverse_order: Tensor


def sort_by_expert(top_k_index: Tensor, top_k_weights: Tensor, num_experts: int) -> SortedSlots:
    top_k = top_k_index.shape[-1]
    expert = top_k_index.reshape(-1)
    valid = (expert >= 0) & (expert < num_experts)
    expert = torch.where(valid, expert, torch.full_like(expert, num_experts))
    # Stable: within an expert, slots keep token order (the order the reference loop adds them in).
    order = torch.argsort(expert, stable=True)
    # scatter_add, not bincount: bincount on CUDA reads the largest index back to size its output (a host sync).
    counts = torch.zeros(num_experts + 1, dtype=torch.long, device=expert.device)
    counts = counts.scatter_add_(0, expert, torch.ones_like(expert))[:num_experts]
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(order.shape[0], device=order.device)
    return SortedSlots(
        token_of=order // top_k,
        weight_of=top_k_weights.reshape(-1)[order],
        ends=torch.cumsum(counts, 0),
        counts=counts,
        inverse_order=inverse,
    )
