"""placement portfolio --live: Capacity Block offerings and Savings Plan rates through botocore Stubbers, GCP
commitment, calendar-mode and flex-start SKUs from the local Cloud Billing fake; failures leave the data's
figures with a warning."""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from placement.model.catalog import Offer
from placement.model.commitments import commitment_book, with_live
from placement.model.shapes import shape_book

NOW = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)
fakes = sys.modules["placement_live_fakes"]  # loaded by conftest


def _offer(itype: str, region: str, price: float, spot: float | None = None) -> Offer:
    sh = shape_book().get(itype)
    assert sh is not None
    return Offer(cloud=sh.cloud, region=region, zone=f"{region}-a", shape=sh, price=price, spot_price=spot)


def _pools(*offers: Offer) -> list[Any]:
    from placement.plan.portfolio import pools

    return pools(list(offers), {o.shape.accelerator for o in offers})


class Hooks:
    """botocore Stubbers on the EC2 (Capacity Blocks) and Savings Plans clients placement.live creates."""

    def __init__(self, blocks: dict[str, list[dict[str, Any]]], rates: list[dict[str, Any]], fail: str = "") -> None:
        self.blocks = blocks  # region -> offerings
        self.rates = rates
        self.fail = fail
        self.calls: list[tuple[str, str]] = []

    def __call__(self, client: Any, service: str, region: str, purpose: str) -> None:
        from botocore.stub import Stubber

        stub = Stubber(client)
        if service == "ec2" and purpose == "capacity-blocks":
            self.calls.append((service, region))
            if self.fail == "ec2":
                stub.add_client_error("describe_capacity_block_offerings", service_error_code="UnauthorizedOperation",
                                      service_message="You are not authorized. token=AKIAABCDEFGHIJKLMNOP",
                                      http_status_code=403)
            else:
                stub.add_response("describe_capacity_block_offerings",
                                  {"CapacityBlockOfferings": self.blocks.get(region, [])})
        elif service == "savingsplans":
            for _ in range(4):
                self.calls.append((service, region))
                stub.add_response("describe_savings_plans_offering_rates", {"searchResults": self.rates})
        stub.activate()


def _block(start: dt.datetime, fee: float, hours: int = 168, count: int = 1, zone: str = "us-east-1a") -> dict:
    return {"CapacityBlockOfferingId": f"cb-{fee:.0f}", "InstanceType": "p5.48xlarge", "AvailabilityZone": zone,
            "InstanceCount": count, "StartDate": start, "EndDate": start + dt.timedelta(hours=hours),
            "CapacityBlockDurationHours": hours, "UpfrontFee": f"{fee:.2f}", "CurrencyCode": "USD",
            "Tenancy": "default"}


def _rate(plan: str, seconds: int, region: str, itype: str, rate: float) -> dict:
    return {"savingsPlanOffering": {"offeringId": f"o-{plan}", "paymentOption": "No Upfront", "planType": plan,
                                    "durationSeconds": seconds, "currency": "USD", "planDescription": plan},
            "rate": f"{rate}", "unit": "Hrs", "productType": "EC2", "serviceCode": "AmazonEC2",
            "usageType": f"BoxUsage:{itype}", "operation": "RunInstances",
            "properties": [{"name": "region", "value": region}, {"name": "instanceType", "value": itype},
                           {"name": "productDescription", "value": "Linux/UNIX"},
                           {"name": "tenancy", "value": "shared"}]}


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for k in list(os.environ):
        if k.startswith(("AWS_", "GPUFLEET_", "GOOGLE_", "CLOUDSDK_")):
            monkeypatch.delenv(k, raising=False)
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": str(tmp_path / "none"),
                 "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"), "AWS_DEFAULT_REGION": "us-east-1",
                 "CLOUDSDK_CONFIG": str(tmp_path / "gcloud"), "NO_GCE_CHECK": "true"}.items():
        monkeypatch.setenv(k, v)


def test_capacity_blocks_are_priced_per_start_week_and_savings_plans_per_instance_type(aws_env, monkeypatch):
    from placement.live import aws
    from placement.live.commitments import read_rates

    blocks = {"us-east-1": [_block(NOW + dt.timedelta(days=1), 168 * 31.5),  # week 0: $31.50 per node-hour
                            _block(NOW + dt.timedelta(days=2), 168 * 33.0),  # week 0 again, dearer: not used
                            _block(NOW + dt.timedelta(days=15), 2 * 168 * 36.0, count=2)]}  # week 2: $36.00
    rates = [_rate("EC2Instance", 31_536_000, "us-east-1", "p5.48xlarge", 41.28),
             _rate("EC2Instance", 94_608_000, "us-east-1", "p5.48xlarge", 27.52),
             _rate("EC2Instance", 31_536_000, "eu-west-9", "p5.48xlarge", 1.0),  # not asked for: dropped
             _rate("Compute", 31_536_000, "us-east-1", "p5.48xlarge", 44.0),  # another plan type's rate
             _rate("EC2Instance", 31_536_000, "us-east-1", "p5.48xlarge", float("nan"))]  # not a price: dropped
    hooks = Hooks(blocks, rates)
    monkeypatch.setattr(aws, "CLIENT_HOOKS", [hooks])
    book = commitment_book()
    got = read_rates(book, _pools(_offer("p5.48xlarge", "us-east-1", 55.04, 20.0)), now=NOW, clouds=("aws",))
    assert got.warnings == []
    cb = got.rates[("aws-capacity-block", "us-east-1", "p5.48xlarge")]
    assert cb.weeks == {0: pytest.approx(31.5), 2: pytest.approx(36.0)} and cb.verified
    assert cb.source.startswith("live:") and cb.date == "2026-11-30"
    sp1 = got.rates[("aws-savings-plan-1y", "us-east-1", "p5.48xlarge")]
    assert sp1.usd_per_node_hour == pytest.approx(41.28) and sp1.discount_off(55.04) == pytest.approx(0.25)
    assert got.rates[("aws-savings-plan-3y", "us-east-1", "p5.48xlarge")].usd_per_node_hour == pytest.approx(27.52)
    assert ("aws-savings-plan-1y", "eu-west-9", "p5.48xlarge") not in got.rates
    assert got.rates[("aws-compute-savings-plan-1y", "us-east-1", "p5.48xlarge")].usd_per_node_hour == 44.0
    # the planner offers a block only in weeks with an offering, at that week's price
    from placement.plan.portfolio import buys

    live = with_live(book, got.rates, "live")
    ps = _pools(_offer("p5.48xlarge", "us-east-1", 55.04, 20.0))
    starts = {(b.start, round(b.price * 8, 2)) for b in buys(live, ps, 8) if b.term.id == "aws-capacity-block"}
    assert starts == {(0, 31.5), (2, 36.0)}


def test_a_failed_call_keeps_the_data_figures_and_says_why_without_the_credential(aws_env, monkeypatch):
    from placement.live import aws
    from placement.live.commitments import read_rates

    monkeypatch.setattr(aws, "CLIENT_HOOKS", [Hooks({}, [], fail="ec2")])
    got = read_rates(commitment_book(), _pools(_offer("p5.48xlarge", "us-east-1", 55.04)), now=NOW, clouds=("aws",))
    assert ("aws-capacity-block", "us-east-1", "p5.48xlarge") not in got.rates
    assert any("denied" in w and "capacity-blocks" in w for w in got.warnings)
    assert not any("AKIAABCDEFGHIJKLMNOP" in w for w in got.warnings)


def test_no_aws_credentials_is_a_warning_not_a_failure(monkeypatch, tmp_path):
    from placement.live.commitments import read_rates

    for k in list(os.environ):
        if k.startswith("AWS_"):
            monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    got = read_rates(commitment_book(), _pools(_offer("p5.48xlarge", "us-east-1", 55.04)), now=NOW, clouds=("aws",))
    assert got.rates == {} and any("no-credentials" in w for w in got.warnings)


def _gcp_skus(regions: list[str]) -> list[dict[str, Any]]:
    sku = fakes.sku
    out = []
    for mode, usage, gpu, core, ram in (("", "OnDemand", 11.06, 0.03, 0.004),
                                        ("Commitment v1: ", "Commit1Yr", 7.67, 0.0208, 0.00278),
                                        ("Commitment v1: ", "Commit3Yr", 4.86, 0.0132, 0.00176)):
        tail = {"OnDemand": "", "Commit1Yr": " for 1 Year", "Commit3Yr": " for 3 Years"}[usage]
        host = "A3 Instance" if not mode else "A3"
        cpu_word = "Core" if not mode else "Cpu"
        out.append(sku(f"G-{usage}", f"{mode}Nvidia H100 80GB GPU running in Americas{tail}", "GPU", usage, regions,
                       gpu))
        out.append(sku(f"C-{usage}", f"{mode}{host} {cpu_word} running in Americas{tail}", "CPU", usage, regions, core))
        out.append(sku(f"R-{usage}", f"{mode}{host} Ram running in Americas{tail}", "RAM", usage, regions, ram,
                       "GiBy.h"))
    out.append(sku("G-DWS", "Nvidia H100 80GB GPU attached to DWS Defined Duration VMs running in Americas", "GPU",
                   "OnDemand", regions, 4.200761))
    out.append(sku("C-DWS", "DWS Defined Duration A3 Core running in Americas", "CPU", "OnDemand", regions, 0.010934))
    out.append(sku("R-DWS", "DWS Defined Duration A3 Ram running in Americas", "RAM", "OnDemand", regions, 0.000952,
                   "GiBy.h"))
    out.append(sku("G-SP", "Nvidia H100 80GB GPU attached to Spot Preemptible VMs running in Americas", "GPU",
                   "Preemptible", regions, 2.0))
    return out


@pytest.fixture
def billing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    fake = fakes.GcpFake("fake-project", {}, {}, _gcp_skus(["us-central1"]), sku_page_size=4).start()
    for k in list(os.environ):
        if k.startswith(("GPUFLEET_", "GOOGLE_", "CLOUDSDK_")):
            monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("GPUFLEET_GCP_BILLING_ENDPOINT", fake.url)
    monkeypatch.setenv("GPUFLEET_GCP_COMPUTE_ENDPOINT", fake.url)
    monkeypatch.setenv("GPUFLEET_GCP_ANONYMOUS", "1")
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    yield fake
    fake.stop()


def test_gcp_commitment_and_flex_start_skus_give_each_machine_its_discount(billing):
    from placement.live.commitments import read_rates

    ps = _pools(_offer("a3-highgpu-8g", "us-central1", 88.49, 30.0))
    got = read_rates(commitment_book(), ps, now=NOW, clouds=("gcp",), gcp_project="fake-project")
    assert got.warnings == [], got.warnings
    od = 8 * 11.06 + 208 * 0.03 + 1872 * 0.004
    one = 8 * 7.67 + 208 * 0.0208 + 1872 * 0.00278
    three = 8 * 4.86 + 208 * 0.0132 + 1872 * 0.00176
    flex = 8 * 4.200761 + 208 * 0.010934 + 1872 * 0.000952
    r = got.rates
    assert r[("gcp-cud-1y", "us-central1", "a3-highgpu-8g")].discount == pytest.approx(1 - one / od, abs=1e-4)
    assert r[("gcp-cud-3y", "us-central1", "a3-highgpu-8g")].discount == pytest.approx(1 - three / od, abs=1e-4)
    fr = r[("gcp-future-reservation", "us-central1", "a3-highgpu-8g")]
    assert fr.discount == pytest.approx(1 - flex / od, abs=1e-4) and fr.verified and "flex" in fr.source
    assert billing.count("/skus") >= 4  # every page read


def test_portfolio_live_end_to_end_rests_its_commitments_on_live_figures(billing, aws_env, monkeypatch, tmp_path,
                                                                          capsys):
    from placement.commands.main import main
    from placement.live import aws

    monkeypatch.setenv("GPUFLEET_GCP_BILLING_ENDPOINT", billing.url)
    monkeypatch.setenv("GPUFLEET_GCP_COMPUTE_ENDPOINT", billing.url)
    monkeypatch.setenv("GPUFLEET_GCP_ANONYMOUS", "1")
    start = dt.datetime.now(dt.UTC) + dt.timedelta(hours=12)
    hooks = Hooks({"us-east-1": [_block(start + dt.timedelta(days=7 * w), 168 * 30.0) for w in range(9)]},
                  [_rate("EC2Instance", 31_536_000, "us-east-1", "p5.48xlarge", 41.28),
                   _rate("EC2Instance", 94_608_000, "us-east-1", "p5.48xlarge", 30.0),
                   _rate("Compute", 31_536_000, "us-east-1", "p5.48xlarge", 45.0)])
    monkeypatch.setattr(aws, "CLIENT_HOOKS", [hooks])
    head = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,AvailabilityZone\n"
    (tmp_path / "aws.csv").write_text(head + "p5.48xlarge,H100,8,192,2048,55.04,,us-east-1,use1-az1\n")
    (tmp_path / "gcp.csv").write_text(head + "a3-highgpu-8g,H100,8,208,1872,88.49,,us-central1,us-central1-a\n")
    forecast = {"weeks": 4, "classes": [{"name": "train", "accelerators": ["H100"], "gpus_per_job": 8,
                                         "demand_gpu_hours": [2688, 2688, 2688, 2688]}]}
    (tmp_path / "f.yaml").write_text(yaml.safe_dump(forecast))
    code = main(["portfolio", str(tmp_path / "f.yaml"), "--live", "--json", "--no-calibration", "--time-limit", "5",
                 "--catalog", f"aws={tmp_path / 'aws.csv'}", "--catalog", f"gcp={tmp_path / 'gcp.csv'}",
                 "--gcp-project", "fake-project"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    assert {s["cloud"] for s in doc["live"]} == {"aws", "gcp"}
    assert doc["commitments"], doc
    for c in doc["commitments"]:
        assert c["verified"] and all(f["source"].startswith("live:") for f in c["figures"]), c
    assert not any("unverified" in w for w in doc["warnings"])
