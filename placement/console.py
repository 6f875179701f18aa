"""What every command shares with its terminal and process: exit codes, the width text output is fitted to,
and when the cyclic garbage collector may run.

Imported by ``placement.commands.main`` and by the commands it dispatches to (``submit``, ``dispatch``, ``refresh``), so
none of them imports the CLI module. Standard library only: ``placement --help`` loads it.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from collections.abc import Iterator
from typing import Any

EXIT_OK = 0  # placed, written, printed
EXIT_NOTHING_FEASIBLE = 1  # nothing feasible, no cluster answered, a cluster refused: the input was fine
EXIT_FAILED = EXIT_NOTHING_FEASIBLE
EXIT_BAD_INPUT = 2  # a bad flag or file: one line on stderr naming the field and the fix


def output_width(stream: Any = None) -> int | None:
    """Columns to fit text output in: ``COLUMNS`` when set, else the terminal's width; no limit when ``stream``
    (default stdout) is not a terminal (a pipe or a file gets whole lines, for grep)."""
    import shutil

    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if (stream or sys.stdout).isatty():
        return shutil.get_terminal_size().columns
    return None


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """No cyclic garbage collection inside: for a one-shot command, and while a catalog's offers are built.

    Reading a 50,000-offer catalog creates some 100,000 objects that live to the end of the command and hold
    no reference cycles; every collection the allocations trigger walks them again (with the plan after it,
    a third of the run: ``scripts/bench_placement.py --only command``). Reference counting still frees
    everything without a cycle; the collector runs again on leaving (nested uses leave it off)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
