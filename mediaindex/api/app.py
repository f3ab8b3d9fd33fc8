"""The HTTP API and the web page, as one FastAPI app."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from starlette.routing import Route

from mediaindex import __version__
from mediaindex.api.errors import COMMON_ERRORS, KEYED_ERRORS, install_error_handlers
from mediaindex.api.mcp_host import MCP_PATH, McpEndpoint
from mediaindex.api.middleware import BodyLimit, RequestMetrics
from mediaindex.api.routes import health, jobs, openai, search, videos
from mediaindex.api.state import ApiState
from mediaindex.config import Settings

WEB_DIR = Path(__file__).resolve().parent.parent / "web"
UPLOAD_PATHS = ("/ingest/upload",)


def create_app(settings: Settings, *, index: Any = None, embedder: Any = None, pipeline: Any = None,
               advertise_url: str | None = None) -> FastAPI:
    """An app over one index. `index`, `embedder` and `pipeline` may be given already open (they are
    then left open on shutdown); otherwise they are opened at start-up, and Ray on the first ingest job.
    `advertise_url` is recorded in the index folder, so that commands run beside go through this server."""
    state = ApiState(settings, index=index, embedder=embedder, pipeline=pipeline, advertise_url=advertise_url)
    mcp = McpEndpoint(state)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        from starlette.concurrency import run_in_threadpool

        await run_in_threadpool(state.open)
        try:
            async with mcp.running():
                yield
        finally:
            await run_in_threadpool(state.close)

    app = FastAPI(
        title="mediaindex",
        version=__version__,
        summary="Search video and audio archives in plain language",
        description="Hits are moments: a media file and a time range. Every endpoint except /health needs an "
                    "API key once keys are configured (`mediaindex keys create`). AI agents reach the same "
                    "archive as MCP tools at /mcp (streamable HTTP, the same keys).",
        lifespan=lifespan,
    )
    app.state.api = state
    install_error_handlers(app)
    for router in (health.router, search.router, videos.router, jobs.router):
        keyed = any(getattr(d.dependency, "__name__", "") == "authorize" for d in router.dependencies)
        app.include_router(router, responses={**COMMON_ERRORS, **(KEYED_ERRORS if keyed else {})})
    openai.install(app)  # /v1: OpenAI-compatible chat over the serving engine
    # /mcp: the archive's tools for AI agents (Model Context Protocol, streamable HTTP), behind the same keys.
    app.router.routes.append(Route(MCP_PATH, mcp, methods=["GET", "POST", "DELETE"], include_in_schema=False))

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        # The page holds no data: it loads everything through the (key-checked) API.
        return FileResponse(WEB_DIR / "index.html", media_type="text/html")

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> FileResponse:
        # Browsers ask for /favicon.ico on every page load; an SVG icon answers it.
        return FileResponse(WEB_DIR / "favicon.svg", media_type="image/svg+xml",
                            headers={"Cache-Control": "max-age=86400"})

    app.mount("/static", StaticFiles(directory=WEB_DIR), name="static")
    api = settings.api
    app.add_middleware(BodyLimit, limit=api.max_body_bytes, upload_limit=api.max_upload_bytes,
                       upload_paths=UPLOAD_PATHS)
    app.add_middleware(RequestMetrics, metrics=state.metrics)
    return app
