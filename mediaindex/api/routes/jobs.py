"""Background jobs over HTTP: ingest server paths or an upload, summarize a video, follow a job."""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

from fastapi import APIRouter, Depends, Query, Request
from fastapi import Path as PathParam
from fastapi.responses import JSONResponse

from mediaindex.api.deps import authorize, get_state
from mediaindex.api.errors import ApiError
from mediaindex.api.models import SUMMARIES_DOC, ErrorOut, IngestRequest, JobFileOut, JobOut, SummarizeRequest
from mediaindex.api.state import ApiState
from mediaindex.ingest.discover import MEDIA_SUFFIXES, discover
from mediaindex.jobs import Job, JobNotFound

router = APIRouter(tags=["jobs"], dependencies=[Depends(authorize)],
                   responses={401: {"model": ErrorOut}, 422: {"model": ErrorOut}, 429: {"model": ErrorOut}})
_SAFE_NAME = re.compile(r"[^\w.\- ]+", re.UNICODE)


def job_out(state: ApiState, job: Job) -> JobOut:
    with state.jobs_lock:
        files = state.jobs.files(job.id)
        counts = state.jobs.counts(job.id)
    return JobOut(id=job.id, kind=job.kind, state=job.state, params=job.params, result=job.result,  # type: ignore[arg-type]
                  error=job.error, created=job.created, updated=job.updated, counts=counts,
                  files=[JobFileOut(path=f.path, state=f.state, reason=f.reason, video_id=f.video_id) for f in files],
                  url=f"/jobs/{job.id}")


def _accepted(state: ApiState, job: Job) -> JSONResponse:
    state.runner.submit(job.id)
    body = job_out(state, job)
    return JSONResponse(body.model_dump(mode="json"), status_code=202, headers={"Location": body.url})


def _create_ingest(state: ApiState, params: dict, files: list[Path], summaries: bool | None) -> Job:
    state.index  # noqa: B018  (answers 503 before a job is created when the index is not open)
    # The job's record holds the choice (None: the server's setting), so a job resumed after a restart keeps it.
    params = {**params, "summaries": summaries, "origin": "api"}
    with state.jobs_lock:
        return state.jobs.create("ingest", params, files=[(str(p), {}) for p in files])


@router.post("/ingest", status_code=202, response_model=JobOut,
             responses={400: {"model": ErrorOut}, 403: {"model": ErrorOut}, 404: {"model": ErrorOut}})
def ingest_paths(request: Request, body: IngestRequest) -> JSONResponse:
    """Index files or folders on the server (inside the media roots) as a background job."""
    state = get_state(request)
    files: list[Path] = []
    for raw in body.paths:
        real = state.roots.resolve(raw)
        if real.is_dir():
            # A folder's files are checked one by one: a symlink inside may point out of the roots.
            inside = [p for p in discover([real]).files if state.roots.contains(p)]
            if not inside:
                raise ApiError(400, f"no media files in folder {raw!r}")
            files.extend(inside)
        elif real.is_file():
            files.append(real)
        else:
            raise ApiError(400, f"{raw!r} is neither a regular file nor a folder")
    files = list(dict.fromkeys(files))
    return _accepted(state, _create_ingest(state, {"paths": body.paths}, files, body.summaries))


def _upload_name(filename: str) -> str:
    name = _SAFE_NAME.sub("_", Path(filename.replace("\\", "/")).name).strip(" .")
    if not name or Path(name).suffix.lower() not in MEDIA_SUFFIXES:
        raise ApiError(415, f"{filename!r} does not name a media file: use one of the suffixes "
                            f"{' '.join(sorted(MEDIA_SUFFIXES))}")
    return name[-200:]


@router.post(
    "/ingest/upload", status_code=202, response_model=JobOut,
    responses={400: {"model": ErrorOut}, 413: {"model": ErrorOut}, 415: {"model": ErrorOut}},
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
    folder = state.upload_dir / uuid.uuid4().hex[:12]
    folder.mkdir(parents=True)
    target = folder / name
    size = 0
    try:
        with open(target, "wb") as out:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise ApiError(413, f"the upload exceeds the limit of {limit} bytes")
                out.write(chunk)
        if size == 0:
            raise ApiError(400, "the upload is empty")
    except BaseException:
        target.unlink(missing_ok=True)
        os.rmdir(folder)
        raise
    return _accepted(state, _create_ingest(state, {"upload": name, "bytes": size}, [target], summaries))


@router.post("/summarize", status_code=202, response_model=JobOut,
             responses={404: {"model": ErrorOut}})
def summarize(request: Request, body: SummarizeRequest) -> JSONResponse:
    """Summarize one video (summary and chapters with cited moments) as a background job."""
    state = get_state(request)
    if state.index.catalog.get(body.video_id) is None:
        raise ApiError(404, f"no video with id {body.video_id!r} in the index")
    with state.jobs_lock:
        # "video" is what the summarization job reads; the rest is kept for the record.
        job = state.jobs.create("summarize", {**body.model_dump(), "video": body.video_id, "origin": "api"})
    return _accepted(state, job)


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


@router.get("/jobs", response_model=list[JobOut])
def list_jobs(request: Request, kind: str | None = Query(None, max_length=32),
              limit: int = Query(20, ge=1, le=200)) -> list[JobOut]:
    """The most recent jobs, newest first."""
    state = get_state(request)
    with state.jobs_lock:
        jobs = state.jobs.list(kind=kind, limit=limit)
    return [job_out(state, j) for j in jobs]
