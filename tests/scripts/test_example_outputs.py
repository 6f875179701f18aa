"""placement/examples/stacks-outputs.json is what the stacks in stacks/ export under mocks (no drift)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_example_stack_outputs_match_the_stacks():
    pytest.importorskip("pulumi")
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "example_outputs.py"), "--check"],
                          capture_output=True, text=True, check=False, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr


def test_example_outputs_lists_every_stack_file():
    import json

    doc = json.loads((ROOT / "placement" / "examples" / "stacks-outputs.json").read_text())
    assert sorted(doc) == sorted(p.name[len("Pulumi."):-len(".yaml")] for p in (ROOT / "stacks").glob("Pulumi.*.yaml"))
