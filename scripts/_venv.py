"""Shared by the Python scripts under scripts/: run under the project's .venv from any shell.

A script started with the system ``python3`` (its shebang) re-executes itself with ``.venv/bin/python`` when
that interpreter lacks what the script imports; when there is no .venv yet, it says the command that makes
one. Nothing to activate.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"


def _in_venv() -> bool:
    # .venv/bin/python is a symlink to the base interpreter, so compare prefixes, not executables.
    return Path(sys.prefix).resolve() == (ROOT / ".venv").resolve()


def _importable(modules: tuple[str, ...]) -> bool:
    import importlib.util

    try:
        return all(importlib.util.find_spec(m) is not None for m in modules)
    except (ImportError, ValueError):
        return False


def ensure(*modules: str, extra: str = "dev") -> None:
    """Make ``modules`` importable: as is, else by re-running this script under .venv; else exit 2 with the
    command that sets .venv up from uv.lock (``./scripts/test`` installs every extra; ``extra`` names the smallest
    one, "" for the CLI alone)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    if _importable(modules):
        return
    if not _in_venv() and VENV_PYTHON.exists():
        os.execv(str(VENV_PYTHON), [str(VENV_PYTHON), *sys.argv])
    missing = ", ".join(m for m in modules if not _importable((m,)))
    where = ".venv" if VENV_PYTHON.exists() else "this Python (there is no .venv yet)"
    fix = "`./scripts/demo` (the CLI) or `./scripts/test` (every extra)" if not extra else \
        f"`./scripts/test` (every extra) or `./scripts/extra {extra}` (the {extra} extra)"
    print(f"{Path(sys.argv[0]).name}: {missing} not importable in {where}; set .venv up from uv.lock with {fix}",
          file=sys.stderr)
    sys.exit(2)
