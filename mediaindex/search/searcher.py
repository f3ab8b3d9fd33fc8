"""The one searcher: text (dense meaning + exact words, + CLIP's text tower when configured) and by
picture, filtered, judged, returned as moments. The CLI, the API and the agents all search through
`Searcher`.

Candidates: Qdrant's reciprocal-rank fusion of the candidate lists (dense, sparse, image vectors).
The exact-word list counts only as much as the query's words are actually found: a German or Korean
query over English speech shares a stray word with it at most, and such a chance match must not
outrank the meaning.

Judging: every candidate's evidence (text similarity for its modality, the share of the query's words
it holds, weighed by their rarity, on-screen text that contains the query, a visual label's probability,
picture similarity) is mapped to a confidence per kind by the measured scales of `calibration`; the best
of them is the hit's confidence (two kinds are not added up: a sentence holding the query's words is
near it in meaning for that very reason). A weak likeness counts for nothing where it is known to
mislead: a shot labelled as something else than the class a query names ("a gazelle" for "an elephant"),
a sentence of a word or two. Nothing below the match line is returned, so a query about something the
archive does not hold returns nothing; every hit carries its band (high / medium / low), and a sure
match hides the weak ones.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from difflib import SequenceMatcher
from typing import TYPE_CHECKING, Literal

import numpy as np

from mediaindex.index.filters import SearchFilters
from mediaindex.index.index import MediaIndex
from mediaindex.index.store import SPARSE_VECTOR, TEXT_VECTOR, Retriever, ScoredHit, SparseVec
from mediaindex.index.vocabulary import WORDED, credit, is_name, names_in, sound_alikes, words_of
from mediaindex.search import calibration
from mediaindex.search.moments import diversify, merge_moments
from mediaindex.search.querylang import query_language
from mediaindex.search.questions import sought
from mediaindex.search.wordweights import WordWeights
from mediaindex.segments import WEB_ADDRESS_PARTS, Hit, is_web_address

if TYPE_CHECKING:
    from mediaindex.config import VisionSettings
    from mediaindex.index.sparse import SparseEncoder
    from mediaindex.models.clip import ClipEmbedder
    from mediaindex.models.text_embed import TextEmbedder

Mode = Literal["hybrid", "dense", "sparse"]
MODES = ("hybrid", "dense", "sparse")
MAX_QUERY_CHARS = 2000
MAX_LIMIT = 1000
# Below this share of its words found in any candidate, the exact-word list gets no say.
MIN_WORD_COVERAGE = 0.34
# On-screen text matches by letters and digits only when the query and the run it shares with the text
# have at least this many of them (shorter runs turn up by chance in any caption).
MIN_OCR_LETTERS = 5
CROSS_LANGUAGE = "dense:cross-language"  # text similarity of a query and a segment in different languages
IMAGE_VECTORS = ("frame", "image")  # models.vision's FRAME_VECTOR and IMAGE_VECTOR
_LETTERS = re.compile(r"[\W_]+")
_WORDS = re.compile(r"[^\W_]+")
# Visual segments read "a photo of a macaw, a bird, ...": the template's words are no evidence.
_TEMPLATE = "a photo of"


class QueryError(ValueError):
    """A query that cannot be searched; the message says why, for a person."""


def check_query(query: str | None) -> str:
    """The query with blanks folded; refuses what cannot be searched."""
    if query is not None and not isinstance(query, str):
        raise QueryError(f"the search query must be text, got {type(query).__name__}")
    query = " ".join((query or "").replace("\x00", " ").split())
    if len(query) > MAX_QUERY_CHARS:
        raise QueryError(f"the search query is {len(query)} characters long; at most {MAX_QUERY_CHARS} are allowed")
    if query and not any(unicodedata.category(c)[0] in "LN" for c in query):
        raise QueryError("the search query has no letters or digits to search for (emoji and punctuation alone "
                         "match nothing): describe what to find in words")
    return query


def _check(query: str | None, limit: int, filters: SearchFilters | None, mode: str) -> str:
    query = check_query(query)
    if isinstance(limit, bool) or not isinstance(limit, int | np.integer):
        raise QueryError(f"limit must be a whole number, got {limit!r}")
    if not 1 <= limit <= MAX_LIMIT:
        raise QueryError(f"limit must be between 1 and {MAX_LIMIT}, got {limit}")
    if filters is not None and not isinstance(filters, SearchFilters):
        raise QueryError(f"filters must be SearchFilters, got {type(filters).__name__}")
    if mode not in MODES:
        raise QueryError(f"unknown search mode {mode!r}: use one of {', '.join(MODES)}")
    return query


@dataclass(frozen=True)
class Respelt:
    """A name of the query the archive does not hold: its word ids, and the archive's words spelt like it
    with their similarity."""

    ids: frozenset[int]
    alikes: tuple[tuple[str, float], ...]


def coverage(q: Query, words: set[int], text: str, *, respell: bool = True) -> float:
    """The weighted share of the query's words a segment holds (`wordweights`); a name it holds only as
    a sound-alike spelling counts that spelling's credit."""
    if not q.word_ids:
        return 0.0
    held = dict.fromkeys(q.word_ids & words, 1.0)
    if respell and q.respelt:
        spelt = words_of([text])
        for name in q.respelt.values():
            best = credit(max((similarity for word, similarity in name.alikes if word in spelt), default=0.0))
            if best > 0:
                for i in name.ids - words:
                    held[i] = max(held.get(i, 0.0), best)
    return q.weights.share(q.word_ids, held)


def letters(text: str) -> str:
    """Lower-case letters and digits only: OCR drops and adds spaces and punctuation at will."""
    return _LETTERS.sub("", unicodedata.normalize("NFKC", text).casefold())


def ocr_text_match(query_letters: str, text: str) -> float:
    """The share of the query's letters and digits found as one run in the on-screen text."""
    if len(query_letters) < MIN_OCR_LETTERS:
        return 0.0
    hay = letters(text)
    m = SequenceMatcher(None, query_letters, hay, autojunk=False).find_longest_match(
        0, len(query_letters), 0, len(hay))
    # A shared run shorter than that is chance too ("Mozart" and "...Communist" share "ist").
    return m.size / len(query_letters) if m.size >= MIN_OCR_LETTERS else 0.0


@dataclass
class Query:
    """A query as the judge needs it: its text, words, dense vector and query pictures."""

    text: str
    words: SparseVec | None = None
    word_ids: set[int] = field(default_factory=set)
    dense: np.ndarray | None = None
    images: dict[str, np.ndarray] = field(default_factory=dict)
    clip_text: np.ndarray | None = None
    embedder: str | None = None
    template_ids: set[int] = field(default_factory=set)
    encoder: SparseEncoder | None = None  # tells which spoken word is which query word
    respelt: dict[str, Respelt] = field(default_factory=dict)  # names the archive holds only as sound-alikes
    weights: WordWeights = field(default_factory=WordWeights)  # what finding each word says
    language: str | None = None  # the query's language where its letters or words say it plainly
    name: bool = False  # the query is a name (or a web address) and nothing else
    address: bool = False  # the query is a web address
    # The query names classes the image classifier knows ("an elephant"): the word ids that name them, and
    # the query's text similarity to the nearest of those classes as a shot labelled with it would read.
    class_ids: frozenset[int] = frozenset()
    class_similarity: float | None = None

    @property
    def letters(self) -> str:
        return letters(self.text)


@dataclass
class Judged:
    """A candidate segment with its raw evidence per kind and the confidence they give."""

    hit: Hit
    evidence: dict[str, float]
    confidence: float
    seek: float | None = None
    support: tuple[float, ...] = ()  # the confidence each kind of evidence gives, highest first

    def rank(self) -> tuple[float, ...]:
        """Sort key, most confident first. Two segments can be equally confident (both hold every word of
        the query): the one the other evidence favours more (e.g. nearer in meaning) comes first, so that
        the order never rests on how the engine breaks a tie in its fused list."""
        return (-self.confidence, *(-c for c in self.support[1:]), -sum(self.evidence.values()))


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    return float(np.dot(a, b) / (na * nb)) if na and nb else 0.0


def judge(s: ScoredHit, q: Query) -> Judged:
    """The evidence that this segment matches the query, and the confidence it amounts to."""
    modality = s.hit.modality
    raw: dict[str, float] = {}
    conf: list[float] = []
    if q.word_ids:
        held = s.words - q.template_ids if modality == "visual" else s.words
        raw["words"] = coverage(q, held, s.hit.text, respell=modality in WORDED)
        conf.append(calibration.scale("words")(raw["words"]))
    text_vec = s.dense.get(TEXT_VECTOR)
    on_screen = ocr_text_match(q.letters, s.hit.text) if modality == "ocr" and q.text else None
    # A name is found by its spelling (or a sound-alike of it) in what was said or labelled: a sentence
    # without it resembles the name only through a shared word ("Manchester United" and "Workers of the
    # World United"). On-screen text keeps its dense evidence (OCR misreads names beyond respelling),
    # except for a web address, which resembles every other address ("github.com", "www.bcastell.com").
    spelt = raw.get("words", 0.0) > 0.0 or bool(on_screen)
    unnamed = q.name and bool(q.word_ids) and not spelt and (modality in ("speech", "visual") or q.address)
    if q.dense is not None and text_vec is not None and s.hit.text and not unnamed:
        # A translation scores lower than same-language text: judged by its own line (search/querylang.py).
        crossed = q.language is not None and s.hit.language is not None and q.language != s.hit.language
        kind = CROSS_LANGUAGE if crossed else f"dense:{modality}"  # on-screen text has no language
        raw[kind] = _cos(q.dense, text_vec)
        c = calibration.scale(kind, q.embedder)(raw[kind])
        if modality == "visual":
            c *= calibration.label_weight(s.confidence)
            if c < calibration.MEDIUM and _other_class(s, q, raw[kind]):
                c = 0.0  # a weak likeness to a class the classifier did not see here
        elif modality == "speech" and kind != CROSS_LANGUAGE and c < calibration.MEDIUM and _few_words(s.hit.text):
            # The embedder puts a sentence of a word or two ("banana.", "Preamble.") near any short query
            # ("a snake", "a plane"): only a strong likeness says something ("a fruit" -> "banana.").
            c = 0.0
        conf.append(c)
    if on_screen is not None:
        raw["ocr_text"] = on_screen
        conf.append(calibration.scale("ocr_text")(on_screen))
    for name, vec in q.images.items():
        if (v := s.dense.get(name)) is not None and v.any():
            raw[f"picture:{name}"] = _cos(vec, v)
            conf.append(calibration.scale(f"picture:{name}")(raw[f"picture:{name}"]))
    if q.clip_text is not None and (v := s.dense.get("image")) is not None and v.any():
        raw["clip_text"] = _cos(q.clip_text, v)
        conf.append(calibration.scale("clip_text")(raw["clip_text"]))
    support = tuple(sorted(conf, reverse=True))
    return Judged(s.hit, raw, support[0] if support else 0.0, _first_matched_word(s, q), support)


def _few_words(text: str) -> bool:
    return len(_WORDS.findall(text)) <= calibration.FEW_WORDS


def _other_class(s: ScoredHit, q: Query, similarity: float) -> bool:
    """Whether a shot is something other than the class the query names: the classifier knows that class
    ("an elephant", "a shark", "a tractor") and labelled the shot otherwise, and the shot's labels are
    plainly further from the query than the class itself ("a gazelle, a hoofed animal" for "an
    elephant"). A shot labelled with a synonym stays ("a military aircraft" for "a plane" is as near as the
    hand plane that "plane" names). The judge asks only of weak likenesses: a strong one is often a kind of
    what the query names under its own class ("a coffee mug" for "a cup")."""
    margin = calibration.class_margin(q.embedder)
    return (q.class_similarity is not None and margin is not None and not (s.words & q.class_ids)
            and similarity < q.class_similarity - margin)


def _first_matched_word(s: ScoredHit, q: Query) -> float | None:
    """Where playing a speech hit should begin: its first word that is one of the query's words."""
    if (s.hit.modality != "speech" or q.encoder is None or not s.spoken or not q.word_ids
            or not (s.words & q.word_ids)):
        return None
    for start, _end, word in s.spoken:
        if set(q.encoder.query(str(word)).indices) & q.word_ids:
            return float(start)
    return None


def candidates(
    index: MediaIndex, q: Query, filters: SearchFilters | None, mode: str, pool: int,
) -> list[ScoredHit]:
    """The engine's fused candidate list for a prepared query."""
    cfg, store = index.settings, index.store
    wanted = [SPARSE_VECTOR, TEXT_VECTOR, *(n for n in IMAGE_VECTORS if n in store.dims)]
    if mode == "sparse":
        if not q.words:
            return []
        return store.query([Retriever(SPARSE_VECTOR, q.words)], pool, filters, with_vectors=wanted)
    retrievers: list[Retriever] = []
    if q.dense is not None:
        retrievers.append(Retriever(TEXT_VECTOR, q.dense, cfg.dense_weight))
    retrievers += [Retriever(name, vec, cfg.image_weight) for name, vec in q.images.items()]
    if q.clip_text is not None:
        retrievers.append(Retriever("image", q.clip_text, cfg.image_weight))
    if q.words and mode == "hybrid" and cfg.sparse_weight > 0:
        probe = store.query([Retriever(SPARSE_VECTOR, q.words)], pool, filters, with_vectors=[SPARSE_VECTOR])
        found = max((coverage(q, s.words, s.hit.text) for s in probe), default=0.0)
        if found >= MIN_WORD_COVERAGE:
            retrievers.append(Retriever(SPARSE_VECTOR, q.words, cfg.sparse_weight * found))
    retrievers = [r for r in retrievers if r.weight > 0] or retrievers[:1]
    return store.query(retrievers, pool, filters, candidates=pool, rrf_k=cfg.rrf_k, with_vectors=wanted)


def prepare(
    index: MediaIndex, embedder: TextEmbedder | None, query: str, mode: str,
    image_vectors: dict[str, np.ndarray] | None = None, clip_text: np.ndarray | None = None,
) -> Query:
    images = {k: np.asarray(v, dtype=np.float32).reshape(-1) for k, v in (image_vectors or {}).items()}
    if not query and not images:
        raise QueryError("the search query is empty")
    for name, vec in images.items():
        if name not in index.store.dims or name == TEXT_VECTOR:
            raise QueryError(f"this index has no {name!r} image vectors (configure the model that makes them and "
                             "ingest)")
        if vec.shape[0] != index.store.dims[name] or not np.isfinite(vec).all() or not vec.any():
            raise QueryError(f"the {name!r} query vector must be {index.store.dims[name]} finite numbers, not all zero")
    address = is_web_address(query)
    q = Query(query, images=images, embedder=getattr(embedder, "name", None), encoder=index.sparse,
              language=query_language(query) if query else None, name=address or is_name(query), address=address)
    if query and mode != "dense":
        q.words = index.sparse.query(query) or None
        q.word_ids = set(q.words.indices) if q.words else set()
        if q.address:
            # "github.com" is not found in "www .muxas .org" or "www.bcastell.com": its name must be.
            q.word_ids -= address_part_ids(index.sparse)
        q.template_ids = set(index.sparse.query(_TEMPLATE).indices) - q.word_ids
        q.weights = WordWeights.of(query, index.sparse)
        respell(index, q)
    if query and mode != "sparse":
        if embedder is None:
            raise QueryError("a text query needs the text embedder")
        q.dense = np.asarray(embedder.embed_query(query), dtype=np.float32)
    if query and mode == "hybrid" and q.dense is not None and embedder is not None:
        name_classes(index, embedder, q)
    if query and mode == "dense":
        q.word_ids = set()
    if clip_text is not None and "image" in index.store.dims and mode != "sparse":
        q.clip_text = np.asarray(clip_text, dtype=np.float32).reshape(-1)
    return q


# Per classifier: the word id of the noun that ends a class's name -> those classes ("elephant" -> African
# bush elephant, Asian elephant). Per embedder and class: the class's text vector as a labelled shot reads.
_CLASS_HEADS: dict[str, dict[int, tuple[str, ...]]] = {}
_CLASS_VECTORS: dict[tuple[str, str], np.ndarray] = {}
# "terrier" names 23 classes: the shortest names (the generic ones) are enough, and each costs an embedding.
MAX_NAMED_CLASSES = 8


def class_heads(index: MediaIndex) -> dict[int, tuple[str, ...]]:
    """The classes the index's image classifier can name, by the word that ends their names."""
    if index.classifier is None:
        return {}
    if index.classifier not in _CLASS_HEADS:
        from mediaindex.models.classifier import class_names

        heads: dict[int, list[str]] = {}
        for name in class_names(index.classifier):
            for i in index.sparse.query(name.split()[-1]).indices:
                heads.setdefault(i, []).append(name)
        _CLASS_HEADS[index.classifier] = {i: tuple(sorted(names, key=len)) for i, names in heads.items()}
    return _CLASS_HEADS[index.classifier]


def name_classes(index: MediaIndex, embedder: TextEmbedder, q: Query) -> None:
    """Note the classes a query names and how near the nearest of them is to it (see `_other_class`)."""
    heads = class_heads(index)
    ids = (q.word_ids & heads.keys()) - q.template_ids
    if not ids or q.dense is None:
        return
    from mediaindex.models.classifier import class_description

    names = sorted({n for i in ids for n in heads[i]}, key=len)[:MAX_NAMED_CLASSES]
    missing = [n for n in names if (embedder.name, n) not in _CLASS_VECTORS]
    if missing:
        vectors = embedder.embed_passages([class_description(n) for n in missing])
        for n, v in zip(missing, vectors, strict=True):
            _CLASS_VECTORS[(embedder.name, n)] = np.asarray(v, dtype=np.float32)
    q.class_ids = frozenset(ids)
    q.class_similarity = max(_cos(q.dense, _CLASS_VECTORS[(embedder.name, n)]) for n in names)


def address_part_ids(encoder: SparseEncoder) -> set[int]:
    """The word ids of what every web address has (www, http(s), the domains): none of an address query's
    words."""
    return set(encoder.query(" ".join(WEB_ADDRESS_PARTS)).indices)


def respell(index: MediaIndex, q: Query) -> None:
    """Names of the query the archive holds only spelt otherwise: remember their sound-alikes and look
    for those words too (each weighed by its similarity)."""
    if not names_in(q.text):
        return
    found = sound_alikes(q.text, index.vocabulary())
    extra: dict[int, float] = {}
    for name, alikes in found.items():
        ids = frozenset(index.sparse.query(name).indices) & q.word_ids
        if not ids:
            continue
        q.respelt[name] = Respelt(ids, tuple(alikes))
        for word, similarity in alikes:
            for i in index.sparse.query(word).indices:
                extra[i] = max(extra.get(i, 0.0), similarity)
    if q.words is not None and extra:
        weights = dict(zip(q.words.indices, q.words.values, strict=True))
        for i, w in extra.items():
            weights.setdefault(i, w)
        q.words = SparseVec(list(weights), list(weights.values()))


def judged(
    index: MediaIndex, embedder: TextEmbedder | None, query: str | None, limit: int = 10,
    filters: SearchFilters | None = None, *, mode: Mode = "hybrid",
    image_vectors: dict[str, np.ndarray] | None = None, clip_query: Callable[[str], np.ndarray] | None = None,
) -> list[Judged]:
    """Every candidate segment with its evidence, most confident first; nothing dropped (for calibration).

    A question is searched as the phrase it asks about (`questions.sought`): its frame ("Where does someone
    say", "어디에 나오나요") was never said or shown, and judged with it a question about something absent
    met unrelated speech ("Is there a recording about …" and "This is an example video")."""
    query = _check(query, limit, filters, mode)
    text = (sought(query) or query) if query else query
    clip_text = clip_query(text) if clip_query is not None and text else None
    q = prepare(index, embedder, text, mode, image_vectors, clip_text)
    pool = max(index.settings.candidates, limit * 5)
    found = [judge(s, q) for s in candidates(index, q, filters, mode, pool)]
    # Stable: candidates alike in every piece of evidence keep the engine's fused order.
    return sorted(found, key=Judged.rank)


def search(
    index: MediaIndex,
    embedder: TextEmbedder | None,
    query: str | None,
    limit: int = 10,
    filters: SearchFilters | None = None,
    *,
    mode: Mode = "hybrid",
    image_vectors: dict[str, np.ndarray] | None = None,
    clip_query: Callable[[str], np.ndarray] | None = None,
    moments: bool = True,
) -> list[Hit]:
    """The moments (or segments, with moments=False) that match, best first; [] when nothing does. A sure
    match hides the weak ones (`calibration.beside`).

    `image_vectors` (e.g. {"frame": feature} of a query picture) search those named vectors too, alone
    or fused with the text query; `clip_query` puts text through a CLIP text tower, searched against the
    shots' "image" vectors.
    """
    found = judged(index, embedder, query, limit, filters, mode=mode, image_vectors=image_vectors,
                   clip_query=clip_query)
    hits = [replace(j.hit, score=round(j.confidence, 6), band=calibration.band(j.confidence), seek=j.seek)
            for j in found if j.confidence >= calibration.MATCH]
    if moments:
        cfg = index.settings
        hits = diversify(merge_moments(hits, cfg.merge_gap, cfg.max_moment), cfg.per_video_decay)
    best = max((h.score for h in hits), default=0.0)
    return [h for h in hits if calibration.beside(h.score, best)][:limit]


class Searcher:
    """Search one index: by text (with CLIP's text tower when `vision.clip` is configured) and by picture."""

    def __init__(self, index: MediaIndex, embedder: TextEmbedder | None, vision: VisionSettings | None = None) -> None:
        self.index = index
        self.embedder = embedder
        self.vision = vision

    def _clip(self) -> ClipEmbedder | None:
        if self.vision is None or "image" not in self.index.store.dims:
            return None
        from mediaindex.models.vision import load_clip

        return load_clip(self.vision)

    def text(self, query: str | None, limit: int = 10, filters: SearchFilters | None = None, *,
             mode: Mode = "hybrid", moments: bool = True) -> list[Hit]:
        query = _check(query, limit, filters, mode)
        if not query:
            raise QueryError("the search query is empty")
        clip = self._clip() if mode != "sparse" and _visual_allowed(filters) else None
        return search(self.index, self.embedder, query, limit, filters, mode=mode,
                      clip_query=clip.embed_query if clip is not None else None, moments=moments)

    def image(self, picture: np.ndarray, limit: int = 10, filters: SearchFilters | None = None) -> list[Hit]:
        """Shots that look like `picture`: through the classifier's "frame" vector and, when configured,
        CLIP's "image" vector."""
        from mediaindex.models.images import check_image
        from mediaindex.models.vision import load_classifier

        if self.vision is None:
            raise QueryError("image search needs the vision settings")
        picture = check_image(picture, "the query picture")
        if not _visual_allowed(filters):
            raise QueryError(f"image search finds visual segments only, not {filters.modality!r} ones")  # type: ignore[union-attr]
        classifier = load_classifier(self.vision) if "frame" in self.index.store.dims else None
        clip = self._clip()
        if classifier is None and clip is None:
            raise QueryError("image search needs vision.classifier or vision.clip to be configured (and an index "
                             "built with them)")
        vectors: dict[str, np.ndarray] = {}
        if classifier is not None:
            vectors["frame"] = classifier.features([picture])[0]
        if clip is not None:
            vectors["image"] = clip.embed_images([picture])[0]
        where = replace(filters or SearchFilters(), modality="visual")
        return search(self.index, None, None, limit, where, image_vectors=vectors)


def _visual_allowed(filters: SearchFilters | None) -> bool:
    mods = filters.modalities if filters is not None else None
    return mods is None or "visual" in mods
