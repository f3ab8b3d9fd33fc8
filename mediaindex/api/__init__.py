"""The HTTP API (FastAPI) and the web page it serves."""

from mediaindex.api.app import create_app

__all__ = ["create_app"]
