"""On-disk cache of live answers: one small JSON file per call, written atomically.

Location: ``$GPUFLEET_CACHE_DIR`` if set, else ``platformdirs.user_cache_dir("gpufleet")``; files live
under ``live-v1/`` in it. Each entry records when it was fetched (epoch seconds) and its data; the
reader decides freshness with the TTL of the data's kind (seconds, below).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Seconds each kind of data stays fresh. Quota and usage move when anyone in the account launches
# an instance; spot prices and placement scores move within the hour; offerings and list prices rarely.
TTL_S: dict[str, float] = {
    "quotas": 5 * 60,
    "reservations": 5 * 60,
    "usage": 5 * 60,
    "spot-prices": 15 * 60,
    "scores": 15 * 60,
    "offerings": 60 * 60,
    "prices": 60 * 60,
}
LAYOUT = "live-v1"


def cache_root(override: str | None = None) -> Path:
    """The cache directory (not created here)."""
    if override:
        return Path(override)
    env = os.environ.get("GPUFLEET_CACHE_DIR")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("gpufleet"))


@dataclass(frozen=True)
class Entry:
    """One cached answer: ``data`` fetched at ``fetched_at`` (epoch seconds)."""

    data: Any
    fetched_at: float

    def age_s(self, now: float | None = None) -> float:
        return max((time.time() if now is None else now) - self.fetched_at, 0.0)


class DiskCache:
    """Key -> :class:`Entry`. Keys are arbitrary strings; file names are their SHA-256."""

    def __init__(self, root: Path) -> None:
        self.dir = root / LAYOUT

    def _path(self, key: str) -> Path:
        return self.dir / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".json")

    def get(self, key: str) -> Entry | None:
        """The entry for ``key`` whatever its age, or None (absent, unreadable or for another key)."""
        try:
            with open(self._path(key), encoding="utf-8") as fh:
                doc = json.load(fh)
        except (OSError, ValueError):
            return None
        if not isinstance(doc, dict) or doc.get("key") != key or "data" not in doc:
            return None
        try:
            return Entry(data=doc["data"], fetched_at=float(doc["fetched_at"]))
        except (KeyError, TypeError, ValueError):
            return None

    def put(self, key: str, data: Any, fetched_at: float | None = None) -> None:
        """Write atomically (temp file in the same directory + ``os.replace``); failures are ignored."""
        doc = {"key": key, "fetched_at": time.time() if fetched_at is None else fetched_at, "data": data}
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=".tmp-", suffix=".json")
        except OSError:
            return  # a read-only or full cache dir must not break a plan
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(doc, fh, separators=(",", ":"))
            os.replace(tmp, self._path(key))
        except (OSError, TypeError, ValueError):
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def fresh(entry: Entry | None, kind: str, now: float | None = None) -> bool:
    return entry is not None and entry.age_s(now) <= TTL_S[kind]
