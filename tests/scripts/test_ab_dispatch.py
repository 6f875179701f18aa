"""scripts/ab_dispatch.py: the dispatch target's before/after, alternating checkouts; one line and exit 2 for a bad
--root, a figure per checkout otherwise."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "ab_dispatch.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300,
                          check=False)


def test_no_checkout_to_compare_with_is_one_line_and_exit_2(tmp_path):
    for args in ((), ("--root", str(tmp_path))):
        out = _run(*args)
        assert out.returncode == 2, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1 and "--root" in out.stderr and "Traceback" not in out.stderr
        assert out.stdout == ""


def test_each_checkout_gets_its_median_and_the_deferred_collection():
    out = _run("--root", str(ROOT), "--rounds", "1", "--passes", "1", "--workers", "3")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0].startswith("measured ") and "1 rounds x 1 passes, 3 workers" in lines[1]
    assert lines[2].startswith("this checkout: median ") and lines[3].startswith(f"{ROOT}: median ")
    assert all("s collecting after the decisions" in line for line in lines[2:4])
