"""Typed request and response bodies: the OpenAPI schema is generated from these."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, model_validator

from mediaindex.media.download import WebAddress

Modality = Literal["speech", "ocr", "visual", "subtitle", "marker", "summary", "chapter"]  # mediaindex.segments.MODALITIES


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorOut(BaseModel):
    error: str = Field(description="A short machine-readable code, e.g. not_found")
    message: str = Field(description="What went wrong, for a person")
    details: list[dict[str, Any]] | None = None


class Filters(_Strict):
    video_id: str | None = Field(default=None, max_length=64)
    modality: Modality | None = None
    language: str | None = Field(default=None, max_length=16)
    speaker: str | None = Field(default=None, max_length=16, description="Only speech of this speaker (S1, S2, …)")
    under: str | None = Field(default=None, min_length=1, max_length=4096,
                              description="Only files whose path starts with this (e.g. a folder, ending in /)")
    from_seconds: float | None = Field(default=None, ge=0, le=1e7, description="Only moments that end after this time")
    to_seconds: float | None = Field(default=None, ge=0, le=1e7, description="Only moments that start before this time")
    where: dict[Annotated[str, Field(min_length=1, max_length=200)],
                Annotated[str, Field(min_length=1, max_length=1000)] | StrictBool | StrictInt | StrictFloat] = Field(
        default_factory=dict, max_length=20,
        description="Only files whose metadata (a manifest's columns, a downloaded file's `source_url`) has these "
                    "values: {\"tags\": \"physics\", \"year\": 1999, \"reviewed\": true} (text in any case); a list (tags) "
                    "has a value when one of its items is it; all must hold")


class SearchRequest(_Strict):
    q: str = Field(min_length=1, max_length=1000, description="What to look for, in any language")
    limit: int = Field(default=10, ge=1, le=100)
    filters: Filters = Field(default_factory=Filters)
    min_confidence: str = Field(default="low", max_length=16,
                                description="How sure a hit must be: high, medium, low or none (every ranked moment)")


class SearchFilesRequest(SearchRequest):
    limit: int = Field(default=10, ge=1, le=100, description="At most this many files")
    per_file: int = Field(default=3, ge=1, le=20, description="At most this many of each file's moments")


class HitOut(BaseModel):
    source: str
    video_id: str
    start: float
    end: float
    score: float
    modality: str
    text: str
    language: str | None = None
    speaker: str | None = Field(default=None, description="Who speaks in a speech hit: S1, S2, … within one file")
    thumbnail: str | None = Field(default=None, description="Path relative to the index's thumbnail folder")
    title: str = Field(description="The media file's name")
    thumbnail_url: str | None = None
    media_url: str = Field(description="The media file itself; supports HTTP range requests")
    play_url: str = Field(description="Plays the media from the first matched word, else the hit's start "
                                      "(media fragment #t=)")
    page_url: str = Field(description="The web page's view of this video at the hit's start time")
    highlights: list[tuple[int, int]] = Field(
        default_factory=list, description="Character spans of the text that match words of the query")
    band: Literal["high", "medium", "low"] | None = Field(
        default=None, description="How sure the search is that this moment matches (hits below low are not returned)")
    seek: float | None = Field(default=None, description="Where play_url starts: the first matched spoken word, "
                                                         "when the moment has one (else start)")
    looks_like: list[str] = Field(default_factory=list, description="A picture without words (empty text): the "
                                  "classes it looks most like, likeliest first")
    track: str | None = Field(default=None, description="The subtitle track a subtitle hit is of (\"stream 2\", a "
                              "subtitle file's name), or the audio track other than the default one a speech hit was "
                              "heard on (\"audio 2 (de)\")")
    in_chapter: str | None = Field(default=None, description="The title of the chapter the file marks (an "
                                   "audiobook's, a film's) that the moment lies in")
    on_disk: bool = Field(True, description="False when the media file is no longer at its path (it cannot be "
                                            "played)")


class SearchResponse(BaseModel):
    query: str
    took_ms: float
    hits: list[HitOut]


class FileHitsOut(BaseModel):
    video_id: str
    source: str
    title: str = Field(description="The media file's name")
    score: float = Field(description="Its best moment's score")
    band: Literal["high", "medium", "low"] | None = Field(default=None, description="Its best moment's band")
    count: int = Field(description="How many of its moments match (as sure as min_confidence asks)")
    on_disk: bool = Field(True, description="False when the media file is no longer at its path")
    page_url: str = Field(description="The web page's view of this file")
    moments: list[HitOut] = Field(description="Its best moments, best first")


class FilesResponse(BaseModel):
    query: str
    took_ms: float
    files: list[FileHitsOut] = Field(description="The files that hold a match, best first")


class VideoOut(BaseModel):
    video_id: str
    title: str
    source: str
    duration: float | None
    language: str | None
    segments: int
    indexed_at: float
    has_video: bool
    has_audio: bool = Field(True, description="Whether the file has sound")
    media_url: str
    thumbnail_url: str | None = None
    on_disk: bool = Field(True, description="False when the file is no longer at its path (it cannot be played; "
                                            "DELETE /videos/{id} takes it out of the index)")
    metadata: dict[str, Any] = Field(default_factory=dict, description=(
        "What the file was indexed with: a manifest's columns (title, tags, …), a downloaded file's `source_url`; "
        "search's `where` filters on it"))


class LibraryVideoOut(VideoOut):
    kinds: dict[str, int] = Field(default_factory=dict, description="Segments per kind: speech, ocr, visual, …")


class LibraryOut(BaseModel):
    files: int = Field(description="Files in the index (with `where`: those that pass)")
    segments: int = Field(description="Segments in the index, all kinds (with `where`: of the files that pass)")
    duration: float = Field(description="Seconds of media in the index (with `where`: of the files that pass)")
    offset: int
    limit: int
    videos: list[LibraryVideoOut] = Field(description="This page of files, by path")
    examples: list[str] = Field(description="A few queries taken from what the index holds")
    keys_required: bool = Field(description="Whether this server asks for API keys")
    max_upload_bytes: int = Field(description="The largest file POST /ingest/upload takes")
    media_suffixes: list[str] = Field(description="The file types taken as media (by suffix: \".mkv\", \".m2ts\")")
    fetch_urls: Literal["public", "all", "off"] = Field(description=(
        "Which web addresses POST /ingest downloads (api.fetch_urls): public ones, all, or none"))


class TranscriptLine(BaseModel):
    start: float
    end: float
    text: str
    language: str | None = None
    speaker: str | None = Field(default=None, description="S1, S2, … within one file (diarization)")


class ChapterOut(BaseModel):
    title: str
    start: float
    end: float
    summary: str


class SummaryOut(BaseModel):
    text: str = Field(description="The summary; a cited moment is written [video_id@start-end]")
    chapters: list[ChapterOut]
    model: str = Field(description="The language model that wrote it")


class VideoDetail(VideoOut):
    probe: dict[str, Any]
    transcript: list[TranscriptLine]
    summary: SummaryOut | None = Field(default=None, description="The summary and chapters made when the file was "
                                                                 "indexed with summaries; null without")


SUMMARIES_DOC = (
    "Summarise every file with chapters, as searchable `summary` and `chapter` segments (the summary stage; "
    "`mediaindex ingest --summaries` / `--no-summaries`). A file that is already indexed and unchanged but has no "
    "summary gets one from the index, without being indexed again. Omitted or null: the server's "
    "`ingest.summaries` setting.")


Glob = Annotated[str, Field(min_length=1, max_length=512)]
MetaValue = str | int | float | bool | list[str | int | float]


class ManifestEntry(_Strict):
    path: str = Field(min_length=1, max_length=4096, description="A file or folder, as in `paths`")
    metadata: dict[Annotated[str, Field(min_length=1, max_length=200)], MetaValue | None] = Field(
        default_factory=dict, max_length=100,
        description="Stored in each of its segments' `extra` payload, as a manifest file's other columns are; "
                    "null takes the key away from a file indexed with it")


class IngestRequest(_Strict):
    paths: list[Annotated[str, Field(max_length=4096)]] = Field(
        default_factory=list, max_length=1000,
        description="Files or folders, relative to a media root or absolute inside one")
    manifest: list[ManifestEntry] = Field(
        default_factory=list, max_length=10000,
        description="Files or folders with metadata (what `mediaindex ingest --manifest FILE` reads from its file)")
    include: list[Glob] = Field(default_factory=list, max_length=100,
                                description="Globs a file inside a folder must match (path below the folder or name)")
    exclude: list[Glob] = Field(default_factory=list, max_length=100, description="Globs that leave a file out")
    urls: list[WebAddress] = Field(
        default_factory=list, max_length=20, description=(
            "Web addresses (http, https) of media files or of pages with one video (video sites' watch pages): "
            "the job downloads each into the server's download folder, then indexes it; an address that gives no "
            "media file is listed among the job's files as skipped, with why. Public addresses only unless the "
            "server's api.fetch_urls says otherwise"))
    # Strict: JSON true, false or null; a string or number is refused rather than guessed at ("no" -> False).
    summaries: bool | None = Field(default=None, strict=True, description=SUMMARIES_DOC)
    reindex: bool = Field(default=False, strict=True, description=(
        "Index the files again even when they are indexed and unchanged, replacing their segments (`mediaindex "
        "ingest --reindex`): files indexed by an earlier version get what this one finds"))

    @model_validator(mode="after")
    def _something_to_ingest(self) -> IngestRequest:
        if not self.paths and not self.manifest and not self.urls:
            raise ValueError("nothing to ingest: give paths, manifest entries or urls")
        return self


class SummarizeRequest(_Strict):
    video_id: str = Field(min_length=1, max_length=64)
    instructions: str | None = Field(default=None, max_length=2000)
    recompute: bool = Field(default=False, description="Run the model even when a summary was stored at ingest")


class AskRequest(_Strict):
    question: str = Field(min_length=1, max_length=2000, description="A question about the archive")
    video_id: str | None = Field(default=None, min_length=1, max_length=64, description="Only this video")
    where: dict[Annotated[str, Field(min_length=1, max_length=200)],
                Annotated[str, Field(min_length=1, max_length=1000)] | StrictBool | StrictInt | StrictFloat] = Field(
        default_factory=dict, max_length=20, description="Only the files whose metadata has these values, as "
                                                         "search's `where`")


class JobFileOut(BaseModel):
    path: str
    state: str
    reason: str
    video_id: str | None


class JobProgressOut(BaseModel):
    now: dict[str, dict[str, float | None]] = Field(default_factory=dict)
    eta: float | None = None
    finished: int = 0
    total: int = 0
    media_seconds: float = 0.0
    updated: float | None = None


class JobOut(BaseModel):
    id: str
    kind: str
    # "interrupted": recorded as running, but the process that ran it is gone (killed); resume it.
    state: Literal["pending", "running", "interrupted", "done", "failed", "cancelled"]
    params: dict[str, Any]
    result: Any = None
    error: str | None = None
    created: float
    updated: float
    counts: dict[str, int] = Field(default_factory=dict)
    files: list[JobFileOut] = Field(default_factory=list)
    url: str
    # Someone asked it to stop: a running ingest stops at its next file boundary, keeping finished files; a
    # summary or question before its next language-model call.
    cancel_requested: bool = False
    # A running ingest: the files in its stages with each stage's share done ({path: {"speech": 0.43}}; null
    # where a stage cannot tell), its ETA in seconds, and when this was written (every few seconds).
    progress: JobProgressOut | None = None


class HealthOut(BaseModel):
    status: Literal["ok"]


class ReadyOut(BaseModel):
    ready: bool
    checks: dict[str, str]
