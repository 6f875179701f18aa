"""``python -m placement.trainer.launch -- COMMAND [ARGS...]``: the image's entrypoint around any trainer.

It runs COMMAND in its own process group with ``GPUFLEET_FINISHED_FILE`` set to a fresh path, forwards
``SIGTERM`` and ``SIGINT`` to that group, and exits with the command's code, except:

* the command exits 0 after a SIGTERM and has not written ``$GPUFLEET_FINISHED_FILE``: a trainer that exits
  0 on a drain would end its Job as Succeeded (an evicted pod whose containers exit 0 is Succeeded since
  Kubernetes 1.27, and no pod failure policy sees it), so the launcher exits ``GPUFLEET_RETRY_EXIT_CODE``
  (default 75) and the gang restarts from its last checkpoint;
* the command is ended by the forwarded SIGTERM (killed by it, or exit 143), or is still running
  ``GPUFLEET_GRACE_SECONDS`` - 1 s after it (the launcher then kills the group): the retry code too.

A trainer tells a real finish by writing the file after its final step (the reference trainer does;
a shell trainer can ``touch "$GPUFLEET_FINISHED_FILE"``). Every other code passes through (a signal death
as 128 + the signal, as a shell reports it). Only the standard library: it runs in any image with Python 3.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from placement.trainer.settings import SettingsError, grace_seconds, retry_exit_code

USAGE = "usage: python -m placement.trainer.launch -- COMMAND [ARGS...]"
HELP = f"""{USAGE}

Run COMMAND (the trainer) in its own process group, forward SIGTERM and SIGINT to it, and exit with its
code; after a SIGTERM, an exit 0 without $GPUFLEET_FINISHED_FILE (the trainer's "finished" marker, a path
the launcher sets) becomes $GPUFLEET_RETRY_EXIT_CODE (default 75), so the job restarts instead of ending as
Succeeded. docs/trainer-contract.md#the-launcher"""
KILL_MARGIN_S = 1.0  # the launcher kills the group this long before the kubelet's SIGKILL would
POLL_S = 0.1


def _say(msg: str) -> None:
    print(f"launch: {msg}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
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

    notice: list[float] = []  # when SIGTERM came (monotonic)
    child: subprocess.Popen[bytes] | None = None

    def forward(signum: int, frame: Any) -> None:
        if signum == signal.SIGTERM and not notice:
            notice.append(time.monotonic())
        if child is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    workdir = Path(tempfile.mkdtemp(prefix="gpufleet-launch-"))
    marker = workdir / "finished"
    outer = os.environ.get("GPUFLEET_FINISHED_FILE", "")  # a launcher around this one
    try:
        try:
            child = subprocess.Popen(args, env={**os.environ, "GPUFLEET_FINISHED_FILE": str(marker)},
                                     start_new_session=True)
        except FileNotFoundError:
            _say(f"{args[0]}: command not found; give the trainer's command after --")
            return 127
        except PermissionError:
            _say(f"{args[0]}: not executable; give the trainer's command after --")
            return 126
        if notice:  # SIGTERM came while the command was starting
            os.killpg(child.pid, signal.SIGTERM)
        killed = False
        while True:
            try:
                rc = child.wait(timeout=POLL_S)
                break
            except subprocess.TimeoutExpired:
                if notice and not killed and grace > KILL_MARGIN_S and \
                        time.monotonic() - notice[0] >= grace - KILL_MARGIN_S:
                    _say(f"the command is still running {grace - KILL_MARGIN_S:g} s after SIGTERM: killing it")
                    os.killpg(child.pid, signal.SIGKILL)
                    killed = True
        finished = marker.exists()
        code = rc if rc >= 0 else 128 - rc
        if notice:
            if rc == 0 and not finished:
                _say(f"the command exited 0 after SIGTERM without writing $GPUFLEET_FINISHED_FILE: exit {retry} "
                     "(retry), so the job restarts from its last checkpoint instead of ending as Succeeded")
                code = retry
            elif killed or rc in (-signal.SIGTERM, 128 + signal.SIGTERM):
                _say(f"the command was ended by SIGTERM: exit {retry} (retry)")
                code = retry
        if code == 0 and finished and outer:
            Path(outer).write_text(marker.read_text(encoding="utf-8"), encoding="utf-8")
        return code
    finally:
        marker.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # the command left something else there: not ours to delete
            workdir.rmdir()


if __name__ == "__main__":
    sys.exit(main())
