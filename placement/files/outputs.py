"""The files a command writes for the user (``calibrate -o``, ``refresh -o``, ``--chart``), checked before the
command does any work, so a bad path costs nothing and never leaves half the output behind.

One rule for every output path: it names a file (not a directory, a FIFO or a device) in a folder that exists and
that this user may write; it is none of the command's input files; and a file already there is replaced only when
it is one this kind of command writes (``replaceable``: a calibration file, a catalog; a chart may replace a
chart). The write itself goes to a temporary file beside it, renamed over it at the end
(:func:`placement.files.safe.new_file`), so a link left at the path is replaced, never written through.

Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

from placement.errors import UsageError, shown

HEAD_BYTES = 4096  # what is read of an existing file to tell whether this command wrote it


def output_path(path: str, flag: str, *, suffix: str | None = None, inputs: Sequence[str] = (),
                replaceable: Callable[[bytes], bool] | None = None, kind: str = "file") -> Path:
    """``path`` checked as where ``flag`` writes (see the module docstring); a
    :class:`~placement.errors.UsageError` naming the flag, the user's path and the fix otherwise.

    ``suffix``: the name must end with it (any case). ``inputs``: paths the command reads, which the output must
    not be. ``replaceable``: given the first bytes of an existing regular file, whether the command may replace
    it (None: any regular file may be, as for a chart). ``kind`` names what the command writes, for messages."""
    if not path or not path.strip():
        raise UsageError(f"{flag}: is empty; name the {kind} to write")
    if "\0" in path:
        raise UsageError(f"{flag}: {shown(path)} holds a NUL character; name the {kind} to write")
    if suffix and not path.lower().endswith(suffix):
        raise UsageError(f"{flag}: {shown(path)} must name a {suffix} file")
    target = Path(path)
    try:
        st: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as exc:  # ENOTDIR, ENAMETOOLONG, EACCES, ELOOP
        raise UsageError(f"{flag}: cannot write {shown(path)} ({exc.strerror or exc.__class__.__name__})") from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        example = target / f"name{suffix or ''}"
        raise UsageError(f"{flag}: {shown(path)} is a folder; name a file in it, e.g. {shown(str(example))}")
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{flag}: {shown(path)} is not a regular file (a FIFO, a socket or a device); name a file")
    for other in inputs:
        try:
            same = st is not None and os.path.samefile(target, other)
        except OSError:
            same = False
        if same:
            raise UsageError(f"{flag}: {shown(path)} is also the input {shown(other)}; writing it would replace "
                             "what it was made from: name another file")
    if st is not None and replaceable is not None:
        from placement.files.safe import UnsafeFile, open_regular

        try:
            fh, _ = open_regular(target, None)  # a link to a regular file is refused here: not ours to replace
            with fh:
                head = fh.read(HEAD_BYTES)
        except UnsafeFile:
            head = b""
        except OSError as exc:
            raise UsageError(f"{flag}: cannot read {shown(path)} to check it before replacing it "
                             f"({exc.strerror or exc.__class__.__name__})") from None
        if not replaceable(head):
            raise UsageError(f"{flag}: {shown(path)} exists and is not a {kind} this command wrote; it is left "
                             "alone: name a new file, or move that one away first")
    folder = target.parent
    if not folder.is_dir():
        raise UsageError(f"{flag}: folder {shown(str(folder))} does not exist; create it first or name a file in "
                         "an existing folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"{flag}: cannot write in folder {shown(str(folder))} (permission denied)")
    return target


@contextlib.contextmanager
def written(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """Write the user's output file ``path`` whole or not at all (:func:`placement.files.safe.new_file`: a
    temporary file beside it, renamed over it at the end), with the permissions a file the user creates gets
    (``0666`` less the umask; a temporary file starts private)."""
    from placement.files.safe import new_file

    mask = os.umask(0o022)
    os.umask(mask)
    with new_file(path) as fh:
        os.fchmod(fh.fileno(), 0o666 & ~mask)
        yield fh
