"""Catalog trust: a spot price at or above on-demand is flagged on the rows shown, and a catalog the user wrote
over a week old, or the embedded one over a month old, is said with its age once per command (on stderr, so
scripts reading stdout are unaffected)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from factories import job, offer

from placement.commands.main import main
from placement.commands.render import plan_doc, plan_text
from placement.model.catalog import Catalog, CatalogOrigin, with_origins
from placement.model.quotas import QuotaTable
from placement.model.trust import SPOT_NOT_CHEAPER, age_days, spot_not_cheaper, stale_lines
from placement.plan.job import plan

JOB = str(Path(__file__).resolve().parents[3] / "placement" / "examples" / "job.yaml")
NOW = dt.datetime(2026, 11, 20, tzinfo=dt.UTC)


def test_spot_at_or_above_on_demand_is_flagged_on_spot_rows_only():
    assert spot_not_cheaper(offer("p5.48xlarge", "us-east-1", price=50, spot=50))
    assert spot_not_cheaper(offer("p5.48xlarge", "us-east-1", price=50, spot=60))
    assert not spot_not_cheaper(offer("p5.48xlarge", "us-east-1", price=50, spot=49.99))
    assert not spot_not_cheaper(offer("p5.48xlarge", "us-east-1", price=None, spot=50))
    offers = [offer("p5.48xlarge", "us-east-1", "use1-az4", price=50, spot=50)]
    catalog = Catalog(offers=tuple(offers), source="test", as_of="2026-11-01")
    p = plan(job(), catalog.offers, QuotaTable({}))
    doc = plan_doc(p, catalog, top=5, all_candidates=False)
    flagged = {c["capacity"]: c.get("spot_not_cheaper", False) for c in doc["candidates"]}
    assert flagged == {"spot": True, "on-demand": False}
    assert [SPOT_NOT_CHEAPER in c["notes"] for c in doc["candidates"]] == [c["capacity"] == "spot"
                                                                            for c in doc["candidates"]]
    assert SPOT_NOT_CHEAPER in plan_text(p, catalog, top=5, all_candidates=False)


def test_a_catalog_over_a_week_old_says_how_old_and_a_fresh_one_says_nothing():
    origin = CatalogOrigin(cloud="aws", source="refresh", path="c.json", as_of="2026-11-01")
    assert round(age_days(origin, NOW)) == 19
    catalog = with_origins((offer("p5.48xlarge", "us-east-1"),), (origin,))
    (line,) = stale_lines(catalog, NOW)
    assert "aws refresh (c.json) as of 2026-11-01 (19 days old, over a week)" in line
    assert stale_lines(catalog, dt.datetime(2026, 11, 5, tzinfo=dt.UTC)) == []


def test_the_embedded_catalog_is_said_old_after_a_month_not_a_week():
    origin = CatalogOrigin(cloud="aws", source="embedded", as_of="2026-11-01")
    catalog = with_origins((offer("p5.48xlarge", "us-east-1"),), (origin,))
    assert stale_lines(catalog, dt.datetime(2026, 11, 29, tzinfo=dt.UTC)) == []  # 28 days: the new user
    (line,) = stale_lines(catalog, dt.datetime(2026, 12, 5, tzinfo=dt.UTC))
    assert "aws embedded as of 2026-11-01 (34 days old, over a month)" in line
    live = with_origins((offer("p5.48xlarge", "us-east-1"),), (CatalogOrigin("aws", "embedded", as_of="2026-11-01",
                                                                             live=True),))
    assert stale_lines(live, NOW) == []  # live answers laid over it


def test_plan_warns_once_on_stderr_and_json_marks_stale_clouds(capsys):
    assert main(["plan", JOB, "--json", "--now", "2026-12-15"]) == 0
    out, err = capsys.readouterr()
    # Once, on one line (the plan's other warnings, e.g. a spot price far below its shape's median, are their own).
    assert err.count("prices and offerings may have moved") == 1  # one line, naming both clouds
    assert [line for line in err.splitlines() if "over a month" in line] == [err.splitlines()[0]]
    assert all(c["stale"] for c in json.loads(out)["catalog"]["clouds"].values())
    assert main(["plan", JOB, "--json", "--now", "2026-11-29"]) == 0
    out, err = capsys.readouterr()
    assert "days old" not in err and not any(c["stale"] for c in json.loads(out)["catalog"]["clouds"].values())


def test_offers_flag_a_spot_price_at_or_above_on_demand():
    from placement.commands.render import offer_doc, offers_text

    same, cheap = offer("p5.48xlarge", "us-east-1", price=50, spot=50), offer("p5.48xlarge", "us-west-2", price=50)
    assert offer_doc(same)["spot_not_cheaper"] is True and "spot_not_cheaper" not in offer_doc(cheap)
    assert "(1 of these offers have a spot price at or above on-demand" in offers_text([same, cheap])
    assert "at or above" not in offers_text([cheap])
