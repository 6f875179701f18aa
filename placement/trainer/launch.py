"""``python -m placement.trainer.launch -- COMMAND [ARGS...]``: the image's entrypoint around any trainer, one
process or ``torchrun`` with many.

It is the container's PID 1, so its exit code is what Kubernetes judges (the pod failure policy: the retry code
restarts the gang, any other non-zero code fails the job). ``torchrun`` cannot say which: it exits 1 when it
gets ``SIGTERM`` and when any worker fails. So the launcher runs COMMAND in its own process group with

* ``GPUFLEET_OUTCOME_DIR``: a fresh folder where every process of the gang on this node records its outcome
  (:mod:`placement.trainer.outcome`: ``running`` when it starts, then ``finished``, ``retry`` or ``failed``);
* ``GPUFLEET_FINISHED_FILE``: a path a one-process trainer writes after its final step (the simpler contract);
* ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT`` (unless set): how long ``torchrun`` waits for its workers after passing
  on a ``SIGTERM`` before it kills them, the grace period less the launcher's margin;

forwards the first ``SIGTERM`` and ``SIGINT`` to the group (a second one changes nothing), and exits with
:func:`placement.trainer.outcome.decide`'s code: 0 for a real finish (every process finished), the retry code
after a ``SIGTERM`` or when a process lost a peer or died without a word (``kill -9``, the OOM killer), a
failed process's own code (a bug fails the job), else the command's code (a signal death as 128 + the signal).

Deadlines: after ``SIGTERM``, or once a process has ended with ``retry`` or ``failed`` while others still run
(a stopped peer holds the gang), the command and every process still running get until the grace period less
1 s (half the grace period when that is shorter); then the launcher kills them (``SIGKILL``), so the pod ends
before the kubelet's own ``SIGKILL``. Only the standard library: it runs in any image with Python 3.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from placement.errors import shown
from placement.files import safe
from placement.trainer import outcome
from placement.trainer.settings import SettingsError, grace_seconds, retry_exit_code

USAGE = "usage: python -m placement.trainer.launch -- COMMAND [ARGS...]"
HELP = f"""{USAGE}

Run COMMAND (the trainer, or torchrun and its workers) in its own process group, forward the first SIGTERM
and SIGINT to it, and exit with the code Kubernetes should judge: 0 only when every process finished,
$GPUFLEET_RETRY_EXIT_CODE (default 75) after a SIGTERM or when a process lost a peer or was killed, a
failed process's own code otherwise. Processes record their outcome in $GPUFLEET_OUTCOME_DIR; a one-process
trainer may instead write $GPUFLEET_FINISHED_FILE after its final step. docs/trainer-contract.md#the-launcher"""
KILL_MARGIN_S = 1.0  # the launcher kills the group this long before the kubelet's SIGKILL would
POLL_S = 0.1
MARKER_POLL_S = 0.5  # how often the outcome markers are read while the command runs
_METRICS_DIR = re.compile(r"^metrics-\d+-\d+$")
_METRICS_FILE = re.compile(r"^[a-z_]+_\d+\.db$")  # prometheus-client's multiprocess files


def _say(msg: str) -> None:
    print(f"launch: {msg}", file=sys.stderr, flush=True)


def kill_after(grace: float) -> float:
    """Seconds from the notice to the launcher's SIGKILL: the grace period less :data:`KILL_MARGIN_S`, but at
    least half of it (a grace period of 1 s or less still ends a command that ignores SIGTERM)."""
    return max(grace - KILL_MARGIN_S, grace / 2)


def _signal(pid: int, sig: int, group: bool) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if group:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)


def _signal_workers(folder: str, sig: int) -> list[outcome.Outcome]:
    """Send ``sig`` to every process whose marker says ``running`` and that still runs (the very process: pid
    and start time), to its process group when it leads one (torchrun starts each worker in its own session).
    Returns those processes."""
    live = [o for o in outcome.read(folder) if o.state == "running" and o.alive()]
    for o in live:
        try:
            group = os.getpgid(o.pid) == o.pid
        except OSError:
            continue
        _signal(o.pid, sig, group)
    return live


def _cleanup(workdir: Path) -> None:
    """Remove what the launcher's protocol put in its own folder (the markers, the finished file, the
    processes' metrics files), then the folder when empty; anything else stays, and with it the folder."""
    names = [n for n in _listdir(workdir) if outcome.MARKER.match(n) or n == "finished"]
    for name in names:
        safe.unlink_regular(str(workdir), name)
    for sub in (n for n in _listdir(workdir) if _METRICS_DIR.match(n)):
        folder = safe.real_dir_in(workdir, sub)
        if folder is None:
            continue
        for name in (n for n in _listdir(Path(folder)) if _METRICS_FILE.match(n)):
            safe.unlink_regular(folder, name)
        with contextlib.suppress(OSError):
            os.rmdir(folder)
    with contextlib.suppress(OSError):
        workdir.rmdir()


def _reap() -> None:
    """Collect the exit status of children that are gone (as the container's PID 1 the launcher inherits
    torchrun's workers when torchrun dies first); only after the command itself has been waited for."""
    with contextlib.suppress(ChildProcessError, OSError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


def _listdir(folder: Path) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def main(argv: Sequence[str] | None = None) -> int:
    notice: list[float] = []  # when the first SIGTERM/SIGINT came (monotonic)
    child: subprocess.Popen[bytes] | None = None
    pending: list[int] = []  # a signal that came before the command started

    def forward(signum: int, frame: Any) -> None:
        if notice:  # idempotent: the first one is passed on, a second changes nothing
            return
        notice.append(time.monotonic())
        if child is not None:
            _signal(child.pid, signum, group=True)
        else:
            pending.append(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("-h", "--help"):
        print(HELP)
        return 0
    if args and args[0] == "--":
        args = args[1:]
    if not args:
        _say(f"no command given; {USAGE}")
        return 2
    try:
        retry = retry_exit_code(os.environ)
        grace = grace_seconds(os.environ)
    except SettingsError as exc:
        _say(str(exc))
        return 2
    outer = os.environ.get("GPUFLEET_FINISHED_FILE", "").strip()  # a launcher around this one
    if outer and not os.path.isdir(os.path.dirname(outer) or "."):
        _say(f"GPUFLEET_FINISHED_FILE={shown(outer, 80)}: its folder does not exist; give a path in an existing "
             "folder, or unset it")
        return 2
    try:
        workdir = Path(tempfile.mkdtemp(prefix="gpufleet-launch-"))
    except OSError as exc:
        _say(f"cannot make its marker folder in {shown(tempfile.gettempdir(), 80)} ({exc.strerror or exc}); set "
             "TMPDIR to a writable folder")
        return 2
    marker = workdir / "finished"
    limit = kill_after(grace)
    env = {**os.environ, "GPUFLEET_FINISHED_FILE": str(marker), outcome.ENV: str(workdir)}
    env.setdefault("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", str(max(int(limit), 1)))
    try:
        try:
            child = subprocess.Popen(args, env=env, start_new_session=True)
        except FileNotFoundError:
            _say(f"{shown(args[0], 80)}: command not found; give the trainer's command after --")
            return 127
        except OSError as exc:  # not executable, exec format error, ...
            why = exc.strerror or errno.errorcode.get(exc.errno or 0, str(exc))
            _say(f"{shown(args[0], 80)}: cannot run it ({why}); give the trainer's command after --")
            return 126
        if pending:  # a signal came while the command was starting
            _signal(child.pid, pending[0], group=True)
        killed, ended_at, next_read = False, None, 0.0
        while True:
            try:
                rc = child.wait(timeout=POLL_S)
                break
            except subprocess.TimeoutExpired:
                now = time.monotonic()
                if not notice and ended_at is None and now >= next_read:
                    next_read = now + MARKER_POLL_S
                    if any(o.state in ("retry", "failed") for o in outcome.read(str(workdir))):
                        ended_at = now  # a process ended for the gang: the others must follow within the bound
                start = notice[0] if notice else ended_at
                if start is not None and not killed and now - start >= limit:
                    what = "SIGTERM" if notice else "a process of the gang ended"
                    _say(f"the command is still running {limit:g} s after {what}: killing it")
                    _signal(child.pid, signal.SIGKILL, group=True)
                    _signal_workers(str(workdir), signal.SIGKILL)
                    killed = True
        # The command is gone; a worker it left behind (torchrun killed, or dead) gets the same bound.
        start = notice[0] if notice else ended_at if ended_at is not None else time.monotonic()
        if _signal_workers(str(workdir), 0 if killed else signal.SIGTERM):
            while time.monotonic() - start < limit and \
                    any(o.alive() for o in outcome.read(str(workdir)) if o.state == "running"):
                time.sleep(POLL_S)
                _reap()
            _signal_workers(str(workdir), signal.SIGKILL)
        _reap()
        code = rc if rc >= 0 else 128 - rc
        decision = outcome.decide(code, bool(notice), outcome.read(str(workdir)), marker.exists(), retry)
        if decision.why:
            _say(decision.why)
        if decision.code == 0 and outer:
            try:
                safe.write_atomic(outer, b"finished\n")
            except OSError as exc:
                _say(f"cannot write GPUFLEET_FINISHED_FILE={shown(outer, 80)} ({exc.strerror or exc})")
        return decision.code
    finally:
        _cleanup(workdir)


if __name__ == "__main__":
    sys.exit(main())
