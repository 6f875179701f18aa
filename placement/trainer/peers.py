"""Lost-peer detection for the NumPy backend: heartbeats in the checkpoint home.

PyTorch notices a lost peer itself (a collective or the rendezvous store raises ``torch.distributed``'s
``DistError``), and the trainer turns that into the retry exit code. The NumPy backend has no collectives, so
in a gang (more than one process: ``NNODES`` > 1, or ``torchrun``'s ``WORLD_SIZE``) each process runs a
:class:`Heartbeat` thread that, every ``timeout / 4`` seconds, writes ``<home>/_peers/rank-<RANK>.json`` (its
global rank; a counter, its step, and its state: ``running``, ``stopped`` or ``finished``) and reads the
others'. Locally, through :mod:`placement.files.safe`: a FIFO or a link left in ``_peers/`` is neither waited
on nor written through (a peer whose file cannot be read sends no heartbeat). A peer is lost when its file has
not changed for ``GPUFLEET_PEER_TIMEOUT_SECONDS`` (default 60) of this rank's own clock (no clock is compared
across nodes, and a gang that restarts together overwrites the old files within the timeout), or when it says
``stopped`` (it got SIGTERM). The trainer then exits with ``GPUFLEET_RETRY_EXIT_CODE``, and the gang restarts.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from typing import Any

from placement.files import safe

PEER_DIR = "_peers"
MAX_BYTES = 64 << 10


class Heartbeat:
    """Write this rank's heartbeat and watch the others' (see the module docstring)."""

    def __init__(self, home_uri: str, rank: int, world: int, timeout_s: float) -> None:
        from fsspec.core import url_to_fs

        from placement.trainer.federation import storage_options

        self.fs, root = url_to_fs(home_uri.rstrip("/") + "/" + PEER_DIR, **storage_options(home_uri))
        self.root = root.rstrip("/")
        protocol = self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,)
        self.local = "file" in protocol
        self.rank, self.world, self.timeout_s = rank, world, timeout_s
        self.step = 0
        self.state = "running"
        self.lost: str | None = None  # why a peer is lost; read by the training loop
        self._beats = 0
        self._seen: dict[int, tuple[Any, float]] = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peer-heartbeat", daemon=True)

    def _path(self, rank: int) -> str:
        return f"{self.root}/rank-{rank}.json"

    def start(self) -> Heartbeat:
        now = time.monotonic()
        self._seen = {r: (self._read(r), now) for r in range(self.world) if r != self.rank}
        if self.local:
            os.makedirs(self.root, exist_ok=True)
        else:
            self.fs.makedirs(self.root, exist_ok=True)
        self.beat()
        self._thread.start()
        return self

    def beat(self) -> None:
        self._beats += 1
        data = json.dumps({"rank": self.rank, "beat": self._beats, "step": self.step, "state": self.state}).encode()
        if self.local:
            safe.write_atomic(self._path(self.rank), data)
            return
        with self.fs.open(self._path(self.rank), "wb") as f:
            f.write(data)

    def _read(self, rank: int) -> Any:
        try:
            if self.local:
                data = safe.read_bytes(self._path(rank), MAX_BYTES)
            else:
                with self.fs.open(self._path(rank), "rb") as f:
                    data = f.read(MAX_BYTES + 1)
            return json.loads(data) if len(data) <= MAX_BYTES else None
        except (FileNotFoundError, safe.UnsafeFile, IsADirectoryError, ValueError, RecursionError):
            return None

    def check(self) -> str | None:
        """Read every peer's heartbeat once; the reason a peer is lost, or None."""
        now = time.monotonic()
        self.fs.invalidate_cache()
        for rank, (old, since) in self._seen.items():
            doc = self._read(rank)
            if doc != old:
                self._seen[rank] = (doc, now)
                since = now
            if isinstance(doc, dict) and doc.get("state") == "stopped" and doc != old:
                return f"peer rank {rank} stopped (it got SIGTERM)"
            if now - since > self.timeout_s:
                return f"peer rank {rank} sent no heartbeat for {self.timeout_s:g} s"
        return None

    def _run(self) -> None:
        period = max(self.timeout_s / 4, 0.05)
        while not self._done.wait(period):
            try:
                self.beat()
                reason = self.check()
            except Exception as exc:  # noqa: BLE001 - the store is unreachable (any client's error): no news
                reason = None
                if self.lost is None and time.monotonic() - min(s for _, s in self._seen.values()) > self.timeout_s:
                    reason = f"the peers' heartbeats cannot be read: {exc}"
            if reason and self.lost is None:
                self.lost = reason

    def stop(self, state: str) -> None:
        """Say why this rank ends (``stopped`` on SIGTERM, ``finished``) and stop the thread."""
        self._done.set()
        self.state = state
        with contextlib.suppress(Exception):
            self.beat()
