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
keys_app = typer.Typer(no_args_is_help=True, help="Manage API keys for `mediaindex serve`.")
app.add_typer(keys_app, name="keys")
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


@app.command()
def serve(
    index: IndexOpt = None,
    config: ConfigOpt = None,
    host: Annotated[str | None, typer.Option("--host", help="Address to listen on (default: api.host, loopback).")] = None,
    port: Annotated[int | None, typer.Option("--port", min=1, max=65535, help="Port (default: api.port).")] = None,
    media_root: Annotated[list[Path] | None, typer.Option(
        "--media-root", help="A folder whose files may be served and ingested (repeatable; adds to api.media_roots).")] = None,
) -> None:
    """Serve the HTTP API and the web page."""
    import uvicorn

    from mediaindex.api import create_app

    try:
        settings = _settings(config, index)
        roots = [*settings.api.media_roots, *(media_root or [])]
        for root in roots:
            if not Path(root).expanduser().is_dir():
                raise _fail(f"media root {root} is not a folder")
        api = settings.api.model_copy(update={"media_roots": roots, "host": host or settings.api.host,
                                              "port": port or settings.api.port})
        settings = settings.model_copy(update={"api": api})
        app_ = create_app(settings)
    except MediaIndexError as exc:
        raise _fail(str(exc)) from exc
    err.print(f"serving {settings.index_dir} on http://{api.host}:{api.port}/ "
              f"(media roots: {', '.join(str(r) for r in roots) or 'none'})", highlight=False, soft_wrap=True)
    uvicorn.run(app_, host=api.host, port=api.port, log_level="warning", server_header=False)


def _key_store(config: str | None, index: Path | None):  # -> KeyStore
    from mediaindex.api.keys import KeyStore, keys_db_path

    return KeyStore(keys_db_path(_settings(config, index)))


@keys_app.command("create")
def keys_create(
    name: Annotated[str, typer.Argument(help="Who or what the key is for.")],
    index: IndexOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Create an API key and print it once (only its hash is kept)."""
    try:
        key, secret = _key_store(config, index).create(name)
    except (MediaIndexError, ValueError) as exc:
        raise _fail(str(exc)) from exc
    err.print(f"created key {key.id} ({key.name}); it is shown only now:", highlight=False)
    print(secret)


@keys_app.command("revoke")
def keys_revoke(
    key_id: Annotated[str, typer.Argument(help="The key's id, as `keys list` shows it.")],
    index: IndexOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Revoke an API key; requests with it are refused from then on."""
    if not _key_store(config, index).revoke(key_id):
        raise _fail(f"no active key with id {key_id!r}")
    out.print(f"revoked key {key_id}")


@keys_app.command("list")
def keys_list(index: IndexOpt = None, config: ConfigOpt = None) -> None:
    """List API keys (ids and names; secrets are never stored)."""
    import datetime as dt

    keys = _key_store(config, index).list()
    if not keys:
        out.print("no keys: the API is open to anyone who can reach it (unless api.require_keys is set)")
        return
    table = Table()
    for col in ("id", "name", "created", "state"):
        table.add_column(col)
    for k in keys:
        created = dt.datetime.fromtimestamp(k.created, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
        table.add_row(k.id, k.name, created, "revoked" if k.revoked else "active")
    out.print(table)


def main() -> None:
    logging.basicConfig(level=os.environ.get("MEDIAINDEX_LOG", "WARNING").upper(), format="%(levelname)s %(name)s: %(message)s")
    try:
        app()
    except MediaIndexError as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False)
        sys.exit(2)
