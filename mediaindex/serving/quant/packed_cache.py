"""Packed CPU weights cached on disk, so quantizing and packing run once per model, format and torch version.

One entry is a safetensors file of the packed tensors plus a JSON sidecar holding the file's SHA-256, its size and
what it was built from. An entry is used only when the sidecar describes the same build and the file's bytes hash
to the recorded SHA-256 (read again only when the file changed since it last matched: `digest`): a truncated, changed
or half-written file is reported (logged) and rebuilt, never loaded.
Both files are written under temporary names and renamed into place, the data file first.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor

from mediaindex.serving.digest import file_sha256, has_sha256

log = logging.getLogger(__name__)

LAYOUT_VERSION = 1  # bump when what the tensors mean changes


def packed_cache_path(cache_dir: Path, build: dict[str, Any]) -> Path:
    """Where the entry for ``build`` (model, format, group size, ...; torch's version is added) lives; its
    ``name``, where given, starts the file name."""
    described = {**build, "torch": torch.__version__, "layout": LAYOUT_VERSION}
    digest = hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:16]
    model = re.sub(r"[^A-Za-z0-9._-]+", "_", str(build.get("name") or build.get("model") or "model"))[:60]
    fmt = re.sub(r"[^A-Za-z0-9._-]+", "_", str(build.get("format", "")))
    return cache_dir / "packed" / f"{model}-{fmt}-{digest}.safetensors"


def _sidecar(path: Path) -> Path:
    return path.with_suffix(".json")


def load_packed(path: Path, build: dict[str, Any]) -> dict[str, Tensor] | None:
    """The cached tensors for ``build``, or None when there is no usable entry (absent, or corrupt: logged)."""
    if not path.exists():
        return None
    described = {**build, "torch": torch.__version__, "layout": LAYOUT_VERSION}
    try:
        meta = json.loads(_sidecar(path).read_text(encoding="utf-8"))
        expected, size = str(meta["sha256"]), int(meta["bytes"])
        recorded = meta["build"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("packed weights cache %s has no readable record (%s); rebuilding it", path, exc)
        return None
    if recorded != json.loads(json.dumps(described)):
        log.warning("packed weights cache %s was built for %s, not %s; rebuilding it", path, recorded, described)
        return None
    actual_size = path.stat().st_size
    if actual_size != size:
        log.warning("packed weights cache %s is %d bytes, %d were written (truncated or changed); rebuilding it",
                    path, actual_size, size)
        return None
    if not has_sha256(path, expected):
        log.warning("packed weights cache %s is corrupt (its SHA-256 is not the recorded %s); rebuilding it",
                    path, expected[:16])
        return None
    try:
        return load_file(str(path))
    except Exception as exc:  # bytes match the record, yet safetensors refuses them: rebuild rather than fail
        log.warning("packed weights cache %s cannot be read (%s); rebuilding it", path, exc)
        return None


def save_packed(path: Path, build: dict[str, Any], tensors: dict[str, Tensor]) -> None:
    """Write the entry for ``build``; a failure to write (read-only or full disk) is logged, not raised: the
    model runs from the tensors in memory and packs again next time."""
    described = {**build, "torch": torch.__version__, "layout": LAYOUT_VERSION}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        os.close(fd)
        try:
            save_file({k: v.contiguous() for k, v in tensors.items()}, tmp)
            os.chmod(tmp, 0o644)  # mkstemp's 0600 would differ from every other file of the model cache
            record = {"sha256": file_sha256(Path(tmp)), "bytes": os.path.getsize(tmp), "build": described}
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        fd, tmp_meta = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".json", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1)
        os.chmod(tmp_meta, 0o644)
        os.replace(tmp_meta, _sidecar(path))
    except OSError as exc:
        log.warning("cannot write the packed weights cache %s (%s); packing again on the next load", path, exc)
