"""A per-process model cache: each model is loaded once per process (or Ray actor)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")

_models: dict[Hashable, Any] = {}
_lock = threading.Lock()
_loading: dict[Hashable, threading.Lock] = {}  # one per key: different models load side by side


def cached(key: Hashable, load: Callable[[], T]) -> T:
    """Return the model stored under `key`, loading it with `load()` the first time. Threads asking for the
    same model wait for its one load; other models load meanwhile."""
    with _lock:
        if key in _models:
            return _models[key]
        gate = _loading.setdefault(key, threading.Lock())
    with gate:
        with _lock:
            if key in _models:
                return _models[key]
        model = load()
        with _lock:
            _models[key] = model
            _loading.pop(key, None)
        return model


def clear() -> None:
    with _lock:
        _models.clear()
