"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response

from mediaindex.api.deps import authorize, get_state
from mediaindex.api.models import ErrorOut, HealthOut, ReadyOut

router = APIRouter(tags=["health"])


@router.get("/health", response_model=HealthOut)
def health() -> HealthOut:
    """The server answers (no key needed)."""
    return HealthOut(status="ok")


@router.get("/health/ready", response_model=ReadyOut, responses={503: {"model": ReadyOut}})
def ready(request: Request):
    """The index and the embedder are open, so searches can be answered (no key needed)."""
    state = get_state(request)
    checks: dict[str, str] = {}
    if state.open_error:
        checks["index"] = f"failed: {state.open_error}"
    else:
        try:
            checks["index"] = f"ok: {state.index.store.count()} segments"
            checks["embedder"] = f"ok: {state.embedder.name}"
        except Exception as exc:  # unauthenticated: the message names no server folder
            checks["index"] = f"failed: {state.public(str(exc))}"
    ok = all(v.startswith("ok") for v in checks.values())
    body = ReadyOut(ready=ok, checks=checks)
    return body if ok else JSONResponse(body.model_dump(), status_code=503)


@router.get("/metrics", dependencies=[Depends(authorize)], response_class=Response,
            responses={200: {"content": {"text/plain": {}}}, 401: {"model": ErrorOut}})
def metrics(request: Request) -> Response:
    """Prometheus metrics: requests, latency, searches, job counts, ingest throughput."""
    return Response(get_state(request).metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")
