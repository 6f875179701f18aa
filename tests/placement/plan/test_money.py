"""Money a user can act on (issue 36): the automatic checkpoint interval minimises the total, the why line adds
up, ties only where the model's error does not cancel, and a flagged price is said."""

from __future__ import annotations

import dataclasses
import json

import pytest
from factories import job, offer, run, write

from placement.model.physics import cost_optimal_interval, optimal_interval, wall_ratio
from placement.plan.job import line_differences, plan, why_chosen

# Fixed intervals of a brute-force grid, in minutes: 1 min to 3 days, 2 % apart.
GRID = [1.02 ** i for i in range(0, 420)]


def _grid_best(j, offers, capacity):
    best = None
    for m in GRID:
        p = plan(dataclasses.replace(j, checkpoint_interval_minutes=m), offers)
        found = [c for c in p.ranked if c.capacity == capacity]
        if found and (best is None or found[0].cost.total_usd < best[0]):
            best = (found[0].cost.total_usd, m)
    return best


@pytest.mark.parametrize("fields, capacity", [
    ({"capacity": "spot", "gpus": 16, "hours": 60, "model": {"parameters_b": 70, "training": "adapter"},
      "spot": {"interruptions_per_hour": 0.05}}, "spot"),
    ({"capacity": "spot", "gpus": 8, "hours": 100, "model": {"parameters_b": 13},
      "spot": {"interruptions_per_hour": 0.05}}, "spot"),
    ({"capacity": "on-demand", "gpus": 64, "hours": 200, "model": {"parameters_b": 70},
      "faults": {"per_gpu_hour": 2e-5}}, "on-demand"),
    ({"capacity": "spot", "gpus": 8, "hours": 24, "model": {"parameters_b": 7}, "usd_per_hour_of_delay": 200,
      "checkpoint": {"keep": 5, "retention_days": 30}}, "spot"),
])
def test_the_automatic_interval_is_within_one_percent_of_the_best_fixed_interval(fields, capacity):
    j = job(**fields)
    offers = [offer("p5.48xlarge", "us-east-1", "use1-az1", price=55.04, spot=16.95)]
    chosen = plan(j, offers).chosen
    assert chosen is not None and chosen.capacity == capacity
    best_usd, best_minutes = _grid_best(j, offers, capacity)
    assert chosen.cost.total_usd <= best_usd * 1.01, (chosen.checkpoint_interval_minutes, best_minutes)
    assert chosen.checkpoint_interval_basis in ("cost", "run")


def test_the_interval_trades_wall_time_for_storage_and_says_so():
    # A 70B adapter job checkpointing 9.8 GB: Daly's interval writes often; every replaced checkpoint is billed.
    j = job(capacity="spot", gpus=8, hours=100, model={"parameters_b": 13}, spot={"interruptions_per_hour": 0.05},
            checkpoint={"retention_days": 30})
    offers = [offer("p5.48xlarge", "us-east-1", "use1-az1", price=55.04, spot=16.95)]
    c = plan(j, offers).chosen
    assert c.checkpoint_interval_basis == "cost" and c.checkpoint_interval_minutes > c.daly_interval_minutes
    daly = plan(dataclasses.replace(j, checkpoint_interval_minutes=c.daly_interval_minutes), offers).chosen
    assert daly.cost.total_usd > c.cost.total_usd + 1  # the wall-time optimum costs more in all
    assert daly.cost.compute_usd < c.cost.compute_usd  # ... though its compute is less


def test_a_users_keep_and_retention_are_honoured():
    offers = [offer("p5.48xlarge", "us-east-1", "use1-az1", price=55.04, spot=16.95)]
    base = dict(capacity="on-demand", gpus=8, hours=50, model={"parameters_b": 13},
                checkpoint={"interval_minutes": 30})
    short = plan(job(**base), offers).chosen
    long = plan(job(**{**base, "checkpoint": {"interval_minutes": 30, "retention_days": 30}}), offers).chosen
    kept = plan(job(**{**base, "checkpoint": {"interval_minutes": 30, "keep": 10}}), offers).chosen
    size = 13 * 14.0  # GB: 14 bytes per parameter (full training)
    n = 100  # 50 h every 30 min
    per_day = size * 0.023 / 30.4375
    wall = short.hours * (1 + short.overhead) / 24  # days: the kept checkpoints are stored the whole wall time
    assert short.cost.checkpoint_storage_usd == pytest.approx(per_day * (3 * wall + (n - 3) * 1), rel=1e-6)
    assert long.cost.checkpoint_storage_usd == pytest.approx(per_day * (3 * wall + (n - 3) * 30), rel=1e-6)
    assert kept.cost.checkpoint_storage_usd == pytest.approx(per_day * (10 * wall + (n - 10) * 1), rel=1e-6)


def test_gcp_retention_counts_soft_delete():
    from placement.model.bill import bill_book

    book = bill_book()
    assert book.retention_days("aws") == 1 and book.retention_days("gcp") == 8


@pytest.mark.parametrize("rate, write_h, restart_h", [(0.4, 0.01, 0.25), (0.05, 0.2, 0.1), (2.0, 0.001, 0.0)])
def test_the_cost_optimal_interval_solves_its_equation(rate, write_h, restart_h):
    a, b = 400.0, 3.0
    tau = cost_optimal_interval(rate, write_h, restart_h, a, b)

    def cost(t):
        return a * wall_ratio(rate, t, write_h, restart_h) + b / t

    assert cost(tau) <= min(cost(tau * 0.999), cost(tau * 1.001))
    assert tau > optimal_interval(rate, write_h)  # storage per checkpoint pushes it past Daly's
    assert cost_optimal_interval(rate, write_h, restart_h, a, 0.0) == optimal_interval(rate, write_h)


def _two(a, b, **fields):
    j = job(**fields)
    return plan(j, [a, b])


def test_why_names_every_line_and_the_parts_add_up_to_the_difference():
    # GCP is cheaper to run but the dataset is in S3: egress and Cloud NAT on GCP, nothing on AWS same-region.
    fields = dict(capacity="on-demand", gpus=8, hours=5, model={"parameters_b": 13},
                  data={"dataset": {"uri": "s3://b/d", "size_gb": 100, "region": "us-east-1"}, "outputs_gb": 10})
    p = _two(offer("p5.48xlarge", "us-east-1", "use1-az1", price=60.0, spot=None),
             offer("a3-highgpu-8g", "us-central1", "us-central1-a", price=55.0, spot=None), **fields)
    best, runner = p.head(2)
    parts = line_differences(best, runner)
    delta = round(runner.cost.total_usd * 100) - round(best.cost.total_usd * 100)
    assert sum(c for _, c in parts) == delta
    names = {n for n, _ in parts}
    for name, attr in (("compute", "compute_usd"), ("egress", "egress_usd"), ("NAT", "nat_usd"),
                       ("checkpoint storage", "checkpoint_storage_usd")):
        if abs(getattr(runner.cost, attr) - getattr(best.cost, attr)) > 0.011:
            assert name in names
    assert "NAT" in names and "egress" in names
    text = why_chosen(p)
    assert f"${abs(delta) / 100:,.2f} less than rank 2" in text
    for name, c in parts:
        assert f"{name} ${abs(c) / 100:,.2f} {'more' if c > 0 else 'less'}" in text


def test_total_is_the_sum_of_its_lines():
    p = _two(offer("p5.48xlarge", "us-east-1", "use1-az1", price=60.0, spot=20.0),
             offer("a3-highgpu-8g", "us-central1", "us-central1-a", price=55.0, spot=30.0),
             capacity="any", gpus=16, hours=20, model={"parameters_b": 13}, usd_per_hour_of_delay=10,
             data={"dataset": {"uri": "s3://b/d", "size_gb": 100, "region": "us-east-1"}, "outputs_gb": 10})
    for c in p.ranked:
        k = c.cost
        assert k.total_usd == pytest.approx(k.compute_usd + k.egress_usd + k.nat_usd + k.checkpoint_storage_usd
                                            + k.checkpoint_requests_usd + k.delay_usd, abs=1e-9)


def test_one_node_of_the_same_accelerator_is_never_a_tie_on_fabric():
    # p5.48xlarge (3200 Gbps EFA) and a3-highgpu-8g (800 Gbps TCPX), both one node of 8 H100s: efficiency is 1
    # on both, so the model's error cancels; the plan must not call it a tie nor suggest nccl-tests on 1 node.
    p = _two(offer("p5.48xlarge", "us-east-1", "use1-az1", price=60.0, spot=None),
             offer("a3-highgpu-8g", "us-central1", "us-central1-a", price=60.5, spot=None), capacity="on-demand")
    assert p.uncertain(p.head(2)[1]) is None and "cannot tell" not in why_chosen(p)
    # Two nodes each: the fabric now carries the job's traffic, and the decider is at the job's node count.
    p = _two(offer("p5.48xlarge", "us-east-1", "use1-az1", price=60.0, spot=None),
             offer("a3-megagpu-8g", "us-central1", "us-central1-a", price=59.0, spot=None), capacity="on-demand",
             gpus=16)
    other = next(c for c in p.ranked if c is not p.chosen)
    decide = p.uncertain(other)
    assert decide is not None and "nccl-tests all_reduce_perf across 2" in decide


def test_another_accelerator_is_decided_by_profiling_both():
    p = _two(offer("p5.48xlarge", "us-east-1", "use1-az1", price=60.0, spot=None),
             offer("p5en.48xlarge", "us-east-1", "use1-az1", price=69.0, spot=None), capacity="on-demand",
             accelerator=["H100", "H200"])
    other = next(c for c in p.ranked if c is not p.chosen)
    decide = p.uncertain(other)
    assert decide is not None and "placement profile" in decide and "p5en.48xlarge" in decide
    assert "p5.48xlarge" in decide
    text = why_chosen(p)
    assert "held-out points" in text and "speed ratio" in text and "scaling point" in text


def test_a_plan_whose_chosen_price_is_flagged_says_so(tmp_path, capsys):
    # A user's SkyPilot-style catalog with GCP's half-priced a3-highgpu-8g row in us-central1 (the GPUs left out).
    head = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,AvailabilityZone\n"
    rows = ["a3-highgpu-8g,H100,8,208,1872,43.07,,us-central1,us-central1-a",
            "a3-highgpu-8g,H100,8,208,1872,88.56,,us-east4,us-east4-a",
            "a3-highgpu-8g,H100,8,208,1872,112.54,,europe-west4,europe-west4-b",
            "a3-highgpu-8g,H100,8,208,1872,97.37,,europe-west1,europe-west1-b"]
    cat = write(tmp_path, "gcp.csv", head + "\n".join(rows) + "\n")
    j = write(tmp_path, "j.yaml", {"name": "j", "accelerator": "H100", "gpus": 8, "hours": 10,
                                   "capacity": "on-demand", "clouds": {"allow": ["gcp"]}})
    code, out, err = run(capsys, "plan", j, "--catalog", f"gcp={cat}", "--now", "2026-11-02")
    out = " ".join(out.split())  # the line is wrapped to the terminal
    assert code == 0 and "price flagged: the chosen gcp us-central1-a a3-highgpu-8g on-demand price" in out
    assert "0.46x the median" in out and "price flagged" in err
    code, out, _ = run(capsys, "plan", j, "--catalog", f"gcp={cat}", "--now", "2026-11-02", "--json")
    doc = json.loads(out)
    assert "0.46x the median" in doc["chosen"]["price_flag"] and any("price flagged" in w for w in doc["warnings"])


def test_the_embedded_catalogs_flagged_rows_are_said_when_chosen(tmp_path, capsys):
    # a3-ultragpu-8g has no billing-catalogue price in the export: its rows are flagged unverified.
    j = write(tmp_path, "j.yaml", {"name": "j", "accelerator": "H200", "gpus": 8, "hours": 10, "capacity": "spot",
                                   "clouds": {"allow": ["gcp"]}})
    code, out, _ = run(capsys, "plan", j, "--now", "2026-11-02", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["chosen"]["instance_type"] == "a3-ultragpu-8g"
    assert doc["chosen"]["price_flag"].startswith(("unverified", "on-demand left out"))
    assert doc["chosen"]["price_as_of"] == "2026-11-01"
    assert "price flagged in the catalog" in " ".join(doc["chosen"]["notes"])


def test_every_bill_line_reproduces_from_the_json(tmp_path, capsys):
    """The cost oracle's view: each line from the candidate's own JSON fields and bill.yaml's rates."""
    import math
    from importlib import resources

    import yaml

    bill = yaml.safe_load(resources.files("placement.data").joinpath("bill.yaml").read_text(encoding="utf-8"))
    j = write(tmp_path, "j.yaml", {"name": "j", "accelerator": ["H100", "H200"], "gpus": 16, "hours": 30,
                                   "capacity": "any", "model": {"parameters_b": 13},
                                   "data": {"dataset": {"uri": "s3://b/d", "size_gb": 500, "region": "us-east-1"},
                                            "outputs_gb": 20}})
    code, out, _ = run(capsys, "plan", j, "--now", "2026-11-02", "--json", "--top", "40")
    cands = json.loads(out)["candidates"]
    assert code == 0 and {c["cloud"] for c in cands} == {"aws", "gcp"}
    for c in cands:
        k, rates = c["cost"], bill[c["cloud"]]
        wall_h = c["hours"] * (1 + c["overhead"])
        assert k["compute_usd"] == pytest.approx(c["usd_per_hour"] * wall_h, rel=1e-4)
        n, keep = c["checkpoints_written"], c["checkpoint_keep"]
        assert n == math.ceil(c["hours"] * 60 / c["checkpoint_interval_minutes"] - 1e-3)
        days = bill["checkpoint"]["noncurrent_version_days"] + rates.get("soft_delete_days", 0)
        assert c["checkpoint_retention_days"] == days
        store = (c["checkpoint_gb"] * (min(keep, n) * wall_h / 24 + max(n - keep, 0) * days)
                 / bill["checkpoint"]["days_per_month"] * rates["storage_usd_per_gb_month"])
        assert k["checkpoint_storage_usd"] == pytest.approx(store, rel=1e-3, abs=1e-4)
        parts = math.ceil(c["checkpoint_gb"] * 1000 / bill["checkpoint"]["part_mb"])
        assert k["checkpoint_requests_usd"] == pytest.approx(n * parts * rates["put_usd_per_1000"] / 1000, abs=1e-4)
        lines = (k["compute_usd"] + k["egress_usd"] + k["nat_usd"] + k["checkpoint_storage_usd"]
                 + k["checkpoint_requests_usd"] + k["delay_usd"])
        assert k["total_usd"] == pytest.approx(lines, abs=1e-3)


def test_a_deadline_the_cheapest_interval_would_miss_keeps_dalys():
    fields = dict(capacity="spot", gpus=8, hours=100, model={"parameters_b": 13}, spot={"interruptions_per_hour": 0.05},
                  checkpoint={"retention_days": 30})
    offers = [offer("p5.48xlarge", "us-east-1", "use1-az1", price=55.04, spot=16.95)]
    cheap = plan(job(**fields), offers).chosen
    daly = plan(job(**{**fields, "checkpoint": {"retention_days": 30,
                                                "interval_minutes": cheap.daly_interval_minutes}}), offers).chosen
    assert daly.ready_hours < cheap.ready_hours
    deadline = (daly.ready_hours + cheap.ready_hours) / 2
    c = plan(job(**fields, deadline_hours=deadline), offers).chosen
    assert c is not None and c.checkpoint_interval_basis == "daly" and c.ready_hours <= deadline
