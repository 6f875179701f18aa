"""The README stays a first page (issue 30): under 300 lines, the reference in docs/."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_is_under_300_lines() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < 300, f"README.md has {len(lines)} lines: move detail into docs/"


def test_the_moved_references_are_linked_from_the_readme() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    for page in ("docs/job-spec.md", "docs/stack-config.md", "docs/cost-model.md", "docs/contributing.md"):
        assert f"]({page}" in text, page
