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


def extra_command(extra: str) -> str:
    """The one command that adds the optional extra ``extra`` to the environment this process runs in: in a
    checkout's uv-made ``.venv`` (the README's set-up), ``scripts/extra EXTRA`` (it installs the locked versions
    with uv; the venv has no pip); in any other environment, pip on this interpreter."""
    import shlex
    from pathlib import Path

    here = Path(__file__).resolve().parents[1]  # the checkout (or site-packages) holding the package
    script = here / "scripts" / "extra"
    venv = Path(sys.prefix).resolve()
    if script.is_file() and venv == here / ".venv":
        try:
            shown = os.path.relpath(script) if Path.cwd().resolve() == here else str(script)
        except (OSError, ValueError):
            shown = str(script)
        return f"{shlex.quote(shown if shown.startswith(('/', '.')) else './' + shown)} {extra}"
    project = f"{here}[{extra}]" if (here / "pyproject.toml").is_file() else f"gpufleet[{extra}]"
    return f"{shlex.quote(sys.executable)} -m pip install {shlex.quote(project)}"


def require_extra(extra: str, modules: tuple[str, ...], what: str) -> None:
    """Stop before any work when a module of the optional extra ``extra`` cannot be imported: a one-line
    :class:`~placement.errors.UsageError` saying ``what`` needs it and the exact command that adds it
    (:func:`extra_command`). Only looks the modules up (``importlib.util.find_spec``): nothing heavy is imported."""
    import importlib.util

    from placement.errors import UsageError

    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise UsageError(f"{what} needs the '{extra}' extra ({name} is not installed); add it with: "
                             f"{extra_command(extra)}")
