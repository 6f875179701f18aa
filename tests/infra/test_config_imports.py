"""infra/config/ is importable without Pulumi, and its modules import one another in one direction only, as their
docstrings say: ``fields`` at the bottom, the section modules above it, ``stack`` (the entry point) on top; from
``placement`` only its errors and pure model."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "infra" / "config"
MODULES = sorted("infra.config" if p.name == "__init__.py" else f"infra.config.{p.stem}" for p in PACKAGE.glob("*.py"))

# module -> the modules of infra/config/ it may import (each module's docstring says the same in words).
SIBLINGS = {
    "infra.config.fields": set(),
    "infra.config.network": {"fields"},
    "infra.config.link": {"fields"},
    "infra.config.dispatch": {"fields"},
    "infra.config.kueue": {"fields"},
    "infra.config.storage": {"fields"},
    "infra.config.tags": {"fields"},
    "infra.config.pools": {"fields"},
    "infra.config.cluster": {"fields", "network", "link"},
    "infra.config.hub": {"fields", "network", "dispatch", "link"},
    "infra.config.stack": {"fields", "network", "link", "dispatch", "kueue", "storage", "tags", "pools", "cluster",
                           "hub"},
    "infra.config": {"fields", "stack"},
}


def _imports(path: Path) -> set[str]:
    """Every module a file imports, at the top or inside a function (``from a import b`` counts as ``a``)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
    return out


def test_no_config_module_imports_pulumi_at_import_time() -> None:
    """Importing every module of the package in a fresh interpreter loads no Pulumi SDK (``from_pulumi`` imports
    it when called, inside a Pulumi program)."""
    code = ("import importlib, sys\n"
            f"for name in {MODULES!r}:\n"
            "    importlib.import_module(name)\n"
            "print(','.join(sorted({m.split('.')[0] for m in sys.modules if m.split('.')[0].startswith('pulumi')})))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "", f"importing infra/config/ loaded {done.stdout.strip()}"


def test_every_module_says_what_it_owns_and_may_import() -> None:
    for path in PACKAGE.glob("*.py"):
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        assert path.name == "__init__.py" or "May import:" in doc, f"{path.name}: no 'May import:' in its docstring"
        assert doc, f"{path.name} has no docstring"


def test_config_modules_import_one_another_one_way() -> None:
    assert set(SIBLINGS) == set(MODULES), "a module of infra/config/ is missing from SIBLINGS (or gone)"
    for path in PACKAGE.glob("*.py"):
        name = "infra.config" if path.name == "__init__.py" else f"infra.config.{path.stem}"
        imported = _imports(path)
        siblings = {m.removeprefix("infra.config.") for m in imported if m.startswith("infra.config.")}
        assert siblings <= SIBLINGS[name], f"{name} imports {sorted(siblings - SIBLINGS[name])}"
        assert "infra.config" not in imported, f"{name} imports the package itself (a cycle through __init__)"
        other_infra = {m for m in imported if m.startswith("infra.") and not m.startswith("infra.config")}
        assert not other_infra, f"{name} imports {sorted(other_infra)}: infra/config/ is below the rest of infra/"
        # From placement/, only the floor's errors and the pure model (shapes, zones, catalog): no solver,
        # command or adapter, so parsing a stack's config does no I/O beyond reading packaged data.
        adapters = {m for m in imported if m.startswith("placement") and m != "placement.errors"
                    and not m.startswith("placement.model.")}
        assert not adapters, f"{name} imports {sorted(adapters)}: only placement.errors and placement.model.*"
