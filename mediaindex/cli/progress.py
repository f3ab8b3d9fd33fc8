"""How `mediaindex ingest` shows progress: a live display on a terminal, plain lines otherwise."""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from mediaindex.ingest.discover import shown
from mediaindex.ingest.progress import IngestStats, _dur
from mediaindex.ingest.run import FileOutcome

PLAIN_EVERY = 10.0  # seconds between progress lines when not on a terminal


class IngestDisplay:
    def __init__(self, console: Console) -> None:
        self.console = console
        self.interactive = console.is_terminal
        self.job_id: str | None = None
        self._last_line = 0.0
        self.progress = Progress(
            TextColumn("[bold]ingest"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.description}"), console=console, disable=not self.interactive,
        )
        self.task = self.progress.add_task("", total=None)

    def __enter__(self) -> IngestDisplay:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(*exc)

    def _print(self, text: str, style: str | None = None) -> None:
        self.console.print(text, highlight=False, markup=False, soft_wrap=True, style=style)

    def on_job(self, job_id: str) -> None:
        self.job_id = job_id
        self._print(f"job {job_id}")

    def on_plan(self, n: int) -> None:
        self.progress.update(self.task, total=n)

    def on_file(self, o: FileOutcome) -> None:
        path = shown(o.path)  # one line per file, whatever its name holds
        if o.status == "indexed":
            self.progress.advance(self.task)
            notes = f" ({'; '.join(o.notes)})" if o.notes else ""
            self._print(f"indexed  {path}: {o.segments} segments{notes}")
        elif o.status == "summarised":
            self.progress.advance(self.task)
            self._print(f"summarised {path}: {o.segments} summary and chapter segments added")
        elif o.status in ("unchanged", "skipped"):
            self._print(f"skipped  {path}: {shown(o.reason)}")
        else:
            if o.status == "failed":
                self.progress.advance(self.task)
            self._print(f"failed   {path}: {shown(o.reason)}", style="red")

    def on_tick(self, stats: IngestStats) -> None:
        if self.interactive:
            speeds = " ".join(f"{s.name} {s.speed:.1f}x" for s in stats.stages if s.speed is not None)
            eta = f"ETA {_dur(stats.eta)} " if stats.eta is not None else ""
            self.progress.update(self.task, description=f"{stats.media / 3600:.2f} media h {eta}{speeds}")
            return
        finished = stats.finished >= stats.total
        if finished or time.monotonic() - self._last_line >= PLAIN_EVERY:
            self._last_line = time.monotonic()
            self._print(stats.line())
