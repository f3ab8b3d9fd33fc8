"""Markdown for summaries and answers (the JSON output is the pydantic model itself)."""

from __future__ import annotations

from pathlib import Path

from mediaindex.agents.schema import Answer, Citation, VideoSummary


def ts(t: float) -> str:
    m, s = divmod(max(t, 0.0), 60)
    h, m = divmod(int(m), 60)
    return f"{h}:{m:02d}:{s:04.1f}" if h else f"{m}:{s:04.1f}"


def moment(c: Citation) -> str:
    name = Path(c.source).name if c.source else c.video_id
    return f"{name} {ts(c.start)}–{ts(c.end)}"


def summary_markdown(s: VideoSummary) -> str:
    name = Path(s.source).name
    lines = [f"# {name}", ""]
    if s.duration is not None:
        lines += [f"*{ts(s.duration)} · video id `{s.video_id}` · model {s.model}*", ""]
    lines += ["## Summary", "", s.summary, ""]
    if s.citations:
        lines += ["Sources: " + "; ".join(moment(c) for c in s.citations), ""]
    if s.chapters:
        lines += ["## Chapters", ""]
        for ch in s.chapters:
            mark = "" if ch.generated else " *(extractive)*"
            lines.append(f"- **{ts(ch.start)}–{ts(ch.end)} {ch.title}**{mark}: {ch.summary}")
            lines.append("  - cites: " + "; ".join(moment(c) for c in ch.citations))
        lines.append("")
    if s.notes:
        lines += ["> " + n for n in s.notes] + [""]
    return "\n".join(lines)


def answer_markdown(a: Answer) -> str:
    label = {"answered": "Answer", "not_found": "Not found", "unsupported": "Unsupported answer"}[a.status]
    lines = [f"# {a.question}", "", f"**{label}** ({a.path}, {a.steps} steps, {a.tokens} tokens, {a.model})", "",
             a.answer, ""]
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
    if a.searches:
        lines += ["Searches tried: " + "; ".join(f"“{q}”" for q in a.searches), ""]
    return "\n".join(lines)
