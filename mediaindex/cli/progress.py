"""How `mediaindex ingest` shows progress: a live display on a terminal, plain lines otherwise."""

from __future__ import annotations

import time
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from mediaindex.cli.render import clip_words, plural
from mediaindex.pipeline.discover import NOT_MEDIA, shown
from mediaindex.pipeline.progress import IngestStats, clock, media_time
from mediaindex.pipeline.run import FileOutcome

PLAIN_EVERY = 10.0  # seconds between progress lines when not on a terminal
BAR = 20  # characters of the live display's bar
MIN_NOW = 16  # characters below which the files in the stages are not shown (the counts always are)


def not_media(o: FileOutcome) -> bool:
    """A file of a walked folder left out for its type or a dot name: counted, listed only with -v."""
    return o.status == "skipped" and o.reason.startswith(NOT_MEDIA)


def summary_line(indexed: int, segments: int | None, summarised: int, unchanged: int, skipped: int, failed: int,
                 left_out: int, job_id: str, verbose: bool = False, globbed: int = 0) -> str:
    """The last line of an ingest: every count named once, in the words of the lines above it, parts with
    nothing to say left out (segments: None when not known, as for a job run by a server)."""
    counted = f" ({plural(segments, 'segment')})" if segments is not None else ""
    parts = [f"{plural(indexed, 'file')} indexed{counted}"] if indexed else []
    if summarised:
        parts.append(f"{summarised} summarised")
    if unchanged:
        parts.append(f"{unchanged} already indexed")
    if skipped:
        parts.append(f"{skipped} skipped")
    if failed:
        parts.append(f"{failed} failed")
    if left_out:
        parts.append(f"{plural(left_out, 'file')} left out as not media" + ("" if verbose else " (-v lists them)"))
    if globbed:
        parts.append(f"{plural(globbed, 'media file')} left out by --include/--exclude")
    return f"done: {', '.join(parts) or 'nothing to index'} (job {job_id})"


class IngestDisplay:
    def __init__(self, console: Console, verbose: bool = False) -> None:
        self.console = console
        self.verbose = verbose
        self.interactive = console.is_terminal
        self.job_id: str | None = None
        self._last_line = 0.0
        # The description holds file names: shown as written, never read as markup ("talk [final].mp4").
        self.progress = Progress(
            TextColumn("[bold]ingest"), BarColumn(bar_width=BAR), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.description}", markup=False), console=console, disable=not self.interactive,
        )
        self.task = self.progress.add_task("", total=None)

    def __enter__(self) -> IngestDisplay:
        self.progress.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.progress.__exit__(exc_type, exc, tb)

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
            self._print(f"indexed    {path}: {plural(o.segments, 'segment')}{notes}")
        elif o.status == "summarised":
            self.progress.advance(self.task)
            self._print(f"summarised {path}: {plural(o.segments, 'summary and chapter segment')} added")
        elif o.status == "unchanged":
            self._print(f"unchanged  {path}: {shown(o.reason)}")
        elif not_media(o):
            if self.verbose:
                self._print(f"left out   {path}: {shown(o.reason)}")
        elif o.status == "skipped":
            self._print(f"skipped    {path}: {shown(o.reason)}")
        else:
            if o.status == "failed":
                self.progress.advance(self.task)
            self._print(f"failed     {path}: {shown(o.reason)}", style="red")

    def on_tick(self, stats: IngestStats) -> None:
        if self.interactive:
            speeds = " ".join(stats.speeds())
            eta = f"ETA {clock(stats.eta)} " if stats.eta is not None else ""
            status = f"{media_time(stats.media)} {eta}{speeds}".rstrip()
            # The counts, the bar and the time stay whole; the stages' speeds and then the files in the stages
            # take the room the line has left.
            room = self.console.width - len("ingest") - BAR - 2 * len(str(stats.total)) - 1 - len("0:00:00") - 10
            if len(status) > room:
                status = f"{media_time(stats.media)} {eta}".rstrip()
            room -= len(status) + 3
            now = clip_words(stats.now(), room) if stats.working and room >= MIN_NOW else ""
            self.progress.update(self.task, description=status + (f" · {now}" if now else ""))
            return
        finished = stats.finished >= stats.total
        if finished or time.monotonic() - self._last_line >= PLAIN_EVERY:
            self._last_line = time.monotonic()
            self._print(stats.line())
