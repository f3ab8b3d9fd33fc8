"""Search: the CLI's hits (the same searcher), plus URLs for thumbnails and for playing each moment."""

from __future__ import annotations

import os
import tempfile
import time
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Query, Request

from mediaindex.api.deps import authorize, get_state, known_query
from mediaindex.api.errors import ApiError
from mediaindex.api.highlight import highlights
from mediaindex.api.models import (
    ErrorOut,
    FileHitsOut,
    FilesResponse,
    Filters,
    HitOut,
    Modality,
    SearchFilesRequest,
    SearchRequest,
    SearchResponse,
)
from mediaindex.errors import MediaIndexError
from mediaindex.index.filters import parse_where, where_pairs
from mediaindex.index.store import SearchFilters
from mediaindex.segments import Hit

if TYPE_CHECKING:
    from mediaindex.api.state import ApiState

router = APIRouter(tags=["search"], dependencies=[Depends(authorize), Depends(known_query)],
                   responses={401: {"model": ErrorOut}, 422: {"model": ErrorOut}, 429: {"model": ErrorOut}})
_IMAGE_TYPES = {"image/jpeg": ".jpg", "image/png": ".png", "image/webp": ".webp", "image/gif": ".gif"}


def hit_out(hit: Hit, query: str, state: ApiState) -> HitOut:
    """The hit as the API answers it: its file's path as answers show it (an upload by its name), its title."""
    vid = quote(hit.video_id, safe="")
    return HitOut(
        **{**hit.to_dict(), "source": state.shown(hit.source)},
        title=state.title(hit.video_id, hit.source),
        thumbnail_url=f"/thumbs/{quote(hit.thumbnail)}" if hit.thumbnail else None,
        media_url=f"/media/{vid}",
        play_url=f"/media/{vid}#t={hit.seek if hit.seek is not None else hit.start:.2f}",
        page_url=f"/#/video/{vid}?t={hit.start:.2f}",
        highlights=highlights(query, hit.text, state.index.sparse),
        on_disk=os.path.exists(hit.source),
    )


def _filters(**values: Any) -> SearchFilters:
    """The index's filters; a value it rejects (e.g. a blank video_id) is the client's error, a 422."""
    try:
        return SearchFilters(**values)
    except ValueError as exc:
        raise ApiError(422, str(exc)) from exc


def _search_filters(f: Filters) -> SearchFilters:
    return _filters(video_id=f.video_id, modality=f.modality, language=f.language, speaker=f.speaker,
                    source_prefix=f.under, start=f.from_seconds, end=f.to_seconds,
                    metadata=where_pairs(f.where))


def _run(request: Request, body: SearchRequest) -> SearchResponse:
    state = get_state(request)
    filters = _search_filters(body.filters)
    started = time.perf_counter()
    try:
        hits = state.archive.search(body.q, limit=body.limit, filters=filters, min_confidence=body.min_confidence)
    except ValueError as exc:  # e.g. a query of blanks or emoji only, an unknown min_confidence
        raise ApiError(422, str(exc)) from exc
    state.metrics.searches.labels("text").inc()
    took = (time.perf_counter() - started) * 1000
    return SearchResponse(query=body.q, took_ms=round(took, 2),
                          hits=[hit_out(h, body.q, state) for h in hits])


def filters_query(
    video_id: str | None = Query(None, max_length=64),
    modality: Modality | None = None,
    language: str | None = Query(None, max_length=16),
    speaker: str | None = Query(None, max_length=16, description="Only speech of this speaker (S1, S2, …)"),
    under: str | None = Query(None, min_length=1, max_length=4096,
                              description="Only files whose path starts with this (e.g. a folder, ending in /)"),
    from_seconds: float | None = Query(None, ge=0, le=1e7, description="Only moments that end after this time"),
    to_seconds: float | None = Query(None, ge=0, le=1e7, description="Only moments that start before this time"),
    where: Annotated[list[str] | None, Query(max_length=20, description=(
        "Only files whose metadata has this value: KEY=VALUE (tags=physics), repeated for more; all must "
        "hold"))] = None,
) -> Filters:
    """The filters of a GET search, as the JSON body's."""
    try:
        pairs = dict(parse_where(where or []))
    except ValueError as exc:
        raise ApiError(422, str(exc)) from exc
    return Filters(video_id=video_id, modality=modality, language=language, speaker=speaker, under=under,
                   from_seconds=from_seconds, to_seconds=to_seconds, where=pairs)


GetFilters = Annotated[Filters, Depends(filters_query)]
QUERY = Query(min_length=1, max_length=1000, description="What to look for, in any language")
MIN_CONFIDENCE = Query("low", max_length=16, description="How sure a moment must be: high, medium, low or none "
                       "(every ranked moment)")


@router.get("/search", response_model=SearchResponse)
def search_get(request: Request, filters: GetFilters, q: str = QUERY, limit: int = Query(10, ge=1, le=100),
               min_confidence: str = MIN_CONFIDENCE) -> SearchResponse:
    """Search in plain language; hits are moments (file + time range), best first, as sure as min_confidence
    asks."""
    return _run(request, SearchRequest(q=q, limit=limit, filters=filters, min_confidence=min_confidence))


@router.post("/search", response_model=SearchResponse)
def search_post(request: Request, body: SearchRequest) -> SearchResponse:
    """The same search with a JSON body (query, limit and filters)."""
    return _run(request, body)


@router.get("/search/files", response_model=FilesResponse)
def search_files_get(
    request: Request, filters: GetFilters, q: str = QUERY,
    limit: int = Query(10, ge=1, le=100, description="At most this many files"),
    per_file: int = Query(3, ge=1, le=20, description="At most this many of each file's moments"),
    min_confidence: str = MIN_CONFIDENCE,
) -> FilesResponse:
    """Which files hold a match: files best first (by their best moment), each with how many of its moments
    match and the best of them."""
    return _run_files(request, SearchFilesRequest(q=q, limit=limit, per_file=per_file, filters=filters,
                                                  min_confidence=min_confidence))


@router.post("/search/files", response_model=FilesResponse)
def search_files_post(request: Request, body: SearchFilesRequest) -> FilesResponse:
    """The same search by file with a JSON body."""
    return _run_files(request, body)


def _run_files(request: Request, body: SearchFilesRequest) -> FilesResponse:
    state = get_state(request)
    filters = _search_filters(body.filters)
    started = time.perf_counter()
    try:
        found = state.archive.search_files(body.q, body.limit, filters, min_confidence=body.min_confidence,
                                           per_file=body.per_file)
    except ValueError as exc:
        raise ApiError(422, str(exc)) from exc
    state.metrics.searches.labels("files").inc()
    took = (time.perf_counter() - started) * 1000
    files = [FileHitsOut(video_id=g.video_id, source=state.shown(g.source), title=state.title(g.video_id, g.source),
                         score=g.score,
                         band=g.band, count=g.count, on_disk=os.path.exists(g.source),
                         page_url=f"/#/video/{quote(g.video_id, safe='')}",
                         moments=[hit_out(h, body.q, state) for h in g.moments])
             for g in found]
    return FilesResponse(query=body.q, took_ms=round(took, 2), files=files)


@router.get("/search/like", response_model=SearchResponse, responses={404: {"model": ErrorOut}})
def search_like(
    request: Request,
    video_id: str = Query(min_length=1, max_length=64, description="An indexed file's video id"),
    t: float = Query(ge=0, le=1e7, description="A time in it (seconds): its shot there is the picture to match"),
    limit: int = Query(10, ge=1, le=100),
    min_confidence: str = Query("low", max_length=16, description="none: also shots below the picture similarity "
                                "where a shot starts to look like another"),
) -> SearchResponse:
    """Shots that look like a file's shot at a time (its frame, as the index keeps it), that shot left out."""
    state = get_state(request)
    if state.archive.video(video_id) is None:
        raise ApiError(404, f"no video with id {video_id!r} in the index")
    started = time.perf_counter()
    try:
        hits = state.archive.like(video_id, t, limit, min_confidence=min_confidence)
    except (ValueError, MediaIndexError) as exc:
        raise ApiError(422, str(exc)) from exc
    return _shots(state, "like", started, hits)


def _shots(state: ApiState, kind: str, started: float, hits: list[Hit]) -> SearchResponse:
    """A search by picture's answer (no words to highlight), counted as `kind`."""
    state.metrics.searches.labels(kind).inc()
    took = (time.perf_counter() - started) * 1000
    return SearchResponse(query="", took_ms=round(took, 2),
                          hits=[hit_out(h, "", state) for h in hits])


@router.post(
    "/search/image", response_model=SearchResponse,
    responses={413: {"model": ErrorOut}, 415: {"model": ErrorOut}, 501: {"model": ErrorOut}},
    openapi_extra={"requestBody": {"required": True, "content": {t: {"schema": {"type": "string", "format": "binary"}}
                                                                 for t in _IMAGE_TYPES}}},
)
async def search_image(
    request: Request,
    limit: int = Query(10, ge=1, le=100),
    video_id: str | None = Query(None, max_length=64),
    modality: Modality | None = None,
    min_confidence: str = Query("low", max_length=16, description="none: also shots below the picture similarity "
                                "where a shot starts to look like the picture"),
) -> SearchResponse:
    """Query by example: the request body is an image (JPEG, PNG, WebP or GIF)."""
    state = get_state(request)
    filters = _filters(video_id=video_id, modality=modality)
    ctype = (request.headers.get("content-type") or "").split(";")[0].strip().lower()
    if ctype not in _IMAGE_TYPES:
        raise ApiError(415, f"send the image as the request body with Content-Type one of {sorted(_IMAGE_TYPES)}")
    data = await request.body()
    if not data:
        raise ApiError(400, "the request body is empty: send an image")
    from starlette.concurrency import run_in_threadpool

    from mediaindex.models.images import load_image

    archive = state.archive

    def run() -> list[Hit]:
        state.settings.temp_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(suffix=_IMAGE_TYPES[ctype], dir=state.settings.temp_dir) as tmp:
            tmp.write(data)
            tmp.flush()
            picture = load_image(tmp.name)
        return archive.search_image(picture, limit=limit, filters=filters, min_confidence=min_confidence)

    started = time.perf_counter()
    try:
        hits = await run_in_threadpool(run)
    except (ValueError, MediaIndexError) as exc:
        raise ApiError(422, str(exc)) from exc
    return _shots(state, "image", started, hits)
