"""``placement plan JOB.yaml``: rank every cloud/region/zone/instance for one job (:mod:`placement.plan.job`), with
what decides the pick (:mod:`placement.plan.decides`), as a table or a ``gpufleet.placement/v1`` document."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from placement.commands.common import (
    add_calibration_flags,
    add_data_flags,
    add_plan_flags,
    emit,
    live_overlay,
    load_reserved,
    offered_zones,
    plan_time,
    trust,
    warn,
)
from placement.console import EXIT_NOTHING_FEASIBLE, EXIT_OK, output_width
from placement.errors import UsageError, in_file


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("job", metavar="JOB.yaml", help="job spec (README.md#job-spec)")
    p.add_argument("--top", type=int, default=10, metavar="N", help="rows to show (default 10)")
    p.add_argument("--all-candidates", action="store_true", help="list every candidate, excluded ones with the reason")
    p.add_argument("--egress-allowance-gb", type=float, default=0.0, metavar="GB",
                   help="AWS internet egress still free this month (the account-wide 100 GB allowance) that this job "
                        "may use; default 0: one month's allowance is not every job's")
    add_plan_flags(p)
    add_data_flags(p)
    add_calibration_flags(p)


def run_plan(args: argparse.Namespace) -> int:
    from placement.commands.render import plan_doc, plan_text
    from placement.files.inputs import load_catalog, load_quotas
    from placement.files.readers import load_yaml
    from placement.model.jobspec import check_allowed_zones, parse_job
    from placement.plan.job import plan

    if args.top < 1:
        raise UsageError("--top: must be at least 1")
    with in_file(args.job):
        job = parse_job(load_yaml(args.job, "job spec"))
    allowance = _allowance(args.egress_allowance_gb)
    now = plan_time(args)
    catalog = load_catalog(args.catalog)
    quotas = load_quotas(args.quotas)
    reserved = load_reserved(args)
    warn(job.warnings + quotas.warnings)
    catalog, quotas, sources, live_reserved = live_overlay(args, catalog, quotas, job.accelerators, job.gpus,
                                                    job.gpus_per_node, True)
    trust(catalog, now)
    reserved += live_reserved
    if job.allow_zones:  # only a list of zones is checked against the offers' (every zone of a big catalog)
        with in_file(args.job):
            warn(check_allowed_zones(job, offered_zones(catalog, reserved)))
    from placement.files.calibrations import apply_calibration

    cal, offers, job = apply_calibration(args, now, catalog.offers, job)
    result = plan(job, offers, quotas, reservations=reserved, now=now, egress_allowance_gb=allowance)
    doc = plan_doc(result, catalog, top=args.top, all_candidates=args.all_candidates, sources=sources, now=now,
                   reservations=reserved)
    text = "" if args.json else plan_text(result, catalog, top=args.top, all_candidates=args.all_candidates,
                                          sources=sources, width=output_width(), reservations=reserved)
    doc, text = _decides(result, offers, cal, doc, text, args, job)
    emit(doc, text, args.json)
    return EXIT_OK if result.chosen else EXIT_NOTHING_FEASIBLE


def _decides(result: Any, offers: Sequence[Any], cal: Any, doc: dict[str, Any], text: str,
             args: argparse.Namespace, job: Any) -> tuple[dict[str, Any], str]:
    """Add what decides the plan: the break-even spot rate, the warnings on the pick, a flag on the pick's price
    and the calibration in force (its file, window and how many of its rows applied)."""
    from placement.files.calibrations import applied, calibration_line, info
    from placement.plan.decides import break_even, break_even_text, price_flag, price_flag_text, warnings

    rate = break_even(result)
    found = warnings(result, offers)
    warn(found)
    used = applied(cal, offers, [job])
    doc = {**doc, "break_even_interruptions_per_hour": rate, "warnings": found, "calibration": info(cal, used)}
    flag = price_flag(result.chosen, offers)
    if flag and doc.get("chosen") is not None:
        doc["chosen"] = {**doc["chosen"], "price_flag": flag}
    if text:
        from placement.commands.render import wrap

        lines = [break_even_text(rate, result.chosen)] if result.rows else []
        if flag and result.chosen is not None:
            lines.append(price_flag_text(result.chosen, flag))
        if cal is not None and used is not None:
            lines.append(calibration_line(cal, used, chosen_by_default=not getattr(args, "calibration", None)))
        text += "".join("\n" + wrap(line, output_width(), "  ") for line in lines)
    return doc, text


def _allowance(gb: float) -> float:
    """``--egress-allowance-gb``: between 0 and AWS's monthly allowance (egress.yaml)."""
    import math

    from placement.model.egress import egress_book

    cap = egress_book().aws.internet_free_gb_per_month
    if not math.isfinite(gb) or gb < 0 or gb > cap:
        raise UsageError(f"--egress-allowance-gb: must be between 0 and {cap:g} (AWS's monthly allowance), got {gb:g}")
    return gb
