"""Markdown for summaries and answers (the JSON output is the pydantic model itself)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mediaindex.agents.schema import Answer, Citation, VideoSummary


def ts(t: float) -> str:
    m, s = divmod(max(t, 0.0), 60)
    h, m = divmod(int(m), 60)
    return f"{h}:{m:02d}:{s:04.1f}" if h else f"{m}:{s:04.1f}"


def gone(source: str | None) -> str:
    """What to add to a file's name when it is no longer at the path it was indexed from (it cannot be played)."""
    return " (gone from disk)" if source and not os.path.exists(source) else ""


def moment(c: Citation, mark_gone: bool = True) -> str:
    """`file  0:19.8–0:26.0`: the file a person knows, then the span."""
    name = Path(c.source).name if c.source else c.video_id
    return f"{name}{gone(c.source) if mark_gone else ''}  {ts(c.start)}–{ts(c.end)}"


_CITE = re.compile(r"\s*\[([A-Za-z0-9_-]{1,64})@(\d+(?:\.\d+)?)-(\d+(?:\.\d+)?)\]")


def readable(text: str, citations: list[Citation]) -> str:
    """Inline `[VIDEO_ID@19.8-26.0]` in generated text becomes `(file  0:19.8–0:26.0)`."""
    names = {c.video_id: Path(c.source).name for c in citations if c.source}

    def one(m: re.Match[str]) -> str:
        return f" ({names.get(m.group(1), m.group(1))}  {ts(float(m.group(2)))}–{ts(float(m.group(3)))})"

    return _CITE.sub(one, text)


def summary_markdown(s: VideoSummary) -> str:
    name = Path(s.source).name
    lines = [f"# {name}{gone(s.source)}", ""]
    if s.duration is not None:
        lines += [f"*{ts(s.duration)} · video id `{s.video_id}` · model {s.model}*", ""]
    lines += ["## Summary", "", s.summary, ""]
    if s.citations:
        lines += ["Sources: " + "; ".join(moment(c, mark_gone=False) for c in s.citations), ""]
    if s.chapters:
        lines += ["## Chapters", ""]
        for ch in s.chapters:
            mark = "" if ch.generated else " *(extractive)*"
            lines.append(f"- **{ts(ch.start)}–{ts(ch.end)} {ch.title}**{mark}: {ch.summary}")
            lines.append("  - cites: " + "; ".join(moment(c, mark_gone=False) for c in ch.citations))
        lines.append("")
    if s.notes:
        lines += ["> " + n for n in s.notes] + [""]
    return "\n".join(lines)


def answer_markdown(a: Answer) -> str:
    label = {"answered": "Answer", "not_found": "Not found", "unsupported": "Unsupported answer"}[a.status]
    lines = [f"# {a.question}", "", f"**{label}** ({a.path}, {a.steps} steps, {a.tokens} tokens, {a.model})", "",
             readable(a.answer, a.citations), ""]
    if a.citations:
        lines += ["## Moments", ""]
        for c in a.citations:
            quote = f": “{c.text[:200]}”" if c.text else ""
            lines.append(f"- {moment(c)}{quote}")
        lines.append("")
    if a.rejected_citations:
        lines += ["## Rejected citations", ""]
        lines += [f"- `{r.video_id}` {r.start:g}–{r.end:g} s: {r.reason}" for r in a.rejected_citations]
        lines.append("")
    if a.searches and a.status != "not_found":  # a "not found" answer names its searches itself
        lines += ["Searches tried: " + "; ".join(f"“{q}”" for q in a.searches), ""]
    return "\n".join(lines)
