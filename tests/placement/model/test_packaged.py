"""The packaged data books and their JSON mirrors (placement/model/packaged.py, scripts/data_books.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from placement.model import packaged
from placement.model.packaged import MIRRORED, mirror_name, packaged_book

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "placement" / "data"


def _typed(value: Any) -> Any:
    """``value`` with every scalar tagged by its type, so 1 and 1.0 and True differ."""
    if isinstance(value, dict):
        return {(type(k).__name__, k): _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return (type(value).__name__, value)


@pytest.mark.parametrize("name", MIRRORED)
def test_each_mirror_is_the_yaml_document_exactly(name: str) -> None:
    want = yaml.load((DATA / name).read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    assert _typed(packaged_book(name)) == _typed(want)
    mirror = json.loads((DATA / mirror_name(name)).read_text(encoding="utf-8"))
    assert (mirror["bytes"], mirror["crc32"]) == packaged.fingerprint((DATA / name).read_text(encoding="utf-8")), (
        f"placement/data/{mirror_name(name)} is stale: run scripts/data_books.py")


def test_data_books_check_passes_on_the_tree() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "data_books.py"), "--check"],
                          capture_output=True, text=True, check=False, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr


def test_every_yaml_book_is_mirrored_or_holds_what_json_cannot() -> None:
    """A new book gets a mirror unless JSON cannot hold its document (a date): then the loader reads the YAML."""
    for path in sorted(DATA.glob("*.yaml")):
        if path.name in MIRRORED:
            continue
        doc = yaml.load(path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
        with pytest.raises(TypeError):
            json.dumps(doc)


def _book_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, yaml_text: str, mirror: str | None) -> None:
    (tmp_path / "parsed").mkdir()
    (tmp_path / "regions.yaml").write_text(yaml_text, encoding="utf-8")
    if mirror is not None:
        (tmp_path / "parsed" / "regions.json").write_text(mirror, encoding="utf-8")
    monkeypatch.setattr(packaged, "_DATA", str(tmp_path))


def _mirror_of(text: str, doc: Any, **changes: Any) -> str:
    size, crc = packaged.fingerprint(text)
    return json.dumps({"format": packaged.MIRROR_FORMAT, "source": "regions.yaml", "bytes": size, "crc32": crc,
                       "doc": doc, **changes})


def test_a_current_mirror_is_read_instead_of_the_yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = "aws: [us-east-1]\n"
    _book_dir(tmp_path, monkeypatch, text, _mirror_of(text, {"aws": ["from-the-mirror"]}))
    assert packaged_book("regions.yaml") == {"aws": ["from-the-mirror"]}


@pytest.mark.parametrize("mirror", [
    None,  # no mirror
    "{not json",  # a broken one
    _mirror_of("aws: [us-east-1]\n", {"aws": ["stale"]}),  # made from an earlier text of the book
    _mirror_of("aws: [us-east-2]\n", {"aws": ["stale"]}, format=packaged.MIRROR_FORMAT + 1),  # another format
    "[1, 2]",  # not a mirror at all
])
def test_the_yaml_is_read_when_its_mirror_is_not_made_from_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               mirror: str | None) -> None:
    _book_dir(tmp_path, monkeypatch, "aws: [us-east-2]\n", mirror)
    assert packaged_book("regions.yaml") == {"aws": ["us-east-2"]}


def test_the_books_of_a_plan_are_read_without_importing_pyyaml() -> None:
    code = ("import sys\n"
            "from placement.model.shapes import shape_book\n"
            "from placement.model.physics_data import physics_book\n"
            "from placement.model.egress import egress_book\n"
            "from placement.model.bill import bill_book\n"
            "from placement.model.gpudirect import gpudirect_book\n"
            "from placement.model.zones import known_regions\n"
            "shape_book(); physics_book(); egress_book(); bill_book(); gpudirect_book(); known_regions()\n"
            "print(sorted(m for m in sys.modules if m == 'yaml' or m.startswith('yaml.')))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert proc.stdout.strip() == "[]"


def test_data_books_refuses_a_document_json_cannot_hold() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import data_books
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    with pytest.raises(data_books.Unmirrorable, match="since"):
        data_books.mirror_text("x.yaml", "since: 2026-01-01\n")
    with pytest.raises(data_books.Unmirrorable, match="key 8"):
        data_books.mirror_text("x.yaml", "8: eight\n")
    with pytest.raises(data_books.Unmirrorable):
        data_books.mirror_text("x.yaml", "x: .nan\n")


def test_data_books_names_a_book_it_cannot_read_in_one_line_and_writes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import data_books
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    for name in MIRRORED:
        (tmp_path / name).write_text((DATA / name).read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "shapes.yaml").write_text("shapes: [unclosed\n", encoding="utf-8")
    monkeypatch.setattr(data_books, "DATA", tmp_path)
    monkeypatch.setattr(sys, "argv", ["data_books.py"])
    assert data_books.main() == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "shapes.yaml" in err and "Traceback" not in err
    assert not (tmp_path / "parsed").exists()
