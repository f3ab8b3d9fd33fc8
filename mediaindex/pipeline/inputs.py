"""What an ingest job covers: paths and folders (with globs) and manifest files with per-file metadata.

A manifest is one path per line (``#`` comments and blank lines ignored), or CSV with a ``path`` column,
or JSONL with a ``path`` key; every other column or key is metadata stored in each segment's ``extra``
payload (``tags`` in CSV is split on ``;``). Relative paths are relative to the manifest's folder. A row may
name a web address instead: its caller downloads it first and gives plan_inputs the files it got as `given`
entries, each with the row's metadata (plan_inputs refuses an address itself).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mediaindex.errors import MediaIndexError
from mediaindex.media.download import is_url, other_scheme
from mediaindex.pipeline.discover import discover

RESERVED_KEYS = {"path", "words"}  # "words" is what the speech stage keeps in extra
Meta = dict[str, Any]


class InputError(MediaIndexError):
    """The inputs of an ingest job are wrong; nothing is ingested."""


class ManifestError(InputError):
    """A manifest file cannot be read; nothing is ingested from it."""


@dataclass
class Plan:
    files: list[tuple[str, Meta]] = field(default_factory=list)  # absolute path, metadata
    skipped: list[tuple[str, str]] = field(default_factory=list)  # path, reason
    left_out: int = 0  # media files in the folders walked that the include/exclude globs leave out


def check_meta(where: str, meta: Meta) -> Meta:
    out: Meta = {}
    for key, value in meta.items():
        if not isinstance(key, str) or not key.strip():
            raise ManifestError(f"{where}: metadata keys must be non-empty strings")
        if key in RESERVED_KEYS:
            raise ManifestError(f"{where}: {key!r} cannot be used as a metadata key")
        ok_list = isinstance(value, list) and all(isinstance(v, str | int | float) for v in value)
        if value is None:  # JSON's null: the key is taken away from a file indexed with it
            out[key] = None
            continue
        if value == "":  # a CSV's blank cell: no value given
            continue
        if not (isinstance(value, str | int | float | bool) or ok_list):
            raise ManifestError(f"{where}: metadata {key!r} must be a string, number, boolean or list of those")
        out[key] = value
    return out


def _rows_text(path: Path, text: str) -> list[tuple[str, Meta]]:
    return [(line.strip(), {}) for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def _rows_csv(path: Path, text: str) -> list[tuple[str, Meta]]:
    reader = csv.DictReader(text.splitlines())
    if not reader.fieldnames or "path" not in reader.fieldnames:
        raise ManifestError(f"manifest {path}: a CSV manifest needs a header row with a 'path' column")
    rows = []
    for n, row in enumerate(reader, start=2):
        where = f"manifest {path} line {n}"
        if None in row:
            raise ManifestError(f"{where}: more fields than the header has")
        target = (row.pop("path") or "").strip()
        if not target:
            raise ManifestError(f"{where}: empty 'path'")
        meta: Meta = {k: (v or "").strip() for k, v in row.items()}
        if meta.get("tags"):
            meta["tags"] = [t.strip() for t in str(meta["tags"]).split(";") if t.strip()]
        rows.append((target, check_meta(where, meta)))
    return rows


def _rows_jsonl(path: Path, text: str) -> list[tuple[str, Meta]]:
    rows = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"manifest {path} line {n}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ManifestError(f"{where}: not valid JSON ({exc.msg})") from exc
        if not isinstance(obj, dict):
            raise ManifestError(f"{where}: each line must be a JSON object with a 'path'")
        target = obj.pop("path", None)
        if not isinstance(target, str) or not target.strip():
            raise ManifestError(f"{where}: 'path' must be a non-empty string")
        rows.append((target.strip(), check_meta(where, obj)))
    return rows


def read_manifest(path: Path) -> list[tuple[str, Meta]]:
    """(absolute path, metadata) per entry; raises ManifestError naming the file and line."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ManifestError(f"manifest not found: {path}") from exc
    except IsADirectoryError as exc:
        raise ManifestError(f"manifest {path} is a folder, not a file") from exc
    except UnicodeDecodeError as exc:
        raise ManifestError(f"manifest {path} is not UTF-8 text") from exc
    suffix = path.suffix.lower()
    parse = _rows_csv if suffix == ".csv" else _rows_jsonl if suffix in {".jsonl", ".ndjson"} else _rows_text
    rows = parse(path, text)
    if not rows:
        raise ManifestError(f"manifest {path} lists no files")
    for target, _ in rows:
        if (scheme := other_scheme(target)) is not None:
            raise ManifestError(f"manifest {path} lists {target}: {scheme}:// addresses are not read; give files, "
                                "folders or http(s) addresses")
    base = path.resolve().parent
    return [(p if is_url(p) else str(base / Path(p).expanduser()), meta) for p, meta in rows]


def plan_inputs(
    paths: Sequence[str | Path] = (),
    manifests: Sequence[Path] = (),
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    given: Sequence[tuple[str, Meta]] = (),
) -> Plan:
    """Expand paths, manifest entries and `given` (path, metadata) entries into files (first mention wins), each
    with its metadata."""
    for pattern in (*include, *exclude):
        if not pattern.strip():
            raise InputError("an --include/--exclude glob is empty")
    if not paths and not manifests and not given:
        raise InputError("nothing to ingest: give media files, folders or --manifest FILE")
    entries: list[tuple[str | Path, Meta]] = [(p, {}) for p in paths]
    for manifest in manifests:
        rows = read_manifest(Path(manifest))  # all manifests are read before anything starts
        if urls := [p for p, _ in rows if is_url(p)]:
            raise ManifestError(f"manifest {manifest} lists a web address ({urls[0]}): it is downloaded first, by "
                                "`mediaindex ingest --manifest` or a server's ingest job")
        entries += rows
    entries += list(given)
    plan = Plan()
    seen: set[str] = set()
    for target, meta in entries:
        found = discover([target], include, exclude)
        plan.skipped += found.skipped
        plan.left_out += found.left_out
        for f in found.files:
            if str(f) not in seen:
                seen.add(str(f))
                plan.files.append((str(f), meta))
    return plan
