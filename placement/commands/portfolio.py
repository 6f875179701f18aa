"""``placement portfolio FORECAST.yaml``: flags, the table and the versioned JSON document (gpufleet.portfolio/v1)."""

from __future__ import annotations

import argparse
import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from placement.model.commitments import Figure
    from placement.plan.portfolio import Answer, Commitment

SCHEMA = "gpufleet.portfolio/v1"
PROGRESS_AFTER_S = 2.0  # a solve still running after this long says so on stderr


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("forecast", metavar="FORECAST.yaml", help="weekly demand per workload class (docs/portfolio.md)")
    p.add_argument("--rates", metavar="FILE", help="your negotiated commitment rates, quota lead times and pool "
                                                   "availability (YAML, the layout of placement/data/commitments.yaml)")
    p.add_argument("--catalog", action="append", default=[], metavar="CLOUD=PATH",
                   help="use a SkyPilot-format vms.csv for CLOUD instead of the embedded catalog; repeatable")
    p.add_argument("--quotas", metavar="PATH", help="quota file (CSV cloud,region,quota,limit,usage); an unknown "
                                                     "on-demand quota bounds nothing, an unknown spot quota is "
                                                     "availability.spot_nodes_without_quota nodes")
    p.add_argument("--time-limit", type=float, default=10.0, metavar="SECONDS",
                   help="solver time per solve (the plan and each comparison; default 10)")
    p.add_argument("--json", action="store_true", help=f"print one {SCHEMA} JSON document")
    g = p.add_argument_group("live commitment prices (needs the 'live' extra: boto3, google-cloud-billing)")
    g.add_argument("--live", action="store_true",
                   help="read Capacity Block offerings for the coming weeks, Savings Plan rates per instance type "
                        "and GCP commitment and calendar-mode SKUs from the clouds, over the data's figures")
    g.add_argument("--aws-profile", metavar="NAME", help="AWS profile (default: the standard credential chain)")
    g.add_argument("--gcp-project", metavar="ID", help="GCP project (default: Application Default Credentials)")
    g.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                   help="per-call timeout for live queries (default 10)")
    from placement.commands.common import add_calibration_flags

    add_calibration_flags(p)


def _money(x: float) -> float:
    return round(x, 2)


def solver_text(status: str, gap: float, time_limited: bool, asked: float) -> str:
    """The solver's status beside a figure (:func:`placement.plan.milp.status_text`)."""
    from placement.plan.milp import status_text

    return status_text(status, gap, time_limited, asked)


def _solver(a: Answer) -> dict[str, Any]:
    return {"name": "HiGHS", "status": a.status, "mip_gap": round(a.gap, 6), "time_limited": a.time_limited,
            "asked_gap": a.asked_gap, "seconds": round(a.seconds, 2),
            "text": solver_text(a.status, a.gap, a.time_limited, a.asked_gap)}


def _figure(it: str, f: Figure) -> dict[str, Any]:
    return {"instance_type": it, "discount": round(f.discount, 4),
            "usd_per_node_hour": None if f.usd_per_node_hour is None else round(f.usd_per_node_hour, 4),
            "source": f.source, "date": f.date, "verified": f.verified, "per_instance_type": f.per_pool,
            "checked": f.checked}


def _commitment(c: Commitment) -> dict[str, Any]:
    b = c.buy
    p = b.pool
    return {
        "term": b.term.id, "kind": b.term.kind, "cloud": b.term.cloud,
        "region": p.region if p is not None else (None if b.scope[0] == "*" else b.scope[0]),
        "instance_type": p.instance_type if p is not None else None,
        "accelerator": p.accelerator if p is not None else None,
        "scope": b.term.scope if p is None else "pool",
        "family": None if p is not None else (None if b.scope[1] == "*" else b.scope[1]),
        "nodes": c.nodes if p is not None else None, "gpus": c.nodes * p.gpus if p is not None else None,
        "usd_per_hour": None if p is not None else round(c.amount, 3),
        "unit": "nodes" if p is not None else "usd_per_hour",
        "holds_capacity": b.term.guarantees_capacity,
        "start_week": b.start, "weeks": b.weeks, "beyond_horizon_weeks": b.past,
        "total_usd": _money(c.total_usd), "term_usd": _money(c.term_usd), "beyond_horizon_usd": _money(c.past_usd),
        "upfront_usd": _money(c.upfront_usd), "break_even_utilisation": round(c.break_even, 4),
        "planned_utilisation": round(c.planned_use, 4), "source": b.term.source,
        "verified": not c.unverified, "figures": [_figure(it, f) for it, f in c.figures]}


def answer_doc(a: Answer) -> dict[str, Any]:
    return {"total_usd": _money(a.total_usd), "unserved_gpu_hours": round(a.unserved_gpu_hours, 1),
            "solver": _solver(a),
            "commitments": [_commitment(c) for c in a.commitments],
            "weeks": [{"week": i, "demand_gpu_hours": round(w.demand, 1), "reserved": round(w.reserved, 1),
                       "spot": round(w.spot, 1), "on_demand": round(w.on_demand, 1), "unserved": round(w.unserved, 1),
                       "gpu_hours_held": round(w.gpu_hours, 1),
                       "on_demand_at_commitment_rates_gpu_hours": round(w.committed_rate, 1)}
                      for i, w in enumerate(a.weeks)],
            "pools": [{"cloud": u.cloud, "region": u.region, "instance_type": u.instance_type,
                       "reserved_gpu_hours": round(u.reserved, 1), "spot_gpu_hours": round(u.spot, 1),
                       "on_demand_gpu_hours": round(u.on_demand, 1),
                       "on_demand_at_commitment_rates_gpu_hours": round(u.committed_rate, 1),
                       "spot_bounded_without_quota_row": u.spot_without_quota} for u in a.pools],
            "quota_requests": [{"cloud": q.cloud, "region": q.region, "quota": q.key, "unit": q.unit,
                                "headroom": q.headroom, "request": q.request, "lead_weeks": q.lead_weeks,
                                "nodes": q.nodes, "instance_type": q.instance_type,
                                "units_per_node": q.units_per_node, "gpus_per_node": q.gpus_per_node}
                               for q in a.quota]}


def _short(a: Answer) -> dict[str, Any]:
    return {"total_usd": _money(a.total_usd), "unserved_gpu_hours": round(a.unserved_gpu_hours, 1),
            "status": a.status, "solver": _solver(a)}


def warnings_of(best: Answer, book_rule: str, weeks_k: int, horizon: int) -> list[str]:
    """What the answer rests on that a user must know before acting: every recommended commitment whose figure
    was not read at its source, Capacity Block prices that move, spot bounded by an assumption, a stopped solve."""
    out = []
    for c in best.commitments:
        b = c.buy
        name = f"{b.term.id} {b.what()} in {b.where()} from week {b.start}"
        for it, f in c.unverified:
            what = f"${f.usd_per_node_hour:,.2f} per node-hour" if f.usd_per_node_hour is not None \
                else f"{f.discount:.1%} off on-demand"
            whose = f"{it}'s row" if f.per_pool else "the term's own figure"
            out.append(f"{name} rests on an unverified figure: {what} ({whose}, {f.source}, {f.date or 'undated'}); "
                       "check it, or put your own in --rates, or read it with --live")
        if b.term.kind == "capacity-block":
            for it, f in c.figures:
                if f.verified and not f.source.startswith("live:"):
                    price = f"${f.usd_per_node_hour:,.2f} per node-hour" if f.usd_per_node_hour is not None \
                        else f"{f.discount:.1%} off"
                    out.append(f"{b.term.id} {it} in {b.where()}: Capacity Block prices move with supply and demand; "
                               f"{price} is a figure of {f.date or 'no stated date'}: --live reads the offering "
                               "for your dates")
        if b.past > 0 and book_rule == "last-weeks":
            out.append(f"{name} runs {b.past} weeks past the {horizon}-week horizon: counted "
                       f"${c.past_usd:,.2f} for them (its unused share in the last {min(weeks_k, horizon)} weeks; "
                       f"${c.term_usd:,.2f} is owed over its {b.weeks} weeks)")
    bounded = [u for u in best.pools if u.spot_without_quota]
    if bounded:
        names = ", ".join(f"{u.cloud} {u.region} {u.instance_type}" for u in bounded[:4])
        more = f" and {len(bounded) - 4} more" if len(bounded) > 4 else ""
        out.append(f"spot on {names}{more} has no quota row: it was bounded by "
                   "availability.spot_nodes_without_quota (an assumption); pass --quotas with your limits")
    if best.time_limited:
        out.append(f"the plan's solve stopped at its time limit with a gap of {best.gap:.2%}: raise --time-limit")
    return list(dict.fromkeys(out))  # one line per fact, in order


def report_doc(rep: dict[str, Any], sources: tuple[str, ...], book: Any = None, horizon: int = 0) -> dict[str, Any]:
    best = rep["best"]
    doc = {"schema": SCHEMA, "kind": "portfolio", "rates": list(sources), "demand_unit": "progress GPU-hours",
           **answer_doc(best)}
    doc["upfront_usd"] = _money(sum(c.upfront_usd for c in best.commitments))
    doc["commitments_usd"] = _money(sum(c.total_usd for c in best.commitments))
    doc["compare"] = {k: _short(v) for k, v in rep["baselines"].items()}
    doc["demand_moves"] = {k: {"replanned_total_usd": _money(re.total_usd),
                               "replanned_unserved_gpu_hours": round(re.unserved_gpu_hours, 1),
                               "replanned_commitments": len(re.commitments), "replanned_solver": _solver(re),
                               "this_portfolio_total_usd": None if fx is None else _money(fx.total_usd),
                               "this_portfolio_unserved_gpu_hours": None if fx is None
                               else round(fx.unserved_gpu_hours, 1),
                               "this_portfolio_solver": None if fx is None else _solver(fx)}
                           for k, (re, fx) in rep["moves"].items()}
    rule = getattr(book, "beyond_horizon", "last-weeks")
    k = getattr(book, "beyond_horizon_weeks", 4)
    doc["beyond_horizon"] = {"rule": rule, "weeks": k}
    doc["warnings"] = warnings_of(best, rule, k, horizon or len(best.weeks))
    return doc


def _amount(c: dict[str, Any]) -> str:
    if c["unit"] == "nodes":
        return f"{c['instance_type']} x{c['nodes']}"
    what = f"{c['family']} family" if c["family"] else "all EC2"
    return f"{what} ${c['usd_per_hour']:,.2f}/h"


def report_text(doc: dict[str, Any]) -> str:
    from placement.commands.render import table

    out = []
    rows = [[c["term"], f"{c['cloud']} {c['region'] or 'all regions'}", _amount(c), str(c["start_week"]),
             str(c["weeks"]) + (f" ({c['beyond_horizon_weeks']} past)" if c["beyond_horizon_weeks"] else ""),
             f"{c['total_usd']:,.2f}", f"{c['upfront_usd']:,.2f}", f"{c['break_even_utilisation']:.0%}",
             f"{c['planned_utilisation']:.0%}", "yes" if c["verified"] else "NO"] for c in doc["commitments"]]
    if rows:
        out.append(table(("commit to", "where", "what", "from week", "weeks", "total $", "upfront $", "pays off at",
                          "planned use", "verified"), rows, right={3, 5, 6, 7, 8}))
    else:
        out.append("no commitment pays off for this forecast: spot and on-demand serve it")
    out.append("")
    wk = [[str(w["week"]), f"{w['demand_gpu_hours']:,.0f}", f"{w['reserved']:,.0f}", f"{w['spot']:,.0f}",
           f"{w['on_demand']:,.0f}", f"{w['unserved']:,.0f}", f"{w['gpu_hours_held']:,.0f}",
           f"{w['on_demand_at_commitment_rates_gpu_hours']:,.0f}"] for w in doc["weeks"]]
    out.append(table(("week", "demand", "reserved", "spot", "on-demand", "unserved", "GPU-h held",
                      "at commitment rates"), wk, right={0, 1, 2, 3, 4, 5, 6, 7}))
    out.append("(demand and what served it in progress GPU-hours: GPU-hours on each class's first accelerator; "
               "GPU-h held: the GPU-hours that run them, with restarts)")
    if doc["pools"]:
        out.append("")
        pr = [[f"{u['cloud']} {u['region']} {u['instance_type']}", f"{u['reserved_gpu_hours']:,.0f}",
               f"{u['spot_gpu_hours']:,.0f}" + ("*" if u["spot_bounded_without_quota_row"] else ""),
               f"{u['on_demand_gpu_hours']:,.0f}", f"{u['on_demand_at_commitment_rates_gpu_hours']:,.0f}"]
              for u in doc["pools"]]
        out.append(table(("where it runs (GPU-h held)", "reserved", "spot", "on-demand", "at commitment rates"), pr,
                         right={1, 2, 3, 4}))
    for q in doc["quota_requests"]:
        unit = "vCPU" if q["unit"] == "vcpu" else "GPUs" if q["unit"] == "gpu" else q["unit"]
        each = f"{q['units_per_node']:g} vCPU and {q['gpus_per_node']} GPUs" if q["unit"] == "vcpu" \
            else f"{q['gpus_per_node']} GPUs"
        nodes = (f" = {q['nodes']} {q['instance_type']} node{'s' if q['nodes'] != 1 else ''} ({each} each)"
                 if q["nodes"] else "")
        out.append(f"request now: {q['cloud']} {q['region']} {q['quota']} +{q['request']:,g} {unit}{nodes} "
                   f"(headroom {q['headroom']:,g}; granted in about {q['lead_weeks']} weeks)")
    out.append("")
    out.append(f"expected total ${doc['total_usd']:,.2f}, {doc['unserved_gpu_hours']:,.0f} GPU-h unserved "
               f"(commitments ${doc['commitments_usd']:,.2f}, ${doc['upfront_usd']:,.2f} upfront; solver HiGHS: "
               f"{doc['solver']['text']})")
    names = {"all_on_demand": "all on-demand", "all_spot": "all spot (if every hour tolerated interruption)",
             "reserve_the_peak": "reserve the peak (capacity commitments only)"}
    for k, v in doc["compare"].items():
        out.append(f"  against {names[k]}: ${v['total_usd']:,.2f}, {v['unserved_gpu_hours']:,.0f} GPU-h unserved "
                   f"({v['solver']['text']})")
    for k, v in doc["demand_moves"].items():
        label = "demand +20 %" if "plus" in k else "demand -20 %"
        line = (f"  {label}: re-planned ${v['replanned_total_usd']:,.2f}, {v['replanned_unserved_gpu_hours']:,.0f} "
                f"GPU-h unserved, {v['replanned_commitments']} commitments ({v['replanned_solver']['text']})")
        if v["this_portfolio_total_usd"] is not None:
            line += (f"; with this portfolio ${v['this_portfolio_total_usd']:,.2f}, "
                     f"{v['this_portfolio_unserved_gpu_hours']:,.0f} GPU-h unserved "
                     f"({v['this_portfolio_solver']['text']})")
        out.append(line)
    for w in doc["warnings"]:
        out.append(f"warning: {w}")
    return "\n".join(out)


@contextlib.contextmanager
def _ticker(label: str, i: int, n: int, stream: Any) -> Iterator[None]:
    """Say on ``stream`` what is being solved when it runs past :data:`PROGRESS_AFTER_S`, and when it is done."""
    t0 = time.monotonic()
    said = threading.Event()

    def say() -> None:
        said.set()
        print(f"placement: portfolio: solving {label} ({i} of {n})...", file=stream, flush=True)

    timer = threading.Timer(PROGRESS_AFTER_S, say)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        if said.is_set():
            print(f"placement: portfolio: {label} solved in {time.monotonic() - t0:.1f} s", file=stream, flush=True)


class _Progress:
    """``portfolio_report``'s progress callback: each solve runs inside a :func:`_ticker`."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.current: contextlib.ExitStack | None = None

    def __call__(self, label: str, i: int, n: int) -> None:
        self.close()
        self.current = contextlib.ExitStack()
        self.current.enter_context(_ticker(label, i, n, self.stream))

    def close(self) -> None:
        if self.current is not None:
            self.current.close()
            self.current = None


def _live_book(args: argparse.Namespace, book: Any, forecast: Any, offers: Any) -> tuple[Any, list[str],
                                                                                         list[dict[str, Any]]]:
    """``book`` with the clouds' own commitment figures (``--live``), the warnings and the source rows."""
    from placement.live.commitments import LiveRates, read_rates
    from placement.plan.portfolio import pools

    accels = {a for c in forecast.classes for a in c.accelerators}
    ps = [p for p in pools(offers, accels) if any(
        (not c.regions or p.region in c.regions) and (not c.clouds or p.cloud in c.clouds) and
        p.accelerator in c.accelerators for c in forecast.classes)]
    got: LiveRates = read_rates(book, ps, aws_profile=args.aws_profile, gcp_project=args.gcp_project,
                                timeout_s=args.timeout)
    from placement.model.commitments import with_live

    return with_live(book, got.rates, "live"), got.warnings, [s.as_dict() for s in got.sources]


def run_portfolio(args: argparse.Namespace) -> int:
    from placement.console import EXIT_OK
    from placement.errors import UsageError
    from placement.files.inputs import load_catalog, load_quotas
    from placement.files.readers import load_yaml
    from placement.model.commitments import commitment_book, with_rates
    from placement.plan.portfolio import parse_forecast, portfolio_report

    if not 0 < args.time_limit < float("inf"):
        raise UsageError("--time-limit: must be a positive number of seconds")
    if not 0 < args.timeout <= 600:
        raise UsageError("--timeout: must be a number of seconds from 0 to 600")
    forecast = parse_forecast(load_yaml(args.forecast, "forecast"))
    book = commitment_book() if args.rates is None else with_rates(load_yaml(args.rates, "--rates"), args.rates)
    catalog = load_catalog(args.catalog)
    quotas = load_quotas(args.quotas)
    from placement.files.calibrations import info, resolve
    from placement.plan.portfolio import spot_calibration

    cal = resolve(args)  # --calibration FILE, none with --no-calibration, else the newest calibrate wrote
    live_warnings: list[str] = []
    live_sources: list[dict[str, Any]] | None = None
    if args.live:
        book, live_warnings, live_sources = _live_book(args, book, forecast, catalog.offers)
    measured = None if cal is None else spot_calibration(cal, catalog.offers)
    progress = _Progress(sys.stderr)
    try:
        rep = portfolio_report(forecast, catalog.offers, quotas, book, time_limit_s=args.time_limit,
                               calibration=measured, progress=progress)
    finally:
        progress.close()
    doc = report_doc(rep, book.sources, book, forecast.weeks)
    doc["calibration"] = info(cal)
    if cal is not None:
        doc["calibration"]["spot_pools"] = len(measured or {})
    if live_sources is not None:
        doc["live"] = live_sources
        doc["warnings"] = [*live_warnings, *doc["warnings"]]
    if args.json:
        import json

        sys.stdout.write(json.dumps(doc, indent=2, allow_nan=False) + "\n")
    else:
        sys.stdout.write(report_text(doc) + "\n")
    return EXIT_OK

