"""The MCP server inside the API: the API's state as its host, and its /mcp endpoint behind the API's keys.

Over HTTP and over stdio alike, the MCP tools confine paths to the media roots, queue ingest jobs on the runner
and hide the server's folders in messages exactly as the HTTP API does, because they go through this state.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from fastapi.security import HTTPAuthorizationCredentials
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from mediaindex.api.deps import authorize
from mediaindex.api.errors import ApiError, error_response
from mediaindex.api.routes.jobs import ingest_job, job_out
from mediaindex.api.routes.search import hit_out
from mediaindex.api.state import ApiState
from mediaindex.config import Settings
from mediaindex.errors import MediaIndexError
from mediaindex.jobs import JobNotFound
from mediaindex.mcp import build_server, http_endpoint

if TYPE_CHECKING:
    from mediaindex.segments import Hit
    from mediaindex.service.archive import Archive

MCP_PATH = "/mcp"


class ApiHost:
    """An `ArchiveHost` over the API's state."""

    user_errors: tuple[type[BaseException], ...] = (ApiError, MediaIndexError, ValueError)

    def __init__(self, state: ApiState) -> None:
        self.state = state
        self.settings: Settings = state.settings

    @property
    def archive(self) -> Archive:
        return self.state.archive

    def open(self) -> None:
        self.state.open()

    def close(self) -> None:
        self.state.close()

    def public(self, message: str) -> str:
        return self.state.public(message)

    def play_path(self, hit: Hit, query: str) -> str:
        return hit_out(hit, query, self.state).play_url

    def ingest(self, paths: list[str], summaries: bool | None, reindex: bool = False,
               urls: list[str] | None = None) -> dict[str, Any]:
        job, joined = ingest_job(self.state, [(p, {}) for p in paths], summaries, reindex=reindex, urls=urls or [])
        if not joined:
            self.state.runner.submit(job.id)
        return job_out(self.state, job).model_dump(mode="json")

    def job(self, job_id: str) -> dict[str, Any]:
        try:
            with self.state.jobs_lock:
                job = self.state.jobs.get(job_id)
        except JobNotFound as exc:
            raise ApiError(404, str(exc)) from exc
        return job_out(self.state, job).model_dump(mode="json")


def stdio_host(settings: Settings) -> ApiHost:
    """The host of `mediaindex mcp`: the API's state in this process, without an HTTP server."""
    return ApiHost(ApiState(settings))


class McpEndpoint:
    """/mcp: the key and rate-limit check of every API route (`authorize`), then the MCP server's streamable-HTTP
    transport. Its session manager runs while the app runs, a new one per start (a manager runs only once)."""

    def __init__(self, state: ApiState) -> None:
        self.state = state
        self.server = build_server(ApiHost(state), allow_ingest=state.settings.api.mcp_allow_ingest)
        self._transport: ASGIApp | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        api = self.state.settings.api
        transport, sessions = http_endpoint(self.server, api.host, api.max_body_bytes)
        async with sessions.run():
            self._transport = transport
            try:
                yield
            finally:
                self._transport = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope)
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        bearer = (HTTPAuthorizationCredentials(scheme=scheme, credentials=token.strip())
                  if scheme.lower() == "bearer" and token.strip() else None)
        try:
            await run_in_threadpool(authorize, request, request.headers.get("x-api-key"), bearer)
        except ApiError as exc:
            await error_response(exc.status, exc.message, exc.code, exc.headers)(scope, receive, send)
            return
        if self._transport is None:
            await error_response(503, "the MCP endpoint is not running (the server is starting or stopping)")(
                scope, receive, send)
            return
        await self._transport(scope, receive, send)
