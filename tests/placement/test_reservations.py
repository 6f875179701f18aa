"""The --reservations file: parsing, validation, identities and end times."""

from __future__ import annotations

import datetime as dt

import pytest

from placement.errors import InputError
from placement.reservations import parse_reservations_csv, parse_time

HEAD = "cloud,region,zone,instance_type,count,usd_per_hour,ends"


def test_rows_become_reservations_with_ids_and_utc_end_times():
    text = (f"{HEAD},id\n"
            "aws,us-east-1,use1-az4,p5.48xlarge,2,0,2026-12-01T00:00:00Z,cr-0abc\n"
            "gcp,us-central1,us-central1-a,a3-megagpu-8g,4,12.5,2026-12-01T09:00:00+09:00,\n"
            "aws,us-west-2,us-west-2b,p4d.24xlarge,1,3,\n")
    a, b, c = parse_reservations_csv(text, "dir/res.csv")
    assert (a.id, a.shape.name, a.count, a.usd_per_hour, a.quota_key) == ("cr-0abc", "p5.48xlarge", 2, 0.0,
                                                                           "reservation:cr-0abc")
    assert a.ends == dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    assert b.id == "res.csv:2" and b.ends == dt.datetime(2026, 12, 1, tzinfo=dt.UTC)  # 09:00+09:00 is midnight UTC
    assert c.ends is None and c.hours_left(dt.datetime(2026, 1, 1, tzinfo=dt.UTC)) is None
    assert a.hours_left(dt.datetime(2026, 11, 30, 12, tzinfo=dt.UTC)) == 12


def test_duplicate_ids_and_shapes_of_the_other_cloud_are_rejected():
    with pytest.raises(InputError, match="duplicate reservation id 'x'") as err:
        parse_reservations_csv(f"{HEAD},id\naws,us-east-1,use1-az4,p5.48xlarge,1,0,,x\n"
                               "aws,us-east-1,use1-az6,p5.48xlarge,1,0,,x\n", "r.csv")
    assert err.value.field == "id (row 2)"
    with pytest.raises(InputError) as err:
        parse_reservations_csv(f"{HEAD}\ngcp,us-east-1,use1-az4,p5.48xlarge,1,0,\n", "r.csv")
    assert err.value.field == "instance_type (row 1)"


@pytest.mark.parametrize(("text", "want"), [
    ("2026-12-01", dt.datetime(2026, 12, 1, tzinfo=dt.UTC)),
    ("2026-12-01T06:00:00", dt.datetime(2026, 12, 1, 6, tzinfo=dt.UTC)),
    ("2026-12-01T06:00:00Z", dt.datetime(2026, 12, 1, 6, tzinfo=dt.UTC)),
    ("2026-12-01T07:00:00+01:00", dt.datetime(2026, 12, 1, 6, tzinfo=dt.UTC)),
])
def test_times_are_iso_8601_and_default_to_utc(text, want):
    assert parse_time(text, "ends", "r.csv") == want


@pytest.mark.parametrize("column, value", [("count", "0.5"), ("count", "inf"), ("count", "-2"),
                                           ("usd_per_hour", "nan"), ("usd_per_hour", "1e999")])
def test_reservation_numbers_are_finite_counts_positive(column, value):
    from placement.reservations import parse_reservations_csv

    row = {"cloud": "aws", "region": "us-east-1", "zone": "use1-az4", "instance_type": "p5.48xlarge", "count": "2",
           "usd_per_hour": "0", "ends": ""}
    row[column] = value
    text = ",".join(row) + "\n" + ",".join(row.values()) + "\n"
    with pytest.raises(InputError, match=f"^r.csv: {column} \\(row 1\\)"):
        parse_reservations_csv(text, "r.csv")
