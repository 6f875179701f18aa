"""The examples in README.md and docs/ are the code's output (scripts/docs_examples.py), and a drift is caught."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_script():
    spec = importlib.util.spec_from_file_location("docs_examples", ROOT / "scripts" / "docs_examples.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["docs_examples"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_pages_match_the_code():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "docs_examples.py"), "--check"],
                          capture_output=True, text=True, check=False, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_regenerate_replaces_only_the_marked_blocks():
    m = load_script()
    text = ("intro\n<!-- BEGIN generated: plan-table -->\nstale\n<!-- END generated: plan-table -->\noutro\n")
    new = m.regenerate(text, lambda ex: f"ran {' '.join(ex.argv)}\n")
    assert new == ("intro\n<!-- BEGIN generated: plan-table -->\nran plan placement/examples/job.yaml --top 2\n"
                   "<!-- END generated: plan-table -->\noutro\n")
    assert m.regenerate(new, lambda ex: f"ran {' '.join(ex.argv)}\n") == new


def test_unknown_block_name_is_an_error():
    m = load_script()
    with pytest.raises(SystemExit, match="unknown generated block 'nope'"):
        m.regenerate("<!-- BEGIN generated: nope -->\n<!-- END generated: nope -->\n", lambda ex: "", "x.md")


def test_every_example_is_used_on_some_page():
    m = load_script()
    text = "".join(p.read_text() for p in m.pages(ROOT))
    assert [n for n in m.EXAMPLES if f"<!-- BEGIN generated: {n} -->" not in text] == []


def test_json_example_shows_money_as_the_json_has_it(capsys):
    import json
    import re

    from placement.commands.main import main

    text = (ROOT / "docs" / "placement.md").read_text()
    block = re.search(r"<!-- BEGIN generated: plan-json -->\n```json\n(.*?)```", text, re.S)
    assert block
    shown = json.loads(block.group(1))
    assert main(["plan", str(ROOT / "placement/examples/job.yaml"), "--top", "1", "--json"]) == 0
    assert shown["chosen"] == json.loads(capsys.readouterr().out)["chosen"]
