#!/usr/bin/env python3
"""The stack-config sweep (tests/infra/test_config_sweep.py): how many cases it runs and how long; asserts nothing.

  1. exhaustive: every value of every stack in stacks/ replaced by each of the sweep's broken values, parsed
     and (when accepted) planned; cases, accepted / refused, median time
  2. hypothesis: the random 1-3-mutation test at its configured number of examples; median time

Usage: scripts/bench_config_sweep.py [--repeat N]   (from any shell: it runs itself under .venv)
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _bench  # noqa: E402
import _venv  # noqa: E402


def _sweep() -> ModuleType:
    sys.path.insert(0, str(REPO))
    spec = importlib.util.spec_from_file_location("config_sweep", REPO / "tests" / "infra" / "test_config_sweep.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    _venv.ensure("yaml", "pulumi", "hypothesis", extra="dev")
    print(_bench.machine_line())
    sweep = _sweep()

    cases = list(sweep.exhaustive_cases())
    samples, accepted = [], 0
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        accepted = sum(sweep.parses_or_names_a_key(sweep.mutated(sweep.STACKS[name], path, value), name)
                       for name, path, value in cases)
        samples.append(time.perf_counter() - t0)
    paths = sum(len(p) for p in sweep.PATHS.values())
    print(f"exhaustive: {len(sweep.STACKS)} stacks, {paths} value paths x {len(sweep.BROKEN)} broken values = "
          f"{len(cases)} cases ({accepted} accepted, {len(cases) - accepted} refused with a config error); "
          f"median {statistics.median(samples):.2f} s ({len(cases) / statistics.median(samples):,.0f} cases/s)")

    test = sweep.test_random_mutations_parse_or_name_a_key
    examples = sweep.MAX_EXAMPLES
    samples = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        test()
        samples.append(time.perf_counter() - t0)
    print(f"hypothesis: {examples} examples of 1-3 mutations each; median {statistics.median(samples):.2f} s")


if __name__ == "__main__":
    main()
