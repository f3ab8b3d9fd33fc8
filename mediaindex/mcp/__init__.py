"""The archive as a tool for AI agents: a Model Context Protocol server (the official `mcp` SDK's MCPServer).

A face, like the HTTP API and the CLI: its tools call the service's `Archive` (search, transcripts, questions)
and the API's ingest queue through an `ArchiveHost` (the API's state), and hold no search or answer logic of
their own.
`mediaindex mcp` serves it over stdio; `mediaindex serve` mounts it at /mcp (streamable HTTP), behind the API's
keys and rate limits. Read-only unless started with write access (ingest).
"""

from mediaindex.mcp.host import ArchiveHost
from mediaindex.mcp.server import ArchiveServer, build_server, http_endpoint, run_stdio

__all__ = ["ArchiveHost", "ArchiveServer", "build_server", "http_endpoint", "run_stdio"]
