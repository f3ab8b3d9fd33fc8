"""What the commands print: hits, stats, jobs, keys, agent results and the words of a server's ingest job.

Results go to stdout (`out`, or plain `print` for JSON and transcripts, so a pipe gets them unchanged); what
is said about the work goes to stderr (`err`).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import sys
import textwrap
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from mediaindex.agents.render import gone
from mediaindex.jobs import Job
from mediaindex.segments import ANALYSIS_ADDS, MODALITIES

if TYPE_CHECKING:
    from mediaindex.pipeline.run import IngestReport


def console(**options: Any) -> Console:
    """A console that prints text as written: file names and spoken words such as ":x:" or ":smile:" are not
    emoji codes here (markup is escaped where text is printed)."""
    return Console(emoji=False, **options)


out = console()
err = console(stderr=True)
# Below this many columns moments are listed, not tabled.
NARROW = 100


def fail(message: str, code: int = 2) -> typer.Exit:
    """Say what went wrong on stderr; the exit to raise (2: a usage or input error)."""
    err.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def say(message: str) -> None:
    """A line about the work, on stderr, printed as it is."""
    err.print(message, highlight=False, markup=False, soft_wrap=True)


def plural(n: int, noun: str, many: str | None = None) -> str:
    """'1 segment', '84 segments' (an irregular plural is given: plural(2, 'summary', 'summaries'))."""
    return f"{n} {noun if n == 1 else (many or noun + 's')}"


def timestamp(t: float) -> str:
    m, s = divmod(t, 60)
    return f"{int(m)}:{s:04.1f}"


def hits(found: list[dict], as_json: bool, thumbs_dir: Path, closest: list[dict] | None = None,
         by_picture: bool = False, more: int | None = None, noun: str = "moment", filtered: bool = False,
         unmatched: str | None = None) -> None:
    """Moments as a table (the search's confidence where it gives one), or as JSON with absolute thumbnails;
    `more`: the list is full, and this --limit lists more; `filtered`: the search had filters; `unmatched`: why
    they match nothing, where that is known (`unknown_keys`)."""
    if as_json:
        print(json.dumps(_absolute_thumbnails(found, thumbs_dir), ensure_ascii=False, indent=2))
        return
    if not found:
        if by_picture:
            out.print("no shot looks like it closely enough (--min-confidence none lists the closest)", highlight=False)
            return
        if not closest and filtered:  # not even the closest moments: none passes the filters
            out.print(f"no moments match: {unmatched or 'nothing indexed passes these filters'}", highlight=False,
                      markup=False)
            return
        if not closest:
            out.print("no moments match: try fewer words, another language, or another --modality", highlight=False)
            return
        out.print("no confident match; the closest moments (not confident matches):", highlight=False)
        found = [{**h, "band": f"closest ({h['band']})" if h.get("band") else "closest"} for h in closest]
    bands = any(h.get("band") for h in found)
    rows = []
    for h in found:
        # A picture without words is shown as what it is, with the classes it looks like (which placed it).
        rows.append((f"{h.get('band') or '-'} {probability(h['score'])}" if bands else f"{h['score']:.3f}",
                     Path(h["source"]).name + gone(h["source"]), f"{timestamp(h['start'])}–{timestamp(h['end'])}", h["modality"],
                     _said(h)))
    if out.width < NARROW:  # a table's text column would be a few words wide: one heading line per moment
        for match, name, span, kind, text in rows:
            out.print(f"[bold]{escape(match)}[/bold]  {escape(name)}  {span}  {kind}", highlight=False)
            for line in wrapped(text, max(20, out.width - 4)):
                out.print("    " + line, highlight=False, markup=False)
    else:
        _table(rows, bands)
    _more(len(found), noun, more)


def probability(p: float) -> str:
    """A probability to two places, cut rather than rounded: a moment just under a band's line (0.148 under
    `low`'s 0.15) never reads as on it."""
    return f"{math.floor(p * 100 + 1e-6) / 100:.2f}"


def _more(shown: int, noun: str, more: int | None) -> None:
    if more is not None:
        out.print(f"the first {plural(shown, noun)}; --limit {more} lists more", style="dim", highlight=False)


def _table(rows: list[tuple[str, str, str, str, str]], bands: bool) -> None:
    table = Table(show_lines=False)
    # The short columns keep their one line; the text takes what is left.
    table.add_column("match" if bands else "score", no_wrap=True)
    table.add_column("file", overflow="fold", max_width=32)
    table.add_column("time", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("text", overflow="fold", ratio=1)
    for row in rows:
        plain_row(table, *row)
    out.print(table)


def _said(h: dict) -> str:
    """What a moment says or shows: its speaker and text (and the audio track other than the default one it was
    heard on), or a picture without words as what it looks like; and the chapter the file marks that it lies in."""
    said = clip_words(h["text"], 120) or (picture_without_words(h.get("looks_like")) if h["modality"] == "visual" else "")
    heard_on = f"[{h['track']}] " if h["modality"] == "speech" and h.get("track") else ""
    chapter = f" (chapter: {h['in_chapter']})" if h.get("in_chapter") else ""
    return heard_on + (f"{h['speaker']}: " if h.get("speaker") else "") + said + chapter


def _absolute_thumbnails(moments: list[dict], thumbs_dir: Path) -> list[dict]:
    for h in moments:  # absolute paths, as the source is
        if h.get("thumbnail"):
            h["thumbnail"] = str(thumbs_dir / h["thumbnail"])
    return moments


def files(found: list[dict], as_json: bool, thumbs_dir: Path, closest: list[dict] | None = None,
          more: int | None = None, filtered: bool = False, unmatched: str | None = None) -> None:
    """Files that hold a match, each under one heading line (its best moment's confidence, its name, how many of
    its moments match) with its best moments beneath; or as JSON."""
    if as_json:
        for f in found:
            _absolute_thumbnails(f["moments"], thumbs_dir)
        print(json.dumps(found, ensure_ascii=False, indent=2))
        return
    if not found:
        hits([], False, thumbs_dir, closest, filtered=filtered, unmatched=unmatched)
        return
    for f in found:
        count = plural(f["count"], "moment")
        shown = f" (the best {len(f['moments'])})" if len(f["moments"]) < f["count"] else ""
        match = f"{f['band'] or '-'} {probability(f['score'])}"
        out.print(f"[bold]{escape(match)}  {escape(Path(f['source']).name)}[/bold]{escape(gone(f['source']))}  "
                  f"{count}{shown}", highlight=False)
        for h in f["moments"]:
            span = f"{timestamp(h['start'])}–{timestamp(h['end'])}"
            lines = wrapped(f"{span}  {h['modality']}  {_said(h)}", max(20, out.width - 6))
            for i, line in enumerate(lines):
                out.print("    " + ("  " if i else "") + line, highlight=False, markup=False)
    _more(len(found), "file", more)


def wrapped(text: str, width: int) -> list[str]:
    """Lines of at most `width` terminal cells, broken between words where it can: Korean, Chinese and Japanese
    characters take two cells each, so counting characters would let a line run past the edge."""
    return [line.plain.rstrip() for line in Text(text).wrap(out, width)]


def clip_words(text: str, limit: int) -> str:
    """The text up to `limit` characters, cut after a whole word and marked as cut (`textwrap.shorten` would leave
    nothing but its placeholder of a text without spaces: Chinese, Japanese, a long URL on screen)."""
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0] if " " in text[:limit] else text[:limit]
    return cut.rstrip(" ,;:") + "…"


def plain_row(table: Table, *cells: str) -> None:
    """A row shown as written: file names, speech and key names may hold brackets rich would read as markup."""
    table.add_row(*(Text(cell) for cell in cells))


def picture_without_words(looks_like: list[str] | None) -> str:
    return f"(picture without words; looks like {', '.join(looks_like)})" if looks_like else "(picture without words)"


def stats(numbers: dict[str, Any], index_dir: Path, as_json: bool) -> None:
    if as_json:
        print(json.dumps(numbers, indent=2))
        return
    out.print(f"{plural(numbers['files'], 'file')}, {plural(numbers['points'], 'segment')} in {index_dir}",
              highlight=False)
    kinds = [f"{m} {numbers[f'{m}_segments']}" for m in MODALITIES if numbers.get(f"{m}_segments")]
    if kinds:
        out.print(f"  by kind: {', '.join(kinds)}", highlight=False)
    if older := numbers.get("files_by_earlier_version"):
        out.print(f"  {plural(older, 'file')} indexed by an earlier version: `mediaindex ingest --reindex` with "
                  f"their files or folders indexes them again ({ANALYSIS_ADDS})",
                  highlight=False, soft_wrap=True)
    if missing := numbers.get("files_missing"):
        out.print(f"  gone from disk: {plural(missing, 'file')} (`mediaindex index remove --missing` takes them out "
                  "of the index)", highlight=False, soft_wrap=True)
    # The store's own words for its internals: "segments" there are storage segments, not ours.
    labels = {"segments": "storage segments", "indexed_vectors": "vectors in HNSW graphs",
              "disk_bytes": "size on disk"}
    for key, value in numbers.items():
        if key in {"files", "points", "files_by_earlier_version", "files_missing"} or key.endswith("_segments") and key != "segments":
            continue
        shown = f"{value / 1e6:.1f} MB" if key == "disk_bytes" else ", ".join(value) if isinstance(value, list) else value
        out.print(f"  {labels.get(key, key.replace('_', ' '))}: {shown}", highlight=False)


def file_list(files: Sequence[Any], shown: int = 10) -> None:
    """Indexed files by path and id, the first `shown` of them."""
    for f in files[:shown]:
        out.print(f"  {f.source}  ({f.video_id})", highlight=False, markup=False, soft_wrap=True)
    if len(files) > shown:
        out.print(f"  … and {len(files) - shown} more", highlight=False)


def unknown_keys(metadata: Iterable[dict[str, Any]], pairs: tuple[tuple[str, str], ...]) -> str | None:
    """Why metadata conditions match no file, where a key they name is held by none of the files (`metadata`:
    theirs): the keys they do hold, so that a misspelt one is seen; None where every key is held."""
    held = sorted({key for given in metadata for key, value in given.items() if value is not None})
    missing = [key for key, _ in pairs if key not in held]
    if not missing:
        return None
    named = f"{'key' if len(missing) == 1 else 'keys'} {', '.join(repr(key) for key in missing)}"
    return f"no indexed file has the metadata {named} (" + (
        f"the keys they have: {', '.join(held)})" if held else "no file was indexed with metadata)")


def listed(files: Sequence[Any], as_json: bool, unmatched: str | None = None) -> None:
    """Indexed files (catalog records, or a server's): path, length, language, segments and id on a line, then
    what it was indexed with (a manifest's columns, a downloaded file's address); or as JSON. `unmatched`: why
    none is listed, where that is known."""
    if as_json:
        print(json.dumps([{"video_id": f.video_id, "source": f.source, "duration": f.duration, "language": f.language,
                           "segments": f.segments, "metadata": f.metadata, "on_disk": not gone(f.source)}
                          for f in files], ensure_ascii=False, indent=2))
        return
    from mediaindex.pipeline.discover import shown

    for f in files:  # names and values as written, control characters escaped
        facts = [timestamp(f.duration) if f.duration else None, f.language, plural(f.segments, "segment"), f.video_id]
        out.print(f"{shown(f.source)}{gone(f.source)}  {'  '.join(x for x in facts if x)}", highlight=False,
                  markup=False, soft_wrap=True)
        if f.metadata:
            given = " · ".join(f"{k}: {', '.join(map(str, v)) if isinstance(v, list) else v}"
                               for k, v in f.metadata.items())
            out.print(f"    {shown(given)}", highlight=False, markup=False, soft_wrap=True)
    if not files and unmatched:
        out.print(unmatched, highlight=False, markup=False)
    out.print(plural(len(files), "file"), highlight=False)


def removed(files: Sequence[Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps([{"video_id": f.video_id, "source": f.source, "segments": f.segments} for f in files],
                         indent=2))
        return
    for f in files:
        out.print(f"removed {f.source}  ({plural(f.segments, 'segment')}, {f.video_id})", highlight=False,
                  markup=False, soft_wrap=True)
    if len(files) != 1:
        out.print(f"{plural(len(files), 'file')} taken out of the index", highlight=False)


def job_dict(job: Job, counts: dict[str, int]) -> dict:
    return {"id": job.id, "kind": job.kind, "state": job.shown_state, "error": job.error, "created": job.created,
            "updated": job.updated, "params": job.params, "counts": counts, "progress": job.progress}


def job_files(job: Job, counts: dict[str, int], files: list[Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps({**job_dict(job, counts), "files": [f.__dict__ for f in files]}, ensure_ascii=False,
                         indent=2))
        return
    from mediaindex.pipeline.progress import stage_shares

    progress = job.progress or {}
    out.print(f"job {job.id} ({job.kind}): {job.shown_state}" + (f" ({job.error})" if job.error else "") + _eta(job)
              + (f"; the process running it is gone: continue with `mediaindex ingest --resume {job.id}`"
                 if job.interrupted and job.kind == "ingest" else ""), highlight=False, markup=False)
    if job.kind != "ingest":  # a summary or question: what it was asked, and its answer once done
        for key, value in job.params.items():
            if value not in (None, "", False):
                out.print(f"{key}: {value}", highlight=False, markup=False)
        markdown = job.result.get("markdown") if isinstance(job.result, dict) else None
        if isinstance(markdown, str) and markdown:
            from mediaindex.cli.agent_display import show_markdown

            show_markdown(out, markdown)
        return
    under_way = progress.get("now") or {} if not job.interrupted else {}
    table = Table()
    for col in ("state", "attempts", "file", "reason"):
        table.add_column(col)
    for f in files:
        # A file in the stages now says how far each has got with it.
        reason = stage_shares(under_way[f.path]) if f.state == "running" and f.path in under_way else f.reason
        plain_row(table, f.state, str(f.attempts), f.path, reason or "")
    out.print(table)


def job_list(listed: list[tuple[Job, dict[str, int]]], as_json: bool) -> None:
    if as_json:
        print(json.dumps([job_dict(j, c) for j, c in listed], ensure_ascii=False, indent=2))
        return
    table = Table()
    for col in ("id", "kind", "state", "created", "files"):
        table.add_column(col)
    for j, counts in listed:
        # A summary or question has no files: what it was asked stands in their place.
        asked = str(j.params.get("question") or j.params.get("video") or "") if j.kind != "ingest" else ""
        tally = ", ".join(f"{n} {state}" for state, n in sorted(counts.items())) or textwrap.shorten(asked, 44, placeholder="…")
        table.add_row(j.id, j.kind, j.shown_state + _eta(j), time.strftime("%Y-%m-%d %H:%M", time.localtime(j.created)),
                      tally)
    out.print(table)


def _eta(job: Job) -> str:
    """", ETA 0:01:30" for a running job whose run reported one, else nothing."""
    from mediaindex.pipeline.progress import clock

    eta = (job.progress or {}).get("eta")
    return f", ETA {clock(eta)}" if isinstance(eta, int | float) and not job.interrupted else ""


def job_lines(job: dict, verbose: bool = False) -> list[str]:
    """A server's ingest job in the words of a local ingest: one line per file, then the counts."""
    from mediaindex.cli.progress import summary_line
    from mediaindex.pipeline.discover import NOT_MEDIA, shown
    from mediaindex.pipeline.job import GLOBS_LEFT_OUT

    lines: list[str] = []
    tally = {"indexed": 0, "unchanged": 0, "skipped": 0, "failed": 0, "left out": 0}
    for f in job["files"]:
        state, reason = f["state"], f.get("reason") or ""
        if state == "done":
            label = "unchanged" if reason.startswith("already indexed") else "indexed"
        elif state == "skipped" and reason.startswith(NOT_MEDIA):
            label = "left out"
        else:
            label = state
        tally[label] = tally.get(label, 0) + 1
        if label != "left out" or verbose:
            lines.append(f"{label:<10} {shown(f['path'])}" + (f": {shown(reason)}" if reason else ""))
    done = summary_line(tally["indexed"], None, 0, tally["unchanged"], tally["skipped"], tally["failed"],
                        tally["left out"], job["id"], verbose, (job.get("params") or {}).get(GLOBS_LEFT_OUT, 0))
    state = "" if job["state"] == "done" else f" ({job['state']})"
    return [*lines, done + state]


def ingest_report(report: IngestReport, verbose: bool) -> None:
    """The last line of a local ingest: every count named once."""
    from mediaindex.cli.progress import not_media, summary_line

    left_out = sum(map(not_media, report.outcomes))
    err.print(summary_line(len(report.indexed), sum(o.segments for o in report.indexed),
                           len(report.by_status("summarised")), len(report.by_status("unchanged")),
                           len(report.by_status("skipped")) - left_out, len(report.by_status("failed")), left_out,
                           report.job_id, verbose, report.left_out), highlight=False, markup=False, soft_wrap=True)


def agent_result(job_id: str, output: dict[str, Any], markdown: str, as_json: bool, on_server: bool) -> None:
    """A summary or an answer: JSON, or Markdown (rendered on a terminal, as it is into a pipe)."""
    if as_json:
        print(json.dumps({"job_id": job_id, **output}, ensure_ascii=False, indent=2))
        return
    from mediaindex.cli.agent_display import show_markdown

    show_markdown(out, markdown)
    err.print(f"job {job_id}" + (" (on the server)" if on_server else ""), highlight=False)


def keys(listed: list[Any]) -> None:
    if not listed:
        out.print("no keys: the API is open to anyone who can reach it (unless api.require_keys is set)")
        return
    table = Table()
    for col in ("id", "name", "created", "state"):
        table.add_column(col)
    for k in listed:
        created = dt.datetime.fromtimestamp(k.created, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
        plain_row(table, k.id, k.name, created, "revoked" if k.revoked else "active")
    out.print(table)


def models(rows: list[tuple[str, str, str]]) -> None:
    table = Table()
    for col in ("role", "configured", "status"):
        table.add_column(col)
    for row in rows:
        plain_row(table, *row)
    out.print(table)


def transcript(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()
