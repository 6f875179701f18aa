"""Errors the CLI turns into a one-line message and exit code 2, and how a user's value is quoted in them.

The bottom floor of ``placement``: imports nothing from the package, so every module may import it.
"""

from __future__ import annotations

import contextlib
import re
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


MAX_REMOTE_TEXT = 200  # characters of a server's own error text shown in a message

# ANSI escape sequences: CSI (colours, cursor moves, screen clears), OSC (window titles, hyperlinks) ended by BEL or
# ESC \\, and the two-character ones. Removed whole: their parameters are not text either. The patterns of this
# module are compiled on first use (re's own cache): every command imports it, few print a server's text.
_ANSI = r"\x1b(?:\[[0-?]*[ -/]*[@-~]?|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])|\x9b[0-?]*[ -/]*[@-~]?"


def printable(text: Any, limit: int = MAX_REMOTE_TEXT) -> str:
    """Text a server (or any other process) wrote, made safe to print on one terminal line: escape sequences
    removed, runs of line breaks and tabs as one space, every other control or format character (C0, C1, DEL,
    bidirectional overrides) as ``\\xNN``/``\\uNNNN``, cut to ``limit`` characters. For the text of an answer;
    a user's own value is quoted with :func:`shown`."""
    s = text if isinstance(text, str) else (text.decode("utf-8", "replace") if isinstance(text, bytes | bytearray)
                                            else str(text))
    s = re.sub(_ANSI, "", s[: limit * 8])  # no more than the limit's worth of escapes is ever scanned
    out: list[str] = []
    for ch in s:
        if ch.isprintable():
            out.append(ch)
        elif ch in "\t\n\r\v\f":
            if out and out[-1] != " ":
                out.append(" ")
        else:
            out.append(f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")
    shown_text = "".join(out).strip()
    return shown_text if len(shown_text) <= limit else shown_text[: limit - 3] + "..."


_USERINFO = r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#\s]*@"
_SECRET_PARAM = (r"(?i)([?&;](?:[a-z0-9_.-]*(?:token|password|passwd|secret|key|signature|auth|credential)"
                 r"[a-z0-9_.-]*)=)[^&;#\s]*")


def redact_url(text: Any) -> str:
    """``text`` (a URL, or a message holding URLs) with credentials cut: the user-info part
    (``http://user:pass@host`` becomes ``http://***@host``) and the values of query parameters named like
    credentials (``?token=``, ``&X-Amz-Signature=``...). Every message that prints a URL passes it here."""
    s = text if isinstance(text, str) else str(text)
    return re.sub(_SECRET_PARAM, r"\1***", re.sub(_USERINFO, r"\1***@", s))
