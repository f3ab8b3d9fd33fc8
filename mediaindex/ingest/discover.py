"""Turn the paths a user gives into media files, recursively, with a reason for each one skipped."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path

MEDIA_SUFFIXES = {
    ".mp4", ".m4v", ".mov", ".mkv", ".webm", ".avi", ".wmv", ".flv", ".mpg", ".mpeg", ".ts", ".mts", ".3gp", ".ogv",
    ".wav", ".flac", ".mp3", ".m4a", ".aac", ".ogg", ".opus", ".aiff", ".aif", ".wma",
}


@dataclass
class Discovered:
    files: list[Path] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)
    # Files in walked folders left out because of their type (pictures, subtitles, notes): not errors,
    # but a person should be able to see what was not looked at.
    ignored: list[str] = field(default_factory=list)


def _selected(rel: str, include: Sequence[str], exclude: Sequence[str]) -> bool:
    """A glob matches the path relative to the walked folder or the file name alone."""
    name = rel.rsplit("/", 1)[-1]

    def hit(pattern: str) -> bool:
        return fnmatchcase(rel, pattern) or fnmatchcase(name, pattern)

    return (not include or any(hit(p) for p in include)) and not any(hit(p) for p in exclude)


def discover(paths: list[str | Path], include: Sequence[str] = (), exclude: Sequence[str] = ()) -> Discovered:
    """Files are taken as given (a wrong kind of file is reported later, by the decoder);
    folders are walked recursively for files with a media suffix that pass the include/exclude
    globs (matched against the path below the folder, or the file name)."""
    for pattern in (*include, *exclude):
        if not pattern.strip():
            raise ValueError("an include/exclude glob is empty")
    found = Discovered()
    seen: set[Path] = set()

    def add(p: Path) -> None:
        p = p.resolve()
        if p not in seen:
            seen.add(p)
            found.files.append(p)

    for raw in paths:
        path = Path(raw).expanduser()
        if path.is_dir():
            for child in sorted(path.rglob("*")):
                if not child.is_file() or child.name.startswith("."):
                    continue
                if not _selected(child.relative_to(path).as_posix(), include, exclude):
                    continue
                if child.suffix.lower() in MEDIA_SUFFIXES:
                    add(child)
                else:
                    found.ignored.append(str(child.resolve()))
        elif path.is_file():
            add(path)
        elif path.exists():
            found.skipped.append((str(path), "not a regular file"))
        else:
            found.skipped.append((str(path), "file not found"))
    return found
