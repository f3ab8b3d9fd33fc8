"""Errors that carry a message meant for the user, not a stack trace."""


class MediaIndexError(Exception):
    """Base class: the message is shown to the user as is."""


class MediaError(MediaIndexError):
    """A media file cannot be read or has nothing to index."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{written_out(path)}: {reason}")
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


class MediaTimeoutError(MediaError):
    """Reading a media file took longer than ingest.file_timeout and was stopped."""

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return (MediaTimeoutError, (self.path, self.reason))


class StageError(MediaIndexError):
    """A stage failed on one file; `reason` is what the user reads. `worker_lost`: its worker died (crash,
    out-of-memory kill) on every try, rather than the stage refusing the file."""

    def __init__(self, reason: str, worker_lost: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.worker_lost = worker_lost


class WorkerLostError(MediaIndexError):
    """The worker running a stage died; raised inside an in-process executor's worker it stands for that death."""


def reason_of(exc: BaseException) -> str:
    """The user-facing reason inside an exception (or inside the `cause` a Ray task error wraps)."""
    # Ray's task errors carry the worker's error as `cause`; an error of ours says what it means itself,
    # whatever it was raised from.
    cause = getattr(exc, "cause", None) or (exc if isinstance(exc, MediaIndexError) else exc.__cause__) or exc
    if isinstance(cause, MediaError):
        return cause.reason
    if isinstance(cause, StageError):
        return cause.reason
    if isinstance(cause, MediaIndexError):
        return str(cause)
    return f"{type(cause).__name__}: {cause}"


class IndexDiskFullError(MediaIndexError):
    """The disk holding the index has too little free space for the next write; nothing was written."""


# Said of a query or question whose bytes were not UTF-8 (a terminal set to another encoding): Python keeps such bytes
# as lone surrogates, which no model, index or job store can take.
NOT_UTF8_TEXT = "is not UTF-8 text (is the terminal set to UTF-8? e.g. LANG=C.UTF-8)"


def written_out(text: str) -> str:
    """Text with each byte that was not UTF-8 (kept by Python as a lone surrogate) written out: "caf\\xe9.flac"."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def is_utf8(text: str) -> bool:
    """Whether the text holds no byte that was not UTF-8 (kept by Python as a lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
