"""The dispatcher's prices of a job on the fleet's pools (issue 30, dispatch at fleet scale): one engine plan per job
without its data, the data's moves added per region, gives every figure the engine's own plan of the job gives, bit
for bit, and excludes the same pools for the same reasons; jobs whose exclusions depend on the transfer time (a
deadline, a price of delay) or that move nothing are planned whole."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from placement.dispatch.decide import _JOB_DATASET, _Costs, _dry_job
from placement.dispatch.model import Pricing, WorkerState
from placement.fleet.stacks import ClusterStack, Pool
from placement.model.catalog import embedded_catalog
from placement.model.jobspec import JobSpec, parse_job
from placement.plan.job import plan, runnable_figures

SPECS: list[dict[str, Any]] = [
    {"gpus": 8, "hours": 6, "data": {"dataset": {"uri": "s3://d/x", "region": "us-east-1", "size_gb": 500}}},
    {"gpus": 16, "hours": 12, "data": {"dataset": {"uri": "gs://d/x", "region": "europe-west4", "size_gb": 2000},
                                       "outputs_gb": 40}},
    {"gpus": 32, "hours": 24, "data": {"dataset": {"uri": "s3://d/x", "region": "eu-west-1", "size_gb": 50},
                                       "outputs_gb": 5, "throughput_gbps": 0.5}},
    {"gpus": 8, "hours": 2, "capacity": "spot", "data": {"dataset": {"uri": "gs://d/x", "region": "us-central1",
                                                                     "size_gb": 50}},
     "checkpoint": {"size_gb": 300}},
    {"gpus": 8, "hours": 2, "max_usd_per_hour": 60,
     "data": {"dataset": {"uri": "s3://d/x", "region": "us-west-2", "size_gb": 500}}},
]


def _job(spec: dict[str, Any], name: str = "j") -> JobSpec:
    return parse_job({"name": name, "accelerator": "H100", **spec})


def _fleet() -> tuple[Pricing, list[WorkerState]]:
    """Every H100 8-GPU offer of the embedded catalog as a worker with a spot and an on-demand pool."""
    offers = sorted((o for o in embedded_catalog().offers
                     if o.shape.accelerator == "H100" and o.shape.gpus == 8 and o.price),
                    key=lambda o: (o.cloud, o.region, o.zone, o.instance_type))
    workers = []
    for i, o in enumerate(offers):
        key = f"w{i}"
        pools = (Pool(f"{key}-spot", o.instance_type, "spot", o.zone, 4),
                 Pool(f"{key}-od", o.instance_type, "on-demand", o.zone, 2))
        stack = ClusterStack(stack=key, cloud=o.cloud, region=o.region, cluster_name=f"c-{key}", pools=pools,
                             kubeconfig=None, checkpoint_uri=None, filesystem=None, service_account=None,
                             local_queues=None)
        workers.append(WorkerState(key=key, cluster=stack))
    return Pricing(tuple(embedded_catalog().offers)), workers


@pytest.mark.parametrize("spec", SPECS)
def test_the_data_added_per_region_gives_the_engines_own_figures(spec: dict[str, Any]) -> None:
    pricing, workers = _fleet()
    costs = _Costs(pricing, workers)
    job = _job(spec)
    assert _dry_job(job) is not None
    priced = costs.of(job)
    whole = plan(job, costs.offers)
    assert priced.plan is not whole
    assert priced.runnable == runnable_figures(whole)  # exact: the same sums in the same order
    assert priced.runnable, "the fleet prices the job somewhere"
    excluded = {(id(c.offer), str(c.capacity)): str(c.excluded) for c in whole.excluded}
    assert excluded, "some pool is excluded (spot-only, price cap, or a capacity the job refuses)"
    for key, why in excluded.items():
        assert priced.excluded(key) == why


def test_jobs_of_one_shape_share_one_plan_whatever_their_data() -> None:
    pricing, workers = _fleet()
    costs = _Costs(pricing, workers)
    a = costs.of(_job(SPECS[0]))
    b = costs.of(_job({**SPECS[0], "data": SPECS[1]["data"]}))
    assert a.plan is b.plan
    assert a.runnable != b.runnable


@pytest.mark.parametrize("extra", [{"deadline_hours": 9}, {"usd_per_hour_of_delay": 40}, {"data": None}])
def test_a_job_whose_exclusions_follow_its_transfer_time_is_planned_whole(extra: dict[str, Any]) -> None:
    pricing, workers = _fleet()
    costs = _Costs(pricing, workers)
    spec = {k: v for k, v in {**SPECS[1], **extra}.items() if v is not None}
    job = _job(spec)
    assert _dry_job(job) is None
    assert costs.of(job).runnable == runnable_figures(plan(job, costs.offers))


def test_a_transfer_that_takes_no_finite_time_is_left_to_the_engine() -> None:
    pricing, workers = _fleet()
    costs = _Costs(pricing, workers)
    job = replace(_job(SPECS[1]), throughput_gbps=(("cross_cloud", 1e-320),))
    whole = plan(job, costs.offers)
    assert costs.of(job).runnable == runnable_figures(whole)
    assert any("no finite time" in str(c.excluded) for c in whole.excluded)


def test_plans_memoised_by_a_jobs_key_are_shared_as_those_memoised_by_the_job() -> None:
    # The key _Pass.ask makes (the fields but the name, the dataset by an id equal for equal datasets): the same
    # figures, and the same plans shared (a dry job's by the key with its data cleared) as the JobSpecs share them.
    pricing, workers = _fleet()
    keyed, plain = _Costs(pricing, workers), _Costs(pricing, workers)
    canon: dict[object, int] = {}

    def key(job: JobSpec) -> tuple[object, ...]:
        values = list(job.__dict__.values())[1:]
        if job.dataset is not None:
            values[_JOB_DATASET - 1] = canon.setdefault(job.dataset, len(canon))
        return tuple(values)

    jobs = [_job(SPECS[0]), _job(SPECS[0], name="k"), _job({**SPECS[0], "hours": 7}),
            _job({**SPECS[0], "data": SPECS[1]["data"]}), _job(SPECS[2]), _job({**SPECS[2], "gpus": 16}),
            replace(_job(SPECS[2]), throughput_gbps=()), replace(_job(SPECS[2]), outputs_gb=0.0), _job(SPECS[3]),
            _job({**SPECS[1], "deadline_hours": 9})]
    a = [keyed.of(replace(job, name=""), key(job)) for job in jobs]
    b = [plain.of(replace(job, name="")) for job in jobs]
    assert [p.runnable for p in a] == [p.runnable for p in b]
    assert [[p is q for q in a] for p in a] == [[p is q for q in b] for p in b]
    assert [[p.plan is q.plan for q in a] for p in a] == [[p.plan is q.plan for q in b] for p in b]
    assert a[0] is a[1] and a[0].plan is a[3].plan and a[4].plan is a[6].plan is a[7].plan
    assert a[0].plan is not a[2].plan
