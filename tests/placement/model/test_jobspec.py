"""Job spec validation: numbers, names, misspelled and non-string keys, batch files."""

from __future__ import annotations

import pytest

from placement.errors import InputError
from placement.model.jobspec import parse_batch, parse_job

JOB = {"name": "t", "accelerator": "H100", "gpus": 8, "hours": 10}


def bad(**changes):
    doc = {**JOB, **changes}
    with pytest.raises(InputError) as err:
        parse_job(doc)
    return str(err.value)


@pytest.mark.parametrize("field, value", [
    ("gpus", True), ("gpus", 0), ("gpus", -8), ("gpus", 0.5), ("gpus", float("inf")), ("gpus", 10**400),
    ("gpus", "8"), ("hours", float("nan")), ("hours", float("inf")), ("hours", 1e308),
    ("max_usd_per_hour", float("inf")), ("deadline_hours", float("nan")),
])
def test_numbers_are_finite_bounded_and_not_booleans(field, value):
    assert bad(**{field: value}).startswith(field + ":")


def test_nested_numbers_too():
    assert "spot.interruptions_per_hour" in bad(spot={"interruptions_per_hour": float("inf")})
    assert "data.dataset.size_gb" in bad(data={"dataset": {"uri": "s3://b/d", "region": "us-east-1",
                                                           "size_gb": 1e999}})


@pytest.mark.parametrize("name, needle", [
    ("train\n", "'\\n'"), ("my_job", "'_'"), ("Train", "'T'"), ("x" * 64, "at most 63"),
])
def test_names_get_the_real_reason(name, needle):
    message = bad(name=name)
    assert needle in message and "is required" not in message


def test_a_job_that_must_be_a_jobset_gets_the_jobset_name_rules():
    # 16 H100 need two 8-GPU nodes: a JobSet, whose pod names must start with a letter and fit in 63
    assert "starts with a digit" in bad(name="1run", gpus=16)
    assert parse_job({**JOB, "name": "1run"}).name == "1run"  # one node: a Job, where a digit is fine
    assert "at most 48" in bad(name="j" * 49, gpus=16)
    assert parse_job({**JOB, "name": "j" * 48, "gpus": 16}).gpus == 16


@pytest.mark.parametrize("key, hint", [("gpu", "'gpus'"), ("accelerators", "'accelerator'"), ("hour", "'hours'")])
def test_misspelled_keys_get_did_you_mean(key, hint):
    doc = {k: v for k, v in JOB.items() if k != key.rstrip("s") + ("s" if key == "gpu" else "")}
    doc[key] = 1
    with pytest.raises(InputError, match=f"did you mean {hint}"):
        parse_job(doc)


def test_misspelled_nested_key_gets_did_you_mean():
    with pytest.raises(InputError, match="spot.restart_minute: is not a known field; did you mean 'restart_minutes'"):
        parse_job({**JOB, "spot": {"restart_minute": 5}})


@pytest.mark.parametrize("doc", [{**JOB, 1: "x"}, {**JOB, "spot": {None: 1}}, {**JOB, ("a", "b"): 1}])
def test_non_string_keys_are_refused_not_a_type_error(doc):
    with pytest.raises(InputError, match="keys must be field names"):
        parse_job(doc)


def test_batch_file_unknown_top_level_key_is_refused():
    with pytest.raises(InputError, match="job: is not a known field; did you mean 'jobs'"):
        parse_batch({"jobs": [JOB], "job": [JOB]})


@pytest.mark.parametrize("extra", [
    {"regions": {"allow": ["a\nb"]}}, {"clouds": {"allow": ["a\nb"]}}, {"accelerator": "x\ny"},
    {"data": {"dataset": {"uri": "s3://x", "region": "a\nb", "size_gb": 1}}}, {"speed": {"x\ny": 1}},
    {"data": {"throughput_gbps": {"x\ny": 1}}}, {"capacity": "x\ny"}, {"name": "x\n" * 1000},
    {"data": {"throughput_gbps": {1: 2, "a": 3}}},
])
def test_errors_are_one_short_line_whatever_the_value(extra):
    message = bad(**extra)
    assert "\n" not in message and len(message) < 300


def test_warnings_are_one_line():
    job = parse_job({**JOB, "regions": {"allow": ["us-east-1"], "deny": ["x\ny"]}})
    assert job.warnings and all("\n" not in w for w in job.warnings)


@pytest.mark.parametrize("clouds", [{"allow": ["aws"], "deny": ["aws"]}, {"deny": ["aws", "gcp"]},
                                    {"allow": ["aws", "gcp"], "deny": ["gcp", "aws"]}])
def test_clouds_allow_and_deny_that_cancel_out_are_one_error_naming_the_field(clouds):
    with pytest.raises(InputError) as err:
        parse_job({**JOB, "clouds": clouds})
    assert str(err.value).startswith("clouds.deny: denies every cloud") and "\n" not in str(err.value)


def test_an_unknown_zone_in_zones_allow_is_named():
    with pytest.raises(InputError, match=r"^zones.allow: names no zone of a known region \(us-east-9z\)"):
        parse_job({**JOB, "zones": {"allow": ["us-east-9z"]}})
    spec = parse_job({**JOB, "zones": {"allow": ["use1-az4", "us-central1-a", "nowhere-1"]}})
    assert spec.allow_zones == ("use1-az4", "us-central1-a", "nowhere-1")
    assert any(w.startswith("zones.allow: nowhere-1 is not a zone of a known region") for w in spec.warnings)
