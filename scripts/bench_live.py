#!/usr/bin/env python3
"""Measure ``placement plan --live`` against local fakes with injected latency. Prints figures only.

Setup (all on 127.0.0.1): the AWS fake (tests/placement/live/fakes.py) answering every AWS call itself
from moto's region, zone and offering data (read once from ``moto_server`` at setup), so moto's own CPU
time is not part of the figures; ``--moto-proxy`` instead forwards the EC2 / CloudWatch calls to
``moto_server`` through the fake. Service Quotas and GetSpotPlacementScores are always answered by the
fake. The GCP fake serves Compute Engine regions + aggregated acceleratorTypes and Cloud Billing SKUs.
Every answer waits the injected latency. The job asks for 16 x H100; the catalogs
given with ``--catalog`` put it in >= 20 regions per cloud, so every run makes ~150 AWS and ~25 GCP calls.

Each figure is the median wall time of N fresh subprocesses:
  floor       python -c "import boto3; from google.cloud import compute_v1, billing_v1"
  cold        placement plan --live --json, empty cache dir
  warm        the same with the cache filled by a previous run
  sequential  cold, with GPUFLEET_LIVE_SEQUENTIAL=1 (one call after another)

Usage: scripts/bench_live.py [--runs 3] [--latency-ms 150] [--aws-regions 20] [--gcp-regions 22]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _bench  # noqa: E402
import _venv  # noqa: E402

PY = sys.executable
GCP_REGIONS = ["us-central1", "us-east1", "us-east4", "us-east5", "us-south1", "us-west1", "us-west2", "us-west3",
               "us-west4", "northamerica-northeast1", "southamerica-east1", "europe-west1", "europe-west2",
               "europe-west3", "europe-west4", "europe-west6", "europe-west9", "europe-north1", "europe-central2",
               "asia-east1", "asia-northeast1", "asia-northeast3", "asia-south1", "asia-southeast1",
               "australia-southeast1", "me-west1"]
JOB = """name: bench-16xh100
accelerator: [H100]
gpus: 16
hours: 24
capacity: any
checkpoint: {interval_minutes: 30}
spot: {interruptions_per_hour: 0.05, restart_minutes: 10}
"""


def _fakes() -> Any:
    spec = importlib.util.spec_from_file_location("live_fakes", REPO / "tests" / "placement" / "live" / "fakes.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(REPO))
    spec.loader.exec_module(module)
    return module


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_moto() -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    exe = Path(PY).with_name("moto_server")
    proc = subprocess.Popen([str(exe), "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            urllib.request.urlopen(url + "/moto-api/", timeout=1).read()  # noqa: S310 - loopback only
            return proc, url
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("moto_server did not start")


def _aws_setup(moto: str, n_regions: int) -> tuple[dict[str, dict[str, str]], dict[str, dict[str, list[str]]]]:
    """moto's regions (its own list): zone name -> ID, and the H100 shapes' zone IDs; warms moto up."""
    import boto3

    session = boto3.Session(aws_access_key_id="testing", aws_secret_access_key="testing")
    regions = [r for r in session.get_available_regions("ec2") if r.split("-")[0] in ("us", "eu", "ap", "ca", "sa")]
    zones: dict[str, dict[str, str]] = {}
    offerings: dict[str, dict[str, list[str]]] = {}
    for r in regions:
        ec2 = session.client("ec2", region_name=r, endpoint_url=moto)
        names = {z["ZoneName"]: z["ZoneId"] for z in ec2.describe_availability_zones()["AvailabilityZones"]}
        rows = ec2.describe_instance_type_offerings(LocationType="availability-zone-id", Filters=[
            {"Name": "instance-type", "Values": ["p5.48xlarge", "p5.4xlarge"]}])["InstanceTypeOfferings"]
        if names:
            zones[r] = names
            offerings[r] = {}
            for row in rows:
                offerings[r].setdefault(row["InstanceType"], []).append(row["Location"])
        if len(zones) >= n_regions:
            break
    return zones, offerings


def _run(cmd: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)
    return time.perf_counter() - t0, proc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--latency-ms", type=float, default=150.0)
    ap.add_argument("--aws-regions", type=int, default=20)
    ap.add_argument("--gcp-regions", type=int, default=22)
    ap.add_argument("--moto-proxy", action="store_true", help="forward EC2/CloudWatch calls to moto_server")
    ap.add_argument("--serve", type=float, metavar="SECONDS",
                    help="only set the fakes up, print the environment and plan command as JSON, keep serving")
    args = ap.parse_args()
    _venv.ensure("boto3", "moto", "google.cloud.compute_v1", "yaml", extra="dev")
    print(_bench.machine_line())
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # still stop moto_server (finally) when killed
    fakes = _fakes()
    work = Path(tempfile.mkdtemp(prefix="bench-live-"))
    moto, moto_url = _start_moto()
    try:
        zone_names, offerings = _aws_setup(moto_url, args.aws_regions)
        aws_regions = sorted(zone_names)
        aws_zones = {r: sorted(zone_names[r].values()) for r in aws_regions}
        gcp_regions = GCP_REGIONS[: args.gcp_regions]
        gcp_zones = {f"{r}-{z}": ["nvidia-h100-80gb", "nvidia-h100-mega-80gb"] for r in gcp_regions for z in "abc"}
        quotas = {r: {"NVIDIA_H100_GPUS": (32.0, 0.0), "PREEMPTIBLE_NVIDIA_H100_GPUS": (64.0, 0.0),
                      "NVIDIA_H100_MEGA_GPUS": (16.0, 0.0), "PREEMPTIBLE_NVIDIA_H100_MEGA_GPUS": (16.0, 0.0)}
                  for r in gcp_regions}
        skus = fakes.gcp_skus(gcp_regions, {"nvidia-h100-80gb": (9.8, 2.9)},
                              {"A3 Instance": (0.03, 0.01, 0.004, 0.001)})
        latency = args.latency_ms / 1000.0
        gcp = fakes.GcpFake("bench-project", gcp_zones, quotas, skus, sku_page_size=5000, latency_s=latency).start()
        aws = fakes.AwsFake(moto_url if args.moto_proxy else None, latency_s=latency, native=zone_names,
                            offerings=offerings,
                            scores={"p5.48xlarge": {z: 9 for zs in aws_zones.values() for z in zs}}).start()

        (work / "job.yaml").write_text(JOB)
        head = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,AvailabilityZone\n"
        (work / "aws.csv").write_text(head + "".join(
            f"p5.48xlarge,H100,8,192,2048,55.04,{20 + i % 7}.5,{r},{z}\n"
            for i, r in enumerate(aws_regions) for z in aws_zones[r]))
        (work / "gcp.csv").write_text(head + "".join(
            f"{t},H100,8,208,1872,{p},{p / 3:.2f},{r},{r}-{z}\n"
            for r in gcp_regions for z in "abc" for t, p in (("a3-highgpu-8g", 88.25), ("a3-megagpu-8g", 92.21))))
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("AWS_", "GOOGLE_", "CLOUDSDK_", "GPUFLEET_"))}
        env.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                    "AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": str(work / "none"),
                    "AWS_SHARED_CREDENTIALS_FILE": str(work / "none"), "AWS_ENDPOINT_URL": aws.url,
                    "GPUFLEET_GCP_COMPUTE_ENDPOINT": gcp.url, "GPUFLEET_GCP_BILLING_ENDPOINT": gcp.url,
                    "GPUFLEET_GCP_ANONYMOUS": "1", "NO_GCE_CHECK": "true", "PYTHONPATH": str(REPO)})
        plan = [PY, "-m", "placement", "plan", str(work / "job.yaml"), "--live", "--json",
                "--catalog", f"aws={work / 'aws.csv'}", "--catalog", f"gcp={work / 'gcp.csv'}",
                "--gcp-project", "bench-project"]
        if args.serve:
            print(json.dumps({"env": {k: env[k] for k in env if k.startswith(("AWS_", "GPUFLEET_", "NO_GCE"))},
                              "plan": plan[1:]}), flush=True)
            time.sleep(args.serve)
            return 0
        floor_cmd = [PY, "-W", "ignore", "-c", "import boto3; from google.cloud import compute_v1, billing_v1"]

        def cold(extra: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
            cache = work / f"cache-{time.monotonic_ns()}"
            return _run(plan, {**env, **extra, "GPUFLEET_CACHE_DIR": str(cache)})

        # Warm-up (not timed): page cache, moto's per-region data, .pyc files.
        _run(floor_cmd, env)
        _, first = cold({})
        doc = json.loads(first.stdout)
        statuses: dict[str, int] = {}
        for s in doc["sources"]:
            statuses[s["status"]] = statuses.get(s["status"], 0) + 1
        aws.reset()
        gcp.reset()
        _, probe = cold({})
        calls = (aws.count(), gcp.count())
        how = "moto via proxy" if args.moto_proxy else "moto data, native fake"
        print(f"setup: {len(aws_regions)} AWS regions ({how}), "
              f"{len(gcp_regions)} GCP regions (fake), "
              f"{args.latency_ms:g} ms per call; one cold plan = {calls[0]} AWS + {calls[1]} GCP requests; "
              f"exit {probe.returncode}; source rows by status {statuses}")
        if first.returncode not in (0, 1):
            print(first.stderr)
            return 1

        warm_cache = work / "cache-warm"
        _run(plan, {**env, "GPUFLEET_CACHE_DIR": str(warm_cache)})
        figures: dict[str, list[float]] = {"floor": [], "cold": [], "warm": [], "sequential": []}
        for _ in range(args.runs):
            figures["floor"].append(_run(floor_cmd, env)[0])
            figures["cold"].append(cold({})[0])
            aws.reset()
            gcp.reset()
            figures["warm"].append(_run(plan, {**env, "GPUFLEET_CACHE_DIR": str(warm_cache)})[0])
            warm_calls = aws.count() + gcp.count()
            figures["sequential"].append(cold({"GPUFLEET_LIVE_SEQUENTIAL": "1"})[0])
        med = {k: statistics.median(v) for k, v in figures.items()}
        print(f"{'what':<11} {'median s':>8}  runs")
        for k, v in figures.items():
            print(f"{k:<11} {med[k]:8.3f}  " + " ".join(f"{x:.3f}" for x in v))
        print(f"cold - floor = {med['cold'] - med['floor']:+.3f} s (target <= 0.6); warm = {med['warm']:.3f} s "
              f"(target < 0.35; requests during warm runs: {warm_calls}); sequential / cold = "
              f"{med['sequential'] / med['cold']:.1f}x")
        return 0
    finally:
        moto.terminate()
        moto.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
