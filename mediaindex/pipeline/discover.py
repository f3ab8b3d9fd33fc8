"""Turn the paths a user gives into media files, recursively, with a reason for each entry skipped.

Every entry of a walked folder ends up either in `files` or in `skipped` with one specific reason
(dangling symlink, symlink loop, not a regular file, unreadable, hidden, unsupported type, the same
file as another): nothing is passed over without a line, but for subtitle files named after a media file
found, which are read with it. Media files the user's --include/--exclude
globs leave out are what was asked for: they are counted in `left_out`, not listed. Names are kept as they are;
`shown()` escapes control characters (a newline in a name must not split a report line).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from functools import lru_cache
from pathlib import Path

from mediaindex.errors import is_utf8, written_out
from mediaindex.media.probe import NOT_UTF8_NAME
from mediaindex.media.subtitles import SUBTITLE_SUFFIXES, subtitle_files

# What archives hold: camcorder streams (.mts, .m2ts), DVD titles (.vob), broadcast and production files (.ts,
# .mxf, .dv), old web and desktop video (.flv, .f4v, .wmv, .asf, .rm, .divx), audiobooks (.m4b), phone memos
# (.amr, .3gp); FFmpeg reads them all.
MEDIA_SUFFIXES = {
    ".mp4", ".m4v", ".mov", ".mkv", ".webm", ".avi", ".wmv", ".flv", ".mpg", ".mpeg", ".ts", ".mts", ".3gp", ".ogv",
    ".m2ts", ".m2t", ".vob", ".3g2", ".f4v", ".asf", ".divx", ".mxf", ".dv", ".rm", ".rmvb",
    ".wav", ".flac", ".mp3", ".m4a", ".aac", ".ogg", ".opus", ".aiff", ".aif", ".wma",
    ".aifc", ".mka", ".m4b", ".oga", ".weba", ".amr", ".ac3", ".eac3", ".mp2", ".wv", ".ape", ".au", ".caf", ".spx",
    ".gif",
}
# A GIF is a silent clip when it is animated (the web's short loops); a single picture is left out of a folder's
# walk as other pictures are. Given by name, either is indexed.
STILL_OR_CLIP_SUFFIXES = {".gif"}
# Entries of a walked folder that are simply not media (pictures, subtitles, notes, dotfiles): the CLI counts
# them and lists them only when asked (-v), where every other skip gets its line.
UNSUPPORTED_TYPE = "unsupported type"
HIDDEN = "hidden"
NOT_MEDIA = (UNSUPPORTED_TYPE, HIDDEN)
_KINDS = {stat.S_IFIFO: "a named pipe", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device"}


def shown(text: str | Path) -> str:
    """Text with control characters escaped (\\n, \\t, \\x1b ...), for one-line reports and terminals."""
    text = str(text)
    if text.isprintable():
        return text
    out = []
    for ch in text:
        if ch.isprintable() or ch == " ":
            out.append(ch)
        else:
            escaped = repr(ch)[1:-1]  # '\n' -> \n, '\x1b' -> \x1b, '\u200b' -> \u200b
            out.append(escaped if escaped != ch else f"\\x{ord(ch):02x}")
    return "".join(out)


@dataclass
class Discovered:
    files: list[Path] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)
    left_out: int = 0  # media files that the include/exclude globs leave out


def _selected(rel: str, include: Sequence[str], exclude: Sequence[str]) -> bool:
    """A glob matches the path relative to the walked folder or the file name alone."""
    name = rel.rsplit("/", 1)[-1]

    def hit(pattern: str) -> bool:
        return fnmatchcase(rel, pattern) or fnmatchcase(name, pattern)

    return (not include or any(hit(p) for p in include)) and not any(hit(p) for p in exclude)


def _broken_link(path: Path) -> str | None:
    """Why a symlink cannot be followed (None: it can)."""
    try:
        path.resolve(strict=True)
    except RuntimeError:
        return "symlink loop"
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "symlink loop"
        if exc.errno == errno.ENOENT:
            return f"dangling symlink (points to {shown(os.readlink(path))}, which does not exist)"
        return f"unreadable symlink ({exc.strerror or exc})"
    return None


def _undecodable(path: Path) -> str | None:
    """Why a path cannot be kept: a name in another encoding than UTF-8 (an old Latin-1 archive) has no text form
    that the job store, the catalog and the index could hold."""
    return None if is_utf8(str(path)) else NOT_UTF8_NAME


@lru_cache(maxsize=4096)
def _still_picture(path: Path, size: int, mtime_ns: int) -> bool:
    """Whether a GIF holds one picture only, read from its blocks without decoding them (a watched folder is
    looked at again and again: each version of a file is read once). A file Pillow cannot read is left to the
    decoder, which gives the reason."""
    from PIL import Image

    try:
        with Image.open(path) as image:
            return not getattr(image, "is_animated", False)
    except Exception:  # damaged data raises all kinds (OSError, DecompressionBombError, EOFError, ...)
        return False


def _not_a_file(path: Path, mode: int) -> str | None:
    if stat.S_ISREG(mode):
        return None if os.access(path, os.R_OK) else "unreadable (permission denied)"
    return f"not a regular file ({_KINDS.get(stat.S_IFMT(mode), 'an unknown kind of file')})"


class _Walk:
    def __init__(self, include: Sequence[str], exclude: Sequence[str]) -> None:
        self.include, self.exclude = include, exclude
        self.found = Discovered()
        self.first: dict[Path, Path] = {}  # real file -> the path it was first found as
        self.subtitles: list[Path] = []  # read with the media file they are named after, if one is found

    def skip(self, path: Path, reason: str) -> None:
        self.found.skipped.append((written_out(str(path)), reason))  # stored as text: odd bytes written out

    def add(self, path: Path) -> None:
        if why := _undecodable(path.resolve()):
            self.skip(path, why)
            return
        real = path.resolve()
        if real in self.first:
            if self.first[real] != path:
                self.skip(path, f"the same file as {shown(self.first[real])}")
            return
        self.first[real] = path
        self.found.files.append(real)

    def argument(self, path: Path) -> None:
        """A path given by the user: a file is taken as given (the decoder judges its content)."""
        if path.is_symlink() and (why := _broken_link(path)):
            self.skip(path, why)
            return
        try:
            st = path.stat()
        except FileNotFoundError:
            self.skip(path, "file not found")
            return
        except OSError as exc:
            self.skip(path, f"unreadable ({exc.strerror or exc})")
            return
        if stat.S_ISDIR(st.st_mode):
            self.folder(path, path, {(st.st_dev, st.st_ino)})
        elif why := _not_a_file(path, st.st_mode):
            self.skip(path, why)
        else:
            self.add(path)

    def folder(self, top: Path, folder: Path, above: set[tuple[int, int]]) -> None:
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            self.skip(folder, f"unreadable folder ({exc.strerror or exc})")
            return
        for entry in entries:
            self.entry(top, Path(entry.path), entry, above)

    def entry(self, top: Path, path: Path, entry: os.DirEntry, above: set[tuple[int, int]]) -> None:
        if entry.name.startswith("."):
            self.skip(path, f"{HIDDEN} (the name starts with a dot)")
            return
        if entry.is_symlink() and (why := _broken_link(path)):
            self.skip(path, why)
            return
        try:
            st = path.stat()
        except OSError as exc:
            self.skip(path, f"unreadable ({exc.strerror or exc})")
            return
        if stat.S_ISDIR(st.st_mode):
            if why := _undecodable(path):
                self.skip(path, why)
                return
            here = (st.st_dev, st.st_ino)
            if here in above:  # a symlink back to a folder being walked
                self.skip(path, "symlink loop (points to a folder that contains it)")
                return
            self.folder(top, path, above | {here})
            return
        if why := _not_a_file(path, st.st_mode):
            self.skip(path, why)
        elif path.suffix.lower() in SUBTITLE_SUFFIXES:
            self.subtitles.append(path)
        elif path.suffix.lower() not in MEDIA_SUFFIXES:
            self.skip(path, f"{UNSUPPORTED_TYPE} ({shown(path.suffix) or 'no suffix'})")
        elif not _selected(path.relative_to(top).as_posix(), self.include, self.exclude):
            self.found.left_out += 1
        elif path.suffix.lower() in STILL_OR_CLIP_SUFFIXES and _still_picture(path, st.st_size, st.st_mtime_ns):
            self.skip(path, f"{UNSUPPORTED_TYPE} ({shown(path.suffix)}: a still picture, not a clip)")
        else:
            self.add(path)


def discover(paths: list[str | Path], include: Sequence[str] = (), exclude: Sequence[str] = ()) -> Discovered:
    """Files are taken as given (a wrong kind of file is reported later, by the decoder);
    folders are walked recursively for files with a media suffix that pass the include/exclude
    globs (matched against the path below the folder, or the file name); every other entry
    gets a reason in `skipped`."""
    for pattern in (*include, *exclude):
        if not pattern.strip():
            raise ValueError("an include/exclude glob is empty")
    walk = _Walk(include, exclude)
    for raw in paths:
        walk.argument(Path(raw).expanduser())
    folders = {file.resolve().parent for file in walk.subtitles}
    read_with = {file.resolve() for media in walk.found.files if media.parent in folders
                 for file in subtitle_files(media)}
    # Files found through a link to a file in another folder: subtitles named after the link are not read (a
    # file's subtitles are looked for beside the file itself), and the reason says so.
    unread = [file for file in walk.subtitles if file.resolve() not in read_with]
    linked = [(path, real) for real, path in walk.first.items() if path.parent.resolve() != real.parent] if unread else []
    for file in unread:
        link = next(((path, real) for path, real in linked if path.parent.resolve() == file.resolve().parent
                     and file.name.casefold().startswith(path.stem.casefold() + ".")), None)
        whose = "no media file found here" if link is None else (
            f"{shown(link[0].name)}, a link to {shown(link[1])}: subtitles are read beside the file itself")
        walk.skip(file, f"{UNSUPPORTED_TYPE} ({shown(file.suffix)}: subtitles of {whose})")
    return walk.found
