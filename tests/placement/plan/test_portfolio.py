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
    # two more nodes on demand from week 1 (the lead time), a little over with hardware faults' restarts: quota
    # is asked for in whole nodes (3, not 2.01)
    assert [(r.key, r.lead_weeks) for r in a.quota] == [("L-417A185B", 1)]
    assert (a.quota[0].nodes, a.quota[0].request, a.quota[0].units_per_node, a.quota[0].gpus_per_node) == (
        3, 3 * 192, 192, 8)
    assert a.quota[0].instance_type == "p5.48xlarge"
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


# ------------------------------------------------------------------------------------------------ issue 38


def test_a_bare_region_or_cloud_is_a_one_item_list(capsys, tmp_path):
    """`regions: us-east-1` was iterated letter by letter: every hour unserved at $0.00, exit 0."""
    path = tmp_path / "f.yaml"
    path.write_text(yaml.safe_dump({**FORECAST, "classes": [{**FORECAST["classes"][0], "regions": "us-east-1",
                                                               "clouds": "aws"}]}))
    f = parse_forecast(yaml.safe_load(path.read_text()))
    assert f.classes[0].regions == ("us-east-1",) and f.classes[0].clouds == ("aws",)
    code = main(["portfolio", str(path), "--json", "--time-limit", "5", "--no-calibration"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["unserved_gpu_hours"] == 0 and doc["total_usd"] > 0
    assert {p["region"] for p in doc["pools"]} == {"us-east-1"}


@pytest.mark.parametrize(("change", "field"), [
    ({"regions": ["us-east-1", "us-east-9"]}, "classes[0].regions[1]"),
    ({"regions": ["us-central1"], "clouds": ["aws"]}, "classes[0].regions[0]"),
    ({"clouds": ["azure"]}, "classes[0].clouds[0]"),
    ({"regions": [7]}, "classes[0].regions"),
    ({"workload": "llm-finetune"}, "classes[0].workload"),
    ({"training": "lora"}, "classes[0].training"),
    ({"gpus_per_job": 8.5}, "classes[0].gpus_per_job"),
    ({"within_weeks": 9}, "classes[0].within_weeks"),
    ({"name": ["x"]}, "classes[0].name"),
])
def test_an_unknown_region_cloud_or_workload_class_is_refused_naming_the_field(capsys, tmp_path, change, field):
    path = tmp_path / "f.yaml"
    path.write_text(yaml.safe_dump({**FORECAST, "classes": [{**FORECAST["classes"][0], **change}]}))
    code = main(["portfolio", str(path), "--no-calibration"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and field in err and "Traceback" not in err


def test_two_classes_of_one_name_are_refused(capsys, tmp_path):
    path = tmp_path / "f.yaml"
    path.write_text(yaml.safe_dump({**FORECAST, "classes": [FORECAST["classes"][0], FORECAST["classes"][0]]}))
    code = main(["portfolio", str(path), "--no-calibration"])
    err = capsys.readouterr().err
    assert code == 2 and "classes[1].name" in err and len(err.strip().splitlines()) == 1


def test_a_class_no_pool_can_run_is_refused_not_left_unserved_at_zero_dollars(capsys, tmp_path):
    path = tmp_path / "f.yaml"
    path.write_text(yaml.safe_dump({**FORECAST, "classes": [{**FORECAST["classes"][0], "regions": ["af-south-1"]}]}))
    code = main(["portfolio", str(path), "--no-calibration"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and "classes[0]" in err and len(err.strip().splitlines()) == 1


RATES_BAD = [
    ({"terms": [{"id": "aws-odcr", "discount": 0.1}, {"id": "aws-odcr", "max_nodes": 4}]}, "terms[1].id"),
    ({"terms": {"id": "aws-odcr"}}, "terms"),
    ({"terms": [{"id": "aws-odcr", "discount": "ten"}]}, "terms[0].discount"),
    ({"terms": [{"id": "aws-odcr", "durations_weeks": "4"}]}, "terms[0].durations_weeks"),
    ({"terms": [{"id": "aws-odcr", "accelerators": 5}]}, "terms[0].accelerators"),
    ({"terms": [{"id": "aws-odcr", "guarantees_capacity": "yes"}]}, "terms[0].guarantees_capacity"),
    ({"terms": [{"id": "aws-odcr", "max_nodes": 1.5}]}, "terms[0].max_nodes"),
    ({"terms": [{"id": "aws-odcr", "source": 3}]}, "terms[0].source"),
    ({"terms": [{"id": ["x"]}]}, "terms[0].id"),
    ({"terms": [{"id": "aws-odcr", "scope": "all"}]}, "terms[0].scope"),
    ({"quota_lead_weeks": [1, 2]}, "quota_lead_weeks"),
    ({"quota_lead_weeks": {"aws": "two"}}, "quota_lead_weeks.aws"),
    ({"quota_lead_weeks": {"azure": 1}}, "quota_lead_weeks.azure"),
    ({"availability": [0.5]}, "availability"),
    ({"availability": {"spot": [0.5]}}, "availability.spot"),
    ({"availability": {"spot": {"aws": "half"}}}, "availability.spot.aws"),
    ({"availability": {"spot": {"aws": 1.5}}}, "availability.spot.aws"),
    ({"pools": {"cloud": "aws"}}, "pools"),
    ({"pools": ["aws"]}, "pools[0]"),
    ({"pools": [{"cloud": "aws", "region": "us-east-1", "instance_type": "p5.48xlarge",
                 "spot_availability": "x"}]}, "pools[0].spot_availability"),
    ({"rates": [{"term": "aws-capacity-block", "instance_type": "p5.48xlarge"}]}, "rates[0]"),
    ({"rates": [{"term": "nope", "instance_type": "p5.48xlarge", "discount": 0.1, "source": "me"}]}, "rates[0].term"),
    ({"rates": [{"term": "aws-odcr", "instance_type": "p5.48xlarge", "discount": 0.1, "source": "me"},
                {"term": "aws-odcr", "instance_type": "p5.48xlarge", "discount": 0.2, "source": "me"}]}, "rates[1]"),
    ({"beyond_horizon": {"rule": "prorate"}}, "beyond_horizon.rule"),
    ({"surprise": 1}, "surprise"),
    ([1, 2], "terms"),
]


@pytest.mark.parametrize(("rates", "field"), RATES_BAD)
def test_a_rates_file_of_wrong_types_or_a_term_given_twice_is_one_line_exit_2(capsys, tmp_path, rates, field):
    path = tmp_path / "f.yaml"
    path.write_text(yaml.safe_dump(FORECAST))
    rpath = tmp_path / "rates.yaml"
    rpath.write_text(yaml.safe_dump(rates))
    code = main(["portfolio", str(path), "--rates", str(rpath), "--no-calibration"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "", err
    assert len(err.strip().splitlines()) == 1 and field in err and "Traceback" not in err


# ------------------------------------------------------------------------------------------------ issue 36 part 5


def test_demand_is_progress_hours_an_a100_hour_is_not_an_h100_hour():
    """A class that accepts H100 or A100 but lists H100 first needs 1/speed A100 GPU-hours per progress-hour."""
    from placement.model.physics_data import physics_book

    book = Book((), {"aws": 0}, {"aws": 0.5}, {"aws": 1.0}, {})
    f = Forecast(1, (DemandClass("c", "llm", ("H100", "A100"), (1000.0,), gpus_per_job=8, hours_per_run=10,
                                 checkpoint_write_minutes=0),))
    a100 = offer("p4d.24xlarge", "us-east-1", price=16.0, spot=None)
    got = solve(f, [a100], quotas(), book, mip_rel_gap=1e-9)
    speed = physics_book().speeds["llm"]["A100"]
    assert got.weeks[0].on_demand == pytest.approx(1000.0)
    assert got.weeks[0].gpu_hours == pytest.approx(1000.0 / speed, rel=0.01)  # and a little for restarts
    assert got.total_usd == pytest.approx(2.0 * got.weeks[0].gpu_hours, rel=1e-9)


def test_an_8_gpu_job_never_runs_on_8_single_gpu_nodes():
    book = Book((), {"aws": 0}, {"aws": 0.5}, {"aws": 1.0}, {})
    f = Forecast(1, (DemandClass("c", "llm", ("L4",), (100.0,), gpus_per_job=8, hours_per_run=10),))
    small = offer("g6.xlarge", "us-east-1", price=0.8, spot=None)
    with pytest.raises(InputError, match="classes\\[0\\]"):
        solve(f, [small], quotas(), book)
    big = offer("g6.48xlarge", "us-east-1", price=13.0, spot=None)
    got = solve(f, [small, big], quotas(), book, mip_rel_gap=1e-9)
    assert [u.instance_type for u in got.pools] == ["g6.48xlarge"]


def test_spot_without_a_quota_row_is_bounded_by_the_documented_availability():
    """No quota row used to mean unlimited spot: now availability.spot_nodes_without_quota nodes x the share."""
    book = Book((), {"aws": 0}, {"aws": 0.5}, {"aws": 1.0}, {}, spot_nodes_without_quota={"aws": 2})
    f = _forecast((10 * NODE_WEEK,), interruptible=1.0)
    got = solve(f, [offer("p5.48xlarge", "us-east-1", price=80.0, spot=20.0)], quotas(), book, mip_rel_gap=1e-9)
    (use,) = got.pools
    assert use.spot == pytest.approx(0.5 * 2 * NODE_WEEK) and use.spot_without_quota
    assert got.weeks[0].on_demand > 0 and got.unserved_gpu_hours == pytest.approx(0.0, abs=1e-6)
    # a quota row replaces the assumption (more of it could be asked for, but not in time: lead 1 week)
    q = quotas(("aws", "us-east-1", "L-C4BD4855", 192 * 10, 0))
    book = Book((), {"aws": 1}, {"aws": 0.5}, {"aws": 1.0}, {}, spot_nodes_without_quota={"aws": 2})
    got = solve(f, [offer("p5.48xlarge", "us-east-1", price=80.0, spot=20.0)], q, book, mip_rel_gap=1e-9)
    assert got.pools[0].spot == pytest.approx(0.5 * 10 * NODE_WEEK) and not got.pools[0].spot_without_quota


def test_a_term_past_the_horizon_is_charged_for_its_unused_share_in_the_last_weeks():
    book = _book(durations_weeks=(10,), start_within_weeks=0)
    book = Book(book.terms, book.quota_lead_weeks, book.spot_availability, book.on_demand_availability, {},
                beyond_horizon="last-weeks", beyond_horizon_weeks=2)
    offers = [offer("p5.48xlarge", "us-east-1", price=80.0, spot=None)]
    busy = solve(_forecast((2 * NODE_WEEK,) * 3), offers, quotas(), book, mip_rel_gap=1e-9)
    (c,) = busy.commitments
    assert c.buy.past == 7 and c.nodes == 2 and c.past_usd == pytest.approx(0.0, abs=1e-6)
    assert c.total_usd == pytest.approx(2 * NODE_WEEK * 3 * 80 / 8 * 0.6) and c.term_usd == pytest.approx(
        2 * NODE_WEEK * 10 * 80 / 8 * 0.6)
    # demand that stops in the last weeks leaves it unused there: its weeks past the horizon are charged
    idle = solve(_forecast((2 * NODE_WEEK, 2 * NODE_WEEK, 0.0)), offers, quotas(), book, mip_rel_gap=1e-9)
    assert all(x.past_usd == 0 or x.past_usd > 0.4 * x.term_usd for x in idle.commitments)
    excluded = Book(book.terms, book.quota_lead_weeks, book.spot_availability, book.on_demand_availability, {},
                    beyond_horizon="exclude")
    assert buys(excluded, pools(offers, {"H100"}), 3) == []


def test_the_report_shows_unserved_and_solver_status_on_every_line_and_names_unverified_figures(capsys, tmp_path,
                                                                                              monkeypatch):
    import placement.commands.portfolio as cli

    monkeypatch.setattr(cli, "PROGRESS_AFTER_S", 0.0)
    path = tmp_path / "f.yaml"
    path.write_text(yaml.safe_dump(FORECAST))
    code = main(["portfolio", str(path), "--time-limit", "5", "--no-calibration"])
    out, err = capsys.readouterr()
    assert code == 0
    lines = out.splitlines()
    figures = [x for x in lines if x.startswith(("expected total", "  against", "  demand"))]
    assert len(figures) == 6
    for line in figures:
        assert "GPU-h unserved" in line and ("optimal" in line or "time limit" in line), line
    assert "placement: portfolio: solving the plan (1 of 8)" in err and "solved in" in err
    doc_code = main(["portfolio", str(path), "--json", "--time-limit", "5", "--no-calibration"])
    doc = json.loads(capsys.readouterr().out)
    assert doc_code == 0
    unverified = [c for c in doc["commitments"] if not c["verified"]]
    for c in unverified:
        assert any(c["term"] in w and "unverified" in w for w in doc["warnings"])
        assert any(f"warning: {c['term']}" in x for x in lines) or not unverified
    for k in ("all_on_demand", "all_spot", "reserve_the_peak"):
        assert {"unserved_gpu_hours", "solver"} <= set(doc["compare"][k])
    for v in doc["demand_moves"].values():
        assert "replanned_unserved_gpu_hours" in v and "replanned_solver" in v
