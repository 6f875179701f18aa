"""``placement profile``: run the reference trainer's benchmark mode on this machine's accelerators and record
the measured per-GPU throughput as a calibration ``speed`` row (issue 26).

The trainer runs as ``python -m placement.trainer --benchmark --steps N [--config FILE] [--backend B]``; its last
stdout line is one ``gpufleet.trainer-benchmark/v1`` JSON object (docs/trainer-contract.md). ``--runs K`` runs it
K times: the row holds the median, ``runs`` K (plans use a speed row from
:data:`placement.model.calibration.MIN_RUNS` runs). The row is merged into ``--output FILE`` when given (that file is
read and rewritten atomically), else into a copy of the newest calibration file in the user data directory,
written as a new file there: an earlier calibration's spot rows stay in use.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from placement.errors import UsageError, shown
from placement.files.calibrations import default_output, newest_calibration, read_calibration, write_calibration
from placement.model.calibration import Calibration, SpeedRow, merge

BENCHMARK_SCHEMA = "gpufleet.trainer-benchmark/v1"
TIMEOUT_S = 3600.0  # per benchmark run; the CLI's default (placement.commands.main)
MAX_TIMEOUT_S = 7 * 86400.0  # a week per run: the most --timeout takes (subprocess waits overflow past ~1e9 s)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from placement.commands.common import seconds

    p.add_argument("--steps", type=int, default=20, metavar="N", help="benchmark steps per run (default 20)")
    p.add_argument("--runs", type=int, default=3, metavar="K",
                   help="benchmark runs; the row holds their median (default 3, the runs a plan needs to use it)")
    p.add_argument("--config", metavar="FILE.yaml", help="the model configuration (docs/trainer-contract.md)")
    p.add_argument("--backend", choices=("numpy", "torch"), help="the trainer's backend (default: the trainer's)")
    p.add_argument("--accelerator", metavar="NAME",
                   help="record the row under this accelerator (default: what the trainer reports, e.g. H100)")
    p.add_argument("--output", "-o", metavar="PATH",
                   help="merge the row into this calibration file (default: a new file in the user data "
                        "directory holding the newest calibration and this row)")
    p.add_argument("--timeout", type=seconds(MAX_TIMEOUT_S), default=TIMEOUT_S, metavar="SECONDS",
                   help="per run (default 3600, at most a week)")
    p.add_argument("--json", action="store_true", help="print the row and the trainer's results as JSON")


def _bench(args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "placement.trainer", "--benchmark", "--steps", str(args.steps)]
    if args.config:
        cmd += ["--config", args.config]
    if args.backend:
        cmd += ["--backend", args.backend]
    from placement.trainer.settings import one_blas_thread

    # One BLAS thread per process, as the trainer sets itself (a pool per core skews a shared CPU's figure).
    env = {**os.environ, **one_blas_thread(os.environ)}
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, check=False, env=env)
    except subprocess.TimeoutExpired:
        raise ProfileError(f"the benchmark ran past --timeout {args.timeout:g} s; give fewer --steps", 1) from None
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise ProfileError(f"the trainer's benchmark failed: {tail[:300]}", 2 if done.returncode == 2 else 1)
    lines = done.stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1]) if lines else None
    except ValueError:
        result = None
    if not isinstance(result, dict) or result.get("schema") != BENCHMARK_SCHEMA:
        raise ProfileError(f"the trainer's last line is not a {BENCHMARK_SCHEMA} object", 1)
    per_gpu = result.get("per_gpu")
    if not isinstance(per_gpu, int | float) or not math.isfinite(per_gpu) or per_gpu <= 0 \
            or result.get("unit") not in ("tokens/s", "samples/s") or not result.get("workload"):
        raise ProfileError(f"the trainer's benchmark gave no usable throughput ({shown(result)})", 1)
    return result


class ProfileError(Exception):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def run_profile(args: argparse.Namespace) -> int:
    """0 written, 1 the benchmark failed (nothing written), 2 bad input."""
    if args.steps < 1:
        raise UsageError("--steps: must be at least 1")
    if args.runs < 1:
        raise UsageError("--runs: must be at least 1")
    if args.config and not Path(args.config).is_file():
        raise UsageError(f"--config: {shown(args.config)} is not a file")
    from placement.console import require_extra

    # Before the benchmark runs: the extra it needs, and where it writes (a folder, a missing folder, a FIFO or
    # the model configuration itself are refused by the rule every output path follows).
    require_extra("trainer", ("numpy", "fsspec", "prometheus_client"), "placement profile (it runs the reference "
                  "trainer)")
    if args.output:
        from placement.files.outputs import output_path
        from placement.model.calibration import SCHEMA

        output_path(args.output, "--output", inputs=[args.config] if args.config else [],
                    replaceable=lambda head: SCHEMA.encode() in head, kind="calibration file")
    now = dt.datetime.now(dt.UTC)
    base: Calibration | None = None
    if args.output and Path(args.output).exists():
        base = read_calibration(args.output)  # a bad file is refused before the benchmark runs
    elif not args.output:
        newest = newest_calibration()
        base = None if newest is None else read_calibration(newest)
    start = dt.datetime.now(dt.UTC)
    results = []
    try:
        for _ in range(args.runs):
            results.append(_bench(args))
    except ProfileError as exc:
        print(f"placement: error: {exc}", file=sys.stderr)
        return exc.code
    end = dt.datetime.now(dt.UTC)
    first = results[0]
    accelerator = args.accelerator or str(first.get("accelerator") or "unknown")
    row = SpeedRow(workload=str(first["workload"]), accelerator=accelerator, nodes=1,
                   per_gpu=round(statistics.median(float(r["per_gpu"]) for r in results), 6), unit=str(first["unit"]),
                   runs=len(results))
    cal = Calibration(measured_from=start, measured_to=end, speed=(row,))
    if base is not None:
        cal = merge(base, cal)
    path = Path(args.output) if args.output else default_output(now)
    write_calibration(cal, path)
    if args.json:
        sys.stdout.write(json.dumps({"row": row.__dict__, "results": results, "path": str(path)}, indent=2) + "\n")
    else:
        sys.stdout.write(f"measured {row.per_gpu:,.1f} {row.unit} per GPU of {row.workload} on {row.accelerator} "
                         f"({first.get('backend')} on {first.get('device')}, median of {row.runs} run(s) of "
                         f"{args.steps} steps); wrote {path}\n")
    return 0
