"""The cost model against hand-computed cases."""

from __future__ import annotations

import math

import pytest
from factories import job, offer

from placement.model.egress import egress_book, tiered_usd, transfer_hours, transfer_path, transfer_usd
from placement.plan.job import candidates, spot_overhead


def _one(j, o, capacity):
    (c,) = [c for c in candidates(j, [o]) if c.capacity == capacity]
    return c


def test_on_demand_compute_is_nodes_times_price_times_hours():
    j = job(gpus=12, hours=5, capacity="on-demand")  # 12 GPUs on 8-GPU nodes -> 2 nodes
    c = _one(j, offer("p5.48xlarge", "us-east-1", price=55.04), "on-demand")
    assert c.nodes == 2
    assert c.usd_per_hour == pytest.approx(110.08)
    assert c.cost.compute_usd == pytest.approx(2 * 55.04 * 5)
    assert c.cost.egress_usd == 0


def test_spot_compute_adds_interruption_overhead():
    # r = 0.2/h on one node, interval 60 min, restart 30 min, no replacement wait, no write time known:
    # Daly's factor (e^(R·τ) − 1)/(R·τ) · e^(R·ρ).
    j = job(gpus=8, hours=10, capacity="spot", checkpoint={"interval_minutes": 60},
            spot={"interruptions_per_hour": 0.2, "restart_minutes": 30, "replacement_minutes": 0})
    c = _one(j, offer("p5.48xlarge", "us-east-1", spot=20.0), "spot")
    factor = math.expm1(0.2) / 0.2 * math.exp(0.2 * 0.5)
    assert c.cost.compute_usd == pytest.approx(20.0 * 10 * factor)
    assert c.cost.spot_overhead == pytest.approx(spot_overhead(j, 0.2)) == pytest.approx(factor - 1)


def test_live_interruption_rate_only_raises_the_default_rate():
    j = job(capacity="spot")
    low = _one(j, offer("p5.48xlarge", "us-east-1", interruptions_per_hour=0.5), "spot")
    high = _one(j, offer("p5.48xlarge", "us-east-1", interruptions_per_hour=0.01), "spot")
    assert (low.interruptions_per_hour, low.interruption_source) == (0.5, "live")
    assert (high.interruptions_per_hour, high.interruption_source) == (j.interruptions_per_hour, "default")


def test_the_jobs_own_interruption_rate_wins_over_a_live_one():
    # Issue 26: a job's explicit spot.interruptions_per_hour "still wins over everything", a live rate too.
    j = job(capacity="spot", spot={"interruptions_per_hour": 0.1})
    for live in (0.5, 0.01):
        c = _one(j, offer("p5.48xlarge", "us-east-1", interruptions_per_hour=live), "spot")
        assert (c.interruptions_per_hour, c.interruption_source) == (0.1, "job")


DATA = {"dataset": {"uri": "s3://b/d", "size_gb": 1000, "region": "us-east-1"}, "outputs_gb": 100}


def test_same_region_data_is_free():
    c = _one(job(capacity="on-demand", data=DATA), offer("p5.48xlarge", "us-east-1"), "on-demand")
    assert c.cost.egress_usd == 0


def test_inter_region_uses_the_default_rate_both_ways():
    c = _one(job(capacity="on-demand", data=DATA), offer("p5.48xlarge", "us-west-2"), "on-demand")
    assert c.cost.dataset_egress_usd == pytest.approx(1000 * 0.02)
    assert c.cost.outputs_egress_usd == pytest.approx(100 * 0.02)


def test_inter_region_pair_priced_differently():
    c = _one(job(capacity="on-demand", data=DATA), offer("p5.48xlarge", "us-east-2"), "on-demand")
    assert c.cost.egress_usd == pytest.approx(1100 * 0.01)


def test_inter_region_priced_by_source_region():
    data = {"dataset": {"uri": "s3://b/d", "size_gb": 1000, "region": "sa-east-1"}, "outputs_gb": 100}
    c = _one(job(capacity="on-demand", data=data), offer("p5.48xlarge", "us-east-1"), "on-demand")
    assert c.cost.dataset_egress_usd == pytest.approx(1000 * 0.138)  # sa-east-1 is the source
    assert c.cost.outputs_egress_usd == pytest.approx(100 * 0.02)  # us-east-1 is the source


GIB = 2**30 / 1e9  # GB in one GiB
TIB = 2**40 / 1e9  # GB in one TiB


def test_cross_cloud_uses_source_internet_tiers():
    # 20,000 GB out of AWS us-east-1: 10,240 at 0.09, 9,760 at 0.085 (no free allowance per job).
    data = {"dataset": {"uri": "s3://b/d", "size_gb": 20000, "region": "us-east-1"}, "outputs_gb": 2000}
    c = _one(job(capacity="on-demand", data=data), offer("a3-highgpu-8g", "us-central1"), "on-demand")
    assert c.cost.dataset_egress_usd == pytest.approx(10240 * 0.09 + 9760 * 0.085)
    # 2,000 GB out of GCP: the first TiB (1,099.5 GB) at 0.12 per GiB, the rest at 0.11 per GiB.
    assert c.cost.outputs_egress_usd == pytest.approx((TIB * 0.12 + (2000 - TIB) * 0.11) / GIB)
    # the AWS dataset leaves through no NAT (the candidate is on GCP): Cloud NAT processes the S3 read (issue 27)
    assert c.cost.total_usd == pytest.approx(c.cost.compute_usd + c.cost.egress_usd + c.cost.nat_usd)


def test_first_tier_override_for_expensive_source_regions():
    assert transfer_usd(egress_book(), "aws", "sa-east-1", "gcp", "us-central1", 1100) == pytest.approx(1100 * 0.15)


def test_gcp_inter_region_by_continent():
    # GCP publishes these per GiB: per GB they are 7% lower.
    book = egress_book()
    assert transfer_usd(book, "gcp", "us-central1", "gcp", "us-east4", 100) == pytest.approx(100 * 0.02 / GIB)
    assert transfer_usd(book, "gcp", "asia-east1", "gcp", "asia-northeast1", 100) == pytest.approx(100 * 0.05 / GIB)
    assert transfer_usd(book, "gcp", "us-central1", "gcp", "europe-west4", 100) == pytest.approx(100 * 0.08 / GIB)
    assert transfer_usd(book, "gcp", "australia-southeast1", "gcp", "us-east4", 100) == pytest.approx(100 * 0.15 / GIB)


def test_tiers_are_marginal():
    tiers = ((10.0, 1.0), (20.0, 0.5), (None, 0.1))
    assert tiered_usd(5, tiers) == 5
    assert tiered_usd(15, tiers) == 10 + 2.5
    assert tiered_usd(30, tiers) == 10 + 5 + 1
    assert tiered_usd(0, tiers) == 0


def test_missing_price_is_excluded_not_free():
    (c,) = [c for c in candidates(job(capacity="spot"), [offer("p5.48xlarge", "us-east-1", spot=None)])]
    assert c.excluded and "not offered as spot" in c.excluded
    assert math.isinf(c.usd_per_hour)


def test_the_aws_monthly_allowance_is_not_subtracted_per_job():
    # 1,000 GB from S3 to GCP: every GB at 0.09. The 100 free GB are one per account per month.
    book = egress_book()
    assert transfer_usd(book, "aws", "us-east-1", "gcp", "us-central1", 1000) == pytest.approx(1000 * 0.09)
    assert book.aws.internet_free_gb_per_month == 100
    # opting in: the allowance still left this month comes off this job's bill
    assert transfer_usd(book, "aws", "us-east-1", "gcp", "us-central1", 1000, allowance_gb=100) == \
        pytest.approx(900 * 0.09)
    assert transfer_usd(book, "aws", "us-east-1", "gcp", "us-central1", 60, allowance_gb=100) == 0
    # it never applies within AWS or to GCP's egress
    assert transfer_usd(book, "aws", "us-east-1", "aws", "us-west-2", 1000, allowance_gb=100) == \
        pytest.approx(1000 * 0.02)
    assert transfer_usd(book, "gcp", "us-central1", "aws", "us-east-1", 50, allowance_gb=100) == \
        pytest.approx(50 * 0.12 / GIB)


def test_egress_allowance_reaches_the_candidate_cost():
    data = {"dataset": {"uri": "s3://b/d", "size_gb": 1000, "region": "us-east-1"}}
    j = job(capacity="on-demand", data=data)
    o = offer("a3-highgpu-8g", "us-central1")
    (c,) = candidates(j, [o])
    (opted,) = candidates(j, [o], egress_allowance_gb=100)
    assert c.cost.dataset_egress_usd == pytest.approx(1000 * 0.09)
    assert opted.cost.dataset_egress_usd == pytest.approx(900 * 0.09)


@pytest.mark.parametrize(("gb", "want_gib_usd"), [
    (TIB, 1024 * 0.12),  # exactly 1 TiB: all in the first tier
    (TIB + GIB, 1024 * 0.12 + 0.11),  # one GiB past it: that GiB at the second rate
    (10 * TIB, 1024 * 0.12 + 9 * 1024 * 0.11),  # exactly 10 TiB
    (10 * TIB + GIB, 1024 * 0.12 + 9 * 1024 * 0.11 + 0.08),
    (1000, 1000 / GIB * 0.12),  # 1,000 GB is under 1 TiB (1,099.5 GB): once read as the 1,024 GB tier bound
    (1050, 1050 / GIB * 0.12),
])
def test_gcp_internet_tiers_are_tib_and_rates_per_gib(gb, want_gib_usd):
    assert transfer_usd(egress_book(), "gcp", "us-central1", "aws", "us-east-1", gb) == pytest.approx(want_gib_usd)


def test_transfer_hours_are_gb_over_gbps():
    assert transfer_hours(1000, 8) == pytest.approx(1000 * 8 / 8 / 3600)  # 1,000 GB at 8 Gbps: 1,000 s
    assert transfer_hours(0, 5) == 0
    assert transfer_path("aws", "us-east-1", "aws", "us-east-1") == "same_region"
    assert transfer_path("aws", "us-east-1", "aws", "us-west-2") == "inter_region"
    assert transfer_path("aws", "us-east-1", "gcp", "us-east1") == "cross_cloud"
