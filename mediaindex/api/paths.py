"""Media roots: the only folders whose files may be served or ingested over HTTP.

Every path a client gives is checked here: no `..` component, no NUL byte, and after resolving
symlinks the real file must lie inside a root. URL-decoding happens once, in the server; a name
that still contains `%2e%2e` afterwards is a literal file name and cannot climb out.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from mediaindex.api.errors import ApiError


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
        parts = PurePosixPath(raw.replace("\\", "/")).parts
        if ".." in parts:
            raise ApiError(403, f"path {raw!r} climbs out with '..': give a path inside a media root")
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
                raise ApiError(400, f"{raw!r} is not a regular file")
            return real
        if outside:
            raise ApiError(403, f"path {raw!r} is outside the configured media roots")
        raise ApiError(404, f"no file {raw!r} under the configured media roots")
