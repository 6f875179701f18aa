#!/usr/bin/env python3
"""Time from a fresh clone to a green suite, as a new user gets it: clone HEAD (or --rev) into a temporary
directory, then in an empty shell (env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=$HOME) run the README's quick
start, ./scripts/demo then ./scripts/test, printing each command's wall time and each set-up step it reported.

Usage: scripts/bench_setup.py [--cold] [--suite] [--rev REV] [--keep]
  --cold   empty caches, as on a new machine: uv's download cache (UV_CACHE_DIR), pip's and the pinned uv
           itself (XDG_CACHE_HOME)
  --suite  ./scripts/test runs the whole suite (minutes); default: one small test file, to time the set-up
  --rev    clone that revision instead of HEAD (e.g. one before the locked set-up, to compare)
Only the standard library: it runs under any Python 3.11+, without .venv (it measures making one).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _bench

ROOT = Path(__file__).resolve().parents[1]
QUICK_TEST = "tests/placement/model/test_data.py"  # what scripts/newcomer runs in CI: small, needs the dev extra


def run(cmd: str, cwd: Path, env: dict[str, str]) -> tuple[int, float, str, str]:
    """(exit code, wall seconds, stdout, stderr) of ``bash -c cmd`` in ``cwd`` with exactly ``env``."""
    start = time.monotonic()
    proc = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    return proc.returncode, time.monotonic() - start, proc.stdout, proc.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cold", action="store_true", help="empty uv, pip and tool caches (a new machine)")
    parser.add_argument("--suite", action="store_true", help="run the whole suite, not one small test file")
    parser.add_argument("--rev", default="HEAD", help="the revision to clone (default HEAD)")
    parser.add_argument("--keep", action="store_true", help="keep the clone and caches; print where")
    args = parser.parse_args()
    print(_bench.machine_line())
    tmp = Path(tempfile.mkdtemp(prefix="gpufleet-bench-setup."))
    try:
        clone = tmp / "gpufleet"
        start = time.monotonic()
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        subprocess.run(["git", "-C", str(clone), "checkout", "-q", "--detach", args.rev], check=True)
        print(f"git clone: {time.monotonic() - start:.1f} s")
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", str(tmp)), "TERM": "dumb"}
        if args.cold:
            env["UV_CACHE_DIR"] = str(tmp / "uv-cache")
            env["XDG_CACHE_HOME"] = str(tmp / "xdg-cache")
        test = "./scripts/test" if args.suite else f"./scripts/test {QUICK_TEST}"
        total = 0.0
        for cmd in ("./scripts/demo", test):
            code, seconds, out, err = run(cmd, clone, env)
            total += seconds
            print(f"{cmd}: {seconds:.1f} s (exit {code})")
            for line in err.splitlines():
                if line.startswith(("setup: ", "setting up")):
                    print(f"    {line}")
            if code != 0:
                print("\n".join((out + err).splitlines()[-20:]), file=sys.stderr)
                print(f"bench_setup: {cmd} failed (exit {code})", file=sys.stderr)
                return 1
            if cmd == test:
                closing = [line for line in out.splitlines() if " passed" in line or " failed" in line]
                print(f"    pytest: {closing[-1].strip('= ') if closing else '(no summary line)'}")
        what = "green suite" if args.suite else f"set-up and {QUICK_TEST}"
        print(f"fresh clone to {what}: {total:.1f} s ({'cold' if args.cold else 'warm'} caches)")
        return 0
    finally:
        if args.keep:
            print(f"kept: {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
