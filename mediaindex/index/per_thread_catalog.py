"""Thread-safe reading of the catalog from request and job threads.

The catalog's SQLite connection belongs to the thread that opened it, while a server's requests and
jobs run on other threads: each thread gets its own `Catalog` on the same file (SQLite keeps them
consistent).
"""

from __future__ import annotations

import threading
from pathlib import Path

from mediaindex.index.catalog import Catalog


class PerThreadCatalog:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()
        self._catalog()  # opened once here, so a catalog that cannot be opened fails the index's opening

    def _catalog(self) -> Catalog:
        catalog = getattr(self._local, "catalog", None)
        if catalog is None:
            catalog = self._local.catalog = Catalog(self.path)
        return catalog

    def __getattr__(self, name: str):
        return getattr(self._catalog(), name)

    def close(self) -> None:
        catalog = getattr(self._local, "catalog", None)
        if catalog is not None:
            catalog.close()
            self._local.catalog = None
