"""Property test (hypothesis) of the CLI over hostile job specs, quota files, catalog rows and reservations.

Whatever the input: the exit code is 0, 1 or 2; there is no traceback; a refusal is one line; ``--json``
stdout is strict JSON (no NaN/Infinity); every chosen candidate has a finite, non-negative cost and quota
that is known to fit or unknown (``feasible`` true or null), never false. Run in-process (``main`` with
capsys) to stay fast; ``scripts/fuzz_inputs`` runs it with more examples and prints the count and time.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from placement.commands.main import main

EXAMPLES = int(os.environ.get("PLACEMENT_FUZZ_EXAMPLES", "2500"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large])

# Numbers as a hostile user (or a corrupted export) writes them.
EDGE_NUMBERS = st.sampled_from([0, 1, -1, 8, 16, 0.5, -8, 1e308, 10**400, float("inf"), float("-inf"), float("nan"),
                                True, False, None, "8", "", "1e999", "Infinity", ".inf", [], {}])
NUMBERS = st.one_of(EDGE_NUMBERS, st.integers(-10, 10**6), st.floats(allow_nan=True, allow_infinity=True))
TEXT = st.one_of(st.sampled_from(["H100", "h100", "A100", "L4", "B200", "tpu", "", "a_b", "ok-name", "x\n",
                                  "1abc", "a" * 70, "us-east-1", "us-central1", "aws", "gcp", "azure"]),
                 st.text(max_size=12))
ANY = st.one_of(NUMBERS, TEXT, st.lists(TEXT, max_size=3))
# Mostly sensible values, so most examples get past validation and exercise the engine and the renderer.
SENSIBLE = st.one_of(st.integers(0, 5000), st.floats(0, 5000), st.integers(1, 64))
MOSTLY = st.one_of(SENSIBLE, SENSIBLE, SENSIBLE, NUMBERS)

FIELDS = ["name", "accelerator", "gpus", "hours", "capacity", "checkpoint", "spot", "clouds", "regions", "zones",
          "max_usd_per_hour", "priority", "team", "gpus_per_node", "speed", "deadline_hours",
          "usd_per_hour_of_delay", "gpu", "data"]


@st.composite
def job_specs(draw: Any) -> dict[str, Any]:
    """Mostly near-valid jobs (so the engine runs), with hostile values and keys mixed in."""
    job: dict[str, Any] = {"name": draw(st.sampled_from(["train", "t1", "a-b"])),
                           "accelerator": draw(st.sampled_from(["H100", ["A100", "H100"], "L4", "a100", "H200"])),
                           "gpus": draw(st.sampled_from([1, 4, 8, 16, 24, 64])),
                           "hours": draw(st.sampled_from([1, 10.5]))}
    extra = draw(st.one_of(st.just([]), st.lists(st.sampled_from(FIELDS), max_size=3, unique=True)))
    for key in extra:
        if key in ("checkpoint", "spot"):
            sub = "interval_minutes" if key == "checkpoint" else draw(st.sampled_from(
                ["interruptions_per_hour", "restart_minutes"]))
            job[key] = {sub: draw(MOSTLY)}
        elif key == "clouds":
            job[key] = {draw(st.sampled_from(["allow", "deny"])): draw(st.sampled_from(["aws", "gcp", ["gcp"], "x"]))}
        elif key == "data":
            job[key] = {"dataset": {"uri": draw(st.sampled_from(["s3://b/d", "gs://b/d"])), "size_gb": draw(MOSTLY),
                                    "region": draw(st.sampled_from(["us-east-1", "us-central1"]))}}
        elif key == "speed":
            job[key] = {draw(st.sampled_from(["A100", "H100", "Z9"])): draw(MOSTLY)}
        elif key in ("max_usd_per_hour", "deadline_hours", "usd_per_hour_of_delay", "gpus", "hours",
                     "gpus_per_node"):
            job[key] = draw(MOSTLY)
        else:
            job[key] = draw(ANY)
    return job


QUOTA_KEYS = ["L-417A185B", "L-7212CCBC", "L-DB2E81BA", "NVIDIA_H100_GPUS", "PREEMPTIBLE_NVIDIA_H100_GPUS",
              "NVIDIA_A100_GPUS", "bogus"]
REGIONS = ["us-east-1", "us-west-2", "us-central1", "europe-west4", "mars-1"]


def cell(value: Any) -> str:
    return str(value).replace(",", ";").replace("\n", " ")


@st.composite
def quota_csvs(draw: Any) -> str:
    rows = ["cloud,region,quota,limit,usage"]
    for _ in range(draw(st.integers(0, 3))):
        cloud = draw(st.sampled_from(["aws", "aws", "gcp", "gcp", "AWS", "x"]))
        rows.append(",".join(cell(v) for v in (cloud, draw(st.sampled_from(REGIONS)), draw(st.sampled_from(QUOTA_KEYS)),
                                               draw(MOSTLY), draw(st.one_of(st.just(0), MOSTLY)))))
    return "\n".join(rows) + "\n"


CATALOG_HEAD = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,AvailabilityZone"
ITYPES = [("p5.48xlarge", "H100"), ("p4d.24xlarge", "A100"), ("g6.xlarge", "L4"), ("g9.4xlarge", "H100"),
          ("a3-highgpu-8g", "H100")]
ZONES = {"us-east-1": ["use1-az4", "us-east-1a", "use2-az1", ""], "us-west-2": ["usw2-az1", "us-west-2b"],
         "us-central1": ["us-central1-a"], "europe-west4": ["europe-west4-b"], "mars-1": ["mars-1a"]}


@st.composite
def catalog_csvs(draw: Any) -> str:
    rows = [CATALOG_HEAD]
    for _ in range(draw(st.integers(1, 3))):
        itype, accel = draw(st.sampled_from(ITYPES))
        region = draw(st.sampled_from(REGIONS[:2] * 3 + REGIONS))
        count = draw(st.one_of(st.just(8), st.just(8), NUMBERS))
        prices = [draw(st.one_of(st.sampled_from(["", "12.5", "0", "40"]), MOSTLY)) for _ in range(2)]
        vcpus = draw(st.sampled_from([192, 192, 96, 4, 0]))
        zone = draw(st.sampled_from(ZONES[region][:1] * 3 + ZONES[region]))
        rows.append(",".join(cell(v) for v in (itype, accel, count, vcpus, 2048, *prices, region, zone)))
    return "\n".join(rows) + "\n"


@st.composite
def reservation_csvs(draw: Any) -> str:
    rows = ["cloud,region,zone,instance_type,count,usd_per_hour,ends"]
    for _ in range(draw(st.integers(1, 2))):
        region = draw(st.sampled_from(["us-east-1", "us-central1"]))
        itype = "p5.48xlarge" if region == "us-east-1" else draw(st.sampled_from(["a3-highgpu-8g", "p5.48xlarge"]))
        zone = draw(st.sampled_from(ZONES[region][:1] * 2 + ["us-west-2b"]))
        ends = draw(st.sampled_from(["", "2026-12-01", "2020-01-01T00:00:00Z", "x", "9999-12-31T23:59:59-23:59"]))
        rows.append(",".join(cell(v) for v in ("aws" if region == "us-east-1" else "gcp", region, zone, itype,
                                               draw(MOSTLY), draw(MOSTLY), ends)))
    return "\n".join(rows) + "\n"


def _strict_json(text: str) -> Any:
    def refuse(name: str) -> None:
        raise AssertionError(f"--json printed {name}, which is not JSON")

    return json.loads(text, parse_constant=refuse)


def _check_candidate(c: dict[str, Any]) -> None:
    total, per_hour = c["cost"]["total_usd"], c["usd_per_hour"]
    assert isinstance(total, (int, float)) and math.isfinite(total) and total >= 0, c
    assert isinstance(per_hour, (int, float)) and math.isfinite(per_hour) and per_hour >= 0, c
    assert c["feasible"] in (True, None), c


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code = main(argv)
    out, err = capsys.readouterr()
    event(f"exit {code}")
    assert code in (0, 1, 2), (code, err)
    assert "Traceback" not in err and "Traceback" not in out
    if code == 2:
        errors = [ln for ln in err.splitlines() if not ln.startswith("placement: warning: ")]
        assert len(errors) == 1 and errors[0].startswith("placement: error: "), err
        assert len(errors[0]) < 600, errors[0]
        return
    doc = _strict_json(out)
    if doc["kind"] == "plan":
        if doc["chosen"] is not None:
            _check_candidate(doc["chosen"])
        for c in doc["candidates"]:
            assert c["feasible"] is not False or c.get("excluded_reason"), c
    else:
        for j in doc["jobs"]:
            if j["chosen"] is not None:
                _check_candidate(j["chosen"])


def _write(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


@FUZZ
@given(job=job_specs(), quotas=quota_csvs(), catalog=st.one_of(st.none(), st.none(), catalog_csvs()),
       reservations=st.one_of(st.none(), st.none(), st.none(), reservation_csvs()))
def test_plan_never_crashes_and_prints_strict_json(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  job: dict[str, Any], quotas: str, catalog: str | None,
                                                  reservations: str | None) -> None:
    argv = ["plan", _write(tmp_path / "job.yaml", yaml.safe_dump(job, allow_unicode=True)),
            "--quotas", _write(tmp_path / "q.csv", quotas), "--json", "--all-candidates", "--now", "2026-11-23"]
    if catalog is not None:
        argv += ["--catalog", "aws=" + _write(tmp_path / "aws.csv", catalog)]
    if reservations is not None:
        argv += ["--reservations", _write(tmp_path / "r.csv", reservations)]
    _run(capsys, argv)


@settings(FUZZ, max_examples=max(EXAMPLES // 6, 10))
@given(jobs=st.lists(job_specs(), min_size=1, max_size=3), quotas=quota_csvs(), extra=st.sampled_from([{}, {"job": 1}]))
def test_plan_batch_never_crashes_and_prints_strict_json(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        jobs: list[dict[str, Any]], quotas: str,
                                                        extra: dict[str, Any]) -> None:
    for i, j in enumerate(jobs):
        j["name"] = f"{j['name']}-{i}" if isinstance(j.get("name"), str) else j.get("name")
    doc = {"jobs": jobs, **extra}
    _run(capsys, ["plan-batch", _write(tmp_path / "b.yaml", yaml.safe_dump(doc, allow_unicode=True)),
                  "--quotas", _write(tmp_path / "q.csv", quotas), "--json", "--no-greedy", "--time-limit", "5"])


# Arbitrary YAML-shaped data straight into the parsers: they raise InputError or return data, nothing else.
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8), EDGE_NUMBERS)
KEYS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=8))
YAMLISH = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.one_of(st.sampled_from(FIELDS + ["jobs", "interval_minutes", "allow", "dataset", "uri",
                                                        "size_gb", "region", "cloud", "quota", "limit", "usage",
                                                        "zone", "instance_type", "price", "spot_price", "offers",
                                                        "schema", "count", "usd_per_hour", "ends"]), KEYS),
                    inner, max_size=6)), max_leaves=20)


@settings(FUZZ, max_examples=max(EXAMPLES // 4, 50))
@given(doc=YAMLISH, near=job_specs(), key=st.sampled_from(FIELDS), value=YAMLISH)
def test_parsers_raise_input_errors_only(doc: Any, near: dict[str, Any], key: str, value: Any) -> None:
    from placement.errors import InputError
    from placement.model.catalog import parse_catalog_json
    from placement.model.jobspec import parse_batch, parse_job
    from placement.model.quotas import parse_quota_rows
    from placement.model.reservations import parse_reservation_rows

    near[key] = value
    calls = [lambda: parse_job(doc), lambda: parse_job(near), lambda: parse_batch({"jobs": [near, doc]}),
             lambda: parse_batch(doc), lambda: parse_quota_rows(doc if isinstance(doc, list) else [doc], "q"),
             lambda: parse_reservation_rows(doc if isinstance(doc, list) else [doc], "r"),
             lambda: parse_catalog_json({"schema": "gpufleet.catalog/v1", "offers": doc}, "c")]
    for call in calls:
        try:
            result = call()
        except InputError as exc:
            assert "\n" not in str(exc), str(exc)  # one line, whatever the value quoted
            assert len(str(exc)) < 1000, str(exc)[:200]
            continue
        results = result if isinstance(result, tuple) else (result,)
        for warning in (w for r in results for w in getattr(r, "warnings", ())):
            assert "\n" not in warning and len(warning) < 1000, warning[:200]
