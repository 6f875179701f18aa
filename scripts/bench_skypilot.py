#!/usr/bin/env python3
"""gpufleet's `placement plan` against SkyPilot's optimizer, per scenario, on the same offers (issue 33 part 3:
"no slower than SkyPilot's warm optimize() per scenario"). Prints figures (medians), asserts nothing.

The data: the embedded catalog's offers (placement/data/catalog.json, every AWS and GCP row), written
  - for gpufleet as one SkyPilot-style CSV per cloud (one row per machine type and zone, the whole machine's
    price), given as `placement plan JOB --catalog aws=A.csv --catalog gcp=G.csv` (both clouds replaced: the plan
    sees exactly these rows and reads no default catalog; ~20 KB each, under the catalog cache's MIN_BYTES, so
    parsed and checked in every run; the embedded catalog's offers and prices, without its per-row sources and
    suspect-price flags, which a CSV cannot carry);
  - for SkyPilot 0.14.1 as its own catalogs (schema v8) in a temporary HOME: aws/vms.csv with the columns of its
    AWS fetcher (sky/catalog/data_fetchers/fetch_aws.py: GpuInfo, Arch, local disk, EFA interfaces; zone IDs as
    AvailabilityZone: without AWS credentials SkyPilot maps no zone names), gcp/vms.csv in GCP's layout (a row per
    VM type and zone without an accelerator, a row per accelerator count and zone without an instance type, as
    fetch_gcp.py writes; the machine's whole price on the VM row, 0 on the accelerator row, so the sum SkyPilot
    takes is the offer's price; a3-megagpu-8g's GPUs named H100-MEGA, SkyPilot's name for them), and
    images/quota-mapping files with their headers only. Fresh files without .meta md5s count as edited by hand,
    so SkyPilot does not try to update them; any download it tries fails loudly instead (see _sky_optimize.py).
    The temporary directory is removed at the end (only it).

16 scenarios, one job each, every one on-demand and spot (capacity: on-demand / spot; use_spot=False / True):
  H100:8, H100:8 x 2 nodes (16 GPUs, gpus_per_node 8), H200:8, A100:8, A100-80GB:8, B200:8, H100:1, L4:1
  (L4 is AWS-only in the catalog; a3-megagpu-8g is an H100 to gpufleet, H100-MEGA to SkyPilot.)
gpufleet's job: name, accelerator, gpus (total), gpus_per_node, hours: 1 (SkyPilot's default estimate), capacity.

What is timed:
  gpufleet  `python -m placement plan JOB.yaml --catalog aws=... --catalog gcp=...` as a user runs it: a fresh
            process each (start-up, imports, catalog, plan, its table), CPU time of the child from os.wait4 (user +
            system) and wall time, medians of --repeat, scenarios round-robin; beside a bare interpreter and
            the floor: a process that imports the library modules a plan process imports (the standard
            library's and PyYAML's, from -X importtime) and none of gpufleet's. Where SkyPilot's warm call
            takes less than the floor, no gpufleet process that uses those libraries can pass it.
  SkyPilot  warm: one long-lived .venv-sky process; after a first Optimizer.optimize() per scenario (catalogs
            loaded), the median CPU (time.process_time) and wall time of `Optimizer.optimize(dag, COST, quiet=True)`
            per scenario (the dag built outside the timing), round-robin; cold: a fresh process per scenario
            (`import sky` + the first optimize), its CPU from os.wait4, for context.
  reference gpufleet's core call in this process, warm: `placement.plan.job.plan(job, offers)` on the parsed
            catalog (CPU and wall medians): the like-for-like comparison with a warm optimize().
PASS: gpufleet's whole-process CPU median <= SkyPilot's warm optimize CPU median for that scenario.

SkyPilot lives in its own venv, .venv-sky (scripts/sky_env makes it: skypilot==0.14.1, pip; never in the
project's dependencies); without it this script says so in one line and exits 2, unless --setup is given.

Usage: scripts/bench_skypilot.py [--setup] [--repeat N] [--venv DIR]   (from any shell: it runs itself under .venv)
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _bench  # noqa: E402
import _venv  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SKY_VERSION = "0.14.1"
CATALOG_SCHEMA = "v8"  # sky.skylet.constants.CATALOG_SCHEMA_VERSION in 0.14.1
# (accelerator, GPUs per node, nodes); each on-demand and spot.
SHAPES = (("H100", 8, 1), ("H100", 8, 2), ("H200", 8, 1), ("A100", 8, 1), ("A100-80GB", 8, 1), ("B200", 8, 1),
          ("H100", 1, 1), ("L4", 1, 1))
# SkyPilot's GCP accelerator names where they differ from gpufleet's (sky/catalog/gcp_catalog.py
# _ACC_INSTANCE_TYPE_DICTS: a3-megagpu-8g is 'H100-MEGA').
SKY_GCP_ACCELERATOR = {"a3-megagpu-8g": "H100-MEGA"}


def scenarios() -> list[dict[str, Any]]:
    out = []
    for accelerator, count, nodes in SHAPES:
        for spot in (False, True):
            label = f"{accelerator}:{count}" + (f" x{nodes}" if nodes > 1 else "") + (" spot" if spot else "")
            out.append({"name": label.replace(":", "-").replace(" ", "-").lower(), "label": label,
                        "accelerator": accelerator, "count": count, "nodes": nodes, "spot": spot, "cloud": None})
    return out


def job_doc(s: dict[str, Any]) -> dict[str, Any]:
    return {"name": s["name"], "accelerator": [s["accelerator"]], "gpus": s["count"] * s["nodes"],
            "gpus_per_node": s["count"], "hours": 1, "capacity": "spot" if s["spot"] else "on-demand"}


def _num(x: float | None) -> str:
    return "" if x is None else f"{x:g}"


def write_gpufleet_csvs(offers: list[Any], tmp: Path) -> dict[str, Path]:
    from bench_placement import write_skypilot_csv

    paths = {}
    for cloud in ("aws", "gcp"):
        paths[cloud] = tmp / f"gpufleet-{cloud}.csv"
        write_skypilot_csv([o for o in offers if o.cloud == cloud], str(paths[cloud]))
    return paths


def _gpu_info(name: str, count: int, memory_gib: float) -> str:
    # The AWS fetcher's GpuInfo: EC2's GpuInfo dict as Python literal text (read with ast.literal_eval).
    mib = int(memory_gib * 1024)
    return str({"Gpus": [{"Name": name, "Manufacturer": "NVIDIA", "Count": count, "MemoryInfo": {"SizeInMiB": mib}}],
                "TotalGpuMemoryInMiB": mib * count})


def write_sky_catalogs(offers: list[Any], home: Path) -> Path:
    """SkyPilot 0.14.1's catalogs of ``offers`` under ``home``/.sky/catalogs/v8 (see the module docstring)."""
    root = home / ".sky" / "catalogs" / CATALOG_SCHEMA
    (root / "aws").mkdir(parents=True)
    (root / "gcp").mkdir()
    with open(root / "aws" / "vms.csv", "w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(["InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB", "GpuInfo", "Price",
                      "SpotPrice", "Region", "AvailabilityZone", "Arch", "LocalDiskType", "NVMeSupported",
                      "LocalDiskSize", "LocalDiskCount", "MaximumEfaInterfaces"])
        for o in (o for o in offers if o.cloud == "aws"):
            s = o.shape
            efa = s.fabric_nics if s.fabric == "efa" else ""
            out.writerow([s.name, s.accelerator, s.gpus, s.vcpus, s.memory_gib,
                          _gpu_info(s.accelerator, s.gpus, s.gpu_memory_gib), _num(o.price), _num(o.spot_price),
                          o.region, o.zone, "x86_64", "", "", "", "", efa])
    gpu_rows: dict[tuple[str, int, str], list[Any]] = {}
    with open(root / "gcp" / "vms.csv", "w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(["InstanceType", "vCPUs", "MemoryGiB", "AcceleratorName", "AcceleratorCount", "GpuInfo", "Region",
                      "AvailabilityZone", "Price", "SpotPrice"])
        for o in (o for o in offers if o.cloud == "gcp"):
            s = o.shape
            out.writerow([s.name, s.vcpus, s.memory_gib, "", "", "", o.region, o.zone, _num(o.price),
                          _num(o.spot_price)])
            name = SKY_GCP_ACCELERATOR.get(s.name, s.accelerator)
            info = str({"Gpus": [{"MemoryInfo": {"SizeInMiB": int(s.gpu_memory_gib * 1024)}}]})
            gpu_rows[(name, s.gpus, o.zone)] = ["", "", "", name, s.gpus, info, o.region, o.zone, 0, 0]
        out.writerows(gpu_rows.values())
    # common/: the accelerator names SkyPilot canonicalizes a request against (sky/utils/accelerator_registry.py:
    # AcceleratorName, Clouds) and their memory (GPU, MemoryGB, Manufacturer).
    (root / "common").mkdir()
    names: dict[str, tuple[set[str], float]] = {}
    for o in offers:
        for name in {o.shape.accelerator, SKY_GCP_ACCELERATOR.get(o.shape.name, o.shape.accelerator)}:
            names.setdefault(name, (set(), o.shape.gpu_memory_gib))[0].add("AWS" if o.cloud == "aws" else "GCP")
    with open(root / "common" / "accelerators.csv", "w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(["AcceleratorName", "Clouds"])
        out.writerows([name, str(sorted(clouds))] for name, (clouds, _) in sorted(names.items()))
    with open(root / "common" / "metadata.csv", "w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(["GPU", "MemoryGB", "Manufacturer"])
        out.writerows([name, f"{memory:g}", "NVIDIA"] for name, (_, memory) in sorted(names.items()))
    for cloud in ("aws", "gcp"):
        (root / cloud / "images.csv").write_text("Tag,Region,OS,OSVersion,ImageId,CreationDate\n", encoding="utf-8")
    (root / "aws" / "instance_quota_mapping.csv").write_text(
        "InstanceType,OnDemandInstanceCode,SpotInstanceCode\n", encoding="utf-8")
    (root / "gcp" / "accelerator_quota_mapping.csv").write_text(
        "Accelerator,OnDemandInstanceCode,SpotInstanceCode\n", encoding="utf-8")
    return root


def sky_env(home: Path) -> dict[str, str]:
    """The SkyPilot child's environment: HOME the temporary directory, no cloud credentials or config of the
    user's, no usage reports."""
    drop = ("SKY_RUNTIME_DIR", "SKYPILOT_CONFIG", "SKYPILOT_PROJECT_CONFIG", "GOOGLE_APPLICATION_CREDENTIALS",
            "PYTHONPATH", "VIRTUAL_ENV")
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith(("AWS_", "CLOUDSDK_"))}
    env.update({"HOME": str(home), "SKYPILOT_DISABLE_USAGE_COLLECTION": "1", "SKYPILOT_DEBUG": "0",
                "AWS_CONFIG_FILE": str(home / "none"), "AWS_SHARED_CREDENTIALS_FILE": str(home / "none"),
                "CLOUDSDK_CONFIG": str(home / "gcloud"), "KUBECONFIG": str(home / "none"),
                "XDG_CACHE_HOME": str(home / ".cache")})
    return env


def run_sky(python: Path, home: Path, tmp: Path, spec: dict[str, Any]) -> tuple[dict[str, Any], float, float]:
    """Run _sky_optimize.py with ``spec``: its result, the child's CPU seconds (os.wait4) and wall seconds."""
    spec_path, out_path = tmp / "sky-spec.json", tmp / "sky-out.json"
    spec_path.write_text(json.dumps({**spec, "home": str(home)}), encoding="utf-8")
    out_path.unlink(missing_ok=True)
    cmd = [str(python), str(ROOT / "scripts" / "_sky_optimize.py"), str(spec_path), str(out_path)]
    log = tmp / "sky-log.txt"
    t0 = time.perf_counter()
    with open(log, "w", encoding="utf-8") as err:
        proc = subprocess.Popen(cmd, stdout=err, stderr=subprocess.STDOUT, env=sky_env(home), cwd=home)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0 or not out_path.exists():
        sys.exit(f"bench_skypilot.py: SkyPilot's run failed (exit {os.waitstatus_to_exitcode(status)}):\n"
                 + log.read_text(encoding="utf-8")[-2000:])
    return json.loads(out_path.read_text(encoding="utf-8")), usage.ru_utime + usage.ru_stime, wall


def gpufleet_process(job: Path, specs: list[str], env: dict[str, str], json_out: bool = False
                     ) -> tuple[float, float, str]:
    cmd = [sys.executable, "-m", "placement", "plan", str(job), *(a for s in specs for a in ("--catalog", s))]
    if json_out:
        cmd.append("--json")
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+", encoding="utf-8") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        out.seek(0)
        text = out.read()
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        sys.exit(f"bench_skypilot.py: placement plan {job.name} exited {os.waitstatus_to_exitcode(status)}")
    return usage.ru_utime + usage.ru_stime, wall, text


# The floor under any gpufleet process: one that imports exactly the library modules a plan process imports (the
# standard library's and PyYAML's, listed by -X importtime), in the same order, and nothing of gpufleet's. Each
# import is tried: -X importtime also lists the imports a module attempts and catches (e.g. `copy` trying Jython's).
FLOOR_CODE = ("import sys\nfor name in sys.argv[1:]:\n    try:\n        __import__(name)\n    except ImportError:\n"
              "        pass\n")


def library_modules(job: Path, specs: list[str], env: dict[str, str]) -> list[str]:
    """The modules outside gpufleet that a ``placement plan`` process imports, in order (its ``-X importtime``)."""
    cmd = [sys.executable, "-X", "importtime", "-m", "placement", "plan", str(job),
           *(a for s in specs for a in ("--catalog", s))]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    names = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or line.count("|") != 2:
            continue
        name = line.rsplit("|", 1)[1].strip()
        if name == "imported package" or name.split(".")[0] == "placement" or name.startswith("__editable__"):
            continue
        names.append(name)
    if "yaml" not in names:
        sys.exit(f"bench_skypilot.py: -X importtime of placement plan {job.name} listed no PyYAML; exit "
                 f"{proc.returncode}: {proc.stderr[-300:]}")
    return names


def floor_process(names: list[str], env: dict[str, str]) -> float:
    """CPU seconds of a process that imports ``names`` and nothing else (os.wait4)."""
    proc = subprocess.Popen([sys.executable, "-c", FLOOR_CODE, *names], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"bench_skypilot.py: the floor process exited {os.waitstatus_to_exitcode(status)}")
    return usage.ru_utime + usage.ru_stime


def gpufleet_pick(doc_text: str) -> dict[str, Any]:
    doc = json.loads(doc_text)
    chosen = doc.get("chosen")
    if not chosen:
        return {"cloud": None}
    return {"cloud": chosen.get("cloud"), "region": chosen.get("region"), "zone": chosen.get("zone"),
            "instance_type": chosen.get("instance_type"), "nodes": chosen.get("nodes"),
            "usd_per_hour": chosen.get("usd_per_hour"), "capacity": chosen.get("capacity")}


def in_process(jobs: list[Any], offers: tuple[Any, ...], repeat: int) -> list[tuple[float, float]]:
    """gpufleet's core call, warm: ``plan(job, offers)`` per scenario, round-robin; (CPU, wall) medians."""
    from placement.plan.job import plan

    for job in jobs:
        plan(job, offers)
    samples: list[list[tuple[float, float]]] = [[] for _ in jobs]
    for _ in range(repeat):
        for i, job in enumerate(jobs):
            c0, w0 = time.process_time(), time.perf_counter()
            plan(job, offers)
            samples[i].append((time.process_time() - c0, time.perf_counter() - w0))
    return [(statistics.median(c for c, _ in ss), statistics.median(w for _, w in ss)) for ss in samples]


def load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def where(p: dict[str, Any]) -> str:
    if not p.get("cloud"):
        return "(none) " + p.get("error", "")[:60]
    usd = p.get("usd_per_hour")
    nodes = f"{p['nodes']}x" if p.get("nodes") and p["nodes"] > 1 else ""
    return f"{p['cloud']} {p.get('zone') or p.get('region')} {nodes}{p['instance_type']} ${usd:,.2f}/h"


def setup(venv: Path) -> None:
    env = {**os.environ, "GPUFLEET_SKY_VENV": str(venv.resolve())}
    code = subprocess.run([str(ROOT / "scripts" / "sky_env")], env=env, stdout=subprocess.DEVNULL).returncode
    if code != 0:
        sys.exit(code)


def sky_python(venv: Path) -> Path | None:
    python = venv / "bin" / "python"
    return python if python.exists() and (venv / f".installed-skypilot-{SKY_VERSION}").exists() else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=7, help="runs per figure, medians (default 7)")
    parser.add_argument("--setup", action="store_true", help="make .venv-sky first (scripts/sky_env) when missing")
    parser.add_argument("--venv", type=Path, default=ROOT / ".venv-sky", metavar="DIR",
                        help="SkyPilot's venv (default .venv-sky)")
    args = parser.parse_args()
    if sky_python(args.venv) is None:
        if not args.setup:
            print(f"bench_skypilot.py: no SkyPilot {SKY_VERSION} venv at {args.venv}; make it with scripts/sky_env "
                  "or run this with --setup", file=sys.stderr)
            sys.exit(2)
        setup(args.venv)
    python = sky_python(args.venv)
    assert python is not None
    _venv.ensure("yaml", "highspy", extra="")
    import yaml

    from placement.files.inputs import load_catalog
    from placement.model.catalog import embedded_catalog
    from placement.model.jobspec import parse_job

    print(_bench.machine_line())
    repeat = max(args.repeat, 3)
    offers = list(embedded_catalog().offers)
    todo = scenarios()
    tmp = Path(tempfile.mkdtemp(prefix="bench-skypilot-"))
    try:
        home = tmp / "home"
        home.mkdir()
        write_sky_catalogs(offers, home)
        paths = write_gpufleet_csvs(offers, tmp)
        specs = [f"{c}={p}" for c, p in paths.items()]
        job_paths = []
        for s in todo:
            job_paths.append(tmp / f"{s['name']}.yaml")
            job_paths[-1].write_text(yaml.safe_dump(job_doc(s), sort_keys=False), encoding="utf-8")
        env = {**os.environ, "GPUFLEET_DATA_DIR": str(tmp), "GPUFLEET_CACHE_DIR": str(tmp / "cache")}
        env.pop("PYTHONPATH", None)
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # bytecode written, as for an installed package

        # gpufleet's picks (JSON) and a warm-up run each (file cache, bytecode).
        picks = [gpufleet_pick(gpufleet_process(j, specs, env, json_out=True)[2]) for j in job_paths]
        print(f"offers: {len(offers)} (the embedded catalog, {embedded_catalog().as_of}), as --catalog CSVs for "
              f"gpufleet and SkyPilot {SKY_VERSION} catalogs ({CATALOG_SCHEMA}) in a temporary HOME")

        # SkyPilot warm: one process, all scenarios.
        warm, _, _ = run_sky(python, home, tmp, {"mode": "warm", "repeat": repeat, "scenarios": todo})
        sky_picks = [f["pick"] for f in warm["first"]]
        load_sky = load()

        # gpufleet whole processes, round-robin, beside a bare interpreter.
        libraries = library_modules(job_paths[0], specs, env)
        bare: list[float] = []
        floor: list[float] = []
        proc: list[list[tuple[float, float]]] = [[] for _ in todo]
        for _ in range(repeat):
            p = subprocess.Popen([sys.executable, "-c", "pass"], env=env, cwd=tmp)
            _, _, usage = os.wait4(p.pid, 0)
            bare.append(usage.ru_utime + usage.ru_stime)
            floor.append(floor_process(libraries, env))
            for i, j in enumerate(job_paths):
                cpu, wall, _ = gpufleet_process(j, specs, env)
                proc[i].append((cpu, wall))
        load_proc = load()

        # SkyPilot cold: a fresh process per scenario (import sky + first optimize).
        cold = []
        for s in todo:
            res, cpu, wall = run_sky(python, home, tmp, {"mode": "cold", "repeat": 1, "scenarios": [s]})
            cold.append((cpu, wall, res["import_cpu"], res["first"][0]["cpu"]))
        load_cold = load()

        # gpufleet's core call in this process (the parsed catalog of the same CSVs).
        catalog = load_catalog(specs)
        jobs = [parse_job(job_doc(s)) for s in todo]
        core = in_process(jobs, catalog.offers, repeat * 3)
        load_core = load()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"SkyPilot {warm['version']} in .venv-sky: import sky {warm['import_cpu']:.3f} s CPU")
    print(f"medians over {repeat} round-robin runs (in-process core: {repeat * 3}); CPU seconds, wall in brackets; "
          f"load average after each part: gpufleet processes {load_proc}, SkyPilot warm {load_sky}, SkyPilot cold "
          f"{load_cold}, gpufleet core {load_core}")
    floor_cpu = statistics.median(floor)
    print(f"bare interpreter: CPU {statistics.median(bare):.3f} s; floor: CPU {floor_cpu:.3f} s, a process that "
          f"imports the {len(libraries)} library modules a plan imports (standard library and PyYAML; -X importtime), "
          "none of gpufleet's; PASS: the gpufleet process's CPU <= SkyPilot's warm optimize() CPU")
    print(f"{'':17} {'gpufleet process':>17} {'SkyPilot warm':>15} {'':4} {'gpufleet core':>15} {'SkyPilot cold':>15}")
    print(f"{'scenario':<17} {'CPU s (wall)':>17} {'CPU ms (wall)':>15} {'':4} {'CPU ms (wall)':>15} "
          f"{'CPU s (wall)':>15}")
    slower = 0
    core_slower = 0
    for i, s in enumerate(todo):
        pc = statistics.median(c for c, _ in proc[i])
        pw = statistics.median(w for _, w in proc[i])
        sc, sw = warm["warm"][i]["cpu"], warm["warm"][i]["wall"]
        cc, cw = core[i]
        verdict = "PASS" if pc <= sc else "FAIL"
        slower += pc > sc
        core_slower += cc > sc
        print(f"{s['label']:<17} {pc:7.3f} ({pw:6.3f}) {sc * 1000:6.1f}ms ({sw * 1000:5.1f}) {verdict} "
              f"{cc * 1000:6.1f}ms ({cw * 1000:5.1f}) {cold[i][0]:6.3f} ({cold[i][1]:5.3f})")
    print(f"gpufleet's whole process slower than SkyPilot's warm optimize() in {slower} of {len(todo)} scenarios; "
          f"gpufleet's core call (warm, in-process) slower in {core_slower} of {len(todo)}")
    below = [s["label"] for i, s in enumerate(todo) if warm["warm"][i]["cpu"] < floor_cpu]
    above = min(statistics.median(c for c, _ in p) for p in proc) - floor_cpu
    print(f"SkyPilot's warm optimize() takes less CPU than the floor alone in {len(below)} of {len(todo)} scenarios"
          + (f" ({', '.join(below)})" if below else "") + f"; gpufleet's own share of a process (its modules, data, "
          f"the plan and its table: the fastest scenario's process less the floor) is {above:.3f} s")
    print(f"SkyPilot cold, of which `import sky` CPU {statistics.median(c[2] for c in cold):.3f} s and the first "
          f"optimize {statistics.median(c[3] for c in cold):.3f} s (medians over the scenarios)")
    same = sum(same_pick(g, k) for g, k in zip(picks, sky_picks, strict=True))
    print(f"picks, the same machine type and $/h in {same} of {len(todo)} (gpufleet prices training progress: spot "
          "interruptions and restarts, so its pick may differ; SkyPilot names a zone for spot only):")
    for i, s in enumerate(todo):
        print(f"  {s['label']:<17} gpufleet {where(picks[i]):<48} SkyPilot {where(sky_picks[i])}")


def same_pick(g: dict[str, Any], k: dict[str, Any]) -> bool:
    if not g.get("cloud") or not k.get("cloud"):
        return not g.get("cloud") and not k.get("cloud")
    return (g["cloud"], g["instance_type"]) == (k["cloud"], k["instance_type"]) and \
        abs(g["usd_per_hour"] - k["usd_per_hour"]) < 0.01


if __name__ == "__main__":
    main()
