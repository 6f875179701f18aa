"""Issue 27: no arithmetic edge crashes the physics, a plan or a batch. Hypothesis over the whole legal range
of every job key the physics reads, 0 and denormals included (bounded to a few seconds)."""

from __future__ import annotations

import math

from factories import offer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placement.model.bill import bill_book, checkpoint_usd, nat_usd
from placement.model.jobspec import MAX_GB, MAX_HOURS, MAX_RATE, parse_job
from placement.model.physics import (
    activation_gb_per_gpu,
    efficiency,
    gang,
    impractical_reason,
    memory_reason,
    optimal_interval,
    wall_ratio,
)
from placement.model.physics_data import physics_book
from placement.plan.job import plan, why_chosen

EDGES = (0.0, 5e-324, 2.2250738585072014e-308, 1e-300, 1e-12, 1.0)


def nonneg(top: float) -> st.SearchStrategy[float]:
    return st.one_of(st.sampled_from([e for e in EDGES if e <= top] + [top]),
                     st.floats(0.0, top, allow_nan=False, allow_subnormal=True))


def positive(top: float) -> st.SearchStrategy[float]:
    return nonneg(top).filter(lambda x: x > 0)


@settings(max_examples=300, deadline=None)
@given(rate=nonneg(MAX_RATE), tau=nonneg(MAX_RATE), write=nonneg(MAX_RATE), restart=nonneg(MAX_RATE))
def test_wall_ratio_and_the_optimum_never_raise(rate, tau, write, restart):
    r = wall_ratio(rate, tau, write, restart)
    assert r >= 1.0 or r == math.inf
    t = optimal_interval(rate, write)
    assert t >= 0.0


@settings(max_examples=300, deadline=None)
@given(run=positive(MAX_HOURS * MAX_RATE), nodes=st.integers(1, 1_000_000), gpn=st.integers(1, 16),
       spot=nonneg(MAX_RATE), faults=nonneg(MAX_RATE), restart=nonneg(MAX_RATE), repl=nonneg(MAX_RATE),
       write=nonneg(MAX_GB), interval=st.one_of(st.none(), positive(MAX_RATE)))
def test_a_gang_and_its_verdict_never_raise(run, nodes, gpn, spot, faults, restart, repl, write, interval):
    g = gang(run, nodes, gpn, spot_rate=spot, faults_per_gpu_hour=faults, restart_h=restart, replacement_h=repl,
             write_h=write, interval_h=interval)
    assert not math.isnan(g.overhead) and g.interval_h > 0
    why = impractical_reason(g, run)
    assert why is None or isinstance(why, str)
    if why is None:
        assert g.overhead <= 9.0 + 1e-9


@settings(max_examples=200, deadline=None)
@given(params=positive(MAX_GB), gpus=st.integers(1, 1_000_000), seq=st.integers(1, 1_000_000),
       micro=st.integers(1, 1_000_000), ckpt=st.booleans(), training=st.sampled_from(["full", "adapter"]),
       gib=positive(1e4))
def test_memory_never_raises(params, gpus, seq, micro, ckpt, training, gib):
    assert activation_gb_per_gpu(params, seq, micro, ckpt) >= 0
    why = memory_reason(params, training, gpus, "H100", gib, physics_book(), workload="llm",
                        sequence_length=seq, micro_batch=micro, activation_checkpointing=ckpt)
    assert why is None or why


@settings(max_examples=200, deadline=None)
@given(size=nonneg(MAX_GB), run=nonneg(MAX_HOURS * MAX_RATE), tau=nonneg(MAX_RATE), wall=nonneg(1e300),
       keep=st.integers(1, 1_000_000), gb=nonneg(2 * MAX_GB))
def test_the_bill_never_raises(size, run, tau, wall, keep, gb):
    store, req = checkpoint_usd(bill_book(), "aws", size, run, tau, wall, keep)
    assert store >= 0 and req >= 0
    assert nat_usd(bill_book(), "aws", "us-east-1", "aws", "us-west-2", gb) >= 0


@settings(max_examples=100, deadline=None)
@given(nodes=st.integers(1, 1_000_000), gbps=nonneg(MAX_RATE), speed=positive(MAX_RATE))
def test_efficiency_stays_in_range(nodes, gbps, speed):
    e = efficiency(nodes, gbps, 8, speed, physics_book().scaling["llm-adapter"])
    assert 0.0 <= e <= 1.0


KEYS = st.fixed_dictionaries({
    "hours": positive(MAX_HOURS),
    "capacity": st.sampled_from(["spot", "on-demand", "any"]),
    "spot": st.fixed_dictionaries({"interruptions_per_hour": nonneg(MAX_RATE), "restart_minutes": nonneg(MAX_RATE),
                                   "replacement_minutes": nonneg(MAX_RATE)}),
    "faults": st.fixed_dictionaries({"per_gpu_hour": nonneg(MAX_RATE)}),
    "checkpoint": st.fixed_dictionaries({"size_gb": nonneg(MAX_GB), "write_gbps": positive(MAX_RATE),
                                         "interval_minutes": st.one_of(st.just("auto"), positive(MAX_RATE)),
                                         "keep": st.integers(1, 1_000_000)}),
    "model": st.fixed_dictionaries({"parameters_b": positive(MAX_GB), "micro_batch": st.integers(1, 1_000_000),
                                    "sequence_length": st.integers(1, 1_000_000),
                                    "activation_checkpointing": st.booleans(),
                                    "training": st.sampled_from(["full", "adapter"])}),
    "speed": st.fixed_dictionaries({"H100": positive(MAX_RATE), "A100": positive(MAX_RATE)}),
    "data": st.fixed_dictionaries({"dataset": st.fixed_dictionaries({
        "uri": st.just("s3://b/d"), "size_gb": nonneg(MAX_GB), "region": st.sampled_from(["us-east-1", "us-west-2"])}),
        "outputs_gb": nonneg(MAX_GB), "throughput_gbps": positive(MAX_RATE)}),
    "usd_per_hour_of_delay": nonneg(MAX_RATE),
    "deadline_hours": positive(MAX_HOURS),
    "workload": st.sampled_from(["llm", "diffusion", "vision", "recommendation"]),
})
OFFERS = [offer("p5.48xlarge", "us-east-1"), offer("p4d.24xlarge", "us-west-2"), offer("a2-highgpu-8g", "us-central1")]


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(keys=KEYS, gpus=st.sampled_from([1, 8, 64]))
def test_a_plan_never_raises_anywhere_in_the_legal_range(keys, gpus):
    job = parse_job({"name": "fuzz", "accelerator": ["H100", "A100"], "gpus": gpus, **keys})
    p = plan(job, OFFERS)
    assert why_chosen(p)
    best = p.chosen
    if best is not None:
        assert math.isfinite(best.cost.total_usd) and best.overhead <= 9.0 + 1e-9
    for c in p.excluded:
        assert c.excluded
