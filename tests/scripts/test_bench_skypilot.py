"""scripts/bench_skypilot.py: its help, and the one line (exit 2) when SkyPilot's venv is missing. No SkyPilot is
installed here: the benchmark itself runs by hand (scripts/sky_env makes .venv-sky)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "bench_skypilot.py"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_help_exits_0_and_names_the_scenarios_and_setup():
    done = run("--help")
    assert done.returncode == 0, done.stderr
    assert "--setup" in done.stdout and "--venv" in done.stdout
    assert "16 scenarios" in done.stdout


def test_without_the_skypilot_venv_one_line_and_exit_2(tmp_path):
    missing = tmp_path / "no-venv"
    done = run("--venv", str(missing), "--repeat", "1")
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert str(missing) in lines[0] and "scripts/sky_env" in lines[0] and "--setup" in lines[0]
    assert not missing.exists()  # nothing made without --setup


def test_sky_env_never_replaces_a_folder_it_did_not_make(tmp_path: Path) -> None:
    import os

    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "keep.txt").write_text("a user's file")
    done = subprocess.run(["bash", str(ROOT / "scripts" / "sky_env")], capture_output=True, text=True, timeout=60,
                          cwd=ROOT, env={**os.environ, "GPUFLEET_SKY_VENV": str(theirs)})
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "GPUFLEET_SKY_VENV" in done.stderr and (theirs / "keep.txt").read_text() == "a user's file"
