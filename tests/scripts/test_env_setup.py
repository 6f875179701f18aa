"""The locked set-up (scripts/_env.sh, sourced by scripts/demo, scripts/test and scripts/preview): it installs
uv.lock with the pinned uv only when uv.lock or pyproject.toml changed, says each step and its time, and a
failure ends in one line naming the command that fixes it. uv is a stand-in here that records its arguments;
uv.lock itself is checked against pyproject.toml's requirements."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]

FAKE_UV = r"""#!/usr/bin/env bash
echo "$*" >> "$FAKE_UV_CALLS"
case "$1" in
  venv) mkdir -p .venv/bin && ln -sf "$FAKE_PYTHON" .venv/bin/python ;;
  sync)
    case "${FAKE_UV_MODE:-ok}" in
      stale) echo "error: The lockfile at \`uv.lock\` needs to be updated, but --locked was provided." >&2; exit 2 ;;
      fail) echo "error: Failed to fetch: \`https://example.invalid/simple/pyyaml/\`" >&2; exit 2 ;;
    esac
    echo "Resolved 132 packages in 9ms" >&2
    echo "Prepared 3 packages in 1.50s" >&2
    echo "Installed 3 packages in 12ms" >&2
    echo " + pyyaml==6.0.4" >&2 ;;
esac
"""


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A checkout with the set-up scripts, a pyproject.toml and a uv.lock (contents beside the point)."""
    (tmp_path / "scripts").mkdir()
    for name in ("_env.sh", "_uv.sh"):
        shutil.copy(ROOT / "scripts" / name, tmp_path / "scripts" / name)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    (tmp_path / "uv.lock").write_text("version = 1\n")
    uv = tmp_path / "fake-uv"
    uv.write_text(FAKE_UV)
    uv.chmod(0o755)
    return tmp_path


def setup(checkout: Path, extra: str, mode: str = "ok") -> tuple[int, list[str], str]:
    """Run the set-up for ``extra``: (exit code, the uv calls made, stderr)."""
    calls = checkout / "calls"
    calls.write_text("")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(checkout), "PYTHON": sys.executable,
           "GPUFLEET_UV": str(checkout / "fake-uv"), "FAKE_UV_CALLS": str(calls), "FAKE_UV_MODE": mode,
           "FAKE_PYTHON": sys.executable}
    proc = subprocess.run(["bash", "scripts/_env.sh", extra], cwd=checkout, env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    return proc.returncode, calls.read_text().splitlines(), proc.stderr


def test_first_run_installs_the_lock_and_says_each_step_with_its_time(checkout: Path) -> None:
    code, calls, err = setup(checkout, "dev")
    assert code == 0, err
    assert calls[0].startswith("venv ") and calls[1] == "sync --locked --extra dev"
    lines = err.splitlines()
    assert len(lines) == 2 and all(line.startswith("setup: ") and line.endswith(" s") for line in lines)
    assert "uv sync --locked --extra dev" in lines[1] and "installed 3 in 12ms" in lines[1]


def test_setup_runs_again_only_when_the_lock_or_pyproject_changes(checkout: Path) -> None:
    assert setup(checkout, "dev")[0] == 0
    assert setup(checkout, "dev")[1:] == ([], "")
    assert setup(checkout, "")[1:] == ([], "")  # dev includes every extra: the demo needs nothing more
    (checkout / "uv.lock").write_text("version = 1\n# upgraded\n")
    assert setup(checkout, "dev")[1] == ["sync --locked --extra dev"]  # .venv is kept, the lock re-synced
    (checkout / "pyproject.toml").write_text('[project]\nname = "x"\nversion = "2"\n')
    assert setup(checkout, "dev")[1] == ["sync --locked --extra dev"]


def test_a_smaller_extra_adds_to_what_is_installed(checkout: Path) -> None:
    code, calls, _ = setup(checkout, "")
    assert code == 0 and calls[1] == "sync --locked --inexact"
    assert setup(checkout, "infra")[1] == ["sync --locked --extra infra --inexact"]
    assert setup(checkout, "")[1] == []  # the CLI's own install is still recorded as done


def test_a_lock_behind_pyproject_names_the_command_that_refreshes_it(checkout: Path) -> None:
    code, _, err = setup(checkout, "dev", mode="stale")
    assert code == 2
    assert err.splitlines()[-1] == ("setup: uv.lock does not match pyproject.toml; run scripts/lock (keeps every "
                                    "other pin) and commit uv.lock")
    assert "Traceback" not in err


def test_a_failed_install_shows_uv_and_ends_in_one_line(checkout: Path) -> None:
    code, _, err = setup(checkout, "dev", mode="fail")
    assert code == 1
    assert "Failed to fetch" in err  # uv's own account, above
    assert err.splitlines()[-1].startswith("setup: installing from uv.lock failed")
    assert not list(checkout.glob(".venv/.installed-*"))  # nothing recorded as done: the next run tries again
    assert setup(checkout, "dev")[1] == ["sync --locked --extra dev"]


def test_an_old_python_is_refused_with_the_variable_that_picks_another(checkout: Path) -> None:
    old = checkout / "python3.9"
    old.write_text('#!/bin/sh\n[ "$1" = --version ] && echo "Python 3.9.18"\nexit 1\n')
    old.chmod(0o755)
    for python in (str(old), "no-such-python"):
        env = {"PATH": "/usr/bin:/bin", "HOME": str(checkout), "PYTHON": python}
        proc = subprocess.run(["bash", "scripts/_env.sh", "dev"], cwd=checkout, env=env, capture_output=True,
                              text=True, timeout=60, check=False)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert "set PYTHON=" in proc.stderr
    assert "(found: no no-such-python)" in proc.stderr


def _requirements(items: list[dict[str, object]]) -> set[tuple[str, tuple[str, ...], str, str]]:
    """uv.lock's requires-dist rows as (name, extras, specifier, marker), normalised like packaging does."""
    out = set()
    for row in items:
        text = f"{row['name']}[{','.join(row.get('extras', []))}]{row.get('specifier', '')}"  # type: ignore[arg-type]
        if "marker" in row:
            text += f"; {row['marker']}"
        out.add(_key(Requirement(text)))
    return out


def _key(req: Requirement) -> tuple[str, tuple[str, ...], str, str]:
    name = req.name.lower().replace("_", "-").replace(".", "-")
    return name, tuple(sorted(req.extras)), str(req.specifier), str(req.marker or "")


def test_the_lock_matches_pyproject_and_covers_every_extra() -> None:
    # What `uv sync --locked` checks first; fails when pyproject.toml changed without `scripts/lock`.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    locked = next(p for p in lock["package"] if p["name"] == project["name"])
    wanted = {_key(Requirement(r)) for r in project["dependencies"]}
    for extra, reqs in project["optional-dependencies"].items():
        wanted |= {_key(Requirement(f"{r}; extra == '{extra}'")) for r in reqs}
    assert locked["metadata"]["provides-extras"] == list(project["optional-dependencies"])
    assert _requirements(locked["metadata"]["requires-dist"]) == wanted, "run scripts/lock and commit uv.lock"
    assert lock["requires-python"] == project["requires-python"]



VENV = ROOT / ".venv"


@pytest.mark.skipif(not any(VENV.glob(".installed-dev-*")) and not any(VENV.glob(".installed-infra-*")),
                    reason="needs .venv with the infra extra (./scripts/test)")
def test_pulumi_can_list_the_venvs_packages_with_pip() -> None:
    # Pulumi.yaml's `toolchain: pip` runs exactly this in .venv to find the plugins the program needs; uv makes
    # venvs without pip, so the infra extra brings it.
    import json

    proc = subprocess.run([str(VENV / "bin" / "python"), "-m", "pip", "list", "-v", "--format", "json"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-500:]
    names = {p["name"].lower().replace("_", "-") for p in json.loads(proc.stdout)}
    assert {"pulumi", "pulumi-aws", "pulumi-gcp", "pulumi-kubernetes", "pulumi-policy"} <= names
