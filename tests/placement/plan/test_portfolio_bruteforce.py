"""The portfolio MILP against a brute force over every commitment choice, priced by an oracle written here.

The oracle knows nothing of the MILP: for one class on one pool it serves each week from the held capacity the
Capacity Blocks bought, then splits the rest between spot (the tolerant share, within the spot bound) and on-demand,
where a Savings Plan is a **spend** commitment: it pays its USD per hour whether used or not and bills the
on-demand GPU-hours it covers at its rate; it holds no capacity. Past the horizon, a plan is charged for the share
of its spend left unused in the last weeks (``beyond_horizon: last-weeks``). Every Capacity Block choice is tried;
the plan's USD per hour, a convex piecewise-linear choice, is found by golden-section search.
"""

from __future__ import annotations

import itertools
import math

import pytest
from factories import offer, quotas

from placement.model.commitments import Book, Term
from placement.plan.portfolio import HOURS_PER_WEEK, DemandClass, Forecast, buys, fit, pools, solve

OD, SPOT = 80.0, 30.0  # USD per node-hour of p5.48xlarge
G = 8
NODE_WEEK = G * HOURS_PER_WEEK
CB_PRICE = 0.7 * OD / G  # USD per GPU-hour of a block (30 % off)
SP_RATE = 0.75 * OD / G  # the plan's USD per GPU-hour (25 % off)


def _terms(sp_weeks: int) -> tuple[Term, Term]:
    cb = Term(id="cb", cloud="aws", kind="capacity-block", discount=0.3, accelerators=("H100",),
              durations_weeks=(1, 2), start_within_weeks=2, start_every_weeks=1, lead_weeks=0, max_nodes=2,
              guarantees_capacity=True, uses_quota=False, payment="upfront", source="test", min_gpus_per_node=8)
    sp = Term(id="sp", cloud="aws", kind="savings-plan", discount=0.25, accelerators=("H100",),
              durations_weeks=(sp_weeks,), start_within_weeks=0, start_every_weeks=1, lead_weeks=0, max_nodes=1,
              guarantees_capacity=False, uses_quota=True, payment="monthly", source="test", scope="family-region")
    return cb, sp


def _book(sp_weeks: int, spot_nodes: float) -> Book:
    return Book(_terms(sp_weeks), {"aws": 0}, {"aws": 0.5}, {"aws": 1.0}, {}, (), {}, {"aws": spot_nodes},
                "last-weeks", 2)


def _forecast(demand: tuple[float, ...], interruptible: float) -> Forecast:
    return Forecast(len(demand), (DemandClass("c", "llm", ("H100",), demand, interruptible, 1, gpus_per_job=8,
                                              hours_per_run=10, checkpoint_write_minutes=1),))


def oracle(demand: tuple[float, ...], interruptible: float, spot_nodes: float, blocks: dict[tuple[int, int], int],
           sp_usd_h: float, sp_weeks: int, held: tuple[float, float], tail_k: int) -> float:
    """USD of one commitment choice: Capacity Blocks {(start, weeks): nodes} and a plan of ``sp_usd_h`` from week 0."""
    h_d, h_s = held  # GPU-hours held per progress-hour, on demand (or held) and on spot
    weeks = len(demand)
    total = sum(n * NODE_WEEK * w * CB_PRICE for (_, w), n in blocks.items())
    total += sp_usd_h * HOURS_PER_WEEK * sp_weeks
    past = max(sp_weeks - weeks, 0)
    last = set(range(weeks - min(tail_k, weeks), weeks))
    spot_cap = 0.5 * spot_nodes * NODE_WEEK  # GPU-hours: availability share x nodes
    for w, d in enumerate(demand):
        cap = sum(n * NODE_WEEK for (s, k), n in blocks.items() if s <= w < s + k)
        r = min(d, cap / h_d)
        rest = d - r
        smax = min(interruptible * d, spot_cap / h_s, rest)
        budget = sp_usd_h * HOURS_PER_WEEK  # USD of plan spend this week
        credit = past / len(last) if w in last and past else 0.0

        def week_cost(s: float, rest: float = rest, budget: float = budget, credit: float = credit) -> float:
            gpu_h = (rest - s) * h_d
            covered = min(gpu_h, budget / SP_RATE)
            return SPOT / G * h_s * s + OD / G * (gpu_h - covered) - credit * covered * SP_RATE

        cands = {0.0, smax, min(max(rest - budget / SP_RATE / h_d, 0.0), smax)}
        total += min(week_cost(s) for s in cands)
    return total


def _golden(fn, lo: float, hi: float, iters: int = 80) -> float:
    phi = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    c, d = b - phi * (b - a), a + phi * (b - a)
    fc, fd = fn(c), fn(d)
    for _ in range(iters):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - phi * (b - a)
            fc = fn(c)
        else:
            a, c, fc = c, d, fd
            d = a + phi * (b - a)
            fd = fn(d)
    return min(fn(lo), fn(hi), fc, fd)


@pytest.mark.parametrize(("demand", "interruptible", "spot_nodes", "sp_weeks"), [
    ((1.5 * NODE_WEEK, 0.4 * NODE_WEEK, 2.0 * NODE_WEEK), 0.0, 4, 3),
    ((2.0 * NODE_WEEK, 2.0 * NODE_WEEK, 0.5 * NODE_WEEK), 0.5, 1, 3),
    ((0.2 * NODE_WEEK, 2.5 * NODE_WEEK, 1.0 * NODE_WEEK), 0.3, 0.5, 5),  # the plan runs 2 weeks past the horizon
    ((1.0 * NODE_WEEK, 1.0 * NODE_WEEK, 0.1 * NODE_WEEK), 0.0, 4, 5),  # its last weeks leave the plan unused
])
def test_the_milp_is_the_cheapest_of_every_commitment_choice_with_savings_plans_as_spend(
        demand, interruptible, spot_nodes, sp_weeks):
    book = _book(sp_weeks, spot_nodes)
    offers = [offer("p5.48xlarge", "us-east-1", price=OD, spot=SPOT)]
    q = quotas()  # no quota rows: on-demand unbounded, spot bounded by spot_nodes (an assumption of the data)
    f = _forecast(demand, interruptible)
    ps = pools(offers, {"H100"})
    options = buys(book, ps, f.weeks)
    blocks = [b for b in options if b.term.id == "cb"]
    plans = [b for b in options if b.term.id == "sp"]
    assert len(blocks) == 5 and len(plans) == 1 and plans[0].past == max(sp_weeks - 3, 0)
    ft = fit(f.classes[0], ps[0], 0.05)
    assert ft is not None
    held = (ft.held_d, ft.held_s)
    best = math.inf
    for nodes in itertools.product(range(3), repeat=len(blocks)):
        choice = {(b.start, b.weeks): n for b, n in zip(blocks, nodes, strict=True) if n}
        best = min(best, _golden(lambda c, choice=choice: oracle(demand, interruptible, spot_nodes, choice, c,
                                                                  sp_weeks, held, 2), 0.0, 2 * OD))
    got = solve(f, offers, q, book, mip_rel_gap=1e-9)
    assert got.unserved_gpu_hours == pytest.approx(0.0, abs=1e-6)
    assert got.total_usd == pytest.approx(best, rel=1e-6)
    # and the oracle prices the MILP's own choice at the MILP's total
    chosen = {(b.start, b.weeks): n for b, n in got.buy_nodes.items() if b.term.id == "cb"}
    plan = sum(n for b, n in got.buy_nodes.items() if b.term.id == "sp")
    assert oracle(demand, interruptible, spot_nodes, chosen, plan, sp_weeks, held, 2) == pytest.approx(
        got.total_usd, rel=1e-6)


def test_a_savings_plan_holds_no_capacity():
    """On-demand capacity nobody can get (availability 0) is not made by a Savings Plan: the hours stay unserved
    and no plan is bought (the old model served 989.7 GPU-h from a plan that on-demand could not)."""
    cb, sp = _terms(3)
    book = Book((sp,), {"aws": 0}, {"aws": 0.5}, {"aws": 1.0}, {("aws", "us-east-1", "p5.48xlarge"): (0.0, 0.0)})
    f = _forecast((NODE_WEEK, NODE_WEEK, NODE_WEEK), 0.0)
    got = solve(f, [offer("p5.48xlarge", "us-east-1", price=OD, spot=SPOT)], quotas(), book, mip_rel_gap=1e-9)
    assert got.commitments == () and got.total_usd == 0.0
    assert got.unserved_gpu_hours == pytest.approx(3 * NODE_WEEK)
    # a Capacity Block does hold capacity: the same forecast is served
    held = Book((cb,), {"aws": 0}, {"aws": 0.5}, {"aws": 1.0}, {("aws", "us-east-1", "p5.48xlarge"): (0.0, 0.0)})
    assert solve(f, [offer("p5.48xlarge", "us-east-1", price=OD, spot=SPOT)], quotas(), held,
                 mip_rel_gap=1e-9).unserved_gpu_hours < 0.2 * NODE_WEEK
