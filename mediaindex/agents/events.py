"""What a running job tells whoever watches it: one event per step, model call or tool call."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class AgentEvent:
    kind: str  # "step", "model", "tool_call", "tool_result", "error", "fallback", "final", "stage"
    text: str  # one line for a person ("search “budget”", "map: 4 windows")
    step: int = 0
    tokens: int = 0  # generated tokens of the job so far


OnEvent = Callable[[AgentEvent], None]


def ignore(event: AgentEvent) -> None:
    """The default listener."""
