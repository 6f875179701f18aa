"""The --reservations file: parsing, validation, identities and end times."""

from __future__ import annotations

import datetime as dt

import pytest

from placement.errors import InputError
from placement.model.reservations import parse_reservations_csv, parse_time

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
    from placement.model.reservations import parse_reservations_csv

    row = {"cloud": "aws", "region": "us-east-1", "zone": "use1-az4", "instance_type": "p5.48xlarge", "count": "2",
           "usd_per_hour": "0", "ends": ""}
    row[column] = value
    text = ",".join(row) + "\n" + ",".join(row.values()) + "\n"
    with pytest.raises(InputError, match=f"^r.csv: {column} \\(row 1\\)"):
        parse_reservations_csv(text, "r.csv")


def test_count_is_nodes_and_a_fraction_of_a_node_is_refused_saying_so():
    text = f"{HEAD}\naws,us-east-1,use1-az4,p5.48xlarge,1.5,0,\n"
    with pytest.raises(InputError) as err:
        parse_reservations_csv(text, "r.csv")
    message = str(err.value)
    assert message.startswith("r.csv: count (row 1): must be a whole number of free p5.48xlarge nodes (8 GPUs each")
    assert "divide by 8" in message and "\n" not in message


def test_a_reservation_in_scope_that_the_plan_does_not_use_says_why():
    from factories import job, offer, reservation

    from placement.plan.job import plan
    from placement.plan.reservation_use import unused

    now = dt.datetime(2026, 11, 20, tzinfo=dt.UTC)
    res = [reservation(count=1, rid="small"), reservation(rid="soon", ends=now + dt.timedelta(hours=5)),
           reservation("p4d.24xlarge", rid="a100"), reservation(rid="dear", usd_per_hour=500),
           reservation(rid="used"), reservation(region="us-west-2", zone="usw2-az1", rid="elsewhere")]
    j = job(gpus=16, regions={"allow": ["us-east-1"]})
    p = plan(j, [offer("p5.48xlarge", "us-east-1", "use1-az1", price=98, spot=60)], reservations=res, now=now)
    assert p.chosen.reservation.id == "used"
    got = {u.reservation.id: (u.kind, u.reason) for u in unused(p, res)}
    assert set(got) == {"small", "soon", "a100", "dear"}  # "elsewhere" is outside regions.allow, "used" is used
    assert got["small"] == ("too-small", "too small: needs 2 nodes, 1 free")
    assert got["soon"][0] == "ends-too-early" and got["soon"][1].startswith("ends too early: ends 2026-11-20 05:00Z")
    assert got["a100"] == ("wrong-shape", "wrong shape: p4d.24xlarge has A100, the job takes H100")
    assert got["dear"][0] == "cheaper"
    assert unused(plan(job(gpus=16, capacity="spot"), [], reservations=res, now=now), res) == []


def test_plan_text_and_json_name_the_unused_reservations():
    from factories import job, offer, reservation

    from placement.commands.render import plan_doc, plan_text
    from placement.model.catalog import Catalog
    from placement.plan.job import plan

    res = [reservation(count=1, rid="small")]
    offers = (offer("p5.48xlarge", "us-east-1", "use1-az1", price=98, spot=60),)
    p = plan(job(gpus=16), offers, reservations=res)
    catalog = Catalog(offers=offers, source="test", as_of="2026-11-01")
    text = plan_text(p, catalog, top=3, all_candidates=False, reservations=res)
    assert "reservation small (p5.48xlarge x1 in use1-az1) not used: too small: needs 2 nodes, 1 free" in text
    doc = plan_doc(p, catalog, top=3, all_candidates=False, reservations=res)
    assert [(u["id"], u["kind"]) for u in doc["reservations_unused"]] == [("small", "too-small")]
    assert plan_doc(p, catalog, top=3, all_candidates=False)["reservations_unused"] == []
