"""``placement portfolio FORECAST.yaml``: flags, the table and the versioned JSON document (gpufleet.portfolio/v1)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from placement.plan.portfolio import Answer

SCHEMA = "gpufleet.portfolio/v1"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("forecast", metavar="FORECAST.yaml", help="weekly demand per workload class (docs/portfolio.md)")
    p.add_argument("--rates", metavar="FILE", help="your negotiated commitment rates, quota lead times and pool "
                                                   "availability (YAML, the layout of placement/data/commitments.yaml)")
    p.add_argument("--catalog", action="append", default=[], metavar="CLOUD=PATH",
                   help="use a SkyPilot-format vms.csv for CLOUD instead of the embedded catalog; repeatable")
    p.add_argument("--quotas", metavar="PATH", help="quota file (CSV cloud,region,quota,limit,usage); unknown quota "
                                                     "bounds nothing")
    p.add_argument("--time-limit", type=float, default=10.0, metavar="SECONDS",
                   help="solver time per solve (the plan and each comparison; default 10)")
    p.add_argument("--json", action="store_true", help=f"print one {SCHEMA} JSON document")
    from placement.commands.common import add_calibration_flags

    add_calibration_flags(p)


def _money(x: float) -> float:
    return round(x, 2)


def answer_doc(a: Answer) -> dict[str, Any]:
    return {"total_usd": _money(a.total_usd), "unserved_gpu_hours": round(a.unserved_gpu_hours, 1),
            "solver": {"name": "HiGHS", "status": a.status, "mip_gap": round(a.gap, 6)},
            "commitments": [{
                "term": c.buy.term.id, "kind": c.buy.term.kind, "cloud": c.buy.pool.cloud,
                "region": c.buy.pool.region, "instance_type": c.buy.pool.instance_type,
                "accelerator": c.buy.pool.accelerator, "nodes": c.nodes, "gpus": c.nodes * c.buy.pool.gpus,
                "start_week": c.buy.start, "weeks": c.buy.weeks, "total_usd": _money(c.total_usd),
                "upfront_usd": _money(c.upfront_usd), "break_even_utilisation": round(c.break_even, 4),
                "planned_utilisation": round(c.planned_use, 4), "source": c.buy.term.source}
                for c in a.commitments],
            "weeks": [{"week": i, "demand_gpu_hours": round(w.demand, 1), "reserved": round(w.reserved, 1),
                       "spot": round(w.spot, 1), "on_demand": round(w.on_demand, 1), "unserved": round(w.unserved, 1)}
                      for i, w in enumerate(a.weeks)],
            "quota_requests": [{"cloud": q.cloud, "region": q.region, "quota": q.key, "unit": q.unit,
                                "headroom": q.headroom, "request": q.request, "lead_weeks": q.lead_weeks}
                               for q in a.quota]}


def report_doc(rep: dict[str, Any], sources: tuple[str, ...]) -> dict[str, Any]:
    best = rep["best"]
    doc = {"schema": SCHEMA, "kind": "portfolio", "rates": list(sources), **answer_doc(best)}
    doc["upfront_usd"] = _money(sum(c.upfront_usd for c in best.commitments))
    doc["commitments_usd"] = _money(sum(c.total_usd for c in best.commitments))
    doc["compare"] = {k: {"total_usd": _money(v.total_usd), "unserved_gpu_hours": round(v.unserved_gpu_hours, 1),
                          "status": v.status} for k, v in rep["baselines"].items()}
    doc["demand_moves"] = {k: {"replanned_total_usd": _money(re.total_usd),
                               "replanned_commitments": len(re.commitments),
                               "this_portfolio_total_usd": None if fx is None else _money(fx.total_usd),
                               "this_portfolio_unserved_gpu_hours": None if fx is None
                               else round(fx.unserved_gpu_hours, 1)}
                           for k, (re, fx) in rep["moves"].items()}
    return doc


def report_text(doc: dict[str, Any]) -> str:
    from placement.commands.render import table

    out = []
    rows = [[c["term"], f"{c['cloud']} {c['region']}", f"{c['instance_type']} x{c['nodes']}", str(c["start_week"]),
             str(c["weeks"]), f"{c['total_usd']:,.2f}", f"{c['upfront_usd']:,.2f}",
             f"{c['break_even_utilisation']:.0%}", f"{c['planned_utilisation']:.0%}"] for c in doc["commitments"]]
    if rows:
        out.append(table(("commit to", "where", "instance x nodes", "from week", "weeks", "total $", "upfront $",
                          "pays off at", "planned use"), rows, right={3, 4, 5, 6, 7, 8}))
    else:
        out.append("no commitment pays off for this forecast: spot and on-demand serve it")
    out.append("")
    wk = [[str(w["week"]), f"{w['demand_gpu_hours']:,.0f}", f"{w['reserved']:,.0f}", f"{w['spot']:,.0f}",
           f"{w['on_demand']:,.0f}", f"{w['unserved']:,.0f}"] for w in doc["weeks"]]
    out.append(table(("week", "demand GPU-h", "reserved", "spot", "on-demand", "unserved"), wk,
                     right={0, 1, 2, 3, 4, 5}))
    for q in doc["quota_requests"]:
        out.append(f"request now: {q['cloud']} {q['region']} {q['quota']} +{q['request']:g} {q['unit']} (headroom "
                   f"{q['headroom']:g}; granted in about {q['lead_weeks']} weeks)")
    out.append(f"expected total ${doc['total_usd']:,.2f} (commitments ${doc['commitments_usd']:,.2f}, "
               f"${doc['upfront_usd']:,.2f} upfront; solver HiGHS: {doc['solver']['status']}, gap "
               f"{doc['solver']['mip_gap']:.2%})")
    names = {"all_on_demand": "all on-demand", "all_spot": "all spot (if every hour tolerated interruption)",
             "reserve_the_peak": "reserve the peak (commitments only)"}
    for k, v in doc["compare"].items():
        extra = f", {v['unserved_gpu_hours']:,.0f} GPU-h unserved" if v["unserved_gpu_hours"] else ""
        out.append(f"  against {names[k]}: ${v['total_usd']:,.2f}{extra}")
    for k, v in doc["demand_moves"].items():
        label = "demand +20 %" if "plus" in k else "demand -20 %"
        fx = v["this_portfolio_total_usd"]
        out.append(f"  {label}: re-planned ${v['replanned_total_usd']:,.2f} ({v['replanned_commitments']} "
                   "commitments)" + ("" if fx is None else f"; with this portfolio ${fx:,.2f}"))
    return "\n".join(out)


def run_portfolio(args: argparse.Namespace) -> int:
    from placement.console import EXIT_OK
    from placement.errors import UsageError
    from placement.files.inputs import load_catalog, load_quotas
    from placement.files.readers import load_yaml
    from placement.model.commitments import commitment_book, with_rates
    from placement.plan.portfolio import parse_forecast, portfolio_report

    if not 0 < args.time_limit < float("inf"):
        raise UsageError("--time-limit: must be a positive number of seconds")
    forecast = parse_forecast(load_yaml(args.forecast, "forecast"))
    book = commitment_book() if args.rates is None else with_rates(load_yaml(args.rates, "--rates"), args.rates)
    catalog = load_catalog(args.catalog)
    quotas = load_quotas(args.quotas)
    from placement.files.calibrations import info, resolve
    from placement.plan.portfolio import spot_calibration

    cal = resolve(args)  # --calibration FILE, none with --no-calibration, else the newest calibrate wrote
    measured = None if cal is None else spot_calibration(cal, catalog.offers)
    rep = portfolio_report(forecast, catalog.offers, quotas, book, time_limit_s=args.time_limit,
                           calibration=measured)
    doc = report_doc(rep, book.sources)
    doc["calibration"] = info(cal)
    if cal is not None:
        doc["calibration"]["spot_pools"] = len(measured or {})
    if args.json:
        import json

        sys.stdout.write(json.dumps(doc, indent=2, allow_nan=False) + "\n")
    else:
        sys.stdout.write(report_text(doc) + "\n")
    return EXIT_OK
