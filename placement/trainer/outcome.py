"""Each process's outcome, for the launcher: ``$GPUFLEET_OUTCOME_DIR/rank-<RANK>.json``.

``torchrun`` exits 1 whenever a worker fails or it gets ``SIGTERM`` itself, so its code cannot tell a drain or a
lost peer (restart the gang) from a bug (fail the job). The launcher (:mod:`placement.trainer.launch`) sets
``GPUFLEET_OUTCOME_DIR`` to a fresh folder; every process of the gang on the node writes its marker there when it
starts and again just before it exits:

.. code-block:: json

    {"schema": "gpufleet.outcome/v1", "rank": 1, "local_rank": 1, "local_world": 2, "pid": 4242,
     "start": 123456, "state": "running"}
    {"schema": "gpufleet.outcome/v1", ..., "state": "retry", "code": 75, "why": "lost a peer at step 40"}

``state`` is ``running``, ``finished`` (exit 0 after the final step: the final checkpoint is durable), ``retry``
(the retry exit code: SIGTERM, a lost peer, an unreachable store) or ``failed`` (any other code: a bug, bad
input). ``start`` is the process's start time (``/proc/<pid>/stat``, clock ticks since boot; null elsewhere):
with the pid it names the process, so the launcher signals a worker only while it is that very process. A
marker still ``running`` after its process is gone means the process died without a word (``kill -9``, the
OOM killer, NCCL's watchdog): a lost peer. :func:`decide` turns the markers and the command's code into the
launcher's exit code. Written atomically, read bounded (:mod:`placement.files.safe`); standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from placement.files import safe

SCHEMA = "gpufleet.outcome/v1"
ENV = "GPUFLEET_OUTCOME_DIR"
STATES = ("running", "finished", "retry", "failed")
MAX_BYTES = 16 << 10
MARKER = re.compile(r"^(rank|pid)-\d{1,9}\.json$")


def process_start(pid: int, running: bool = False) -> int | None:
    """The start time of process ``pid`` (clock ticks since boot, ``/proc/<pid>/stat`` field 22); None when
    there is no such process or no ``/proc`` (``running``: also when it has exited and is a zombie, waiting to
    be reaped by its parent, the launcher when it is the container's PID 1)."""
    try:
        fields = safe.read_bytes(f"/proc/{int(pid)}/stat", 4096).rsplit(b")", 1)[1].split()
        if running and fields[0] in (b"Z", b"X"):
            return None
        return int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


@dataclass(frozen=True)
class Outcome:
    """One process's marker."""

    rank: int | None
    local_rank: int | None
    local_world: int | None
    pid: int
    start: int | None
    state: str
    code: int | None = None
    why: str = ""

    def alive(self) -> bool:
        """Whether the process that wrote this marker still runs (the same pid and start time)."""
        return self.start is not None and process_start(self.pid, running=True) == self.start

    @property
    def who(self) -> str:
        return f"rank {self.rank}" if self.rank is not None else f"pid {self.pid}"


class Recorder:
    """Writes this process's marker in ``folder`` (nothing when ``folder`` is empty). A marker that cannot
    be written is one line on stderr, once; it never stops training."""

    def __init__(self, folder: str, rank: int | None = None, local_rank: int | None = None,
                 local_world: int | None = None) -> None:
        self.folder = folder
        self.rank, self.local_rank, self.local_world = rank, local_rank, local_world
        self.pid = os.getpid()
        self.start = process_start(self.pid)
        self._warned = False

    @property
    def path(self) -> str:
        name = f"rank-{self.rank}.json" if self.rank is not None else f"pid-{self.pid}.json"
        return os.path.join(self.folder, name)

    def write(self, state: str, code: int | None = None, why: str = "") -> None:
        if not self.folder:
            return
        doc = {"schema": SCHEMA, "rank": self.rank, "local_rank": self.local_rank, "local_world": self.local_world,
               "pid": self.pid, "start": self.start, "state": state}
        if code is not None:
            doc.update(code=code, why=why[:300])
        try:
            safe.write_atomic(self.path, json.dumps(doc).encode())
        except OSError as exc:
            if not self._warned:
                self._warned = True
                print(f"trainer: cannot write its outcome marker in {ENV}={self.folder} ({exc.strerror or exc}); "
                      "the launcher will judge this process by its exit code", file=sys.stderr, flush=True)

    def ended(self, code: int, retry_code: int, why: str = "") -> None:
        state = "finished" if code == 0 else "retry" if code == retry_code else "failed"
        self.write(state, code, why)


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 62 else None


def read(folder: str) -> list[Outcome]:
    """The well-formed markers in ``folder`` (a file that is not one is ignored), by rank."""
    found: list[Outcome] = []
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    for name in names:
        if not MARKER.match(name):
            continue
        with contextlib.suppress(OSError, ValueError):
            doc = json.loads(safe.read_bytes(os.path.join(folder, name), MAX_BYTES))
            if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or doc.get("state") not in STATES:
                continue
            pid = _int_or_none(doc.get("pid"))
            if pid is None:
                continue
            why = doc.get("why")
            found.append(Outcome(rank=_int_or_none(doc.get("rank")), local_rank=_int_or_none(doc.get("local_rank")),
                                 local_world=_int_or_none(doc.get("local_world")), pid=pid,
                                 start=_int_or_none(doc.get("start")), state=str(doc["state"]),
                                 code=_int_or_none(doc.get("code")), why=why[:300] if isinstance(why, str) else ""))
    return found


@dataclass(frozen=True)
class Decision:
    code: int
    why: str  # "" when the command's own code passes through unremarked


def decide(rc: int, sigterm: bool, outcomes: Sequence[Outcome], finished_file: bool, retry: int) -> Decision:
    """The launcher's exit code from the command's code ``rc`` (a signal death as 128 + the signal), whether the
    launcher got ``SIGTERM``, the processes' markers and whether the legacy ``$GPUFLEET_FINISHED_FILE`` was
    written (docs/trainer-contract.md#the-launcher):

    1. every process of the node finished (a marker each, all ``finished``): 0, a real finish, whatever
       ``torchrun`` says (it exits 1 when ``SIGTERM`` came after its workers had finished);
    2. after ``SIGTERM``: the retry code (but 0 for a command without markers that exits 0 and wrote the
       finished file);
    3. a process ``failed``: its code (a bug or bad input fails the job; never 0 or the retry code);
    4. a process said ``retry``, or died without a word (still ``running`` and the command failed): the retry
       code;
    5. otherwise the command's own code (a trainer without markers: the retry code passes as itself)."""
    expected = max((o.local_world or 1 for o in outcomes), default=0)
    ended = [o for o in outcomes if o.state != "running"]
    if outcomes and len(outcomes) >= expected and all(o.state == "finished" for o in outcomes):
        return Decision(0, "" if rc == 0 else f"every process finished (the command exited {rc}): exit 0")
    if sigterm:
        if not outcomes and rc == 0 and finished_file:
            return Decision(0, "")
        if not outcomes and rc == 0:
            return Decision(retry, f"the command exited 0 after SIGTERM without writing $GPUFLEET_FINISHED_FILE: "
                                   f"exit {retry} (retry), so the job restarts from its last checkpoint instead of "
                                   "ending as Succeeded")
        return Decision(retry, f"SIGTERM: exit {retry} (retry), the command exited {rc}")
    failed = [o for o in ended if o.state == "failed" and o.code not in (0, retry)]
    if failed:
        first = failed[0]
        code = first.code if first.code is not None else (rc if rc not in (0, retry) else 1)
        return Decision(code, f"{first.who} failed with exit {first.code}"
                              f"{': ' + first.why if first.why else ''}: exit {code}")
    # Still "running" after the command ended: the process died without a word. With rc 0 (torchrun saw every
    # worker exit 0) it only skipped its last marker.
    lost = [o for o in outcomes if o.state == "running"] if rc != 0 else []
    retried = [o for o in ended if o.state == "retry" or (o.state == "failed" and o.code == retry)]
    if retried or lost:
        parts = [f"{o.who}: {o.why or 'exit ' + str(o.code)}" for o in retried[:3]]
        parts += [f"{o.who} ended without a word (killed)" for o in lost[:3]]
        return Decision(retry, f"{'; '.join(parts)}: exit {retry} (retry)")
    return Decision(rc, "")
