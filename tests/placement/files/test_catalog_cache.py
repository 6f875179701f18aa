"""The parsed-catalog cache: the same catalog as a parse, read back without re-checking, and never a failure
(corrupt, truncated, foreign or unwritable entries mean a parse)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from placement.errors import InputError
from placement.files import catalog_cache
from placement.model.catalog import parse_skypilot_csv

HEAD = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,AvailabilityZone\n"
ROWS = ("p5.48xlarge,H100,8,192,2048,98.32,40.1,us-east-1,use1-az4\n"
        "p5.48xlarge,H100,8,192,2048,98.32,40.1,us-east-1,use1-az4\n"  # twice, same prices: a warning
        "g9.2xlarge,l4,1,8,32,1.2,,us-east-1,use1-az6\n"  # not in shapes.yaml; no spot price
        "p4d.24xlarge,A100,8,96,1152,,12.5,us-west-2,usw2-az1\n")
TEXT = HEAD + ROWS


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache directory of this test, caching every size of CSV."""
    monkeypatch.setenv("GPUFLEET_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(catalog_cache, "MIN_BYTES", 0)
    return tmp_path / "cache" / "catalogs"


def _no_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*_: object, **__: object) -> None:
        raise AssertionError("parsed instead of read from the cache")

    monkeypatch.setattr(catalog_cache, "parse_skypilot_csv", fail)


def _entry(cache: Path) -> Path:
    (entry,) = cache.glob("*.json")
    return entry


def test_a_cached_catalog_equals_the_parse_and_skips_it(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parsed = parse_skypilot_csv(TEXT, "aws", "c.csv", "2026-11-01")
    first = catalog_cache.parse_cached(TEXT, "aws", "c.csv", "2026-11-01")
    _no_parse(monkeypatch)
    again = catalog_cache.parse_cached(TEXT, "aws", "c.csv", "2026-11-02")
    assert first == parsed and again.offers == parsed.offers and again.warnings == parsed.warnings
    assert [vars(o) for o in again.offers] == [vars(o) for o in parsed.offers]
    assert again.origins[0].modified == "2026-11-02"  # the file's date is the caller's, never cached
    assert {o.shape.name for o in again.offers} == {"p5.48xlarge", "g9.2xlarge", "p4d.24xlarge"}


def test_the_counts_per_cloud_a_cached_and_merged_catalog_carries_are_its_offers(cache: Path) -> None:
    """The offers per cloud are carried from the entry and the merge, not counted again: they must be the
    count of the catalog's own offers (a plan's JSON prints them)."""
    from collections import Counter

    from placement.model.catalog import embedded_catalog

    catalog_cache.parse_cached(TEXT, "aws", "c.csv")
    again = catalog_cache.parse_cached(TEXT, "aws", "c.csv")  # from the entry
    gcp = parse_skypilot_csv(HEAD + "a3-highgpu-8g,H100,8,208,1872,88.49,,us-central1,us-central1-a\n", "gcp",
                             "g.csv")
    merged = embedded_catalog().merged(again, ["aws"]).merged(gcp, ["gcp"])
    for catalog in (again, merged):
        assert catalog.offers_per_cloud == dict(Counter(o.cloud for o in catalog.offers))
    assert merged.offers_per_cloud == {"aws": 3, "gcp": 1}
    assert merged.source == "c.csv+g.csv"


def test_the_entry_is_plain_json_under_the_cache_directory(cache: Path) -> None:
    catalog_cache.parse_cached(TEXT, "aws", "c.csv")
    head, _, body = _entry(cache).read_bytes().partition(b"\n")
    meta = json.loads(head)
    assert meta["sha256"] == hashlib.sha256(body).hexdigest() and isinstance(json.loads(body), dict)
    assert catalog_cache.cache_dir() == cache


def test_tests_never_use_the_real_user_cache() -> None:
    import platformdirs

    assert not str(catalog_cache.cache_dir()).startswith(platformdirs.user_cache_dir("gpufleet"))


def test_another_content_path_or_cloud_is_another_entry(cache: Path) -> None:
    catalog_cache.parse_cached(TEXT, "aws", "c.csv")
    catalog_cache.parse_cached(TEXT.replace("98.32", "98.33"), "aws", "c.csv")
    catalog_cache.parse_cached(TEXT, "aws", "d.csv")
    assert len(list(cache.glob("*.json"))) == 3


def test_a_change_to_the_checking_code_or_data_is_another_key(monkeypatch: pytest.MonkeyPatch) -> None:
    key = catalog_cache.cache_key(TEXT, "aws", "c.csv")
    monkeypatch.setattr(catalog_cache, "fingerprint", lambda: "other code")
    assert catalog_cache.cache_key(TEXT, "aws", "c.csv") != key


def _tamper_body(entry: Path, edit: object) -> None:
    """Rewrite the entry's body with ``edit`` applied, its digest made to match (a foreign, not corrupt, file)."""
    head, _, body = entry.read_bytes().partition(b"\n")
    doc = json.loads(body)
    edit(doc)  # type: ignore[operator]
    body = json.dumps(doc).encode()
    meta = json.loads(head)
    meta["sha256"] = hashlib.sha256(body).hexdigest()
    entry.write_bytes(json.dumps(meta).encode() + b"\n" + body)


@pytest.mark.parametrize("damage", [
    lambda b: b[: len(b) // 2],  # truncated
    lambda b: b.replace(b"98.32", b"18.32"),  # a changed price: the digest no longer matches
    lambda b: b"",
    lambda b: b"\x00\xff" * 100,
    lambda b: b"not json\n{}",
    lambda b: b.replace(catalog_cache.FORMAT.encode(), b"gpufleet.catalog-cache/v0"),
])
def test_a_damaged_entry_means_a_parse(cache: Path, damage: object) -> None:
    parsed = catalog_cache.parse_cached(TEXT, "aws", "c.csv")
    entry = _entry(cache)
    entry.write_bytes(damage(entry.read_bytes()))  # type: ignore[operator]
    assert catalog_cache.parse_cached(TEXT, "aws", "c.csv") == parsed
    assert catalog_cache.parse_cached(TEXT, "aws", "c.csv") == parsed  # rewritten, read back


def _column(doc: dict, name: str, values: list, code: str = "d") -> None:
    doc[name] = catalog_cache._packed(values, code)


@pytest.mark.parametrize("edit", [
    lambda d: _column(d, "price", [-1.0, 1.0, 1.0]),
    lambda d: _column(d, "spot", [1e300, 1.0, 1.0]),
    lambda d: _column(d, "spot", [float("inf"), 1.0, 1.0]),
    lambda d: _column(d, "price", [1.0, 1.0]),  # a row short
    lambda d: _column(d, "place", [0, 1, 99], "I"),  # past the places table
    lambda d: _column(d, "shape", [0, 0, 0, 0], "I"),
    lambda d: d.__setitem__("price", "not base64!"),
    lambda d: d.__setitem__("price", [98.32, None, None]),
    lambda d: d["shapes"].__setitem__(0, "a3-highgpu-8g"),  # a GCP shape in an AWS catalog
    lambda d: d["shapes"].__setitem__(0, "no-such-shape"),
    lambda d: d["places"].__setitem__(0, [1, 2]),
    lambda d: d.__setitem__("n", 0),
    lambda d: d.pop("warnings"),
])
def test_a_foreign_entry_with_a_matching_digest_means_a_parse(cache: Path, edit: object) -> None:
    parsed = catalog_cache.parse_cached(TEXT, "aws", "c.csv")
    _tamper_body(_entry(cache), edit)
    assert catalog_cache.parse_cached(TEXT, "aws", "c.csv") == parsed


def test_an_unwritable_cache_directory_means_a_parse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache directory would be")
    monkeypatch.setenv("GPUFLEET_CACHE_DIR", str(blocker))
    monkeypatch.setattr(catalog_cache, "MIN_BYTES", 0)
    assert catalog_cache.parse_cached(TEXT, "aws", "c.csv") == parse_skypilot_csv(TEXT, "aws", "c.csv")
    assert blocker.read_text().startswith("a file")


def test_bad_input_is_refused_the_same_and_never_cached(cache: Path) -> None:
    with pytest.raises(InputError, match=r"Price \(line 2\)"):
        catalog_cache.parse_cached(HEAD + ROWS.replace("98.32", "inf", 1), "aws", "c.csv")
    assert not cache.exists() or not list(cache.glob("*.json"))


def test_small_files_are_parsed_without_an_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFLEET_CACHE_DIR", str(tmp_path))
    catalog_cache.parse_cached(TEXT, "aws", "c.csv")
    assert not (tmp_path / "catalogs").exists()


def test_only_the_newest_entries_are_kept(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(catalog_cache, "KEEP", 2)
    for i in range(4):
        catalog_cache.parse_cached(TEXT.replace("98.32", f"9{i}.5"), "aws", "c.csv")
        for n, entry in enumerate(sorted(cache.glob("*.json"), key=os.path.getmtime)):
            os.utime(entry, (n, n))  # distinct modification times, oldest first
    assert len(list(cache.glob("*.json"))) == 2 and not list(cache.glob(".tmp-*"))


def test_plan_answers_the_same_from_the_cache(tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
                                              ) -> None:
    from placement.commands.main import main

    job = tmp_path / "job.yaml"
    job.write_text("name: j\naccelerator: H100\ngpus: 8\nhours: 2\n")
    csv_path = tmp_path / "aws.csv"
    csv_path.write_text(TEXT)
    argv = ["plan", str(job), "--json", "--catalog", f"aws={csv_path}"]
    outputs = []
    for _ in range(2):
        assert main(argv) == 0
        outputs.append(capsys.readouterr())
    assert len(list(cache.glob("*.json"))) == 1
    assert outputs[0] == outputs[1] and "listed twice with the same prices" in outputs[1].err


def test_a_rewritten_entry_with_its_digest_is_read(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The control for the foreign-entry cases: rewriting an entry unchanged keeps it readable.
    parsed = catalog_cache.parse_cached(TEXT, "aws", "c.csv")
    _tamper_body(_entry(cache), lambda d: None)
    _no_parse(monkeypatch)
    assert catalog_cache.parse_cached(TEXT, "aws", "c.csv") == parsed


def test_an_entry_of_another_user_is_not_read(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not hasattr(os, "getuid"):
        pytest.skip("no user ids on this system")
    parsed = catalog_cache.parse_cached(TEXT, "aws", "c.csv")
    monkeypatch.setattr(os, "getuid", lambda: os.stat(_entry(cache)).st_uid + 1)
    calls = []
    monkeypatch.setattr(catalog_cache, "parse_skypilot_csv", lambda *a: calls.append(a) or parsed)
    assert catalog_cache.parse_cached(TEXT, "aws", "c.csv") == parsed and calls


# ------------------------------------------------------------------ only what the cache wrote (issue 30)


def _fifo_entry(cache: Path) -> Path:
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this system")
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"{catalog_cache.cache_key(TEXT, 'aws', 'c.csv')}.json"
    os.mkfifo(path)
    return path


def test_a_fifo_at_an_entry_path_is_neither_read_nor_replaced(cache: Path) -> None:
    """A FIFO where the entry would be used to block the open forever: now a parse, within 5 s."""
    import threading

    fifo = _fifo_entry(cache)
    answer: list[object] = []
    worker = threading.Thread(target=lambda: answer.append(catalog_cache.parse_cached(TEXT, "aws", "c.csv")),
                              daemon=True)
    worker.start()
    worker.join(5)
    if worker.is_alive():  # unblock the open so the thread ends with the test
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("parse_cached hung on a FIFO at its entry's path")
    assert answer == [parse_skypilot_csv(TEXT, "aws", "c.csv")]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # not ours: left in place, nothing written over it


def test_plan_with_a_fifo_in_the_cache_answers(tmp_path: Path) -> None:
    """The whole command, in a process of its own: it used to hang forever. The 5 s bound on the cache read
    itself is the test above; this one allows for a loaded machine starting Python and parsing the CSV."""
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this system")
    job, csv_path = tmp_path / "job.yaml", tmp_path / "aws.csv"
    job.write_text("name: j\naccelerator: H100\ngpus: 8\nhours: 2\n")
    csv_path.write_text(HEAD + ROWS + "".join(f"g9.x{i}large,L4,1,8,32,1.2,,us-east-1,use1-az6\n"
                                              for i in range(6000)))  # above MIN_BYTES: the cache is used
    env = {**os.environ, "GPUFLEET_CACHE_DIR": str(tmp_path / "cache")}
    (tmp_path / "cache" / "catalogs").mkdir(parents=True)
    key = catalog_cache.cache_key(csv_path.read_text(), "aws", str(csv_path))  # the name the command looks up
    os.mkfifo(tmp_path / "cache" / "catalogs" / f"{key}.json")
    run = subprocess.run([sys.executable, "-m", "placement", "plan", str(job), "--catalog", f"aws={csv_path}"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    assert stat.S_ISFIFO(os.lstat(tmp_path / "cache" / "catalogs" / f"{key}.json").st_mode)


def test_pruning_leaves_files_the_cache_did_not_write(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(catalog_cache, "KEEP", 1)
    cache.mkdir(parents=True)
    mine = cache / "my-notes.json"
    mine.write_text('{"mine": true}')
    lookalike = cache / f"{'ab' * 32}.json"  # an entry's name, not an entry's content
    lookalike.write_text('{"format": "something else"}')
    link = cache / f"{'cd' * 32}.json"
    link.symlink_to(mine)
    for n, f in enumerate((mine, lookalike)):
        os.utime(f, (n, n))  # the oldest files in the directory: first to go if pruning counted them
    for i in range(3):
        catalog_cache.parse_cached(TEXT.replace("98.32", f"9{i}.5"), "aws", "c.csv")
    left = {p.name for p in cache.iterdir()}
    assert {mine.name, lookalike.name, link.name} <= left and len(left) == 4  # theirs and one entry
    assert mine.read_text() == '{"mine": true}'


@pytest.mark.parametrize("edit", [
    lambda d: d["adhoc"]["g9.2xlarge"].__setitem__(1, 0),  # a shape with no GPU (a traceback in plan)
    lambda d: d["adhoc"].__setitem__("p5.48xlarge", ["H100", 4, 192, 2048]),  # the shape data says 8
    lambda d: d["places"].__setitem__(1, ["us-east-1", "usw2-az1"]),  # a zone of another region
    lambda d: d["places"].__setitem__(1, ["us-central1", "us-central1-a"]),  # a GCP region
    lambda d: d["places"].__setitem__(1, [" us-east-1", "use1-az6"]),
])
def test_a_rewritten_entry_the_csv_checks_refuse_means_a_parse(cache: Path, edit: object) -> None:
    parsed = catalog_cache.parse_cached(TEXT, "aws", "c.csv")
    _tamper_body(_entry(cache), edit)
    again = catalog_cache.parse_cached(TEXT, "aws", "c.csv")
    assert again == parsed and all(o.shape.gpus >= 1 for o in again.offers)


def test_plan_with_a_zero_gpu_entry_plans_as_from_the_csv(tmp_path: Path, cache: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from placement.commands.main import main

    job = tmp_path / "job.yaml"
    job.write_text("name: j\naccelerator: L4\ngpus: 1\nhours: 2\n")
    csv_path = tmp_path / "aws.csv"
    csv_path.write_text(TEXT)
    argv = ["plan", str(job), "--json", "--catalog", f"aws={csv_path}"]
    assert main(argv) == 0
    first = capsys.readouterr().out
    _tamper_body(_entry(cache), lambda d: d["adhoc"]["g9.2xlarge"].__setitem__(1, 0))
    assert main(argv) == 0
    assert capsys.readouterr().out == first
