"""Errors that carry a message meant for the user, not a stack trace."""


class MediaIndexError(Exception):
    """Base class: the message is shown to the user as is."""


class MediaError(MediaIndexError):
    """A media file cannot be read or has nothing to index."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        # Ray pickles errors raised inside workers; keep the two-argument constructor working.
        return (MediaError, (self.path, self.reason))


class ConfigError(MediaIndexError):
    """The configuration is invalid or names something that cannot be loaded."""


class ModelLoadError(MediaIndexError):
    """A configured model could not be found or loaded."""


class IndexSchemaError(MediaIndexError):
    """The index on disk was written by an incompatible version."""


class IndexBusyError(MediaIndexError):
    """The embedded index is held by another process."""


class IndexCorruptError(MediaIndexError):
    """The index files cannot be read."""


class TranscriptFormatError(MediaIndexError, ValueError):
    """A transcript was asked for in a format, or with cue limits, that do not exist."""
