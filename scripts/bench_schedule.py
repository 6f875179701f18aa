#!/usr/bin/env python3
"""Benchmarks for planning over time; prints figures (medians), asserts nothing.

  1. `plan-batch` scheduled: 100 jobs over a one-week horizon at 1-hour slots, contended quota (the embedded
     catalog), solved to a proven gap <= 1 %                                    (target <= 10 s)
  2. `placement portfolio`: a 52-week forecast over 4 accelerators and 10 regions with known quota; the chosen
     portfolio (one solve, gap <= 1 %)                                         (target <= 10 s)
     and the whole report (the plan, three baselines, demand +-20 %: seven solves), for scale

Usage: scripts/bench_schedule.py [--repeat N] [--only schedule|portfolio]...
(from any shell: it runs itself under .venv)
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _bench  # noqa: E402
import _venv  # noqa: E402

NOW = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)
ACCELERATORS = ("H100", "H200", "A100-80GB", "L4")


CPU: list[float] = []  # the process CPU seconds of the last timed() call's runs


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """Median wall seconds of ``repeat`` runs and the last result; CPU seconds of each run into :data:`CPU`
    (on a shared machine the wall time is the CPU time stretched by the load)."""
    samples, result = [], None
    CPU.clear()
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        result = fn()
        samples.append(time.perf_counter() - t0)
        CPU.append(time.process_time() - c0)
    return statistics.median(samples), result


def burst(n_jobs: int = 100, seed: int = 5) -> tuple[list[Any], Any, Any]:
    """``n_jobs`` jobs of 8-32 GPUs, 2-48 h, a third with an earliest start in the week, half with a deadline,
    every (region, quota key) with headroom for 1-4 nodes: the cheap regions are contended over time."""
    from placement.model.catalog import embedded_catalog
    from placement.model.jobspec import parse_job
    from placement.model.quotas import Quota, QuotaTable

    rng = random.Random(seed)
    cat = embedded_catalog()
    homes = [("s3", "us-east-1"), ("s3", "us-west-2"), ("gs", "us-central1"), ("gs", "europe-west4")]
    jobs = []
    for i in range(n_jobs):
        scheme, region = rng.choice(homes)
        hours = rng.choice([2, 4, 8, 12, 24, 48])
        doc: dict[str, Any] = {
            "name": f"job-{i}", "accelerator": rng.choice([["H100"], ["H100", "H200"], ["A100", "A100-80GB"]]),
            "gpus": rng.choice([8, 8, 16, 32]), "hours": hours, "capacity": rng.choice(["any", "on-demand", "spot"]),
            "usd_per_hour_of_delay": rng.choice([0, 1, 5, 20]),
            "priority": rng.choice(["production", "burst", "low"]),
            "data": {"dataset": {"uri": f"{scheme}://bucket/{i}", "size_gb": rng.choice([100, 1000, 5000]),
                                 "region": region}, "outputs_gb": 50},
        }
        earliest = rng.choice([0, 0, 24, 72]) if rng.random() < 0.33 else 0
        if earliest:
            doc["earliest_start"] = earliest
        if rng.random() < 0.5:
            doc["deadline_hours"] = earliest + hours * 2 + rng.choice([24, 48, 96])
        jobs.append(parse_job(doc))
    quotas = {}
    for o in cat.offers:
        for key in (o.shape.quota.on_demand, o.shape.quota.spot):
            if key:
                per_node = o.shape.vcpus if o.shape.quota.unit == "vcpu" else o.shape.gpus
                quotas[(o.cloud, o.region, key)] = Quota(limit=per_node * rng.choice([1, 2, 4]), usage=0)
    return jobs, cat, QuotaTable(quotas)


def bench_schedule(repeat: int) -> None:
    from placement.plan.schedule import solve

    jobs, cat, quotas = burst()
    seconds, s = timed(lambda: solve(jobs, cat.offers, quotas, now=NOW, horizon_h=168, slot_h=1,
                                     time_limit_s=60, mip_rel_gap=0.01), repeat)
    waited = sum(1 for x in s.jobs if x.wait_h)
    print(f"plan-batch scheduled, {len(jobs)} jobs, 168 h horizon at 1 h slots, embedded catalog: median "
          f"{seconds:.2f} s over {repeat} (CPU {statistics.median(CPU):.2f} s; target <= 10 s); "
          f"placed {s.placed}/{len(jobs)}, {waited} wait; "
          f"solver {s.status}, proven gap {s.gap:.3%} (asked <= 1 %)")


def forecast(weeks: int = 52, seed: int = 9) -> Any:
    from placement.plan.portfolio import DemandClass, Forecast

    rng = random.Random(seed)
    classes = []
    for k, accels in enumerate((("H100", "H200"), ("H100",), ("A100-80GB",), ("L4",), ("H200", "H100"))):
        base = rng.choice([2000, 5000, 10000])
        demand = tuple(round(base * (1 + 0.5 * ((w % 13) / 13)) * rng.uniform(0.8, 1.2)) for w in range(weeks))
        classes.append(DemandClass(name=f"class-{k}", workload="llm", accelerators=accels, demand=demand,
                                   interruptible=rng.choice([0.0, 0.3, 1.0]), within_weeks=rng.choice([1, 2]),
                                   gpus_per_job=rng.choice([8, 16, 64])))
    return Forecast(weeks, tuple(classes))


def portfolio_inputs() -> tuple[Any, list[Any], Any]:
    """The forecast, the catalog's offers in 10 regions (5 per cloud) of the 4 accelerators, and known quota."""
    from placement.model.catalog import embedded_catalog
    from placement.model.quotas import Quota, QuotaTable

    rng = random.Random(3)
    cat = embedded_catalog()
    regions: dict[str, list[str]] = {"aws": [], "gcp": []}
    for o in cat.offers:
        if o.shape.accelerator in ACCELERATORS and o.region not in regions[o.cloud] and len(regions[o.cloud]) < 5:
            regions[o.cloud].append(o.region)
    offers = [o for o in cat.offers if o.shape.accelerator in ACCELERATORS and o.region in regions[o.cloud]]
    quotas = {}
    for o in offers:
        for key in (o.shape.quota.on_demand, o.shape.quota.spot):
            if key:
                per_node = o.shape.vcpus if o.shape.quota.unit == "vcpu" else o.shape.gpus
                quotas[(o.cloud, o.region, key)] = Quota(limit=per_node * rng.choice([2, 4, 8]), usage=0)
    return forecast(), offers, QuotaTable(quotas)


def bench_portfolio(repeat: int) -> None:
    from placement.model.commitments import commitment_book
    from placement.plan.portfolio import pools, portfolio_report, solve

    f, offers, quotas = portfolio_inputs()
    book = commitment_book()
    n_pools = len(pools(offers, set(ACCELERATORS)))
    regions = len({(o.cloud, o.region) for o in offers})
    seconds, a = timed(lambda: solve(f, offers, quotas, book, time_limit_s=60, mip_rel_gap=0.01), repeat)
    print(f"portfolio, {f.weeks} weeks x {len(f.classes)} classes, {len(ACCELERATORS)} accelerators in {regions} "
          f"regions ({n_pools} pools): median {seconds:.2f} s over {repeat} (CPU {statistics.median(CPU):.2f} s; "
          f"target <= 10 s); "
          f"{len(a.commitments)} commitments, total ${a.total_usd:,.0f}; solver {a.status}, gap {a.gap:.3%}")
    seconds, _ = timed(lambda: portfolio_report(f, offers, quotas, book, time_limit_s=60, mip_rel_gap=0.01), 1)
    print(f"portfolio report (the plan, 3 baselines, demand +-20 %: 7 solves): {seconds:.2f} s "
          f"(CPU {statistics.median(CPU):.2f} s; no target)")


def main() -> None:
    _venv.ensure()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", choices=("schedule", "portfolio"), action="append")
    args = parser.parse_args()
    only = set(args.only or ("schedule", "portfolio"))
    print(_bench.machine_line())
    if "schedule" in only:
        bench_schedule(args.repeat)
    if "portfolio" in only:
        bench_portfolio(args.repeat)


if __name__ == "__main__":
    main()
