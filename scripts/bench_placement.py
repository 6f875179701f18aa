#!/usr/bin/env python3
"""Benchmarks for the placement engine; prints figures (medians), asserts nothing.

  1. `placement --help` cold start in a fresh interpreter                    (target < 0.35 s)
  2. `placement plan` in-process on a generated 50,000-offer catalog        (target < 0.3 s)
  3. the same plan as a ratio to reading that catalog's CSV (SkyPilot columns) with the standard `csv`
     module, both timed in this run, alternating (the engine's share of 3b)
     What is timed: plan = `engine.plan(job, offers)` on already-parsed Offer objects + `render.plan_doc`
     (top 10) on a fresh Catalog wrapper; CSV = open the file + `list(csv.reader(f))`.
  3b. `placement plan JOB --catalog aws=A.csv --catalog gcp=G.csv --json` in-process, every input check
     included, over a 50,000-offer catalog of distinct rows (60 regions x 4 zones per cloud, the shapes'
     machine types plus more single-node ones, as a SkyPilot vms.csv has): cold (no catalog cache: every row
     parsed and checked, the cache entry written) and warm (the parsed catalog read from the cache), each as
     a ratio to reading the same two CSVs with `list(csv.DictReader(f))`, alternating (target <= 1.5x warm,
     issue 33; 2x before),
     with the share of the catalog load and of the plan after it
  4. `plan-batch`: 500 jobs over the embedded catalog with contended quota   (target < 3 s),
     and the cost saved against greedy one-by-one placement in arrival order
  5. the same 500-job batch with 40 capacity reservations in play, proven optimal (target <= 3 s)
  6. the same batch with scarce quota (a 30 s budget; how close it gets)
  6b. 4 and 6 with each job in one of three priority tiers (production, burst, low): plan-batch solves
     one placement-count problem per tier that leaves jobs out                 (target < 3 s)
  8. `placement plan placement/examples/job.yaml` as a user runs it: whole fresh processes (start-up, imports,
     the plan and its table), CPU time (user + system, from the kernel) and wall time, medians, beside a bare
     interpreter; `--root DIR` (repeatable) times the `placement` package of other checkouts with this same
     interpreter, alternating with this one, so an older revision's figure is taken in the same minutes
     (target: CPU no more than two rounds ago, issue 33)
  7. `placement plan-batch` as a user runs it (a subprocess): 100 distinct jobs over a generated 200,000-row
     catalog (two SkyPilot CSVs): wall time and peak RSS, with --time-limit 600 (everything placed) and
     with the default 30 s (bounded). It measures the `placement` package beside this script, so the same
     script run in an older checkout gives that version's figures.

Usage: scripts/bench_placement.py [--repeat N] [--only help|plan|command|process|batch|scale]... [--root DIR]...
(from any shell: it runs itself under .venv)
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import gc
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _bench  # noqa: E402
import _venv  # noqa: E402


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    samples, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples), result


def generated_catalog(n: int, seed: int = 7, distinct: bool = False) -> list[Any]:
    from placement.model.catalog import Offer
    from placement.model.shapes import shape_book

    rng = random.Random(seed)
    shapes = list(shape_book().shapes.values())
    offers = []
    if not distinct:
        # 60 regions per cloud, rows drawn with repeats: the in-process plan benchmark's workload since issue 5.
        for i in range(n):
            s = shapes[i % len(shapes)]
            region_no = rng.randrange(60)
            region = f"us-east-{region_no}" if s.cloud == "aws" else f"us-central{region_no}"
            zone = f"{region}-{rng.choice('abcd')}"
            price = round(rng.uniform(1, 120), 2)
            spot = None if rng.random() < 0.2 else round(price * rng.uniform(0.2, 0.9), 2)
            offers.append(Offer(s.cloud, region, zone, s, price, spot))
        return offers
    # Distinct (shape, region, zone) rows with zones named each cloud's way, as `--catalog` accepts them (it
    # refuses a row listed twice with different prices): as many regions as n rows need.
    return distinct_offers(rng, shapes, max(60, -(-n // (4 * len(shapes))) * 2), n)


def distinct_offers(rng: random.Random, shapes: list[Any], n_regions: int, n: int) -> list[Any]:
    """``n`` offers of distinct (shape, region, zone) drawn from ``shapes`` x ``n_regions`` regions per cloud x 4
    zones, zones named each cloud's way."""
    from placement.model.catalog import Offer

    offers = []
    for c in rng.sample(range(len(shapes) * n_regions * 4), n):
        s = shapes[c % len(shapes)]
        region_no, letter = divmod(c // len(shapes), 4)
        region = f"us-east-{region_no}" if s.cloud == "aws" else f"us-central{region_no}"
        zone = f"{region}{'abcd'[letter]}" if s.cloud == "aws" else f"{region}-{'abcd'[letter]}"
        price = round(rng.uniform(1, 120), 2)
        spot = None if rng.random() < 0.2 else round(price * rng.uniform(0.2, 0.9), 2)
        offers.append(Offer(s.cloud, region, zone, s, price, spot))
    return offers


def write_skypilot_csv(offers: list[Any], path: str) -> None:
    """The offers as a SkyPilot vms.csv (the format `--catalog` reads)."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(["InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB", "Price", "SpotPrice",
                      "Region", "AvailabilityZone"])
        for o in offers:
            s = o.shape
            spot = "" if o.spot_price is None else o.spot_price
            out.writerow([s.name, s.accelerator, s.gpus, s.vcpus, s.memory_gib, o.price, spot, o.region, o.zone])


def bench_plan(repeat: int) -> None:
    from placement.commands.render import plan_doc
    from placement.model.catalog import Catalog
    from placement.model.jobspec import parse_job
    from placement.plan.job import plan

    offers = generated_catalog(50_000)
    job = parse_job(
        {
            "name": "bench",
            "accelerator": ["H100", "H200", "A100"],
            "gpus": 32,
            "hours": 24,
            "data": {"dataset": {"uri": "s3://b/d", "size_gb": 3000, "region": "us-east-1"}, "outputs_gb": 200},
        }
    )

    def run() -> Any:
        p = plan(job, offers)
        return plan_doc(p, Catalog(tuple(offers), "2026-11-01", "generated"), top=10, all_candidates=False)

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "vms.csv")
        write_skypilot_csv(offers, path)

        def read() -> Any:
            with open(path, newline="", encoding="utf-8") as fh:
                return list(csv.reader(fh))

        read(), run()  # warm the file cache and the shape/egress data
        plan_s, read_s = [], []
        doc: Any = None
        for _ in range(repeat):  # alternate, so both see the same machine load
            t0 = time.perf_counter()
            doc = run()
            plan_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            read()
            read_s.append(time.perf_counter() - t0)
    median, csv_median = statistics.median(plan_s), statistics.median(read_s)
    print(
        f"plan, 50,000-offer generated catalog: median {median:.3f} s over {repeat} runs "
        f"({doc['runnable']} runnable, {doc['excluded']} excluded; target < 0.3 s)"
    )
    ratios = sorted(p / r for p, r in zip(plan_s, read_s, strict=True))
    print(
        f"  as a ratio to reading its CSV with csv.reader ({csv_median:.3f} s): {median / csv_median:.2f}x "
        f"(per-run ratios {ratios[0]:.2f}-{ratios[-1]:.2f}x); the engine alone, on parsed offers: the whole "
        "command, CSV checks included, is --only command"
    )


def command_catalog(n: int = 50_000, seed: int = 3) -> list[Any]:
    """``n`` distinct offers over 60 regions x 4 zones per cloud, named each cloud's way: the shapes of
    shapes.yaml plus as many single-node machine types not in it (as `--catalog` accepts them) as ``n`` needs,
    the way a SkyPilot vms.csv lists every GPU machine type of a cloud."""
    import dataclasses

    from placement.model.shapes import shape_book

    known = list(shape_book().shapes.values())
    shapes = list(known)
    for k in range(max(-(-n // (60 * 4)) - len(known), 0)):
        base = known[k % len(known)]
        name = f"gx{k}.{base.gpus}xlarge" if base.cloud == "aws" else f"gx{k}-highgpu-{base.gpus}g"
        shapes.append(dataclasses.replace(base, name=name, fabric="none", fabric_nics=0))
    return distinct_offers(random.Random(seed), shapes, 60, n)


def bench_command(repeat: int, cpu: bool = False) -> None:
    """3b: the whole `placement plan` over two CSVs, cold and warm catalog cache, against csv.DictReader; ``cpu``:
    every figure in CPU seconds of this process (``time.process_time``) rather than wall seconds."""
    clock = time.process_time if cpu else time.perf_counter
    import contextlib
    import io
    import shutil

    import yaml

    from placement.commands.main import main
    from placement.commands.render import plan_doc
    from placement.files.inputs import load_catalog
    from placement.model.jobspec import parse_job
    from placement.plan.job import plan

    offers = command_catalog()
    job = {"name": "bench", "accelerator": ["H100", "H200", "A100"], "gpus": 32, "hours": 24,
           "data": {"dataset": {"uri": "s3://b/d", "size_gb": 3000, "region": "us-east-1"}, "outputs_gb": 200}}
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for cloud in ("aws", "gcp"):
            paths[cloud] = os.path.join(tmp, f"{cloud}.csv")
            write_skypilot_csv([o for o in offers if o.cloud == cloud], paths[cloud])
        job_path = os.path.join(tmp, "job.yaml")
        with open(job_path, "w", encoding="utf-8") as fh:
            yaml.safe_dump(job, fh)
        cache = os.path.join(tmp, "cache")
        os.environ["GPUFLEET_CACHE_DIR"] = cache
        os.environ.setdefault("GPUFLEET_DATA_DIR", tmp)  # never the refreshed catalog of this machine
        specs = [f"{c}={p}" for c, p in paths.items()]
        argv = ["plan", job_path, "--json", *(a for spec in specs for a in ("--catalog", spec))]

        def read() -> None:
            for path in paths.values():
                with open(path, newline="", encoding="utf-8") as fh:
                    list(csv.DictReader(fh))

        def command() -> None:
            with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()):
                code = main(argv)
            if code not in (0, 1):
                raise SystemExit(f"placement plan exited {code}: {out.getvalue()[-300:]}")

        def cold() -> None:
            shutil.rmtree(cache, ignore_errors=True)
            command()

        def load(clear: bool) -> Any:
            if clear:
                shutil.rmtree(cache, ignore_errors=True)
            return load_catalog(specs)

        parsed = parse_job(job)
        read(), cold(), command()  # warm the file cache, the shape/egress data and the catalog cache
        catalog = load(False)
        samples: dict[str, list[float]] = {k: [] for k in ("read", "cold", "warm", "load cold", "load warm", "plan")}
        steps: list[tuple[str, Callable[[], Any]]] = [
            ("read", read), ("cold", cold), ("warm", command), ("load cold", lambda: load(True)),
            ("load warm", lambda: load(False)),
            ("plan", lambda: plan_doc(plan(parsed, catalog.offers), catalog, top=10, all_candidates=False))]
        for _ in range(repeat):  # alternate, so every figure sees the same machine load
            for name, fn in steps:
                # Every step starts from an empty young generation and no garbage of the one before: otherwise
                # whichever step happens to trip a full collection (over the 50,000 offers this script holds)
                # pays for it, and the per-run ratios spread 1-2.5x on an idle machine.
                gc.collect()
                t0 = clock()
                fn()
                samples[name].append(clock() - t0)
        del os.environ["GPUFLEET_CACHE_DIR"]
    med = {k: statistics.median(v) for k, v in samples.items()}

    def ratio(name: str) -> str:
        per_run = sorted(x / r for x, r in zip(samples[name], samples["read"], strict=True))
        return f"{statistics.median(per_run):.2f}x (per run {per_run[0]:.2f}-{per_run[-1]:.2f}x)"

    try:
        from placement.files.catalog_cache import FORMAT
    except ImportError:  # a checkout from before the cache: warm and cold are the same work
        FORMAT = "no"
    print(f"placement plan --catalog aws=... --catalog gcp=..., {len(offers):,} offers in two CSVs "
          f"({FORMAT} cache), {'CPU' if cpu else 'wall'} time, medians over {repeat} alternating runs; reading both "
          f"CSVs with "
          f"csv.DictReader: {med['read']:.3f} s")
    print(f"  warm cache: {med['warm']:.3f} s = {ratio('warm')} (target <= 1.5x, issue 33)")
    print(f"  cold (no cache, every row checked, entry written): {med['cold']:.3f} s = {ratio('cold')}")
    print(f"  of which: catalog load warm {med['load warm']:.3f} s = {ratio('load warm')}, cold "
          f"{med['load cold']:.3f} s = {ratio('load cold')}; plan + JSON document on the loaded catalog "
          f"{med['plan']:.3f} s = {ratio('plan')}")


def contended_batch(n_jobs: int, nodes_choice: tuple[int, ...], seed: int = 11,
                    priorities: bool = False) -> tuple[list[Any], Any]:
    """500 jobs of 8-64 GPUs; every (region, quota key) gets headroom for a random one of ``nodes_choice``
    nodes, so the cheap regions are oversubscribed and jobs compete for them. ``priorities``: each job gets
    one of the three Kueue classes (production, burst, low) from a separate random stream."""
    from placement.model.catalog import embedded_catalog
    from placement.model.jobspec import parse_job
    from placement.model.quotas import Quota, QuotaTable

    rng = random.Random(seed)
    prio = random.Random(seed + 1)
    cat = embedded_catalog()
    homes = [
        ("s3", "us-east-1"),
        ("s3", "us-west-2"),
        ("gs", "us-central1"),
        ("gs", "europe-west4"),
        ("s3", "eu-north-1"),
    ]
    jobs = []
    for i in range(n_jobs):
        scheme, region = rng.choice(homes)
        jobs.append(
            parse_job(
                {
                    "name": f"job-{i}",
                    "accelerator": rng.choice([["H100"], ["H100", "H200"], ["A100", "A100-80GB"], ["B200"]]),
                    "gpus": rng.choice([8, 8, 16, 32, 64]),
                    "hours": rng.choice([4, 12, 24, 72]),
                    "capacity": rng.choice(["any", "on-demand", "spot"]),
                    "data": {
                        "dataset": {
                            "uri": f"{scheme}://bucket/{i}",
                            "size_gb": rng.choice([200, 1000, 5000, 20000]),
                            "region": region,
                        },
                        "outputs_gb": rng.choice([50, 200, 1000]),
                    },
                    **({"priority": prio.choice(["production", "burst", "low"])} if priorities else {}),
                }
            )
        )
    quotas = {}
    for o in cat.offers:
        for key in (o.shape.quota.on_demand, o.shape.quota.spot):
            if key:
                per_node = o.shape.vcpus if o.shape.quota.unit == "vcpu" else o.shape.gpus
                quotas[(o.cloud, o.region, key)] = Quota(limit=per_node * rng.choice(nodes_choice), usage=0)
    return jobs, (cat, QuotaTable(quotas))


NOW = dt.datetime(2026, 11, 20, tzinfo=dt.UTC)


def reservations(cat: Any, n: int, seed: int = 13) -> list[Any]:
    """``n`` reservations on offers of the catalog: 1-8 free nodes each; half prepaid (0 USD/h), half at the
    on-demand price; a third end 12-96 h after NOW (so long jobs cannot use them), the rest open-ended."""
    from placement.model.reservations import Reservation

    rng = random.Random(seed)
    pool = [o for o in cat.offers if o.price is not None and o.shape.multi_node]
    out = []
    for i, o in enumerate(rng.sample(pool, n)):
        ends = NOW + dt.timedelta(hours=rng.choice([12, 24, 48, 96])) if i % 3 == 0 else None
        out.append(Reservation(id=f"cr-{i:03d}", cloud=o.cloud, region=o.region, zone=o.zone, shape=o.shape,
                               count=rng.randint(1, 8), usd_per_hour=0.0 if i % 2 else o.price, ends=ends,
                               source="bench", kind="odcr"))
    return out


def bench_batch(repeat: int, label: str, nodes_choice: tuple[int, ...], n_reserved: int = 0,
                target: str = "target < 3 s", priorities: bool = False) -> None:
    from placement.plan.batch import greedy, solve

    jobs, (cat, quotas) = contended_batch(500, nodes_choice, priorities=priorities)
    res = reservations(cat, n_reserved) if n_reserved else []
    median, result = timed(lambda: solve(jobs, cat.offers, quotas, reservations=res, now=NOW), repeat)
    g = greedy(jobs, cat.offers, quotas, reservations=res, now=NOW)
    extra = f", {n_reserved} reservations" if n_reserved else ""
    print(
        f"plan-batch, 500 jobs, embedded catalog ({len(cat.offers)} offers{extra}), {label} (headroom of "
        f"{'/'.join(map(str, nodes_choice))} nodes per region and quota key): median {median:.3f} s over {repeat} "
        f"runs ({target}); solver {result.status}, gap {result.gap:.3%}"
        + ("" if result.status == "Optimal" else " (at most; (cost - LP bound) / cost)")
    )
    if n_reserved:
        on_res = sum(1 for a in result.assignments if a.candidate and a.candidate.capacity == "reserved")
        print(f"  {on_res} jobs on reservations")
    print(
        f"  joint MILP: {result.placed} placed, ${result.total_usd:,.0f}; greedy in arrival order: {g.placed} "
        f"placed, ${g.total_usd:,.0f}"
    )
    if g.placed == result.placed:
        print(
            f"  saved vs greedy: ${g.total_usd - result.total_usd:,.0f} "
            f"({(g.total_usd - result.total_usd) / g.total_usd:.1%})"
        )
    else:
        print(f"  MILP places {result.placed - g.placed} more jobs than greedy")


def bench_batch_scale(n_jobs: int = 100, n_rows: int = 200_000) -> None:
    """Item 7: the whole command in a subprocess, peak RSS from the kernel (ru_maxrss of that child)."""
    import json

    import yaml

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    offers = generated_catalog(n_rows, distinct=True)
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for cloud in ("aws", "gcp"):
            paths[cloud] = os.path.join(tmp, f"{cloud}.csv")
            write_skypilot_csv([o for o in offers if o.cloud == cloud], paths[cloud])
        rng = random.Random(5)
        jobs = [{"name": f"job-{i}", "accelerator": ["H100", "A100"], "gpus": rng.choice([8, 16, 32]),
                 "hours": 2 + i, "capacity": rng.choice(["spot", "on-demand", "any"])} for i in range(n_jobs)]
        batch = os.path.join(tmp, "batch.yaml")
        with open(batch, "w", encoding="utf-8") as fh:
            yaml.safe_dump({"jobs": jobs}, fh)
        env = {**os.environ, "PYTHONPATH": repo, "GPUFLEET_DATA_DIR": tmp}
        for limit in ("600", "30"):
            cmd = [sys.executable, "-c", "import sys; from placement.commands.main import main; "
                                         "sys.exit(main(sys.argv[1:]))",
                   "plan-batch", batch, "--json", "--catalog", f"aws={paths['aws']}", "--catalog",
                   f"gcp={paths['gcp']}", "--time-limit", limit]
            out_path = os.path.join(tmp, "out.json")
            t0 = time.perf_counter()
            err_path = os.path.join(tmp, "err.txt")
            with open(out_path, "w", encoding="utf-8") as out, open(err_path, "w", encoding="utf-8") as err:
                proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=tmp)
                _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak RSS (KiB on Linux)
            wall = time.perf_counter() - t0
            placed = "?"
            try:
                with open(out_path, encoding="utf-8") as fh:
                    placed = str(json.load(fh).get("placed"))
            except ValueError:
                pass
            code = os.waitstatus_to_exitcode(status)
            print(f"plan-batch, {n_jobs} distinct jobs x {n_rows:,} catalog rows, --time-limit {limit}: "
                  f"{wall:.1f} s wall, peak RSS {usage.ru_maxrss / 1024:.0f} MiB, exit {code}, "
                  f"{placed} of {n_jobs} placed")
            if code == 2:  # bad input: the benchmark's own data is wrong; say why rather than print a figure
                with open(err_path, encoding="utf-8") as fh:
                    print("  " + fh.read().strip()[-400:])


def bench_help(repeat: int) -> None:
    cmd = [sys.executable, "-c", "import sys; sys.argv=['placement','--help']; "
                                 "from placement.commands.main import run; run()"]
    subprocess.run(cmd, capture_output=True, check=True)  # warm the OS file cache
    median, _ = timed(lambda: subprocess.run(cmd, capture_output=True, check=True), repeat)
    base, _ = timed(lambda: subprocess.run([sys.executable, "-c", "pass"], capture_output=True, check=True), repeat)
    print(
        f"placement --help cold start: median {median:.3f} s over {repeat} runs (bare interpreter {base:.3f} s; "
        "target < 0.35 s)"
    )


def bench_process(repeat: int, roots: list[str]) -> None:
    """8: whole `placement plan placement/examples/job.yaml` processes of each checkout in ``roots``, alternating,
    CPU time of each child from ``os.wait4`` (user + system), no refreshed catalog or calibration file."""
    runs: dict[str, list[tuple[float, float]]] = {root: [] for root in ["(bare interpreter)", *roots]}
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "GPUFLEET_DATA_DIR": tmp, "GPUFLEET_CACHE_DIR": os.path.join(tmp, "cache")}
        env.pop("PYTHONPATH", None)
        # An installed package has its bytecode written: the warm-up run writes it here too (with this set, every
        # process would compile each module whose .pyc is stale: ~0.2 s of a plan after a merge).
        env.pop("PYTHONDONTWRITEBYTECODE", None)

        def child(root: str) -> tuple[float, float]:
            cmd = [sys.executable, "-c", "pass"] if root.startswith("(") else \
                [sys.executable, "-m", "placement", "plan", "placement/examples/job.yaml"]
            t0 = time.perf_counter()
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                                    cwd=tmp if root.startswith("(") else root)
            _, status, usage = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - t0
            if os.waitstatus_to_exitcode(status) not in (0, 1):
                raise SystemExit(f"placement plan in {root} exited {os.waitstatus_to_exitcode(status)}")
            return usage.ru_utime + usage.ru_stime, wall

        for root in runs:
            child(root)  # warm the OS file cache and the bytecode caches
        for _ in range(repeat):
            for root in runs:
                runs[root].append(child(root))
    print(f"placement plan placement/examples/job.yaml, a fresh process each (python -m placement), medians over "
          f"{repeat} alternating runs:")
    bare = statistics.median(c for c, _ in runs["(bare interpreter)"])
    for root, samples in runs.items():
        cpu = statistics.median(c for c, _ in samples)
        wall = statistics.median(w for _, w in samples)
        extra = "" if root.startswith("(") else f" ({cpu - bare:.3f} s over the bare interpreter)"
        print(f"  {root}: CPU {cpu:.3f} s{extra}, wall {wall:.3f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--only", choices=("help", "plan", "command", "process", "batch", "scale"), action="append",
                        help="run only these benchmarks (repeatable; default: all). `--only help` is cheap: it "
                             "times the code importable from the current directory first, so running it from "
                             "another checkout's root times that checkout")
    parser.add_argument("--cpu", action="store_true",
                        help="--only command: CPU time of this process instead of wall time (a shared machine)")
    parser.add_argument("--root", action="append", default=[], metavar="DIR",
                        help="--only process: also time the placement package of this checkout (repeatable)")
    args = parser.parse_args()
    _venv.ensure("yaml", "highspy", extra="")
    print(_bench.machine_line())
    only = set(args.only or ("help", "plan", "command", "process", "batch", "scale"))
    if "help" in only:
        bench_help(max(args.repeat, 5))
    if "plan" in only:
        bench_plan(max(args.repeat, 5))
    if "command" in only:
        bench_command(max(args.repeat, 5), cpu=args.cpu)
    if "process" in only:
        here = str(Path(__file__).resolve().parents[1])
        bench_process(max(args.repeat, 5), [here, *(str(Path(r).resolve()) for r in args.root)])
    if "batch" in only:
        bench_batch(max(1, args.repeat // 2 + 1), "contended quota", (8, 16, 32, 64))
        bench_batch(max(1, args.repeat // 2 + 1), "contended quota", (8, 16, 32, 64), n_reserved=40)
        bench_batch(1, "scarce quota", (2, 4, 8, 16), target="no target: a 30 s budget")
        bench_batch(max(1, args.repeat // 2 + 1), "contended quota, 3 priority tiers", (8, 16, 32, 64),
                    priorities=True)
        bench_batch(1, "scarce quota, 3 priority tiers", (2, 4, 8, 16), target="no target: a 30 s budget",
                    priorities=True)
    if "scale" in only:
        bench_batch_scale()


if __name__ == "__main__":
    main()
