"""Errors raised by the serving engine. Each one concerns a single request unless said otherwise."""

from __future__ import annotations

from mediaindex.errors import MediaIndexError


class ServingError(MediaIndexError):
    """Base class for serving errors."""


class InvalidRequestError(ServingError):
    """The request cannot be served as given (bad prompt, bad sampling values, too large for the pool)."""


class UnsupportedModelError(ServingError):
    """The engine cannot serve this model exactly (an attention feature it does not implement); refused at load."""


class UnknownRequestError(ServingError):
    """An operation named a request id the engine does not know."""

    def __init__(self, request_id: str) -> None:
        super().__init__(f"unknown request id {request_id!r} (never added, or already finished and collected)")
        self.request_id = request_id

    def __reduce__(self) -> tuple[type, tuple[str]]:
        return (type(self), (self.request_id,))


class KVIntegrityError(ServingError):
    """A request's KV pages no longer match what it acquired: its cache may hold another request's data.

    The request is aborted before it can read the page again, so no token computed from a foreign page is returned.
    """

    def __init__(self, request_id: str, page: int, expected_tag: int, found_tag: int, found_page: int) -> None:
        if page < 0:  # the page table changed length behind the allocator's back
            what = f"its page table has {found_tag} entries where {expected_tag} pages were acquired"
        else:
            where = f"page {page}" if found_page == page else f"page {page} (the page table now points at {found_page})"
            what = f"{where} expected tag {expected_tag}, found tag {found_tag}"
        super().__init__(f"KV integrity check failed for request {request_id!r}: {what}; the request was aborted")
        self.request_id = request_id
        self.page = page
        self.expected_tag = expected_tag
        self.found_tag = found_tag
        self.found_page = found_page

    def __reduce__(self) -> tuple[type, tuple[str, int, int, int, int]]:
        # Outputs carrying this error cross process boundaries (Ray); rebuild it from its own arguments.
        return (type(self), (self.request_id, self.page, self.expected_tag, self.found_tag, self.found_page))


class KVHandoffError(ServingError):
    """A KV handoff from a prefill worker cannot be used (it failed its checksum, or it was made for another model
    or KV layout). Only that request is refused; the decode worker goes on with the others."""

    def __init__(self, request_id: str, reason: str) -> None:
        super().__init__(f"KV handoff for request {request_id!r} refused: {reason}")
        self.request_id = request_id
        self.reason = reason

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        # Outputs carrying this error cross process boundaries (Ray); rebuild it from its own arguments.
        return (type(self), (self.request_id, self.reason))
