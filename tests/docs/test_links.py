"""Every relative link and ``#anchor`` in README.md and docs/*.md resolves (a file that exists, a heading
that exists in it, slugged the way GitHub slugs headings)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def prose_lines(text: str) -> list[tuple[int, str]]:
    """Lines outside fenced code blocks, with inline code spans removed (links in code are not links)."""
    out, fenced = [], False
    for no, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((no, re.sub(r"`[^`]*`", "``", line)))
    return out


def slug(heading: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped (letters, digits, ``-``, ``_`` and spaces
    kept), each space a ``-``."""
    text = re.sub(r"<[^>]+>", "", heading).strip().lower()
    text = "".join(ch for ch in text if ch.isalnum() or ch in "-_ ")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out: set[str] = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        m = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[tuple[int, str]]:
    text = path.read_text(encoding="utf-8")
    return [(no, m.group(1)) for no, line in prose_lines(text) for m in LINK.finditer(line)]


def broken(path: Path, root: Path = ROOT) -> list[str]:
    problems = []
    for no, target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(root)}:{no}: {target}"
        if not dest.exists():
            problems.append(f"{where}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{where}: no heading with anchor #{anchor} in {dest.relative_to(root)}")
    return problems


PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    assert broken(page) == []


def test_every_docs_page_is_reachable_from_the_readme() -> None:
    linked = {(ROOT / t.partition("#")[0]).resolve() for _, t in links(ROOT / "README.md") if t.startswith("docs/")}
    assert [p.name for p in PAGES[1:] if p.resolve() not in linked] == []


def test_slug_matches_githubs_rules() -> None:
    assert slug("Hub → worker reachability") == "hub--worker-reachability"
    assert slug("Live data: `placement plan --live`") == "live-data-placement-plan---live"


def test_checker_reports_a_missing_anchor_and_file(tmp_path: Path) -> None:
    page = tmp_path / "a.md"
    page.write_text("# Title\n\n[ok](#title) [bad](#nope) [gone](b.md) `[code](#x)`\n```\n[fenced](#y)\n```\n")
    assert broken(page, tmp_path) == ["a.md:3: #nope: no heading with anchor #nope in a.md",
                                      "a.md:3: b.md: no such file"]


def test_code_points_at_docs_pages_not_at_readme_sections_that_moved():
    """Messages and comments say which page to read (``docs/kueue-hub.md#placement-submit``), not a README
    section that is no longer there."""
    stale = re.compile(r"README(\.md)?(: [a-z]| \([A-Z])")
    hits = [f"{p.relative_to(ROOT)}:{no}" for folder in ("placement", "infra", "stacks", ".github", "scripts")
            for p in sorted((ROOT / folder).rglob("*")) if p.is_file() and p.suffix in (".py", ".yaml", ".yml", "")
            for no, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
            if stale.search(line)]
    assert hits == []
