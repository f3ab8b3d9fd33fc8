"""What the relevance model reads of one candidate: a handful of numbers, each computed the same way for every
query and segment.

- `dense`: cosine of the query's and the segment's text embeddings.
- `standing`: that cosine's z-score among the query's similarities to its candidates: how far this segment
  stands out from what the query resembles anyway (multilingual-e5 gives unrelated text 0.80 and related
  0.85). Where the archive yields fewer candidates than the pool asks for (a file or two), passages about
  nothing in particular (`ranking.background_vectors`) fill the pool, so that a handful of segments do not
  stand out from each other alone.
- `lead`: how far it lies below the query's best candidate (0 for the best).
- `words`: the rarity-weighted share of the query's words the segment holds (`wordweights`); for on-screen
  text, or the share of the query's letters found as one run in it, whichever is higher (OCR merges words).
- `cross_language`: 1 where the query and the segment are in different languages (a translation scores
  lower than same-language text).
- `visual`, `ocr`: the segment's modality (speech, summaries and chapters are the base).
- `label`: a visual segment's best label probability from the classifier (0 for other modalities).

Candidates without words (`judgeable`) get a row of their own (zeros but for the modality) and are left out of
the query's distribution.

The distributions (standings, leads) are those of the pool the model was fitted on, the first `reference`
candidates: a reader who asks for more hits gets more candidates judged by the same yardstick, so a moment's
probability does not depend on how many hits were asked for.

Shots (visual segments: a label's text, or a picture without words placed among its likely classes,
`models.label_space`) are judged again among the query's shots, by the shot part of the model (`SHOT_NAMES`; a
labelled shot keeps the higher of its two probabilities):
- `shot`: cosine of the query's and the shot's text vectors;
- `shot_standing`: its z-score among the query's shots; `shot_lead`: how far it lies below the best of them;
- `nameable`: the query's similarity to the nearest name of a class the classifier sees
  (`ranking.measure_shots`): a query that resembles class names anyway resembles every labelled or placed shot
  a little, so the same similarity says less for it.
- `shot_words`: the shot's z-score among the query's shots for each of the query's words met alone
  (`ranking.query_words`), averaged over the words. A shot that stands out for the query's words one by one,
  "a" and "on" as much as "dog", stands out for anything (a hub of the space): its standing for the whole query
  then says less than the same standing of a shot that stands out for the query alone.

With a CLIP model (`vision.clip`) the query also meets the shots' image vectors through its text tower; the
picture model (`vision.clip_relevance`) reads `PICTURE_NAMES` of each candidate that has one:
- `clip`: cosine of the query's CLIP text vector and the shot's image vector;
- `clip_standing`: its z-score among the query's candidates with an image vector;
- `clip_lead`: how far it lies below the best of them.
"""

from __future__ import annotations

from difflib import SequenceMatcher

import numpy as np

from mediaindex.index.store import TEXT_VECTOR, ScoredHit
from mediaindex.search.ranking import CLIP_VECTOR, Query, judgeable, letters

NAMES = ("dense", "standing", "lead", "words", "cross_language", "visual", "ocr", "label")
SHOT_NAMES = ("shot", "shot_standing", "shot_lead", "nameable", "shot_words")
PICTURE_NAMES = ("clip", "clip_standing", "clip_lead")
# A shared run of fewer letters turns up by chance in any caption ("Mozart" and "Communist" share "ist").
MIN_OCR_LETTERS = 5


def ocr_text_match(query_letters: str, text: str) -> float:
    """The share of the query's letters and digits found as one run in the on-screen text."""
    if len(query_letters) < MIN_OCR_LETTERS:
        return 0.0
    hay = letters(text)
    m = SequenceMatcher(None, query_letters, hay, autojunk=False).find_longest_match(
        0, len(query_letters), 0, len(hay))
    return m.size / len(query_letters) if m.size >= MIN_OCR_LETTERS else 0.0


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    return float(np.dot(a, b) / (na * nb)) if na and nb else 0.0


def word_share(q: Query, s: ScoredHit) -> float:
    """The rarity-weighted share of the query's words the segment holds."""
    if not q.word_ids:
        return 0.0
    held = s.words - q.template_ids if s.hit.modality == "visual" else s.words
    return q.weights.share(q.word_ids, dict.fromkeys(q.word_ids & held, 1.0))


def _leading(found: list[ScoredHit], reference: int | None) -> np.ndarray:
    """Which candidates form the query's distributions: the first `reference` (all where None)."""
    lead = np.zeros(len(found), dtype=bool)
    lead[:len(found) if reference is None else reference] = True
    return lead


def features(q: Query, found: list[ScoredHit], pool: int, reference: int | None = None) -> np.ndarray:
    """One row of NAMES per candidate, in the candidates' order; `pool` is how many candidates with words the
    fitted distribution holds, `reference` how many leading candidates it is measured on (all where None)."""
    rows = np.zeros((len(found), len(NAMES)), dtype=np.float64)
    if not found:
        return rows
    judged = np.array([judgeable(s) for s in found])
    measured = judged & _leading(found, reference)
    dense = np.array([_cos(q.dense, v) if q.dense is not None and (v := s.dense.get(TEXT_VECTOR)) is not None
                      and judgeable(s) else 0.0 for s in found])
    missing = max(0, pool - int(measured.sum()))
    usual = dense[measured] if q.background is None or not missing else np.concatenate(
        [dense[measured], q.background[:missing]])
    spread = float(usual.std()) if len(usual) else 0.0
    rows[:, 0] = dense
    rows[:, 1] = (dense - usual.mean()) / spread if spread > 0 else 0.0
    rows[:, 2] = (dense[measured].max() if measured.any() else 0.0) - dense
    rows[~judged, :3] = 0.0
    query_letters = letters(q.text)
    for i, s in enumerate(found):
        modality = s.hit.modality
        share = word_share(q, s)
        if modality == "ocr":
            share = max(share, ocr_text_match(query_letters, s.hit.text))
        rows[i, 3] = share
        rows[i, 4] = float(q.language is not None and s.hit.language is not None and q.language != s.hit.language)
        rows[i, 5] = float(modality == "visual")
        rows[i, 6] = float(modality == "ocr")
        rows[i, 7] = float(s.confidence or 0.0) if modality == "visual" else 0.0
    return rows


def shots(found: list[ScoredHit]) -> np.ndarray:
    """Which candidates are shots with a text vector (a label's, or a place among classes)."""
    return np.array([s.hit.modality == "visual" and TEXT_VECTOR in s.dense for s in found], dtype=bool)


def shot_features(q: Query, found: list[ScoredHit], reference: int | None = None) -> np.ndarray:
    """One row of SHOT_NAMES per candidate (zeros where it is not a shot or the query has no dense vector); the
    shots among the first `reference` candidates (all where None) form the query's distributions."""
    seen = shots(found)
    lead = _leading(found, reference)
    rows = _among(q.dense, found, seen, TEXT_VECTOR, len(SHOT_NAMES), lead)
    if q.dense is not None:
        rows[seen, 3] = q.nameable or 0.0
        rows[seen, 4] = _word_standing(q.word_vectors, [s.dense[TEXT_VECTOR] for s, c in zip(found, seen, strict=True) if c],
                                       lead[seen])
    return rows


def _word_standing(words: np.ndarray | None, vectors: list[np.ndarray], usual: np.ndarray) -> np.ndarray:
    """Each shot's z-score among the `usual` shots for each word, averaged over the words (zeros without words)."""
    if words is None or not len(words) or not vectors:
        return np.zeros(len(vectors))
    usual = usual if usual.any() else np.ones(len(vectors), dtype=bool)
    shots_ = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(shots_, axis=1, keepdims=True)
    sims = words.astype(np.float64) @ (shots_ / np.where(norms > 0, norms, 1.0)).T  # words x shots
    spread = sims[:, usual].std(axis=1, keepdims=True)
    z = np.divide(sims - sims[:, usual].mean(axis=1, keepdims=True), spread, out=np.zeros_like(sims), where=spread > 0)
    return z.mean(axis=0)


def pictured(found: list[ScoredHit]) -> np.ndarray:
    """Which candidates have a CLIP image vector."""
    return np.array([CLIP_VECTOR in s.dense for s in found], dtype=bool)


def picture_features(q: Query, found: list[ScoredHit], reference: int | None = None) -> np.ndarray:
    """One row of PICTURE_NAMES per candidate (zeros where it has no image vector or the query no CLIP vector)."""
    return _among(q.clip_text, found, pictured(found), CLIP_VECTOR, len(PICTURE_NAMES), _leading(found, reference))


def _among(query: np.ndarray | None, found: list[ScoredHit], chosen: np.ndarray, vector: str, width: int,
           lead: np.ndarray) -> np.ndarray:
    """Rows of `width` columns, the first three for the `chosen` candidates: the query's cosine with their `vector`,
    its z-score among the chosen `lead` candidates, and how far it lies below the best of those."""
    rows = np.zeros((len(found), width), dtype=np.float64)
    if query is None or not chosen.any():
        return rows
    usual = lead[chosen] if lead[chosen].any() else np.ones(int(chosen.sum()), dtype=bool)  # none leads: among all
    sims = np.array([_cos(query, s.dense[vector]) for s, c in zip(found, chosen, strict=True) if c])
    spread = float(sims[usual].std())
    rows[chosen, 0] = sims
    rows[chosen, 1] = (sims - sims[usual].mean()) / spread if spread > 0 else 0.0
    rows[chosen, 2] = sims[usual].max() - sims
    return rows
