"""Errors the CLI turns into a one-line message and exit code 2, and how a user's value is quoted in them.

The bottom floor of ``placement``: imports nothing from the package, so every module may import it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

MAX_SHOWN = 60  # characters of a user's value quoted in an error: a value can be megabytes long


class InputError(ValueError):
    """Bad user input: a job spec, flag, stack config, catalog or quota file.

    ``field`` names the offending key (dotted path); the message says what is wrong and the fix.
    """

    def __init__(self, field: str, message: str, *, source: str | None = None) -> None:
        self.field = field
        self.message = message
        self.source = source
        where = f"{source}: " if source else ""
        super().__init__(f"{where}{field}: {message}")


@contextlib.contextmanager
def in_file(path: str) -> Iterator[None]:
    """Name ``path`` in an :class:`InputError` raised inside the block that names no file yet, so a job spec's
    error reads ``FILE: FIELD: ...`` as every other file's does."""
    try:
        yield
    except InputError as exc:
        if exc.source is not None:
            raise
        raise InputError(exc.field, exc.message, source=path) from None


class UsageError(Exception):
    """A bad flag or an unreadable file; printed as one line, exit code 2."""


def shown(value: Any, limit: int = MAX_SHOWN) -> str:
    """``repr(value)`` cut to ``limit`` characters, for error messages."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a value's repr must never turn a one-line error into a traceback
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."
