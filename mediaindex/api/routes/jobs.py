"""Background jobs over HTTP: ingest server paths or an upload, summarize a video, follow or cancel a job.

The queue is bounded (api.max_pending_jobs; past it 429 with Retry-After) and a request identical to
one still pending joins that job instead of queueing the same work twice.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import urllib.parse
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi import Path as PathParam
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from mediaindex.agents.ask import AgentInputError
from mediaindex.agents.jobs import ask_params
from mediaindex.api.deps import authorize, get_state, known_query
from mediaindex.api.errors import ApiError
from mediaindex.api.models import (
    SUMMARIES_DOC,
    AskRequest,
    ErrorOut,
    IngestRequest,
    JobFileOut,
    JobOut,
    JobProgressOut,
    SummarizeRequest,
)
from mediaindex.api.paths import MAX_NAME_BYTES, quoted
from mediaindex.api.state import ApiState
from mediaindex.index.filters import where_pairs
from mediaindex.jobs import Job, JobFinished, JobNotFound, request_key
from mediaindex.media.download import DownloadError, PrivateAddress, is_url, public_only, web_address
from mediaindex.pipeline.discover import MEDIA_SUFFIXES, discover
from mediaindex.pipeline.inputs import ManifestError, Meta, check_meta

router = APIRouter(tags=["jobs"], dependencies=[Depends(authorize), Depends(known_query)],
                   responses={401: {"model": ErrorOut}, 422: {"model": ErrorOut}, 429: {"model": ErrorOut}})
_SAFE_NAME = re.compile(r"[^\w.\- ]+", re.UNICODE)


def job_out(state: ApiState, job: Job, files: bool = True) -> JobOut:
    with state.jobs_lock:
        listed = state.jobs.files(job.id) if files else []
        counts = state.jobs.counts(job.id)
    # An upload's file is shown by its name (answers never show the index's folders), here as everywhere.
    return JobOut(id=job.id, kind=job.kind, state=job.shown_state, params=state.shown(job.params),
                  result=state.shown(job.result), error=state.public(job.error) if job.error else job.error,
                  created=job.created, updated=job.updated, counts=counts,
                  files=[JobFileOut(path=state.shown(f.path), state=f.state, reason=state.public(f.reason),
                                    video_id=f.video_id) for f in listed],
                  url=f"/jobs/{job.id}", cancel_requested=job.cancel_requested is not None,
                  progress=_progress(state, job.progress) if job.progress else None)


def _progress(state: ApiState, progress: dict[str, Any]) -> JobProgressOut | None:
    """A running ingest's report, its paths shown as everywhere in answers; None for a record not understood."""
    try:
        report = JobProgressOut.model_validate(progress)
    except ValidationError:
        return None
    report.now = {state.shown(path): stages for path, stages in report.now.items()}
    return report


QUEUE_RETRY_AFTER_S = 30  # a job takes tens of seconds to minutes: a sooner retry would meet a full queue again


def _accepted(state: ApiState, job: Job, joined: bool = False) -> JSONResponse:
    if not joined:
        state.runner.submit(job.id)
    body = job_out(state, job)
    headers = {"Location": body.url, **({"X-Joined-Job": job.id} if joined else {})}
    return JSONResponse(body.model_dump(mode="json"), status_code=202, headers=headers)


def _queue(state: ApiState, kind: str, params: dict, files: list[tuple[str, dict]] | None = None,
           same_work: dict | None = None) -> tuple[Job, bool]:
    """A pending job for this request: an identical pending one (joined: True), else a new one if the queue
    has room, else 429. `same_work` is what makes two requests identical (default: the params)."""
    key = request_key(kind, same_work if same_work is not None else params)
    with state.jobs_lock:
        existing = state.jobs.find_pending(key)
        if existing is not None:
            return existing, True
        _room(state)
        return state.jobs.create(kind, {**params, "origin": "api"}, files=files, key=key), False


def _room(state: ApiState) -> None:
    """429 where api.max_pending_jobs of the API's jobs already wait to start (the caller holds jobs_lock)."""
    limit = state.settings.api.max_pending_jobs
    if state.jobs.count_pending({"origin": "api"}) >= limit:
        raise ApiError(429, f"{limit} jobs are already waiting to start (api.max_pending_jobs); retry later",
                       headers={"Retry-After": str(QUEUE_RETRY_AFTER_S)})


def _create_ingest(state: ApiState, params: dict, files: list[tuple[Path, Meta]], summaries: bool | None,
                   same_work: dict | None = None, reindex: bool = False) -> tuple[Job, bool]:
    state.index  # noqa: B018  (answers 503 before a job is created when the index is not open)
    # The job's record holds the choices (None: the server's setting), so a job resumed after a restart keeps them.
    params = {**params, "summaries": summaries, "reindex": reindex}
    work = {"files": sorted(str(p) for p, _ in files), "summaries": summaries, "reindex": reindex,
            **(same_work or {})}
    if any(meta for _, meta in files):
        work["metadata"] = sorted((str(p), sorted(meta.items(), key=str)) for p, meta in files if meta)
    return _queue(state, "ingest", params, files=[(str(p), meta) for p, meta in files], same_work=work)


@router.post("/ingest", status_code=202, response_model=JobOut,
             responses={400: {"model": ErrorOut}, 403: {"model": ErrorOut}, 404: {"model": ErrorOut},
                        503: {"model": ErrorOut}})
def ingest_paths(request: Request, body: IngestRequest) -> JSONResponse:
    """Index media files or folders on the server (inside the media roots) as a background job; the same
    rules as for serving files: only media, never hidden files or the index's own files. Manifest entries carry
    metadata for their files; `include` / `exclude` globs choose the files inside folders. Web addresses are
    downloaded by the job (403 where the server's api.fetch_urls refuses them)."""
    state = get_state(request)
    entries: list[tuple[str, Meta]] = [(p, {}) for p in body.paths]
    entries += [(e.path, dict(e.metadata)) for e in body.manifest]
    job, joined = ingest_job(state, entries, body.summaries, body.include, body.exclude, body.reindex, body.urls)
    return _accepted(state, job, joined)


def ingest_job(state: ApiState, entries: list[tuple[str, Meta]], summaries: bool | None,
               include: Sequence[str] = (), exclude: Sequence[str] = (), reindex: bool = False,
               urls: Sequence[str] = ()) -> tuple[Job, bool]:
    """The ingest job for server paths and web addresses (an entry's too), each with its metadata (a waiting
    identical one is joined: True), not yet submitted to the runner; every path is confined to the media roots as
    files served are, and the first mention of a file or address wins."""
    addresses: dict[str, Meta] = {url: {} for url in urls}
    for raw, given in entries:
        if is_url(raw):
            try:
                addresses.setdefault(web_address(raw), check_meta(f"manifest entry {quoted(raw)}", given))
            except ManifestError as exc:
                raise ApiError(400, str(exc)) from exc
            except ValueError as exc:
                raise ApiError(400, f"manifest entry {quoted(raw)}: {exc}") from exc
    entries = [(raw, given) for raw, given in entries if not is_url(raw)]
    _may_fetch(state, list(addresses))
    for pattern in (*include, *exclude):
        if not pattern.strip():
            raise ApiError(400, "an include/exclude glob is empty")
    files: dict[Path, Meta] = {}
    for raw, given in entries:
        try:
            meta = check_meta(f"manifest entry {quoted(raw)}", given)
        except ManifestError as exc:
            raise ApiError(400, str(exc)) from exc
        real = state.roots.resolve(raw)
        if real.is_dir():
            # A folder's files are checked one by one: a symlink inside may point out of the roots.
            inside = [p for p in discover([real], include, exclude).files
                      if state.roots.contains(p) and state.media.refusal(p, p.resolve()) is None]
            if not inside:
                raise ApiError(400, f"no media files in folder {quoted(raw)}"
                               + (" that the include/exclude globs let through" if include or exclude else ""))
            for path in inside:
                files.setdefault(path, meta)
        elif real.is_file():
            files.setdefault(state.media.resolve(raw), meta)
        else:
            raise ApiError(400, f"{quoted(raw)} is neither a regular file nor a folder")
    params: dict = {"paths": [raw for raw, _ in entries]}
    if include or exclude:
        params.update(include=list(include), exclude=list(exclude))
    if addresses:
        params["urls"] = list(addresses)
    if described := {url: meta for url, meta in addresses.items() if meta}:
        params["url_metadata"] = described  # the job gives each of the address's files this metadata
    return _create_ingest(state, params, list(files.items()), summaries, reindex=reindex,
                          same_work={"urls": params.get("urls"), "url_metadata": described} if addresses else None)


def _may_fetch(state: ApiState, urls: list[str]) -> None:
    """403 for addresses this server does not download (api.fetch_urls), each host looked up once; one it cannot
    resolve now is left to the job, which says why it gave nothing."""
    policy = state.settings.api.fetch_urls
    if urls and policy == "off":
        raise ApiError(403, "this server does not download web addresses (api.fetch_urls is off): put the file in "
                            "a media root and give its path, or upload it")
    if policy != "public":
        return
    first: dict[str | None, str] = {}
    for url in urls:
        first.setdefault(urllib.parse.urlsplit(url).hostname, url)
    for url in first.values():
        try:
            public_only(url)
        except PrivateAddress as exc:
            raise ApiError(403, str(exc)) from exc
        except DownloadError:
            pass


UPLOAD_NAME_BYTES = MAX_NAME_BYTES - 55  # room for the server's own suffixes beside it (e.g. ".partial")


def _upload_name(filename: str) -> str:
    """The name an upload is stored (and shown) under: its last part, safe characters only, short enough for
    the file system (in bytes: a name of 255 characters may take 1020), its media suffix kept."""
    name = _SAFE_NAME.sub("_", Path(filename.replace("\\", "/")).name).strip(" .")
    suffix = Path(name).suffix
    if not name or suffix.lower() not in MEDIA_SUFFIXES:
        raise ApiError(415, f"{quoted(filename)} does not name a media file: use one of the suffixes "
                            f"{' '.join(sorted(MEDIA_SUFFIXES))}")
    stem = name[:-len(suffix)]
    while len((stem + suffix).encode()) > UPLOAD_NAME_BYTES:
        stem = stem[1:]  # the end of a long name is kept: it tells versions and parts apart
    return (stem.strip(" .") or "upload") + suffix


@router.post(
    "/ingest/upload", status_code=202, response_model=JobOut,
    responses={400: {"model": ErrorOut}, 413: {"model": ErrorOut}, 415: {"model": ErrorOut}, 503: {"model": ErrorOut}},
    openapi_extra={"requestBody": {"required": True, "content": {
        "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}},
)
async def ingest_upload(request: Request,
                        filename: str = Query(min_length=1, max_length=255,
                                              description="The file's name, with its suffix"),
                        summaries: bool | None = Query(None, description=SUMMARIES_DOC)):
    """Upload one media file as the raw request body and index it as a background job."""
    state = get_state(request)
    name = _upload_name(filename)
    limit = state.settings.api.max_upload_bytes
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"the upload is {int(declared)} bytes; the limit is {limit} bytes")
    with state.jobs_lock:
        _room(state)  # before the body is read: a full queue refuses it, however large, at once
    folder = state.upload_dir / uuid.uuid4().hex[:12]
    folder.mkdir(parents=True)
    target = folder / name
    size = 0
    digest = hashlib.sha256()
    try:
        with open(target, "wb") as out:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise ApiError(413, f"the upload exceeds the limit of {limit} bytes")
                digest.update(chunk)
                out.write(chunk)
        if size == 0:
            raise ApiError(400, "the upload is empty")
        # The same bytes under the same name, still waiting: one job (and one copy) is enough.
        job, joined = _create_ingest(state, {"upload": name, "bytes": size, "upload_folder": folder.name},
                                     [(target, {})], summaries, same_work={"files": [name], "sha256": digest.hexdigest()})
    except BaseException:
        target.unlink(missing_ok=True)
        os.rmdir(folder)
        raise
    if joined:
        shutil.rmtree(folder, ignore_errors=True)
    return _accepted(state, job, joined)


@router.post("/summarize", status_code=202, response_model=JobOut,
             responses={404: {"model": ErrorOut}, 503: {"model": ErrorOut}})
def summarize(request: Request, body: SummarizeRequest) -> JSONResponse:
    """Summarize one video (summary and chapters with cited moments) as a background job."""
    state = get_state(request)
    if state.index.catalog.get(body.video_id) is None:
        raise ApiError(404, f"no video with id {body.video_id!r} in the index")
    # "video" is what the summarization job reads; the rest is kept for the record.
    params = {**body.model_dump(), "video": body.video_id}
    job, joined = _queue(state, "summarize", params)
    return _accepted(state, job, joined)


@router.post("/ask", status_code=202, response_model=JobOut,
             responses={404: {"model": ErrorOut}, 503: {"model": ErrorOut}})
def ask(request: Request, body: AskRequest) -> JSONResponse:
    """Answer a question with cited moments (or say it is not in the archive) as a background job."""
    state = get_state(request)
    if body.video_id is not None and state.index.catalog.get(body.video_id) is None:
        raise ApiError(404, f"no video with id {body.video_id!r} in the index")
    try:
        params = ask_params(body.question, body.video_id, where_pairs(body.where))
    except AgentInputError as exc:
        raise ApiError(422, str(exc)) from exc
    job, joined = _queue(state, "ask", params)
    return _accepted(state, job, joined)


@router.get("/jobs/{job_id}", response_model=JobOut, responses={404: {"model": ErrorOut}})
def get_job(request: Request, job_id: str = PathParam(min_length=1, max_length=64, pattern=r"^[0-9A-Za-z_-]+$")) -> JobOut:
    """A job's state, its files (for ingest) and its result."""
    state = get_state(request)
    try:
        with state.jobs_lock:
            job = state.jobs.get(job_id)
    except JobNotFound as exc:
        raise ApiError(404, str(exc)) from exc
    return job_out(state, job)


@router.delete("/jobs/{job_id}", response_model=JobOut, status_code=200,
               responses={202: {"model": JobOut, "description": "A running job will stop: an ingest at its next "
                                                                "file, a summary or question before its next "
                                                                "language-model call"},
                          404: {"model": ErrorOut}, 409: {"model": ErrorOut}})
def cancel_job(request: Request,
               job_id: str = PathParam(min_length=1, max_length=64, pattern=r"^[0-9A-Za-z_-]+$")) -> JSONResponse:
    """Cancel a job: a waiting one ends now (200); a running one is asked to stop (202): an ingest at its next
    file boundary, keeping the files it finished; a summary or question before its next language-model call.
    A job that has ended is 409."""
    state = get_state(request)
    try:
        with state.jobs_lock:
            job = state.jobs.request_cancel(job_id)
    except JobNotFound as exc:
        raise ApiError(404, str(exc)) from exc
    except JobFinished as exc:
        raise ApiError(409, str(exc)) from exc
    body = job_out(state, job)
    return JSONResponse(body.model_dump(mode="json"), status_code=202 if job.state == "running" else 200)


@router.get("/jobs", response_model=list[JobOut])
def list_jobs(request: Request, kind: str | None = Query(None, max_length=32),
              limit: int = Query(20, ge=1, le=200),
              active: bool = Query(False, description="Only jobs waiting or running"),
              files: bool = Query(True, description="Each job's files; false leaves them out (counts has their "
                                                    "number by state), for a client that looks often")) -> list[JobOut]:
    """The most recent jobs, newest first."""
    state = get_state(request)
    with state.jobs_lock:
        jobs = state.jobs.list(kind=kind, limit=limit, states=("pending", "running") if active else None)
    return [job_out(state, j, files=files) for j in jobs]
