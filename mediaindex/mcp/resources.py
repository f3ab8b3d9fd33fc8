"""Resources and prompts: each indexed file's transcript and summary, and how to answer from the archive."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError

from mediaindex.mcp.tools import resolve, tool_errors

if TYPE_CHECKING:
    from mediaindex.mcp.host import ArchiveHost

TRANSCRIPT_URI = "mediaindex://files/{video_id}/transcript"
SUMMARY_URI = "mediaindex://files/{video_id}/summary"
MAX_LISTED_FILES = 500  # resources listed by name; the URI templates reach every file

ANSWER_PROMPT = (
    "Answer this question from the media archive, using its tools: {question}\n\n"
    "1. Call `search` with the question's key words (try other words, or another language, if nothing fits).\n"
    "2. Read around the best moments with `get_transcript` (from_seconds / to_seconds) when a moment alone "
    "does not answer.\n"
    "3. Answer in a few sentences with only what the moments say, and cite every moment you used as "
    "[file @ start-end s] (times in seconds, as the tools give them).\n"
    "4. If no moment answers the question, say that the archive does not hold the answer, and list what you "
    "searched for. Never answer from your own knowledge."
)


def register(server: MCPServer, host: ArchiveHost) -> None:
    def _record(video_id: str):
        try:
            with tool_errors(host):
                return resolve(host, video_id)
        except ToolError as exc:
            raise ResourceNotFoundError(str(exc)) from exc

    @server.resource(TRANSCRIPT_URI, name="transcript", mime_type="text/vtt")
    def transcript(video_id: str) -> str:
        """What was said in an indexed file, as WebVTT subtitles (times, and speakers where told apart)."""
        from mediaindex.index.transcript import to_vtt

        record = _record(video_id)
        try:
            with tool_errors(host):
                return to_vtt(host.archive.speech(record.video_id))
        except ToolError as exc:
            raise ResourceError(str(exc)) from exc

    @server.resource(SUMMARY_URI, name="summary", mime_type="text/markdown")
    def summary(video_id: str) -> str:
        """An indexed file's summary with chapters and cited moments, as made at ingest (with summaries)."""
        from mediaindex.agents.render import summary_markdown

        record = _record(video_id)
        try:
            with tool_errors(host):
                found = host.archive.stored_summary(record.video_id)
        except ToolError as exc:
            raise ResourceError(str(exc)) from exc
        if found is None:
            raise ResourceNotFoundError(f"no summary of {record.video_id} was made at ingest (ingest it with "
                                        "summaries to make one)")
        return summary_markdown(found)

    @server.prompt(name="answer_from_archive", title="Answer from the archive with citations")
    def answer_from_archive(question: str) -> str:
        """Answer a question from the media archive only, citing the moments (file and time) it rests on."""
        return ANSWER_PROMPT.format(question=question.strip())
