"""Errors the CLI turns into a one-line message and exit code 2."""

from __future__ import annotations

from typing import Any


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


def non_negative(value: Any, field: str, source: str, what: str = "a number") -> float:
    """``value`` as a finite, non-negative float, or an :class:`InputError` naming ``field`` (kept for callers
    that predate :func:`placement.inputs.non_negative_number`, which it is)."""
    from placement.inputs import non_negative_number

    return non_negative_number(value, field, source=source or None, what=what)
