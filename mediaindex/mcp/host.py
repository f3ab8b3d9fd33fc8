"""What the MCP server needs of the process it runs in: the service's archive, the media roots and the job runner.

The HTTP API's state is one such host (`mediaindex.api.mcp_host`), for the server mounted in `serve` and for
the one `mediaindex mcp` runs over stdio, so that both confine paths, queue ingest jobs and report errors exactly
as the HTTP API does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from mediaindex.config import Settings

if TYPE_CHECKING:
    from mediaindex.segments import Hit
    from mediaindex.service.archive import Archive


class ArchiveHost(Protocol):
    settings: Settings
    # Errors whose message is written for the user: a tool call that raises one fails with that message.
    user_errors: tuple[type[BaseException], ...]

    @property
    def archive(self) -> Archive:
        """The open index behind the service's calls: search, transcripts, questions."""

    def open(self) -> None:
        """Load the embedder and open the index (a server that owns its host calls it at start-up)."""

    def close(self) -> None: ...

    def public(self, message: str) -> str:
        """The message with the server's own folders replaced by labels."""

    def play_path(self, hit: Hit, query: str) -> str:
        """Where the HTTP API plays this moment, relative to its root (`/media/ID#t=SECONDS`)."""

    def ingest(self, paths: list[str], summaries: bool | None, reindex: bool = False,
               urls: list[str] | None = None) -> dict[str, Any]:
        """Queue an ingest job for files or folders inside the media roots and web addresses the job downloads
        (`reindex`: unchanged files too); the job as the HTTP API shows it."""

    def job(self, job_id: str) -> dict[str, Any]:
        """A job as the HTTP API shows it (state, files, result or error)."""
