"""The tools an agent calls: search, search_files, get_transcript, ask, list_files, file_info, ingest, job_status.

Each is a thin face over what the CLI and the HTTP API call (the service's `Archive`: search, transcripts, the
question job; the API's ingest queue); arguments are typed and bounded, so a bad call fails with a message
that says which argument is wrong, and any failure is a tool error, never a traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal
from urllib.parse import urljoin

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field, StrictBool, StrictFloat, StrictInt

from mediaindex.index.filters import SearchFilters, where_pairs
from mediaindex.mcp import models
from mediaindex.mcp.searching import search as run_search
from mediaindex.media.download import WebAddress
from mediaindex.media.probe import track_labels
from mediaindex.segments import MODALITIES, Hit

if TYPE_CHECKING:
    from mediaindex.agents.events import AgentEvent
    from mediaindex.index.catalog import VideoRecord
    from mediaindex.mcp.host import ArchiveHost

log = logging.getLogger(__name__)

MAX_QUERY_CHARS = 1000  # as the HTTP API's /search
MAX_LIMIT = 100
MAX_PER_FILE = 20  # as the HTTP API's /search/files
READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
TRANSCRIPT_FORMATS = ("json", "srt", "vtt", "txt", "tsv")

FileRef = Annotated[str, Field(min_length=1, max_length=4096, description=(
    "An indexed file: its video id (from search or list_files), a unique id prefix, its file name or its path"))]
Seconds = Annotated[float, Field(ge=0, le=1e7, description="Seconds from the start of the file")]
Modality = Literal["speech", "ocr", "visual", "subtitle", "marker", "summary", "chapter"]
Query = Annotated[str, Field(min_length=1, max_length=MAX_QUERY_CHARS, description=(
    "What to find, in plain language and any language: words said, text on screen, things seen"))]
Modalities = Annotated[list[Modality] | None, Field(min_length=1, description="Only these kinds of moments (default: all)")]
Language = Annotated[str | None, Field(min_length=1, max_length=16, description=(
    "Only moments in this language code, e.g. en"))]
Speaker = Annotated[str | None, Field(min_length=1, max_length=16, description=(
    "Only speech of this speaker label within a file (S1, S2, ...)"))]
MetadataValue = Annotated[str, Field(min_length=1, max_length=1000)] | StrictBool | StrictInt | StrictFloat
Where = Annotated[dict[Annotated[str, Field(min_length=1, max_length=200)], MetadataValue] | None, Field(
    max_length=20, description=(
        "Only files whose metadata has these values, e.g. {\"tags\": \"physics\", \"reviewed\": true} (what they were indexed with: "
        "a manifest's columns, a downloaded file's source_url), text in any case; a list (tags) has a value when "
        "one of its items is it; all must hold"))]
MinConfidence = Annotated[Literal["high", "medium", "low", "none"] | None, Field(description=(
    "Leave out moments the search is less sure of than this"))]


def search_filters(video_id: str | None, modality: list[Modality] | None, language: str | None, speaker: str | None,
                   start: float | None, end: float | None, where: dict[str, str | int | float | bool] | None) -> SearchFilters:
    return SearchFilters(video_id=video_id, modality=tuple(modality) if modality else None, language=language,
                         speaker=speaker, start=start, end=end, metadata=where_pairs(where))


@contextmanager
def tool_errors(host: ArchiveHost) -> Iterator[None]:
    """The failures a tool expects become tool errors with their message (the server's folders hidden); anything
    else is logged here and told as an internal error, without its details."""
    try:
        yield
    except ToolError:
        raise
    except host.user_errors as exc:
        raise ToolError(host.public(str(exc) or type(exc).__name__)) from exc
    except Exception as exc:
        log.exception("MCP tool failed")
        raise ToolError("internal error: the server could not complete this call (see the server log)") from exc


def resolve(host: ArchiveHost, ref: str) -> VideoRecord:
    record = host.archive.find(ref)
    if record is None:
        raise ToolError(f"no indexed file {ref!r}: give a video id from search or list_files, or an indexed "
                        "file's name or path")
    return record


def base_url(ctx: Context | None) -> str | None:
    """The HTTP server's root as the client reached it; None over stdio (no URL plays anything there)."""
    try:
        request = ctx.request_context.request if ctx is not None else None
    except ValueError:  # a context outside a request
        return None
    url = getattr(request, "base_url", None)
    return str(url) if url is not None else None


def moment(host: ArchiveHost, hit: Hit, query: str, base: str | None) -> models.Moment:
    source = host.public(hit.source)  # an upload by its own name, never the index's folder
    return models.Moment(
        file=Path(source).name, source=source, video_id=hit.video_id, start=hit.start,
        end=hit.end, confidence=hit.band, score=hit.score, modality=hit.modality, text=hit.text,
        speaker=hit.speaker, language=hit.language, track=hit.track, in_chapter=hit.in_chapter,
        play_url=urljoin(base, host.play_path(hit, query).lstrip("/")) if base else None)


def entry(host: ArchiveHost, record: VideoRecord) -> dict:
    source = host.public(record.source)
    return dict(file=Path(source).name, source=source, video_id=record.video_id,
                duration=record.duration, language=record.language, segments=record.segments,
                indexed_at=record.indexed_at)


def register(server: MCPServer, host: ArchiveHost, allow_ingest: bool) -> None:
    @server.tool(annotations=READ_ONLY)
    def search(
        query: Query,
        file: FileRef | None = None,
        modality: Modalities = None,
        language: Language = None,
        speaker: Speaker = None,
        from_seconds: Annotated[Seconds | None, Field(description="Only moments that end after this time")] = None,
        to_seconds: Annotated[Seconds | None, Field(description="Only moments that start before this time")] = None,
        where: Where = None,
        min_confidence: MinConfidence = None,
        limit: Annotated[int, Field(ge=1, le=MAX_LIMIT, description="At most this many moments")] = 10,
        ctx: Context | None = None,
    ) -> models.SearchResult:
        """Search the media archive in plain language. Returns moments (file, start and end in seconds,
        confidence, what was said or shown there), best first; an empty list means the archive does not hold
        it. Cite a moment as file @ start-end; read around it with get_transcript."""
        with tool_errors(host):
            video_id = resolve(host, file).video_id if file is not None else None
            filters = search_filters(video_id, modality, language, speaker, from_seconds, to_seconds, where)
            hits = run_search(host, query, limit, filters, min_confidence)
            base = base_url(ctx)
            return models.SearchResult(query=query,
                                       moments=[moment(host, h, query, base) for h in hits])

    @server.tool(annotations=READ_ONLY)
    def search_files(
        query: Query,
        modality: Modalities = None,
        language: Language = None,
        speaker: Speaker = None,
        where: Where = None,
        min_confidence: MinConfidence = None,
        limit: Annotated[int, Field(ge=1, le=MAX_LIMIT, description="At most this many files")] = 10,
        per_file: Annotated[int, Field(ge=1, le=MAX_PER_FILE, description=(
            "At most this many of each file's moments"))] = 3,
        ctx: Context | None = None,
    ) -> models.FilesResult:
        """Which files of the media archive hold what the query describes: files best first (by their best
        moment), each with how many of its moments match and the best of them. For questions like "which
        videos talk about X"; an empty list means no file holds it."""
        with tool_errors(host):
            filters = search_filters(None, modality, language, speaker, None, None, where)
            found = host.archive.search_files(query, limit, filters, min_confidence=min_confidence, per_file=per_file)
            base = base_url(ctx)
            return models.FilesResult(query=query, files=[models.FileMatch(
                file=Path(host.public(f.source)).name, source=host.public(f.source), video_id=f.video_id,
                confidence=f.band, score=f.score, count=f.count,
                moments=[moment(host, h, query, base) for h in f.moments]) for f in found])

    @server.tool(annotations=READ_ONLY)
    def get_transcript(
        file: FileRef,
        from_seconds: Annotated[Seconds | None, Field(description="Only lines that end after this time")] = None,
        to_seconds: Annotated[Seconds | None, Field(description="Only lines that start before this time")] = None,
        format: Annotated[Literal["json", "srt", "vtt", "txt", "tsv"], Field(description=(  # noqa: A002
            "json: lines with start, end, speaker; srt or vtt: subtitles; txt: plain text; tsv: a table"))] = "json",
    ) -> models.Transcript:
        """What was said in an indexed file, with times (and speakers where they were told apart), optionally
        only between two times. Use it to read the context of a moment that search found."""
        from mediaindex.index.transcript import export

        with tool_errors(host):
            record = resolve(host, file)
            if from_seconds is not None and to_seconds is not None and to_seconds < from_seconds:
                raise ToolError(f"to_seconds ({to_seconds}) is before from_seconds ({from_seconds})")
            lines = [s for s in host.archive.speech(record.video_id)
                     if (from_seconds is None or s["end"] > from_seconds)
                     and (to_seconds is None or s["start"] < to_seconds)]
            out = models.Transcript(file=Path(record.source).name, video_id=record.video_id, format=format)
            if format == "json":
                out.lines = [models.TranscriptLine(start=s["start"], end=s["end"], text=s["text"],
                                                   speaker=s.get("speaker"), language=s.get("language"))
                             for s in lines]
            else:
                meta = {"source": record.source, "video_id": record.video_id, "language": record.language,
                        "duration": record.duration}
                out.text = export(lines, format, meta)
            return out

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False, idempotent_hint=False))
    async def ask(
        question: Annotated[str, Field(min_length=1, max_length=1000, description="A question about the archive")],
        file: FileRef | None = None,
        where: Where = None,
        ctx: Context | None = None,
    ) -> models.AskResult:
        """Answer a question from the archive: the server's own agent searches, reads and answers in a sentence
        that cites the moments it rests on, or says the archive does not hold the answer (status not_found).
        Slower than search (a language model runs); prefer search when moments are what you need."""
        base = base_url(ctx)
        with tool_errors(host):
            arc = host.archive
            video = resolve(host, file).video_id if file is not None else None

            def progress(event: AgentEvent) -> None:  # from the job's thread
                if ctx is not None:
                    try:
                        anyio.from_thread.run(ctx.report_progress, event.step, None, event.text)
                    except Exception:  # a client gone or without progress: the answer still comes
                        log.debug("progress not sent", exc_info=True)

            job_id = arc.submit_ask(question, video, where_pairs(where))

            def answer() -> dict:
                job = arc.run_job(job_id, "ask", on_event=progress)
                if job.state != "done" or job.output is None:
                    raise ToolError(f"the question could not be answered: {host.public(job.error or job.state)}")
                return job.output

            try:
                out = await anyio.to_thread.run_sync(answer, abandon_on_cancel=True)
            except anyio.get_cancelled_exc_class():
                # The client cancelled the call: the job stops before its next model call instead of answering
                # for no one (its thread ends then).
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(arc.cancel_job, job_id)
                raise
            cited = []
            for c in out["citations"]:
                hit = Hit(source=c.get("source") or "", video_id=c["video_id"], start=c["start"], end=c["end"],
                          score=0.0, modality=c.get("modality") or "speech", text=c.get("text") or "")
                record = arc.video(c["video_id"])
                cited.append(models.CitedMoment(
                    file=Path(record.source).name if record else c["video_id"], video_id=c["video_id"],
                    start=c["start"], end=c["end"], text=c.get("text") or "",
                    play_url=urljoin(base, host.play_path(hit, question).lstrip("/")) if base else None))
            return models.AskResult(job_id=job_id, status=out["status"], answer=out["answer"], citations=cited,
                                    searches=out["searches"], model=out["model"])

    @server.tool(annotations=READ_ONLY)
    def list_files(
        offset: Annotated[int, Field(ge=0, le=10_000_000, description="Skip this many files")] = 0,
        limit: Annotated[int, Field(ge=1, le=200, description="At most this many files")] = 50,
    ) -> models.FileList:
        """The indexed media files, by path: id, duration, main language and how much was indexed. file_info
        tells more about one (languages, speakers, summary)."""
        with tool_errors(host):
            records = host.archive.files()
            page = records[offset:offset + limit]
            return models.FileList(total=len(records), offset=offset,
                                   files=[models.FileEntry(**entry(host, r)) for r in page])

    @server.tool(annotations=READ_ONLY)
    def file_info(file: FileRef, ctx: Context | None = None) -> models.FileInfo:
        """One indexed file: duration, the languages spoken or written in it, its speakers, what kinds of
        moments were indexed, and its summary with chapters when one was made at ingest."""
        with tool_errors(host):
            record = resolve(host, file)
            segments = host.archive.segments(record.video_id)
            kinds = {m: n for m in MODALITIES if (n := sum(s.get("modality") == m for s in segments))}
            summary = host.archive.stored_summary(record.video_id)
            base = base_url(ctx)
            media = host.play_path(Hit(record.source, record.video_id, 0.0, 0.0, 0.0, "speech", ""), "")
            return models.FileInfo(
                **entry(host, record),
                languages=sorted({s["language"] for s in segments if s.get("language")}),
                speakers=sorted({s["speaker"] for s in segments if s.get("speaker")}),
                kinds=kinds, summary=summary.summary if summary else None,
                chapters=[models.Chapter(title=c.title, start=c.start, end=c.end, summary=c.summary)
                          for c in (summary.chapters if summary else [])],
                markers=[models.Marker(**c) for c in record.probe.get("chapters") or []],
                audio_tracks=track_labels(record.probe.get("audio_tracks") or []),
                media_url=urljoin(base, media.split("#")[0].lstrip("/")) if base else None)

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False))
    def ingest(
        paths: Annotated[list[Annotated[str, Field(min_length=1, max_length=4096)]], Field(
            max_length=1000, description=(
                "Media files or folders on the server, relative to a media root or absolute inside one"))] | None = None,
        urls: Annotated[list[WebAddress], Field(max_length=20, description=(
            "Web addresses (http, https) of media files or of pages with one video (a video site's watch page): "
            "the job downloads each, then indexes it"))] | None = None,
        summaries: Annotated[bool | None, Field(description=(
            "Also summarise each file with chapters (slower; default: the server's setting)"))] = None,
        reindex: Annotated[bool, Field(strict=True, description=(
            "Index files again even when they are indexed and unchanged (files indexed by an earlier version "
            "get what this one finds)"))] = False,
    ) -> models.Job:
        """Index media files or folders that lie under the server's media roots, or media at web addresses, as
        a background job: returns the job at once; follow it with job_status until its state is done, then
        search the new files (an address that gave no media file is among the job's files as skipped, with why).
        Only a server started with write access (--allow-ingest) takes this; others refuse."""
        with tool_errors(host):
            if not allow_ingest:
                raise ToolError("this server is read-only: ingest needs a server started with write access "
                                "(`mediaindex mcp --allow-ingest`, or api.mcp_allow_ingest for `serve`)")
            if not paths and not urls:
                raise ToolError("nothing to ingest: give paths or urls")
            return models.Job.model_validate(host.ingest(list(paths or []), summaries, reindex, list(urls or [])))

    @server.tool(annotations=READ_ONLY)
    def job_status(
        job_id: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[0-9A-Za-z_-]+$",
                                     description="The id ingest or ask returned")],
    ) -> models.Job:
        """A job's state (pending, running, done, failed or cancelled), its files and its result or error."""
        with tool_errors(host):
            return models.Job.model_validate(host.job(job_id))
