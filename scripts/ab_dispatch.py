#!/usr/bin/env python3
"""The dispatch pass of issue 33's target, this checkout against others, alternating: a before/after on a shared
machine, where the same code's CPU time varies by up to 1.6x within minutes.

Each round starts one process per checkout (this one first, then each ``--root``), in turn; each process runs
``--passes`` target passes (1,000 waiting Workloads, 100 malformed, ``--workers`` workers) with that checkout's own
``scripts/bench_dispatch.py`` and the collector settings ``placement dispatch`` runs with there (``tune_gc``, and
no collection while deciding where the checkout has ``gcsettings.deciding``). Prints per checkout the median, the
quartiles and the extremes of every pass's CPU seconds, and the collection deferred to the carry-out; a pass that
does not nominate every good Workload and report every bad one fails the run (exit 1).

    python scripts/ab_dispatch.py --root /tmp/before [--rounds 8] [--passes 5] [--workers 20]

A checkout to compare with: ``git worktree add --detach /tmp/before <rev>`` (remove it after). Every checkout runs
under this script's interpreter (its ``.venv``), so only the code differs.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _bench  # noqa: E402
import _venv  # noqa: E402

HERE = Path(__file__).resolve().parents[1]


def child(root: str, workers: int, passes: int) -> None:
    """One process: ``passes`` target passes of the checkout at ``root``; one JSON line on stdout."""
    sys.path[:0] = [str(Path(root) / "scripts"), root]
    import bench_dispatch as bench  # the checkout's own (its scripts/ first on sys.path)

    from placement.dispatch.gcsettings import tune_gc
    from placement.dispatch.model import Pricing
    from placement.model.catalog import embedded_catalog

    pricing = Pricing(tuple(embedded_catalog().offers))
    tune_gc()
    paused = "paused" in inspect.signature(bench.hostile_pass).parameters
    rows = [bench.hostile_pass(bench.TARGET_WORKLOADS, bench.TARGET_MALFORMED, workers, pricing,
                               *((True,) if paused else ())) for _ in range(passes)]
    ok = all(r[1] == r[3] and r[2] == bench.TARGET_MALFORMED for r in rows)
    print(json.dumps({"root": root, "ok": ok, "cpu": [r[4] for r in rows],
                      "deferred": [r[5] for r in rows] if paused else []}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", action="append", default=[], metavar="DIR", help="another checkout (repeatable)")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--passes", type=int, default=5, help="passes per process")
    ap.add_argument("--workers", type=int, default=20)
    ap.add_argument("--child", nargs=3, metavar=("ROOT", "WORKERS", "PASSES"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]), int(args.child[2]))
        return 0
    if not args.root:
        print("ab_dispatch: error: --root: give at least one other checkout to compare with", file=sys.stderr)
        return 2
    roots = [str(HERE), *(str(Path(r).resolve()) for r in args.root)]
    for r in roots[1:]:
        if not (Path(r) / "scripts" / "bench_dispatch.py").is_file():
            print(f"ab_dispatch: error: --root {r}: no scripts/bench_dispatch.py there; give a checkout of this "
                  "repository", file=sys.stderr)
            return 2
    print(_bench.machine_line())
    cpu: list[list[float]] = [[] for _ in roots]  # by place in ``roots`` (a checkout may be given twice)
    deferred: list[list[float]] = [[] for _ in roots]
    loads: list[float] = []
    failed = False
    for _ in range(args.rounds):
        for i, r in enumerate(roots):
            loads.append(os.getloadavg()[0])
            out = subprocess.run([sys.executable, __file__, "--child", r, str(args.workers), str(args.passes)],
                                 capture_output=True, text=True, check=False, cwd=r)
            if out.returncode != 0:
                print(f"ab_dispatch: {r}: exit {out.returncode}: {out.stderr.strip().splitlines()[-1:]}",
                      file=sys.stderr)
                return 1
            doc = json.loads(out.stdout.strip().splitlines()[-1])
            failed |= not doc["ok"]
            cpu[i] += doc["cpu"]
            deferred[i] += doc["deferred"]
    print(f"{args.rounds} rounds x {args.passes} passes, {args.workers} workers, 1,000 Workloads (100 malformed); "
          f"load average (1 min) {min(loads):.2f}-{max(loads):.2f}")
    for i, r in enumerate(roots):
        xs = cpu[i]
        q1, _, q3 = statistics.quantiles(xs, n=4) if len(xs) > 1 else (xs[0], 0.0, xs[0])
        later = (f"; then {statistics.median(deferred[i]):.3f} s collecting after the decisions" if deferred[i]
                 else "; no pause while deciding")
        print(f"{'this checkout' if i == 0 else r}: median {statistics.median(xs):.3f} s cpu (quartiles "
              f"{q1:.3f}-{q3:.3f}, {min(xs):.3f}-{max(xs):.3f}, n={len(xs)}){later}")
    if failed:
        print("ab_dispatch: a pass did not nominate every good Workload or report every bad one", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    _venv.ensure("yaml", "highspy", extra="")
    sys.exit(main())
