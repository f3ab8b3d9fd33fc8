"""Quality of the agentic jobs over the sample media, for one language model.

Per video: does the summary mention the labelled main topic, do chapter boundaries fall near the labelled
topic / shot changes, are all citations real and within the video's duration. Per question (own list, with the
moment that answers it): does the answer cite a moment overlapping it, and are absent things "not found".

    PYTHONPATH=. python benchmarks/agents_quality.py [--index DIR] [--media DIR] [--json OUT] [--no-fallback]
    PYTHONPATH=. python benchmarks/agents_quality.py --set media-val --index DIR [--json OUT]

Without --index, the set's media is ingested into a temporary index first. `--set media-val` asks the questions
of `benchmarks/ask_questions_val.yaml` (written from ../shared/media-val's references, never used to fit
anything) and summarises every file of that set (citations, grounding and chapter titles are checked there;
it has no labelled topics). The model is the configured one
(`MEDIAINDEX_LLM__MODEL`, default the bundled Qwen2.5-Coder-0.5B-Instruct), run in the serving engine inside a Ray actor.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import mediaindex.raylib  # noqa: F401  (Ray's environment is set before Ray is imported)
from mediaindex.agents.ask import ask
from mediaindex.agents.citations import CitationRef, check, strip_citations
from mediaindex.agents.grounding import unsupported
from mediaindex.agents.summarize import summarize
from mediaindex.config import load_settings

REPO = Path(__file__).resolve().parents[1]
VAL_QUESTIONS = Path(__file__).resolve().parent / "ask_questions_val.yaml"
MAX_TITLE_WORDS = 8
FILES = ["video/manifesto.mp4", "video/auto-editor_example.mp4", "video/issue-195-aspect-ratio.mp4",
         "video/issue-134-rotate.mp4", "video/testvideo.mp4", "video/chaplin.mp4", "audio/jfk.flac",
         "audio/multilingual.mp3"]

# Main topic: any of these word stems in the summary or chapter text counts as mentioning it.
TOPICS = {
    "manifesto.mp4": ["communis", "manifesto"],
    "auto-editor_example.mp4": ["example video", "banana"],
    "issue-195-aspect-ratio.mp4": ["roman", "beauty", "glasses", "dice"],
    "issue-134-rotate.mp4": ["fight"],
    "jfk.flac": ["country"],
    "testvideo.mp4": ["castellano", "bcastell", "copyright"],  # its only text: the on-screen credit line
    "multilingual.mp3": ["software", "licens", "permission"],
}
# No speech and no text: "nothing to summarise", or a summary of visual concepts alone. (testvideo.mp4 was here
# until OCR learnt to read its small credit line "www.bcastell.com / Copyright 2013 Brandon Castellano".)
NOTHING = {"chaplin.mp4"}
# Topic changes (seconds, with the span where a boundary counts as on time): the end of the audiobook notice,
# the long silence before "banana", the switch from the English to the German reading.
CHANGES = {
    "manifesto.mp4": [(10.8, 35.6)],
    "auto-editor_example.mp4": [(17.0, 39.8)],
    "multilingual.mp3": [(28.9, 30.8)],
}
BOUNDARY_SLACK = 2.0

QUESTIONS = [
    # jfk_16k_mono.wav holds the same recording as jfk.flac: a citation of either is right.
    ("What does the speaker ask his fellow Americans to do?",
     [("jfk.flac", 0.0, 11.0), ("jfk_16k_mono.wav", 0.0, 11.0)]),
    ("When does the speaker say banana?", "auto-editor_example.mp4", 39.0, 41.0),
    ("What will happen when the time reaches 40 seconds?", "auto-editor_example.mp4", 13.0, 41.0),
    ("Who assembled in London to sketch the manifesto?", "manifesto.mp4", 73.0, 86.0),
    ("What is acknowledged by all European powers to be itself a power?", "manifesto.mp4", 51.0, 59.0),
    ("Where can I find the text version of this audiobook?", "manifesto.mp4", 1.0, 11.0),
    ("What did they find besides rotten Roman teeth?", "issue-195-aspect-ratio.mp4", 0.0, 6.5),
    ("What were the fine glasses for?", "issue-195-aspect-ratio.mp4", 6.5, 14.0),
    ("What permission does the license grant for the software?", "multilingual.mp3", 0.0, 21.0),
    ("Which team won the football world cup final?", None, 0, 0),
    ("What is the recipe for chocolate cake?", None, 0, 0),
    ("What did the astronauts say when they landed on the moon?", None, 0, 0),
    # Off the archive: nothing in the sample media answers these (EN / DE / KO); each must end "not found".
    ("What is the price of bitcoin today?", None, 0, 0),
    ("How tall is Mount Everest?", None, 0, 0),
    ("Who painted the Mona Lisa?", None, 0, 0),
    ("What is the weather forecast for Berlin tomorrow?", None, 0, 0),
    ("Wie viel kostet ein Bitcoin heute?", None, 0, 0),
    ("Wer hat die Fußball-Weltmeisterschaft 2014 gewonnen?", None, 0, 0),
    ("Wie backt man einen Apfelkuchen?", None, 0, 0),
    ("비트코인 가격은 오늘 얼마입니까?", None, 0, 0),
    ("서울의 인구는 몇 명입니까?", None, 0, 0),
    ("김치찌개는 어떻게 만듭니까?", None, 0, 0),
]

# What a right answer says (any of these, case-insensitive): a citation of the right moment with words that say
# nothing ("Fine glasses for? [moment]") is not an answer. Checked on the answer text, not given to the model.
ANSWER_WORDS = {
    "What does the speaker ask his fellow Americans to do?": ["country"],
    "When does the speaker say banana?": ["40", "forty"],
    "What will happen when the time reaches 40 seconds?": ["banana"],
    "Who assembled in London to sketch the manifesto?": ["communist"],
    "What is acknowledged by all European powers to be itself a power?": ["communism"],
    "Where can I find the text version of this audiobook?": ["muxas", "www"],
    "What did they find besides rotten Roman teeth?": ["beauty", "parlor"],
    "What were the fine glasses for?": ["oil", "cream"],
    "What permission does the license grant for the software?": ["use", "copy", "modify", "merge", "publish",
                                                                 "distribute", "deal", "free of charge"],
}


class ThreadBound:
    """Runs every use of an object on one thread (the index's SQLite catalog lives on the thread that opened
    it), so that concurrent jobs can share one archive while only their model calls run in parallel."""

    _PLAIN = (str, int, float, bool, type(None), list, tuple, dict)

    def __init__(self, obj, thread: ThreadPoolExecutor) -> None:
        self._obj, self._thread = obj, thread

    def __getattr__(self, name: str):
        attr = self._thread.submit(getattr, self._obj, name).result()
        if callable(attr):
            return lambda *a, **k: self._wrap(self._thread.submit(attr, *a, **k).result())
        return self._wrap(attr)

    def _wrap(self, value):
        if isinstance(value, self._PLAIN) or type(value).__module__.startswith(("mediaindex.segments", "numpy")):
            return value
        return ThreadBound(value, self._thread)


def ingest_samples(settings, media: Path) -> None:
    from mediaindex.index.index import MediaIndex
    from mediaindex.models.text_embed import load_text_embedder
    from mediaindex.service import IngestRequest, ingest

    embedder = load_text_embedder(settings.embed)
    with MediaIndex(settings, embedder.dim, embedder.name) as index:
        report = ingest(IngestRequest(settings, [media / f for f in FILES]), index)
    print(f"ingested {len(report.indexed)} of {len(FILES)} files")


def cited_text(archive, video_id: str, cites) -> str:
    """The indexed text of every segment overlapping the cited ranges."""
    segs = archive.segments(video_id)
    return " ".join(h.text for c in cites for h in segs if h.start < c.end and h.end > c.start)


def unsupported_sentences(archive, s) -> list[str]:
    """Sentences of the summary and chapter summaries whose names, numbers or words are not in the moments they
    cite (a chapter's own citations; the video summary's: every chapter's)."""
    if s.status != "summarised":
        return []
    every = [c for ch in s.chapters for c in ch.citations] + list(s.citations)
    bad = unsupported(s.summary, cited_text(archive, s.video_id, every))
    for ch in s.chapters:
        bad += unsupported(ch.summary, cited_text(archive, s.video_id, ch.citations))
    return bad


def summary_row(archive, llm, settings, name: str) -> dict:
    t0 = time.perf_counter()
    s = summarize(name, archive, llm, settings.llm)
    took = time.perf_counter() - t0
    cites = [*s.citations, *(c for ch in s.chapters for c in ch.citations)]
    rejected = check(archive, [CitationRef(c.video_id, c.start, c.end) for c in cites])[1]
    text = (s.summary + " " + " ".join(f"{c.title} {c.summary}" for c in s.chapters)).lower()
    bad = unsupported_sentences(archive, s)
    row: dict = {"video": name, "status": s.status, "chapters": len(s.chapters), "windows": s.windows,
                 "citations": len(cites), "citations_rejected": len(rejected), "seconds": round(took, 1),
                 "generated_chapters": sum(c.generated for c in s.chapters), "unsupported": bad,
                 "titles": [c.title for c in s.chapters], "truncated_titles": truncated_titles(archive, s),
                 "summary": s.summary[:300]}
    if name in TOPICS:
        row["topic_mentioned"] = any(k in text for k in TOPICS[name])
    if name in NOTHING:
        row["nothing_expected_ok"] = s.status in ("nothing_to_summarise", "visual_only")
    if name in CHANGES:
        bounds = [c.start for c in s.chapters[1:]]
        row["boundaries"] = bounds
        row["changes_found"] = sum(any(a - BOUNDARY_SLACK <= b <= b_end + BOUNDARY_SLACK for b in bounds)
                                   for a, b_end in CHANGES[name])
        row["changes"] = len(CHANGES[name])
    return row


def truncated_titles(archive, s) -> list[str]:
    """Chapter titles that are not short titles: longer than MAX_TITLE_WORDS words, or the first words of a
    sentence of the chapter cut before its end."""
    bad = []
    segs = archive.segments(s.video_id) if s.status in ("summarised", "visual_only") else []
    for ch in s.chapters:
        words = re.findall(r"\w+", ch.title.lower())
        if len(words) > MAX_TITLE_WORDS:
            bad.append(ch.title)
            continue
        for h in segs:
            if h.start < ch.end and h.end > ch.start:
                said = re.findall(r"\w+", h.text.lower())
                if len(said) > len(words) >= 3 and said[:len(words)] == words:
                    bad.append(ch.title)
                    break
    return bad


def val_questions() -> tuple[list[tuple], dict[str, list[str]]]:
    """(question, [(file, start, end), ...]) rows and the words a right answer says, from VAL_QUESTIONS."""
    import yaml

    rows, says = [], {}
    for item in yaml.safe_load(VAL_QUESTIONS.read_text(encoding="utf-8"))["questions"]:
        where = [(f, float(a), float(b)) for f, a, b in item.get("where", [])]
        rows.append((item["q"], where or None))
        if item.get("says"):
            says[item["q"]] = [str(w).lower() for w in item["says"]]
    return rows, says


def question_row(archive, llm, settings, q: str, file: str | list | None, a: float = 0.0, b: float = 0.0,
                 fallback: bool = True) -> dict:
    t0 = time.perf_counter()
    ans = ask(q, archive, llm, settings.llm, fallback=fallback)
    took = time.perf_counter() - t0
    rejected = check(archive, [CitationRef(c.video_id, c.start, c.end) for c in ans.citations])[1]
    row = {"question": q, "status": ans.status, "path": ans.path, "steps": ans.steps, "tokens": ans.tokens,
           "citations": len(ans.citations), "citations_rejected": len(rejected) + len(ans.rejected_citations),
           "seconds": round(took, 1), "answer": ans.answer[:200],
           "tool_calls": sum(s.kind == "tool_call" for s in ans.trace),
           "malformed_calls": sum(s.kind == "error" and "tool call" in s.content for s in ans.trace)}
    row["searches"] = ans.searches
    errors = [t.content for t in ans.trace if t.kind == "error"]
    # The loop's answer is the cited moments quoted (the model's own words were not in them, twice).
    row["quoted"] = ans.path == "agent" and any("cited moments' own words" in e for e in errors)
    # The model's query found nothing related; the question's own results were what it saw.
    row["question_results_shown"] = any("showing the question's own results" in e for e in errors)
    row["trace"] = [f"{t.step} {t.kind}{' ' + t.tool if t.tool else ''}: {' '.join(t.content.split())[:240]}"
                    for t in ans.trace]
    if file is None:
        row["correct"] = ans.status == "not_found"
    else:
        places = file if isinstance(file, list) else [(file, a, b)]
        targets = [(archive.resolve(Path(f).name).video_id, x, y) for f, x, y in places]
        row["correct"] = any(c.video_id == v and c.start < y and c.end > x for c in ans.citations
                             for v, x, y in targets)
    row["loop_correct"] = row["correct"] and ans.path == "agent"
    if q in ANSWER_WORDS:
        said = strip_citations(ans.answer).lower()  # a citation's "[ID@40.0-40.3]" says nothing
        row["says_answer"] = row["correct"] and any(w in said for w in ANSWER_WORDS[q])
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", type=Path, help="an index holding the sample media (default: build one)")
    ap.add_argument("--set", choices=("media", "media-val"), default="media")
    ap.add_argument("--media", type=Path, help="the set's media folder (default ../shared/<set>)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--no-fallback", action="store_true", help="measure the bare tool-calling loop")
    ap.add_argument("--questions-only", action="store_true", help="skip the summaries")
    ap.add_argument("--summaries-only", action="store_true", help="skip the questions")
    ap.add_argument("--in-process", action="store_true", help="run the engine in this process, not a Ray actor")
    ap.add_argument("--only", type=int, nargs="*", help="question numbers (0-based) to ask, default all")
    ap.add_argument("--concurrency", type=int, default=1, help="questions / summaries in flight at once")
    args = ap.parse_args()
    args.media = args.media or REPO.parent / "shared" / args.set
    if args.set == "media-val":
        QUESTIONS[:], words = val_questions()
        ANSWER_WORDS.clear()
        ANSWER_WORDS.update(words)
        for labels in (TOPICS, CHANGES):  # the sample media's labels; media-val has none of these
            labels.clear()
        NOTHING.clear()
        FILES[:] = sorted(str(p.relative_to(args.media)) for d in ("audio", "video")
                          for p in (args.media / d).iterdir() if p.is_file())

    tmp = None
    if args.index is None:
        tmp = tempfile.TemporaryDirectory(prefix="agents-bench-")
        args.index = Path(tmp.name) / "index"
    settings = load_settings(None, index_dir=args.index)
    print(f"model {settings.llm.model} ({settings.llm.dtype}): max_steps={settings.llm.max_steps} max_new_tokens="
          f"{settings.llm.max_new_tokens} token_budget={settings.llm.token_budget} concurrency={args.concurrency}",
          flush=True)
    if not (args.index / "schema.json").exists():
        ingest_samples(settings, args.media)
    from mediaindex.agents.llm import ChatEngine, start_llm
    from mediaindex.service.archive import Archive
    from mediaindex.workers.runtime import ensure_ray

    t0 = time.perf_counter()
    # In process: the same engine without a Ray actor around it (one process less on a small machine).
    llm = ChatEngine(settings.llm, settings.cache_dir) if args.in_process else start_llm(settings, ensure_ray)
    load = time.perf_counter() - t0
    io = ThreadPoolExecutor(max_workers=1)
    # The archive's catalog lives on the thread that opened it; the jobs run on other threads.
    archive = ThreadBound(io.submit(lambda: Archive.open(settings).agent_view).result(), io)
    names = [Path(f).name for f in FILES]
    summaries, questions = [], []
    with ThreadPoolExecutor(max_workers=args.concurrency) as pool:  # rows print as they finish
        for row in pool.map(lambda n: summary_row(archive, llm, settings, n), [] if args.questions_only else names):
            summaries.append(row)
            print(json.dumps(row, ensure_ascii=False), flush=True)
    chosen = [] if args.summaries_only else [QUESTIONS[i] for i in args.only] if args.only is not None else QUESTIONS
    # Questions run as concurrent jobs over one engine (their model calls share its batch), as the API runs them.
    with ThreadPoolExecutor(max_workers=args.concurrency) as pool:
        for row in pool.map(lambda q: question_row(archive, llm, settings, *q, fallback=not args.no_fallback),
                            chosen):
            questions.append(row)
            print(json.dumps(row, ensure_ascii=False), flush=True)
    with_topic = [r for r in summaries if "topic_mentioned" in r]
    with_changes = [r for r in summaries if "changes" in r]
    asked = [r for r, q in zip(questions, chosen, strict=True) if q[1] is not None]
    absent = [r for r, q in zip(questions, chosen, strict=True) if q[1] is None]
    report = {
        "model": llm.name, "machine": f"{platform.machine()}, {__import__('os').cpu_count()} CPUs, no GPU",
        "fallback": not args.no_fallback, "model_load_s": round(load, 1),
        "summary_topic_mentioned": f"{sum(r['topic_mentioned'] for r in with_topic)}/{len(with_topic)}",
        "summary_changes_found": f"{sum(r['changes_found'] for r in with_changes)}/"
                                 f"{sum(r['changes'] for r in with_changes)}",
        "nothing_to_summarise_ok": f"{sum(r.get('nothing_expected_ok', False) for r in summaries)}/{len(NOTHING)}",
        "summary_citations_rejected": sum(r["citations_rejected"] for r in summaries),
        "summary_citations": sum(r["citations"] for r in summaries),
        "generated_chapters": f"{sum(r['generated_chapters'] for r in summaries)}/"
                              f"{sum(r['chapters'] for r in summaries)}",
        "summary_unsupported_sentences": sum(len(r["unsupported"]) for r in summaries),
        "truncated_chapter_titles": f"{sum(len(r['truncated_titles']) for r in summaries)}/"
                                    f"{sum(r['chapters'] for r in summaries)}",
        "answers_citing_right_moment": f"{sum(r['correct'] for r in asked)}/{len(asked)}",
        "answered_by_the_loop_with_right_moment": f"{sum(r['loop_correct'] for r in asked)}/{len(asked)}",
        "loop_answers_saying_the_answer": f"{sum(r.get('says_answer', False) and r['path'] == 'agent' for r in asked)}"
                                          f"/{len(asked)}",
        "loop_answers_quoting_the_cited_moments": f"{sum(r['loop_correct'] and r['quoted'] for r in asked)}/"
                                                  f"{len(asked)}",
        "question_results_shown": f"{sum(r['question_results_shown'] for r in questions)}/{len(questions)}",
        "absent_not_found": f"{sum(r['correct'] for r in absent)}/{len(absent)}",
        "absent_not_found_by_the_loop": f"{sum(r['loop_correct'] for r in absent)}/{len(absent)}",
        "answer_paths": {p: sum(r["path"] == p for r in questions) for p in ("agent", "fallback")},
        "tool_calls_run": sum(r["tool_calls"] for r in questions),
        "malformed_tool_calls": sum(r["malformed_calls"] for r in questions),
        "questions_with_a_tool_call": f"{sum(r['tool_calls'] > 0 for r in questions)}/{len(questions)}",
        "answer_citations_rejected_or_dropped": sum(r["citations_rejected"] for r in questions),
        "median_answer_s": statistics.median(r["seconds"] for r in questions) if questions else None,
        "max_answer_s": max((r["seconds"] for r in questions), default=None),
        "load_average": [round(x, 1) for x in __import__("os").getloadavg()],
        "median_summary_s": statistics.median(r["seconds"] for r in summaries) if summaries else None,
        "summaries": summaries, "questions": questions,
    }
    print(json.dumps({k: v for k, v in report.items() if k not in ("summaries", "questions")}, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, ensure_ascii=False), encoding="utf-8")
    archive.index.close()
    if hasattr(llm, "close"):
        llm.close()
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
