"""Faults in live answers (issue 14): unknown stays unknown, bad values are refused, slow regions cost only
themselves, and the cache never serves a future or corrupted entry. Real boto3 / google clients against the
local fakes (conftest.py)."""

from __future__ import annotations

import io
import json
import math
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from placement.commands.main import main

JOB_VCPUS = 2 * 192  # the conftest job: 16 GPUs = 2 p5.48xlarge nodes of 192 vCPUs


def _strict(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise AssertionError(f"--json printed {name}, which is not JSON")

    return json.loads(text, parse_constant=refuse)


def plan(env: dict[str, Any], *extra: str) -> tuple[int, dict[str, Any], str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["plan", env["job"], "--live", "--json", "--all-candidates", *env["args"], *extra])
    return code, _strict(out.getvalue()), err.getvalue()


def sources(doc: dict[str, Any]) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {(s["cloud"], s["service"], s["region"]): s for s in doc["sources"]}


def cands(doc: dict[str, Any], **match: Any) -> list[dict[str, Any]]:
    return [c for c in doc["candidates"] if all(c[k] == v for k, v in match.items())]


def assert_never_wrong(doc: dict[str, Any]) -> None:
    """The promise: the chosen candidate is never quota-infeasible; a known-feasible one beats any unknown."""
    chosen = doc["chosen"]
    if chosen is None:
        return
    assert chosen["feasible"] is not False
    if chosen["quota"]["headroom"] is None:
        assert not [c for c in doc["candidates"] if c["feasible"] is True], "unknown quota chosen over a known fit"
    for c in doc["candidates"]:
        h = c["quota"]["headroom"]
        assert h is None or (math.isfinite(h) and h >= 0 or c["feasible"] is False)
        assert c["usd_per_hour"] is None or (math.isfinite(c["usd_per_hour"]) and c["usd_per_hour"] >= 0)


AWS_REGIONS = ("us-east-1", "us-west-2", "eu-west-1")


def test_cloudwatch_complete_usage_makes_quota_known_and_infeasible(live_env: dict[str, Any]) -> None:
    """The control of the next test: the fake's usage is read, and leaves too little headroom for the job."""
    aws = live_env["aws"]
    aws.metric_value = 1536.0 - JOB_VCPUS + 8  # default limit 1536 vCPUs: 8 short
    aws.metric_status.update({r: "Complete" for r in AWS_REGIONS})
    code, doc, _ = plan(live_env)
    aws_cands = cands(doc, cloud="aws")
    assert aws_cands and all(c["feasible"] is False for c in aws_cands)
    assert sources(doc)[("aws", "cloudwatch", "")]["status"] == "ok"
    assert_never_wrong(doc)


@pytest.mark.parametrize("status", ["InternalError", "Forbidden", "PartialData", "missing"])
def test_cloudwatch_result_not_complete_leaves_quota_unknown(live_env: dict[str, Any], status: str) -> None:
    aws = live_env["aws"]
    aws.metric_value = 1536.0 - JOB_VCPUS + 8
    aws.metric_status.update({r: status for r in AWS_REGIONS})
    code, doc, _ = plan(live_env)
    rows = sources(doc)
    for region in AWS_REGIONS:
        row = rows[("aws", "cloudwatch", region)]
        assert row["status"] == "partial"
        assert ("no result" if status == "missing" else status) in row["detail"] and "unknown" in row["detail"]
    aws_cands = cands(doc, cloud="aws")
    # Never 0 usage with full headroom: every AWS quota the job draws on is unknown.
    assert aws_cands and all(c["quota"]["headroom"] is None and c["feasible"] is not True for c in aws_cands)
    assert doc["chosen"]["cloud"] == "gcp" and doc["chosen"]["feasible"] is True
    assert_never_wrong(doc)


def _zone_names(env: dict[str, Any], region: str) -> dict[str, str]:
    import boto3

    ec2 = boto3.Session(aws_access_key_id="testing", aws_secret_access_key="testing").client(
        "ec2", region_name=region, endpoint_url=env["aws"].url)
    return {z["ZoneId"]: z["ZoneName"] for z in ec2.describe_availability_zones()["AvailabilityZones"]}


@pytest.mark.parametrize("bad_price", ["-3.0", "0", "NaN", "Infinity", "1e999", "99999999"])
def test_bad_live_spot_prices_are_refused_per_row(live_env: dict[str, Any], bad_price: str) -> None:
    good_id, bad_id = live_env["zones"]["us-east-1"][:2]
    names = _zone_names(live_env, "us-east-1")
    live_env["aws"].spot_rows["us-east-1"] = [("p5.48xlarge", names[good_id], "12.5"),
                                              ("p5.48xlarge", names[bad_id], bad_price)]
    code, doc, _ = plan(live_env)
    row = sources(doc)[("aws", "ec2:spot-prices", "us-east-1")]
    assert row["status"] == "partial" and "refused 1 spot prices" in row["detail"]
    good = cands(doc, zone=good_id, capacity="spot")
    bad = cands(doc, zone=bad_id, capacity="spot")
    assert good and all(c["price_source"] == "aws-spot" for c in good)
    assert good[0]["usd_per_hour"] == pytest.approx(2 * 12.5)
    # The refused zone keeps the catalog's spot price (40 USD/node-hour): never a negative or infinite one.
    assert bad and all(c["price_source"] == "catalog" and c["usd_per_hour"] == pytest.approx(80.0) for c in bad)
    assert_never_wrong(doc)


@pytest.mark.parametrize("limit", [float("nan"), float("inf"), 1e12])  # (Stubber itself refuses negatives)
def test_bad_live_aws_quota_limit_is_refused(live_env: dict[str, Any], limit: float) -> None:
    live_env["stubs"].limits[("us-east-1", "L-417A185B")] = limit
    code, doc, _ = plan(live_env)
    row = sources(doc)[("aws", "service-quotas", "us-east-1")]
    assert row["status"] == "error" and "refused limit" in row["detail"]
    od = cands(doc, cloud="aws", region="us-east-1", capacity="on-demand")
    assert od and all(c["quota"]["headroom"] is None for c in od)
    assert_never_wrong(doc)


def test_bad_live_gcp_quota_values_are_refused(live_env: dict[str, Any]) -> None:
    gcp = live_env["gcp"]
    saved = dict(gcp.quotas["us-central1"])
    gcp.quotas["us-central1"]["NVIDIA_H100_GPUS"] = (-64.0, 0.0)
    gcp.quotas["us-central1"]["PREEMPTIBLE_NVIDIA_H100_GPUS"] = (64.0, 1e300)
    try:
        code, doc, _ = plan(live_env)
    finally:
        gcp.quotas["us-central1"] = saved
    row = sources(doc)[("gcp", "compute:regions", "us-central1")]
    assert row["status"] == "partial" and "refused 2 quota values" in row["detail"]
    h100 = cands(doc, cloud="gcp", region="us-central1", instance_type="a3-highgpu-8g")
    assert h100 and all(c["quota"]["headroom"] is None for c in h100)
    mega = cands(doc, cloud="gcp", region="us-central1", instance_type="a3-megagpu-8g")
    assert mega and all(c["quota"]["headroom"] is not None for c in mega)  # the other metrics are kept
    assert_never_wrong(doc)


@pytest.mark.parametrize("fault", ["html", "truncated"])
def test_unparseable_200_answer_is_a_failed_source_not_an_empty_one(live_env: dict[str, Any], fault: str) -> None:
    live_env["aws"].faults["us-west-2"] = fault
    live_env["gcp"].faults["acceleratorTypes"] = fault
    code, doc, _ = plan(live_env)
    rows = sources(doc)
    assert rows[("aws", "ec2:offerings", "us-west-2")]["status"] == "error"
    assert rows[("gcp", "compute:acceleratorTypes", "")]["status"] == "error"
    # The catalog's zones stay (an empty answer would have deleted them all).
    assert cands(doc, cloud="aws", region="us-west-2")
    assert cands(doc, cloud="gcp", zone="asia-southeast1-c")  # the fake no longer offers H100 there
    assert_never_wrong(doc)


def test_one_trickling_region_costs_only_itself(live_env: dict[str, Any]) -> None:
    live_env["aws"].faults["us-west-2"] = "trickle"
    live_env["gcp"].faults["europe-west4"] = "trickle"
    t0 = time.monotonic()
    code, doc, _ = plan(live_env, "--timeout", "0.5")
    elapsed = time.monotonic() - t0
    rows = sources(doc)
    assert rows[("aws", "ec2:offerings", "us-west-2")]["status"] == "timeout"
    assert "us-west-2" in rows[("aws", "ec2:offerings", "us-west-2")]["detail"]
    assert rows[("gcp", "compute:regions", "europe-west4")]["status"] == "timeout"
    # The other regions answered and are used.
    ok = {k for k, s in rows.items() if s["status"] == "ok"}
    assert ("aws", "ec2:spot-prices", "") in ok or {("aws", "ec2:spot-prices", "us-east-1"),
                                                    ("aws", "ec2:spot-prices", "eu-west-1")} <= ok
    assert all(c["price_source"] != "catalog" for c in cands(doc, cloud="aws", region="us-east-1", capacity="spot"))
    assert all(c["quota"]["headroom"] is not None for c in cands(doc, cloud="gcp", region="us-central1"))
    assert elapsed < 3 * 0.5 + 10 + 5  # the overall deadline, with slack; the trickle lasts 60 s
    assert_never_wrong(doc)


def _cache_files(env: dict[str, Any]) -> list[Path]:
    return sorted((env["tmp"] / "cache" / "live-v1").glob("*.json"))


def test_cache_entries_stamped_in_the_future_are_stale(live_env: dict[str, Any]) -> None:
    aws, gcp = live_env["aws"], live_env["gcp"]
    plan(live_env)
    files = _cache_files(live_env)
    assert files
    for f in files:
        doc = json.loads(f.read_text())
        doc["fetched_at"] = time.time() + 30 * 24 * 3600
        f.write_text(json.dumps(doc))
    aws.reset(), gcp.reset()
    code, doc, _ = plan(live_env)
    assert aws.count() > 0 and gcp.count() > 0
    assert "cached" not in {s["status"] for s in doc["sources"]}
    assert all(json.loads(f.read_text())["fetched_at"] <= time.time() for f in _cache_files(live_env))


# Data of a shape no call returns (a valid mapping of plausible values cannot be told from an answer).
@pytest.mark.parametrize("garbage", ["not a mapping", 12, [[1, 2]], {"a": {"b": "c"}}, None])
def test_cache_file_with_right_key_and_corrupted_data_is_a_miss(live_env: dict[str, Any], garbage: Any) -> None:
    aws, gcp = live_env["aws"], live_env["gcp"]
    plan(live_env)
    before = {f: json.loads(f.read_text()) for f in _cache_files(live_env)}
    for f, doc in before.items():
        f.write_text(json.dumps({**doc, "data": garbage}))
    aws.reset(), gcp.reset()
    code, doc, err = plan(live_env)
    assert "Traceback" not in err and doc["chosen"] is not None
    assert aws.count() > 0 and gcp.count() > 0
    assert "cached" not in {s["status"] for s in doc["sources"]}
    from placement.live.checks import check_answer

    after = {f: json.loads(f.read_text()) for f in _cache_files(live_env)}
    assert set(after) == set(before)
    for entry in after.values():  # rewritten with a real answer
        assert entry["data"] != garbage
        check_answer(json.loads(entry["key"])[2], entry["data"])


def test_answer_checks_refuse_bad_values_and_shapes() -> None:
    from placement.live.checks import BadAnswer, check_answer

    assert check_answer("quota", {"code": "L-1", "limit": 96.0}).data == {"code": "L-1", "limit": 96.0}
    for bad in (-1.0, float("nan"), "1e999", True, None, [1]):
        with pytest.raises(BadAnswer, match="refused limit" if not isinstance(bad, (bool, list, type(None))) else None):
            check_answer("quota", {"code": "L-1", "limit": bad})
    usage = check_answer("usage", {"usage": {"P/OnDemand": 8.0, "P/Spot": -1.0}, "unknown": {"G/Spot": "x"}})
    assert usage.data["usage"] == {"P/OnDemand": 8.0} and set(usage.data["unknown"]) == {"P/Spot", "G/Spot"}
    scores = check_answer("scores", {"a": 9, "b": 11, "c": 2.5, "d": 0})
    assert scores.data == {"a": 9} and "refused 3" in scores.notes[0]
    res = check_answer("reservations", [{"id": "r1", "instance_type": "p5.48xlarge", "count": -2, "kind": "odcr"},
                                        {"id": "r2", "instance_type": "p5.48xlarge", "count": 3, "kind": "odcr"}])
    assert [r["id"] for r in res.data] == ["r2"] and res.notes
    skus = check_answer("skus", {"gpu": {"nvidia-h100-80gb": {"r": [-1.0, 2.0]}}, "core": {}, "ram": {}})
    assert skus.data["gpu"]["nvidia-h100-80gb"]["r"] == [None, 2.0] and skus.notes
    for op, data in (("offerings", ["x"]), ("spot_prices", {"a": 1}), ("region_quotas", {"M": 5}),
                     ("usage", {"P": 1.0}), ("zones", {"a": 1})):
        with pytest.raises(BadAnswer):
            check_answer(op, data)


@pytest.mark.parametrize("slow", ["aws", "gcp"])
def test_no_thread_outlives_the_command_against_a_slow_loris(live_env: dict[str, Any], slow: str) -> None:
    """A fresh process (AWS in its forked worker, GCP on the parent's threads) with one region trickling
    bytes for a minute: the JSON is printed and the process exits at the deadline, keeping what answered."""
    import os
    import subprocess
    import sys

    aws, gcp = live_env["aws"], live_env["gcp"]
    if slow == "aws":
        aws.faults["us-west-2"] = "trickle"
    else:
        gcp.faults["europe-west4"] = "trickle"
    env = {**os.environ, "AWS_ENDPOINT_URL": aws.url}
    timeout_s = 0.5
    argv = [sys.executable, "-m", "placement", "plan", live_env["job"], "--live", "--json", "--all-candidates",
            "--timeout", str(timeout_s), *live_env["args"]]
    t0 = time.monotonic()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    doc = _strict(proc.stdout)
    # Bound: the overall live deadline (3 x timeout + 10 s) plus start-up, far below the minute of trickle.
    assert elapsed < 3 * timeout_s + 10 + 10, elapsed
    rows = sources(doc)
    slow_key = ("aws", "ec2:offerings", "us-west-2") if slow == "aws" else ("gcp", "compute:regions", "europe-west4")
    assert rows[slow_key]["status"] == "timeout"
    # What answered is kept: live spot prices in us-east-1, live quota in GCP's us-central1.
    assert all(c["price_source"] != "catalog" for c in cands(doc, cloud="aws", region="us-east-1", capacity="spot"))
    assert all(c["quota"]["headroom"] is not None for c in cands(doc, cloud="gcp", region="us-central1"))
    assert_never_wrong(doc)


GCP_REGIONS = ("us-central1", "europe-west4", "asia-southeast1")


@pytest.mark.parametrize("fault", ["403", "429", "500", "html", "truncated"])
@pytest.mark.parametrize("where", ["aws", "gcp", "both"])
def test_fault_matrix_never_chooses_infeasible_or_unknown_as_available(live_env: dict[str, Any], fault: str,
                                                                       where: str) -> None:
    """Every AWS region's usage is too high for the job when known; under each fault, in each cloud's
    regions, no AWS candidate is ever known-feasible and the chosen one is never quota-infeasible."""
    aws, gcp, stubs = live_env["aws"], live_env["gcp"], live_env["stubs"]
    aws.metric_value = 1536.0 - JOB_VCPUS + 8
    aws.metric_status.update({r: "Complete" for r in AWS_REGIONS})
    if where in ("aws", "both"):
        aws.faults["us-west-2"] = fault  # its EC2 and CloudWatch answers (the fault comes first)
        if fault in ("403", "429", "500"):
            stubs.faults["us-west-2"] = fault  # and Service Quotas
    if where in ("gcp", "both"):
        gcp.faults.update({r: fault for r in GCP_REGIONS[:2]})
    code, doc, err = plan(live_env, "--timeout", "0.5")
    assert "Traceback" not in err
    assert all(c["feasible"] is not True for c in cands(doc, cloud="aws"))
    if where in ("gcp", "both"):
        for region in GCP_REGIONS[:2]:
            assert all(c["quota"]["headroom"] is None for c in cands(doc, cloud="gcp", region=region))
    assert_never_wrong(doc)
