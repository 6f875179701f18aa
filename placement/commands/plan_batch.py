"""``placement plan-batch JOBS.yaml``: a burst placed jointly under shared quota (:mod:`placement.plan.batch`), by
default scheduled over time (:mod:`placement.plan.schedule`) and compared with placing it all at once."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from placement.commands.common import (
    add_calibration_flags,
    add_data_flags,
    add_plan_flags,
    check_chart,
    emit,
    live_overlay,
    load_reserved,
    offered_zones,
    plan_time,
    trust,
    warn,
)

if TYPE_CHECKING:
    import datetime as dt

    from placement.model.catalog import Catalog, Offer
    from placement.model.jobspec import JobSpec
    from placement.model.quotas import QuotaTable
    from placement.model.reservations import Reservation
    from placement.plan.batch import BatchResult, Prepared


def add_arguments(b: argparse.ArgumentParser) -> None:
    b.add_argument("jobs", metavar="JOBS.yaml", help="a mapping with a jobs: list of job specs")
    b.add_argument("--no-greedy", action="store_true", help="skip the one-by-one greedy comparison")
    b.add_argument("--time-limit", type=float, default=30.0, metavar="SECONDS",
                   help="time budget for generating candidates and solving; the best solution found by then is "
                        "reported with its gap, jobs not reached are reported unplaced (default 30)")
    add_schedule_flags(b)
    add_plan_flags(b)
    add_data_flags(b)
    add_calibration_flags(b)


def run_plan_batch(args: argparse.Namespace) -> int:
    from placement.commands.render import batch_doc, batch_text
    from placement.console import EXIT_NOTHING_FEASIBLE, EXIT_OK, output_width
    from placement.errors import UsageError, in_file
    from placement.files.inputs import load_catalog, load_quotas
    from placement.files.readers import load_yaml
    from placement.model.jobspec import check_allowed_zones, parse_batch
    from placement.plan.batch import greedy, prepare, solve

    with in_file(args.jobs):
        jobs = parse_batch(load_yaml(args.jobs, "batch file"))
    if not 0 < args.time_limit < float("inf"):  # also refuses nan
        raise UsageError("--time-limit: must be a positive number of seconds")
    if args.chart is not None:  # the path and the extra, before anything is solved or printed
        if args.no_schedule:
            raise UsageError("--chart: draws the schedule; drop --no-schedule to have one")
        check_chart(args.chart, inputs=[args.jobs])
    now = plan_time(args)
    catalog = load_catalog(args.catalog)
    quotas = load_quotas(args.quotas)
    reserved = load_reserved(args)
    if not args.no_schedule:  # the schedule's own input errors before any warning or solving
        check_input(args, jobs, reserved, now)
    warn([w for j in jobs for w in j.warnings] + list(quotas.warnings))
    accels = sorted({a for j in jobs for a in j.accelerators})
    catalog, quotas, sources, live_reserved = live_overlay(args, catalog, quotas, accels, None, None, True)
    reserved += live_reserved
    trust(catalog, now)
    zones = offered_zones(catalog, reserved)
    with in_file(args.jobs):
        warn([w for j in jobs for w in check_allowed_zones(j, zones, f"jobs[{j.name}].")])
    from placement.files.calibrations import apply_calibration
    from placement.model.calibration import calibrated_job

    cal, offers, _ = apply_calibration(args, now, catalog.offers)
    jobs = tuple(calibrated_job(cal, j) for j in jobs)
    in_force = _calibration(args, cal, offers, jobs)
    # --time-limit bounds candidate generation and solving together; candidates are generated once for both.
    ready = prepare(jobs, offers, quotas, reservations=reserved, now=now, time_limit_s=args.time_limit)
    result = solve(jobs, offers, quotas, reservations=reserved, now=now, prepared=ready)
    if not args.no_schedule:  # over time (placement.plan.schedule), compared with this all-at-once placement
        return run_schedule(args, jobs, catalog, quotas, reserved, sources, now, result, ready, offers=offers,
                            in_force=in_force)
    base = None if args.no_greedy else greedy(jobs, offers, quotas, reservations=reserved, now=now,
                                              prepared=ready)
    text = "" if args.json else batch_text(result, catalog, base, output_width()) + in_force[1]
    emit({**batch_doc(result, catalog, base, sources, now), "calibration": in_force[0]}, text, args.json)
    # 0 only when every job is placed: a partial plan is shown, but a script must not take it for success.
    return EXIT_OK if result.placed == len(jobs) else EXIT_NOTHING_FEASIBLE


def _calibration(args: argparse.Namespace, cal: Any, offers: Sequence[Offer],
                 jobs: Sequence[JobSpec]) -> tuple[dict[str, Any] | None, str]:
    """The calibration in force: its JSON object and its text line (with a leading newline; "" without one)."""
    from placement.commands.render import wrap
    from placement.console import output_width
    from placement.files.calibrations import applied, calibration_line, info

    used = applied(cal, offers, jobs)
    if cal is None or used is None:
        return None, ""
    line = calibration_line(cal, used, chosen_by_default=not getattr(args, "calibration", None))
    return info(cal, used), "\n" + wrap(line, output_width(), "  ")


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
    from placement.plan.schedule import check_windows, earliest_hours, grid

    g = grid(now, args.horizon_hours, args.slot_hours)
    for i, job in enumerate(jobs):
        earliest_hours(job, g, f"jobs[{i}].")
    check_windows(reserved, g)


def run_schedule(args: argparse.Namespace, jobs: Sequence[JobSpec], catalog: Catalog, quotas: QuotaTable,
                 reserved: Sequence[Reservation], sources: list[dict[str, Any]], now: dt.datetime,
                 at_once: BatchResult, ready: Prepared | None = None,
                 offers: Sequence[Offer] | None = None,
                 in_force: tuple[dict[str, Any] | None, str] = (None, "")) -> int:
    """Schedule the burst, print it (table or JSON) with what it saves against ``at_once``, write the chart.
    ``offers``: the catalog's offers as priced (with a calibration applied); default the catalog's own.
    ``in_force``: the calibration's JSON object and text line. The chart is written before anything is printed
    (its path and extra were checked before the solve)."""
    import sys

    from placement.commands.schedule_render import schedule_doc, schedule_text, write_chart
    from placement.console import EXIT_NOTHING_FEASIBLE, EXIT_OK, output_width
    from placement.plan.schedule import solve

    priced = catalog.offers if offers is None else offers
    result = solve(jobs, priced, quotas, reservations=reserved, now=now, horizon_h=args.horizon_hours,
                   slot_h=args.slot_hours, time_limit_s=args.time_limit)
    if args.chart is not None:
        write_chart(result, args.chart)
    if args.json:
        import json

        from placement.plan.batch import greedy

        base = None if args.no_greedy else greedy(jobs, priced, quotas, reservations=reserved, now=now,
                                                  prepared=ready)
        sys.stdout.write(json.dumps({**schedule_doc(result, catalog, at_once, sources, now, base),
                                     "calibration": in_force[0]}, indent=2, allow_nan=False) + "\n")
    else:
        sys.stdout.write(schedule_text(result, catalog, at_once, output_width()) + in_force[1] + "\n")
    return EXIT_OK if result.placed == len(jobs) else EXIT_NOTHING_FEASIBLE
