"""What the tools return: each model's JSON schema is the tool's output schema, which agents read."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class _InFile(BaseModel):
    file: str = Field(description="The media file's name")
    source: str = Field(description="The media file's path on the server")
    video_id: str = Field(description="The file's id in the index (what other tools take as `file`)")


class Moment(_InFile):
    """A moment of a media file: where something was said, shown or seen."""

    start: float = Field(description="Seconds from the start of the file")
    end: float = Field(description="Seconds from the start of the file")
    confidence: str | None = Field(description="How sure the search is that the moment matches: high, medium or low")
    score: float = Field(description="The search's calibrated score, 0..1")
    modality: str = Field(description="speech (said), ocr (on screen), visual (seen), summary or chapter")
    text: str
    speaker: str | None = None
    language: str | None = None
    track: str | None = Field(default=None, description="The audio track other than the default one a speech "
                              "moment was heard on (\"audio 2 (de)\"), or a subtitle moment's track")
    in_chapter: str | None = Field(default=None, description="The title of the chapter the file marks (an "
                                   "audiobook's, a film's) that the moment lies in")
    play_url: str | None = Field(default=None, description="Plays the file from this moment (HTTP server only; "
                                                           "send the API key with it)")


class SearchResult(BaseModel):
    query: str
    moments: list[Moment] = Field(description=(
        "Best first; empty when nothing is as probably relevant as min_confidence asks (default low): ask "
        "again with min_confidence 'none' for the closest moments, however unlikely"))


class FileMatch(_InFile):
    """A file that holds a match, with its best moments."""

    confidence: str | None = Field(description="Its best moment's confidence: high, medium or low")
    score: float = Field(description="Its best moment's calibrated score, 0..1")
    count: int = Field(description="How many of its moments match")
    moments: list[Moment] = Field(description="Its best moments, best first")


class FilesResult(BaseModel):
    query: str
    files: list[FileMatch] = Field(description=(
        "Best first; empty when no file holds a moment as probably relevant as min_confidence asks (default low)"))


class TranscriptLine(BaseModel):
    start: float
    end: float
    text: str
    speaker: str | None = None
    language: str | None = None


class Transcript(BaseModel):
    file: str
    video_id: str
    format: str
    lines: list[TranscriptLine] | None = Field(default=None, description="format json: the spoken lines")
    text: str | None = Field(default=None, description="formats srt, vtt, txt, tsv: the transcript as text")


class FileEntry(BaseModel):
    file: str
    source: str
    video_id: str
    duration: float | None = Field(description="Seconds")
    language: str | None = Field(description="The main spoken language, when speech was found")
    segments: int = Field(description="Indexed segments (spoken lines, on-screen text, shots)")
    indexed_at: float = Field(description="Unix time")


class FileList(BaseModel):
    total: int
    offset: int
    files: list[FileEntry]


class Chapter(BaseModel):
    title: str
    start: float
    end: float
    summary: str


class Marker(BaseModel):
    title: str
    start: float
    end: float


class FileInfo(FileEntry):
    languages: list[str] = Field(description="Every language spoken or written in it")
    speakers: list[str] = Field(description="Speaker labels within the file (S1, S2, ...)")
    kinds: dict[str, int] = Field(description="Segments per modality")
    summary: str | None = Field(description="The summary stored at ingest (ingest with summaries), if any")
    chapters: list[Chapter]
    markers: list[Marker] = Field(default_factory=list, description=(
        "The chapters the file marks itself (an audiobook's, a podcast's, a film's), by their titles"))
    audio_tracks: list[str] = Field(default_factory=list, description=(
        "Its audio tracks where it has several, as moments name them (\"audio 2 (de)\"); the first is the default "
        "one, the file's own speech"))
    media_url: str | None = Field(default=None, description="The file itself (HTTP server only)")


class CitedMoment(BaseModel):
    file: str
    video_id: str
    start: float
    end: float
    text: str
    play_url: str | None = None


class AskResult(BaseModel):
    job_id: str
    status: str = Field(description="answered, or not_found when the archive does not hold the answer")
    answer: str
    citations: list[CitedMoment] = Field(description="The moments the answer rests on")
    searches: list[str] = Field(description="Every query the agent tried")
    model: str


class Job(BaseModel):
    id: str
    kind: str
    state: str = Field(description="pending, running, done, failed or cancelled")
    counts: dict[str, int] = Field(default_factory=dict, description="Files per state (ingest)")
    files: list[dict[str, Any]] = Field(default_factory=list)
    result: dict[str, Any] | None = None
    error: str | None = None
