"""Questions over the archive: a bounded tool-calling loop, with plain retrieval-augmented answering as fallback.

The loop gives the model `search`, `get_transcript` and `get_frames_text` (Hermes / Qwen tool calls). Tool
results come back as numbered moments (`[3] "text" (said in file.mp4, video ID, 12.0-19.5 s)`; a spoken sentence
with the sentences around it), and the answer cites them by number, which the loop turns into
`[VIDEO_ID@START-END]` (a citation in that form is accepted too). It ends when the model answers with citations
to moments it was shown that are related to the question, in words taken from them that say more than the
question (a moment's words, and the label the tool gave it: file, video id, time; numbers included); when the
model's query finds nothing related to the question, the question's own search results are what it sees. It
corrects the model once (an answer that restates the question or is not in its moments, NOT FOUND over related
results, a repeated call); an answer still not in the words of the related moments it cites is replaced by those
moments' own words, quoted (the model found and cited them: an extractive answer on the loop's path). It falls
back when the model emits a malformed call twice, runs out of steps or tokens, or answers without citations of
related moments after its correction. The fallback retrieves passages itself, asks the model for a short answer citing them by number, and if that answer is not
grounded in the passages, quotes the best passage instead: the answer always cites real moments, or says
"not found" with the searches tried. Every model turn, tool call, result and error is in the trace.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace

from mediaindex.agents.citations import (
    CitationRef,
    check,
    cite,
    from_hit,
    parse_citations,
    strip_citations,
    without_video_ids,
)
from mediaindex.agents.events import AgentEvent, OnEvent, ignore
from mediaindex.agents.grounding import (
    adds_to,
    first_words,
    grounded,
    numbers_from,
    overlap,
    relevant,
    repetitive,
)
from mediaindex.agents.guides import first_turn_grammar, later_turn_grammar
from mediaindex.agents.llm import ChatModel, Completion, Message
from mediaindex.agents.render import ts
from mediaindex.agents.schema import Answer, Citation, RejectedCitation, TraceStep
from mediaindex.agents.toolcall import (
    CLOSE,
    ToolCallError,
    close_truncated,
    parse_reply,
    tool_response_message,
    tools_system_prompt,
)
from mediaindex.agents.tools import ANSWER_CONFIDENCE, ANSWER_LIMIT, SHOWN_AS, Archive, ToolError, ToolResult
from mediaindex.config import LLMSettings
from mediaindex.errors import NOT_UTF8_TEXT, MediaIndexError, is_utf8
from mediaindex.index.filters import check_metadata
from mediaindex.models.text_language import query_language
from mediaindex.segments import MEDIA_MODALITIES, Hit

MAX_QUESTION_CHARS = 1000
NOT_FOUND = "NOT FOUND"
ANSWER_GROUNDING = 0.6  # share of the answer's own content words (not the question's) found in what it cites
CORRECTED_TEMPERATURE = 0.7
MIN_ANSWER_WORDS = 3
QUOTE_WORDS = 40  # an extractive answer quotes at most this many words of each cited moment

INSTRUCTIONS = (
    "You answer questions about an archive of videos. Search it first. Tools return numbered moments. Answer in "
    "one sentence with what the moments say, and cite the moments you used by number, like [1]."
)
# Told only to a model whose turns are not guided: a guided one is offered NOT FOUND when nothing it was shown is
# related to the question, and only then (a small model told of it says it over results that hold the answer).
UNGUIDED_NOT_FOUND = f" If no moment answers the question, reply {NOT_FOUND}."
# After each tool response: the question again, next to where the model writes (a small model loses it), and
# what it can do next.
NEXT = "Question: {question}\nAnswer it in one sentence from these moments and cite their numbers, or call a tool."
NEXT_UNRELATED = f"Question: {{question}}\nNone of these moments is about it. Search with other words, or reply {NOT_FOUND}."
NEXT_EMPTY = f"Question: {{question}}\nNothing matched. Search with other words, or reply {NOT_FOUND}."
ANSWER_NOW = "Question: {question}\n{why} Answer it in one sentence with what the moments above say, citing their numbers."
_NUMBER = re.compile(r"\[(\d{1,3})\]")


class AgentInputError(MediaIndexError):
    """A question or video reference that cannot be served (the message is for the user)."""


class _Fallback(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class _Run:
    question: str
    video_id: str | None
    settings: LLMSettings
    llm: ChatModel
    archive: Archive
    trace: list[TraceStep] = field(default_factory=list)
    searches: list[str] = field(default_factory=list)
    seen: list[Hit] = field(default_factory=list)  # every moment a tool showed the model
    scored: list[Hit] = field(default_factory=list)  # search hits, scored against the question (see search)
    question_hits: list[Hit] = field(default_factory=list)  # what the question's own search found
    tokens: int = 0
    steps: int = 0
    rejected: list[RejectedCitation] = field(default_factory=list)
    on_event: OnEvent = ignore
    must_answer: bool = False  # the next turn answers (no call, no NOT FOUND)
    corrected: bool = False  # the model was corrected once (asked to answer); the next problem falls back
    shown: list[Hit] = field(default_factory=list)  # moment [n] is shown[n - 1]
    where: tuple[tuple[str, str], ...] = ()  # only files with these metadata values are in scope

    def number(self, hit: Hit) -> int:
        """The moment's number for this job (the same moment keeps its number)."""
        for i, h in enumerate(self.shown, 1):
            if (h.video_id, h.start, h.end, h.modality) == (hit.video_id, hit.start, hit.end, hit.modality):
                return i
        self.shown.append(hit)
        return len(self.shown)

    def file_name(self, video_id: str) -> str:
        from pathlib import Path

        record = self.archive.video(video_id)
        return Path(record.source).name if record is not None else video_id

    def log(self, kind: str, content: str = "", **extra) -> None:
        self.trace.append(TraceStep(step=self.steps, kind=kind, content=content[:2000], **extra))
        if kind == "tool_call":
            args = extra.get("arguments") or {}
            line = f"{extra.get('tool')}({', '.join(f'{k}={json.dumps(v, ensure_ascii=False)}' for k, v in args.items())})"
        else:
            line = " ".join(content.split())[:160]
        self.on_event(AgentEvent(kind, line, self.steps, self.tokens))

    def budget_left(self) -> int:
        return self.settings.token_budget - self.tokens

    def call_model(self, messages: list[Message], max_tokens: int, stop: list[str] | None = None,
                   guide: str | None = None, temperature: float | None = None) -> Completion:
        max_tokens = min(max_tokens, self.budget_left())
        if max_tokens < 1:
            raise _Fallback("token budget spent")
        temperature = self.settings.temperature if temperature is None else temperature
        out = self.llm.chat([messages], max_tokens=max_tokens, stop=stop, temperature=temperature, guide=guide)[0]
        self.tokens += out.tokens
        self.log("model", out.text, tokens=out.tokens)
        if out.error:
            self.log("error", f"model request failed: {out.error}")
            raise _Fallback("the model request failed")
        return out

    def search(self, query: str, video_id: str | None, modality: str | None = None, limit: int = ANSWER_LIMIT,
               min_confidence: str = ANSWER_CONFIDENCE) -> list[Hit]:
        hits = self.archive.search(query, video_id or self.video_id, modality, limit, min_confidence, self.where)
        self.searches.append(query)
        # A score measures a hit against the query that found it: only the question's own search measures it
        # against the question. Hits of the model's other queries must show relevance by shared words.
        if self._is_question(query):
            self.question_hits.extend(hits)
            self.scored.extend(hits)
        else:
            self.scored.extend(replace(h, score=0.0, band=None) for h in hits)
        return hits

    def _is_question(self, query: str) -> bool:
        return query.strip().casefold() == self.question.strip().casefold()

    def search_question(self) -> None:
        """Search the question itself, once: only that search scores hits against the question."""
        if not any(self._is_question(q) for q in self.searches):
            self.search(self.question, None)

    def is_relevant(self, hit: Hit) -> bool:
        """Related to the question: the searcher's own confidence band for the question's search when it gives
        one ("low" is a guess: it needs the question's words too), else the score."""
        if hit.band is not None:
            return hit.band in ("high", "medium") or relevant(self.question, hit.text, 0.0, 1.1)
        return relevant(self.question, hit.text, hit.score, self.settings.min_relevance)



def check_question(question: object) -> str:
    """The question, stripped; AgentInputError for one that cannot be asked."""
    if not isinstance(question, str) or not question.strip():
        raise AgentInputError("the question is empty")
    question = question.strip()
    if not is_utf8(question):
        raise AgentInputError(f"the question {NOT_UTF8_TEXT}")
    if len(question) > MAX_QUESTION_CHARS:
        raise AgentInputError(f"the question is too long ({len(question)} characters, at most {MAX_QUESTION_CHARS})")
    return question

def check_scope(where: tuple[tuple[str, str], ...]) -> None:
    """AgentInputError for metadata conditions that cannot scope a question."""
    try:
        check_metadata(where)
    except ValueError as exc:
        raise AgentInputError(str(exc)) from exc


def ask(question: str, archive: Archive, llm: ChatModel, settings: LLMSettings, video: str | None = None,
        fallback: bool = True, on_event: OnEvent = ignore, where: tuple[tuple[str, str], ...] = ()) -> Answer:
    """Answer a question over the archive (or one video, or the files with `where`'s metadata values) with cited
    moments.

    With fallback=False the loop's own answer is returned even when it cites nothing real (status
    "unsupported"), which is how the benchmark measures the bare tool-calling path."""
    question = check_question(question)
    video_id = None
    if video is not None:
        record = archive.resolve(video)
        if record is None:
            raise AgentInputError(f"no video {video!r} in the index (give a video id or its start, the path it was "
                                  "ingested from, or its file name)")
        video_id = record.video_id
    check_scope(where)
    run = _Run(question, video_id, settings, llm, archive, on_event=on_event, where=where)
    try:
        return _agent_loop(run)
    except _Fallback as why:
        run.log("fallback", why.reason)
        if not fallback:
            return _finish(run, "unsupported", f"(no answer: {why.reason})", [], "agent")
        return _retrieval_answer(run)


def _user_prompt(run: _Run) -> str:
    if run.video_id:
        return f"{run.question}\n\n(Only video {run.video_id} is in scope.)"
    if run.where:
        return f"{run.question}\n\n(Only files with {_scope(run)} are in scope.)"
    return run.question


def _scope(run: _Run) -> str:
    return " and ".join(f"{key}: {value}" for key, value in run.where)


def _agent_loop(run: _Run) -> Answer:
    messages: list[Message] = [
        {"role": "system", "content": tools_system_prompt(
            INSTRUCTIONS + ("" if run.settings.guided_decoding else UNGUIDED_NOT_FOUND))},
        {"role": "user", "content": _user_prompt(run)},
    ]
    errors = 0
    called: set[str] = set()
    while run.steps < run.settings.max_steps:
        run.steps += 1
        run.on_event(AgentEvent("step", f"step {run.steps} of at most {run.settings.max_steps}", run.steps,
                                run.tokens))
        # A corrected turn samples (seeded, so a job repeats itself): greedy, a small model writes the same rejected
        # answer again.
        temperature = max(run.settings.temperature, CORRECTED_TEMPERATURE) if run.must_answer else None
        out = run.call_model(messages, run.settings.max_new_tokens, stop=[CLOSE], guide=_turn_guide(run),
                             temperature=temperature)
        text = close_truncated(out.text, out.finish_reason)
        try:
            reply = parse_reply(text)
            if reply.calls and run.must_answer:
                raise _Fallback("the model called a tool when it was asked to answer")
            results = []
            for call in reply.calls:
                if call.key() in called:
                    raise _Repeat(f"the model repeated the call {call.name}({json.dumps(call.arguments)})")
                called.add(call.key())
                run.log("tool_call", tool=call.name, arguments=call.arguments)
                results.append(_run_tool(run, call.name, call.arguments))
        except _Repeat as exc:
            _correct(run, messages, text, exc.reason, "You already ran that call; its moments are above.")
            continue
        except (ToolCallError, ToolError) as exc:
            run.log("error", str(exc))
            errors += 1
            if errors > 1:
                raise _Fallback("malformed tool call after one correction") from None
            messages += [{"role": "assistant", "content": text},
                         {"role": "user", "content": f"Error: {exc}. Reply with one valid <tool_call> or the "
                                                     "final answer."}]
            continue
        if results:
            response = tool_response_message(results)
            after = NEXT if _related_numbers(run) else NEXT_UNRELATED if run.seen else NEXT_EMPTY
            response["content"] += "\n" + after.format(question=run.question)
            messages += [{"role": "assistant", "content": text}, response]
            continue
        if _denies_related(run, reply.content):
            # A small model says NOT FOUND over results that hold the answer: it is told so once, and its next
            # turn (one more step if this was the last) must answer citing them.
            _correct(run, messages, text, "the model said not found, but the search found related moments",
                     "Some of the moments above are about this question.")
            continue
        try:
            return _final(run, _numbers_to_citations(run, reply.content))
        except _Retry as exc:
            if run.corrected and exc.cited:
                return _quoted(run, exc.cited, exc.reason)
            _correct(run, messages, text, exc.reason, exc.hint)
    raise _Fallback(f"no answer within {run.settings.max_steps} steps")


class _Repeat(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Retry(Exception):
    """An answer the model may correct once: the reason for the trace, a hint for the model, and the related
    moments it cited when only its words were wrong (a second time, those moments' own words answer)."""

    def __init__(self, reason: str, hint: str, cited: list[Citation] | None = None) -> None:
        super().__init__(reason)
        self.reason, self.hint, self.cited = reason, hint, cited or []


def _correct(run: _Run, messages: list[Message], text: str, reason: str, hint: str) -> None:
    """Tell the model once what was wrong; its next turn (one more step if this was the last) must answer, citing
    related moments. Without related moments, or a second time, the loop falls back."""
    if run.corrected or not _related_numbers(run):
        raise _Fallback(reason)
    run.log("error", f"{reason}; asked to answer")
    run.corrected = run.must_answer = True
    run.steps = min(run.steps, run.settings.max_steps - 1)
    messages += [{"role": "assistant", "content": text},
                 {"role": "user", "content": ANSWER_NOW.format(question=run.question, why=hint)}]


def _numbers_to_citations(run: _Run, content: str) -> str:
    """`[n]` citations of numbered moments become `[VIDEO_ID@START-END]`; a number never shown is rejected."""
    def one(m: re.Match[str]) -> str:
        n = int(m.group(1))
        if 1 <= n <= len(run.shown):
            h = run.shown[n - 1]
            return cite(h.video_id, h.start, h.end)
        run.rejected.append(RejectedCitation(video_id="?", start=0.0, end=0.0,
                                             reason=f"no moment [{n}] was shown in this job"))
        return ""

    return _NUMBER.sub(one, content)


def _related_numbers(run: _Run) -> list[int]:
    """Numbers of shown moments the answer check would accept as related to the question, best first."""
    ranked = sorted(range(len(run.shown)), key=lambda i: -run.shown[i].score)
    return [i + 1 for i in ranked if _related(run, run.shown[i])]


def _denies_related(run: _Run, content: str) -> bool:
    """NOT FOUND, though a moment the tools showed the model is related to the question."""
    return NOT_FOUND in content.upper() and not parse_citations(content) and any(_related(run, h) for h in run.seen)


def _turn_guide(run: _Run) -> str | None:
    if not run.settings.guided_decoding:
        return None
    if not any(t.kind == "tool_call" for t in run.trace):
        return first_turn_grammar()
    ranked = sorted(run.seen, key=lambda h: -h.score)
    ids = [run.video_id] if run.video_id else list(dict.fromkeys(h.video_id for h in ranked))
    # Only moments the answer check would accept are offered as citations, by number. With some, the turn is a
    # call or an answer citing them (NOT FOUND over related moments is never accepted); with none, a call or
    # NOT FOUND.
    cites = [f"[{n}]" for n in _related_numbers(run)]
    # The last step answers: a model that would search on past its steps gives its answer (or NOT FOUND) instead.
    last = run.steps >= run.settings.max_steps
    calls = not last and not run.must_answer
    return later_turn_grammar(cites, ids, NOT_FOUND, calls=calls, not_found_allowed=not cites)


def _run_tool(run: _Run, name: str, arguments: dict) -> str:
    if run.video_id and arguments.get("video_id") not in (None, run.video_id):
        raise ToolError(f"only video {run.video_id} is in scope for this question")
    vid = arguments.get("video_id")
    if run.where and vid is not None and not run.archive.has_metadata(vid, run.where):
        raise ToolError(f"only files with {_scope(run)} are in scope for this question")
    if name == "search":
        if vid is not None and run.archive.video(vid) is None:
            raise ToolError(f"no video with id {vid!r} in the index")
        # Through the run, so the query and its scored hits count for relevance and "searches tried".
        hits = run.search(arguments["query"], arguments.get("video_id"), arguments.get("modality"),
                          arguments.get("limit", ANSWER_LIMIT), arguments.get("min_confidence", ANSWER_CONFIDENCE))
        # Each spoken sentence with the ones around it: the answer is often the sentence after the match.
        hits = run.archive.in_context(hits)
        # The question's own search scores moments against the question, so the next turn's grammar can offer
        # the related ones as citations.
        run.search_question()
        res = ToolResult(name, arguments, hits, "" if hits else "no results: nothing in the archive matches")
        instead = _question_results(run, hits)
        if instead:
            # A small model's query can miss the question ("search for videos in the archive, limit to 10"):
            # what the question's own search found about it is what the model sees and can cite.
            run.log("error", f"nothing the query {arguments['query']!r} found is related to the question; "
                             f"showing the question's own results")
            res = ToolResult(name, arguments, instead)
            # The query is not repeated here: a small model copies it into its answer.
            header = "That search found nothing about the question. Moments found for the question itself:\n"
        else:
            header = ""
    else:
        res = run.archive.run_tool(name, arguments)
        header = ""
    run.seen.extend(res.moments)
    payload = header + res.numbered(run.number, run.file_name)
    run.log("tool_result", payload, tool=name)
    return payload


def _question_results(run: _Run, hits: list[Hit]) -> list[Hit]:
    """The question's own related moments (in context, best first), when none of the model's `hits` is related
    to the question and nothing related was shown before; else nothing (the model's results stand)."""
    if any(_related(run, h) for h in hits) or _related_numbers(run):
        return []
    related = sorted((h for h in run.question_hits if run.is_relevant(h)), key=lambda h: -h.score)
    return run.archive.in_context(related)


def _final(run: _Run, content: str) -> Answer:
    """The model answered: keep it only if it cites real moments it was shown, related to the question, in words
    from those moments that say more than the question. What the model may correct raises _Retry."""
    refs = parse_citations(content)
    valid, rejected = check(run.archive, refs)
    run.rejected.extend(rejected)
    shown = [c for c in valid if _moments(run.seen, c)]
    for c in valid:
        if c not in shown:
            run.rejected.append(RejectedCitation(video_id=c.video_id, start=c.start, end=c.end,
                                                 reason="not a moment any tool returned in this job"))
    if NOT_FOUND in content.upper() and not shown:
        if _any_relevant(run):
            raise _Fallback("the model said not found, but the search found related moments")
        return _not_found(run, "agent")
    if not shown:
        raise _Retry("the answer cites no real moment" if refs else "the answer cites nothing",
                     "Cite the moments you use by their numbers.")
    if not _any_relevant(run):
        raise _Fallback("the cited moments are not related to the question")
    related = [c for c in shown if _related(run, c)]
    for c in shown:
        if c not in related:
            run.rejected.append(RejectedCitation(video_id=c.video_id, start=c.start, end=c.end,
                                                 reason="the moment is not related to the question"))
    if not related:
        raise _Retry("the cited moments are not related to the question", "Cite the moments about the question.")
    shown = related
    cited_text = " ".join(_shown_text(run, h) for c in shown for h in _moments(run.seen, c))
    # A guided small model always cites something; what it adds to the question must come from there, and it
    # must add something: an answer that only restates the question answers nothing.
    words = strip_citations(content)
    if repetitive(words) or not grounded(words, cited_text, ANSWER_GROUNDING, given=run.question):
        raise _Retry("the answer's words are not in the moments it cites",
                     "Your answer must use the words of the moments it cites.", shown)
    if not numbers_from(words, cited_text, given=run.question):
        raise _Retry("the answer's numbers are not in the moments it cites",
                     "Take the numbers and times in your answer from the moments it cites.", shown)
    if len(re.findall(r"\w+", words)) < MIN_ANSWER_WORDS:
        raise _Retry("the answer is too short to say anything", "Answer in a whole sentence.", shown)
    if not adds_to(words, run.question):
        raise _Retry("the answer only restates the question", "Your answer only repeated the question.", shown)
    return _finish(run, "answered", without_video_ids(content.strip(), {h.video_id for h in run.seen}), shown, "agent")


def _quoted(run: _Run, cited: list[Citation], reason: str) -> Answer:
    """The model found and cited moments related to the question but, corrected once, still could not put what
    they say in its own words: what it cited answers, in the moments' own words (an extractive answer)."""
    quotes: list[str] = []
    asked_in = query_language(run.question)
    for c in cited:
        # Of what the model was shown at the cited time, the moment that holds most of the question's words, then
        # the one most about them (the larger share of its own words in the question), then what was said before
        # what was on screen, then the closest to the cited span: speech and a subtitle burned over it overlap,
        # and the subtitle's shorter line (or its file names) answers less.
        h = min(_moments(run.seen, c), key=lambda h: (
            -overlap(run.question, h.text), -overlap(h.text, run.question), _modality_order(h.modality),
            abs(h.start - c.start) + abs(h.end - c.end)))
        words = first_words(" ".join(h.text.split()), QUOTE_WORDS)
        # What was not said is named ("on screen: …"); a quote in another language than the question's says which
        # (the reader may not know it by sight). The file and span are the citation's, shown once after the quote;
        # its own time only where it starts later in a longer cited span (a title card on screen for minutes).
        kind = "" if h.modality == "speech" else f"{SHOWN_AS.get(h.modality, h.modality)}: "
        notes = [f"in {language_name(h.language)}"] if asked_in and h.language and h.language != asked_in else []
        notes += [f"at {ts(h.start)}"] if h.start - c.start >= 0.5 else []
        quote = f"{kind}“{words}”" + (f" ({', '.join(notes)})" if notes else "") if words else ""
        same = next((i for i, q in enumerate(quotes) if q.startswith(quote)), None)
        if same is None:  # a new quote; the same words again are cited after the first
            quotes.append(quote)
            same = len(quotes) - 1
        quotes[same] = f"{quotes[same]} {cite(c.video_id, c.start, c.end)}".strip()
    run.log("error", f"{reason}; answering with the cited moments' own words")
    return _finish(run, "answered", " … ".join(quotes), cited, "agent")


def _modality_order(modality: str) -> int:
    return MEDIA_MODALITIES.index(modality) if modality in MEDIA_MODALITIES else len(MEDIA_MODALITIES)


def language_name(code: str) -> str:
    """A language's English name from Whisper's list of them ("ko" → "Korean"); the code where it has none."""
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    name = LANGUAGES.get(code)
    return name.title() if name else code


def _shown_text(run: _Run, h: Hit) -> str:
    """What the model read of a moment that an answer may use: its text and its label (the file it is in, the
    video id, its time in seconds and as minutes:seconds). The label is true of the moment, and a small model
    copies it ("it is said in file.mp4, video ID, 40.0-40.3 s")."""
    return (f"{h.text} {SHOWN_AS.get(h.modality, h.modality)} {run.file_name(h.video_id)} video {h.video_id} "
            f"{h.start:.1f} {h.end:.1f} {ts(h.start)} {ts(h.end)} {_clock(h.start)} {_clock(h.end)} seconds")


def _clock(t: float) -> str:
    m, s = divmod(int(t), 60)
    return f"{m}:{s:02d}"


def _moments(hits: list[Hit], c: Citation | Hit) -> list[Hit]:
    return [h for h in hits if h.video_id == c.video_id and h.start < c.end and h.end > c.start]


def _related(run: _Run, c: Citation | Hit) -> bool:
    """A cited moment is related if the question's own search scored it relevant, or it shares the question's
    words (scores from the model's other queries say nothing about the question)."""
    scored = _moments(run.scored, c) + [replace(h, score=0.0, band=None) for h in _moments(run.seen, c)]
    return any(run.is_relevant(h) for h in scored)


def _any_relevant(run: _Run) -> bool:
    run.search_question()
    return any(run.is_relevant(h) for h in run.scored)


def _retrieval_answer(run: _Run) -> Answer:
    """Plain retrieval-augmented answering: our own search, numbered passages, a short cited answer."""
    run.search_question()
    passages: list[Hit] = []
    for h in sorted(run.scored, key=lambda h: -h.score):
        if run.is_relevant(h) and not any(p.video_id == h.video_id and p.start == h.start for p in passages):
            passages.append(h)
    passages = passages[:4]
    if not passages:
        return _not_found(run, "fallback")
    context = "\n".join(f"[{i}] {p.text.strip()[:400]}" for i, p in enumerate(passages, 1))
    messages: list[Message] = [
        {"role": "system", "content": "Answer the question using only the numbered passages. One or two "
                                      "sentences. Cite passages by number, like [1]."},
        {"role": "user", "content": f"Passages:\n{context}\n\nQuestion: {run.question}"},
    ]
    answer_text = ""
    cited: list[Hit] = []
    out = None
    if run.budget_left() >= 16:
        run.steps += 1
        try:
            out = run.call_model(messages, min(run.settings.max_new_tokens, 96))
        except _Fallback:
            out = None  # the request failed (already in the trace): quote the passages instead
    if out is not None:
        numbers = sorted({int(n) for n in re.findall(r"\[(\d{1,2})\]", out.text)})
        cited = [passages[n - 1] for n in numbers if 1 <= n <= len(passages)]
        text = re.sub(r"\[(\d{1,2})\]", "", out.text).strip()
        source = " ".join(p.text for p in passages)
        if text and grounded(text, source):
            cited = cited or passages[:1]
            answer_text = text
        else:
            run.log("error", "the model's answer is not grounded in the passages; quoting them instead")
    if not answer_text:
        cited = passages[:2]
        answer_text = "From the archive: " + " … ".join(f"“{first_words(p.text.strip(), 40)}”" for p in cited)
    answer_text += " " + " ".join(cite(p.video_id, p.start, p.end) for p in cited)
    return _finish(run, "answered", answer_text, [from_hit(p) for p in cited], "fallback")


def _not_found(run: _Run, path: str) -> Answer:
    tried = "; ".join(f"“{q}”" for q in run.searches) or "none"
    return _finish(run, "not_found", f"Not found in the archive. Searches tried: {tried}.", [], path)


def _finish(run: _Run, status: str, text: str, citations: list[Citation], path: str) -> Answer:
    if status == "answered" and not citations:
        status = "unsupported"  # an answer that cites nothing real is never presented as answered
    run.log("final", text)
    return Answer(question=run.question, video_id=run.video_id, status=status, answer=text, citations=citations,
                  rejected_citations=run.rejected, searches=run.searches, path=path, model=run.llm.name,
                  steps=run.steps, tokens=run.tokens, trace=run.trace)


__all__ = ["AgentInputError", "CitationRef", "ask"]
