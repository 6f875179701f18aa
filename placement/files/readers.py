"""Reading the user's files: text of a bounded size, and YAML documents through :mod:`placement.model.text`.

Only the standard library is imported at module level so ``placement --help`` stays fast.
"""

from __future__ import annotations

from typing import Any

from placement.errors import UsageError, shown
from placement.model.text import MAX_CSV_BYTES, MAX_YAML_BYTES, parse_yaml


def read_bytes(path: str, what: str, limit: int = MAX_CSV_BYTES) -> bytes:
    """The bytes of the user's file ``path`` (flag ``what``), at most ``limit``: a regular file (a link to one
    included: the user named it), or a pipe the user named (``<(curl ...)``), read to its end. Opened with
    ``O_NONBLOCK``, so a FIFO nobody writes to is an empty file rather than a hang; a device (``/dev/zero``), a
    socket or a directory is refused before a byte is read, a regular file over ``limit`` by its size. Every
    failure is a :class:`~placement.errors.UsageError` naming the flag."""
    import errno
    import fcntl
    import os
    import stat

    def refuse(why: str) -> UsageError:
        return UsageError(f"{what}: cannot read {shown(path)} ({why})")

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise UsageError(f"{what}: file {shown(path)} not found") from None
    except (OSError, ValueError) as exc:  # ENOTDIR, ENAMETOOLONG, EACCES, ELOOP, embedded NUL ...
        raise refuse(exc.strerror if isinstance(exc, OSError) and exc.strerror else exc.__class__.__name__) from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise refuse("it is a directory; name a file")
        if stat.S_ISREG(st.st_mode):
            if st.st_size > limit:
                raise UsageError(f"{what}: {shown(path)} is {st.st_size / 2**20:,.0f} MiB; at most "
                                 f"{limit // 2**20:,} MiB")
        elif stat.S_ISFIFO(st.st_mode):
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)  # the user's pipe
        else:
            raise refuse("it is a device or a socket, not a file")
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = os.read(fd, min(8 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise UsageError(f"{what}: {shown(path)} is larger than {limit // 2**20:,} MiB")
        return b"".join(chunks)
    except OSError as exc:
        if exc.errno == errno.EISDIR:
            raise refuse("it is a directory; name a file") from None
        raise refuse(exc.strerror or exc.__class__.__name__) from None
    finally:
        os.close(fd)


def read_text(path: str, what: str, limit: int = MAX_CSV_BYTES) -> str:
    """The text of the user's file ``path`` (flag ``what``), read by :func:`read_bytes`; a file that is not UTF-8
    is a :class:`~placement.errors.UsageError` naming the flag; line ends read as in text mode."""
    data = read_bytes(path, what, limit)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{what}: {shown(path)} is not UTF-8 text") from None
    # Universal newlines, as a file opened in text mode reads: \r\n and \r end lines too.
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text


def load_yaml(path: str, what: str) -> Any:
    """One user YAML (or JSON) file: job, batch, quota, reservation, stack-output and fleet files.

    Read with :func:`parse_yaml` after a size check (at most :data:`MAX_YAML_BYTES`).
    """
    return parse_yaml(read_text(path, what, MAX_YAML_BYTES), f"{what}: {shown(path)}")
