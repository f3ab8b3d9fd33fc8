"""Per-video summary and chapters, map-reduce over windows batched through the engine.

1. Chapters: the video's speech / on-screen text segments are cut where the topic shifts (adjacent blocks of
   segments embed far apart), where speech pauses for long, or where visual concepts change.
2. Map: every chapter is split into windows that fit the context; all windows go to the engine in one batch
   (continuous batching runs them concurrently), each asking for a one-sentence summary; then one more batch
   asks for each chapter's title (a short phrase of its own words, else the chapter's key words).
3. Reduce: the chapter summaries are merged into the video summary by one more request.
Generated text must reuse the words of its sources; where it does not, an extractive summary (the window's
own first words) stands in and the chapter says `generated: false`. A video with nothing indexed gets
"nothing to summarise"; one with only visual concepts gets a summary listing them. Nothing is invented.

`summarize` reads a video's segments from the index; `summarize_segments` is the same work over segments in
hand, which is how the ingestion pipeline's summary stage summarises a video before it is indexed.
"""

from __future__ import annotations

import bisect
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from mediaindex.agents.citations import from_hit
from mediaindex.agents.events import AgentEvent, OnEvent, ignore
from mediaindex.agents.grounding import (
    content_words,
    distinct,
    finished_sentences,
    first_words,
    said_once,
    supported,
    written_forms,
)
from mediaindex.agents.llm import ChatModel, Message
from mediaindex.agents.schema import Chapter, Citation, VideoSummary
from mediaindex.agents.tools import Archive
from mediaindex.config import LLMSettings
from mediaindex.models.classifier import DESCRIPTION_PREFIX
from mediaindex.segments import MARKER, SUBTITLE, Hit, default_track, standing_for_speech

EmbedFn = Callable[[list[str]], np.ndarray | Sequence[Sequence[float]]]  # passages in, one vector each out

TEXT_MODALITIES = ("speech", "ocr")
LONG_PAUSE = 8.0  # seconds of silence that always end a chapter
MIN_CHAPTER = 6.0  # seconds
TARGET_CHAPTER = 30.0  # seconds of media per chapter, before max_chapters caps it
MAX_CITATIONS_PER_CHAPTER = 6

# Plain one-sentence requests: small models follow them far better than a multi-field format.
MAP_SYSTEM = "You summarise transcripts of videos. Use only facts from the transcript."
MAP_USER = "Summarise this transcript in one sentence:\n\n{text}"
REDUCE_SYSTEM = ("You merge chapter summaries of one video into a summary of the whole video: two sentences, "
                 "only facts from the chapter summaries.")


@dataclass
class _Span:
    segments: list[Hit]
    title: str | None = None  # a chapter the file marks gives its own title

    @property
    def start(self) -> float:
        return self.segments[0].start

    @property
    def end(self) -> float:
        return max(s.end for s in self.segments)

    @property
    def text(self) -> str:
        return " ".join(s.text.strip() for s in self.segments if s.text.strip())

    @property
    def spoken(self) -> str:
        """What was said in the span (heard, else its subtitles), or its on-screen text where nothing was: a
        stand-in for a summary reads as the speech does, not as the timecodes, captions and file names on screen
        around it."""
        heard = default_track([s for s in self.segments if s.modality == "speech" and s.text.strip()],
                              lambda s: s.track)
        said = heard or standing_for_speech([s for s in self.segments if s.modality == SUBTITLE and s.text.strip()],
                                            lambda s: s.language, None)
        return " ".join(s.text.strip() for s in said) or self.text


@dataclass(frozen=True)
class VideoRef:
    """What a summary says about the video itself (an indexed VideoRecord or a MediaItem being ingested)."""

    video_id: str
    source: str
    duration: float | None
    language: str | None = None


def summarize(video: str, archive: Archive, llm: ChatModel, settings: LLMSettings,
              on_event: OnEvent = ignore) -> VideoSummary:
    """Summarise an indexed video from its segments in the index."""
    from mediaindex.agents.ask import AgentInputError

    if not (video or "").strip():
        raise AgentInputError("no video given")
    record = archive.resolve(video)
    if record is None:
        raise AgentInputError(f"no video {video!r} in the index (give a video id or its start, the path it was "
                              "ingested from, or its file name)")
    ref = VideoRef(record.video_id, record.source, record.duration, record.language)
    return summarize_segments(ref, archive.segments(record.video_id), archive.embedder.embed_passages, llm, settings,
                              on_event)


def summarize_segments(video: VideoRef, segments: list[Hit], embed: EmbedFn, llm: ChatModel,
                       settings: LLMSettings, on_event: OnEvent = ignore) -> VideoSummary:
    """Summarise one video from its segments in time order; `embed` finds the topic shifts between chapters.

    Summary and chapter segments from an earlier run are ignored: only what was heard and seen counts.
    """
    texts = [s for s in segments if s.modality in TEXT_MODALITIES and s.text.strip()
             and not (s.modality == "speech" and s.track)]  # another audio track's speech: read once
    if not any(s.modality == "speech" for s in texts):  # subtitles stand in for speech where none was heard
        written = standing_for_speech([s for s in segments if s.modality == SUBTITLE and s.text.strip()],
                                      lambda s: s.language, video.language)
        texts = sorted(texts + written, key=lambda s: (s.start, s.end))
    visual = [s for s in segments if s.modality == "visual" and s.text.strip()]
    if not texts and not visual:
        return VideoSummary(
            video_id=video.video_id, source=video.source, duration=video.duration,
            status="nothing_to_summarise", citations=[], chapters=[], model=llm.name, windows=0,
            summary="Nothing to summarise: the index holds no speech, on-screen text or visual concepts for "
                    "this video.")
    if not texts:
        return _visual_only(video, visual, llm.name)
    spans = marked_spans(texts, [s for s in segments if s.modality == MARKER], settings.max_chapters) \
        or chapter_spans(texts, visual, embed, settings.max_chapters)
    on_event(AgentEvent("stage", f"{len(texts)} text segments in {len(spans)} chapters"))
    return _map_reduce(video, spans, llm, settings, on_event)


# -- chapters ---------------------------------------------------------------------------------------------------
def marked_spans(texts: list[Hit], markers: list[Hit], max_chapters: int) -> list[_Span] | None:
    """The chapters the file marks itself (an audiobook's, a film's), with their titles (not mere numbers), each
    holding the text that starts in it (text before the first, the first); None where it marks none, or more than
    `max_chapters` that hold text (its own chapters are then too many to summarise one by one)."""
    marks = sorted(markers, key=lambda m: m.start)
    if not marks:
        return None
    groups: list[list[Hit]] = [[] for _ in marks]
    for text in texts:
        groups[max(0, bisect.bisect_right([m.start for m in marks], text.start) - 1)].append(text)
    spans = [_Span(group, None if _NUMBERED.fullmatch(mark.text) else mark.text.strip())
             for mark, group in zip(marks, groups, strict=True) if group]
    return spans if 0 < len(spans) <= max_chapters else None


# A title that only numbers its chapter ("Chapter 01", "Part 3", "07") says nothing of it: the model titles it.
_NUMBERED = re.compile(r"\W*(?:[^\W\d_]+\.?\s*)?\d+\W*")


def chapter_spans(texts: list[Hit], visual: list[Hit], embed: EmbedFn, max_chapters: int) -> list[_Span]:
    """Cut the text segments into chapters at the strongest topic, pause and shot changes."""
    n = len(texts)
    span = texts[-1].end - texts[0].start
    k = max(1, min(max_chapters, n, round(span / TARGET_CHAPTER)))
    cuts: set[int] = {i for i in range(1, n) if texts[i].start - texts[i - 1].end >= LONG_PAUSE}
    if n > 1 and len(cuts) + 1 < k:
        vectors = np.asarray(embed([t.text for t in texts]), dtype=np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True) + 1e-9
        shot_times = [v.start for v in visual]
        scores: list[tuple[float, int]] = []
        for i in range(1, n):
            left = vectors[max(0, i - 2):i].mean(0)
            right = vectors[i:i + 2].mean(0)
            dissimilar = 1.0 - float(left @ right) / (np.linalg.norm(left) * np.linalg.norm(right) + 1e-9)
            pause = min(texts[i].start - texts[i - 1].end, LONG_PAUSE) / LONG_PAUSE
            shot = any(abs(t - texts[i].start) < 1.5 for t in shot_times)
            scores.append((float(dissimilar + 0.05 * pause + 0.05 * shot), i))
        for _, i in sorted(scores, reverse=True):
            if len(cuts) + 1 >= k:
                break
            bounds = sorted(cuts | {i})
            edges = [0, *bounds, n]
            if all(texts[b - 1].end - texts[a].start >= MIN_CHAPTER or b - a > 1
                   for a, b in zip(edges, edges[1:], strict=False)):
                cuts.add(i)
    edges = [0, *sorted(cuts), n]
    return [_Span(texts[a:b]) for a, b in zip(edges, edges[1:], strict=False)]


def _windows(span: _Span, max_chars: int) -> list[_Span]:
    out: list[list[Hit]] = [[]]
    used = 0
    for seg in span.segments:
        size = len(seg.text)
        if out[-1] and used + size > max_chars:
            out.append([])
            used = 0
        out[-1].append(seg)
        used += size
    return [_Span(w) for w in out]


# -- map-reduce -------------------------------------------------------------------------------------------------
def _first_sentence(text: str, cut_short: bool = False) -> str:
    """The reply's first sentence; "" when the model was stopped at its token limit before ending one."""
    text = said_once(re.sub(r"\s+", " ", text).strip().strip("\"'"))
    match = re.match(r"(.+?(?:[.!?](?=\s|$)|[。！？]))", text)  # a full-width stop needs no space after it
    if match is None and cut_short:
        return ""
    return (match.group(1) if match else text)[:400]


MAX_TITLE_WORDS = 8
TITLE_SYSTEM = "You write short titles for the parts of a video."
TITLE_USER = "Write a title of at most six words for this part of a video. Reply with the title only.\n\n{text}"
_TITLE_LABEL = re.compile(r"^\s*(#+\s*)?(\*\*)?\s*(title|chapter( title)?)\s*[:\-]\s*", re.IGNORECASE)
_TRAILING = frozenset({"the", "a", "an", "of", "and", "to", "in", "that", "with", "for", "on", "by", "or", "is",
                       "was", "has", "have", "not", "der", "die", "das", "und"})


def clean_title(reply: str, source: str) -> str | None:
    """The model's title when it is one: a short phrase (at most MAX_TITLE_WORDS words) on the reply's first
    line that does not end mid-phrase and whose words are in `source`; None otherwise."""
    line = next((ln for ln in reply.splitlines() if ln.strip()), "")
    title = _TITLE_LABEL.sub("", line).strip().strip("*#\"'“”‘’ ").rstrip(".,;:!?…").strip()
    words = title.split()
    if not words or len(words) > MAX_TITLE_WORDS or words[-1].lower() in _TRAILING:
        return None
    return title if supported(title, source) else None


# Korean joins particles to the word before them ("프로젝트를", "프로젝트는"); these never end a noun of two
# syllables or more, so a title may drop them. Longest first. After the stem of a verb or an adjective (하, 되, 있,
# 없, 같) "는" and "은" are its ending, not a particle: "사용하는" (using) stays whole.
_KOREAN_PARTICLES = ("에서는", "으로는", "에서", "에게", "으로", "부터", "까지", "처럼", "에는", "은", "는", "을", "를")
_PREDICATE_STEMS = ("하", "되", "있", "없", "같")
_HANGUL = re.compile("^[\uac00-\ud7a3]+$")


def korean_bases(words: list[str]) -> list[str]:
    """The words with a Korean word's particle dropped: one of `_KOREAN_PARTICLES`, or a last syllable that other
    words of the text end in after the same syllables ("프로젝트로" beside "프로젝트를" is "프로젝트"), where three
    syllables or more remain (two: "사용자" is not "사용" inflected). Other words as they are."""
    def particle_dropped(word: str) -> str:
        if _HANGUL.match(word):
            for particle in _KOREAN_PARTICLES:
                base = word[: -len(particle)]
                if word.endswith(particle) and len(base) >= 2:
                    return word if particle in ("은", "는") and base.endswith(_PREDICATE_STEMS) else base
        return word

    dropped = [particle_dropped(w) for w in words]
    stems = Counter(w[:-1] for w in set(dropped) if _HANGUL.match(w) and len(w) >= 4)
    known = set(dropped)
    return [w[:-1] if _HANGUL.match(w) and len(w) >= 4 and (stems[w[:-1]] > 1 or w[:-1] in known) else w
            for w in dropped]


def keyword_title(text: str, elsewhere: str = "", n: int = 4) -> str:
    """A title made of the text's own words: its most frequent content words (those frequent in `elsewhere`, the
    rest of the video, count less; ties to the longer word), in the order they first occur, written as the text
    writes them ("Kennedy", "Registerkarten"). Never a cut sentence."""
    words = korean_bases(content_words(text))
    if not words:
        return "Untitled"
    other = Counter(korean_bases(content_words(elsewhere)))
    counts = Counter(words)
    first = {w: k for k, w in reversed(list(enumerate(words)))}
    # Among equally frequent words the longer ones are usually the more specific.
    best = sorted(counts, key=lambda w: (-counts[w] / (1 + other[w]), -len(w), first[w]))[:n]
    written = written_forms(text)
    title = ", ".join(written.get(w, w) for w in sorted(best, key=first.__getitem__))
    return title[:1].upper() + title[1:]


def _titles(chapters: list[tuple[str, str]], llm: ChatModel, settings: LLMSettings) -> tuple[list[str], int]:
    """One title per chapter, given as (its summary, its source text): the model's, in one batch, where it is a
    short grounded phrase, else the chapter's own key words. Returns (titles, generated tokens)."""
    prompts: list[list[Message]] = [
        [{"role": "system", "content": TITLE_SYSTEM}, {"role": "user", "content": TITLE_USER.format(text=summary)}]
        for summary, _ in chapters]
    outs = llm.chat(prompts, max_tokens=16, temperature=settings.temperature) if prompts else []
    whole = " ".join(source for _, source in chapters)
    titles = []
    for (summary, source), out in zip(chapters, outs, strict=True):
        title = None if out.error else clean_title(out.text, f"{summary} {source}")
        titles.append(title or keyword_title(source, whole.replace(source, " ", 1)))
    return titles, sum(o.tokens for o in outs)


def _map_reduce(video: VideoRef, spans: list[_Span], llm: ChatModel, settings: LLMSettings,
                on_event: OnEvent = ignore) -> VideoSummary:
    # Characters per window: the configured size, but never more than a third of the model's context.
    max_chars = min(settings.summary_window_chars, max(200, llm.max_context))
    windows = [(ci, w) for ci, sp in enumerate(spans) for w in _windows(sp, max_chars)]
    prompts: list[list[Message]] = [
        [{"role": "system", "content": MAP_SYSTEM}, {"role": "user", "content": MAP_USER.format(text=w.text)}]
        for _, w in windows
    ]
    per_call = max(8, min(settings.max_new_tokens, 64))  # a title and one sentence per window
    on_event(AgentEvent("stage", f"summarising {len(windows)} windows in one batch"))
    outs = llm.chat(prompts, max_tokens=per_call, temperature=settings.temperature) if prompts else []
    tokens = sum(o.tokens for o in outs)
    on_event(AgentEvent("model", f"{len(outs)} window summaries", tokens=tokens))
    notes: list[str] = []
    chapters: list[Chapter] = []
    for ci, span in enumerate(spans):
        parts = [(w, o) for (c, w), o in zip(windows, outs, strict=True) if c == ci]
        sums, generated = [], True
        for w, o in parts:
            summary = "" if o.error else _first_sentence(o.text, o.finish_reason == "length")
            # Every name, number and most words of the sentence must be in its window: otherwise it is dropped
            # and the window's own words stand in.
            if not (summary and supported(summary, w.text)):
                generated = False
                summary = first_words(w.spoken, 30)
            sums.append(summary)
        # On-screen text can last the whole video: a chapter ends where the next one starts.
        end = span.end
        if ci + 1 < len(spans) and spans[ci + 1].start > span.start:
            end = min(end, spans[ci + 1].start)
        chapters.append(Chapter(
            title="", start=round(span.start, 2), end=round(end, 2), summary=" ".join(distinct(sums)),
            citations=_chapter_citations(video, [w for w, _ in parts]), generated=generated))
    sources = [" ".join(w.text for (c, w) in windows if c == ci) for ci in range(len(spans))]
    untitled = [ci for ci, span in enumerate(spans) if not span.title]  # the file's own chapter titles stand
    titles, title_tokens = _titles([(chapters[ci].summary, sources[ci]) for ci in untitled], llm, settings)
    tokens += title_tokens
    for ci, span in enumerate(spans):
        chapters[ci].title = span.title or titles[untitled.index(ci)]
    if not all(c.generated for c in chapters):
        notes.append("some generated text was not grounded in the transcript; extractive summaries stand in")
    if len(chapters) > 1:
        on_event(AgentEvent("stage", f"merging {len(chapters)} chapter summaries", tokens=tokens))
    summary, reduce_tokens = _reduce(chapters, [w.text for _, w in windows], llm, settings)
    on_event(AgentEvent("final", "summary done", tokens=tokens + reduce_tokens))
    read = f"{len(windows)} window" + ("" if len(windows) == 1 else "s")
    notes.append(f"{read} of the transcript, {tokens + reduce_tokens} generated tokens")
    return VideoSummary(
        video_id=video.video_id, source=video.source, duration=video.duration, status="summarised",
        summary=summary, citations=[Citation(**c.citations[0].model_dump()) for c in chapters],
        chapters=chapters, model=llm.name, windows=len(windows), notes=notes)


def _reduce(chapters: list[Chapter], sources: list[str], llm: ChatModel, settings: LLMSettings) -> tuple[str, int]:
    """The video summary from the chapter summaries; returns (text, generated tokens)."""
    if len(chapters) == 1:
        return chapters[0].summary, 0
    listing = "\n".join(f"- {c.title}: {c.summary}" for c in chapters)
    out = llm.chat([[{"role": "system", "content": REDUCE_SYSTEM},
                     {"role": "user", "content": f"Chapter summaries:\n{listing}"}]],
                   max_tokens=min(settings.max_new_tokens, 96), temperature=settings.temperature)[0]
    # The summary cites every chapter's moments: each sentence must stand on what those moments hold.
    source = " ".join(c.summary for c in chapters) + " " + " ".join(sources)
    titles = [c.title for c in chapters]
    said = [_untitled(s, titles) for s in finished_sentences(out.text, out.finish_reason == "length")]
    kept = [] if out.error else distinct([said_once(s) for s in said if s and supported(s, source)])
    if not kept:
        return first_words(" ".join(c.summary for c in chapters[:3]), 60), out.tokens
    return " ".join(kept), out.tokens


def _untitled(sentence: str, titles: list[str]) -> str:
    """The sentence without a chapter's title and colon before it: a small model copies the listing it was given
    ("- Title: what the chapter says") into the summary."""
    text = sentence.strip().removeprefix("- ").strip()
    for title in titles:
        if title and text[: len(title)].casefold() == title.casefold() and text[len(title) : len(title) + 1] == ":":
            return text[len(title) + 1 :].strip()
    return sentence


def _chapter_citations(video: VideoRef, windows: list[_Span]) -> list[Citation]:
    """One citation per window the chapter's sentences came from (its whole span), so that what the summary says
    is in the moments it cites; at most MAX_CITATIONS_PER_CHAPTER, neighbours merged beyond that."""
    groups = [windows[math.floor(i * len(windows) / MAX_CITATIONS_PER_CHAPTER):
                      math.floor((i + 1) * len(windows) / MAX_CITATIONS_PER_CHAPTER)]
              for i in range(MAX_CITATIONS_PER_CHAPTER)] if len(windows) > MAX_CITATIONS_PER_CHAPTER else [
        [w] for w in windows]
    out = []
    for g in (g for g in groups if g):
        segs = [s for w in g for s in w.segments]
        first = segs[0]
        out.append(Citation(video_id=first.video_id, start=round(min(s.start for s in segs), 2),
                            end=round(max(s.end for s in segs), 2), modality=first.modality,
                            text=first_words(" ".join(s.text.strip() for s in segs), 40),
                            source=first.source or video.source))
    return out


def visual_title(description: str) -> str:
    """A shot's title from its labels ("a photo of a macaque, a primate" → "Macaque"): the first label whole,
    never the description cut after a few words."""
    text = description.strip()
    if text.lower().startswith(DESCRIPTION_PREFIX.strip()):
        text = text[len(DESCRIPTION_PREFIX.strip()):]
    label = re.sub(r"^(a|an|the)\s+", "", text.split(",")[0].strip(), flags=re.IGNORECASE).strip(" .")
    return (label[:1].upper() + label[1:]) if label else "Untitled"


def _visual_only(video: VideoRef, visual: list[Hit], model: str) -> VideoSummary:
    """No speech and no text: chapters are runs of the same visual concepts; nothing else is claimed."""
    runs: list[list[Hit]] = []
    for hit in visual:
        if runs and runs[-1][-1].text.strip() == hit.text.strip():
            runs[-1].append(hit)
        else:
            runs.append([hit])
    chapters = [Chapter(title=visual_title(r[0].text), start=round(r[0].start, 2),
                        end=round(max(h.end for h in r), 2), summary=f"Visual concepts: {r[0].text.strip()}.",
                        citations=[from_hit(h) for h in r[:MAX_CITATIONS_PER_CHAPTER]], generated=False)
                for r in runs]
    concepts = list(dict.fromkeys(h.text.strip() for h in visual))
    summary = ("No speech or on-screen text; from the visual concepts only, the video shows: "
               + "; ".join(concepts[:8]) + ".")
    return VideoSummary(
        video_id=video.video_id, source=video.source, duration=video.duration, status="visual_only",
        summary=summary, citations=[c.citations[0] for c in chapters], chapters=chapters, model=model,
        windows=0, notes=["summary from visual concepts alone"])
