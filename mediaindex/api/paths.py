"""Media roots: the only folders whose files may be served or ingested over HTTP.

Every path a client gives is checked here: no `..` component, no NUL byte, no longer than the file
system takes (a 422, before the file system is asked), and after resolving symlinks the real file must
lie inside a root. URL-decoding happens once, in the server; a name
that still contains `%2e%2e` afterwards is a literal file name and cannot climb out.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from mediaindex.api.errors import ApiError

# Linux's limits (NAME_MAX, PATH_MAX), in bytes: a longer name is refused before the file system is asked.
MAX_NAME_BYTES = 255
MAX_PATH_BYTES = 4096
_SHOWN_CHARS = 80  # a client's path quoted in a message, at most (the rest is elided)


def quoted(raw: str) -> str:
    """A client's path as a message quotes it: a very long one is cut, with its length said."""
    if len(raw) <= _SHOWN_CHARS:
        return repr(raw)
    return f"{raw[:_SHOWN_CHARS]!r}… ({len(raw)} characters)"


def check_length(raw: str) -> None:
    """A 422 for a path longer than the file system takes, as a whole or in one of its parts."""
    size = len(raw.encode("utf-8", "surrogateescape"))
    if size > MAX_PATH_BYTES:
        raise ApiError(422, f"the path is {size} bytes long; paths may have at most {MAX_PATH_BYTES} bytes")
    longest = max((len(part.encode("utf-8", "surrogateescape")) for part in raw.replace("\\", "/").split("/")),
                  default=0)
    if longest > MAX_NAME_BYTES:
        raise ApiError(422, f"a name in the path {quoted(raw)} is {longest} bytes long; file and folder names "
                            f"may have at most {MAX_NAME_BYTES} bytes")


class MediaRoots:
    def __init__(self, roots: list[Path]) -> None:
        self.roots = [Path(r).expanduser().resolve() for r in roots]

    def contains(self, path: Path) -> bool:
        """Whether an existing path, with every symlink resolved, lies inside a root."""
        try:
            real = path.resolve(strict=True)
        except (OSError, RuntimeError):
            return False
        return any(real == root or real.is_relative_to(root) for root in self.roots)

    def resolve(self, raw: str, must_be_file: bool = False) -> Path:
        """A client's path (relative to a root, or absolute inside one) -> the real path inside a root."""
        if not self.roots:
            raise ApiError(403, "no media roots are configured on this server (api.media_roots)")
        if not raw or "\x00" in raw:
            raise ApiError(400, "the path is empty or contains a NUL byte")
        check_length(raw)
        parts = PurePosixPath(raw.replace("\\", "/")).parts
        if ".." in parts:
            raise ApiError(403, f"path {quoted(raw)} climbs out with '..': give a path inside a media root")
        try:
            return self._resolve(raw, must_be_file)
        except OSError as exc:  # e.g. a root and the path together longer than the file system takes
            raise ApiError(422, f"path {quoted(raw)} cannot be looked up: {exc.strerror or type(exc).__name__}") from exc

    def _resolve(self, raw: str, must_be_file: bool) -> Path:
        given = Path(raw)
        candidates = [given] if given.is_absolute() else [root / given for root in self.roots]
        outside = False
        for candidate in candidates:
            if not candidate.exists() and not candidate.is_symlink():
                continue
            if not self.contains(candidate):
                outside = True
                continue
            real = candidate.resolve(strict=True)
            if must_be_file and not real.is_file():
                raise ApiError(400, f"{quoted(raw)} is not a regular file")
            return real
        if outside:
            raise ApiError(403, f"path {quoted(raw)} is outside the configured media roots")
        raise ApiError(404, f"no file {quoted(raw)} under the configured media roots")


def _hidden_part(path: Path, base: Path | None) -> bool:
    """Whether a component of `path` below `base` starts with a dot (dotfiles, .ssh, .git, ...); a relative
    path is taken as below its root. The root itself may lie in a dot folder (~/.local/share/...)."""
    if path.is_absolute():
        if base is None or not path.is_relative_to(base):
            return False
        path = path.relative_to(base)
    return any(p.startswith(".") for p in path.parts)


class MediaPolicy:
    """What may leave the server as a file or be ingested over HTTP: media, never anything else.

    A file is served (or ingested) when it lies in a media root (MediaRoots' checks), no part of its
    path below the root starts with a dot, neither as given nor once symlinks are resolved, it is not
    one of the server's own files (the index folder except its uploads, the cache, the keys
    database), and it has a media suffix or the index knows it as an ingested file.
    """

    def __init__(self, roots: MediaRoots, private: list[Path], allowed_inside_private: list[Path],
                 suffixes: set[str]) -> None:
        self.roots = roots
        self.private = [Path(p).expanduser().resolve() for p in private]
        self.allowed = [Path(p).expanduser().resolve() for p in allowed_inside_private]
        self.suffixes = suffixes

    def _root_of(self, real: Path) -> Path | None:
        return next((r for r in self.roots.roots if real == r or real.is_relative_to(r)), None)

    def is_private(self, real: Path) -> bool:
        inside = any(real == p or real.is_relative_to(p) for p in self.private)
        return inside and not any(real.is_relative_to(a) for a in self.allowed)

    def refusal(self, given: Path, real: Path, known: bool = False) -> str | None:
        """Why this file may not be served or ingested (None: it may)."""
        root = self._root_of(real)
        if _hidden_part(real, root) or _hidden_part(given, root):
            return "hidden files are never served"
        if self.is_private(real):
            return "the server's own files are never served"
        if not known and real.suffix.lower() not in self.suffixes:
            return "not a media file"
        return None

    def resolve(self, raw: str, known=None) -> Path:
        """A client's path -> a real media file; 404 for anything that is not servable media (as for a
        file that does not exist: a refusal must not tell what lies on the server)."""
        real = self.roots.resolve(raw, must_be_file=True)
        given = Path(raw) if Path(raw).is_absolute() else Path(raw.replace("\\", "/"))
        if self.refusal(given, real, known=bool(known and known(real))) is not None:
            raise ApiError(404, f"no media file {quoted(raw)} under the configured media roots")
        return real
