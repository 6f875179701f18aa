"""Checkpoints: a torn one is never loaded, the last N are kept, a file we did not write is never deleted,
writes are asynchronous with at most one in flight, and a cache is synced to the home."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import IO

import pytest

from placement.model.contract import LAST_DURABLE_STEP, PROGRESS_FILE
from placement.trainer.checkpoint import (
    CLAIM,
    HOME_OWNER,
    MANIFEST,
    Checkpointer,
    HomeError,
    Loaded,
    Snapshot,
    Store,
    Written,
    step_name,
)


def listing(folder: Path) -> list[str]:
    """The names in ``folder`` but the trainer's progress file (gpufleet-progress.json, issue 35)."""
    return sorted(p.name for p in folder.iterdir() if p.name != PROGRESS_FILE)


def snap(step: int, payload: bytes = b"x" * 100, kind: str = "interval") -> Snapshot:
    def write(f: IO[bytes]) -> None:
        f.write(payload)

    return Snapshot(step=step, files={"state.bin": write}, state={"loss": float(step)}, kind=kind)


def test_a_torn_checkpoint_is_skipped(tmp_path: Path) -> None:
    store = Store(str(tmp_path), "job-a")
    ck = Checkpointer(home=store, keep=5)
    assert ck.save(snap(10)) and ck.save(snap(20)) and ck.save(snap(30))
    (tmp_path / step_name(30) / MANIFEST).unlink()  # killed before its manifest: torn
    loaded = ck.latest()
    assert loaded is not None and loaded.step == 20
    # a data file that does not match its manifest (truncated) is torn too
    (tmp_path / step_name(20) / "state.bin").write_bytes(b"x" * 99)
    loaded = Checkpointer(home=Store(str(tmp_path), "job-a")).latest()
    assert loaded is not None and loaded.step == 10 and loaded.files["state.bin"] == b"x" * 100


def test_another_jobs_or_writers_checkpoint_is_not_loaded(tmp_path: Path) -> None:
    Checkpointer(home=Store(str(tmp_path), "job-a")).save(snap(10))
    assert Checkpointer(home=Store(str(tmp_path), "job-b")).latest() is None


def test_keeps_the_last_n_and_never_deletes_a_foreign_file(tmp_path: Path) -> None:
    foreign = [tmp_path / "notes.txt", tmp_path / step_name(1) / MANIFEST, tmp_path / "step-0000000002" / "x.bin"]
    for f in foreign:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("not the trainer's", encoding="utf-8")
    # a foreign writer's manifest in a step directory, and another job's complete checkpoint
    (tmp_path / step_name(1) / MANIFEST).write_text(json.dumps({"writer": "someone-else", "step": 1}))
    Checkpointer(home=Store(str(tmp_path), "other-job")).save(snap(3))
    ck = Checkpointer(home=Store(str(tmp_path), "job-a"), keep=2)
    for step in (10, 20, 30, 40):
        assert ck.save(snap(step))
    (tmp_path / step_name(40) / "user-notes.txt").write_text("mine", encoding="utf-8")  # foreign, in ours
    assert ck.save(snap(50)) and ck.save(snap(60))
    left = listing(tmp_path)
    progress = json.loads((tmp_path / PROGRESS_FILE).read_text(encoding="utf-8"))
    assert progress["job"] == "job-a" and progress[LAST_DURABLE_STEP] == "60"  # the annotation's text
    assert left == ["notes.txt", step_name(1), step_name(2), step_name(3), step_name(40), step_name(50),
                    step_name(60)]
    assert all(f.read_text(encoding="utf-8") for f in foreign)
    assert (tmp_path / step_name(3) / MANIFEST).exists()  # the other job's checkpoint stays
    # ours at step 40 is deleted file by file; the foreign file stays, and with it the directory
    assert sorted(p.name for p in (tmp_path / step_name(40)).iterdir()) == ["user-notes.txt"]


def test_an_old_torn_checkpoint_of_ours_is_cleaned_up(tmp_path: Path) -> None:
    ck = Checkpointer(home=Store(str(tmp_path), "job-a"), keep=3)
    assert ck.save(snap(10))
    (tmp_path / step_name(10) / MANIFEST).unlink()  # torn, ours (it has our claim)
    assert (tmp_path / step_name(10) / CLAIM).exists()
    ck = Checkpointer(home=Store(str(tmp_path), "job-a"), keep=3)  # the next run
    assert ck.latest() is None
    assert ck.save(snap(20))
    assert not (tmp_path / step_name(10)).exists()


def test_writes_in_the_background_one_at_a_time(tmp_path: Path) -> None:
    release = threading.Event()
    started = []

    def slow(f: IO[bytes]) -> None:
        started.append(time.monotonic())
        release.wait(10)
        f.write(b"data")

    written: list[Written] = []
    ck = Checkpointer(home=Store(str(tmp_path), "job-a"), on_written=written.append)
    t0 = time.monotonic()
    ck.save_async(Snapshot(step=1, files={"s": slow}, state={"loss": 1.0}))
    assert time.monotonic() - t0 < 1.0 and ck.busy  # returned while the write is still running
    assert not (tmp_path / step_name(1) / MANIFEST).exists()
    second = threading.Thread(target=ck.save_async, args=(snap(2),))
    second.start()
    time.sleep(0.2)
    assert second.is_alive()  # waits for the first: at most one in flight
    release.set()
    second.join(10)
    assert ck.wait(10)
    assert [w.step for w in written] == [1, 2]


def test_a_failed_write_is_reported_and_leaves_the_previous_checkpoint(tmp_path: Path) -> None:
    errors: list[str] = []
    ck = Checkpointer(home=Store(str(tmp_path), "job-a"), on_error=errors.append)
    assert ck.save(snap(1))

    def broken(f: IO[bytes]) -> None:
        raise OSError("disk full")

    assert not ck.save(Snapshot(step=2, files={"s": broken}, state={"loss": 2.0}))
    assert len(errors) == 1 and "step 2" in errors[0] and "disk full" in errors[0]
    loaded = ck.latest()
    assert loaded is not None and loaded.step == 1


def test_a_cache_is_written_first_and_synced_to_the_home(tmp_path: Path) -> None:
    home, cache = tmp_path / "home", tmp_path / "cache"
    ck = Checkpointer(home=Store(str(home), "j"), cache=Store(str(cache), "j"), keep=2)
    for step in (1, 2, 3):
        assert ck.save(snap(step, payload=bytes([step]) * 10))
    for root in (home, cache):
        assert listing(root) == [step_name(2), step_name(3)]
    # the home alone (a new node: the cache is gone) resumes from the same checkpoint
    loaded = Checkpointer(home=Store(str(home), "j")).latest()
    assert loaded is not None and loaded.step == 3 and loaded.files["state.bin"] == bytes([3]) * 10


def test_retention_never_deletes_outside_the_home_by_a_name_in_a_manifest_or_claim(tmp_path: Path) -> None:
    home = tmp_path / "a" / "home"
    victims = [tmp_path / "victim", tmp_path / "a" / "victim"]
    for v in victims:
        v.parent.mkdir(parents=True, exist_ok=True)
        v.write_text("not the trainer's", encoding="utf-8")
    ck = Checkpointer(home=Store(str(home), "job-a"), keep=1)
    assert ck.save(snap(10)) and ck.save(snap(20))
    # An older checkpoint of ours whose manifest, and another whose claim, name files outside the home.
    for step, name in ((5, MANIFEST), (6, CLAIM)):
        d = home / step_name(step)
        d.mkdir()
        doc = {"schema": "gpufleet.checkpoint/v1", "writer": "gpufleet.reference-trainer", "job": "job-a",
               "step": step, "state": {"loss": 1.0}}
        files = ["../../victim", "../../../victim", str(victims[0])]
        doc["files"] = {f: {"bytes": 1, "sha256": "0" * 64} for f in files} if name == MANIFEST else files
        (d / name).write_text(json.dumps(doc), encoding="utf-8")
        (d / CLAIM).write_text(json.dumps({**doc, "files": files}), encoding="utf-8")
    assert ck.save(snap(30))
    assert all(v.read_text(encoding="utf-8") == "not the trainer's" for v in victims)
    assert not (home / step_name(5)).exists() and not (home / step_name(6)).exists()  # our own files went


def test_a_step_directory_linked_into_the_home_keeps_its_files(tmp_path: Path) -> None:
    home, archive = tmp_path / "home", tmp_path / "archive"
    ck = Checkpointer(home=Store(str(home), "job-a"), keep=1)
    assert ck.save(snap(1))
    (home / step_name(1)).rename(archive)  # archived, then linked back into the home
    (home / step_name(1)).symlink_to(archive)
    for step in (2, 3, 4):
        assert ck.save(snap(step))
    assert sorted(p.name for p in archive.iterdir()) == [CLAIM, MANIFEST, "state.bin"]
    assert (home / step_name(1)).is_symlink()
    assert listing(home) == [step_name(1), step_name(4)]


def test_a_checkpoint_that_fails_verification_never_counts_toward_keep(tmp_path: Path) -> None:
    ck = Checkpointer(home=Store(str(tmp_path), "job-a"), keep=3)
    for step in (10, 20, 30):
        assert ck.save(snap(step))
    (tmp_path / step_name(30) / "state.bin").write_bytes(b"y" * 100)  # the newest is corrupt
    ck = Checkpointer(home=Store(str(tmp_path), "job-a"), keep=3)  # the next run resumes from 20
    loaded = ck.latest()
    assert loaded is not None and loaded.step == 20
    assert ck.save(snap(40))
    assert listing(tmp_path) == [step_name(10), step_name(20), step_name(40)]


def test_a_fifo_or_a_huge_file_in_a_checkpoint_neither_blocks_nor_is_read(tmp_path: Path) -> None:
    ck = Checkpointer(home=Store(str(tmp_path), "job-a"), keep=5)
    for step in (10, 20, 30):
        assert ck.save(snap(step))
    (tmp_path / step_name(30) / MANIFEST).unlink()
    os.mkfifo(tmp_path / step_name(30) / MANIFEST)  # nobody will ever write it
    data = tmp_path / step_name(20) / "state.bin"
    data.unlink()
    with open(data, "wb") as f:  # 3 GiB where the manifest says 100 bytes
        f.truncate(3 << 30)
    found: list[object] = []
    t = threading.Thread(target=lambda: found.append(Checkpointer(home=Store(str(tmp_path), "job-a")).latest()),
                         daemon=True)
    t0 = time.monotonic()
    t.start()
    t.join(20)
    assert not t.is_alive(), "blocked on the FIFO"
    assert time.monotonic() - t0 < 5  # the 3 GiB file is refused by its size, not read
    loaded = found[0]
    assert isinstance(loaded, Loaded) and loaded.step == 10


def test_a_malformed_manifest_field_is_a_torn_checkpoint(tmp_path: Path) -> None:
    ck = Checkpointer(home=Store(str(tmp_path), "job-a"))
    assert ck.save(snap(10)) and ck.save(snap(20))
    path = tmp_path / step_name(20) / MANIFEST
    good = json.loads(path.read_text(encoding="utf-8"))
    for bad in ({"bytes": "100"}, {"bytes": -1}, {"sha256": None}, {"bytes": True}, "100 bytes", ["x"]):
        doc = json.loads(json.dumps(good))
        if isinstance(bad, dict):
            doc["files"]["state.bin"].update(bad)
        else:  # the entry itself is not a mapping
            doc["files"]["state.bin"] = bad
        path.write_text(json.dumps(doc), encoding="utf-8")
        loaded = Checkpointer(home=Store(str(tmp_path), "job-a")).latest()
        assert loaded is not None and loaded.step == 10


def test_one_home_one_job(tmp_path: Path) -> None:
    a = Store(str(tmp_path), "job-a")
    a.prepare(create=True)
    a.claim()
    Checkpointer(home=a).save(snap(10))
    a.claim()  # the same job again: a resume
    b = Store(str(tmp_path), "job-b")
    with pytest.raises(HomeError, match="job-a"):
        b.claim()
    (tmp_path / HOME_OWNER).unlink()  # a home from before the owner file: its checkpoints name the job
    with pytest.raises(HomeError, match="job-a"):
        b.claim()
    file_home = tmp_path / "file"
    file_home.write_text("x", encoding="utf-8")
    with pytest.raises(HomeError, match="file"):
        Store(str(file_home), "job-a").prepare(create=True)
