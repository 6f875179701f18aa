"""Files another process could have replaced: bounded, regular-file-only reads, writes that never follow a link
someone left in their place, and deletes of our own regular files only. Standard library only (the launcher and
the trainer use it in any image with Python 3).

Every read opens with ``O_NOFOLLOW | O_NONBLOCK``: a symbolic link as the last component is refused (``ELOOP``),
and a FIFO or a device opens at once instead of blocking in ``open()`` (a FIFO with no writer would hold the
reader there, out of reach of the signal handlers written in Python). ``fstat`` on the open descriptor then
refuses anything but a regular file, and a regular file over the caller's cap before a byte is read; a file that
grows while it is read is cut at the cap plus one byte and refused. Refusals are :class:`UnsafeFile`, an
``OSError`` whose message names the path and why (the callers' ``except OSError`` keeps working); a missing
file stays ``FileNotFoundError``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Iterator
from typing import BinaryIO

TEMP_PREFIX = ".gpufleet-tmp-"  # what write_atomic and new_file name their temporary files (theirs to clean up)
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
CHUNK = 8 << 20  # bytes per read when a file is streamed


class UnsafeFile(OSError):
    """A file refused before it was read (a link, a FIFO, a device, a directory, or over its size cap)."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path: str | os.PathLike[str], limit: int | None = None) -> tuple[BinaryIO, int]:
    """Open ``path`` for reading when it is a regular file (not a link to one) of at most ``limit`` bytes
    (None: any size). Returns ``(file, size)``, the size from ``fstat`` of the open file. Raises
    :class:`UnsafeFile`, ``FileNotFoundError`` or another ``OSError``; never blocks."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeFile(errno.ELOOP, f"{os.fspath(path)} is a symbolic link; not read") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFile(errno.EINVAL, f"{os.fspath(path)} is {_kind(st.st_mode)}, not a regular file; not read")
        if limit is not None and st.st_size > limit:
            raise UnsafeFile(errno.EFBIG, f"{os.fspath(path)} is {st.st_size} bytes, over the {limit}-byte limit; "
                                          "not read")
        return os.fdopen(fd, "rb"), st.st_size
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: str | os.PathLike[str], limit: int) -> bytes:
    """The whole of regular file ``path``, at most ``limit`` bytes (see :func:`open_regular`)."""
    f, size = open_regular(path, limit)
    with f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise UnsafeFile(errno.EFBIG, f"{os.fspath(path)} grew past the {limit}-byte limit while read; not read")
    return data


def read_text(path: str | os.PathLike[str], limit: int, encoding: str = "utf-8") -> str:
    """:func:`read_bytes` decoded (``UnicodeDecodeError``, a ``ValueError``, when it is not ``encoding``)."""
    return read_bytes(path, limit).decode(encoding)


@contextlib.contextmanager
def new_file(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """Write ``path`` as a new file: the block writes a fresh temporary file beside it (``O_EXCL``: never one
    someone placed there, nor a link), which is flushed to disk and renamed over ``path`` when the block ends
    without an exception (removed otherwise). A link or file already at ``path`` is replaced, never written
    through."""
    path = os.fspath(path)
    folder, name = os.path.split(path)
    fd, tmp = tempfile.mkstemp(prefix=f"{TEMP_PREFIX}{name}.", dir=folder or ".")
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """``data`` at ``path``, all or nothing (:func:`new_file`)."""
    with new_file(path) as f:
        f.write(data)


def create_exclusive(path: str | os.PathLike[str], data: bytes) -> bool:
    """Create ``path`` with ``data`` only when nothing is there (not even a dangling link): True when this call
    created it, False when something already was. The content appears whole (written under a temporary name,
    then linked into place, which fails when the name is taken)."""
    path = os.fspath(path)
    folder, name = os.path.split(path)
    fd, tmp = tempfile.mkstemp(prefix=f"{TEMP_PREFIX}{name}.", dir=folder or ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        return True
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def real_dir_in(parent: str | os.PathLike[str], name: str) -> str | None:
    """``parent/name`` resolved, when it is a real directory directly inside ``parent`` resolved (not a link
    to one elsewhere, not outside through ``..``); None otherwise (absent included)."""
    if not is_plain_name(name):
        return None
    base = os.path.realpath(parent)
    path = os.path.join(base, name)
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return path if stat.S_ISDIR(st.st_mode) and os.path.realpath(path) == path else None


def unlink_regular(folder: str, name: str) -> bool:
    """Delete ``folder/name`` when ``name`` is a plain file name and the file is a regular file (a link, a
    directory or anything else stays). ``folder`` must be a resolved path (:func:`real_dir_in`). True when
    deleted; False when absent or not a regular file."""
    if not is_plain_name(name):
        return False
    path = os.path.join(folder, name)
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return False
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def is_plain_name(name: object) -> bool:
    """A file name without a folder part: not empty, no ``/`` or NUL, not ``.`` or ``..``."""
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and "\0" not in name \
        and len(name) <= 255
