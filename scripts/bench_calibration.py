#!/usr/bin/env python3
"""Benchmarks for calibration (issue 26); prints figures (medians), asserts nothing.

  1. `placement calibrate --samples FILE` in-process over 90 days of exported samples (hourly points, the
     /api/v1/query_range JSON) of 40 workers x 20 pool/zone pairs: gpufleet_spot_node_seconds_total and
     gpufleet_spot_reclaims_total, 1,600 series, 3.5 million points, one counter reset per series (a dispatcher
     restart): reading, parsing and counting, and writing the file               (target <= 2 s)
  2. `placement plan JOB --json` in-process with a 10,000-row calibration file (rows on the embedded catalog's
     zones and instance types, the rest made up) against the same plan with --no-calibration, alternating
     (target: within 1.2x)

Usage: scripts/bench_calibration.py [--repeat N] [--only calibrate|plan]...   (runs itself under .venv)
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _bench  # noqa: E402
import _venv  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DAYS, STEP_S, WORKERS, PAIRS = 90, 3600, 40, 20


CPU: list[float] = []  # process CPU seconds of each timed run: less moved by other work on a loaded machine


def timed(fn: Callable[[], Any], repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        out.append(time.perf_counter() - t0)
        CPU.append(time.process_time() - c0)
    return out


def samples_file(path: Path) -> int:
    """Write the 90-day export; return its number of points."""
    rng = random.Random(26)
    end = 1_795_000_000
    start = end - DAYS * 86400
    times = list(range(start, end + 1, STEP_S))
    docs = []
    points = 0
    for name in ("gpufleet_spot_node_seconds_total", "gpufleet_spot_reclaims_total"):
        result = []
        for w in range(WORKERS):
            for p in range(PAIRS):
                labels = {"__name__": name, "worker": f"w{w}", "cloud": "aws" if p % 2 else "gcp",
                          "region": f"region-{p % 5}", "zone": f"region-{p % 5}-{'abcd'[p % 4]}",
                          "instance_type": f"type-{p}"}
                reset = rng.randrange(len(times))
                value, values = 0.0, []
                for i, t in enumerate(times):
                    if i == reset:
                        value = 0.0
                    value += rng.uniform(0, 3600 * 4) if name.startswith("gpufleet_spot_node") else \
                        float(rng.random() < 0.02)
                    values.append([t, f"{value:.6g}"])
                points += len(values)
                result.append({"metric": labels, "values": values})
        docs.append(json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}))
    path.write_text("\n".join(docs))
    return points


def bench_calibrate(repeat: int, tmp: Path) -> None:
    from placement.commands.main import main

    src = tmp / "samples.json"
    points = samples_file(src)
    out = tmp / "cal.json"
    sink = io.StringIO()

    def run() -> None:
        with contextlib.redirect_stdout(sink):
            assert main(["calibrate", "--samples", str(src), "--output", str(out)]) == 0

    run()  # warm: imports
    CPU.clear()
    secs = timed(run, repeat)
    rows = len(json.loads(out.read_text())["spot"])
    print(f"1. calibrate --samples over {DAYS} days ({WORKERS} workers x {PAIRS} pool/zone pairs, {points:,} points, "
          f"{src.stat().st_size / 1e6:.0f} MB) -> {rows} spot rows: median {statistics.median(secs):.3f} s "
          f"(min {min(secs):.3f}, CPU {statistics.median(CPU):.3f} s, n={repeat}; target <= 2 s)")


def calibration_file(path: Path, rows: int) -> None:
    from placement.model.calibration import Calibration, SpotRow, calibration_text
    from placement.model.catalog import embedded_catalog

    rng = random.Random(7)
    real = sorted({(o.cloud, o.region, o.zone, o.shape.name) for o in embedded_catalog().offers
                   if o.spot_price is not None})
    out = []
    for i in range(rows):
        if i < len(real):
            cloud, region, zone, itype = real[i]
        else:
            cloud, region, zone, itype = "aws", f"region-{i % 97}", f"zone-{i}", f"type-{i % 31}"
        out.append(SpotRow(cloud, region, zone if i % 3 else "", itype, node_hours=rng.uniform(1, 5000),
                           reclaims=float(rng.randrange(0, 300))))
    import datetime as dt

    t = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    path.write_text(calibration_text(Calibration(measured_from=t - dt.timedelta(days=60), measured_to=t,
                                                 spot=tuple(out))))


def bench_plan(repeat: int, tmp: Path) -> None:
    from placement.commands.main import main

    cal = tmp / "cal-10k.json"
    calibration_file(cal, 10_000)
    job = tmp / "job.yaml"
    # No spot rate of its own, so the calibration applies; the example job's shape otherwise.
    job.write_text((ROOT / "placement/examples/job.yaml").read_text().replace("  interruptions_per_hour: 0.05\n",
                                                                              ""))
    sink = io.StringIO()

    def plan(*extra: str) -> Callable[[], None]:
        def run() -> None:
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                assert main(["plan", str(job), "--json", *extra]) == 0
            sink.seek(0)
            sink.truncate()
        return run

    with_cal, without = plan("--calibration", str(cal)), plan("--no-calibration")
    with_cal()
    without()
    a, b, ca, cb = [], [], [], []
    for _ in range(repeat):  # alternating, so load on the machine falls on both alike
        CPU.clear()
        a += timed(with_cal, 1)
        ca += CPU
        CPU.clear()
        b += timed(without, 1)
        cb += CPU
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"2. plan --json with a 10,000-row calibration file: median {ma:.3f} s; without: {mb:.3f} s; "
          f"ratio {ma / mb:.2f}x; CPU {statistics.median(ca):.3f} s against {statistics.median(cb):.3f} s, ratio "
          f"{statistics.median(ca) / statistics.median(cb):.2f}x (n={repeat} each, alternating; target <= 1.2x)")


def main() -> None:
    _venv.ensure("yaml", "highspy", "platformdirs", extra="")  # the core dependencies: calibrate needs no extra
    sys.path.insert(0, str(ROOT))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per figure (default 5)")
    ap.add_argument("--only", action="append", choices=("calibrate", "plan"), help="run only these")
    args = ap.parse_args()
    only = set(args.only or ("calibrate", "plan"))
    print(_bench.machine_line())
    with tempfile.TemporaryDirectory() as d:
        import os

        os.environ["GPUFLEET_DATA_DIR"] = d  # never the user's own calibration files
        os.environ["GPUFLEET_CACHE_DIR"] = str(Path(d) / "cache")  # nor cache entries left in the user's cache
        tmp = Path(d)
        if "calibrate" in only:
            bench_calibrate(args.repeat, tmp)
        if "plan" in only:
            bench_plan(args.repeat, tmp)


if __name__ == "__main__":
    main()
