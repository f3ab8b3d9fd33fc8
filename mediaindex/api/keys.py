"""API keys, kept as SHA-256 hashes in SQLite: the secret itself is shown once, at creation.

A key is `mik_<id>_<secret>`; the id finds the row, the secret (32 random bytes) is compared by
hash in constant time. High-entropy random secrets need no slow password hash.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

_SCHEMA = """
CREATE TABLE IF NOT EXISTS api_keys (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    hash TEXT NOT NULL,
    created REAL NOT NULL,
    revoked REAL
);
"""
PREFIX = "mik"


@dataclass(frozen=True)
class ApiKey:
    id: str
    name: str
    created: float
    revoked: float | None


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class KeyStore:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), timeout=30, check_same_thread=False)
        self._db.row_factory = sqlite3.Row
        self._db.executescript(_SCHEMA)

    def create(self, name: str) -> tuple[ApiKey, str]:
        """A new key; returns its record and the full key string (never stored)."""
        name = name.strip()
        if not name:
            raise ValueError("a key needs a name")
        key_id, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
        now = time.time()
        with self._lock, self._db:
            self._db.execute("INSERT INTO api_keys VALUES (?,?,?,?,NULL)", (key_id, name, _hash(secret), now))
        return ApiKey(key_id, name, now, None), f"{PREFIX}_{key_id}_{secret}"

    def revoke(self, key_id: str) -> bool:
        with self._lock, self._db:
            cur = self._db.execute("UPDATE api_keys SET revoked = ? WHERE id = ? AND revoked IS NULL",
                                   (time.time(), key_id))
        return cur.rowcount > 0

    def list(self) -> list[ApiKey]:
        with self._lock:
            rows = self._db.execute("SELECT id, name, created, revoked FROM api_keys ORDER BY created").fetchall()
        return [ApiKey(r["id"], r["name"], r["created"], r["revoked"]) for r in rows]

    def any_configured(self) -> bool:
        """Keys stay required once any was created, even if all are revoked (revoking never opens the API)."""
        with self._lock:
            return self._db.execute("SELECT 1 FROM api_keys LIMIT 1").fetchone() is not None

    def verify(self, presented: str) -> ApiKey | None:
        parts = presented.strip().split("_", 2)
        if len(parts) != 3 or parts[0] != PREFIX:
            return None
        with self._lock:
            row = self._db.execute("SELECT * FROM api_keys WHERE id = ?", (parts[1],)).fetchone()
        if row is None or row["revoked"] is not None:
            return None
        if not hmac.compare_digest(row["hash"], _hash(parts[2])):
            return None
        return ApiKey(row["id"], row["name"], row["created"], row["revoked"])

    def close(self) -> None:
        self._db.close()


def keys_db_path(settings) -> Path:  # settings: mediaindex.config.Settings
    return Path(settings.api.keys_db).expanduser().resolve() if settings.api.keys_db else \
        settings.index_dir / "api_keys.db"
