"""Imports point one way: no module cycle in placement/ or infra/ (a lazy import inside a function, or one under
TYPE_CHECKING, counts), and the bottom floor (errors, numbers, readers, console) imports nothing above it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("placement", "infra")
BOTTOM_FLOOR = {  # module -> the placement modules it may import
    "placement.errors": set(),
    "placement.console": {"placement.errors"},  # the floor's other module: require_extra's UsageError
    "placement.model.numbers": {"placement.errors"},
    "placement.model.text": {"placement.errors"},
    "placement.model.contract": set(),  # what submit writes and its readers read: the trainer imports it too
}


def _modules(root: Path) -> dict[str, Path]:
    mods = {}
    for pkg in PACKAGES:
        for path in (root / pkg).rglob("*.py"):
            name = ".".join(path.relative_to(root).with_suffix("").parts)
            mods[name.removesuffix(".__init__")] = path
    return mods


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules of placement/ and infra/ it imports, anywhere in its body."""
    mods = _modules(root)
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # from . import x / from .a import b
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            edges[mod] |= {n for n in names if n in mods and n != mod}
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


def test_no_module_imports_itself_through_others() -> None:
    found = cycles(import_graph())
    assert not found, "modules that import each other:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_cycle_finder_sees_lazy_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "placement"
    pkg.mkdir()
    (tmp_path / "infra").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from placement.b import x\n")
    (pkg / "b.py").write_text("def f():\n    from placement import a\n")
    (pkg / "c.py").write_text("from . import a\n")
    assert cycles(import_graph(tmp_path)) == [["placement.a", "placement.b"]]


def test_the_bottom_floor_imports_nothing_above_it() -> None:
    edges = import_graph()
    for mod, allowed in BOTTOM_FLOOR.items():
        assert edges[mod] <= allowed, f"{mod} imports {sorted(edges[mod] - allowed)}"


# The layers of placement/ (docs/contributing.md): model <- plan <- commands, adapters beside them.
FLOOR = {"placement", "placement.errors", "placement.console", "placement.data"}
ENTRY = {"placement.__main__"}  # python -m placement: the command line

ADAPTERS = ("files", "prometheus", "live", "fleet", "dispatch", "trainer")


def _layer(mod: str) -> str:
    parts = mod.split(".")
    if mod in FLOOR or len(parts) < 2:
        return "floor"
    if mod in ENTRY:
        return "commands"
    return parts[1] if parts[1] in ("model", "plan", "commands", *ADAPTERS) else "other"


def layer_violations(edges: dict[str, set[str]]) -> list[str]:
    """Imports that run against the layers: the floor imports only the floor; the model only the floor and the
    model; the solvers (plan) only the floor, the model and plan; an adapter never a command; nothing but the
    commands imports a command."""
    allowed = {"floor": {"floor"}, "model": {"floor", "model"}, "plan": {"floor", "model", "plan"}}
    found = []
    for mod, targets in edges.items():
        if not mod.startswith("placement"):
            continue
        src = _layer(mod)
        for dst in sorted(t for t in targets if t.startswith("placement")):
            to = _layer(dst)
            if to == "other" or (src in allowed and to not in allowed[src]) or (to == "commands" and src != "commands"):
                found.append(f"{mod} -> {dst}")
    return found


def test_imports_follow_the_layers() -> None:
    bad = layer_violations(import_graph())
    assert not bad, "imports against the layers (model <- plan <- commands; adapters never import commands):\n" + \
        "\n".join(bad)


def test_every_placement_module_sits_in_a_layer() -> None:
    assert not [m for m in import_graph() if m.startswith("placement") and _layer(m) == "other"]


def test_the_layer_check_sees_an_import_running_back_up(tmp_path: Path) -> None:
    for pkg in ("placement/model", "placement/plan", "placement/commands", "placement/fleet", "infra"):
        (tmp_path / pkg).mkdir(parents=True)
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "placement/__init__.py").write_text("")
    (tmp_path / "placement/model/a.py").write_text("def f():\n    from placement.plan import b\n")
    (tmp_path / "placement/plan/b.py").write_text("from placement.model import a\n")
    (tmp_path / "placement/fleet/c.py").write_text("from placement.commands import d\n")
    (tmp_path / "placement/commands/d.py").write_text("from placement.plan import b\nfrom placement.fleet import c\n")
    assert {v for v in layer_violations(import_graph(tmp_path)) if v.endswith((".b", ".d"))} == {
        "placement.fleet.c -> placement.commands.d", "placement.model.a -> placement.plan.b"}
