"""placement portfolio: the MILP against every commitment choice, the data book and rates, bad input."""

from __future__ import annotations

import itertools
import json
import math

import pytest
import yaml
from factories import offer, quotas

from placement.commands.main import main
from placement.errors import InputError
from placement.model.commitments import Book, Term, commitment_book, with_rates
from placement.plan.portfolio import HOURS_PER_WEEK, DemandClass, Forecast, buys, parse_forecast, pools, solve

NODE_WEEK = 8 * HOURS_PER_WEEK  # GPU-hours of one 8-GPU node for a week


def _book(**overrides):
    term = Term(id="cb", cloud="aws", kind="capacity-block", discount=0.4, accelerators=("H100",),
                durations_weeks=(1, 3), start_within_weeks=2, start_every_weeks=1, lead_weeks=0, max_nodes=2,
                guarantees_capacity=True, uses_quota=False, payment="upfront", source="test", min_gpus_per_node=8)
    term = Term(**{**term.__dict__, **overrides})
    return Book((term,), {"aws": 1}, {"aws": 0.5}, {"aws": 1.0}, {})


def _forecast(demand, interruptible=0.0, within=1):
    return Forecast(len(demand), (DemandClass("c", "llm", ("H100",), tuple(demand), interruptible, within,
                                              gpus_per_job=8, hours_per_run=10, checkpoint_write_minutes=0),))


@pytest.mark.parametrize(("demand", "interruptible", "within", "headroom"), [
    ((1.5 * NODE_WEEK, 0.4 * NODE_WEEK, 2.0 * NODE_WEEK), 0.0, 1, 192),
    ((2.0 * NODE_WEEK, 2.0 * NODE_WEEK, 0.5 * NODE_WEEK), 0.5, 1, 0),
    ((0.2 * NODE_WEEK, 2.5 * NODE_WEEK, 1.0 * NODE_WEEK), 0.3, 2, 96),
])
def test_milp_equals_the_best_of_every_commitment_choice_for_a_3_week_forecast(demand, interruptible, within,
                                                                                headroom):
    book = _book()
    offers = [offer("p5.48xlarge", "us-east-1", price=80.0, spot=30.0)]
    q = quotas(("aws", "us-east-1", "L-417A185B", headroom, 0), ("aws", "us-east-1", "L-C4BD4855", 192, 0))
    f = _forecast(demand, interruptible, within)
    options = buys(book, pools(offers, {"H100"}), f.weeks)
    assert len(options) == 5  # starts 0, 1, 2; 1 or 3 weeks (3 reaching past the horizon from week 1 only)
    best = min((solve(f, offers, q, book, fixed=dict(zip(options, n, strict=True)), mip_rel_gap=0)
                for n in itertools.product(range(3), repeat=len(options))),
               key=lambda a: (round(a.unserved_gpu_hours, 6), a.total_usd))
    got = solve(f, offers, q, book, mip_rel_gap=1e-9)
    assert math.isclose(got.unserved_gpu_hours, best.unserved_gpu_hours, abs_tol=1e-6)
    assert math.isclose(got.total_usd, best.total_usd, rel_tol=1e-6)
    served = [w.reserved + w.spot + w.on_demand + w.unserved for w in got.weeks]
    assert math.isclose(sum(served), sum(demand), rel_tol=1e-6)
    for w in got.weeks:  # only the tolerant share runs on spot
        assert w.spot <= interruptible * (w.reserved + w.spot + w.on_demand + w.unserved) + 1e-6


def test_a_commitment_says_when_it_pays_off_and_quota_to_request_waits_for_its_lead_time():
    book = _book(discount=0.4, uses_quota=True, durations_weeks=(3,), start_within_weeks=0)
    offers = [offer("p5.48xlarge", "us-east-1", price=80.0, spot=None)]
    q = quotas(("aws", "us-east-1", "L-417A185B", 192, 0))  # one node
    f = _forecast((0.9 * NODE_WEEK, 3 * NODE_WEEK, 3 * NODE_WEEK))
    a = solve(f, offers, q, book, mip_rel_gap=1e-9)
    assert [c.nodes for c in a.commitments] == [1]
    assert math.isclose(a.commitments[0].break_even, 0.6)
    assert 0.96 <= a.commitments[0].planned_use <= 1.0 + 1e-9  # 0.9 of its first week, all of the others
    # two more nodes on demand from week 1 (the lead time), a little over with hardware faults' restarts
    assert [(r.key, r.lead_weeks) for r in a.quota] == [("L-417A185B", 1)]
    assert 2 * 192 <= a.quota[0].request <= 2 * 192 * 1.01
    assert a.weeks[0].unserved == 0 and a.unserved_gpu_hours == 0


def test_the_shipped_terms_have_sources_and_a_rates_file_overrides_them():
    book = commitment_book()
    assert {t.kind for t in book.terms} == {"capacity-block", "odcr", "savings-plan", "committed-use",
                                             "future-reservation"}
    assert all(t.source.startswith("https://") for t in book.terms)
    mine = with_rates({"terms": [{"id": "aws-savings-plan-1y", "discount": 0.45},
                                 {"id": "aws-odcr-nego", "cloud": "aws", "kind": "odcr", "discount": 0.1,
                                  "accelerators": ["H100"], "durations_weeks": [4], "start_within_weeks": None,
                                  "start_every_weeks": 1, "lead_weeks": 0, "max_nodes": 8,
                                  "guarantees_capacity": True, "uses_quota": True, "payment": "monthly",
                                  "source": "our contract"}],
                       "pools": [{"cloud": "aws", "region": "us-east-1", "instance_type": "p5.48xlarge",
                                  "spot_availability": 0.2}]}, "rates.yaml")
    terms = {t.id: t for t in mine.terms}
    assert terms["aws-savings-plan-1y"].discount == 0.45 and terms["aws-odcr-nego"].discount == 0.1
    assert mine.availability("aws", "us-east-1", "p5.48xlarge", "spot") == 0.2
    with pytest.raises(InputError, match="discount"):
        with_rates({"terms": [{"id": "aws-odcr", "discount": 2}]}, "rates.yaml")


FORECAST = {"weeks": 3, "classes": [{"name": "c", "accelerators": ["H100"], "interruptible": 0.5,
                                     "regions": ["us-east-1"], "clouds": ["aws"],
                                     "demand_gpu_hours": [1000, 2000, 1500]}]}


@pytest.mark.parametrize(("change", "field"), [
    ({"classes": [{**FORECAST["classes"][0], "demand_gpu_hours": [1000, -5, 1500]}]},
     "classes[0].demand_gpu_hours[1]"),
    ({"weeks": 60}, "weeks"),
    ({"classes": [{**FORECAST["classes"][0], "demand_gpu_hours": [1000]}]}, "classes[0].demand_gpu_hours"),
    ({"classes": [{**FORECAST["classes"][0], "accelerators": ["TPU9"]}]}, "classes[0].accelerators"),
])
def test_bad_forecast_is_one_line_naming_the_field(capsys, tmp_path, change, field):
    path = tmp_path / "f.yaml"
    path.write_text(yaml.safe_dump({**FORECAST, **change}))
    code = main(["portfolio", str(path)])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and field in err and "Traceback" not in err


def test_parse_forecast_reads_the_example():
    from pathlib import Path

    doc = yaml.safe_load((Path(__file__).resolve().parents[3] / "placement/examples/forecast.yaml").read_text())
    f = parse_forecast(doc)
    assert f.weeks == 8 and [c.name for c in f.classes] == ["pretraining", "fine-tuning", "evaluation"]


def test_portfolio_json_reports_commitments_baselines_and_demand_moves(capsys, tmp_path):
    path = tmp_path / "f.yaml"
    path.write_text(yaml.safe_dump(FORECAST))
    code = main(["portfolio", str(path), "--json", "--time-limit", "5"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["schema"] == "gpufleet.portfolio/v1"
    assert set(doc["compare"]) == {"all_on_demand", "all_spot", "reserve_the_peak"}
    assert set(doc["demand_moves"]) == {"demand_plus_20", "demand_minus_20"}
    assert doc["total_usd"] <= doc["compare"]["all_on_demand"]["total_usd"] + 0.01
    assert len(doc["weeks"]) == 3 and {"upfront_usd", "commitments_usd", "quota_requests"} <= set(doc)


def _calibration(tmp_path, reclaims):
    path = tmp_path / "cal.yaml"
    path.write_text(yaml.safe_dump({
        "schema": "gpufleet.calibration/v1",
        "measured": {"from": "2026-10-01T00:00:00Z", "to": "2026-11-20T00:00:00Z"},
        "spot": [{"cloud": "aws", "region": "us-east-1", "instance_type": "p5.48xlarge", "node_hours": 1000,
                  "reclaims": reclaims}]}))
    return path


def test_spot_calibration_is_the_measured_posterior_rate_and_leaves_availability_to_the_data(tmp_path):
    from placement.files.calibrations import read_calibration
    from placement.model.calibration import posterior
    from placement.plan.portfolio import spot_calibration

    cal = read_calibration(_calibration(tmp_path, 500))
    got = spot_calibration(cal, [offer("p5.48xlarge", "us-east-1"), offer("p5.48xlarge", "us-west-2")], prior_rate=0.05)
    rate = posterior(0.05, cal.prior_weight, 1000, 500)[0]
    # us-west-2 unmeasured: the instance type's rows in the cloud, as plan looks them up
    assert got == {("aws", "us-east-1", "p5.48xlarge"): (None, rate), ("aws", "us-west-2", "p5.48xlarge"): (None, rate)}


def test_portfolio_prices_spot_with_the_measured_reclaim_rate(capsys, tmp_path):
    path = tmp_path / "f.yaml"
    interruptible = {**FORECAST, "classes": [{**FORECAST["classes"][0], "interruptible": 1.0}]}
    path.write_text(yaml.safe_dump(interruptible))
    docs = {}
    for name, flags in (("none", ["--no-calibration"]),
                        ("often", ["--calibration", str(_calibration(tmp_path, 2000))])):
        code = main(["portfolio", str(path), "--json", "--time-limit", "5", *flags])
        docs[name] = json.loads(capsys.readouterr().out)
        assert code == 0
    assert docs["none"]["calibration"] is None
    assert docs["often"]["calibration"]["spot_pools"] >= 1
    # two reclaims per node-hour measured: spot's restarts cost more than the prior's 0.05
    assert docs["often"]["compare"]["all_spot"]["total_usd"] > docs["none"]["compare"]["all_spot"]["total_usd"]


def test_a_class_held_to_one_region_is_served_there_when_a_cheaper_region_has_the_same_pool(capsys, tmp_path):
    """No quota file: pools of unknown quota dominated by a cheaper region were dropped for every class, so a class
    restricted to us-east-1 was left all unserved at $0."""
    path = tmp_path / "f.yaml"
    path.write_text(yaml.safe_dump(FORECAST))
    code = main(["portfolio", str(path), "--json", "--time-limit", "5", "--no-calibration"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["unserved_gpu_hours"] == 0 and doc["total_usd"] > 0
    assert doc["compare"]["all_on_demand"]["unserved_gpu_hours"] == 0


def test_every_shipped_term_names_its_source_and_an_unverified_one_says_why():
    for t in commitment_book().terms:
        assert t.source
        assert t.verified or t.checked, t.id
    mine = with_rates({"terms": [{"id": "aws-odcr", "verified": True}]}, "rates.yaml")
    assert {t.id: t.verified for t in mine.terms}["aws-odcr"] is True
