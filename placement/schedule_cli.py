"""``plan-batch`` over time: its flags and the command's schedule path (the CLI keeps a two-line hook)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import datetime as dt

    from placement.batch import BatchResult, Prepared
    from placement.catalog import Catalog, Offer
    from placement.jobspec import JobSpec
    from placement.quotas import QuotaTable
    from placement.reservations import Reservation


def add_schedule_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("schedule (jobs may wait for quota and reservations; docs/placement.md#schedule)")
    g.add_argument("--horizon-hours", type=float, default=168.0, metavar="HOURS",
                   help="plan this many hours from --now (default 168, one week; at most a year)")
    g.add_argument("--slot-hours", type=float, default=1.0, metavar="HOURS",
                   help="the schedule's time step: jobs start at their earliest_start or a slot boundary (default 1)")
    g.add_argument("--no-schedule", action="store_true",
                   help="place every job at once, starting now (the all-at-once plan), instead of over time")
    g.add_argument("--chart", metavar="FILE.png",
                   help="also write a Gantt chart of the schedule (needs the 'charts' extra: matplotlib)")


def check_input(args: argparse.Namespace, jobs: Sequence[JobSpec], reserved: Sequence[Reservation],
                now: dt.datetime) -> None:
    """The flags, every job's earliest_start and the reservation windows (one-line errors, exit 2)."""
    from placement.errors import UsageError
    from placement.schedule import check_windows, earliest_hours, grid

    g = grid(now, args.horizon_hours, args.slot_hours)
    for i, job in enumerate(jobs):
        earliest_hours(job, g, f"jobs[{i}].")
    check_windows(reserved, g)
    if args.chart is not None and not args.chart.lower().endswith(".png"):
        raise UsageError(f"--chart: {args.chart!r} must name a .png file")


def run_schedule(args: argparse.Namespace, jobs: Sequence[JobSpec], catalog: Catalog, quotas: QuotaTable,
                 reserved: Sequence[Reservation], sources: list[dict[str, Any]], now: dt.datetime,
                 at_once: BatchResult, ready: Prepared | None = None,
                 offers: Sequence[Offer] | None = None) -> int:
    """Schedule the burst, print it (table or JSON) with what it saves against ``at_once``, write the chart.
    ``offers``: the catalog's offers as priced (with a calibration applied); default the catalog's own."""
    import sys

    from placement.console import EXIT_NOTHING_FEASIBLE, EXIT_OK, output_width
    from placement.schedule import solve
    from placement.schedule_render import schedule_doc, schedule_text, write_chart

    priced = catalog.offers if offers is None else offers
    result = solve(jobs, priced, quotas, reservations=reserved, now=now, horizon_h=args.horizon_hours,
                   slot_h=args.slot_hours, time_limit_s=args.time_limit)
    if args.json:
        import json

        from placement.batch import greedy

        base = None if args.no_greedy else greedy(jobs, priced, quotas, reservations=reserved, now=now,
                                                  prepared=ready)
        sys.stdout.write(json.dumps(schedule_doc(result, catalog, at_once, sources, now, base), indent=2,
                                    allow_nan=False) + "\n")
    else:
        sys.stdout.write(schedule_text(result, catalog, at_once, output_width()) + "\n")
    if args.chart is not None:
        write_chart(result, args.chart)
    return EXIT_OK if result.placed == len(jobs) else EXIT_NOTHING_FEASIBLE
