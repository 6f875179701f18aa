#!/usr/bin/env python3
"""Size and time of the input fuzz test (tests/placement/test_fuzz.py): how many hostile job specs, quota
files and catalogs the CLI is run on, how they ended (exit 0 / 1 / 2), and the wall time.

    python scripts/bench_fuzz.py [--examples 2500] [--runs 1]

``--examples`` is the plan test's example count (plan-batch gets a sixth, the parsers test a quarter); the suite
runs the default, 2500.
Prints one line per run and the median wall time.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _bench  # noqa: E402
import _venv  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=2500)
    ap.add_argument("--runs", type=int, default=1)
    args = ap.parse_args()
    _venv.ensure("yaml", "hypothesis", "pytest", extra="dev")
    print(_bench.machine_line())
    env = {**os.environ, "PLACEMENT_FUZZ_EXAMPLES": str(args.examples)}
    times = []
    for run in range(args.runs):
        start = time.perf_counter()
        cmd = [sys.executable, "-m", "pytest", "-q", "tests/placement/test_fuzz.py", "--hypothesis-show-statistics"]
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        took = time.perf_counter() - start
        times.append(took)
        if proc.returncode != 0:
            failures = proc.stdout.split("= FAILURES =", 1)[-1].split("short test summary info", 1)[0]
            print(failures[-6000:], proc.stderr[-2000:], sep="\n")
            return proc.returncode
        parts = []
        for name, body in re.findall(r"::(test_\w+):(.*?)(?=::test_|\Z)", proc.stdout, re.S):
            cases = sum(int(n) for n in re.findall(r"(\d+) passing", body))
            exits = ", ".join(f"exit {c} {p}" for p, c in re.findall(r"([\d.]+%), exit (\d)", body))
            label = name.removeprefix("test_").split("_never")[0].split("_raise")[0]
            parts.append(f"{label}: {cases} cases" + (f" ({exits})" if exits else ""))
        print(f"run {run + 1}: {took:.1f} s (pytest incl. start-up); " + "; ".join(parts))
    print(f"median: {statistics.median(times):.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
