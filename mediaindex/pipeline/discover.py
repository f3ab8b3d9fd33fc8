"""Turn the paths a user gives into media files, recursively, with a reason for each one skipped."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

MEDIA_SUFFIXES = {
    ".mp4", ".m4v", ".mov", ".mkv", ".webm", ".avi", ".wmv", ".flv", ".mpg", ".mpeg", ".ts", ".mts", ".3gp", ".ogv",
    ".wav", ".flac", ".mp3", ".m4a", ".aac", ".ogg", ".opus", ".aiff", ".aif", ".wma",
}


@dataclass
class Discovered:
    files: list[Path] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)


def discover(paths: list[str | Path]) -> Discovered:
    """Files are taken as given (a wrong kind of file is reported later, by the decoder);
    folders are walked recursively for files with a media suffix."""
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
                if child.is_file() and child.suffix.lower() in MEDIA_SUFFIXES and not child.name.startswith("."):
                    add(child)
        elif path.is_file():
            add(path)
        elif path.exists():
            found.skipped.append((str(path), "not a regular file"))
        else:
            found.skipped.append((str(path), "file not found"))
    return found
