"""Questions and videos the agentic jobs refuse before any work starts: a clear reason, no job record left."""

from __future__ import annotations

from pathlib import Path

import pytest

from mediaindex import agents
from mediaindex.agents import AgentInputError
from mediaindex.agents.ask import MAX_QUESTION_CHARS
from mediaindex.jobs import JobStore
from tests.conftest import make_settings


@pytest.mark.parametrize(("question", "reason"), [
    ("", "the question is empty"),
    ("   \n\t ", "the question is empty"),
    ("why? " * 4000, "the question is too long (19999 characters, at most 1000)"),
])
def test_bad_questions_are_refused_and_leave_no_job(tmp_path: Path, cache_dir: Path, question: str,
                                                    reason: str) -> None:
    settings = make_settings(tmp_path / "index", cache_dir)
    store = JobStore.of(settings)
    kept = store.create("ask", {"question": "an earlier job", "video": None}).id
    store.close()
    with pytest.raises(AgentInputError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        agents.submit_ask(settings, question)
    store = JobStore.of(settings)
    try:
        assert [j.id for j in store.list()] == [kept]  # nothing added, nothing lost
    finally:
        store.close()
    assert MAX_QUESTION_CHARS == 1000


def test_no_video_is_refused(tmp_path: Path, cache_dir: Path) -> None:
    with pytest.raises(AgentInputError, match="no video given"):
        agents.submit_summarize(make_settings(tmp_path / "index", cache_dir), "  ")
