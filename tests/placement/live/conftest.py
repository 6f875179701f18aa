"""Fixtures for the live-data tests: moto's server behind the fault-injecting AWS proxy, the GCP fake,
botocore Stubbers for what moto does not implement, and an environment that only reaches 127.0.0.1."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# google-auth reads this at import: never probe the GCE metadata server from tests.
os.environ.setdefault("NO_GCE_CHECK", "true")

HERE = Path(__file__).resolve().parent


def _use_the_real_placement_package() -> None:
    """With tests/ on sys.path (pytest ``pythonpath``), tests/placement/ is found as a namespace package
    ``placement`` and this directory would shadow ``placement.live``: import the installed package instead."""
    mod = sys.modules.get("placement")
    if mod is not None and getattr(mod, "__file__", None):
        return
    tests_dir = str(HERE.parents[1])
    saved = sys.path[:]
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != tests_dir]
    try:
        for name in ("placement.live", "placement"):
            if name in sys.modules and not getattr(sys.modules[name], "__file__", None):
                del sys.modules[name]
        importlib.import_module("placement.live")
    finally:
        sys.path[:] = saved


_use_the_real_placement_package()
_spec = importlib.util.spec_from_file_location("placement_live_fakes", HERE / "fakes.py")
assert _spec and _spec.loader
fakes = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = fakes
_spec.loader.exec_module(fakes)

PROJECT = "fake-project"
AWS_REGIONS = ("us-east-1", "us-west-2", "eu-west-1")
GCP_REGIONS = ("us-central1", "europe-west4", "asia-southeast1")
# Catalog prices (USD/node-hour) for the tests' own small catalogs.
AWS_ROWS = [("p5.48xlarge", 8, 192, 2048, 98.32, 40.0)]
GCP_ROWS = [("a3-highgpu-8g", 8, 208, 1872, 88.25, 30.0), ("a3-megagpu-8g", 8, 208, 1872, 92.21, 31.0)]
GCP_UNIT_PRICES = {"nvidia-h100-80gb": (9.8, 2.9)}  # keep in step with test_live_cli.py
GCP_HOST_PRICES = {"A3 Instance": (0.03, 0.01, 0.004, 0.001)}
GCP_SSD_PRICES = (0.08, 0.032)  # Local SSD, USD per GiB-month (on-demand, spot); a3-highgpu-8g bundles 6000 GiB
# Scores by zone ID for p5.48xlarge (moto's zone IDs): a low one and a high one.
SCORES = {"use1-az1": 2, "use1-az2": 9, "usw2-az1": 6}
JOB = """name: live-test
accelerator: [H100]
gpus: 16
hours: 10
capacity: any
checkpoint: {interval_minutes: 30}
spot: {interruptions_per_hour: 0.02, restart_minutes: 10}
"""


@pytest.fixture(scope="session")
def moto_url() -> Iterator[tuple[str, dict[str, list[str]]]]:
    """moto's server in a thread on 127.0.0.1, warmed up; yields its URL and zone IDs per test region."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://127.0.0.1:{port}"
    session = boto3.Session(aws_access_key_id="testing", aws_secret_access_key="testing")
    zones: dict[str, list[str]] = {}
    for r in AWS_REGIONS:  # moto loads its per-region data on first use: do it before any timed call
        ec2 = session.client("ec2", region_name=r, endpoint_url=url)
        zones[r] = sorted(z["ZoneId"] for z in ec2.describe_availability_zones()["AvailabilityZones"])
        ec2.describe_instance_type_offerings(LocationType="availability-zone-id")
        ec2.describe_spot_price_history(InstanceTypes=["p5.48xlarge"], MaxResults=5)
    yield url, zones
    server.stop()


@pytest.fixture(scope="session")
def aws_fake(moto_url: tuple[str, dict[str, list[str]]]) -> Iterator[Any]:
    fake = fakes.AwsFake(moto_url[0], scores={"p5.48xlarge": SCORES}).start()
    yield fake
    fake.stop()


@pytest.fixture(scope="session")
def gcp_fake() -> Iterator[Any]:
    zones = {f"{r}-{z}": ["nvidia-h100-80gb", "nvidia-h100-mega-80gb"] for r in GCP_REGIONS for z in "abc"}
    zones["us-central1-f"] = ["nvidia-h100-80gb"]  # a zone the catalog lacks
    zones["asia-southeast1-c"] = ["nvidia-l4"]  # H100 no longer offered here
    quotas = {r: {"NVIDIA_H100_GPUS": (64.0, 0.0), "PREEMPTIBLE_NVIDIA_H100_GPUS": (64.0, 0.0),
                  "NVIDIA_H100_MEGA_GPUS": (64.0, 0.0), "PREEMPTIBLE_NVIDIA_H100_MEGA_GPUS": (64.0, 0.0)}
              for r in GCP_REGIONS}
    skus = fakes.gcp_skus(list(GCP_REGIONS), GCP_UNIT_PRICES, GCP_HOST_PRICES, GCP_SSD_PRICES)
    fake = fakes.GcpFake(PROJECT, zones, quotas, skus, sku_page_size=4, hang_s=4.0).start()
    yield fake
    fake.stop()


class AwsStubs:
    """Installs botocore Stubbers (Service Quotas, GetSpotPlacementScores, Pricing) on the clients
    placement.live creates, answering per region from ``limits`` / ``faults``."""

    def __init__(self) -> None:
        self.limits: dict[tuple[str, str], float] = {}
        self.faults: dict[str, str] = {}
        self.created: list[tuple[str, str, str]] = []
        self.ondemand: dict[str, dict[str, float]] = {}

    def __call__(self, client: Any, service: str, region: str, purpose: str) -> None:
        from botocore.stub import Stubber

        self.created.append((service, region, purpose))
        if service == "ec2" and purpose != "placement-scores":
            return  # EC2 describe calls go to moto through the proxy
        if service not in ("service-quotas", "ec2", "pricing"):
            return
        stub = Stubber(client)
        fault = self.faults.get(region)
        for _ in range(8):  # more than any run makes; unused ones are fine
            if service == "service-quotas":
                if fault:
                    stub.add_client_error("get_service_quota", service_error_code={
                        "403": "AccessDeniedException", "429": "TooManyRequestsException",
                        "500": "ServiceException"}[fault], http_status_code=int(fault))
                    continue
                for code in ("L-417A185B", "L-C4BD4855"):
                    stub.add_response("get_service_quota", {"Quota": {
                        "ServiceCode": "ec2", "QuotaCode": code, "QuotaName": code, "Unit": "None",
                        "Value": self.limits.get((region, code), 1536.0), "Adjustable": True, "GlobalQuota": False}})
            elif service == "ec2":
                rows = [{"Region": r, "AvailabilityZoneId": z, "Score": s} for z, s in sorted(SCORES.items())
                        for r in AWS_REGIONS if z.startswith(r.replace("us-east-", "use").replace("us-west-", "usw"))]
                stub.add_response("get_spot_placement_scores", {"SpotPlacementScores": rows})
            else:
                import json

                for itype, prices in sorted(self.ondemand.items()):
                    items = [json.dumps({"product": {"attributes": {"regionCode": r, "instanceType": itype}},
                                         "terms": {"OnDemand": {"a": {"priceDimensions": {"b": {
                                             "pricePerUnit": {"USD": str(p)}}}}}}}) for r, p in prices.items()]
                    stub.add_response("get_products", {"FormatVersion": "aws_v1", "PriceList": items})
        stub.activate()


@pytest.fixture
def stubs(monkeypatch: pytest.MonkeyPatch) -> AwsStubs:
    from placement.live import aws

    hooks = AwsStubs()
    monkeypatch.setattr(aws, "CLIENT_HOOKS", [hooks])
    return hooks


@pytest.fixture
def live_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, aws_fake: Any, gcp_fake: Any, stubs: AwsStubs,
             moto_url: tuple[str, dict[str, list[str]]]) -> dict[str, Any]:
    """Environment pointing every client at the fakes, a fresh cache dir, job and catalog files."""
    for k in list(os.environ):
        if k.startswith(("AWS_", "GPUFLEET_", "GOOGLE_", "CLOUDSDK_")):
            monkeypatch.delenv(k, raising=False)
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_EC2_METADATA_DISABLED": "true",
           "AWS_CONFIG_FILE": str(tmp_path / "no-aws-config"), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
           "AWS_ENDPOINT_URL_EC2": aws_fake.url, "AWS_ENDPOINT_URL_CLOUDWATCH": aws_fake.url,
           "GPUFLEET_GCP_COMPUTE_ENDPOINT": gcp_fake.url, "GPUFLEET_GCP_BILLING_ENDPOINT": gcp_fake.url,
           "GPUFLEET_GCP_ANONYMOUS": "1", "GPUFLEET_CACHE_DIR": str(tmp_path / "cache"), "NO_GCE_CHECK": "true",
           "GPUFLEET_DATA_DIR": str(tmp_path / "data"),
           "CLOUDSDK_CONFIG": str(tmp_path / "gcloud")}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    aws_fake.reset()
    gcp_fake.reset()
    zones = moto_url[1]
    head = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,AvailabilityZone\n"
    aws_csv = head + "".join(f"{t},H100,{g},{v},{m},{p},{sp},{r},{z}\n" for t, g, v, m, p, sp in AWS_ROWS
                             for r in AWS_REGIONS for z in zones[r][:2])
    aws_csv += "p5.48xlarge,H100,8,192,2048,98.32,40.0,us-east-1,use1-az99\n"  # a zone AWS does not list
    gcp_csv = head + "".join(f"{t},H100,{g},{v},{m},{p},{sp},{r},{r}-{z}\n" for t, g, v, m, p, sp in GCP_ROWS
                             for r in GCP_REGIONS for z in "abc")
    (tmp_path / "aws.csv").write_text(aws_csv)
    (tmp_path / "gcp.csv").write_text(gcp_csv)
    (tmp_path / "job.yaml").write_text(JOB)
    args = ["--catalog", f"aws={tmp_path / 'aws.csv'}", "--catalog", f"gcp={tmp_path / 'gcp.csv'}",
            "--gcp-project", PROJECT]
    return {"tmp": tmp_path, "job": str(tmp_path / "job.yaml"), "args": args, "aws": aws_fake, "gcp": gcp_fake,
            "stubs": stubs, "zones": zones}
