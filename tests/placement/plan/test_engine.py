"""Ranking and feasibility: the chosen candidate is the cheapest feasible one."""

from __future__ import annotations

import datetime as dt
import math

import pytest
from factories import job, offer, quotas, reservation
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.model.egress import egress_book
from placement.model.physics_data import physics_book
from placement.plan.job import plan, why_chosen

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


def test_multi_node_without_a_fabric_runs_slowly_unless_the_job_requires_one():
    # a2-megagpu-16g holds 16 A100s but has no GPU fabric: two of them run on 100 Gbps VPC networking, at a
    # low scaling efficiency (issue 19), unless the job sets require_fabric.
    o = offer("a2-megagpu-16g", "us-central1")
    assert [c.nodes for c in plan(job(accelerator="A100", gpus=16), [o]).ranked] == [1, 1]
    p = plan(job(accelerator="A100", gpus=32), [o])
    assert [c.nodes for c in p.ranked] == [2, 2]
    assert all(0 < c.scaling_efficiency < 0.5 for c in p.ranked)
    p = plan(job(accelerator="A100", gpus=32, require_fabric=True), [o])
    assert not p.ranked and all("require_fabric" in c.excluded for c in p.excluded)
    # the same with an explicit node size: 16 single-GPU nodes without a fabric
    p = plan(job(gpus=16, gpus_per_node=1, require_fabric=True), [offer("a3-highgpu-1g", "us-central1")])
    assert not p.ranked and all("fabric" in c.excluded for c in p.excluded)


def test_allow_deny_and_price_cap_exclude_with_reason():
    offers = [offer("p5.48xlarge", "us-east-1", price=55), offer("a3-highgpu-8g", "us-central1", price=80)]
    p = plan(job(capacity="on-demand", clouds={"deny": ["gcp"]}, max_usd_per_hour=50), offers)
    assert p.chosen is None
    reasons = sorted(c.excluded for c in p.excluded)
    assert any("over max_usd_per_hour" in r for r in reasons) and any("clouds.deny" in r for r in reasons)


def test_ties_break_on_lower_hourly_price():
    # same total: 15.5 $/h x 10 h + 1000 GB x (0.02 $/GB egress + 0.045 $/GB NAT processing, issue 27) = 220
    # = 22 $/h x 10 h with no egress
    data = {"dataset": {"uri": "s3://b/d", "size_gb": 1000, "region": "us-west-2"}}
    moved = offer("p5.48xlarge", "us-east-1", price=15.5)
    local = offer("p5.48xlarge", "us-west-2", price=22)
    p = plan(job(capacity="on-demand", data=data), [local, moved])
    assert p.ranked[0].cost.total_usd == p.ranked[1].cost.total_usd
    assert p.chosen.offer is moved


# ----------------------------------------------------------------------------- node shape


def test_multi_node_jobs_run_on_full_size_nodes_only():
    # Equal $/GPU: p5.4xlarge (1 H100, 1 EFA) x32 was ranked level with p5.48xlarge (8 on NVLink, 32 EFA) x4.
    small = offer("p5.4xlarge", "us-east-1", price=55.04 / 8)
    big = offer("p5.48xlarge", "us-east-1", price=55.04)
    p = plan(job(gpus=32, capacity="on-demand"), [small, big])
    assert [(c.offer.instance_type, c.nodes) for c in p.ranked] == [("p5.48xlarge", 4)]
    (ex,) = p.excluded
    assert ex.offer is small and "full 8-GPU H100 nodes" in ex.excluded and "gpus_per_node: 1" in ex.excluded


def test_a_small_job_uses_one_node_that_holds_all_its_gpus():
    small = offer("p5.4xlarge", "us-east-1", price=55.04 / 8)
    big = offer("p5.48xlarge", "us-east-1", price=55.04)
    p = plan(job(gpus=4, capacity="on-demand"), [small, big])
    (c,) = p.ranked
    assert (c.offer.instance_type, c.nodes, c.billed_gpus, c.idle_gpus) == ("p5.48xlarge", 1, 8, 4)
    assert "4 idle GPUs billed (8 for 4)" in c.notes
    (ex,) = p.excluded
    assert "4 GPUs fit on one H100 node" in ex.excluded


def test_gpus_per_node_overrides_the_node_shape():
    small = offer("p5.4xlarge", "us-east-1", price=55.04 / 8)
    big = offer("p5.48xlarge", "us-east-1", price=55.04)
    p = plan(job(gpus=4, capacity="on-demand", gpus_per_node=1), [small, big])
    assert [(c.offer.instance_type, c.nodes, c.idle_gpus) for c in p.ranked] == [("p5.4xlarge", 4, 0)]
    assert "gpus_per_node is 1; p5.48xlarge has 8" in p.excluded[0].excluded


def test_billed_but_idle_gpus_when_the_last_node_is_not_full():
    (c,) = plan(job(gpus=12, capacity="on-demand"), [offer("p5.48xlarge", "us-east-1", price=50)]).ranked
    assert (c.nodes, c.billed_gpus, c.idle_gpus, c.usd_per_hour) == (2, 16, 4, 100)


def test_largest_node_is_per_cloud():
    # GCP's largest A100 node holds 16 (a2-megagpu-16g), AWS's 8 (p4d): 16 A100s are 1 GCP node or 2 AWS nodes.
    p = plan(job(accelerator="A100", gpus=16, capacity="on-demand"),
             [offer("p4d.24xlarge", "us-east-1"), offer("a2-megagpu-16g", "us-central1"),
              offer("a2-highgpu-8g", "us-central1")])
    assert sorted((c.offer.instance_type, c.nodes) for c in p.ranked) == [("a2-megagpu-16g", 1), ("p4d.24xlarge", 2)]
    assert [c.offer.instance_type for c in p.excluded] == ["a2-highgpu-8g"]


# ----------------------------------------------------------------------------- interruptions, speed


def test_spot_interruptions_scale_with_the_gang():
    # r = 0.1 per node; 16 GPUs on 8-GPU nodes = 2 nodes: the job is interrupted at 0.2/h (Daly's model with a
    # 60-minute interval, no write time known, restart 30 min + the replacement wait).
    j = job(gpus=16, hours=10, capacity="spot", checkpoint={"interval_minutes": 60},
            spot={"interruptions_per_hour": 0.1, "restart_minutes": 30, "replacement_minutes": 0})
    (c,) = plan(j, [offer("p5.48xlarge", "us-east-1", spot=20.0)]).ranked
    assert c.interruptions_per_hour == pytest.approx(0.2)
    ratio = math.expm1(0.2 * 1.0) / 0.2 * math.exp(0.2 * 0.5)
    assert c.cost.spot_overhead == pytest.approx(ratio - 1)
    assert c.cost.compute_usd == pytest.approx(2 * 20.0 * 10 * ratio)
    assert c.ready_hours == pytest.approx(10 * ratio)
    assert c.expected_interruptions == pytest.approx(0.2 * 10 * ratio)


def test_hours_are_the_run_time_on_the_first_accelerator_listed():
    a100 = offer("p4d.24xlarge", "us-east-1", price=40)
    h100 = offer("p5.48xlarge", "us-east-1", price=55)
    p = plan(job(accelerator=["A100", "H100"], hours=48, capacity="on-demand"), [a100, h100])
    by = {c.offer.shape.accelerator: c for c in p.ranked}
    speed = physics_book().speeds["llm"]
    assert by["A100"].hours == 48
    assert by["H100"].hours == pytest.approx(48 * speed["A100"] / speed["H100"])
    assert p.chosen.offer is h100  # cheaper per unit of training progress, dearer per hour
    assert by["H100"].cost.compute_usd == pytest.approx(55 * 48 * speed["A100"])


def test_job_speed_overrides_the_shape_data():
    j = job(accelerator=["A100", "H100"], hours=10, capacity="on-demand", speed={"A100": 0.5})
    p = plan(j, [offer("p4d.24xlarge", "us-east-1"), offer("p5.48xlarge", "us-east-1")])
    assert {c.offer.shape.accelerator: c.hours for c in p.ranked} == {"A100": 10, "H100": 5}


# ----------------------------------------------------------------------------- zones and ties


def test_local_zones_need_an_opt_in():
    az = offer("p5.48xlarge", "us-east-1", zone="use1-az1", price=55)
    local = offer("p5.48xlarge", "us-east-1", zone="use1-atl2-az1", price=40)
    p = plan(job(capacity="on-demand"), [az, local])
    assert [c.offer for c in p.ranked] == [az]
    assert "use1-atl2-az1 is a Local/Wavelength Zone; list it in zones.opt_in" in p.excluded[0].excluded
    p = plan(job(capacity="on-demand", zones={"opt_in": ["use1-atl2-az1"]}), [az, local])
    assert [c.offer for c in p.ranked] == [local, az]
    p = plan(job(capacity="on-demand", zones={"allow": ["use1-atl2-az1"]}), [az, local])
    assert [c.offer for c in p.ranked] == [local]
    p = plan(job(capacity="on-demand", zones={"deny": ["use1-az1"], "opt_in": ["use1-atl2-az1"]}), [az, local])
    assert [c.offer for c in p.ranked] == [local]
    assert p.excluded[0].excluded == "zone use1-az1 in zones.deny"


def test_ties_break_toward_fewer_nodes():
    # 16 A100s at the same total: one a2-megagpu-16g (GCP) or two p4d (AWS). AWS used to win on the name.
    # Two p4d scale below one node (400 Gbps EFA), so the a2 price that ties is what two p4d cost.
    j = job(accelerator="A100", gpus=16, capacity="on-demand")
    (p4d,) = plan(j, [offer("p4d.24xlarge", "us-east-1", price=40)]).ranked
    (a2,) = plan(j, [offer("a2-megagpu-16g", "us-central1", price=1.0)]).ranked
    a2_price = p4d.cost.compute_usd / a2.hours
    p = plan(j, [offer("p4d.24xlarge", "us-east-1", price=40), offer("a2-megagpu-16g", "us-central1", price=a2_price)])
    assert [(c.offer.cloud, c.nodes) for c in p.ranked] == [("gcp", 1), ("aws", 2)]
    assert p.ranked[0].cost.total_usd == pytest.approx(p.ranked[1].cost.total_usd, abs=0.005)
    assert "a tie with rank 2" in why_chosen(p) and "fewer nodes (1 against 2)" in why_chosen(p)


def test_ties_then_follow_a_stable_documented_order():
    offers = [offer("p5.48xlarge", r, zone=z, price=50) for r, z in
              [("us-west-2", "usw2-az1"), ("us-east-1", "use1-az2"), ("us-east-1", "use1-az1")]]
    orders = {tuple((c.offer.region, c.offer.zone, c.capacity) for c in plan(job(), list(o)).ranked)
              for o in (offers, offers[::-1], [offers[1], offers[0], offers[2]])}
    assert len(orders) == 1
    (order,) = orders
    assert [x[:2] for x in order if x[2] == "on-demand"] == [("us-east-1", "use1-az1"), ("us-east-1", "use1-az2"),
                                                               ("us-west-2", "usw2-az1")]
    # and at an equal total, reserved capacity comes before on-demand
    r = reservation(zone="use1-az1", usd_per_hour=50)
    p = plan(job(capacity="any"), [offer("p5.48xlarge", "us-east-1", zone="use1-az1", price=50, spot=None)],
             reservations=[r])
    assert [c.capacity for c in p.ranked] == ["reserved", "on-demand"]


# ----------------------------------------------------------------------------- why, cheaper unconfirmed


def test_why_compares_with_the_tables_rank_2():
    a = offer("p5.48xlarge", "us-east-1", zone="use1-az1", price=50)
    b = offer("p5.48xlarge", "us-east-1", zone="use1-az2", price=51)
    c = offer("p5.48xlarge", "us-west-2", zone="usw2-az1", price=60)
    p = plan(job(capacity="on-demand"), [a, b, c])
    assert p.ranked[1].offer is b
    assert "$10.00 less than rank 2 aws us-east-1 use1-az2 p5.48xlarge x1 on-demand" in why_chosen(p)


def test_a_cheaper_quota_unknown_candidate_is_reported():
    cheap = offer("p5.48xlarge", "us-east-1", price=10)
    dear = offer("p5.48xlarge", "us-west-2", price=50)
    q = quotas(("aws", "us-west-2", "L-417A185B", 192, 0))
    p = plan(job(capacity="on-demand"), [cheap, dear], q)
    assert p.chosen.offer is dear and p.chosen.feasible is True
    rank, c = p.cheaper_unconfirmed
    assert (rank, c.offer) == (2, cheap)
    text = why_chosen(p)
    assert "Rank 2, aws us-east-1" in text and "$400.00 less but its quota is unknown" in text
    assert "192 vcpu of headroom on L-417A185B in us-east-1" in text
    # not when the quota-unknown one is dearer, nor when nothing known is chosen
    assert plan(job(capacity="on-demand"), [offer("p5.48xlarge", "us-east-1", price=90), dear], q) \
        .cheaper_unconfirmed is None
    assert plan(job(capacity="on-demand"), [cheap, dear]).cheaper_unconfirmed is None


# ----------------------------------------------------------------------------- transfer time, deadline, delay

BIG = {"dataset": {"uri": "s3://b/d", "size_gb": 20000, "region": "us-east-1"}}


def test_transfer_and_ready_hours_per_path():
    offers = [offer("p5.48xlarge", "us-east-1", price=50), offer("p5.48xlarge", "us-west-2", price=50),
              offer("a3-highgpu-8g", "us-central1", price=50)]
    book = egress_book()
    by = {c.offer.region: c for c in plan(job(hours=10, capacity="on-demand", data=BIG), offers).ranked}
    for region, path in (("us-east-1", "same_region"), ("us-west-2", "inter_region"), ("us-central1", "cross_cloud")):
        assert by[region].transfer_hours == pytest.approx(20000 * 8 / book.throughput_gbps[path] / 3600)
        assert by[region].ready_hours == pytest.approx(by[region].transfer_hours + 10)
    assert by["us-east-1"].transfer_hours < by["us-west-2"].transfer_hours < by["us-central1"].transfer_hours
    fast = job(hours=10, capacity="on-demand", data={**BIG, "throughput_gbps": {"cross_cloud": 40}})
    c = next(c for c in plan(fast, offers).ranked if c.offer.cloud == "gcp")
    assert c.transfer_hours == pytest.approx(20000 * 8 / 40 / 3600)


def test_deadline_excludes_candidates_that_finish_too_late():
    offers = [offer("p5.48xlarge", "us-east-1", price=50), offer("a3-highgpu-8g", "us-central1", price=5)]
    p = plan(job(hours=10, capacity="on-demand", data=BIG, deadline_hours=15), offers)
    assert [c.offer.cloud for c in p.ranked] == ["aws"]
    assert p.excluded[0].excluded == "ready in 18.9 h, after deadline_hours 15"


def test_value_of_time_trades_cost_for_speed():
    near = offer("p5.48xlarge", "us-east-1", price=150)  # data local: 1.8 h to stage
    far = offer("p5.48xlarge", "us-west-2", price=10)  # $400 of egress + $900 of NAT processing, 4.4 h to copy
    assert plan(job(hours=10, capacity="on-demand", data=BIG), [near, far]).chosen.offer is far
    p = plan(job(hours=10, capacity="on-demand", data=BIG, usd_per_hour_of_delay=100), [near, far])
    assert p.chosen.offer is near
    c = p.chosen
    assert c.cost.delay_usd == pytest.approx(100 * c.ready_hours)
    assert c.cost.total_usd == pytest.approx(c.cost.compute_usd + c.cost.egress_usd + c.cost.extra_usd
                                             + c.cost.delay_usd)


# ----------------------------------------------------------------------------- reservations

NOW = dt.datetime(2026, 11, 20, tzinfo=dt.UTC)


def test_reserved_capacity_needs_no_quota_and_is_bounded_by_count():
    od = offer("p5.48xlarge", "us-east-1", zone="use1-az1", price=50, spot=None)
    r = reservation(count=2, usd_per_hour=0)
    p = plan(job(gpus=16, capacity="any"), [od], reservations=[r], now=NOW)
    c = p.chosen
    assert (c.capacity, c.nodes, c.feasible, c.usd_per_hour, c.cost.compute_usd) == ("reserved", 2, True, 0, 0)
    assert (c.quota.key, c.quota.unit, c.quota.needed, c.quota.headroom) == ("reservation:r1", "node", 2, 2)
    assert c.reservation is r
    p = plan(job(gpus=24, capacity="any"), [od], reservations=[r], now=NOW)
    assert [x.capacity for x in p.ranked] == ["on-demand"]
    assert p.excluded[0].excluded == "reservation r1: needs 3 nodes, 2 free"


def test_a_reservation_ending_before_the_job_is_ready_is_excluded():
    r = reservation(ends=NOW + dt.timedelta(hours=12))
    assert plan(job(hours=10, capacity="reserved"), [], reservations=[r], now=NOW).chosen.reservation is r
    p = plan(job(hours=13, capacity="reserved"), [], reservations=[r], now=NOW)
    assert p.chosen is None
    assert "ends 2026-11-20 12:00Z, 12.0 h from now, before the job is ready (13.0 h)" in p.excluded[0].excluded
    # "now" decides: the same plan a day later finds the reservation over
    later = plan(job(hours=1, capacity="reserved"), [], reservations=[r], now=NOW + dt.timedelta(days=1))
    assert later.chosen is None


def test_capacity_kinds_select_reserved():
    od = offer("p5.48xlarge", "us-east-1", zone="use1-az1", price=50, spot=20)
    r = reservation()
    kinds = {cap: {c.capacity for c in plan(job(capacity=cap), [od], reservations=[r], now=NOW).ranked}
             for cap in ("any", "on-demand", "spot", "reserved")}
    assert kinds == {"any": {"reserved", "on-demand", "spot"}, "on-demand": {"on-demand"}, "spot": {"spot"},
                     "reserved": {"reserved"}}


def test_reserved_only_without_reservations_says_what_is_missing():
    p = plan(job(capacity="reserved"), [offer("p5.48xlarge", "us-east-1")])
    assert p.chosen is None and "no reservation of its accelerators was given" in why_chosen(p)
