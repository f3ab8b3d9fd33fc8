"""Errors raised by the serving engine. Each one concerns a single request unless said otherwise."""

from __future__ import annotations

from mediaindex.errors import MediaIndexError


class ServingError(MediaIndexError):
    """Base class for serving errors."""


class InvalidRequestError(ServingError):
    """The request cannot be served as given (bad prompt, bad sampling values, too large for the pool)."""


class UnknownRequestError(ServingError):
    """An operation named a request id the engine does not know."""

    def __init__(self, request_id: str) -> None:
        super().__init__(f"unknown request id {request_id!r} (never added, or already finished and collected)")
        self.request_id = request_id


class KVIntegrityError(ServingError):
    """A request's KV pages no longer match what it acquired: its cache may hold another request's data.

    The request is aborted before it can read the page again, so no token computed from a foreign page is returned.
    """

    def __init__(self, request_id: str, page: int, expected_tag: int, found_tag: int, found_page: int) -> None:
        where = f"page {page}" if found_page == page else f"page {page} (page table now points at page {found_page})"
        super().__init__(
            f"KV integrity check failed for request {request_id!r}: {where} expected tag {expected_tag}, "
            f"found tag {found_tag}; the request was aborted"
        )
        self.request_id = request_id
        self.page = page
        self.expected_tag = expected_tag
        self.found_tag = found_tag
        self.found_page = found_page
