"""Errors the CLI turns into a one-line message and exit code 2."""

from __future__ import annotations


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
