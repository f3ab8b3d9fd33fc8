"""The `mediaindex` command line."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from mediaindex.config import Settings, load_settings
from mediaindex.errors import MediaIndexError

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Index video and audio archives; search them in plain language.")
index_app = typer.Typer(no_args_is_help=True, help="Maintain the index.")
app.add_typer(index_app, name="index")
out = Console()
err = Console(stderr=True)

IndexOpt = Annotated[
    Path | None,
    typer.Option("--index", help="Index directory (default: $MEDIAINDEX_INDEX_DIR or the per-user data directory)."),
]
ConfigOpt = Annotated[str | None, typer.Option("--config", help="Config profile (cpu, gpu) or a YAML file.")]


def _settings(config: str | None, index: Path | None) -> Settings:
    return load_settings(config, index_dir=index)


def _open_index(settings: Settings):  # -> tuple[MediaIndex, TextEmbedder]
    from mediaindex.index.index import MediaIndex
    from mediaindex.models.text_embed import load_text_embedder

    embedder = load_text_embedder(settings.embed)
    return MediaIndex(settings, embedder.dim, embedder.name), embedder


def _fail(message: str, code: int = 2) -> typer.Exit:
    err.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


@app.command()
def ingest(
    paths: Annotated[list[Path], typer.Argument(help="Media files or folders (searched recursively).")],
    index: IndexOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Index media files: transcribe, read and embed them so they can be searched."""
    from mediaindex.pipeline.ingest import FileOutcome
    from mediaindex.pipeline.ingest import ingest as run_ingest

    try:
        settings = _settings(config, index)
        media_index, _ = _open_index(settings)
    except MediaIndexError as exc:
        raise _fail(str(exc)) from exc
    interactive = err.is_terminal
    progress = Progress(TextColumn("[bold]ingest"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("{task.description}"), console=err, disable=not interactive)
    task = progress.add_task("", total=None)

    def on_plan(n: int) -> None:
        progress.update(task, total=n)

    def on_file(o: FileOutcome) -> None:
        name = o.path
        if o.status == "indexed":
            progress.advance(task)
            notes = f" ({'; '.join(o.notes)})" if o.notes else ""
            err.print(f"indexed  {name}: {o.segments} segments{notes}", highlight=False, markup=False, soft_wrap=True)
        elif o.status == "unchanged":
            err.print(f"skipped  {name}: {o.reason}", highlight=False, markup=False, soft_wrap=True)
        else:
            if o.status == "failed":
                progress.advance(task)
            err.print(f"failed   {name}: {o.reason}", highlight=False, markup=False, soft_wrap=True, style="red")

    try:
        with progress:
            report = run_ingest(list(paths), settings, media_index, progress=on_file, on_plan=on_plan)
    except MediaIndexError as exc:
        raise _fail(str(exc)) from exc
    finally:
        media_index.close()
    indexed, unchanged = len(report.indexed), len(report.by_status("unchanged"))
    failed = len(report.failed)
    err.print(f"done: {indexed} indexed, {unchanged} unchanged, {failed} failed or skipped", highlight=False)
    if indexed == 0 and unchanged == 0:
        raise typer.Exit(1)


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="What to look for, in any language.")],
    index: IndexOpt = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, max=1000, help="Number of hits.")] = 10,
    as_json: Annotated[bool, typer.Option("--json", help="Print hits as a JSON list.")] = False,
    video: Annotated[str | None, typer.Option("--video", help="Only this video id.")] = None,
    modality: Annotated[str | None, typer.Option("--modality", help="speech, ocr or visual.")] = None,
    config: ConfigOpt = None,
) -> None:
    """Search the index in plain language; hits are moments (file + time range)."""
    from mediaindex.index.search import search as run_search
    from mediaindex.index.store import SearchFilters

    if not query.strip():
        raise _fail("the search query is empty")
    try:
        settings = _settings(config, index)
        if not (settings.index_dir / "schema.json").exists():
            raise _fail(f"no index at {settings.index_dir}: run `mediaindex ingest PATH` first")
        media_index, embedder = _open_index(settings)
        try:
            filters = SearchFilters(video_id=video, modality=modality)
            hits = run_search(media_index, embedder, query, limit=limit, filters=filters)
        finally:
            media_index.close()
    except (MediaIndexError, ValueError) as exc:
        raise _fail(str(exc)) from exc
    if as_json:
        print(json.dumps([h.to_dict() for h in hits], ensure_ascii=False, indent=2))
        return
    if not hits:
        out.print("no hits")
        return
    table = Table(show_lines=False)
    for col in ("score", "file", "time", "modality", "text"):
        table.add_column(col)
    for h in hits:
        table.add_row(f"{h.score:.3f}", Path(h.source).name, f"{_ts(h.start)}–{_ts(h.end)}", h.modality, h.text[:120])
    out.print(table)


def _ts(t: float) -> str:
    m, s = divmod(t, 60)
    return f"{int(m)}:{s:04.1f}"


@app.command()
def models(config: ConfigOpt = None) -> None:
    """List each model role, what is configured and whether it loads."""
    from mediaindex.models.registry import check_models

    try:
        settings = load_settings(config)
    except MediaIndexError as exc:
        raise _fail(str(exc)) from exc
    table = Table()
    for col in ("role", "configured", "status"):
        table.add_column(col)
    ok = True
    for role, configured, status in check_models(settings):
        ok &= status.startswith("ok")
        table.add_row(role, configured, status)
    out.print(table)
    if not ok:
        raise typer.Exit(1)


def _run_agent_job(settings: Settings, kind: str, submit, as_json: bool) -> None:
    """Create the job record, run it here (the model in a Ray actor), print JSON or Markdown."""
    from mediaindex import agents

    if not (settings.index_dir / "schema.json").exists():
        raise _fail(f"no index at {settings.index_dir}: run `mediaindex ingest PATH` first")
    import ray

    ours = not ray.is_initialized()  # stop only a Ray this command started
    try:
        job_id = submit()
        run = agents.run_summarize_job if kind == agents.SUMMARIZE else agents.run_ask_job
        job = run(settings, job_id)
    except MediaIndexError as exc:
        raise _fail(str(exc)) from exc
    finally:
        if ours:
            ray.shutdown()
    if job.state != "done":
        raise _fail(f"{kind} job {job.id} {job.state}: {job.error}", code=1)
    if as_json:
        print(json.dumps({"job_id": job.id, **job.result["output"]}, ensure_ascii=False, indent=2))
    else:
        print(job.result["markdown"])
        err.print(f"job {job.id}", highlight=False)


@app.command()
def summarize(
    video: Annotated[str, typer.Argument(help="Video id, or the path / file name it was ingested from.")],
    index: IndexOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    config: ConfigOpt = None,
) -> None:
    """Summarise one indexed video with chapters; every claim cites its moments."""
    from mediaindex.agents import submit_summarize

    if not video.strip():
        raise _fail("no video given")
    try:
        settings = _settings(config, index)
    except MediaIndexError as exc:
        raise _fail(str(exc)) from exc
    _run_agent_job(settings, "summarize", lambda: submit_summarize(settings, video), as_json)


@app.command()
def ask(
    question: Annotated[str, typer.Argument(help="A question about the archive, in plain language.")],
    video: Annotated[str | None, typer.Option("--video", help="Only this video (id or path).")] = None,
    index: IndexOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the answer, citations and trace as JSON.")] = False,
    config: ConfigOpt = None,
) -> None:
    """Answer a question with cited moments, or say it is not in the archive."""
    from mediaindex.agents import submit_ask

    if not question.strip():
        raise _fail("the question is empty")
    try:
        settings = _settings(config, index)
    except MediaIndexError as exc:
        raise _fail(str(exc)) from exc
    _run_agent_job(settings, "ask", lambda: submit_ask(settings, question, video), as_json)


@index_app.command("stats")
def index_stats(index: IndexOpt = None, config: ConfigOpt = None) -> None:
    """Show what the index holds."""
    try:
        media_index, _ = _open_index(_settings(config, index))
    except MediaIndexError as exc:
        raise _fail(str(exc)) from exc
    try:
        videos = media_index.catalog.all()
        out.print(f"{len(videos)} files, {media_index.store.count()} segments in {media_index.dir}")
    finally:
        media_index.close()


@index_app.command("reset")
def index_reset(
    index: IndexOpt = None,
    config: ConfigOpt = None,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete the index (vectors, catalog, thumbnails) so it can be rebuilt by ingesting again."""
    import shutil

    settings = _settings(config, index)
    if not settings.index_dir.exists():
        out.print(f"nothing to reset at {settings.index_dir}")
        return
    if not yes and not typer.confirm(f"delete the index at {settings.index_dir}?"):
        raise typer.Exit(1)
    for name in ("qdrant", "thumbs", "catalog.db", "schema.json"):
        target = settings.index_dir / name
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
    out.print(f"index at {settings.index_dir} reset")


def main() -> None:
    logging.basicConfig(level=os.environ.get("MEDIAINDEX_LOG", "WARNING").upper(), format="%(levelname)s %(name)s: %(message)s")
    try:
        app()
    except MediaIndexError as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False)
        sys.exit(2)
