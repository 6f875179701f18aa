#!/usr/bin/env python3
"""Regenerate the examples in README.md and docs/*.md from the code, or check that they are current.

Each example sits between marker comments and is the output of one command, run from the repository root
with COLUMNS=100 and an empty user data and cache directory (so a catalog written by `placement refresh` on
this machine cannot change it):

    <!-- BEGIN generated: plan-table -->
    ```text
    $ placement plan placement/examples/job.yaml --top 3
    ...output...
    ```
    <!-- END generated: plan-table -->

A block may instead be a function's source, read from the code (``Source``: the contract's example trainer in
docs/trainer-contract.md is ``placement.trainer.loop.train``), or the output of another module of the package
(``Example(module=...)``, e.g. ``python -m placement.trainer --help``).

Usage: scripts/docs_examples.py [--check]   (--check: exit 1, with a diff, when a page differs from the code)
"""

from __future__ import annotations

import argparse
import ast
import difflib
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _venv  # noqa: E402

JOB = "placement/examples/job.yaml"
STACKS = "placement/examples/stacks-outputs.json"


@dataclass(frozen=True)
class Example:
    """One generated block: the ``placement`` arguments, the fence language, which streams to show (stderr
    from its first line starting with ``stderr_from``, ``""``: all of it) and how many lines of stdout
    (``None``: all)."""

    argv: tuple[str, ...]
    lang: str = "text"
    stderr_from: str | None = None
    stdout: bool = True
    head: int | None = None
    module: str = "placement"  # python -m <module>; shown as `placement` for the CLI itself


@dataclass(frozen=True)
class Source:
    """One generated block that is the source of function ``name`` in ``path`` (relative to the root),
    exactly as it is in the code, under a comment naming where it comes from."""

    path: str
    name: str


EXAMPLES: dict[str, Example | Source] = {
    "plan-table": Example(("plan", JOB, "--top", "2")),
    # --now (not shown: a JSON block has no prompt line): the document says whether each catalog is stale, which
    # depends on the day it is generated
    "plan-json": Example(("plan", JOB, "--top", "1", "--json", "--now", "2026-11-30T00:00:00Z"), lang="json"),
    "plan-batch": Example(("plan-batch", "placement/examples/batch.yaml", "--quotas", "placement/examples/quotas.csv",
                           "--no-schedule")),
    "plan-batch-schedule": Example(("plan-batch", "placement/examples/burst.yaml", "--quotas",
                                    "placement/examples/burst-quotas.csv", "--now", "2026-11-30T00:00:00Z")),
    # --time-limit 60: HiGHS's limit is wall time, and a loaded machine must not stop a solve this page shows
    "portfolio": Example(("portfolio", "placement/examples/forecast.yaml", "--quotas",
                          "placement/examples/quotas.csv", "--time-limit", "60")),
    "offers": Example(("offers", "--accelerator", "H200", "--cloud", "gcp", "--capacity", "spot")),
    "no-runnable": Example(("plan", "placement/examples/l4-on-gcp.yaml")),
    "submit-dry-run": Example(("submit", JOB, "--stacks", STACKS, "--dry-run"), stderr_from="chosen:", head=6),
    "submit-via-hub": Example(("submit", JOB, "--stacks", STACKS, "--dry-run", "--via-hub"), stderr_from="",
                              stdout=False),
    "trainer-loop": Source("placement/trainer/loop.py", "train"),
    "trainer-help": Example(("--help",), module="placement.trainer"),
    "launcher-help": Example(("--help",), module="placement.trainer.launch"),
}

BLOCK = re.compile(r"(<!-- BEGIN generated: (?P<name>[a-z0-9-]+) -->\n)(?P<body>.*?)(<!-- END generated: "
                   r"(?P=name) -->)", re.S)

Runner = Callable[[Example | Source], str]


def source_block(src: Source, root: Path | None = None) -> str:
    """The fenced source of top-level function ``src.name`` in ``src.path`` (decorators included)."""
    text = ((root or _venv.ROOT) / src.path).read_text(encoding="utf-8")
    for node in ast.parse(text).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == src.name:
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            lines = text.splitlines()[start - 1:node.end_lineno]
            return "\n".join(["```python", f"# {src.path}: {src.name}()", *lines, "```"]) + "\n"
    raise SystemExit(f"docs_examples: {src.path} has no top-level function {src.name!r}")


def run_example(example: Example | Source) -> str:
    """The block's text: the command line, then what it printed (stderr first: the table and the summary);
    for a :class:`Source`, the function's code."""
    if isinstance(example, Source):
        return source_block(example)
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "COLUMNS": "100", "XDG_DATA_HOME": f"{home}/data", "XDG_CACHE_HOME": f"{home}/cache",
               "PYTHONPATH": str(_venv.ROOT)}
        proc = subprocess.run([sys.executable, "-m", example.module, *example.argv], cwd=_venv.ROOT, env=env,
                              capture_output=True, text=True, check=False)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"docs_examples: `{example.module} {' '.join(example.argv)}` exited {proc.returncode}: "
                         f"{proc.stderr.strip()}")
    out = []
    if example.stderr_from is not None:
        err = proc.stderr.rstrip("\n").splitlines()
        start = next((i for i, line in enumerate(err) if line.startswith(example.stderr_from)), 0)
        out += err[start:]
    if example.stdout:
        lines = proc.stdout.rstrip("\n").splitlines()
        if example.head is not None and len(lines) > example.head:
            lines = [*lines[:example.head], f"... ({len(lines) - example.head} more lines)"]
        out += lines
    program = "placement" if example.module == "placement" else f"python -m {example.module}"
    command = program + " " + " ".join(example.argv)
    prompt = [] if example.lang == "json" else [f"$ {command}"]
    return "\n".join([f"```{example.lang}", *prompt, *out, "```"]) + "\n"


def regenerate(text: str, runner: Runner, where: str = "") -> str:
    """``text`` with every generated block replaced by ``runner``'s output; an unknown block name is an error."""

    def block(m: re.Match[str]) -> str:
        name = m.group("name")
        if name not in EXAMPLES:
            raise SystemExit(f"docs_examples: {where}: unknown generated block {name!r} (known: "
                             f"{', '.join(EXAMPLES)})")
        return m.group(1) + runner(EXAMPLES[name]) + m.group(4)

    return BLOCK.sub(block, text)


def pages(root: Path) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 with a diff")
    args = parser.parse_args()
    _venv.ensure("yaml", "highspy", extra="")
    cache: dict[Example | Source, str] = {}

    def runner(example: Example | Source) -> str:
        if example not in cache:
            cache[example] = run_example(example)
        return cache[example]

    stale = []
    for page in pages(_venv.ROOT):
        old = page.read_text(encoding="utf-8")
        rel = str(page.relative_to(_venv.ROOT))
        new = regenerate(old, runner, rel)
        if new == old:
            continue
        stale.append(rel)
        if args.check:
            diff = difflib.unified_diff(old.splitlines(True), new.splitlines(True), rel, f"{rel} (code)")
            sys.stdout.writelines(diff)
        else:
            page.write_text(new, encoding="utf-8")
            print(f"docs_examples: updated {rel}")
    if args.check and stale:
        print(f"docs_examples: {', '.join(stale)} differ from the code's output; run `scripts/docs_examples.py`",
              file=sys.stderr)
        return 1
    if args.check:
        print(f"docs_examples: {len(cache)} examples current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
