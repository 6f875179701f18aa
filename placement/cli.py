"""``placement`` command line: parse flags, call the core, render a table or a JSON document.

Only the standard library is imported at start-up so ``placement --help`` stays fast; the core,
YAML, the MILP solver and the cloud SDKs are imported by the sub-command that needs them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, cast

from placement.console import EXIT_BAD_INPUT, EXIT_NOTHING_FEASIBLE, EXIT_OK, output_width, paused_gc
from placement.errors import UsageError, in_file, shown
from placement.inputs import load_catalog, load_quotas, load_reservations
from placement.readers import load_yaml

if TYPE_CHECKING:
    import datetime as dt

    from placement.catalog import Catalog
    from placement.quotas import QuotaTable
    from placement.reservations import Reservation

class _Parser(argparse.ArgumentParser):
    # Worked out only when the help is printed (e.g. a path that needs platformdirs), so --help stays fast.
    describe: Callable[[], str] | None = None

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see --help)")

    def format_help(self) -> str:
        if self.describe is not None:
            self.description = self.describe()
        return super().format_help()


def _refresh_description() -> str:
    from placement.catalog import DATA_DIR_ENV, refreshed_catalog_path

    return (f"Write a catalog from live AWS/GCP prices and offerings. Default output: {refreshed_catalog_path()} "
            f"(the user data directory; set {DATA_DIR_ENV} to move it, or pass --output). plan, plan-batch and offers "
            "then use the newer of it and the embedded catalog, and say which.")


def _add_data_flags(p: argparse.ArgumentParser, *, live: bool = True) -> None:
    p.add_argument("--catalog", action="append", default=[], metavar="CLOUD=PATH",
                   help="use a SkyPilot-format vms.csv for CLOUD (aws or gcp) instead of the embedded catalog; "
                        "repeatable")
    p.add_argument("--quotas", metavar="PATH", help="quota file: CSV with header cloud,region,quota,limit,usage "
                                                     "or the same rows as a YAML list")
    p.add_argument("--json", action="store_true", help="print one gpufleet.placement/v1 JSON document")
    if live:
        g = p.add_argument_group("live data (needs the 'live' extra: boto3, google-cloud-compute/-billing)")
        mode = g.add_mutually_exclusive_group()
        mode.add_argument("--live", action="store_true",
                          help="query AWS and GCP for current quota, spot prices, offerings and placement scores")
        mode.add_argument("--offline", action="store_true",
                          help="never touch the network: cached or embedded data only")
        g.add_argument("--refresh", action="store_true", help="with --live: ignore the on-disk cache")
        g.add_argument("--aws-profile", metavar="NAME", help="AWS profile (default: the standard credential chain)")
        g.add_argument("--gcp-project", metavar="ID", help="GCP project (default: from Application Default "
                                                           "Credentials / GOOGLE_CLOUD_PROJECT)")
        g.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS",
                       help="per-call timeout for live queries (default 5)")
        g.add_argument("--allow-catalog-fallback", action="store_true",
                       help="with --live: when no cloud has credentials, answer from the catalog (with a warning) "
                            "instead of failing with exit 2")


def _add_plan_flags(p: argparse.ArgumentParser) -> None:
    """Flags of plan and plan-batch: capacity already reserved, and the time the plan is made at."""
    p.add_argument("--reservations", metavar="PATH",
                   help="capacity reservations: CSV with header cloud,region,zone,instance_type,count,usd_per_hour,"
                        "ends (count: free nodes of that instance type, not GPUs; usd_per_hour: marginal USD per "
                        "node-hour, 0 if already paid; ends: ISO-8601 or blank)")
    p.add_argument("--now", metavar="TIME", help="plan as of this ISO-8601 time (reservation end dates are compared "
                                                  "with it); default: the current time")


def _add_calibration_flags(p: argparse.ArgumentParser) -> None:
    """--calibration / --no-calibration (issue 26): the user's measured spot rates and speeds."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--calibration", metavar="FILE",
                   help="a gpufleet.calibration/v1 file (placement calibrate); default: the newest one calibrate "
                        "wrote in the user data directory")
    g.add_argument("--no-calibration", action="store_true", help="ignore calibration files: model figures only")


def _calibrate_parser(sub: Any) -> None:
    k = sub.add_parser("calibrate", help="turn the fleet's measurements (Prometheus) into a calibration file",
                       description="Read spot node-hours and reclaims (placement dispatch's metrics) and the "
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


def _profile_arguments(p: argparse.ArgumentParser) -> None:
    """placement profile's flags (placement.profile)."""
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
    p.add_argument("--timeout", type=float, default=3600.0, metavar="SECONDS",
                   help="per run (default 3600)")
    p.add_argument("--json", action="store_true", help="print the row and the trainer's results as JSON")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="placement", description="Rank where a GPU job can run now, with compute and egress "
                     "cost, across AWS and GCP. Exit codes: 0 placed, 1 nothing feasible, 2 bad input.")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser("plan", help="rank every cloud/region/zone/instance for one job")
    p.add_argument("job", metavar="JOB.yaml", help="job spec (README.md#job-spec)")
    p.add_argument("--top", type=int, default=10, metavar="N", help="rows to show (default 10)")
    p.add_argument("--all-candidates", action="store_true", help="list every candidate, excluded ones with the reason")
    p.add_argument("--egress-allowance-gb", type=float, default=0.0, metavar="GB",
                   help="AWS internet egress still free this month (the account-wide 100 GB allowance) that this job "
                        "may use; default 0: one month's allowance is not every job's")
    _add_plan_flags(p)
    _add_data_flags(p)
    _add_calibration_flags(p)

    b = sub.add_parser("plan-batch", help="place a burst of jobs jointly under shared quota (exact MILP)")
    b.add_argument("jobs", metavar="JOBS.yaml", help="a mapping with a jobs: list of job specs")
    b.add_argument("--no-greedy", action="store_true", help="skip the one-by-one greedy comparison")
    b.add_argument("--time-limit", type=float, default=30.0, metavar="SECONDS",
                   help="time budget for generating candidates and solving; the best solution found by then is "
                        "reported with its gap, jobs not reached are reported unplaced (default 30)")
    from placement.schedule_cli import add_schedule_flags

    add_schedule_flags(b)
    _add_plan_flags(b)
    _add_data_flags(b)
    _add_calibration_flags(b)

    o = sub.add_parser("offers", help="list catalog offers for an accelerator")
    o.add_argument("--accelerator", required=True, help="GPU name, e.g. H100")
    o.add_argument("--cloud", choices=("aws", "gcp"), help="only this cloud")
    o.add_argument("--region", help="only this region")
    o.add_argument("--capacity", choices=("spot", "on-demand", "any"), default="any",
                   help="only offers with this price (default any)")
    _add_data_flags(o)

    r = sub.add_parser("refresh", help="write a new catalog file from live AWS/GCP data (to the user data directory)")
    cast(_Parser, r).describe = _refresh_description
    r.add_argument("--output", "-o", metavar="PATH", help="where to write (default: catalog.json in the user's data "
                                                           "directory, which plan then prefers when newer)")
    r.add_argument("--allow-shrink", action="store_true",
                   help="write even if a cloud lost more than 20%% of its offers (refused by default)")
    r.add_argument("--cloud", action="append", choices=("aws", "gcp"), help="only this cloud (repeatable)")
    r.add_argument("--aws-profile", metavar="NAME", help="AWS profile (default: the standard credential chain)")
    r.add_argument("--gcp-project", metavar="ID", help="GCP project (default: from Application Default "
                                                       "Credentials / GOOGLE_CLOUD_PROJECT)")
    r.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                   help="per-call timeout for the live queries (default 10)")

    s = sub.add_parser("submit", help="place a job on an existing cluster and hand it to that cluster's Kueue queue")
    s.add_argument("job", metavar="JOB.yaml", help="job spec (README.md#job-spec)")
    s.add_argument("--stacks", metavar="FILE", help="stack outputs exported with `pulumi stack output --json` "
                                                    "(docs/kueue-hub.md#placement-submit; try "
                                                    "placement/examples/stacks-outputs.json)")
    s.add_argument("--stack", action="append", default=[], metavar="NAME",
                   help="a Pulumi stack to read outputs from with `pulumi stack output --json` (repeatable)")
    s.add_argument("--via-hub", action="store_true",
                   help="send a portable job to the MultiKueue hub's all-workers queue; placement dispatch picks the "
                        "worker of its fabric group")
    s.add_argument("--dry-run", action="store_true", help="print the manifest instead of applying it")
    s.add_argument("--kubeconfig", metavar="PATH", help="kubeconfig to apply with (default: the stack's output)")
    s.add_argument("--write-stack", metavar="FILE",
                   help="when a new stack would be cheaper (or is needed), write its stack file to FILE instead of "
                        "printing it (never overwrites; docs/placement.md#submit-and-a-new-stack)")
    _add_data_flags(s, live=False)
    _add_calibration_flags(s)

    pf = sub.add_parser("portfolio", help="choose the commitments a weekly demand forecast justifies (exact MILP)")
    from placement.portfolio_cli import add_arguments as add_portfolio_arguments

    add_portfolio_arguments(pf)
    _add_calibration_flags(pf)

    c = sub.add_parser("completion", help="print a shell completion script: eval \"$(placement completion bash)\"")
    c.add_argument("shell", choices=("bash", "zsh"),
                   help="bash; zsh uses the same script after `autoload -U bashcompinit && bashcompinit`")

    d = sub.add_parser("dispatch", help="the MultiKueue External dispatcher: nominate the cheapest worker, "
                                        "counting the wait, for every hub Workload",
                       description="The hub's MultiKueue dispatcher, a controller that runs on the hub (the hub stack "
                       "deploys it with gpufleet:hub.dispatcher: External). For every Workload waiting in the hub's "
                       "all-workers queue it nominates the worker with the lowest cost: the placement engine's total "
                       "plus the expected wait for admission, moving on when the nominated worker has not admitted "
                       "within --admission-deadline-seconds. It needs the hub's API (--kubeconfig or --in-cluster; "
                       "exit 1 when unreachable) and a fleet file: worker key -> that worker stack's outputs, e.g. "
                       "placement/examples/fleet.json (the example stacks' workers). --once --dry-run decides one "
                       "pass, prints it and writes nothing.")
    from placement.dispatch.command import add_arguments

    add_arguments(d)
    _add_calibration_flags(d)
    _calibrate_parser(sub)
    pf = sub.add_parser("profile", help="benchmark the reference trainer here and record its per-GPU throughput "
                                        "as a calibration speed row")
    _profile_arguments(pf)
    rp = sub.add_parser("report", help="unit economics per team and workload class from the hub's Workloads and "
                                       "Prometheus: GPU-hours, utilisation, $ per run, planned vs measured")
    rp.add_argument("--kubeconfig", metavar="PATH", help="the hub's kubeconfig (default: $KUBECONFIG, ~/.kube/config)")
    rp.add_argument("--prometheus", metavar="URL", help="the Prometheus server with the trainer's metrics "
                                                        "(without it, progress and utilisation are unknown)")
    rp.add_argument("--from", dest="start", metavar="TIME", help="window start, ISO-8601 (default: 7 days before --to)")
    rp.add_argument("--to", dest="end", metavar="TIME", help="window end, ISO-8601 (default: now)")
    rp.add_argument("--chart", metavar="FILE.png", help="also draw planned vs measured cost per run (needs the "
                                                         "charts extra: matplotlib)")
    rp.add_argument("--catalog", action="append", default=[], metavar="CLOUD=PATH",
                    help="price the plans with a SkyPilot-format vms.csv for CLOUD instead of the embedded catalog")
    rp.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS", help="per request (default 10)")
    rp.add_argument("--json", action="store_true", help="print one gpufleet.report/v1 JSON document")
    _add_calibration_flags(rp)
    return parser


def _live_data(args: argparse.Namespace, catalog: Catalog, quotas: QuotaTable, accelerators: Sequence[str],
               gpus: int | None, gpus_per_node: int | None = None,
               reservations: bool = False) -> tuple[Catalog, QuotaTable, list[dict[str, Any]]]:
    """Overlay live data (issue: live quota/prices) when --live or --offline asks for it."""
    catalog, quotas, sources, _ = _live(args, catalog, quotas, accelerators, gpus, gpus_per_node, reservations)
    return catalog, quotas, sources


def _live(args: argparse.Namespace, catalog: Catalog, quotas: QuotaTable, accelerators: Sequence[str],
          gpus: int | None, gpus_per_node: int | None,
          reservations: bool) -> tuple[Catalog, QuotaTable, list[dict[str, Any]], tuple[Reservation, ...]]:
    if not (getattr(args, "live", False) or getattr(args, "offline", False)):
        return catalog, quotas, [], ()
    from placement.live import LiveRequest
    from placement.live.runner import fetch_live

    # Placement scores ask for the job's node count on each shape; without a single job, one node.
    request = LiveRequest(accelerators=tuple(accelerators), target_nodes=1, target_gpus=gpus,
                          aws_profile=args.aws_profile,
                          gcp_project=args.gcp_project, refresh=args.refresh, offline=args.offline,
                          timeout_s=args.timeout, progress=not args.json and sys.stderr.isatty(),
                          gpus_per_node=gpus_per_node, reservations=reservations)
    live = fetch_live(request, catalog)
    _no_credentials(args, live.sources)
    _warn(live.quotas.warnings)
    return live.catalog, quotas.merged(live.quotas), [s.as_dict() for s in live.sources], live.reservations


def _no_credentials(args: argparse.Namespace, sources: Sequence[Any]) -> None:
    """A cloud without credentials answers from the catalog: say so on stderr. When no cloud has any, the whole
    answer would be catalog data under a --live flag: refused (exit 2) unless --allow-catalog-fallback, so a
    script never takes catalog prices and unknown quota for live ones."""
    clouds = {s.cloud for s in sources}
    missing = sorted({s.cloud for s in sources if s.status == "no-credentials"})
    if not missing:
        return
    if set(missing) == clouds and not getattr(args, "allow_catalog_fallback", False):
        raise UsageError(f"--live: no credentials for {' or '.join(missing)}, so the answer would be catalog data "
                         "(catalog prices, quota unknown); configure credentials (--aws-profile, `gcloud auth "
                         "application-default login`) or pass --allow-catalog-fallback")
    _warn([f"--live: no {cloud} credentials: {cloud} candidates use catalog data (catalog prices, quota unknown)"
           for cloud in missing])


def _trust(catalog: Catalog, now: dt.datetime) -> None:
    """Say on stderr when a cloud's catalog is over a week old, and how old (placement.trust)."""
    from placement.trust import stale_lines

    _warn(stale_lines(catalog, now))


def _warn(lines: Sequence[str]) -> None:
    for line in lines:
        print(f"placement: warning: {line}", file=sys.stderr)


def _now(args: argparse.Namespace) -> dt.datetime:
    import datetime as dt

    from placement.reservations import parse_time

    if getattr(args, "now", None) is None:  # offers has no --now
        return dt.datetime.now(dt.UTC)
    if not args.now.strip():
        raise UsageError("--now: is empty; give an ISO-8601 time such as 2026-12-01T00:00:00Z, or leave the flag out "
                         "for the current time")
    return parse_time(args.now, "--now", "", blank="")


def _reservations(args: argparse.Namespace) -> tuple[Reservation, ...]:
    return load_reservations(args.reservations)


def _emit(doc: dict[str, Any] | None, text: str, as_json: bool) -> None:
    # Strict JSON: NaN / Infinity are not JSON; the core reports an unknown number as null.
    sys.stdout.write((json.dumps(doc, indent=2, allow_nan=False) if as_json else text) + "\n")


# ----------------------------------------------------------------------------- commands


def cmd_plan(args: argparse.Namespace) -> int:
    from placement.engine import plan
    from placement.jobspec import check_allowed_zones, parse_job
    from placement.render import plan_doc, plan_text

    if args.top < 1:
        raise UsageError("--top: must be at least 1")
    with in_file(args.job):
        job = parse_job(load_yaml(args.job, "job spec"))
    allowance = _allowance(args.egress_allowance_gb)
    now = _now(args)
    catalog = load_catalog(args.catalog)
    quotas = load_quotas(args.quotas)
    reserved = _reservations(args)
    _warn(job.warnings + quotas.warnings)
    catalog, quotas, sources, live_reserved = _live(args, catalog, quotas, job.accelerators, job.gpus,
                                                    job.gpus_per_node, True)
    _trust(catalog, now)
    reserved += live_reserved
    with in_file(args.job):
        _warn(check_allowed_zones(job, _offered_zones(catalog, reserved)))
    from placement.calibrate import apply_calibration

    cal, offers, job = apply_calibration(args, now, catalog.offers, job)
    result = plan(job, offers, quotas, reservations=reserved, now=now, egress_allowance_gb=allowance)
    doc = plan_doc(result, catalog, top=args.top, all_candidates=args.all_candidates, sources=sources, now=now,
                   reservations=reserved)
    text = "" if args.json else plan_text(result, catalog, top=args.top, all_candidates=args.all_candidates,
                                          sources=sources, width=output_width(), reservations=reserved)
    doc, text = _decides(result, offers, cal, doc, text)
    _emit(doc, text, args.json)
    return EXIT_OK if result.chosen else EXIT_NOTHING_FEASIBLE


def _decides(result: Any, offers: Sequence[Any], cal: Any, doc: dict[str, Any],
             text: str) -> tuple[dict[str, Any], str]:
    """Add what decides the plan: the break-even spot rate, the warnings on the pick and the calibration used."""
    from placement.calibrate import info
    from placement.decides import break_even, break_even_text, price_flag, price_flag_text, warnings

    rate = break_even(result)
    found = warnings(result, offers)
    _warn(found)
    doc = {**doc, "break_even_interruptions_per_hour": rate, "warnings": found, "calibration": info(cal)}
    flag = price_flag(result.chosen, offers)
    if flag and doc.get("chosen") is not None:
        doc["chosen"] = {**doc["chosen"], "price_flag": flag}
    if text:
        from placement.render import wrap

        lines = [break_even_text(rate, result.chosen)] if result.rows else []
        if flag and result.chosen is not None:
            lines.append(price_flag_text(result.chosen, flag))
        if cal is not None:
            lines.append(f"calibration: {cal.source} (measured {cal.measured_from:%Y-%m-%d} to "
                         f"{cal.measured_to:%Y-%m-%d})")
        text += "".join("\n" + wrap(line, output_width(), "  ") for line in lines)
    return doc, text


def cmd_plan_batch(args: argparse.Namespace) -> int:
    from placement.batch import greedy, prepare, solve
    from placement.jobspec import check_allowed_zones, parse_batch
    from placement.render import batch_doc, batch_text

    with in_file(args.jobs):
        jobs = parse_batch(load_yaml(args.jobs, "batch file"))
    if not 0 < args.time_limit < float("inf"):  # also refuses nan
        raise UsageError("--time-limit: must be a positive number of seconds")
    now = _now(args)
    catalog = load_catalog(args.catalog)
    quotas = load_quotas(args.quotas)
    reserved = _reservations(args)
    if not args.no_schedule:  # the schedule's own input errors before any warning or solving
        from placement.schedule_cli import check_input

        check_input(args, jobs, reserved, now)
    _warn([w for j in jobs for w in j.warnings] + list(quotas.warnings))
    accels = sorted({a for j in jobs for a in j.accelerators})
    catalog, quotas, sources, live_reserved = _live(args, catalog, quotas, accels, None, None, True)
    reserved += live_reserved
    _trust(catalog, now)
    zones = _offered_zones(catalog, reserved)
    with in_file(args.jobs):
        _warn([w for j in jobs for w in check_allowed_zones(j, zones, f"jobs[{j.name}].")])
    from placement.calibrate import apply_calibration
    from placement.calibration import calibrated_job

    cal, offers, _ = apply_calibration(args, now, catalog.offers)
    jobs = tuple(calibrated_job(cal, j) for j in jobs)
    # --time-limit bounds candidate generation and solving together; candidates are generated once for both.
    ready = prepare(jobs, offers, quotas, reservations=reserved, now=now, time_limit_s=args.time_limit)
    result = solve(jobs, offers, quotas, reservations=reserved, now=now, prepared=ready)
    if not args.no_schedule:  # over time (placement.schedule), compared with this all-at-once placement
        from placement.schedule_cli import run_schedule

        return run_schedule(args, jobs, catalog, quotas, reserved, sources, now, result, ready, offers=offers)
    base = None if args.no_greedy else greedy(jobs, offers, quotas, reservations=reserved, now=now,
                                              prepared=ready)
    text = "" if args.json else batch_text(result, catalog, base, output_width())
    _emit(batch_doc(result, catalog, base, sources, now), text, args.json)
    # 0 only when every job is placed: a partial plan is shown, but a script must not take it for success.
    return EXIT_OK if result.placed == len(jobs) else EXIT_NOTHING_FEASIBLE


def _offered_zones(catalog: Catalog, reserved: Sequence[Reservation]) -> set[str]:
    """Every zone a candidate can be in: the catalogs' offers' and the reservations'."""
    return {o.zone for o in catalog.offers} | {r.zone for r in reserved}


def _allowance(gb: float) -> float:
    """``--egress-allowance-gb``: between 0 and AWS's monthly allowance (egress.yaml)."""
    import math

    from placement.egress import egress_book

    cap = egress_book().aws.internet_free_gb_per_month
    if not math.isfinite(gb) or gb < 0 or gb > cap:
        raise UsageError(f"--egress-allowance-gb: must be between 0 and {cap:g} (AWS's monthly allowance), got {gb:g}")
    return gb


def cmd_offers(args: argparse.Namespace) -> int:
    from placement.render import catalog_info, offer_doc, offers_text
    from placement.shapes import shape_book

    book = shape_book()
    accel = book.canonical_accelerator(args.accelerator)
    if accel not in book.accelerators():
        raise UsageError(f"--accelerator: unknown accelerator {shown(args.accelerator)}; known: "
                         + ", ".join(sorted(book.accelerators())))
    catalog = load_catalog(args.catalog)
    catalog, _, sources = _live_data(args, catalog, load_quotas(args.quotas), [accel], None)
    offers = [o for o in catalog.offers if o.shape.accelerator == accel
              and (args.cloud is None or o.cloud == args.cloud)
              and (args.region is None or o.region == args.region)
              and (args.capacity != "spot" or o.spot_price is not None)
              and (args.capacity != "on-demand" or o.price is not None)]
    offers.sort(key=lambda o: (o.cloud, o.region, o.zone, o.instance_type))
    now = _now(args)
    _trust(catalog, now)
    doc = {"schema": "gpufleet.placement/v1", "kind": "offers", "accelerator": accel,
           "catalog": catalog_info(catalog, now), "sources": sources,
           "offers": [offer_doc(o) for o in offers]}
    _emit(doc, "" if args.json else offers_text(offers, output_width()), args.json)
    return EXIT_OK if offers else EXIT_NOTHING_FEASIBLE


def cmd_refresh(args: argparse.Namespace) -> int:
    from placement.live.refresh import run_refresh

    return run_refresh(args)


def cmd_calibrate(args: argparse.Namespace) -> int:
    from placement.calibrate import run_calibrate

    return run_calibrate(args)


def cmd_profile(args: argparse.Namespace) -> int:
    from placement.profile import run_profile

    return run_profile(args)


def cmd_report(args: argparse.Namespace) -> int:
    from placement.fleet.errors import FleetError
    from placement.report import run_report

    try:
        return run_report(args)
    except FleetError as exc:
        print(f"placement: error: {exc}", file=sys.stderr)
        return exc.code


def cmd_submit(args: argparse.Namespace) -> int:
    from placement.submit import run_submit

    return run_submit(args)


def cmd_portfolio(args: argparse.Namespace) -> int:
    from placement.portfolio_cli import run_portfolio

    return run_portfolio(args)


def cmd_completion(args: argparse.Namespace) -> int:
    from placement.completion import bash_script

    script = bash_script(build_parser())
    if args.shell == "zsh":
        script = "autoload -U +X bashcompinit && bashcompinit\n" + script
    sys.stdout.write(script)
    return EXIT_OK


def cmd_dispatch(args: argparse.Namespace) -> int:
    from placement.dispatch.command import run_dispatch

    return run_dispatch(args)


COMMANDS = {"plan": cmd_plan, "plan-batch": cmd_plan_batch, "offers": cmd_offers, "refresh": cmd_refresh,
            "submit": cmd_submit, "dispatch": cmd_dispatch, "completion": cmd_completion,
            "calibrate": cmd_calibrate, "profile": cmd_profile, "report": cmd_report, "portfolio": cmd_portfolio}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code (0 placed, 1 nothing feasible, 2 bad input)."""
    from placement.errors import InputError

    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.version:
            from placement import __version__

            print(f"placement (gpufleet) {__version__}")
            return EXIT_OK
        if not args.command:
            parser.print_help()
            return EXIT_BAD_INPUT
        if getattr(args, "refresh", False) and not getattr(args, "live", False):
            raise UsageError(f"placement {args.command}: --refresh only applies with --live (it skips the live "
                             "cache); add --live or drop --refresh (see --help)")
        if getattr(args, "allow_catalog_fallback", False) and not getattr(args, "live", False):
            raise UsageError(f"placement {args.command}: --allow-catalog-fallback only applies with --live; add "
                             "--live or drop it (see --help)")
        # A plan's objects live until it exits: no collector passes over them (plan-batch and dispatch run on).
        with paused_gc() if args.command in ("plan", "offers", "submit") else contextlib.nullcontext():
            code = COMMANDS[args.command](args)
        sys.stdout.flush()  # a full disk or a closed pipe shows here, not as a traceback at exit
        return code
    except UsageError as exc:
        print(f"placement: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except InputError as exc:
        print(f"placement: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # stdout closed early (e.g. piped into head): not an error of ours, and nothing to say.
        _drop_stdout()
        return EXIT_OK
    except OSError as exc:
        # Writing the output failed (a full disk: `> /dev/full`), or a path the checks above did not name.
        what = shown(str(exc.filename))[1:-1] if exc.filename else "cannot write the output"
        print(f"placement: error: {what}: {exc.strerror or exc}", file=sys.stderr)
        _drop_stdout()
        return EXIT_BAD_INPUT


def _drop_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's last flush cannot fail again at exit."""
    import contextlib

    with contextlib.suppress(OSError, ValueError):  # no real file descriptor (tests' captured stdout)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def run() -> None:
    sys.exit(main())


if __name__ == "__main__":
    run()
