"""``placement calibrate``: its flags' checks and the command (the measurements are
:mod:`placement.prometheus.measurements`, the files :mod:`placement.files.calibrations`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from placement.errors import InputError, UsageError, shown
from placement.files.calibrations import default_output, write_calibration
from placement.model.calibration import (
    Calibration,
)
from placement.prometheus.client import PromError
from placement.prometheus.measurements import from_prometheus, from_samples

MAX_WINDOW_DAYS = 400  # a longer window than any retention: a mistyped --from




def add_arguments(k: argparse.ArgumentParser) -> None:
    k.description = ("Read spot node-hours and reclaims (placement dispatch's metrics) and the "
                     "trainer's throughput and checkpoint writes from a Prometheus server, or from exported "
                     "samples, and write a gpufleet.calibration/v1 file (docs/calibration.md). plan, plan-batch, "
                     "submit and dispatch use the newest one unless --no-calibration.")
    src = k.add_mutually_exclusive_group(required=True)
    src.add_argument("--prometheus", metavar="URL", help="the Prometheus server, e.g. http://localhost:9090")
    src.add_argument("--samples", metavar="FILE", help="exported samples: /api/v1/query_range answers (JSON)")
    k.add_argument("--from", dest="start", metavar="TIME", help="window start, ISO-8601 (default: 30 days before "
                                                                "--to; with --samples: the first sample)")
    k.add_argument("--to", dest="end", metavar="TIME", help="window end, ISO-8601 (default: now; with --samples: "
                                                            "the last sample)")
    k.add_argument("--output", "-o", metavar="PATH", help="where to write (default: a new file in the user data "
                                                           "directory's calibration/ folder)")
    k.add_argument("--prior-node-hours", type=float, metavar="N",
                   help="weight of the prior spot rate in node-hours, written as calibration.prior_node_hours "
                        "(default: plans use 100)")
    k.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                   help="per-request timeout for Prometheus (default 10; 2 retries, 60 s in all per query)")
    k.add_argument("--json", action="store_true", help="print the written document as JSON")


def _when(text: str | None, flag: str) -> dt.datetime | None:
    if text is None:
        return None
    from placement.model.reservations import parse_time

    if not text.strip():
        raise UsageError(f"{flag}: is empty; give an ISO-8601 time such as 2026-11-20T00:00:00Z")
    return parse_time(text, flag, "", blank="")


def window(args: Any, now: dt.datetime, default_days: float = 30.0) -> tuple[dt.datetime | None, dt.datetime | None]:
    """(--from, --to), checked: not in the future, from before to, at most MAX_WINDOW_DAYS long."""
    start, end = _when(args.start, "--from"), _when(args.end, "--to")
    if end is not None and end > now:
        raise UsageError(f"--to: {end:%Y-%m-%dT%H:%M:%SZ} is in the future; give a time up to now, or leave it out")
    if start is not None and end is not None and start >= end:
        raise UsageError("--from: must be before --to")
    if start is not None and (end or now) - start > dt.timedelta(days=MAX_WINDOW_DAYS):
        raise UsageError(f"--from: the window is over {MAX_WINDOW_DAYS} days; give a later --from")
    return start, end


def run_calibrate(args: Any) -> int:
    """``placement calibrate``: 0 written, 1 nothing measured (nothing written) or Prometheus unreachable, 2 bad
    input."""
    import sys

    now = dt.datetime.now(dt.UTC)
    start, end = window(args, now)
    if args.prior_node_hours is not None and not 0 < args.prior_node_hours < math.inf:
        raise UsageError("--prior-node-hours: must be a positive number of node-hours")
    if not 0 < args.timeout < math.inf:
        raise UsageError("--timeout: must be a positive number of seconds")
    if args.prometheus:
        if urllib.parse.urlsplit(args.prometheus).scheme not in ("http", "https"):
            raise UsageError(f"--prometheus: {shown(args.prometheus)} is not an http(s) URL, e.g. "
                             "http://localhost:9090")
        end = end or now
        start = start or end - dt.timedelta(days=30)
        try:
            cal = from_prometheus(args.prometheus, start, end, timeout_s=args.timeout)
        except PromError as exc:
            print(f"placement: error: --prometheus: {exc}", file=sys.stderr)
            return 1
    else:
        cal = from_samples(args.samples, start, end)
        if cal.measured_to > now:
            raise InputError("samples", f"end at {cal.measured_to:%Y-%m-%dT%H:%M:%SZ}, in the future: refused; "
                                        "check the exporting machine's clock", source=args.samples)
    if args.prior_node_hours is not None:
        cal = Calibration(**{**cal.__dict__, "prior_node_hours": float(args.prior_node_hours)})
    if not (cal.spot or cal.speed or cal.checkpoint_write):
        print("placement: error: nothing measured in the window (no spot node-hours, trainer throughput or "
              "checkpoint writes); nothing written", file=sys.stderr)
        return 1
    path = Path(args.output) if args.output else default_output(now)
    write_calibration(cal, path)
    if args.json:
        from placement.model.calibration import calibration_doc

        sys.stdout.write(json.dumps({**calibration_doc(cal), "path": str(path)}, indent=2) + "\n")
    else:
        sys.stdout.write(f"wrote {path}: {len(cal.spot)} spot, {len(cal.speed)} speed and "
                         f"{len(cal.checkpoint_write)} checkpoint rows measured "
                         f"{cal.measured_from:%Y-%m-%dT%H:%M:%SZ} to {cal.measured_to:%Y-%m-%dT%H:%M:%SZ}\n")
    return 0
