"""placement.files.safe: reads that never block on a FIFO, never follow a link, never read past a cap; writes that
never write through a link left at the name; deletes of plain-named regular files only."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from placement.files import safe


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "manifest.json"
    os.mkfifo(fifo)
    done: list[BaseException] = []

    def read() -> None:
        try:
            safe.read_bytes(fifo, 100)
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
            done.append(exc)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(5)
    assert not t.is_alive(), "open() of a FIFO blocked"
    assert isinstance(done[0], safe.UnsafeFile) and "FIFO" in str(done[0])


def test_links_directories_and_oversized_files_are_refused(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_bytes(b"x" * 10)
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(safe.UnsafeFile, match="symbolic link"):
        safe.read_bytes(tmp_path / "link", 100)
    with pytest.raises(safe.UnsafeFile, match="directory"):
        safe.read_bytes(tmp_path, 100)
    with pytest.raises(safe.UnsafeFile, match="limit"):
        safe.read_bytes(target, 9)
    with pytest.raises(FileNotFoundError):
        safe.read_bytes(tmp_path / "absent", 9)
    assert safe.read_bytes(target, 10) == b"x" * 10
    big = tmp_path / "big"
    with open(big, "wb") as f:  # 3 GiB, sparse: refused by its size, never read
        f.truncate(3 << 30)
    f2, size = safe.open_regular(big)
    with f2:
        assert size == 3 << 30
    with pytest.raises(safe.UnsafeFile):
        safe.read_bytes(big, 1 << 20)


def test_a_write_replaces_a_link_left_at_the_name_and_never_writes_through_it(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep", encoding="utf-8")
    (tmp_path / "out.json").symlink_to(victim)
    safe.write_atomic(tmp_path / "out.json", b"new")
    assert victim.read_text(encoding="utf-8") == "keep"
    assert not (tmp_path / "out.json").is_symlink() and (tmp_path / "out.json").read_bytes() == b"new"
    with pytest.raises(RuntimeError), safe.new_file(tmp_path / "half") as f:
        f.write(b"part")
        raise RuntimeError("a writer fails")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json", "victim"]  # nothing half-written left


def test_create_exclusive_takes_a_name_once(tmp_path: Path) -> None:
    assert safe.create_exclusive(tmp_path / "owner", b"a")
    assert not safe.create_exclusive(tmp_path / "owner", b"b")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    assert not safe.create_exclusive(tmp_path / "dangling", b"c")
    assert not (tmp_path / "nowhere").exists() and (tmp_path / "owner").read_bytes() == b"a"


def test_deletes_only_plain_named_regular_files_in_a_real_directory(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "step").mkdir(parents=True)
    outside = tmp_path / "victim"
    outside.write_text("v", encoding="utf-8")
    (home / "step" / "link").symlink_to(outside)
    (home / "step" / "data").write_text("d", encoding="utf-8")
    archive = tmp_path / "archive"
    archive.mkdir()
    (archive / "data").write_text("a", encoding="utf-8")
    (home / "linked").symlink_to(archive)
    folder = safe.real_dir_in(home, "step")
    assert folder is not None
    assert safe.real_dir_in(home, "linked") is None and safe.real_dir_in(home, "..") is None
    for name in ("../../victim", "../victim", "/abs", "link", ""):
        assert not safe.unlink_regular(folder, name)
    assert outside.exists() and (home / "step" / "link").is_symlink()
    assert safe.unlink_regular(folder, "data") and not (home / "step" / "data").exists()
    assert (archive / "data").exists()
