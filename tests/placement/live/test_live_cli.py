"""``placement plan --live`` end to end through the real boto3 / google clients against local fakes."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from placement.commands.main import main
from placement.model.catalog import parse_catalog_json

GCP_UNIT_PRICES = {"nvidia-h100-80gb": (9.8, 2.9)}  # the GCP fake's SKUs (conftest)
GCP_HOST_PRICES = {"A3 Instance": (0.03, 0.01, 0.004, 0.001)}
A3_SSD_OD = 6000 * 0.08 / 730  # the bundled Local SSD of a3-highgpu-8g at the fake's GiB-month price
PROJECT = "fake-project"


def run(argv: list[str]) -> tuple[int, dict[str, Any] | None, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(argv)
    text = out.getvalue()
    return code, (json.loads(text) if text.strip().startswith("{") else None), err.getvalue()


def plan(env: dict[str, Any], *extra: str) -> tuple[int, dict[str, Any], str]:
    mode = [] if "--offline" in extra else ["--live"]  # --live --offline together is a usage error (issue 13)
    code, doc, err = run(["plan", env["job"], *mode, "--json", "--all-candidates", *env["args"], *extra])
    assert doc is not None, err
    return code, doc, err


def by_status(doc: dict[str, Any]) -> dict[tuple[str, str, str], str]:
    return {(s["cloud"], s["service"], s["region"]): s["status"] for s in doc["sources"]}


def cands(doc: dict[str, Any], **match: Any) -> list[dict[str, Any]]:
    return [c for c in doc["candidates"] if all(c[k] == v for k, v in match.items())]


def test_live_plan_uses_live_quota_prices_offerings_and_scores(live_env: dict[str, Any]) -> None:
    stubs = live_env["stubs"]
    stubs.limits[("us-east-1", "L-C4BD4855")] = 0.0  # no P5 spot quota in us-east-1
    code, doc, _ = plan(live_env)
    assert code == 0
    assert {s["status"] for s in doc["sources"]} == {"ok"}, doc["sources"]
    services = {(s["cloud"], s["service"]) for s in doc["sources"]}
    assert {("aws", "service-quotas"), ("aws", "cloudwatch"), ("aws", "ec2:offerings"), ("aws", "ec2:spot-prices"),
            ("aws", "ec2:placement-scores"), ("gcp", "compute:regions"), ("gcp", "compute:acceleratorTypes"),
            ("gcp", "billing:skus")} <= services
    chosen = doc["chosen"]
    assert chosen["feasible"] is True and chosen["quota"]["headroom"] is not None
    # Quota: a zero live limit makes us-east-1 spot infeasible, with the reason, and it is never chosen.
    east_spot = cands(doc, cloud="aws", region="us-east-1", capacity="spot")
    assert east_spot and all("quota L-C4BD4855" in c["excluded_reason"] for c in east_spot)
    assert not (chosen["region"] == "us-east-1" and chosen["capacity"] == "spot")
    # Offerings: a catalog zone AWS does not list is gone; GCP's new zone is added at catalog region prices
    # (then priced from billing SKUs); a zone that lost H100 is dropped.
    assert not cands(doc, zone="use1-az99")
    added = cands(doc, zone="us-central1-f", instance_type="a3-highgpu-8g", capacity="on-demand")
    assert added and added[0]["price_source"] == "catalog-region+gcp-billing"
    assert not cands(doc, zone="asia-southeast1-c")
    # Prices: AWS spot from spot price history (moto's price), GCP from SKUs: 8 GPUs + 208 vCPUs + 1872 GiB.
    west = cands(doc, cloud="aws", region="us-west-2", capacity="spot")
    assert west and all(c["price_source"] in ("aws-spot", "catalog-region+aws-spot") for c in west)
    assert all(c["usd_per_hour"] < 0.01 for c in west)  # moto answers $0.00001/h; the catalog said $40
    gpu_od, gpu_spot = GCP_UNIT_PRICES["nvidia-h100-80gb"]
    core_od, core_spot, ram_od, ram_spot = GCP_HOST_PRICES["A3 Instance"]
    a3 = cands(doc, region="us-central1", zone="us-central1-a", instance_type="a3-highgpu-8g", capacity="on-demand")
    assert a3[0]["usd_per_hour"] == pytest.approx(2 * (8 * gpu_od + 208 * core_od + 1872 * ram_od + A3_SSD_OD),
                                                  rel=1e-3)
    mega = cands(doc, region="us-central1", instance_type="a3-megagpu-8g", capacity="on-demand")
    assert mega and all(c["price_source"] == "catalog" for c in mega)  # no "A3 Mega" SKUs: catalog stays
    # The job's own spot.interruptions_per_hour (0.02) wins over the placement scores (issue 26): 2 (use1-az1)
    # and 9 alike. The job-level rate is per node times the 2 nodes of the gang.
    low = cands(doc, zone="use1-az1", capacity="spot")
    high = cands(doc, zone="use1-az2", capacity="spot")
    assert low[0]["nodes"] == high[0]["nodes"] == 2
    assert low[0]["placement_score"] == 2 and low[0]["interruptions_per_hour"] == 2 * 0.02
    assert high[0]["placement_score"] == 9 and high[0]["interruptions_per_hour"] == 2 * 0.02
    assert low[0]["interruption_source"] == high[0]["interruption_source"] == "job"
    # A job without a rate of its own: score 2 raises that zone's per-node rate to 0.5/h over the default
    # (0.05); 9 changes nothing.
    job = Path(live_env["job"])
    job.write_text(job.read_text().replace("interruptions_per_hour: 0.02, ", ""))
    _, doc, _ = plan(live_env, "--no-calibration")
    low = cands(doc, zone="use1-az1", capacity="spot")
    high = cands(doc, zone="use1-az2", capacity="spot")
    assert low[0]["interruptions_per_hour"] == 2 * 0.5 and low[0]["interruption_source"] == "live"
    assert high[0]["interruptions_per_hour"] == pytest.approx(2 * 0.05) and high[0]["interruption_source"] == \
        "default"
    # GCP quota came from regions.get.
    gcp_od = cands(doc, cloud="gcp", region="europe-west4", instance_type="a3-highgpu-8g", capacity="on-demand")
    assert gcp_od[0]["quota"]["headroom"] == 64.0


def test_partial_failures_are_reported_and_fall_back(live_env: dict[str, Any]) -> None:
    aws, gcp, stubs = live_env["aws"], live_env["gcp"], live_env["stubs"]
    aws.faults.update({"us-west-2": "403", "eu-west-1": "429"})
    stubs.faults.update({"us-west-2": "403", "eu-west-1": "429"})
    gcp.faults.update({"europe-west4": "500", "asia-southeast1": "hang", "us-central1": 0.3})
    stubs.limits[("us-east-1", "L-417A185B")] = 0.0  # us-east-1 on-demand: quota-infeasible
    # --timeout 1: us-central1's 0.3 s answers stay well within it on a busy machine.
    code, doc, _ = plan(live_env, "--timeout", "1")
    assert code == 0 and doc["chosen"] is not None
    st = by_status(doc)
    assert st[("aws", "ec2:offerings", "us-west-2")] == "denied"
    assert st[("aws", "service-quotas", "us-west-2")] == "denied"
    # A throttled region is reported as failed, never as known. Which failure depends on which deadline fires
    # first on a busy machine: botocore's retries giving up (throttled) or our per-call bound (timeout).
    throttled = {key: status for key, status in st.items() if key[0] == "aws" and key[2] == "eu-west-1"}
    assert ("aws", "ec2:offerings", "eu-west-1") in throttled and ("aws", "service-quotas", "eu-west-1") in throttled
    assert set(throttled.values()) <= {"throttled", "timeout"}, throttled
    assert st[("gcp", "compute:regions", "europe-west4")] == "error"
    assert st[("gcp", "compute:regions", "asia-southeast1")] == "timeout"
    assert st[("gcp", "compute:regions", "us-central1")] == "ok"  # slow but within the timeout
    # Failed regions: catalog prices and quota unknown; the chosen one is never quota-infeasible.
    for region in ("us-west-2", "eu-west-1"):
        assert cands(doc, cloud="aws", region=region)
        for c in cands(doc, cloud="aws", region=region):
            assert c["quota"]["headroom"] is None and "quota unknown" in c["notes"]
            assert c["price_source"] == "catalog"
    for c in cands(doc, cloud="gcp", region="europe-west4"):
        assert c["quota"]["headroom"] is None and c["feasible"] is None
    infeasible = cands(doc, cloud="aws", region="us-east-1", capacity="on-demand")
    assert infeasible and all(c["feasible"] is False for c in infeasible)
    chosen = doc["chosen"]
    assert chosen["feasible"] is not False
    assert not (chosen["region"] == "us-east-1" and chosen["capacity"] == "on-demand")


def test_missing_credentials_for_one_cloud_and_no_secret_leaks(live_env: dict[str, Any],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYFAKEFAKEKEY"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAFAKEFAKEFAKE7777")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    live_env["aws"].faults["us-east-1"] = "403"
    code, doc, err = plan(live_env)
    blob = json.dumps(doc) + err
    assert secret not in blob and "AKIAFAKEFAKEFAKE7777" not in blob
    assert by_status(doc)[("aws", "ec2:offerings", "us-east-1")] == "denied"

    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    code, doc, err = plan(live_env, "--refresh")
    st = by_status(doc)
    assert st[("aws", "credentials", "")] == "no-credentials"
    assert st[("gcp", "compute:regions", "")] == "ok"  # GCP unaffected
    assert code == 0 and doc["chosen"] is not None
    assert all(c["quota"]["headroom"] is None for c in cands(doc, cloud="aws"))


def test_cache_hits_refresh_and_offline(live_env: dict[str, Any]) -> None:
    aws, gcp, stubs = live_env["aws"], live_env["gcp"], live_env["stubs"]
    plan(live_env)
    assert aws.count() > 0 and gcp.count() > 0 and stubs.created
    # The calls made, as distinct requests: a client retry on a loaded machine repeats one, changes nothing.
    first = (set(aws.requests), set(gcp.requests))

    aws.reset(), gcp.reset(), stubs.created.clear()
    _, doc, _ = plan(live_env)
    assert (aws.count(), gcp.count(), stubs.created) == (0, 0, [])
    assert {s["status"] for s in doc["sources"]} == {"cached"}

    _, doc, _ = plan(live_env, "--refresh")
    assert (set(aws.requests), set(gcp.requests)) == first and stubs.created
    assert {s["status"] for s in doc["sources"]} == {"ok"}

    aws.reset(), gcp.reset(), stubs.created.clear()
    _, doc, _ = plan(live_env, "--offline")
    assert (aws.count(), gcp.count(), stubs.created) == (0, 0, [])
    assert {s["status"] for s in doc["sources"]} == {"offline"}
    assert all("from cache" in s["detail"] for s in doc["sources"])
    assert doc["chosen"]["quota"]["headroom"] is not None  # cached quota still used offline

    os.environ["GPUFLEET_CACHE_DIR"] = str(live_env["tmp"] / "empty-cache")
    _, doc, _ = plan(live_env, "--offline")
    assert (aws.count(), gcp.count()) == (0, 0)
    assert all(s["status"] == "offline" and "no cached data" in s["detail"] for s in doc["sources"])
    assert doc["chosen"]["price_source"] == "catalog" and doc["chosen"]["quota"]["headroom"] is None


def test_refresh_writes_catalog_atomically(live_env: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "catalog.json"
    # The fake lists 3 of the embedded catalog's GCP regions: far fewer offers, so the shrink must be allowed.
    code, _, err = run(["refresh", "--output", str(out), "--cloud", "gcp", "--gcp-project", PROJECT,
                        "--timeout", "2", "--allow-shrink"])
    assert code == 0, err
    doc = json.loads(out.read_text())
    cat = parse_catalog_json(doc, source=str(out))
    assert doc["as_of"] != "2026-11-01" and cat.offers
    central = [o for o in cat.offers if o.zone == "us-central1-f" and o.instance_type == "a3-highgpu-8g"]
    gpu_od = GCP_UNIT_PRICES["nvidia-h100-80gb"][0]
    core_od, _, ram_od, _ = GCP_HOST_PRICES["A3 Instance"]
    assert central and central[0].price == pytest.approx(8 * gpu_od + 208 * core_od + 1872 * ram_od + A3_SSD_OD,
                                                         rel=1e-3)
    assert any(o.cloud == "aws" for o in cat.offers)  # AWS kept from the embedded catalog
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp file left

    # No cloud answers: exit 1 and the file is left exactly as it was.
    before = out.read_bytes()
    live_env["gcp"].faults["skus"] = "403"
    live_env["gcp"].faults["acceleratorTypes"] = "403"
    code, _, err = run(["refresh", "--output", str(out), "--cloud", "gcp", "--gcp-project", PROJECT])
    assert code == 1 and "no cloud answered" in err
    assert out.read_bytes() == before

    code, _, err = run(["refresh", "--output", str(tmp_path / "missing" / "c.json"), "--cloud", "gcp"])
    assert code == 2 and err.count("\n") == 1
    code, _, err = run(["refresh", "--output", str(out), "--timeout", "0"])
    assert code == 2 and "--timeout" in err


def test_help_and_contract_module_do_not_import_the_sdks() -> None:
    probe = ("import sys, contextlib, io\n"
             "import placement.live\n"
             "from placement.commands.main import main\n"
             "with contextlib.redirect_stdout(io.StringIO()):\n"
             "    try:\n        main(['--help'])\n    except SystemExit:\n        pass\n"
             "print(sorted(m for m in sys.modules if m.startswith(('boto3', 'botocore', 'google.cloud'))))")
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert res.stdout.strip() == "[]"


def test_cli_process_cold_then_warm_without_sdk_imports(live_env: dict[str, Any],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """As a user runs it: a fresh process (single-threaded, so AWS runs in a forked worker whose answers
    come back over a pipe), everything through HTTP (the AWS fake answers Service Quotas and placement
    scores itself); then a warm run answered from the cache without importing either SDK."""
    aws, gcp = live_env["aws"], live_env["gcp"]
    monkeypatch.setitem(aws.quota_limits, ("us-east-1", "L-C4BD4855"), 0.0)
    env = {**os.environ, "AWS_ENDPOINT_URL": aws.url}
    probe = ("import sys\nfrom placement.commands.main import main\nrc = main(sys.argv[1:])\n"
             "sdk = sorted({m.split('.')[0] + ('.cloud' if m.startswith('google.cloud') else '') for m in sys.modules"
             " if m.startswith(('boto3', 'google.cloud'))})\nprint('SDK', sdk, file=sys.stderr)\nsys.exit(rc)")
    argv = [sys.executable, "-c", probe, "plan", live_env["job"], "--live", "--json", "--all-candidates",
            *live_env["args"]]
    cold = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert cold.returncode == 0, cold.stderr
    doc = json.loads(cold.stdout)
    assert {s["status"] for s in doc["sources"]} == {"ok"}, doc["sources"]
    assert aws.count("GetServiceQuota") and aws.count("GetSpotPlacementScores") and gcp.count()
    east_spot = cands(doc, cloud="aws", region="us-east-1", capacity="spot")
    assert east_spot and all("quota L-C4BD4855" in c["excluded_reason"] for c in east_spot)
    assert cands(doc, zone="use1-az1", capacity="spot")[0]["placement_score"] == 2
    assert "SDK ['google.cloud']" in cold.stderr  # boto3 was imported only in the forked AWS worker

    aws.reset(), gcp.reset()
    warm = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert warm.returncode == 0, warm.stderr
    assert {s["status"] for s in json.loads(warm.stdout)["sources"]} == {"cached"}
    assert (aws.count(), gcp.count()) == (0, 0)
    assert "SDK []" in warm.stderr


def test_live_reservations_from_both_clouds(live_env: dict[str, Any]) -> None:
    """AWS DescribeCapacityReservations and GCP reservations.aggregatedList, read by the real clients, become
    reserved candidates priced by the documented rule, bounded by their free nodes and their end date."""
    east = live_env["zones"]["us-east-1"][0]
    live_env["aws"].reservations["us-east-1"] = [
        {"CapacityReservationId": "cr-odcr", "InstanceType": "p5.48xlarge", "AvailabilityZone": "us-east-1a",
         "AvailabilityZoneId": east, "TotalInstanceCount": 4, "AvailableInstanceCount": 2},
        {"CapacityReservationId": "cr-block", "InstanceType": "p5.48xlarge", "AvailabilityZone": "us-east-1a",
         "AvailabilityZoneId": east, "TotalInstanceCount": 2, "AvailableInstanceCount": 2,
         "ReservationType": "capacity-block", "EndDate": "2026-11-21T11:30:00.000Z"},
        {"CapacityReservationId": "cr-full", "InstanceType": "p5.48xlarge", "AvailabilityZone": "us-east-1a",
         "AvailabilityZoneId": east, "TotalInstanceCount": 2, "AvailableInstanceCount": 0},
        {"CapacityReservationId": "cr-win", "InstanceType": "p5.48xlarge", "AvailabilityZone": "us-east-1a",
         "AvailabilityZoneId": east, "TotalInstanceCount": 2, "AvailableInstanceCount": 2,
         "InstancePlatform": "Windows"},
        {"CapacityReservationId": "cr-old", "InstanceType": "p5.48xlarge", "AvailabilityZone": "us-east-1a",
         "AvailabilityZoneId": east, "TotalInstanceCount": 2, "AvailableInstanceCount": 2, "State": "expired"},
    ]
    fakes = sys.modules["placement_live_fakes"]  # loaded by conftest
    live_env["gcp"].reservations["us-central1-a"] = [
        fakes.gcp_reservation(PROJECT, "us-central1-a", "team-a3", "a3-highgpu-8g", count=4, in_use=1),
        fakes.gcp_reservation(PROJECT, "us-central1-a", "committed", "a3-highgpu-8g", count=2, in_use=0,
                              commitment="c-1y"),
        fakes.gcp_reservation(PROJECT, "us-central1-a", "creating", "a3-highgpu-8g", count=8, in_use=0,
                              status="CREATING"),
    ]
    code, doc, _ = plan(live_env, "--now", "2026-11-21T00:00:00Z")
    assert code == 0
    st = by_status(doc)
    assert st[("aws", "ec2:reservations", "")] == "ok" and st[("gcp", "compute:reservations", "")] == "ok"
    reserved = {c["reservation"]["id"]: c for c in doc["candidates"] if c["capacity"] == "reserved"}
    assert set(reserved) == {"cr-odcr", "cr-block", "us-central1-a/team-a3", "us-central1-a/committed"}
    odcr, block = reserved["cr-odcr"], reserved["cr-block"]
    # an ODCR could be released instead of used: the catalog's on-demand price of the shape in that zone
    assert odcr["zone"] == east and odcr["nodes"] == 2 and odcr["feasible"] is True
    assert odcr["usd_per_hour"] == pytest.approx(2 * 98.32)
    # a Capacity Block is prepaid (0); it ends 11.5 h from "now", after the 10 h job is done
    assert block["reservation"]["usd_per_hour"] == 0 and block["reservation"]["kind"] == "capacity-block"
    assert block["reservation"]["ends"] == "2026-11-21T11:30:00Z"
    assert block["feasible"] is True and block["usd_per_hour"] == 0
    a3 = reserved["us-central1-a/team-a3"]
    assert a3["reservation"]["count"] == 3 and a3["nodes"] == 2  # 4 reserved, 1 in use
    gpu_od = GCP_UNIT_PRICES["nvidia-h100-80gb"][0]
    core_od, _, ram_od, _ = GCP_HOST_PRICES["A3 Instance"]
    assert a3["usd_per_hour"] == pytest.approx(2 * (8 * gpu_od + 208 * core_od + 1872 * ram_od + A3_SSD_OD),
                                               rel=1e-3)
    assert reserved["us-central1-a/committed"]["usd_per_hour"] == 0  # attached to a commitment: paid either way
    assert doc["chosen"]["capacity"] == "reserved" and doc["chosen"]["usd_per_hour"] == 0
    # the same Capacity Block, planned two hours later, ends before this job is ready
    _, later, _ = plan(live_env, "--now", "2026-11-21T02:00:00Z")
    block = next(c for c in later["candidates"] if c.get("reservation", {}).get("id") == "cr-block")
    assert "before the job is ready" in block["excluded_reason"]


def test_live_reservation_failures_are_sources_not_errors(live_env: dict[str, Any]) -> None:
    live_env["gcp"].faults["reservations"] = "403"
    code, doc, _ = plan(live_env)
    assert code == 0
    assert by_status(doc)[("gcp", "compute:reservations", "")] == "denied"
    assert not [c for c in doc["candidates"] if c["capacity"] == "reserved"]
