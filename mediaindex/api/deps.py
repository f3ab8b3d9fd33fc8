"""Request dependencies: the app's state, API-key checks and per-key rate limits."""

from __future__ import annotations

from typing import Annotated

from fastapi import Request, Security
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from mediaindex.api.errors import ApiError
from mediaindex.api.state import ApiState

KEY_COOKIE = "mediaindex_key"  # lets <video> and <img> requests of the web page carry the key
_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="An API key from `mediaindex keys create`")
_bearer = HTTPBearer(auto_error=False, description="The same API key as a bearer token")


def get_state(request: Request) -> ApiState:
    return request.app.state.api


def known_query(request: Request) -> None:
    """Refuses a query parameter the endpoint does not read: passed over, a misspelt filter (`from=30` for
    `from_seconds=30`) would answer as if there were none, as the JSON bodies' unknown keys are refused. (The
    routes that serve files and pictures take what links and players add.)"""
    route = request.scope.get("route")
    if not isinstance(route, APIRoute):
        return
    known = _query_names(route.dependant)  # a walk over a few parameters: not worth a cache
    unknown = sorted(set(request.query_params) - known)
    if unknown:
        reads = f"reads {', '.join(sorted(known))}" if known else "takes none"
        raise ApiError(422, f"unknown query parameter{'s' if len(unknown) > 1 else ''} "
                            f"{', '.join(repr(u) for u in unknown)}: {request.url.path} {reads}")


def _query_names(dependant: Dependant) -> set[str]:
    """The query parameters an endpoint reads, its dependencies' included."""
    names = {p.alias for p in dependant.query_params}
    for inner in dependant.dependencies:
        names |= _query_names(inner)
    return names


def authorize(
    request: Request,
    header_key: Annotated[str | None, Security(_header)] = None,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)] = None,
) -> str:
    """Check the key (when keys are configured) and take a token from its rate-limit bucket."""
    state = get_state(request)
    presented = header_key or (bearer.credentials if bearer else None) or request.cookies.get(KEY_COOKIE)
    address = f"addr:{request.client.host if request.client else 'unknown'}"
    if state.keys_required():
        key = state.keys.verify(presented) if presented else None
        if key is None:
            # A failed attempt costs the client's address a token: guessing keys is rate limited too.
            _take(state, address)
            message = ("the API key is not valid (unknown, malformed or revoked)" if presented else
                       "an API key is required: send it as 'Authorization: Bearer KEY' or 'X-API-Key: KEY'")
            raise ApiError(401, message, headers={"WWW-Authenticate": "Bearer"})
        identity = f"key:{key.id}"
    else:
        identity = address
    _take(state, identity)
    return identity


def _take(state: ApiState, identity: str) -> None:
    wait = state.limiter.take(identity)
    if wait > 0:
        raise ApiError(429, f"rate limit exceeded ({state.settings.api.rate_limit_per_minute} requests per minute); "
                            f"retry in {wait:.1f} s", headers={"Retry-After": state.limiter.retry_after(wait)})
