"""Checkpoints through fsspec: atomic, asynchronous, the last N kept, only our own ever deleted.

Layout under the job's checkpoint home (``GPUFLEET_CHECKPOINT_DIR``: a path, ``s3://bucket/prefix`` through
s3fs, ``gs://bucket/prefix`` through gcsfs; anything else fsspec knows)::

    <home>/step-0000000120/.gpufleet-claim   written first: this directory is ours (writer, job, files)
    <home>/step-0000000120/state.npz         the data (NumPy arrays; ``state.pt`` for the PyTorch backend)
    <home>/step-0000000120/manifest.json     written last: step, sizes and SHA-256 of every data file, and
                                             the training state (RNG, data order, loss) as JSON
    <home>/gpufleet-finished.json            written after the final step

**Atomic**: a checkpoint exists once its manifest does, and the manifest is written after every data file
(on a local or mounted filesystem under a temporary name, then renamed; an object store's PUT is atomic). A
torn checkpoint (a SIGKILL mid-write: manifest missing, or a data file whose size or SHA-256 differs from the
manifest) is never loaded; loading falls back to the next older complete one.

**Asynchronous**: :meth:`Checkpointer.save_async` hands a snapshot (arrays the training loop will not mutate)
to a background thread and returns; at most one write is in flight (a second save waits for the first).

**Retention**: after each write the newest ``keep`` complete checkpoints stay; older ones are deleted only
when they carry our claim and manifest (``writer`` :data:`WRITER`, the same ``job``), file by file (the files
the manifest lists, then the manifest, then the claim; a foreign file in the directory stays, and so does the
directory then). A torn checkpoint of ours older than the newest complete one is deleted the same way.

**Cache** (``GPUFLEET_CHECKPOINT_CACHE_DIR``): a fast local or mounted filesystem (node-local NVMe, FSx for
Lustre, Managed Lustre, Filestore) is written first, with the same layout and atomicity, and then synced to the
home by the same background thread (data files, then the home's manifest). Resuming takes the newest complete
checkpoint of either.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

SCHEMA = "gpufleet.checkpoint/v1"
WRITER = "gpufleet.reference-trainer"
MANIFEST = "manifest.json"
CLAIM = ".gpufleet-claim"
FINISHED = "gpufleet-finished.json"
STEP_DIR = re.compile(r"^step-(\d{10})$")
CHUNK = 8 << 20  # bytes per read/write when copying and hashing

FileWriter = Callable[[IO[bytes]], None]


@dataclass(frozen=True)
class Snapshot:
    """One checkpoint to write: ``files`` name -> a function writing its bytes to a binary file object
    (called on the writer thread, so it must only read state the training loop no longer mutates), and
    ``state``, JSON-able training state stored in the manifest (RNG, data position, loss)."""

    step: int
    files: Mapping[str, FileWriter]
    state: Mapping[str, Any]
    kind: str = "interval"  # interval | emergency | final: what the printed line says


@dataclass(frozen=True)
class Written:
    """A checkpoint made durable: where, its bytes and the seconds from the write's start to its manifest."""

    step: int
    uri: str
    bytes: int
    seconds: float
    kind: str


@dataclass(frozen=True)
class Loaded:
    """A complete checkpoint read back: the training state and every data file's bytes (verified)."""

    step: int
    uri: str
    state: Mapping[str, Any]
    files: Mapping[str, bytes]


class _Counting:
    """A write-only file wrapper that hashes and counts what passes through (tell() for zipfile)."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.sha.update(view)
        self.raw.write(view)
        self.size += len(view)
        return len(view)

    def tell(self) -> int:
        return self.size

    def read(self, *_: Any) -> bytes:  # numpy.savez takes a file object by its having read()
        raise OSError("write-only")

    def seek(self, *_: Any) -> int:
        raise OSError("not seekable")

    def seekable(self) -> bool:
        return False

    def flush(self) -> None:
        self.raw.flush()


class Store:
    """One checkpoint location (a home or a cache) reached through fsspec."""

    def __init__(self, uri: str, job: str) -> None:
        from fsspec.core import url_to_fs

        self.uri = uri.rstrip("/")
        self.job = job
        self.fs, root = url_to_fs(self.uri)
        self.root = root.rstrip("/")
        self._manifests: dict[int, dict[str, Any]] = {}  # ours, complete: read once (they never change)
        self.local = "file" in (self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,))

    def _path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def url(self, *parts: str) -> str:
        return "/".join([self.uri, *parts])

    # ---- writing
    def _put(self, path: str, data: bytes) -> None:
        """Write ``data`` at ``path`` atomically: an object store's PUT is; a filesystem renames a temp file."""
        if not self.local:
            with self.fs.open(path, "wb") as f:
                f.write(data)
            return
        tmp = f"{path}.tmp"  # one writer per store at a time; a crash leaves it for _delete
        with self.fs.open(tmp, "wb") as f:
            f.write(data)
            _sync(f)
        self.fs.mv(tmp, path)

    def _marker(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "writer": WRITER, "job": self.job}

    def write(self, snap: Snapshot) -> int:
        """Write ``snap`` under ``step-NNNNNNNNNN/``: claim, data files, manifest last. Returns data bytes."""
        name = step_name(snap.step)
        if self.local:
            self.fs.makedirs(self._path(name), exist_ok=True)
        self._put(self._path(name, CLAIM), json.dumps({**self._marker(), "files": sorted(snap.files)}).encode())
        files: dict[str, dict[str, Any]] = {}
        for fname, writer in snap.files.items():
            with self.fs.open(self._path(name, fname), "wb") as raw:
                out = _Counting(raw)
                writer(out)  # type: ignore[arg-type]
                if self.local:
                    _sync(raw)  # on disk before the manifest that vouches for it
            files[fname] = {"bytes": out.size, "sha256": out.sha.hexdigest()}
        self._write_manifest(name, snap.step, files, snap.state)
        return sum(f["bytes"] for f in files.values())

    def _write_manifest(self, name: str, step: int, files: Mapping[str, Any], state: Mapping[str, Any]) -> None:
        manifest = {**self._marker(), "step": step, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "files": dict(files), "state": dict(state)}
        self._manifests.pop(step, None)  # rewritten: read it back from the store next time
        self._put(self._path(name, MANIFEST), json.dumps(manifest, sort_keys=True).encode())

    def copy_to(self, other: Store, manifest: Mapping[str, Any]) -> None:
        """Copy a complete checkpoint of this store to ``other`` (claim, data files, manifest last)."""
        name = step_name(int(manifest["step"]))
        if other.local:
            other.fs.makedirs(other._path(name), exist_ok=True)
        other._put(other._path(name, CLAIM), json.dumps({**other._marker(),
                                                          "files": sorted(manifest["files"])}).encode())
        for fname in manifest["files"]:
            with self.fs.open(self._path(name, fname), "rb") as src, other.fs.open(other._path(name, fname),
                                                                                   "wb") as dst:
                while chunk := src.read(CHUNK):
                    dst.write(chunk)
        other._write_manifest(name, int(manifest["step"]), manifest["files"], manifest["state"])

    # ---- reading
    def _read_json(self, path: str) -> Any:
        try:
            with self.fs.open(path, "rb") as f:
                return json.loads(f.read())
        except (FileNotFoundError, ValueError, UnicodeDecodeError):
            return None

    def _ours(self, doc: Any) -> bool:
        return isinstance(doc, dict) and doc.get("writer") == WRITER and doc.get("job") == self.job \
            and doc.get("schema") == SCHEMA

    def steps(self) -> list[int]:
        """Steps of the ``step-NNNNNNNNNN`` directories here (complete or not, ours or not), ascending."""
        try:
            self.fs.invalidate_cache()  # s3fs/gcsfs cache listings; another writer may have been here
            names = self.fs.ls(self.root, detail=False)
        except FileNotFoundError:
            return []
        found = []
        for n in names:
            m = STEP_DIR.match(str(n).rstrip("/").rsplit("/", 1)[-1])
            if m:
                found.append(int(m.group(1)))
        return sorted(set(found))

    def manifest(self, step: int, cached: bool = True) -> dict[str, Any] | None:
        """The manifest of ``step`` when it is ours and well-formed; None for a torn or foreign checkpoint.
        ``cached``: one read before (by retention, on the writer thread) may answer."""
        if cached and step in self._manifests:
            return self._manifests[step]
        doc = self._read_json(self._path(step_name(step), MANIFEST))
        if not self._ours(doc) or doc.get("step") != step or not isinstance(doc.get("files"), dict) \
                or not isinstance(doc.get("state"), dict):
            return None
        self._manifests[step] = dict(doc)
        return self._manifests[step]

    def complete(self, cached: bool = True) -> list[dict[str, Any]]:
        """Our complete checkpoints' manifests, newest first (files not yet hashed: :meth:`load` does)."""
        out = []
        for step in reversed(self.steps()):
            m = self.manifest(step, cached)
            if m is not None:
                out.append(m)
        return out

    def load(self, manifest: Mapping[str, Any]) -> Loaded | None:
        """Read and verify the data files of ``manifest``; None (and a line on stderr) if one differs."""
        name = step_name(int(manifest["step"]))
        files: dict[str, bytes] = {}
        for fname, want in manifest["files"].items():
            try:
                with self.fs.open(self._path(name, fname), "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                data = None
            if data is None or len(data) != want.get("bytes") or hashlib.sha256(data).hexdigest() != want.get(
                    "sha256"):
                print(f"trainer: skipping torn checkpoint {self.url(name)}: {fname} does not match its manifest",
                      file=sys.stderr)
                return None
            files[fname] = data
        return Loaded(step=int(manifest["step"]), uri=self.url(name), state=manifest["state"], files=files)

    # ---- retention
    def _delete(self, step: int, files: list[str]) -> None:
        """Delete our files of ``step``: the manifest first (so a half-deleted checkpoint is torn, never
        loaded), then ``files``, then the claim; the directory only when nothing else is left in it."""
        name = step_name(step)
        self._manifests.pop(step, None)
        for fname in [MANIFEST, f"{MANIFEST}.tmp", *files, CLAIM, f"{CLAIM}.tmp"]:
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm_file(self._path(name, fname))
        if self.local:
            # A file we did not write still there stays, and so does the directory then.
            with contextlib.suppress(OSError):
                self.fs.rmdir(self._path(name))

    def prune(self, keep: int) -> list[int]:
        """Delete our complete checkpoints beyond the newest ``keep``, and our torn ones older than the
        newest complete one. Returns the steps deleted."""
        complete = self.complete()
        deleted = []
        for m in complete[keep:]:
            self._delete(int(m["step"]), sorted(m["files"]))
            deleted.append(int(m["step"]))
        if complete:
            newest = int(complete[0]["step"])
            done = {int(m["step"]) for m in complete}
            for step in self.steps():
                if step >= newest or step in done:
                    continue
                claim = self._read_json(self._path(step_name(step), CLAIM))
                if self._ours(claim) and isinstance(claim.get("files"), list):
                    self._delete(step, [str(f) for f in claim["files"]])
                    deleted.append(step)
        return sorted(deleted)

    # ---- finished marker
    def write_finished(self, step: int, loss: float) -> None:
        """Record the final step in the home; a failure is a line on stderr (the checkpoint is durable)."""
        try:
            self._put(self._path(FINISHED), json.dumps({**self._marker(), "step": step, "loss": loss}).encode())
        except Exception as exc:  # noqa: BLE001 - any client's error
            print(f"trainer: could not write {self.url(FINISHED)}: {type(exc).__name__}: {exc}", file=sys.stderr)

    def finished(self) -> dict[str, Any] | None:
        doc = self._read_json(self._path(FINISHED))
        return dict(doc) if self._ours(doc) else None


def _sync(f: Any) -> None:
    """Flush a local file to its disk (a mounted file system's client sends it to the server on close)."""
    f.flush()
    with contextlib.suppress(AttributeError, OSError, ValueError):
        os.fsync(f.fileno())


def step_name(step: int) -> str:
    return f"step-{step:010d}"


@dataclass
class Checkpointer:
    """Writes snapshots to the home (through the cache, when one is set), one at a time in the background.

    ``on_written`` is called on the writer thread after each checkpoint is durable in the home (it prints
    the checkpoint's line and updates the metrics); ``on_error`` with a one-line message when a write fails
    (training goes on: the previous complete checkpoint still stands).
    """

    home: Store
    cache: Store | None = None
    keep: int = 3
    on_written: Callable[[Written], None] = lambda w: None
    on_error: Callable[[str], None] = lambda msg: None
    _thread: threading.Thread | None = field(default=None, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    failures: int = field(default=0, init=False)
    last: Written | None = field(default=None, init=False)
    durable_step: int = field(default=-1, init=False)  # the newest step known complete in the home

    def _write(self, snap: Snapshot) -> None:
        start = time.monotonic()
        try:
            first = self.cache or self.home
            nbytes = first.write(snap)
            if self.cache is not None:
                manifest = self.cache.manifest(snap.step)
                if manifest is None:
                    raise OSError(f"the cache's manifest of step {snap.step} cannot be read back")
                self.cache.copy_to(self.home, manifest)
            written = Written(step=snap.step, uri=self.home.url(step_name(snap.step)), bytes=nbytes,
                              seconds=time.monotonic() - start, kind=snap.kind)
            for store in (self.cache, self.home):
                if store is not None:
                    store.prune(self.keep)
        except Exception as exc:  # noqa: BLE001 - any failure of the store: report it, keep training
            with self._lock:
                self.failures += 1
            self.on_error(f"checkpoint of step {snap.step} to {self.home.uri} failed: {type(exc).__name__}: {exc}")
            return
        with self._lock:
            self.last = written
            self.durable_step = max(self.durable_step, snap.step)
        self.on_written(written)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the write in flight; False when it is still running after ``timeout`` seconds."""
        t = self._thread
        if t is None:
            return True
        t.join(timeout)
        if t.is_alive():
            return False
        self._thread = None
        return True

    @property
    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def save_async(self, snap: Snapshot) -> None:
        """Start writing ``snap`` in the background (after the write in flight, if any, has finished)."""
        self.wait()
        # A daemon thread: a process that must exit (the grace period is over) is not held by a slow store.
        self._thread = threading.Thread(target=self._write, args=(snap,), name=f"checkpoint-{snap.step}",
                                        daemon=True)
        self._thread.start()

    def save(self, snap: Snapshot, timeout: float | None = None) -> bool:
        """Write ``snap`` and wait for it, at most ``timeout`` seconds: True when it is durable in time."""
        self.save_async(snap)
        return self.wait(timeout) and self.durable_step == snap.step

    def latest(self) -> Loaded | None:
        """The newest complete checkpoint of the cache or the home (the cache's on a tie), verified; torn
        ones are skipped with a line on stderr. Raises :class:`StoreUnreachable` when a store cannot be read
        (s3fs and gcsfs raise their clients' own errors, not only OSError)."""
        candidates: list[tuple[int, int, Store, dict[str, Any]]] = []
        try:
            for rank, store in enumerate((self.cache, self.home)):
                if store is None:
                    continue
                candidates += [(int(m["step"]), -rank, store, m) for m in store.complete(cached=False)]
            for _, _, store, manifest in sorted(candidates, key=lambda c: (c[0], c[1]), reverse=True):
                loaded = store.load(manifest)
                if loaded is not None:
                    if store is self.home:
                        self.durable_step = loaded.step
                    return loaded
        except Exception as exc:  # noqa: BLE001 - any client's error: the store cannot be read now
            raise StoreUnreachable(f"{type(exc).__name__}: {exc}") from exc
        return None


class StoreUnreachable(OSError):
    """A checkpoint store could not be read (the message names the client's error)."""
