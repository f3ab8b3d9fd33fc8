"""The MCP server over one archive: its tools, resources and prompt; run over stdio or mounted in the HTTP API."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.types import Resource
from pydantic import ValidationError
from starlette.types import ASGIApp

from mediaindex import __version__
from mediaindex.mcp import resources, tools

if TYPE_CHECKING:
    from mediaindex.mcp.host import ArchiveHost

INSTRUCTIONS = (
    "A searchable archive of video and audio files. `search` finds moments (file, start and end in seconds) where "
    "something was said, shown on screen or seen; `get_transcript` reads what was said around them; `ask` "
    "answers a question with cited moments; `list_files` and `file_info` tell what is indexed. Cite moments as "
    "[file @ start-end s]; never invent what the archive does not hold."
)


class ArchiveServer(MCPServer[Any]):
    """An MCPServer whose resource list names every indexed file's transcript and summary."""

    def __init__(self, host: ArchiveHost, **options: Any) -> None:
        super().__init__(**options)
        self.host = host

    async def list_resources(self) -> list[Resource]:
        listed = await super().list_resources()
        try:
            # The catalog is looked up in the worker thread: a server's catalog has a connection per thread.
            records = await anyio.to_thread.run_sync(lambda: self.host.archive.files())
        except self.host.user_errors:  # the index is not open: nothing to list yet
            return listed
        for r in records[:resources.MAX_LISTED_FILES]:
            name = Path(r.source).name
            listed.append(Resource(uri=resources.TRANSCRIPT_URI.format(video_id=r.video_id),
                                   name=f"{name} transcript", mime_type="text/vtt",
                                   description=f"What was said in {name}, with times"))
            listed.append(Resource(uri=resources.SUMMARY_URI.format(video_id=r.video_id),
                                   name=f"{name} summary", mime_type="text/markdown",
                                   description=f"The summary and chapters of {name}, when made at ingest"))
        return listed

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        tool = next((t for t in await self.list_tools() if t.name == name), None)
        takes = set((tool.input_schema or {}).get("properties", {})) if tool is not None else set()
        if tool is not None and (unknown := sorted(set(arguments) - takes)):
            # Passed over, a misspelt filter would answer as if there were none (the HTTP API refuses them too).
            raise ToolError(f"bad arguments for {name}: unknown argument{'s' if len(unknown) > 1 else ''} "
                            f"{', '.join(repr(u) for u in unknown)}; it takes {', '.join(sorted(takes))}")
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if not isinstance(exc.__cause__, ValidationError):
                raise
            # Each wrong argument and what is wrong with it, without pydantic's echo of the value and links.
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
                                 for e in exc.__cause__.errors())
            raise ToolError(f"bad arguments for {name}: {problems}") from exc.__cause__


def build_server(host: ArchiveHost, allow_ingest: bool = False, own_host: bool = False) -> ArchiveServer:
    """The server over `host`. `own_host`: the server opens the host when it starts and closes it when it ends
    (stdio); otherwise whoever made the host runs it (the HTTP API)."""

    @asynccontextmanager
    async def lifespan(_: MCPServer[Any]) -> AsyncIterator[None]:
        await anyio.to_thread.run_sync(host.open)
        try:
            yield
        finally:
            await anyio.to_thread.run_sync(host.close)

    server = ArchiveServer(host, name="mediaindex", title="mediaindex archive", version=__version__,
                           instructions=INSTRUCTIONS, log_level="WARNING", lifespan=lifespan if own_host else None)
    tools.register(server, host, allow_ingest)
    resources.register(server, host)
    return server


def run_stdio(host: ArchiveHost, allow_ingest: bool = False) -> None:
    """Serve over stdin/stdout until the client closes them. The SDK points fd 1 at stderr while it serves, so
    stray output of libraries cannot corrupt the protocol; the index is opened after that, in the lifespan."""
    anyio.run(build_server(host, allow_ingest, own_host=True).run_stdio_async)


def http_endpoint(server: MCPServer[Any], listen_host: str, max_body_bytes: int
                  ) -> tuple[ASGIApp, StreamableHTTPSessionManager]:
    """The streamable-HTTP endpoint of `server` as one ASGI app, and its session manager, which must run (its
    `run()` context) for as long as the app serves."""
    # Builds the session manager; the SDK guards against DNS rebinding when it listens on loopback.
    server.streamable_http_app(host=listen_host, max_request_body_size=max_body_bytes)
    manager = server.session_manager
    return StreamableHTTPASGIApp(manager), manager
