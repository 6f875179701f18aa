"""The reclaim notice: ``SIGTERM`` (and ``SIGINT``) recorded from the process's first moments, once.

``python -m placement.trainer`` installs the handler before it imports anything else (NumPy, PyTorch and the
corpus take a second or more to load; a ``SIGTERM`` then would kill the process with the signal, exit -15, which
the pod failure policy judges a bug). The handler only records the time of the first signal and counts the
others, so a second ``SIGTERM`` 50 ms after the first (a launcher forwarding it and the kubelet sending it again)
changes nothing: the trainer still finishes its step, saves and exits with the retry code. Standard library
only.
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Any


class Notice:
    """The first ``SIGTERM``/``SIGINT`` (monotonic seconds) and how many came."""

    def __init__(self) -> None:
        self.first: float | None = None
        self.count = 0

    def __call__(self, signum: int, frame: Any) -> None:
        self.count += 1
        if self.first is None:
            self.first = time.monotonic()

    def __bool__(self) -> bool:
        return self.first is not None


NOTICE = Notice()


def install(notice: Notice = NOTICE) -> Notice:
    """Handle ``SIGTERM`` and ``SIGINT`` with ``notice`` (default :data:`NOTICE`, the process's own; idempotent:
    a notice already recorded stays). Only the main thread can install handlers; from another thread this
    returns ``notice`` without installing it."""
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            if signal.getsignal(sig) is not notice:
                signal.signal(sig, notice)
    return notice
