"""A per-process model cache: each model is loaded once per process (or Ray actor)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")

_models: dict[Hashable, Any] = {}
_lock = threading.Lock()


def cached(key: Hashable, load: Callable[[], T]) -> T:
    """Return the model stored under `key`, loading it with `load()` the first time."""
    with _lock:
        if key not in _models:
            _models[key] = load()
        return _models[key]


def clear() -> None:
    with _lock:
        _models.clear()
