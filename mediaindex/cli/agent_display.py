"""How `summarize` and `ask` show their work: a live status line on a terminal (step, tool call, tokens), the
result as rendered Markdown; plain Markdown when the output is not a terminal."""

from __future__ import annotations

import time
from types import TracebackType

from rich.console import Console
from rich.markdown import Markdown
from rich.status import Status

from mediaindex.agents.events import AgentEvent

# Event kinds worth a line of their own (the rest only update the status line).
_LINES = {"tool_call": "→", "error": "!", "fallback": "↺"}


class AgentDisplay:
    def __init__(self, console: Console, what: str) -> None:
        self.console = console
        self.live = console.is_terminal
        self.what = what
        self.began = time.monotonic()
        self.tokens = 0
        self.step = 0
        self.status: Status | None = None

    def __enter__(self) -> AgentDisplay:
        if self.live:
            self.status = self.console.status(self._line("starting"), spinner="dots")
            self.status.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.status is not None:
            self.status.__exit__(exc_type, exc, tb)

    def _line(self, text: str) -> str:
        took = time.monotonic() - self.began
        step = f"step {self.step} · " if self.step else ""
        return f"[bold]{self.what}[/] {step}{self.tokens} tokens · {took:.0f} s · {_escape(text)}"

    def __call__(self, event: AgentEvent) -> None:
        if not self.live:
            return
        self.tokens = max(self.tokens, event.tokens)
        self.step = event.step or self.step
        if event.kind in _LINES:
            self.console.print(f"  {_LINES[event.kind]} {event.text}", style="dim", highlight=False, markup=False)
        if self.status is not None:
            self.status.update(self._line(event.text))


def _escape(text: str) -> str:
    return text.replace("[", "\\[")


def show_markdown(console: Console, markdown: str) -> None:
    """Rendered on a terminal; as it is (plain Markdown) into a pipe or file."""
    if console.is_terminal:
        console.print(Markdown(markdown))
    else:
        console.file.write(markdown + "\n")  # as `print` writes it, with no live display
        console.file.flush()

