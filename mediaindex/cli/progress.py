"""How `mediaindex ingest` shows progress: a live display on a terminal, plain lines otherwise."""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from mediaindex.ingest.progress import IngestStats, _dur
from mediaindex.ingest.run import FileOutcome

PLAIN_EVERY = 10.0  # seconds between progress lines when not on a terminal


def plural(n: int, noun: str, many: str | None = None) -> str:
    """'1 segment', '84 segments' (an irregular plural is given: plural(2, 'summary', 'summaries'))."""
    return f"{n} {noun if n == 1 else (many or noun + 's')}"


def summary_line(indexed: int, segments: int, summarised: int, unchanged: int, failed: int, ignored: int,
                 job_id: str) -> str:
    """The last line of an ingest: every count named once, parts with nothing to say left out."""
    parts = [f"{plural(indexed, 'file')} indexed ({plural(segments, 'segment')})"] if indexed else []
    if summarised:
        parts.append(f"{summarised} summarised")
    if unchanged:
        parts.append(f"{unchanged} already indexed")
    if failed:
        parts.append(f"{failed} failed")
    if ignored:
        parts.append(f"{plural(ignored, 'file')} not media (images, subtitles, …) left out")
    return f"done: {', '.join(parts) or 'nothing to index'} (job {job_id})"


class IngestDisplay:
    def __init__(self, console: Console, verbose: bool = False) -> None:
        self.console = console
        self.verbose = verbose
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
        if o.status == "indexed":
            self.progress.advance(self.task)
            notes = f" ({'; '.join(o.notes)})" if o.notes else ""
            self._print(f"indexed    {o.path}: {plural(o.segments, 'segment')}{notes}")
        elif o.status == "summarised":
            self.progress.advance(self.task)
            self._print(f"summarised {o.path}: {plural(o.segments, 'summary and chapter segment')} added")
        elif o.status == "unchanged":
            self._print(f"unchanged  {o.path}: {o.reason}")
        else:
            if o.status == "failed":
                self.progress.advance(self.task)
            self._print(f"{o.status:<10} {o.path}: {o.reason}", style="red")

    def on_ignored(self, paths: list[str]) -> None:
        """Files in walked folders that are not media by their type: listed with -v, counted always."""
        if self.verbose:
            for path in paths:
                self._print(f"not media  {path}")

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
