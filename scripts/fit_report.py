#!/usr/bin/env python3
"""Print the cost model against its MLPerf measurements (every point with its error, a summary line per curve),
or write it into docs/cost-model-fit.md.

The tables come from placement.model.physics_data.fit_report (the speeds, the scaling fit, the held-out points, Daly
against the first-order formula); the page keeps them between <!-- BEGIN fit-report --> and
<!-- END fit-report -->, and a test fails when they differ from the data.

Usage: scripts/fit_report.py [--write | --check]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _venv  # noqa: E402

PAGE = _venv.ROOT / "docs" / "cost-model-fit.md"
BLOCK = re.compile(r"(<!-- BEGIN fit-report -->\n)(.*?)(<!-- END fit-report -->)", re.S)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help=f"replace the block in {PAGE.name}")
    mode.add_argument("--check", action="store_true", help=f"exit 1 when {PAGE.name} differs from the data")
    args = parser.parse_args()
    _venv.ensure("yaml", extra="")
    sys.path.insert(0, str(_venv.ROOT))
    from placement.model.physics_data import fit_report

    report = fit_report()
    if not (args.write or args.check):
        print(report, end="")
        return 0
    old = PAGE.read_text(encoding="utf-8")
    new = BLOCK.sub(lambda m: m.group(1) + report + m.group(3), old)
    if args.check:
        if new != old:
            print(f"{PAGE.name} is stale: run scripts/fit_report.py --write", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
