"""The index's on-disk schema version: an index written by another version is never read silently."""

from __future__ import annotations

import json
from pathlib import Path

from mediaindex.errors import IndexSchemaError

SCHEMA_VERSION = 1
SCHEMA_FILE = "schema.json"


def check_or_write(index_dir: Path, text_dim: int, embedder: str) -> None:
    """Record the schema on first use; refuse an index from another version or embedder."""
    path = index_dir / SCHEMA_FILE
    expected = {"schema_version": SCHEMA_VERSION, "text_dim": text_dim, "embedder": embedder}
    if not path.exists():
        index_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(expected, indent=2), encoding="utf-8")
        return
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise IndexSchemaError(f"{path} is unreadable ({exc}); re-index with `mediaindex index reset` and ingest again") from exc
    if found.get("schema_version") != SCHEMA_VERSION:
        raise IndexSchemaError(
            f"the index in {index_dir} uses schema version {found.get('schema_version')}, this program "
            f"needs {SCHEMA_VERSION}: run `mediaindex index reset --index {index_dir}` and ingest again"
        )
    if found.get("text_dim") != text_dim or found.get("embedder") != embedder:
        raise IndexSchemaError(
            f"the index in {index_dir} was built with the text embedder {found.get('embedder')!r} "
            f"({found.get('text_dim')}-d), but {embedder!r} ({text_dim}-d) is configured: configure the "
            f"same embedder, or run `mediaindex index reset --index {index_dir}` and ingest again"
        )
