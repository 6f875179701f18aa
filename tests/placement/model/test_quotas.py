"""Quota files: finite numbers, no booleans, one row per quota."""

from __future__ import annotations

import pytest

from placement.errors import InputError
from placement.model.quotas import parse_quota_csv, parse_quota_rows

HEAD = "cloud,region,quota,limit,usage\n"


@pytest.mark.parametrize("limit", ["inf", "Infinity", "1e999", "nan", "-1"])
def test_limits_are_finite_and_not_negative(limit):
    with pytest.raises(InputError, match=r"^q.csv: limit \(row 1\): must be"):
        parse_quota_csv(HEAD + f"aws,us-east-1,L-417A185B,{limit},0\n", "q.csv")


@pytest.mark.parametrize("value", [True, float("inf"), float("nan"), 10**400])
def test_yaml_limit_true_is_not_one(value):
    with pytest.raises(InputError, match=r"limit \(row 1\)"):
        parse_quota_rows([{"cloud": "aws", "region": "us-east-1", "quota": "L-417A185B", "limit": value,
                           "usage": 0}], "q.yaml")


def test_a_quota_twice_with_different_values_is_refused_and_with_the_same_warned():
    with pytest.raises(InputError, match=r"quota \(row 2\): L-417A185B in us-east-1 is given twice"):
        parse_quota_csv(HEAD + "aws,us-east-1,L-417A185B,384,0\naws,us-east-1,L-417A185B,3840,0\n", "q.csv")
    table = parse_quota_csv(HEAD + "aws,us-east-1,L-417A185B,384,0\naws,us-east-1,L-417A185B,384,0\n", "q.csv")
    assert len(table.quotas) == 1 and any("given twice with the same values" in w for w in table.warnings)


def test_duplicate_columns_and_non_string_names_are_refused():
    with pytest.raises(InputError, match="'limit': column appears twice"):
        parse_quota_csv("cloud,region,quota,limit,usage,limit\naws,us-east-1,L-417A185B,384,0,9\n", "q.csv")
    with pytest.raises(InputError, match=r"region \(row 1\): must be a name"):
        parse_quota_rows([{"cloud": "aws", "region": ["us-east-1"], "quota": "L-417A185B", "limit": 1,
                           "usage": 0}], "q.yaml")


def test_malformed_quota_csv_is_an_input_error():
    with pytest.raises(InputError, match=r"line 2: is not valid CSV"):
        parse_quota_csv(HEAD + 'aws,us-east-1,"' + "x" * 200_000 + '",1,0\n', "q.csv")


def test_usage_above_the_limit_is_zero_headroom_with_a_warning_not_bad_input():
    # Real after a quota is lowered below what is already running.
    table = parse_quota_csv(HEAD + "aws,us-east-1,L-417A185B,192,384\n", "q.csv")
    assert table.headrooms[("aws", "us-east-1", "L-417A185B")] == 0.0
    (warning,) = table.warnings
    assert warning.startswith("q.csv: usage (row 1): quota L-417A185B in aws us-east-1: usage 384 is above its limit")
    assert "headroom 0" in warning and "\n" not in warning


def test_every_shape_sold_as_spot_has_its_quota_key():
    """Issue 36: a full quota file can confirm every spot candidate (p6-b200 had no AWS spot key); a key read
    from disagreeing sources is marked unverified and the plan notes it."""
    from placement.model.catalog import embedded_catalog

    spot = {o.shape for o in embedded_catalog().offers if o.spot_price is not None}
    assert spot and [s.name for s in spot if s.quota.spot is None] == []
    p6 = next(s for s in spot if s.name == "p6-b200.48xlarge")
    assert p6.quota.spot == "L-C4BD4855" and p6.quota.unverified == frozenset({"spot"})
