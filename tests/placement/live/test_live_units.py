"""Pure parts of placement.live: overlay rules, quota table, score mapping, cache, error scrubbing, sources."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from placement.live.cache import TTL_S, DiskCache, fresh
from placement.live.errors import classify, scrub
from placement.live.overlay import LiveData, apply, quotas, score_rate
from placement.live.runner import Outcome, Task, summarize
from placement.model.catalog import Catalog, Offer
from placement.model.shapes import shape_book


def offer(cloud: str, region: str, zone: str, itype: str, price: float | None, spot: float | None) -> Offer:
    shape = shape_book().get(itype)
    assert shape is not None
    return Offer(cloud=cloud, region=region, zone=zone, shape=shape, price=price, spot_price=spot)


@pytest.mark.parametrize(("score", "rate"), [(10, None), (8, None), (7, 0.1), (5, 0.1), (4, 0.25), (3, 0.25),
                                             (2, 0.5), (1, 0.5)])
def test_placement_score_mapping(score: int, rate: float | None) -> None:
    assert score_rate(score) == rate


def test_overlay_drops_adds_reprices_and_scores() -> None:
    cat = Catalog(offers=(
        offer("aws", "us-east-1", "use1-az1", "p5.48xlarge", 98.0, 40.0),
        offer("aws", "us-east-1", "use1-az9", "p5.48xlarge", 98.0, 41.0),  # not offered any more
        offer("aws", "us-west-2", "usw2-az1", "p5.48xlarge", 98.0, 39.0),  # region did not answer
        offer("aws", "us-east-1", "use1-az1", "g6.xlarge", 1.0, 0.5),  # other accelerator: untouched
        offer("gcp", "us-central1", "us-central1-a", "a3-highgpu-8g", 88.0, 30.0),
        offer("gcp", "us-central1", "us-central1-b", "a3-highgpu-8g", 88.0, 30.0),
    ), as_of="2026-11-01", source="test")
    data = LiveData(accelerators={"H100"},
                    aws_offerings={"us-east-1": {"p5.48xlarge": ["use1-az1", "use1-az2"], "p5.4xlarge": ["use1-az1"]}},
                    aws_zone_ids={"us-east-1": {"us-east-1a": "use1-az1", "us-east-1b": "use1-az2"}},
                    aws_spot_rows={"us-east-1": [["p5.48xlarge", "us-east-1a", None, 21.5],
                                                 ["p5.48xlarge", "us-east-1b", "use1-az2", 22.5]]},
                    aws_scores={"p5.48xlarge": {"use1-az1": 4, "use1-az2": 9}},
                    gcp_accel_zones={"nvidia-h100-80gb": ["us-central1-a", "us-central1-c"]})
    out = {(o.cloud, o.zone, o.instance_type): o for o in apply(cat, data).offers}
    assert ("aws", "use1-az9", "p5.48xlarge") not in out
    a1 = out[("aws", "use1-az1", "p5.48xlarge")]
    assert (a1.price, a1.spot_price, a1.price_source, a1.placement_score, a1.interruptions_per_hour) == (
        98.0, 21.5, "aws-spot", 4, 0.25)
    a2 = out[("aws", "use1-az2", "p5.48xlarge")]  # added: catalog region on-demand, live spot
    assert (a2.price, a2.spot_price, a2.price_source, a2.placement_score, a2.interruptions_per_hour) == (
        98.0, 22.5, "catalog-region+aws-spot", 9, None)
    assert ("aws", "use1-az1", "p5.4xlarge") not in out  # no price known for it in that region
    assert out[("aws", "usw2-az1", "p5.48xlarge")] == cat.offers[2]
    assert out[("aws", "use1-az1", "g6.xlarge")] == cat.offers[3]
    assert ("gcp", "us-central1-b", "a3-highgpu-8g") not in out
    c = out[("gcp", "us-central1-c", "a3-highgpu-8g")]
    assert (c.price, c.spot_price, c.price_source) == (88.0, 30.0, "catalog-region")


def test_quota_table_needs_limit_and_usage_except_for_zero_limits() -> None:
    data = LiveData(accelerators={"H100"},
                    aws_quota_limits={"us-east-1": {"L-417A185B": 384.0, "L-C4BD4855": 192.0},
                                      "eu-west-1": {"L-417A185B": 0.0, "L-C4BD4855": 96.0}},
                    aws_usage={"us-east-1": {"P/OnDemand": 192.0, "P/Spot": 0.0}},
                    gcp_quotas={"us-central1": {"NVIDIA_H100_GPUS": [16.0, 8.0]}})
    q = quotas(data)
    assert q.get("aws", "us-east-1", "L-417A185B").headroom == 192.0  # type: ignore[union-attr]
    assert q.get("aws", "us-east-1", "L-C4BD4855").headroom == 192.0  # type: ignore[union-attr]
    assert q.get("aws", "eu-west-1", "L-417A185B").headroom == 0.0  # type: ignore[union-attr]
    assert q.get("aws", "eu-west-1", "L-C4BD4855") is None  # usage unknown: quota unknown
    assert q.get("gcp", "us-central1", "NVIDIA_H100_GPUS").headroom == 8.0  # type: ignore[union-attr]


def test_scrub_removes_credentials_and_tokens() -> None:
    text = ("AKIAIOSFODNN7EXAMPLE wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY "
            "https://x/?X-Amz-Security-Token=FQoGZXIvYXdzEJr&X-Amz-Signature=abc123 "
            "Authorization: Bearer ya29.a0AfH6SMB password=hunter2 "
            "-----BEGIN PRIVATE KEY-----\nMIIEv\n-----END PRIVATE KEY-----")
    out = scrub(text, limit=1000)
    for secret in ("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI", "FQoGZXIvYXdzEJr", "abc123", "ya29.a0AfH6SMB", "hunter2",
                   "MIIEv"):
        assert secret not in out
    assert "\n" not in scrub("a\nb") and len(scrub("x" * 500)) <= 160


class _ClientError(Exception):
    def __init__(self, code: str, http: int) -> None:
        super().__init__(code)
        self.response = {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": http}}


class _GoogleError(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(f"{code}")
        self.code = code


class RetryError(Exception):  # the name google.api_core uses
    def __init__(self, cause: Exception | None) -> None:
        super().__init__("Timeout of 2.0s exceeded")
        self.cause = cause


class ReadTimeoutError(Exception):
    pass


class NoCredentialsError(Exception):
    pass


@pytest.mark.parametrize(("exc", "status"), [
    (_ClientError("UnauthorizedOperation", 403), "denied"), (_ClientError("OptInRequired", 401), "denied"),
    (_ClientError("RequestLimitExceeded", 503), "throttled"), (_ClientError("Whatever", 429), "throttled"),
    (_ClientError("InternalError", 500), "error"), (_GoogleError(403), "denied"), (_GoogleError(429), "throttled"),
    (_GoogleError(500), "error"), (RetryError(_GoogleError(500)), "error"), (RetryError(None), "timeout"),
    (ReadTimeoutError("read timeout"), "timeout"), (NoCredentialsError("none"), "no-credentials"),
    (ValueError("odd"), "error")])
def test_classify(exc: Exception, status: str) -> None:
    assert classify(exc)[0] == status


def test_cache_roundtrip_ttl_and_bad_files(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path)
    cache.put("k1", {"a": [1, 2]})
    entry = cache.get("k1")
    assert entry is not None and entry.data == {"a": [1, 2]} and fresh(entry, "quotas")
    cache.put("k2", [1], fetched_at=time.time() - TTL_S["quotas"] - 1)
    old = cache.get("k2")
    assert old is not None and not fresh(old, "quotas") and fresh(old, "offerings")
    assert cache.get("missing") is None
    path = cache._path("k1")
    path.write_text("{not json")
    assert cache.get("k1") is None
    path.write_text(json.dumps({"key": "other", "fetched_at": 0, "data": 1}))
    assert cache.get("k1") is None  # a hash collision or foreign file is not an answer
    assert not [p for p in os.listdir(cache.dir) if p.startswith(".tmp")]


def _task(cloud: str, service: str, region: str, op: str = "x") -> Task:
    return Task(cloud, service, region, "quotas", op, (), "scope")


def test_sources_fold_successes_and_name_failures() -> None:
    outcomes: dict[Task, Any] = {
        _task("aws", "service-quotas", "us-east-1"): Outcome("ok", 1),
        _task("aws", "service-quotas", "us-west-2"): Outcome("ok", 1),
        _task("aws", "service-quotas", "eu-west-1"): Outcome("throttled", None, "Throttling (HTTP 429)"),
        _task("aws", "ec2:offerings", "us-east-1"): Outcome("cached", 1, "", 30.0),
        _task("gcp", "compute:regions", "us-central1", "a"): Outcome("no-credentials", None, "no ADC"),
        _task("gcp", "compute:regions", "us-central1", "b"): Outcome("no-credentials", None, "no ADC"),
    }
    rows = [s.as_dict() for s in summarize(outcomes)]
    assert rows[0] == {"cloud": "aws", "service": "service-quotas", "region": "eu-west-1", "status": "throttled",
                       "detail": "Throttling (HTTP 429)", "age_s": None}
    assert {"cloud": "gcp", "service": "credentials", "region": "", "status": "no-credentials", "detail": "no ADC",
            "age_s": None} in rows
    ok = next(r for r in rows if r["status"] == "ok")
    assert ok["service"] == "service-quotas" and ok["detail"] == "2 regions"
    cached = next(r for r in rows if r["status"] == "cached")
    assert cached["region"] == "us-east-1" and cached["age_s"] == 30.0


def test_a_cloud_that_failed_one_way_everywhere_gets_one_row():
    missing = "boto3 is not installed: pip install 'gpufleet[live]'"
    outcomes = {
        _task("aws", "service-quotas", "us-east-1"): Outcome("error", None, missing),
        _task("aws", "ec2:offerings", "us-west-2"): Outcome("error", None, missing),
        _task("gcp", "compute:regions", "us-central1"): Outcome("ok", 1),
    }
    rows = [r.as_dict() for r in summarize(outcomes)]
    aws = [r for r in rows if r["cloud"] == "aws"]
    want = {"cloud": "aws", "service": "all", "region": "", "status": "error", "detail": missing, "age_s": None}
    assert aws == [want]
    assert any(r["cloud"] == "gcp" and r["status"] == "ok" for r in rows)


def test_missing_sdk_is_classified_with_the_fix():
    from placement.console import extra_command
    from placement.live.errors import classify

    status, detail = classify(ModuleNotFoundError("No module named 'boto3'", name="boto3"))
    # The one command that adds the extra here (scripts/extra in a checkout's .venv, pip elsewhere: issue 38).
    assert status == "error" and "boto3 is not installed" in detail and extra_command("live") in detail


def test_aws_reservations_request_and_filtering_through_stubber() -> None:
    """The request as EC2's API model accepts it; only usable reservations come back."""
    import datetime as dt

    import boto3
    from botocore.config import Config
    from botocore.stub import Stubber

    from placement.live import aws

    session = boto3.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1")
    ctx = aws.AwsContext(session=session, config=Config())
    ec2 = session.client("ec2", region_name="us-east-1")
    ctx.clients[("ec2", "us-east-1", "")] = ec2
    end = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)

    def row(rid: str, **kw: Any) -> dict[str, Any]:
        return {"CapacityReservationId": rid, "InstanceType": "p5.48xlarge", "AvailabilityZone": "us-east-1a",
                "AvailabilityZoneId": "use1-az4", "InstancePlatform": "Linux/UNIX", "Tenancy": "default",
                "TotalInstanceCount": 4, "AvailableInstanceCount": 2, "State": "active", **kw}

    with Stubber(ec2) as stub:
        stub.add_response("describe_capacity_reservations", {"CapacityReservations": [
            row("cr-1"), row("cr-2", ReservationType="capacity-block", EndDate=end),
            row("cr-3", AvailableInstanceCount=0), row("cr-4", Interruptible=True),
            row("cr-5", InstancePlatform="Red Hat Enterprise Linux"), row("cr-6", Tenancy="dedicated"),
            row("cr-7", CommitmentInfo={"CommittedInstanceCount": 2, "CommitmentEndDate": end}),
        ]}, {"MaxResults": 1000, "Filters": [{"Name": "state", "Values": ["active"]},
                                             {"Name": "instance-type", "Values": ["p5.48xlarge"]}]})
        out = aws.reservations(ctx, "us-east-1", types=["p5.48xlarge"])
    assert [(r["id"], r["kind"], r["committed"], r["count"]) for r in out] == [
        ("cr-1", "odcr", False, 2), ("cr-2", "capacity-block", False, 2), ("cr-7", "odcr", True, 2)]
    assert out[1]["ends"] == "2026-12-01T00:00:00+00:00" and out[0]["ends"] is None
    assert out[0]["zone_id"] == "use1-az4"


def test_live_reservation_pricing_rule() -> None:
    from placement.live.overlay import reservations

    cat = Catalog(offers=(
        offer("aws", "us-east-1", "use1-az4", "p5.48xlarge", 55.0, 20.0),
        offer("aws", "us-east-1", "use1-az6", "p5.48xlarge", 57.0, 20.0),
        offer("aws", "us-west-2", "usw2-az1", "p5.48xlarge", 60.0, 20.0),
        offer("gcp", "us-central1", "us-central1-a", "a3-highgpu-8g", 88.0, 30.0),
    ), as_of="2026-11-01", source="test")
    base = {"instance_type": "p5.48xlarge", "count": 2, "ends": None, "kind": "odcr", "committed": False}
    data = LiveData(accelerators={"H100"},
                    aws_zone_ids={"us-east-1": {"us-east-1c": "use1-az6", "us-east-1z": "use1-az9"}},
                    aws_reservations={"us-east-1": [
                        {**base, "id": "zone-price", "zone_id": "use1-az4", "zone": "us-east-1a"},
                        {**base, "id": "by-name", "zone_id": None, "zone": "us-east-1c"},
                        {**base, "id": "region-price", "zone_id": "use1-az9", "zone": "us-east-1z"},
                        {**base, "id": "block", "zone_id": "use1-az4", "kind": "capacity-block",
                         "ends": "2026-12-01T00:00:00+00:00"},
                        {**base, "id": "committed", "zone_id": "use1-az4", "committed": True},
                        {**base, "id": "unknown-shape", "zone_id": "use1-az4", "instance_type": "x9.metal"},
                    ], "eu-west-3": [{**base, "id": "cloud-price", "zone_id": "euw3-az1"}]},
                    gcp_reservations=[{"id": "us-central1-a/r", "instance_type": "a3-highgpu-8g",
                                       "zone": "us-central1-a", "count": 3, "ends": None, "kind": "gcp-reservation",
                                       "committed": False}])
    got = {r.id: r for r in reservations(data, cat)}
    assert {k: (r.zone, r.usd_per_hour) for k, r in got.items()} == {
        "zone-price": ("use1-az4", 55.0), "by-name": ("use1-az6", 57.0), "region-price": ("use1-az9", 57.0),
        "block": ("use1-az4", 0.0), "committed": ("use1-az4", 0.0), "cloud-price": ("euw3-az1", 60.0),
        "us-central1-a/r": ("us-central1-a", 88.0)}
    assert got["block"].ends is not None and got["block"].ends.isoformat() == "2026-12-01T00:00:00+00:00"
    assert got["us-central1-a/r"].region == "us-central1" and got["us-central1-a/r"].count == 3


def test_placement_scores_ask_for_the_nodes_the_job_would_really_use() -> None:
    from placement.live import LiveRequest
    from placement.live.runner import build_tasks

    cat = Catalog(offers=(offer("aws", "us-east-1", "use1-az1", "p5.48xlarge", 55.0, 20.0),
                          offer("aws", "us-east-1", "use1-az1", "p5.4xlarge", 7.0, 3.0)), as_of="x", source="test")

    def scored(gpus: int, per_node: int | None = None) -> dict[str, int]:
        req = LiveRequest(accelerators=("H100",), target_nodes=1, target_gpus=gpus, aws_profile=None,
                          gcp_project=None, refresh=False, offline=True, timeout_s=1, progress=False,
                          clouds=("aws",), gpus_per_node=per_node)
        return {dict(t.params)["instance_type"]: dict(t.params)["nodes"] for t in build_tasks(req, cat)
                if t.op == "scores"}

    assert scored(4) == {"p5.48xlarge": 1}  # one node that holds all 4, never 4 single-GPU nodes
    assert scored(32) == {"p5.48xlarge": 4}
    assert scored(4, per_node=1) == {"p5.4xlarge": 4}


def test_reservation_tasks_only_when_asked() -> None:
    from placement.live import LiveRequest
    from placement.live.runner import build_tasks

    cat = Catalog(offers=(offer("aws", "us-east-1", "use1-az1", "p5.48xlarge", 55.0, 20.0),
                          offer("gcp", "us-central1", "us-central1-a", "a3-highgpu-8g", 88.0, 30.0)),
                  as_of="x", source="test")
    base = dict(accelerators=("H100",), target_nodes=1, aws_profile=None, gcp_project="p", refresh=False,
                offline=True, timeout_s=1, progress=False)
    ops = {(t.cloud, t.service) for t in build_tasks(LiveRequest(**base, reservations=True), cat)}
    assert {("aws", "ec2:reservations"), ("gcp", "compute:reservations")} <= ops
    ops = {(t.cloud, t.service) for t in build_tasks(LiveRequest(**base), cat)}
    assert not {s for _, s in ops if "reservations" in s}


def test_quota_tasks_only_when_asked() -> None:
    from placement.live import LiveRequest
    from placement.live.runner import build_tasks

    cat = Catalog(offers=(offer("aws", "us-east-1", "use1-az1", "p5.48xlarge", 55.0, 20.0),
                          offer("gcp", "us-central1", "us-central1-a", "a3-highgpu-8g", 88.0, 30.0)),
                  as_of="x", source="test")
    base = dict(accelerators=("H100",), target_nodes=1, aws_profile=None, gcp_project="p", refresh=False,
                offline=True, timeout_s=1, progress=False)
    quota_services = {("aws", "service-quotas"), ("aws", "cloudwatch"), ("gcp", "compute:regions")}
    assert quota_services <= {(t.cloud, t.service) for t in build_tasks(LiveRequest(**base), cat)}
    prices_only = {(t.cloud, t.service) for t in build_tasks(LiveRequest(**base, quotas=False), cat)}
    assert not prices_only & quota_services  # placement dispatch: no quota calls, no quota permissions
    assert {("aws", "ec2:spot-prices"), ("aws", "ec2:offerings"), ("gcp", "billing:skus"),
            ("gcp", "compute:acceleratorTypes")} <= prices_only


def test_live_usage_above_the_limit_is_zero_headroom_with_a_warning() -> None:
    data = LiveData(accelerators={"H100"}, aws_quota_limits={"us-east-1": {"L-417A185B": 192.0}},
                    aws_usage={"us-east-1": {"P/OnDemand": 384.0}},
                    gcp_quotas={"us-central1": {"NVIDIA_H100_GPUS": [8.0, 16.0]}})
    q = quotas(data)
    assert q.get("aws", "us-east-1", "L-417A185B").headroom == 0.0  # type: ignore[union-attr]
    assert q.get("gcp", "us-central1", "NVIDIA_H100_GPUS").headroom == 0.0  # type: ignore[union-attr]
    assert len(q.warnings) == 2 and all("above its limit" in w and "headroom 0" in w for w in q.warnings)


# ----------------------------------------------------------------------------- GCP machine prices (issue 36)


def _units(**extra: Any) -> dict[str, Any]:
    units: dict[str, Any] = {"gpu": {"nvidia-h100-80gb": {"us-central1": [9.8, 2.9]}},
                             "core": {"A3 Instance": {"us-central1": [0.03, 0.01]}},
                             "ram": {"A3 Instance": {"us-central1": [0.004, 0.001]}},
                             "ssd": {"local": {"us-central1": [0.08 / 730, 0.032 / 730]}}}
    units.update(extra)
    return units


def test_a_gcp_machine_price_is_its_billing_skus_gpus_and_bundled_local_ssd_included() -> None:
    from placement.live.overlay import gcp_machine_price

    a3 = shape_book().get("a3-highgpu-8g")
    assert a3 is not None and a3.local_ssds == 16
    want = 8 * 9.8 + 208 * 0.03 + 1872 * 0.004 + 16 * 375 * 0.08 / 730
    assert gcp_machine_price(a3, "us-central1", _units(), 0) == pytest.approx(want, abs=1e-4)
    spot = 8 * 2.9 + 208 * 0.01 + 1872 * 0.001 + 16 * 375 * 0.032 / 730
    assert gcp_machine_price(a3, "us-central1", _units(), 1) == pytest.approx(spot, abs=1e-4)
    # Any part missing (here the Local SSD, or the GPU): no price, never a machine priced without it.
    assert gcp_machine_price(a3, "us-central1", _units(ssd={}), 0) is None
    assert gcp_machine_price(a3, "us-central1", _units(gpu={}), 0) is None
    a2 = shape_book().get("a2-highgpu-8g")  # no local SSD: none needed
    assert a2 is not None and a2.local_ssds == 0
    units = _units(gpu={"nvidia-tesla-a100": {"us-central1": [2.93, 1.0]}},
                   core={"A2 Instance": {"us-central1": [0.031611, 0.01]}},
                   ram={"A2 Instance": {"us-central1": [0.004237, 0.001]}}, ssd={})
    assert gcp_machine_price(a2, "us-central1", units, 0) == pytest.approx(8 * 2.93 + 96 * 0.031611 + 680 * 0.004237,
                                                                           abs=1e-4)


def test_a4_is_priced_by_its_gpu_slices_alone() -> None:
    from placement.live.overlay import gcp_machine_price

    a4 = shape_book().get("a4-highgpu-8g")
    assert a4 is not None
    units = _units(gpu={"nvidia-b200": {"us-central1": [16.11, 5.0]}})
    assert gcp_machine_price(a4, "us-central1", units, 0) == pytest.approx(8 * 16.11)


@pytest.mark.parametrize(("description", "group", "kind"), [
    ("SSD backed Local Storage running in Americas", "LocalSSD", ("ssd", "local")),
    ("SSD backed Local Storage attached to Spot Preemptible VMs running in Belgium", "LocalSSD", ("ssd", "local")),
    ("Commitment v1: Local SSD In Americas for 1 Year", "LocalSSD", None),
    ("A4 Nvidia B200 (1 gpu slice) running in Americas", "GPU", ("gpu", "nvidia-b200")),
    ("H200 141GB GPU running in Belgium", "GPU", ("gpu", "nvidia-h200-141gb")),
    ("Nvidia H100 80GB GPU running in Americas", "GPU", ("gpu", "nvidia-h100-80gb")),
    ("Spot Preemptible A3 Instance Core running in Americas", "CPU", ("core", "A3 Instance")),
])
def test_billing_skus_are_classified_by_their_catalogue_names(description: str, group: str,
                                                              kind: tuple[str, str] | None) -> None:
    from placement.live.gcp import classify_sku

    assert classify_sku(description, group) == kind


def test_the_sku_check_keeps_local_ssd_prices_and_reads_older_answers_without_them() -> None:
    from placement.live.checks import check_answer

    answer = {"gpu": {"nvidia-h100-80gb": {"us-central1": [9.8, 2.9]}}, "core": {}, "ram": {},
              "ssd": {"local": {"us-central1": [0.0001096, 0.0000438]}}}
    assert check_answer("skus", answer).data["ssd"] == {"local": {"us-central1": [0.0001096, 0.0000438]}}
    older = {k: v for k, v in answer.items() if k != "ssd"}
    assert check_answer("skus", older).data["ssd"] == {}
