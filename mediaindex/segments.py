"""Time-stamped segments: what every stage produces and the index stores."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

# What was heard or seen in the media (or came with it: subtitles, the file's own chapter markers, named by their
# titles), and what the summary stage (ingest.summaries) wrote about it.
SUBTITLE = "subtitle"
MARKER = "marker"
MEDIA_MODALITIES = ("speech", "ocr", "visual", SUBTITLE, MARKER)
GENERATED_MODALITIES = ("summary", "chapter")
MODALITIES = MEDIA_MODALITIES + GENERATED_MODALITIES
_POINT_NAMESPACE = uuid.UUID("5b0d7a52-4f7e-4d35-9a53-3c1f4a0b9e11")
# The endings of web addresses people say aloud or search for (speech cuts sentences after one, search
# looks one up by its spelling, where these parts say nothing: every address has them).
WEB_DOMAINS = ("com", "org", "net", "edu", "gov", "info", "io", "co", "uk", "de", "fr", "eu")
WEB_ADDRESS_PARTS = ("http", "https", "www", *WEB_DOMAINS)
WEB_DOMAIN_END = rf"\.(?:{'|'.join(WEB_DOMAINS)})"
WEB_ADDRESS = re.compile(rf"(?:https?://)?(?:www\.)?[^\W_][\w-]*(?:\.[\w-]+)*{WEB_DOMAIN_END}(?:/\S*)?", re.I)


def is_web_address(text: str) -> bool:
    """The whole text is one web address ("github.com", "https://www.youtube.com/watch")."""
    return bool(WEB_ADDRESS.fullmatch(text.strip()))

# Letters of Chinese and Japanese, written without spaces between words, and of Korean, which joins particles and
# endings to its words ("프로젝트를", "프로젝트는"): a run of them is compared by its overlapping pairs of characters
# (`agents.grounding`), as search engines' CJK analysers index it, so that the same word inside two runs is found in
# both; the exact-word index pairs Chinese and Japanese runs only (`index.sparse`).
HAN_KANA = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
CJK_LETTER = f"[{HAN_KANA}\u1100-\u11ff\u3130-\u318f\uac00-\ud7af]"  # and Hangul
CJK_RUN = re.compile(CJK_LETTER + "+")


def character_pairs(run: str) -> list[str]:
    """A run of CJK letters as its overlapping pairs of characters (a lone letter as itself)."""
    return [run[i:i + 2] for i in range(max(1, len(run) - 1))]


# Languages written without spaces between words (whisper's codes).
UNSPACED_LANGUAGES = frozenset({"zh", "ja", "th", "lo", "km", "my", "bo", "yue"})


def join_words(words: list[str], language: str | None) -> str:
    """A transcript's words (stored stripped) back into text in their language's writing."""
    return ("" if language in UNSPACED_LANGUAGES else " ").join(w for w in words if w).strip()


# What the stages make of a file, as a number the catalog keeps per file: a file indexed by an earlier version
# lacks what later ones find, until `ingest --reindex` analyses it again. 2: pictures without words keep their
# likeliest image classes and are placed in the text space (1: every file indexed before). 3: the classifier sees a
# wide frame edge to edge, not only its centre. 4: a file's own subtitle streams are read, and Chinese and Japanese
# text is indexed by pairs of characters too (subtitle files beside a file are read again whenever they change).
# 5: speech whisper skipped is transcribed (VAD speech no decoded word covers), and every audio track's voices are told
# apart.
ANALYSIS_VERSION = 5
# What re-indexing an earlier version's file gives.
ANALYSIS_ADDS = ("speech whisper skipped (after a pause, or a quiet voice before a loud one) is transcribed, each "
                 "audio track's voices are told apart, subtitle streams inside it are read, words inside Chinese and "
                 "Japanese sentences are found, pictures without words are searchable, wide frames are classified edge to edge, and each audio "
                 "track of a file with several is transcribed")

# The payload field of a picture's most probable image classes.
CLASSES_FIELD = "classes"
# The payload field naming the track a subtitle segment is of ("stream 2" of the file, or the subtitle file's name)
# and a speech segment heard on an audio track other than the default one ("audio 2 (de)"): a transcript, a summary
# and `ask`'s transcript tool read the default track's speech (`default_track`).
TRACK_FIELD = "track"
# The payload field of a shot's people segment: {"faces": n, "persons": n} (`models.people`).
PEOPLE_FIELD = "people"
# The payload field naming the chapter the file marks (`marker`) that a segment starts in: its title.
IN_CHAPTER_FIELD = "in_chapter"
# The `extra` keys the stages write, beside which a file's metadata (a manifest's columns) is kept; where a column
# has one of these names, the stage's value is what its segments keep.
STAGE_KEYS = frozenset({"words", "no_speech_prob", "channel", "labels", "aliases", "raw", "summary", "chapter",
                        CLASSES_FIELD, TRACK_FIELD, PEOPLE_FIELD, IN_CHAPTER_FIELD})


def chapter_at(chapters: Sequence[dict[str, Any]], t: float) -> str | None:
    """The title of the chapter a file marks (`probe.chapter_markers`) that time `t` lies in, if any."""
    return next((c["title"] for c in reversed(chapters) if c["start"] <= t < c["end"]), None)


def mark_chapters(segments: Iterable[Segment], chapters: Sequence[dict[str, Any]]) -> None:
    """Each segment says which of the chapters its file marks it starts in (`IN_CHAPTER_FIELD`); a marker is its
    chapter, and a summary or a generated chapter spans its own."""
    for seg in segments:
        if seg.modality not in (MARKER, *GENERATED_MODALITIES) and (chapter := chapter_at(chapters, seg.start)):
            seg.extra[IN_CHAPTER_FIELD] = chapter


def given_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    """A file's metadata without the keys a manifest took away (given as null)."""
    return {k: v for k, v in metadata.items() if v is not None}


def standing_for_speech(subtitles: Sequence[T], language_of: Callable[[T], str | None], language: str | None) -> list[T]:
    """Of a file's subtitles, those that stand for what was said where nothing was heard: the ones in the file's
    `language`, else in the first one's. A file's subtitle tracks are mostly one text in several languages: all of
    them would say everything again in each."""
    if not subtitles:
        return []
    chosen = language if any(language_of(s) == language for s in subtitles) else language_of(subtitles[0])
    return [s for s in subtitles if language_of(s) == chosen]


def audio_track_label(number: int, language: str | None, title: str | None) -> str:
    """An audio track as a player names it: "audio 2 (de)", "audio 3 (en, Commentary)"."""
    about = [str(x)[:40] for x in (language, title) if x]
    return f"audio {number}" + (f" ({', '.join(about)})" if about else "")


def of_audio_track(label: str | None, number: int) -> bool:
    """Whether a `TRACK_FIELD` label names audio track `number` (`audio_track_label`)."""
    return label is not None and (label == f"audio {number}" or label.startswith(f"audio {number} ("))


def default_track(speech: Sequence[T], track_of: Callable[[T], str | None]) -> list[T]:
    """Of a file's speech, its default audio track's: another track (a dub, a commentary) says it again or beside
    it, and a transcript reads once."""
    return [s for s in speech if not track_of(s)]


@dataclass
class Segment:
    video_id: str
    source: str  # absolute path of the media file as ingested
    start: float
    end: float
    modality: str  # one of MODALITIES
    text: str
    language: str | None = None
    confidence: float | None = None  # speech: average log-probability; ocr/visual: model confidence; else None
    thumbnail: str | None = None  # path relative to the index's thumbnail folder
    speaker: str | None = None  # speech: "S1", "S2", … stable within a file (diarization); else None
    extra: dict[str, Any] = field(default_factory=dict)
    # Named vectors other than the text embedding (e.g. "image" from a CLIP-family model),
    # stored as vectors of the same point, never in the payload.
    vectors: dict[str, list[float]] = field(default_factory=dict)

    @property
    def class_probabilities(self) -> list[list[float]]:
        """A picture's most probable image classes, [[class index, probability], ...] (`extra["classes"]`, which
        the vision stage writes for a picture it has no words for; empty for other segments)."""
        return list(self.extra.get(CLASSES_FIELD) or [])

    @property
    def has_text_vector(self) -> bool:
        """Whether the segment is found by meaning: it has text, or is a picture placed in the text space by its
        classes (`models.label_space`). Others are found by picture or not at all."""
        return bool(self.text.strip() or self.class_probabilities)

    def point_id(self, index: int) -> str:
        """Stable id: re-ingesting the same content writes the same points."""
        return str(uuid.uuid5(_POINT_NAMESPACE, f"{self.video_id}:{self.modality}:{index}"))

    def payload(self) -> dict[str, Any]:
        data = asdict(self)
        del data["vectors"]
        return data


@dataclass
class Hit:
    source: str
    video_id: str
    start: float
    end: float
    score: float
    modality: str
    text: str
    language: str | None = None
    thumbnail: str | None = None
    speaker: str | None = None
    # How sure the search is that this moment matches the query: "high", "medium" or "low", from the
    # relevance model's probability (search.relevance); None below "low" or where no model decides.
    band: str | None = None
    # Where playing this moment should begin: its first spoken word that is one of the query's words
    # (None: at start).
    seek: float | None = None
    # A picture without words: the classes it looks most like, likeliest first (what placed it; empty for others).
    looks_like: list[str] = field(default_factory=list)
    # The subtitle track, or the audio track other than the default one, that the moment is of (`TRACK_FIELD`).
    track: str | None = None
    # The chapter the file marks that the moment's best segment lies in (`IN_CHAPTER_FIELD`): an audiobook's, a
    # film's.
    in_chapter: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
