"""Ranking and feasibility: the chosen candidate is the cheapest feasible one."""

from __future__ import annotations

from factories import job, offer, quotas
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.engine import plan

H100_SHAPES = ["p5.48xlarge", "p5.4xlarge", "a3-highgpu-8g", "a3-megagpu-8g", "a3-highgpu-1g"]
REGIONS = {"aws": ["us-east-1", "us-west-2", "eu-north-1"], "gcp": ["us-central1", "europe-west4"]}


@st.composite
def market(draw):
    offers = []
    for i in range(draw(st.integers(1, 12))):
        itype = draw(st.sampled_from(H100_SHAPES))
        cloud = "aws" if itype.startswith("p") else "gcp"
        region = draw(st.sampled_from(REGIONS[cloud]))
        price = draw(st.one_of(st.none(), st.floats(1, 200)))
        spot = draw(st.one_of(st.none(), st.floats(0.5, 200)))
        offers.append(offer(itype, region, zone=f"{region}-{i}", price=price, spot=spot))
    rows = []
    for cloud, regions in REGIONS.items():
        for region in regions:
            for key in (
                "L-417A185B",
                "L-C4BD4855",
                "NVIDIA_H100_GPUS",
                "PREEMPTIBLE_NVIDIA_H100_GPUS",
                "NVIDIA_H100_MEGA_GPUS",
            ):
                if draw(st.booleans()):
                    rows.append((cloud, region, key, draw(st.integers(0, 800)), draw(st.integers(0, 400))))
    return offers, quotas(*rows)


@settings(max_examples=150, deadline=None)
@given(market(), st.integers(1, 24), st.sampled_from(["spot", "on-demand", "any"]))
def test_chosen_is_cheapest_feasible(m, gpus, capacity):
    offers, q = m
    p = plan(job(gpus=gpus, capacity=capacity), offers, q)
    known = [c for c in p.ranked if c.feasible]
    unknown = [c for c in p.ranked if c.feasible is None]
    # never an infeasible candidate among the runnable ones
    assert all(c.feasible is not False for c in p.ranked)
    assert all(c.quota.fits is not False for c in p.ranked)
    if known:
        assert p.chosen is known[0]
        assert p.chosen.cost.total_usd <= min(c.cost.total_usd for c in known) + 1e-9
    elif unknown:
        assert p.chosen is unknown[0]
    else:
        assert p.chosen is None
    # every known-feasible candidate ranks before every quota-unknown one
    kinds = [c.feasible for c in p.ranked]
    assert kinds == sorted(kinds, key=lambda f: 0 if f else 1)
    # multi-node jobs only ever run on a fabric
    assert all(c.nodes == 1 or c.offer.shape.multi_node for c in p.ranked)


def test_quota_infeasible_is_never_chosen_even_when_cheapest():
    cheap = offer("p5.48xlarge", "us-east-1", price=10)
    dear = offer("p5.48xlarge", "us-west-2", price=50)
    q = quotas(("aws", "us-east-1", "L-417A185B", 192, 100), ("aws", "us-west-2", "L-417A185B", 192, 0))
    p = plan(job(capacity="on-demand"), [cheap, dear], q)
    assert p.chosen.offer is dear
    (ex,) = p.excluded
    assert ex.offer is cheap and "needs 192 vcpu, headroom 92" in ex.excluded


def test_quota_unknown_ranks_after_known_feasible_even_if_cheaper():
    cheap = offer("p5.48xlarge", "us-east-1", price=10)
    dear = offer("p5.48xlarge", "us-west-2", price=50)
    q = quotas(("aws", "us-west-2", "L-417A185B", 192, 0))
    p = plan(job(capacity="on-demand"), [cheap, dear], q)
    assert [c.offer for c in p.ranked] == [dear, cheap]
    assert p.ranked[1].feasible is None and "quota unknown" in p.ranked[1].notes


def test_gcp_quota_counts_gpus_and_spot_uses_preemptible_metric():
    o = offer("a3-highgpu-8g", "us-central1", price=80, spot=30)
    q = quotas(
        ("gcp", "us-central1", "NVIDIA_H100_GPUS", 16, 0), ("gcp", "us-central1", "PREEMPTIBLE_NVIDIA_H100_GPUS", 8, 0)
    )
    p = plan(job(gpus=16), [o], q)
    by_cap = {c.capacity: c for c in p.ranked + p.excluded}
    assert by_cap["on-demand"].quota.needed == 16 and by_cap["on-demand"].feasible is True
    assert by_cap["spot"].quota.key == "PREEMPTIBLE_NVIDIA_H100_GPUS" and by_cap["spot"].feasible is False


def test_multi_node_needs_a_fabric():
    p = plan(job(gpus=16), [offer("a3-highgpu-1g", "us-central1"), offer("a3-highgpu-8g", "us-central1")])
    assert {c.offer.instance_type for c in p.ranked} == {"a3-highgpu-8g"}
    assert all("fabric" in c.excluded for c in p.excluded)


def test_allow_deny_and_price_cap_exclude_with_reason():
    offers = [offer("p5.48xlarge", "us-east-1", price=55), offer("a3-highgpu-8g", "us-central1", price=80)]
    p = plan(job(capacity="on-demand", clouds={"deny": ["gcp"]}, max_usd_per_hour=50), offers)
    assert p.chosen is None
    reasons = sorted(c.excluded for c in p.excluded)
    assert any("over max_usd_per_hour" in r for r in reasons) and any("clouds.deny" in r for r in reasons)


def test_ties_break_on_lower_hourly_price():
    # same total: 20 $/h x 10 h + 1000 GB x 0.02 $/GB egress = 220 = 22 $/h x 10 h with no egress
    data = {"dataset": {"uri": "s3://b/d", "size_gb": 1000, "region": "us-west-2"}}
    moved = offer("p5.48xlarge", "us-east-1", price=20)
    local = offer("p5.48xlarge", "us-west-2", price=22)
    p = plan(job(capacity="on-demand", data=data), [local, moved])
    assert p.ranked[0].cost.total_usd == p.ranked[1].cost.total_usd
    assert p.chosen.offer is moved
