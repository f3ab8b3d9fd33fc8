"""What `summarize` / `ask` show while they work, on a real pseudo-terminal and into a pipe."""

from __future__ import annotations

import io
import os
import select
import time

from rich.console import Console

from mediaindex.agents.events import AgentEvent
from mediaindex.agents.render import answer_markdown, readable, summary_markdown
from mediaindex.agents.schema import Answer, Chapter, Citation, VideoSummary
from mediaindex.cli.agent_display import AgentDisplay, show_markdown
from tests.conftest import media


def _read_all(fd: int, wait: float = 0.3) -> str:
    chunks, end = [], time.monotonic() + wait
    while time.monotonic() < end:
        ready, _, _ = select.select([fd], [], [], 0.05)
        if ready:
            chunks.append(os.read(fd, 65536))
    return b"".join(chunks).decode("utf-8", "replace")


def _answer() -> Answer:
    cite = Citation(video_id="ebd120327a5dd8d9", start=19.8, end=26.0, modality="speech",
                    text="ask not what your country can do for you", source=str(media("audio/jfk.flac")))
    return Answer(question="What does he ask?", status="answered", path="agent", model="qwen2.5-coder-0.5b",
                  answer="He asks what you can do for your country. [ebd120327a5dd8d9@19.8-26.0]",
                  citations=[cite], steps=2, tokens=57, searches=["what does he ask"], video_id=None,
                  rejected_citations=[], trace=[])


def test_progress_and_markdown_on_a_pseudo_terminal() -> None:
    master, slave = os.openpty()
    try:
        tty = os.fdopen(slave, "w", encoding="utf-8", closefd=False)
        console = Console(file=tty, width=100)
        assert console.is_terminal
        with AgentDisplay(console, "ask") as display:
            display(AgentEvent("step", "step 1 of at most 4", step=1))
            display(AgentEvent("tool_call", 'search(query="country")', step=1, tokens=23))
            time.sleep(0.3)  # the status line refreshes on its own timer
            display(AgentEvent("model", "the answer", step=2, tokens=57))
            time.sleep(0.3)
        shown = _read_all(master)
        assert '→ search(query="country")' in shown  # each tool call keeps a line of its own
        assert "step 1" in shown and "23 tokens" in shown and "step 2" in shown and "57 tokens" in shown
        show_markdown(console, answer_markdown(_answer()))
        tty.flush()
        rendered = _read_all(master)
        assert "\x1b[" in rendered and "# What does he ask?" not in rendered  # rendered, not raw Markdown
        assert "jfk.flac  0:19.8–0:26.0" in rendered and "ebd120327a5dd8d9@" not in rendered
    finally:
        os.close(master)
        os.close(slave)


def test_a_pipe_gets_plain_markdown_and_no_progress() -> None:
    buf = io.StringIO()
    console = Console(file=buf)
    assert not console.is_terminal
    with AgentDisplay(console, "ask") as display:
        display(AgentEvent("tool_call", 'search(query="country")', step=1, tokens=23))
    assert buf.getvalue() == ""
    md = answer_markdown(_answer())
    show_markdown(console, md)
    assert buf.getvalue() == md + "\n"
    assert md.startswith("# What does he ask?")
    assert "He asks what you can do for your country. (jfk.flac  0:19.8–0:26.0)" in md
    assert "- jfk.flac  0:19.8–0:26.0: “ask not what" in md


def test_unknown_video_ids_stay_as_they_are() -> None:
    assert readable("x [abc@1.0-2.5]", []) == "x (abc  0:01.0–0:02.5)"


def test_a_not_found_answer_names_its_searches_once() -> None:
    tried = "Not found in the archive. Searches tried: “an elephant”; “Is there an elephant?”."
    md = answer_markdown(_answer().model_copy(update={"status": "not_found", "answer": tried, "citations": [],
                                                     "searches": ["an elephant", "Is there an elephant?"]}))
    assert md.count("Searches tried") == 1 and "**Not found**" in md
    assert answer_markdown(_answer()).count("Searches tried: “what does he ask”") == 1


def test_moments_of_a_file_gone_from_disk_say_so(tmp_path) -> None:
    """A cited file no longer at its path cannot be played: the answer's moment and the summary's heading say so
    (once: not at each of the summary's own citations)."""
    gone = str(tmp_path / "moved-away" / "jfk.flac")
    answer = _answer()
    answer = answer.model_copy(update={"citations": [answer.citations[0].model_copy(update={"source": gone})]})
    md = answer_markdown(answer)
    assert "- jfk.flac (gone from disk)  0:19.8–0:26.0: “ask not what" in md
    assert "(jfk.flac  0:19.8–0:26.0)" in md  # the inline marker stays a plain reference
    assert "(gone from disk)" not in answer_markdown(_answer())  # a file on disk is not marked
    cite = answer.citations[0]
    summary = VideoSummary(video_id=cite.video_id, source=gone, duration=11.0, status="summarised",
                           summary="A call to serve. [ebd120327a5dd8d9@19.8-26.0]", citations=[cite], model="m",
                           windows=1, chapters=[Chapter(title="The call", start=0.0, end=11.0, summary="Ask not.", generated=True,
                                                        citations=[cite])])
    md = summary_markdown(summary)
    assert md.startswith("# jfk.flac (gone from disk)\n") and md.count("gone from disk") == 1
