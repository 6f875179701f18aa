"""Reading the user's files: text of a bounded size, and YAML documents through :mod:`placement.model.text`.

Only the standard library is imported at module level so ``placement --help`` stays fast.
"""

from __future__ import annotations

from typing import Any

from placement.errors import UsageError, shown
from placement.model.text import MAX_CSV_BYTES, MAX_YAML_BYTES, parse_yaml


def read_text(path: str, what: str, limit: int = MAX_CSV_BYTES) -> str:
    """The text of the user's file ``path`` (flag ``what``); any OSError, a non-UTF-8 file or one larger than
    ``limit`` bytes is a :class:`~placement.errors.UsageError` naming the flag."""
    import os

    try:
        with open(path, encoding="utf-8") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > limit:
                raise UsageError(f"{what}: {shown(path)} is {size / 2**20:.0f} MiB; at most {limit // 2**20} MiB")
            text = fh.read(limit + 1)  # a pipe or device reports no size
    except FileNotFoundError:
        raise UsageError(f"{what}: file {shown(path)} not found") from None
    except UnicodeDecodeError:
        raise UsageError(f"{what}: {shown(path)} is not UTF-8 text") from None
    except (OSError, ValueError) as exc:  # EISDIR, ENOTDIR, ENAMETOOLONG, EACCES, ELOOP, embedded NUL ...
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc.__class__.__name__
        raise UsageError(f"{what}: cannot read {shown(path)} ({reason})") from None
    if len(text) > limit:
        raise UsageError(f"{what}: {shown(path)} is larger than {limit // 2**20} MiB")
    return text


def load_yaml(path: str, what: str) -> Any:
    """One user YAML (or JSON) file: job, batch, quota, reservation, stack-output and fleet files.

    Read with :func:`parse_yaml` after a size check (at most :data:`MAX_YAML_BYTES`).
    """
    return parse_yaml(read_text(path, what, MAX_YAML_BYTES), f"{what}: {shown(path)}")
