"""The structured outputs of agentic jobs (pydantic), validated against their own JSON schema before storage."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Citation(_Out):
    """A moment: a video and a time range in seconds."""

    video_id: str = Field(min_length=1)
    start: float = Field(ge=0)
    end: float = Field(ge=0)
    modality: str | None = None
    text: str = ""  # the indexed text of the cited moment (empty for pure visual moments)
    source: str | None = None

    @model_validator(mode="after")
    def _ordered(self) -> Citation:
        if self.end < self.start:
            raise ValueError(f"citation ends ({self.end}) before it starts ({self.start})")
        return self


class RejectedCitation(_Out):
    video_id: str
    start: float
    end: float
    reason: str


class Chapter(_Out):
    title: str
    start: float = Field(ge=0)
    end: float = Field(ge=0)
    summary: str
    citations: list[Citation]
    generated: bool  # False: the model's text was not grounded and an extractive summary stands in for it


class VideoSummary(_Out):
    kind: Literal["summary"] = "summary"
    video_id: str
    source: str
    duration: float | None
    status: Literal["summarised", "visual_only", "nothing_to_summarise"]
    summary: str
    citations: list[Citation]
    chapters: list[Chapter]
    model: str
    windows: int  # map windows sent to the engine in one batch
    notes: list[str] = []


class TraceStep(_Out):
    step: int
    kind: Literal["model", "tool_call", "tool_result", "error", "fallback", "final"]
    content: str = ""
    tool: str | None = None
    arguments: dict[str, Any] | None = None
    tokens: int = 0


class Answer(_Out):
    kind: Literal["answer"] = "answer"
    question: str
    video_id: str | None
    status: Literal["answered", "not_found", "unsupported"]
    answer: str
    citations: list[Citation]
    rejected_citations: list[RejectedCitation]
    searches: list[str]  # every query tried, in order
    path: Literal["agent", "fallback"]  # did the tool loop finish, or did plain retrieval answer
    model: str
    steps: int
    tokens: int
    trace: list[TraceStep]


def validate_output(obj: VideoSummary | Answer) -> dict[str, Any]:
    """Dump to JSON-compatible data and check it against the class's JSON schema (what API clients receive)."""
    import jsonschema

    data = obj.model_dump(mode="json")
    jsonschema.validate(data, type(obj).model_json_schema())
    return data
