"""Questions and videos the agentic jobs refuse before any work starts: a clear reason, no job record left."""

from __future__ import annotations

from pathlib import Path

import pytest

from mediaindex.agents import jobs as agent_jobs
from mediaindex.agents.ask import MAX_QUESTION_CHARS, AgentInputError
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
        agent_jobs.submit_ask(settings, question)
    store = JobStore.of(settings)
    try:
        assert [j.id for j in store.list()] == [kept]  # nothing added, nothing lost
    finally:
        store.close()
    assert MAX_QUESTION_CHARS == 1000


def test_no_video_is_refused(tmp_path: Path, cache_dir: Path) -> None:
    with pytest.raises(AgentInputError, match="no video given"):
        agent_jobs.submit_summarize(make_settings(tmp_path / "index", cache_dir), "  ")


def test_an_answer_loses_the_internal_video_ids_it_copied_but_keeps_its_citations() -> None:
    from mediaindex.agents.citations import parse_citations, without_video_ids

    vid = "66ea5dae58548e6b"
    said = (f"The speaker said in pendulum_lecture.webm, video {vid}, 70.5-73.7 s that it breaks a building. "
            f"[{vid}@70.5-73.7] Also Video ID: {vid} and [ {vid} @ 1.0-2.0 ]")
    clean = without_video_ids(said, {vid, "other"})
    assert clean == ("The speaker said in pendulum_lecture.webm, 70.5-73.7 s that it breaks a building. "
                     f"[{vid}@70.5-73.7] Also and [ {vid} @ 1.0-2.0 ]")
    assert parse_citations(clean) == parse_citations(said)
    # A word that merely contains an id, or an id the job never showed, stays.
    assert without_video_ids("video abc123x", {"abc123"}) == "video abc123x"
    assert without_video_ids(f"video {vid}", set()) == f"video {vid}"


def test_a_quote_in_another_language_is_named_by_its_language() -> None:
    from mediaindex.agents.ask import language_name

    assert (language_name("ko"), language_name("de"), language_name("en")) == ("Korean", "German", "English")
    assert language_name("xx") == "xx"
