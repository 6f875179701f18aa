"""``placement calibrate``: its flags' checks and the command (the measurements are
:mod:`placement.prometheus.measurements`, the files :mod:`placement.files.calibrations`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from pathlib import Path
from typing import Any

from placement.errors import InputError, UsageError, redact_url
from placement.files.calibrations import default_output, write_calibration
from placement.model.calibration import SCHEMA, Calibration

MAX_WINDOW_DAYS = 400  # a longer window than any retention: a mistyped --from


def add_arguments(k: argparse.ArgumentParser) -> None:
    from placement.commands.common import seconds

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
                                                           "directory's calibration/ folder); an existing file is "
                                                           "replaced only when it is a calibration file")
    k.add_argument("--prior-node-hours", type=float, metavar="N",
                   help="weight of the prior spot rate in node-hours, written as calibration.prior_node_hours "
                        "(default: plans use 100)")
    k.add_argument("--timeout", type=seconds(), default=10.0, metavar="SECONDS",
                   help="per-request timeout for Prometheus, wall time (default 10, at most 3600; 2 retries, 60 s in "
                        "all per query)")
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


def is_calibration_text(head: bytes) -> bool:
    """Whether the start of a file is a calibration document (what ``calibrate`` and ``profile`` write): the
    only kind of existing file ``--output`` may replace."""
    return b'"schema"' in head[:200] and SCHEMA.encode() in head[:200]


def run_calibrate(args: Any) -> int:
    """``placement calibrate``: 0 written, 1 nothing measured (nothing written) or Prometheus unreachable, 2 bad
    input. The flags and the output path are checked before Prometheus or the samples are read."""
    import sys

    from placement.commands.common import warn
    from placement.model.calibration import MAX_NODE_HOURS, MIN_PRIOR_NODE_HOURS, without_bad_rows
    from placement.prometheus.client import PromError, server_url

    now = dt.datetime.now(dt.UTC)
    start, end = window(args, now)
    if args.prior_node_hours is not None and not MIN_PRIOR_NODE_HOURS <= args.prior_node_hours <= MAX_NODE_HOURS:
        raise UsageError(f"--prior-node-hours: must be a number of node-hours from {MIN_PRIOR_NODE_HOURS:g} to "
                         f"{MAX_NODE_HOURS:g}")
    if args.prometheus:
        server_url(args.prometheus)  # a malformed URL is named, without its credentials, before any request
    path = _output(args, now)
    if args.prometheus:
        end = end or now
        start = start or end - dt.timedelta(days=30)
        try:
            from placement.prometheus.measurements import from_prometheus

            cal, warnings = from_prometheus(args.prometheus, start, end, timeout_s=args.timeout)
        except PromError as exc:
            print(f"placement: error: --prometheus: {redact_url(exc)}", file=sys.stderr)
            return 1
        cal, problems = without_bad_rows(cal)  # a server's bad row is left out, and said
        warn(warnings + [f"--prometheus: left out {p}" for p in problems])
    else:
        from placement.prometheus.measurements import from_samples

        cal = from_samples(args.samples, start, end)
        if cal.measured_to > now:
            raise InputError("samples", f"end at {cal.measured_to:%Y-%m-%dT%H:%M:%SZ}, in the future: refused; "
                                        "check the exporting machine's clock", source=args.samples)
        _, problems = without_bad_rows(cal)
        if problems:  # the user's own file: refused, naming the first bad row
            raise InputError("samples", f"{problems[0]} (from the series with those labels); check the export",
                             source=args.samples)
    if args.prior_node_hours is not None:
        cal = Calibration(**{**cal.__dict__, "prior_node_hours": float(args.prior_node_hours)})
    if not (cal.spot or cal.speed or cal.checkpoint_write):
        print("placement: error: nothing measured in the window (no spot node-hours, trainer throughput or "
              "checkpoint writes); nothing written", file=sys.stderr)
        return 1
    write_calibration(cal, path)
    if args.json:
        from placement.model.calibration import calibration_doc

        sys.stdout.write(json.dumps({**calibration_doc(cal), "path": str(path)}, indent=2, allow_nan=False) + "\n")
    else:
        sys.stdout.write(f"wrote {path}: {len(cal.spot)} spot, {len(cal.speed)} speed and "
                         f"{len(cal.checkpoint_write)} checkpoint rows measured "
                         f"{cal.measured_from:%Y-%m-%dT%H:%M:%SZ} to {cal.measured_to:%Y-%m-%dT%H:%M:%SZ}"
                         f"{_span(cal)}\n")
    return 0


def _span(cal: Calibration) -> str:
    """`` (2 min of samples)``: how long the measured window is, so a short one is seen as short."""
    from placement.commands.render import duration_text

    minutes = (cal.measured_to - cal.measured_from).total_seconds() / 60.0
    return f" ({duration_text(minutes) if minutes < 2880 else f'{minutes / 1440:,.1f} days'} of samples)"


def _output(args: Any, now: dt.datetime) -> Path:
    """Where to write, checked before any work: ``--output`` (never the samples file, never an existing file that
    is not a calibration), else a new file in the user data directory (created)."""
    from placement.files.outputs import output_path

    if args.output is not None:
        return output_path(args.output, "--output", inputs=[args.samples] if args.samples else [],
                           replaceable=is_calibration_text, kind="calibration file")
    path = default_output(now)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create the calibration folder {path.parent} ({exc.strerror or exc}); pass "
                         "--output PATH or set GPUFLEET_DATA_DIR") from None
    return path
