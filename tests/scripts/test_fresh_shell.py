"""Every scripts/* entry point answers --help from a fresh shell (no venv activated, a bare PATH), and a
script whose setup is missing says the command that fixes it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENTRY_POINTS = sorted(p for p in (ROOT / "scripts").iterdir()
                      if p.is_file() and not p.name.startswith("_") and os.access(p, os.X_OK))
FRESH = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp")}


def test_every_script_is_an_executable_entry_point():
    not_executable = [p.name for p in (ROOT / "scripts").iterdir()
                      if p.is_file() and not p.name.startswith("_") and not os.access(p, os.X_OK)]
    assert not_executable == []


@pytest.mark.skipif(not (ROOT / ".venv" / "bin" / "python").exists(), reason="needs the quick start's .venv")
@pytest.mark.skipif(shutil.which("python3", path=FRESH["PATH"]) is None, reason="no python3 on /usr/bin:/bin")
@pytest.mark.parametrize("script", ENTRY_POINTS, ids=lambda p: p.name)
def test_help_from_a_fresh_shell(script: Path):
    proc = subprocess.run([str(script), "--help"], env=FRESH, cwd="/", capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "usage" in (proc.stdout + proc.stderr).lower()


def test_missing_setup_names_the_command_that_fixes_it(tmp_path: Path):
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "_venv.py", tmp_path / "scripts" / "_venv.py")
    script = tmp_path / "scripts" / "needs.py"
    script.write_text("import _venv\n_venv.ensure('gpufleet_no_such_module', extra='infra')\nprint('ran')\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "gpufleet_no_such_module not importable" in proc.stderr
    assert "`./scripts/test`" in proc.stderr and "`./scripts/extra infra`" in proc.stderr
    assert proc.stderr.count("\n") == 1
