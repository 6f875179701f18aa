"""Checkpoints through fsspec: atomic, asynchronous, the last N good ones kept, only our own ever deleted.

Layout under the job's checkpoint home (``GPUFLEET_CHECKPOINT_DIR``: a path, ``s3://bucket/prefix`` through
s3fs, ``gs://bucket/prefix`` through gcsfs; anything else fsspec knows)::

    <home>/gpufleet-home.json                the job this home belongs to (written at the first start)
    <home>/step-0000000120/.gpufleet-claim   written first: this directory is ours (writer, job, files)
    <home>/step-0000000120/state.npys        the data (NumPy arrays; ``state.pt`` for the PyTorch backend)
    <home>/step-0000000120/manifest.json     written last: step, sizes and SHA-256 of every data file, and
                                             the training state (RNG, data order, loss, seed) as JSON
    <home>/gpufleet-finished.json            written after the final step
    <home>/gpufleet-progress.json            after each durable checkpoint: its step and the steps per hour
                                             (placement.model.contract.progress_doc; issue 35)

**One home, one job**: at start the writer claims the home (:meth:`Store.claim`); a home that holds another
job's owner file or checkpoints is refused, naming that job, before anything is written.

**Atomic**: a checkpoint exists once its manifest does, and the manifest is written after every data file
(on a local or mounted filesystem each file under a fresh temporary name, then renamed: a link someone left at
a name is replaced, never written through; an object store's PUT is atomic). A torn checkpoint (a SIGKILL
mid-write: manifest missing; a data file whose size or SHA-256 differs from the manifest; a malformed manifest)
is never loaded; loading falls back to the next older complete one. A data file is read only once its size is
the manifest's, and never past it.

**Asynchronous**: :meth:`Checkpointer.save_async` hands a snapshot (arrays the training loop will not mutate)
to a background thread and returns; at most one write is in flight (a second save waits for the first).

**Retention**: after each write the newest ``keep`` checkpoints whose data matches their manifests stay (one
this process wrote or loaded is known good; an older one is hashed once); a checkpoint that fails that check
never counts. Older ones are deleted only when they carry our claim and manifest (``writer`` :data:`WRITER`,
the same ``job``), file by file (the manifest, the files it lists, the claim; plain file names only). Locally
only regular files directly in a real step directory of the home are deleted: a step directory that is a link
(an archived checkpoint linked into the home) keeps its files and is not counted; a foreign file in the
directory stays, and so does the directory then. A torn checkpoint of ours older than the newest kept one is
deleted the same way.

**Cache** (``GPUFLEET_CHECKPOINT_CACHE_DIR``): a fast local or mounted filesystem (node-local NVMe, FSx for
Lustre, Managed Lustre, Filestore) is written first, with the same layout and atomicity, and then synced to the
home by the same background thread (data files, checked as they are copied, then the home's manifest).
Resuming takes the newest complete checkpoint of either.

Why one module: the layout above is one protocol (claim, data, manifest; retention that deletes only its own) that
:class:`Store` and :class:`Checkpointer` implement together: a split would part the writer from the rules it keeps.
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
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

from placement.errors import shown
from placement.files import safe

SCHEMA = "gpufleet.checkpoint/v1"
WRITER = "gpufleet.reference-trainer"
MANIFEST = "manifest.json"
CLAIM = ".gpufleet-claim"
FINISHED = "gpufleet-finished.json"
HOME_OWNER = "gpufleet-home.json"  # the job this home belongs to (one home, one job)
STEP_DIR = re.compile(r"^step-(\d{10})$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
CHUNK = 8 << 20  # bytes per read/write when copying and hashing
MAX_JSON_BYTES = 64 << 20  # a manifest, claim or marker: kilobytes (the training state as JSON); never more

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

    def read(self, *_: Any) -> bytes:  # some writers (numpy.savez) tell a file object by its read()
        raise OSError("write-only")

    def seek(self, *_: Any) -> int:
        raise OSError("not seekable")

    def seekable(self) -> bool:
        return False

    def flush(self) -> None:
        self.raw.flush()


class _Torn(OSError):
    """A data file whose size is not its manifest's (nothing of it read)."""


class HomeError(Exception):
    """The checkpoint home cannot be used (a file where a directory belongs, another job's home): ``str()`` is
    the one-line reason; the trainer exits 2."""


class Store:
    """One checkpoint location (a home or a cache) reached through fsspec; a local one through
    :mod:`placement.files.safe` (bounded regular-file reads, atomic writes that never follow a link, deletes of
    our own regular files in real step directories of this home only)."""

    def __init__(self, uri: str, job: str) -> None:
        from fsspec.core import url_to_fs

        from placement.trainer.federation import storage_options

        self.uri = uri.rstrip("/")
        self.job = job
        # A home in the other cloud: the credentials submit rendered for it (placement.trainer.federation).
        self.fs, root = url_to_fs(self.uri, **storage_options(self.uri))
        self.root = root.rstrip("/") or "/"
        self._manifests: dict[int, dict[str, Any]] = {}  # ours, well-formed: read once (they never change)
        self._verified: set[int] = set()  # steps whose data this process wrote, or read back and found intact
        self._bad: set[int] = set()  # steps whose data did not match their manifest
        self._said: set[int] = set()  # steps whose malformed manifest was reported
        self.local = "file" in (self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,))

    def _path(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *parts])

    def url(self, *parts: str) -> str:
        return "/".join([self.uri, *parts])

    # ---- the home itself: checked and claimed at start
    def prepare(self, create: bool) -> None:
        """Check that the location can hold checkpoints (``create``: make a local directory when missing).
        Raises :class:`HomeError` when a file stands where the directory belongs; a store that cannot be
        reached raises its client's error."""
        if self.local:
            if os.path.lexists(self.root) and not os.path.isdir(self.root):
                raise HomeError("is a file, not a directory; give a directory (it is made when missing)")
            if create:
                try:
                    os.makedirs(self.root, exist_ok=True)
                except OSError as exc:
                    raise HomeError(f"cannot be made ({exc.strerror or exc}); give a directory this process "
                                    "can write") from None
        elif self.fs.isfile(self.root):
            raise HomeError("names an object, not a prefix; give a prefix (s3://bucket/prefix)")

    def conflict(self) -> str | None:
        """Why another job owns this home (naming it), or None when it is free or this job's: the owner file
        :data:`HOME_OWNER` when there is one, else the checkpoints and finished marker found in it."""
        exists, doc = self._read_doc(self._path(HOME_OWNER))
        if exists:
            if isinstance(doc, dict) and doc.get("writer") == WRITER and doc.get("schema") == SCHEMA:
                other = doc.get("job")
                return None if other == self.job else f"belongs to job {shown(other, 80)} ({self.url(HOME_OWNER)})"
            return f"holds {self.url(HOME_OWNER)}, which is not this trainer's"
        for path in [self._path(FINISHED)] + [self._path(step_name(s), f) for s in self.steps()
                                               for f in (MANIFEST, CLAIM)]:
            _, doc = self._read_doc(path)
            if isinstance(doc, dict) and doc.get("writer") == WRITER and doc.get("job") != self.job:
                return f"holds checkpoints of job {shown(doc.get('job'), 80)} ({self.uri})"
        return None

    def claim(self) -> None:
        """Make this home this job's (the writer, at start): raises :class:`HomeError` naming the other job
        when it is another's; else records :data:`HOME_OWNER` (created only when absent) and reads it back."""
        why = self.conflict()
        if why is None:
            data = json.dumps({**self._marker(), "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
            if self.local:
                safe.create_exclusive(self._path(HOME_OWNER), data.encode())
            elif not self.fs.exists(self._path(HOME_OWNER)):
                self._put(self.root, HOME_OWNER, data.encode())
            why = self.conflict()  # another job may have claimed it at the same moment
        if why is not None:
            raise HomeError(f"{why}; give job {self.job} its own checkpoint home (placement submit sets "
                            f"<checkpoints>/{self.job})")

    # ---- writing
    def _dir(self, name: str, create: bool = True) -> str:
        """The step directory ``name`` to write into: local, a real directory directly in this home (made
        when missing; a link to one elsewhere raises OSError); an object store's prefix as it is."""
        if not self.local:
            return self._path(name)
        if create:
            os.makedirs(self.root, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                os.mkdir(os.path.join(self.root, name))
        folder = safe.real_dir_in(self.root, name)
        if folder is None:
            raise OSError(f"{self.url(name)} is not a directory of this home (a link to one elsewhere?); "
                          "not written into")
        return folder

    def _put(self, folder: str, fname: str, data: bytes) -> None:
        """Write ``data`` as ``folder/fname`` atomically: an object store's PUT is; a local file is written
        under a temporary name and renamed (never through a link someone left at the name)."""
        if self.local:
            safe.write_atomic(os.path.join(folder, fname), data)
            return
        with self.fs.open(f"{folder}/{fname}", "wb") as f:
            f.write(data)

    @contextlib.contextmanager
    def _open_new(self, folder: str, fname: str) -> Iterator[IO[bytes]]:
        if self.local:
            with safe.new_file(os.path.join(folder, fname)) as f:
                yield f
            return
        with self.fs.open(f"{folder}/{fname}", "wb") as f:
            yield f

    def write_progress(self, step: int, steps_per_hour: float | None) -> None:
        """``gpufleet-progress.json`` in the home: its newest durable ``step`` and the measured ``steps_per_hour``
        (None: not measured yet), the fields and text of the ``gpufleet.io/last-durable-step`` and
        ``gpufleet.io/steps-per-hour`` annotations the dispatcher prices a restart with (issue 35)."""
        from placement.model import contract

        doc = {**contract.progress_doc(contract.Progress(step, steps_per_hour), self.job), "writer": WRITER}
        self._put(self.root, contract.PROGRESS_FILE, json.dumps(doc, sort_keys=True).encode())

    def _marker(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "writer": WRITER, "job": self.job}

    def write(self, snap: Snapshot) -> int:
        """Write ``snap`` under ``step-NNNNNNNNNN/``: claim, data files, manifest last. Returns data bytes."""
        name = step_name(snap.step)
        for fname in snap.files:
            if not _own_name(fname):
                raise ValueError(f"checkpoint file name {shown(fname, 80)} is not a plain file name")
        folder = self._dir(name)
        self._verified.discard(snap.step)
        self._put(folder, CLAIM, json.dumps({**self._marker(), "files": sorted(snap.files)}).encode())
        files: dict[str, dict[str, Any]] = {}
        for fname, writer in snap.files.items():
            with self._open_new(folder, fname) as raw:
                out = _Counting(raw)
                writer(out)  # type: ignore[arg-type]
            files[fname] = {"bytes": out.size, "sha256": out.sha.hexdigest()}
        self._write_manifest(folder, snap.step, files, snap.state)
        return sum(f["bytes"] for f in files.values())

    def _write_manifest(self, folder: str, step: int, files: Mapping[str, Any], state: Mapping[str, Any]) -> None:
        manifest = {**self._marker(), "step": step, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "files": dict(files), "state": dict(state)}
        self._manifests.pop(step, None)  # rewritten: read it back from the store next time
        self._put(folder, MANIFEST, json.dumps(manifest, sort_keys=True).encode())
        self._verified.add(step)  # what this process wrote is what the manifest vouches for
        self._bad.discard(step)

    def copy_to(self, other: Store, manifest: Mapping[str, Any]) -> None:
        """Copy a complete checkpoint of this store to ``other`` (claim, data files, manifest last), checking
        each file against the manifest as it is read (at most its stated bytes)."""
        step = int(manifest["step"])
        name = step_name(step)
        folder = other._dir(name)
        other._verified.discard(step)
        other._put(folder, CLAIM, json.dumps({**other._marker(), "files": sorted(manifest["files"])}).encode())
        for fname, want in manifest["files"].items():
            with self._open_data(name, fname, int(want["bytes"])) as src, other._open_new(folder, fname) as dst:
                sha, left = hashlib.sha256(), int(want["bytes"])
                while left:
                    chunk = src.read(min(CHUNK, left))
                    if not chunk:
                        raise OSError(f"{self.url(name, fname)} ended early")
                    sha.update(chunk)
                    dst.write(chunk)
                    left -= len(chunk)
                if sha.hexdigest() != want["sha256"]:
                    raise OSError(f"{self.url(name, fname)} does not match its manifest")
        other._write_manifest(folder, step, manifest["files"], manifest["state"])

    # ---- reading
    def _read_doc(self, path: str) -> tuple[bool, Any]:
        """(whether something is at ``path``, its JSON or None when it is not JSON, not a regular file, or over
        :data:`MAX_JSON_BYTES`). An object store's error other than a missing key propagates."""
        try:
            if self.local:
                data = safe.read_bytes(path, MAX_JSON_BYTES)
            else:
                with self.fs.open(path, "rb") as f:
                    data = f.read(MAX_JSON_BYTES + 1)
                if len(data) > MAX_JSON_BYTES:
                    return True, None
        except FileNotFoundError:
            return False, None
        except (safe.UnsafeFile, IsADirectoryError, NotADirectoryError):
            return True, None
        except OSError:
            if self.local:
                return True, None
            raise
        try:
            return True, json.loads(data)
        except (ValueError, RecursionError):
            return True, None

    def _read_json(self, path: str) -> Any:
        return self._read_doc(path)[1]

    def _ours(self, doc: Any) -> bool:
        return isinstance(doc, dict) and doc.get("writer") == WRITER and doc.get("job") == self.job \
            and doc.get("schema") == SCHEMA

    def steps(self) -> list[int]:
        """Steps of the ``step-NNNNNNNNNN`` directories here (complete or not, ours or not), ascending."""
        try:
            self.fs.invalidate_cache()  # s3fs/gcsfs cache listings; another writer may have been here
            names = self.fs.ls(self.root, detail=False)
        except (FileNotFoundError, NotADirectoryError):
            return []
        found = []
        for n in names:
            m = STEP_DIR.match(str(n).rstrip("/").rsplit("/", 1)[-1])
            if m:
                found.append(int(m.group(1)))
        return sorted(set(found))

    def manifest(self, step: int, cached: bool = True) -> dict[str, Any] | None:
        """The manifest of ``step`` when it is ours and well-formed; None for a torn, malformed or foreign
        checkpoint. ``cached``: one read before (by retention, on the writer thread) may answer."""
        if cached and step in self._manifests:
            return self._manifests[step]
        doc = self._read_json(self._path(step_name(step), MANIFEST))
        if not self._ours(doc):
            return None
        problem = _manifest_problem(doc, step)
        if problem:
            if step not in self._said:
                self._said.add(step)
                print(f"trainer: skipping malformed checkpoint {self.url(step_name(step))}: {problem}",
                      file=sys.stderr)
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

    @contextlib.contextmanager
    def _open_data(self, name: str, fname: str, size: int) -> Iterator[IO[bytes]]:
        """A data file opened for reading once its size is ``size`` (a regular file, locally); OSError when it
        is not (nothing of it read)."""
        path = self._path(name, fname)
        if self.local:
            f, actual = safe.open_regular(path)
            with f:
                if actual != size:
                    raise _Torn(f"{self.url(name, fname)} is {actual} bytes, not the manifest's {size}")
                yield f
            return
        actual = self.fs.size(path)
        if actual != size:
            raise _Torn(f"{self.url(name, fname)} is {actual} bytes, not the manifest's {size}")
        with self.fs.open(path, "rb") as f:
            yield f

    def _check(self, manifest: Mapping[str, Any], keep: bool) -> dict[str, bytes] | None:
        """Read the data files of ``manifest`` (each at most its stated bytes) and check their sizes and SHA-256;
        their bytes (``keep``), or None (and a line on stderr) when one differs, is missing or is not a regular
        file. An object store's error other than a missing key propagates."""
        step = int(manifest["step"])
        name = step_name(step)
        files: dict[str, bytes] = {}
        for fname, want in manifest["files"].items():
            size = int(want["bytes"])
            try:
                with self._open_data(name, fname, size) as f:
                    sha, parts, left = hashlib.sha256(), [], size
                    while left:
                        chunk = f.read(min(CHUNK, left))
                        if not chunk:
                            break
                        sha.update(chunk)
                        left -= len(chunk)
                        if keep:
                            parts.append(chunk)
            except OSError as exc:
                if not self.local and not isinstance(exc, (FileNotFoundError, safe.UnsafeFile, _Torn)):
                    raise  # the store cannot be read now: not a torn checkpoint
                ok = False
            else:
                ok = left == 0 and sha.hexdigest() == want["sha256"]
            if not ok:
                self._bad.add(step)
                print(f"trainer: skipping torn checkpoint {self.url(name)}: {fname} does not match its manifest",
                      file=sys.stderr)
                return None
            if keep:
                files[fname] = b"".join(parts)
        self._verified.add(step)
        self._bad.discard(step)
        return files

    def verify(self, manifest: Mapping[str, Any]) -> bool:
        """Whether the data of ``manifest`` matches it: known when this process wrote or read it, else read
        once (hashed in chunks, never held)."""
        step = int(manifest["step"])
        if step in self._verified:
            return True
        if step in self._bad:
            return False
        return self._check(manifest, keep=False) is not None

    def load(self, manifest: Mapping[str, Any]) -> Loaded | None:
        """Read and verify the data files of ``manifest``; None (and a line on stderr) if one differs."""
        files = self._check(manifest, keep=True)
        if files is None:
            return None
        name = step_name(int(manifest["step"]))
        return Loaded(step=int(manifest["step"]), uri=self.url(name), state=manifest["state"], files=files)

    # ---- retention
    def _delete(self, step: int, files: list[str]) -> None:
        """Delete our files of ``step``: the manifest first (so a half-deleted checkpoint is torn, never
        loaded), then ``files``, then the claim; the directory only when nothing else is left in it. Locally
        only regular files directly in a real step directory of this home (never through a link, never
        outside: the names are plain file names); the directory only when empty."""
        name = step_name(step)
        self._manifests.pop(step, None)
        self._verified.discard(step)
        names = [MANIFEST, *[f for f in files if _own_name(f)], CLAIM]
        if not self.local:
            for fname in names:
                with contextlib.suppress(FileNotFoundError):
                    self.fs.rm_file(self._path(name, fname))
            return
        folder = safe.real_dir_in(self.root, name)
        if folder is None:
            return
        with contextlib.suppress(OSError):  # our own temporary files left by a crash mid-write
            names += [n for n in os.listdir(folder) if n.startswith(safe.TEMP_PREFIX)]
        for fname in [*names, f"{MANIFEST}.tmp", f"{CLAIM}.tmp"]:  # .tmp: an earlier version's temporary names
            safe.unlink_regular(folder, fname)
        with contextlib.suppress(OSError):  # a file we did not write still there stays, and so does the directory
            os.rmdir(folder)

    def _deletable(self, step: int) -> bool:
        """Locally, a step directory that is a link (an archived checkpoint linked into the home) is neither
        counted nor deleted; in an object store every step is."""
        return not self.local or safe.real_dir_in(self.root, step_name(step)) is not None

    def prune(self, keep: int) -> list[int]:
        """Keep our newest ``keep`` checkpoints whose data matches their manifests; delete our older ones (and
        those whose data does not match), and our torn ones older than the newest kept. A checkpoint that fails
        verification never counts toward ``keep``. Returns the steps deleted."""
        kept, newest, deleted = 0, None, []
        complete = self.complete()
        for m in complete:
            step = int(m["step"])
            if not self._deletable(step):
                continue
            if kept < keep:
                if self.verify(m):
                    kept += 1
                    newest = step if newest is None else newest
                    continue
                if newest is None:  # nothing newer is good: leave it (it is never loaded)
                    continue
            self._delete(step, sorted(m["files"]))
            deleted.append(step)
        if newest is not None:
            done = {int(m["step"]) for m in complete}
            for step in self.steps():
                if step >= newest or step in done or not self._deletable(step):
                    continue
                claim = self._read_json(self._path(step_name(step), CLAIM))
                if self._ours(claim) and isinstance(claim.get("files"), list):
                    self._delete(step, [f for f in claim["files"] if isinstance(f, str)])
                    deleted.append(step)
        return sorted(deleted)

    # ---- finished marker
    def write_finished(self, step: int, loss: float) -> None:
        """Record the final step in the home; a failure is a line on stderr (the checkpoint is durable)."""
        try:
            self._put(self.root, FINISHED, json.dumps({**self._marker(), "step": step, "loss": loss}).encode())
        except Exception as exc:  # noqa: BLE001 - any client's error
            print(f"trainer: could not write {self.url(FINISHED)}: {type(exc).__name__}: {exc}", file=sys.stderr)

    def finished(self) -> dict[str, Any] | None:
        doc = self._read_json(self._path(FINISHED))
        return dict(doc) if self._ours(doc) else None


def _own_name(name: object) -> bool:
    """A data file name a checkpoint may list: a plain file name, not one of the layout's own files."""
    return safe.is_plain_name(name) and name not in (MANIFEST, CLAIM, FINISHED, HOME_OWNER) \
        and not str(name).startswith(safe.TEMP_PREFIX)


def _manifest_problem(doc: Mapping[str, Any], step: int) -> str:
    """What is wrong with our manifest ``doc`` of ``step`` ("" when nothing): a field of the wrong type or out
    of range, a file name that is not a plain name."""
    got = doc.get("step")
    if isinstance(got, bool) or not isinstance(got, int) or got != step:
        return f"step is {shown(got, 40)}, not {step}"
    files, state = doc.get("files"), doc.get("state")
    if not isinstance(files, dict):
        return "files is not a mapping"
    if not isinstance(state, dict):
        return "state is not a mapping"
    loss = state.get("loss")
    if isinstance(loss, bool) or not isinstance(loss, (int, float)):
        return f"state.loss is {shown(loss, 40)}, not a number"
    for fname, want in files.items():
        if not _own_name(fname):
            return f"files: {shown(fname, 60)} is not a plain file name"
        if not isinstance(want, dict):
            return f"files.{fname} is not a mapping"
        size, sha = want.get("bytes"), want.get("sha256")
        if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size < 1 << 50:
            return f"files.{fname}.bytes is {shown(size, 40)}, not a size"
        if not isinstance(sha, str) or not SHA256.match(sha):
            return f"files.{fname}.sha256 is {shown(sha, 40)}, not a SHA-256"
    return ""


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
    # Training steps per wall hour as the loop measured them when it took the snapshot (None: not yet).
    steps_per_hour: float | None = field(default=None, init=False)

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
        try:  # the job's progress beside it, for pricing a move that cannot resume: best effort
            self.home.write_progress(self.durable_step, self.steps_per_hour)
        except Exception as exc:  # noqa: BLE001 - any client's error: the checkpoint itself stands
            print(f"trainer: could not write the progress of step {snap.step} to {self.home.uri}: "
                  f"{type(exc).__name__}", file=sys.stderr)
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
