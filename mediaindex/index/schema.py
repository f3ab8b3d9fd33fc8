"""The index's on-disk schema version: an index written by another version is never read silently.

Version 2 added the sparse "words" vector and payload indexes; a version-1 index has neither, so it
must be rebuilt (`mediaindex index reset`, then ingest again).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from mediaindex.errors import IndexSchemaError

SCHEMA_VERSION = 2
SCHEMA_FILE = "schema.json"


def _reset_hint(index_dir: Path) -> str:
    return f"run `mediaindex index reset --index {index_dir}` and ingest again"


def read_schema(index_dir: Path) -> dict[str, Any] | None:
    path = index_dir / SCHEMA_FILE
    if not path.exists():
        return None
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise IndexSchemaError(f"{path} is unreadable ({exc}); {_reset_hint(index_dir)}") from exc
    if not isinstance(found, dict):
        raise IndexSchemaError(f"{path} does not describe an index; {_reset_hint(index_dir)}")
    return found


def _write(index_dir: Path, data: dict[str, Any]) -> None:
    index_dir.mkdir(parents=True, exist_ok=True)
    tmp = index_dir / f".{SCHEMA_FILE}.tmp"
    tmp.write_text(json.dumps(data, indent=2), encoding="utf-8")
    os.replace(tmp, index_dir / SCHEMA_FILE)  # atomic: never a half-written schema file


def check_or_write(
    index_dir: Path, text_dim: int, embedder: str, backend: str = "edge", location: str | None = None,
    extra_dims: dict[str, int] | None = None,
) -> dict[str, int]:
    """Record the schema on first use; refuse an index from another version, embedder or backend.

    Returns every extra named vector the index holds: the ones it was built with plus new ones."""
    expected = {"schema_version": SCHEMA_VERSION, "text_dim": text_dim, "embedder": embedder,
                "backend": backend, "location": location, "extra_vectors": dict(extra_dims or {})}
    found = read_schema(index_dir)
    if found is None:
        _write(index_dir, expected)
        return dict(extra_dims or {})
    if found.get("schema_version") != SCHEMA_VERSION:
        raise IndexSchemaError(
            f"the index in {index_dir} uses schema version {found.get('schema_version')}, this program "
            f"needs {SCHEMA_VERSION}: {_reset_hint(index_dir)}"
        )
    if found.get("text_dim") != text_dim or found.get("embedder") != embedder:
        raise IndexSchemaError(
            f"the index in {index_dir} was built with the text embedder {found.get('embedder')!r} "
            f"({found.get('text_dim')}-d), but {embedder!r} ({text_dim}-d) is configured: configure the "
            f"same embedder, or {_reset_hint(index_dir)}"
        )
    if (found.get("backend"), found.get("location")) != (backend, location):
        raise IndexSchemaError(
            f"the catalog in {index_dir} belongs to the {found.get('backend')} store at "
            f"{found.get('location') or index_dir}, but the {backend} store at {location or index_dir} is "
            f"configured: configure the same index backend, or {_reset_hint(index_dir)}"
        )
    had = found.get("extra_vectors") or {}
    changed = {n: (had[n], d) for n, d in (extra_dims or {}).items() if n in had and had[n] != d}
    if changed:
        name, (old, new) = next(iter(changed.items()))
        raise IndexSchemaError(
            f"the index in {index_dir} holds {old}-d {name!r} vectors, but the configured model makes {new}-d "
            f"ones: configure the same model, or {_reset_hint(index_dir)}"
        )
    extra = {**had, **(extra_dims or {})}
    if extra != had:
        _write(index_dir, {**found, "extra_vectors": extra})  # new named vectors are added in place
    return extra
