"""The dispatcher's decision function: properties over generated fleets and queues (hypothesis), and the
cost-plus-wait score against the placement engine's own prices."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from factories import offer
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.dispatch.decide import decide, expected_wait_hours
from placement.dispatch.model import (
    ClusterQueueState,
    FlavorState,
    HubWorkload,
    Memory,
    Need,
    Pricing,
    QueuedWorkload,
    Settings,
    WorkerState,
)
from placement.fleet.stacks import ClusterStack, Pool
from placement.model.jobspec import parse_job
from placement.model.kueue import Allocatable, allocatable
from placement.model.shapes import shape_book
from placement.plan.job import candidates

NOW = 1_800_000_000.0
NS, QUEUE = "team-a", "all-workers"
P5 = shape_book().get("p5.48xlarge")
assert P5 is not None
NODE = allocatable(P5)
REGIONS = ("us-east-1", "us-east-2", "us-west-2", "eu-west-1", "ap-northeast-1")


def worker(key: str, region: str, *, max_nodes: int = 4, reserved_nodes: int = 0, capacity: str = "spot",
           queued: tuple[QueuedWorkload, ...] = (), itype: str = "p5.48xlarge", reachable: bool = True) -> WorkerState:
    """One worker with one pool of ``max_nodes`` nodes; ``reserved_nodes`` of it held by admitted work."""
    shape = shape_book().get(itype)
    assert shape is not None
    pool = Pool(name=f"{key}-pool", instance_type=itype, capacity=capacity, zone=f"{region}-z", max_nodes=max_nodes)
    cluster = ClusterStack(stack=key, cloud=shape.cloud, region=region, cluster_name=f"c-{key}", pools=(pool,),
                           kubeconfig=None, checkpoint_uri=None, filesystem=None, service_account=None,
                           local_queues=None)
    node = allocatable(shape)
    flavor = FlavorState(name=pool.name, pool=pool.name, nominal=node.scaled(max_nodes),
                         reserved=node.scaled(reserved_nodes))
    running = tuple(QueuedWorkload(NS, f"run-{key}-{i}", 1000, shape.gpus, NOW - 10, admitted=True,
                                   flavors=frozenset({pool.name}), remaining_hours=2.0) for i in range(reserved_nodes))
    cq = ClusterQueueState(name=f"c-{key}-gpu", flavors=(flavor,), workloads=running + queued)
    return WorkerState(key=key, cluster=cluster, reachable=reachable, local_queues={(NS, QUEUE): cq.name},
                       cluster_queues={cq.name: cq})


def pricing(prices: dict[str, tuple[str, float]], itype: str = "p5.48xlarge") -> Pricing:
    """Offers for each worker's pool: key -> (region, spot price per node-hour)."""
    return Pricing(tuple(offer(itype, region, f"{region}-z", price=spot * 3, spot=spot)
                         for region, spot in prices.values()))


def workload(name: str, gpus: int = 8, *, priority: int = 1000, allowed: tuple[str, ...] = ("a", "b"),
             created: float = NOW - 100, **kw: Any) -> HubWorkload:
    nodes = max(gpus // 8, 1)
    per_pod = Allocatable(NODE.cpu_millis // 2, NODE.memory_mib // 2, min(gpus, 8), 0)
    job = parse_job({"name": name, "accelerator": "H100", "gpus": gpus, "hours": 10, "capacity": "spot"})
    fields: dict[str, Any] = dict(namespace=NS, name=name, uid=f"uid-{name}", created=created, priority=priority,
                                  queue_name=QUEUE, cluster_queue=QUEUE, check="all-workers", check_state="Pending",
                                  allowed=allowed, needs=(Need("node", nodes, per_pod),), job=job,
                                  group="efa" if nodes > 1 else "single-node")
    fields.update(kw)
    return HubWorkload(**fields)


def pending(key: str, n: int, gpus: int = 8, priority: int = 1000) -> tuple[QueuedWorkload, ...]:
    return tuple(QueuedWorkload(NS, f"pend-{key}-{i}", priority, gpus, NOW - 1000 + i) for i in range(n))


def engine_cost(job_gpus: int, region: str, spot: float) -> float:
    job = parse_job({"name": "x", "accelerator": "H100", "gpus": job_gpus, "hours": 10, "capacity": "spot"})
    (c,) = [c for c in candidates(job, [offer("p5.48xlarge", region, f"{region}-z", price=spot * 3, spot=spot)])
            if c.capacity == "spot"]
    return c.cost.total_usd


# ----------------------------------------------------------------------------- expected wait


releases_st = st.lists(st.tuples(st.integers(1, 64), st.floats(0, 50, allow_nan=False)), max_size=8)
backlog_st = st.lists(st.tuples(st.integers(1, 64), st.floats(0.1, 50, allow_nan=False)), max_size=8)


@given(nominal=st.integers(64, 256), used=st.integers(0, 256), ahead=backlog_st, need=st.integers(1, 64),
       more=st.integers(1, 64), releases=releases_st, extra=releases_st, job=st.tuples(st.integers(1, 64),
                                                                                      st.floats(0.1, 50)),
       at=st.integers(0, 8))
def test_more_backlog_never_lowers_the_wait(nominal, used, ahead, need, more, releases, extra, job, at):
    base = expected_wait_hours(nominal, used, ahead, need, releases, 4.0)
    assert base >= 0
    # One more workload ahead, wherever Kueue puts it in the queue.
    assert expected_wait_hours(nominal, used, [*ahead[:at], job, *ahead[at:]], need, releases, 4.0) >= base - 1e-9
    assert expected_wait_hours(nominal, used, ahead, min(need + more, nominal), releases, 4.0) >= base - 1e-9
    # More admitted work (its GPUs held until it ends) never shortens the wait either.
    held = max(used, sum(g for g, _ in releases))
    more_used = held + sum(g for g, _ in extra)
    assert expected_wait_hours(nominal, more_used, ahead, need, releases + extra, 4.0) >= base - 1e-9


def test_wait_is_zero_with_room_and_follows_the_releases_without():
    assert expected_wait_hours(32, 8, [(8, 10.0)], 16, [(8, 3.0)], 4.0) == 0.0
    # 32 GPUs, all held: 2 h until the first 16 free up, 5 h for the next 16.
    assert expected_wait_hours(32, 32, [], 16, [(16, 2.0), (16, 5.0)], 4.0) == 2.0
    assert expected_wait_hours(32, 32, [(16, 10.0)], 16, [(16, 2.0), (16, 5.0)], 4.0) == 5.0
    # Backlog beyond everything running: it runs first, its GPU-hours spread over the quota.
    assert expected_wait_hours(32, 32, [(32, 10.0)], 16, [(16, 2.0), (16, 5.0)], 4.0) == 5.0 + 16 * 10.0 / 32
    # Held GPUs no running workload accounts for end after the default length.
    assert expected_wait_hours(32, 32, [], 16, [], 4.0) == 4.0


# ----------------------------------------------------------------------------- the decision


fleet_st = st.lists(st.tuples(st.sampled_from(REGIONS), st.floats(5, 60), st.integers(0, 4), st.integers(0, 4),
                              st.integers(0, 6), st.booleans()), min_size=1, max_size=5)


@settings(max_examples=60, deadline=None)
@given(fleet=fleet_st, gpus=st.sampled_from([8, 16, 24, 32, 40]))
def test_never_nominates_a_worker_whose_queue_cannot_fit_the_job(fleet, gpus):
    workers, prices = [], {}
    for i, (region, spot, max_nodes, reserved, backlog, up) in enumerate(fleet):
        key = f"w{i}"
        workers.append(worker(key, region, max_nodes=max_nodes, reserved_nodes=min(reserved, max_nodes),
                              queued=pending(key, backlog), reachable=up))
        prices[key] = (region, spot)
    keys = tuple(w.key for w in workers)
    wl = workload("job", gpus, allowed=keys, group_workers=keys)
    (d,) = decide([wl], workers, pricing(prices), NOW).decisions
    can = {w.key for w, (_, _, max_nodes, _, _, up) in zip(workers, fleet, strict=True) if up and max_nodes * 8 >= gpus}
    if d.action == "nominate":
        assert d.clusters[0] in can
    else:
        assert d.action == "none" and not can and d.event is not None and d.event.reason == "NoWorkerFits"
    assert {s.worker for s in d.scores if s.fits} == can


@settings(max_examples=40, deadline=None)
@given(spots=st.lists(st.floats(5, 60), min_size=2, max_size=5), reserved=st.integers(0, 3),
       backlog=st.integers(0, 4))
def test_with_equal_queues_the_cheapest_worker_wins(spots, reserved, backlog):
    prices = {f"w{i}": (REGIONS[i], s) for i, s in enumerate(spots)}
    workers = [worker(k, r, reserved_nodes=reserved, queued=pending(k, backlog)) for k, (r, _) in prices.items()]
    wl = workload("job", 16, allowed=tuple(prices))
    (d,) = decide([wl], workers, pricing(prices), NOW).decisions
    costs = {k: engine_cost(16, r, s) for k, (r, s) in prices.items()}
    cheapest = min(costs, key=lambda k: (round(costs[k], 6), k))
    assert d.action == "nominate" and d.clusters == (cheapest,)
    chosen = next(s for s in d.scores if s.worker == cheapest)
    assert abs(chosen.cost_usd - costs[cheapest]) < 1e-6  # the engine's own total for that pool


@settings(max_examples=30, deadline=None)
@given(cheap=st.floats(5, 15), dear=st.floats(25, 40))
def test_a_large_enough_backlog_moves_the_choice(cheap, dear):
    prices = {"a": ("us-east-1", cheap), "b": ("us-east-2", dear)}
    choices = []
    for n in range(0, 40, 4):
        workers = [worker("a", "us-east-1", reserved_nodes=4, queued=pending("a", n)), worker("b", "us-east-2")]
        (d,) = decide([workload("job", 16)], workers, pricing(prices), NOW).decisions
        choices.append(d.clusters[0])
    # $10+ per node-hour cheaper over 2 nodes x 10 h beats waiting 2 h x 16 GPUs x $2: an idle dear worker loses.
    assert choices[0] == "a"
    assert "b" in choices  # ... but enough work queued ahead on the cheap one does
    assert choices == sorted(choices)  # and once moved it stays moved (the wait is monotone)


def test_a_backlog_ahead_counts_only_at_equal_or_higher_priority():
    prices = {"a": ("us-east-1", 10.0), "b": ("us-east-2", 30.0)}
    low = pending("a", 30, priority=100)
    workers = [worker("a", "us-east-1", reserved_nodes=4, queued=low), worker("b", "us-east-2")]
    (d,) = decide([workload("job", 16, priority=1000)], workers, pricing(prices), NOW).decisions
    assert d.clusters == ("a",)
    (d,) = decide([workload("job", 16, priority=100)], workers, pricing(prices), NOW).decisions
    assert d.clusters == ("b",)


def test_a_burst_spreads_once_the_cheap_worker_is_full():
    prices = {"a": ("us-east-1", 10.0), "b": ("us-east-2", 11.0)}
    workers = [worker("a", "us-east-1", max_nodes=2), worker("b", "us-east-2", max_nodes=2)]
    burst = [workload(f"j{i}", 16, created=NOW - 100 + i) for i in range(6)]
    result = decide(burst, workers, pricing(prices), NOW)
    chosen = [d.clusters[0] for d in sorted(result.decisions, key=lambda d: d.workload.created)]
    assert chosen[0] == "a" and chosen[1] == "b"  # the second would wait behind the first on a
    assert chosen.count("a") >= 2 and chosen.count("b") >= 2
    again = decide(burst, workers, pricing(prices), NOW)
    assert [d.clusters for d in again.decisions] == [d.clusters for d in result.decisions]  # deterministic


def test_after_the_deadline_the_next_best_worker_is_tried_and_every_worker_in_turn():
    prices = {"a": ("us-east-1", 10.0), "b": ("us-east-2", 20.0), "c": ("us-west-2", 30.0)}
    workers = [worker(k, r) for k, (r, _) in prices.items()]
    s = Settings(deadline_s=300)
    wl = workload("job", allowed=("a", "b", "c"))
    (first,) = decide([wl], workers, pricing(prices), NOW, s).decisions
    assert first.clusters == ("a",) and first.reason == "Nominated" and first.memory is not None
    memory = {wl.uid: first.memory}
    nominated = replace(wl, nominated=("a",))
    (held,) = decide([nominated], workers, pricing(prices), NOW + 299, s, memory).decisions
    assert held.action == "hold" and held.event is None
    (moved,) = decide([nominated], workers, pricing(prices), NOW + 301, s, memory).decisions
    assert moved.action == "nominate" and moved.clusters == ("b",) and moved.reason == "DeadlinePassed"
    assert moved.event is not None and "did not admit within 300 s" in moved.event.message
    assert moved.memory is not None
    memory = {wl.uid: moved.memory}
    (third,) = decide([replace(wl, nominated=("b",))], workers, pricing(prices), NOW + 700, s, memory).decisions
    assert third.clusters == ("c",)
    memory = {wl.uid: third.memory}  # type: ignore[dict-item]
    (fourth,) = decide([replace(wl, nominated=("c",))], workers, pricing(prices), NOW + 1100, s, memory).decisions
    assert fourth.clusters == ("a",)  # every worker tried: a new round starts from the best


def test_a_nomination_found_after_a_restart_keeps_its_clock():
    prices = {"a": ("us-east-1", 10.0), "b": ("us-east-2", 20.0)}
    workers = [worker(k, r) for k, (r, _) in prices.items()]
    wl = workload("job", nominated=("a",), nominated_since=NOW - 400)
    (d,) = decide([wl], workers, pricing(prices), NOW, Settings(deadline_s=300)).decisions
    assert d.clusters == ("b",) and d.reason == "DeadlinePassed"  # no memory, but the API server's time


def test_an_eviction_leads_to_a_new_nomination_away_from_the_evicting_worker():
    prices = {"a": ("us-east-1", 10.0), "b": ("us-east-2", 20.0)}
    workers = [worker(k, r) for k, (r, _) in prices.items()]
    wl = workload("job")
    admitted = replace(wl, cluster_name="a", check_state="Ready")
    memory = {wl.uid: Memory(nominated=("a",), since=NOW - 900, tried=frozenset({"a"}), first_at=NOW - 900)}
    result = decide([admitted], workers, pricing(prices), NOW, memory=memory)
    assert [a.seconds for a in result.admitted] == [900.0]
    (d,) = result.decisions
    assert d.memory is not None
    evicted = replace(wl, evictions=1)  # Kueue cleared clusterName and the nomination, reserved quota again
    (again,) = decide([evicted], workers, pricing(prices), NOW + 60, memory={wl.uid: d.memory}).decisions
    assert again.action == "nominate" and again.reason == "Renominated" and again.clusters == ("b",)
    # Only the evicting worker fits: it is nominated again rather than nothing.
    (only_a,) = decide([replace(evicted, allowed=("a",))], workers, pricing(prices), NOW + 60,
                       memory={wl.uid: d.memory}).decisions
    assert only_a.clusters == ("a",) and only_a.reason == "Renominated"


def test_group_pool_affinity_fabric_and_reachability_exclude_workers():
    prices = {"a": ("us-east-1", 10.0), "b": ("us-east-2", 20.0), "c": ("us-west-2", 5.0), "d": ("eu-west-1", 1.0)}
    workers = [worker("a", "us-east-1"), worker("b", "us-east-2"), worker("c", "us-west-2", reachable=False),
               worker("d", "eu-west-1")]
    wl = workload("job", 16, allowed=("a", "b", "c", "d"), group_workers=("a", "b", "c"))
    (d,) = decide([wl], workers, pricing(prices), NOW).decisions
    reasons = {s.worker: s.reason for s in d.scores if not s.fits}
    assert d.clusters == ("a",)
    assert "unreachable" in reasons["c"] and "group" in reasons["d"]
    only_b = replace(wl, needs=(replace(wl.needs[0], pools=frozenset({"b-pool"})),))
    (d,) = decide([only_b], workers, pricing(prices), NOW).decisions
    assert d.clusters == ("b",)
    # A multi-node job of the tcpxo group never lands on an EFA pool.
    (d,) = decide([replace(wl, group="tcpxo")], workers, pricing(prices), NOW).decisions
    assert d.action == "none" and "fabric efa" in d.message


def test_no_fit_is_reported_once_until_it_changes():
    workers = [worker("a", "us-east-1", max_nodes=1)]
    prices = {"a": ("us-east-1", 10.0)}
    wl = workload("job", 16, allowed=("a",))
    (d,) = decide([wl], workers, pricing(prices), NOW).decisions
    assert d.action == "none" and d.event is not None and "cannot hold the job's 16" in d.event.message
    (d2,) = decide([wl], workers, pricing(prices), NOW + 5, memory={wl.uid: d.memory}).decisions  # type: ignore
    assert d2.action == "none" and d2.event is None


def test_the_jobs_own_price_of_waiting_overrides_the_default():
    prices = {"a": ("us-east-1", 10.0), "b": ("us-east-2", 10.5)}
    workers = [worker("a", "us-east-1", reserved_nodes=4), worker("b", "us-east-2")]
    (d,) = decide([workload("job", 8, delay_usd_per_hour=0.0)], workers, pricing(prices), NOW).decisions
    assert d.clusters == ("a",)  # waiting is free for this job: the cheaper worker, 2 h later
    (d,) = decide([workload("job", 8)], workers, pricing(prices), NOW).decisions
    assert d.clusters == ("b",)


@settings(max_examples=30, deadline=None)
@given(gpus=st.sampled_from([8, 16, 32]), rate=st.floats(0, 500), per_gpu=st.floats(0, 10))
def test_the_wait_is_priced_per_job_hour_when_the_spec_sets_a_delay_rate_else_per_gpu_hour(gpus, rate, per_gpu):
    prices = {"a": ("us-east-1", 10.0), "b": ("us-east-2", 12.0)}
    workers = [worker("a", "us-east-1", reserved_nodes=4, queued=pending("a", 2)), worker("b", "us-east-2")]
    s = Settings(wait_usd_per_gpu_hour=per_gpu)
    (own,) = decide([workload("job", gpus, delay_usd_per_hour=rate)], workers, pricing(prices), NOW, s).decisions
    (default,) = decide([workload("job", gpus)], workers, pricing(prices), NOW, s).decisions
    for sc in own.scores:
        assert sc.wait_usd == pytest.approx(sc.wait_hours * rate)  # the job's rate, whatever its GPUs
    for sc in default.scores:
        assert sc.wait_usd == pytest.approx(sc.wait_hours * gpus * per_gpu)
    waiting = next(sc for sc in own.scores if sc.worker == "a")
    assert waiting.wait_hours > 0
    assert own.event is not None and "usd_per_hour_of_delay" in own.event.message


def test_a_job_that_values_its_time_leaves_the_cheap_busy_worker():
    prices = {"a": ("us-east-1", 10.0), "b": ("us-east-2", 14.0)}
    workers = [worker("a", "us-east-1", reserved_nodes=4), worker("b", "us-east-2")]
    s = Settings(wait_usd_per_gpu_hour=0.0)  # the dispatcher's default alone would never move it
    (cheap,) = decide([workload("job", 8)], workers, pricing(prices), NOW, s).decisions
    (urgent,) = decide([workload("job", 8, delay_usd_per_hour=500.0)], workers, pricing(prices), NOW, s).decisions
    assert cheap.clusters == ("a",) and urgent.clusters == ("b",)


def test_a_round_recalled_from_an_event_goes_on_to_the_next_untried_worker():
    prices = {"a": ("us-east-1", 10.0), "b": ("us-east-2", 20.0), "c": ("us-west-2", 30.0)}
    workers = [worker(k, r) for k, (r, _) in prices.items()]
    s = Settings(deadline_s=300)
    wl = workload("job", allowed=("a", "b", "c"))
    # What the DeadlinePassed Event of the move a -> b carried, read back by a new leader.
    recalled = Memory(nominated=("b",), since=NOW - 400, tried=frozenset({"a", "b"}), first_at=NOW - 800)
    on_b = replace(wl, nominated=("b",), nominated_since=NOW - 400)
    (d,) = decide([on_b], workers, pricing(prices), NOW, s, {wl.uid: recalled}).decisions
    assert d.clusters == ("c",) and d.reason == "DeadlinePassed"
    assert d.memory is not None and d.memory.tried == {"a", "b", "c"} and d.memory.first_at == NOW - 800
    (forgetful,) = decide([on_b], workers, pricing(prices), NOW, s).decisions
    assert forgetful.clusters == ("a",)  # what a leader without the Event's memory does


def test_an_eviction_after_the_recalled_event_starts_a_new_round_away_from_the_evicting_worker():
    prices = {"a": ("us-east-1", 10.0), "b": ("us-east-2", 20.0), "c": ("us-west-2", 30.0)}
    workers = [worker(k, r) for k, (r, _) in prices.items()]
    wl = workload("job", allowed=("a", "b", "c"))
    # Nominated to b after a was tried; b admitted it (no Event for that), then evicted it.
    recalled = Memory(nominated=("b",), since=NOW - 900, tried=frozenset({"a", "b"}), first_at=NOW - 1200)
    evicted = replace(wl, evictions=1)
    (d,) = decide([evicted], workers, pricing(prices), NOW, memory={wl.uid: recalled}).decisions
    assert d.reason == "Renominated" and d.clusters == ("a",)  # a new round: only b, which evicted it, is avoided
    assert d.memory is not None and d.memory.tried == {"a", "b"} and d.memory.first_at == NOW


def test_a_nomination_made_elsewhere_keeps_the_workers_tried_earlier_in_the_round():
    prices = {"a": ("us-east-1", 10.0), "b": ("us-east-2", 20.0), "c": ("us-west-2", 30.0)}
    workers = [worker(k, r) for k, (r, _) in prices.items()]
    s = Settings(deadline_s=300)
    wl = workload("job", allowed=("a", "b", "c"))
    mem = Memory(nominated=("a",), since=NOW - 1000, tried=frozenset({"a"}), first_at=NOW - 1000)
    # Another writer moved it to c (its Event lost); once c misses the deadline, b is next, not a again.
    on_c = replace(wl, nominated=("c",), nominated_since=NOW - 400)
    (d,) = decide([on_c], workers, pricing(prices), NOW, s, {wl.uid: mem}).decisions
    assert d.clusters == ("b",) and d.memory is not None and d.memory.tried == {"a", "b", "c"}


# ----------------------------------------------------------------------------- deadline_hours (issue 19 item 6)


def _with_deadline(name: str, deadline: float | None) -> HubWorkload:
    spec: dict[str, Any] = {"name": name, "accelerator": "H100", "gpus": 8, "hours": 10, "capacity": "spot"}
    if deadline is not None:
        spec["deadline_hours"] = deadline
    return workload(name, 8, job=parse_job(spec))


def test_a_worker_whose_wait_plus_run_misses_the_deadline_is_never_preferred():
    prices = {"a": ("us-east-1", 10.0), "b": ("us-east-2", 14.0)}
    workers = [worker("a", "us-east-1", reserved_nodes=4), worker("b", "us-east-2")]  # a: free in 2 h
    s = Settings(wait_usd_per_gpu_hour=0.0)  # waiting costs nothing: only the deadline can move the job
    (free,) = decide([_with_deadline("job", None)], workers, pricing(prices), NOW, s).decisions
    assert free.clusters == ("a",)
    ready = {sc.worker: sc.ready_hours for sc in free.scores}
    assert ready["a"] == pytest.approx(ready["b"] + 2.0)  # the same engine ready time, after a 2 h wait on a
    (tight,) = decide([_with_deadline("job", ready["b"] + 1.0)], workers, pricing(prices), NOW, s).decisions
    assert tight.clusters == ("b",)  # dearer, but a's wait plus run misses the deadline
    late = {sc.worker: sc.late for sc in tight.scores}
    assert late == {"a": True, "b": False}
    assert tight.event is not None and "within deadline_hours" in tight.event.message
    # When no worker meets it, the cheapest still runs it (late), and the Event says so.
    slow = [worker("a", "us-east-1", reserved_nodes=4), worker("b", "us-east-2", reserved_nodes=4)]
    (both,) = decide([_with_deadline("job", ready["b"] + 1.0)], slow, pricing(prices), NOW, s).decisions
    assert both.clusters == ("a",) and both.event is not None and "no worker meets it" in both.event.message


def test_an_unreadable_or_newer_job_spec_waits_with_an_event_and_is_never_guessed():
    prices = {"a": ("us-east-1", 10.0), "b": ("us-east-2", 14.0)}
    workers = [worker("a", "us-east-1"), worker("b", "us-east-2")]
    bad = workload("newer", 8, job=None, job_error="gpufleet.io/job-spec: field warp_drive is unknown to this "
                                                   "dispatcher (written by a newer placement submit?)")
    good = workload("good", 8)
    result = decide([bad, good], workers, pricing(prices), NOW)
    by = {d.workload.name: d for d in result.decisions}
    assert by["newer"].action == "none" and by["newer"].clusters == () and by["newer"].reason == "Unreadable"
    assert by["newer"].event is not None and "warp_drive" in by["newer"].event.message
    assert by["good"].action == "nominate"
    # Reported once while the problem stays the same.
    again = decide([bad], workers, pricing(prices), NOW + 30, memory={bad.uid: by["newer"].memory})
    assert again.decisions[0].event is None and again.decisions[0].action == "none"


# ----------------------------------------------------------------------------- the cohort's lent quota (issue 20)


def _example_worker(share: float, serving_gpus: int = 0) -> WorkerState:
    """The example worker aws-use1-p5 (h100-spot 4 nodes, h100-od 2) as the dispatcher reads it from the Kueue
    objects its stack creates with ``inferenceShare`` = ``share``; the inference queue's servers hold
    ``serving_gpus`` of h100-spot."""
    from dataclasses import replace as dc_replace
    from pathlib import Path

    import infra.k8s.kueue_objects as ko
    from infra.config import load_stack_file
    from placement.dispatch.snapshot import worker_state

    path = Path(__file__).resolve().parents[3] / "stacks" / "Pulumi.aws-use1-p5.yaml"
    cfg = load_stack_file(str(path))
    cfg = dc_replace(cfg, kueue=dc_replace(cfg.kueue, inference_share=share))
    objects: dict[str, list[dict[str, Any]]] = {}
    for obj in ko.worker_objects(cfg):
        if obj["kind"] == "ClusterQueue" and obj["metadata"]["name"] == ko.inference_queue_name(cfg.cluster_name):
            obj = {**obj, "status": {"flavorsReservation": [
                {"name": "h100-spot", "resources": [{"name": ko.RES_GPU, "total": str(serving_gpus)}]}]}}
        objects.setdefault(obj["kind"].lower() + "s", []).append(obj)
    pools = tuple(Pool(name=p.name, instance_type=p.shape.name, capacity=p.capacity_kind, zone="use1-az6",
                       max_nodes=p.max_nodes) for p in cfg.node_pools)
    cluster = ClusterStack(stack="w", cloud="aws", region="us-east-1", cluster_name=cfg.cluster_name, pools=pools,
                           kubeconfig=None, checkpoint_uri=None, filesystem=None, service_account=None,
                           local_queues=None)
    return worker_state("w", cluster, objects, NOW)


def test_a_4_node_job_is_dispatched_to_a_worker_whose_training_queue_borrows_the_idle_inference_share():
    wl = workload("big", 32, allowed=("w",), queue_name="all-workers")
    prices = Pricing((offer("p5.48xlarge", "us-east-1", "use1-az6", price=60.0, spot=20.0),))
    w = _example_worker(0.25)
    train = w.cluster_queues["gpufleet-aws-use1-p5-gpu"]
    spot = next(f for f in train.flavors if f.name == "h100-spot")
    assert spot.nominal.gpus == 24 and train.cohort == "gpufleet"  # serving owns one of the 4 spot nodes
    (d,) = decide([wl], [w], prices, NOW).decisions
    assert d.action == "nominate" and d.clusters == ("w",)
    (s,) = d.scores
    assert (s.pool, s.wait_hours, s.borrowed_gpus) == ("h100-spot", 0.0, 8)
    assert "borrows 8 GPUs" in d.message and "serving may reclaim" in d.message

    # Serving holds its node: the job still fits there (Kueue would reclaim it only for serving, never for
    # training), but waits for the node to come back (a hold of unknown length: default_hours).
    (d,) = decide([wl], [_example_worker(0.25, serving_gpus=8)], prices, NOW).decisions
    assert d.action == "nominate" and d.scores[0].wait_hours == Settings().default_hours

    # A job larger than the whole pool (its queue's quota and all its cohort lends) never fits.
    (d,) = decide([workload("huge", 40, allowed=("w",))], [w], prices, NOW).decisions
    assert d.action == "none" and "at most 32 GPUs (nominal quota 24 + 8 its cohort lends)" in d.message


def _flavor(nominal: int, used: int = 0, lend: int | None = None, borrow: int | None = None) -> FlavorState:
    def gpus(n: int | None) -> Allocatable | None:
        return None if n is None else Allocatable(10**9, 10**9, n, 10**9)

    return FlavorState("f", "p", Allocatable(10**6, 10**6, nominal, 0), Allocatable(0, 0, used, 0), gpus(lend),
                       gpus(borrow))


@pytest.mark.parametrize(("train", "serve", "potential", "available"), [
    (_flavor(24), _flavor(8), 32, 32),  # the idle inference share is lent
    (_flavor(24, used=16), _flavor(8, used=8), 32, 8),  # serving uses its own: training has what it left
    (_flavor(24, used=32), _flavor(8), 32, 0),  # training borrowed it all
    (_flavor(24), _flavor(8, lend=0), 24, 24),  # an inference queue that lends nothing
    (_flavor(24), _flavor(8, lend=4), 28, 28),  # ... or part
    (_flavor(24, borrow=0), _flavor(8), 24, 24),  # a training queue that may not borrow
    (_flavor(24, used=20, borrow=4), _flavor(8), 28, 8),
    (_flavor(24, lend=20, used=8), _flavor(8, used=6), 32, 18),  # training keeps 4 to itself and uses them
])
def test_flavor_quota_follows_kueues_cohort_accounting(train, serve, potential, available):
    from placement.dispatch.decide import flavor_quota

    t = ClusterQueueState("train", (train,), cohort="c")
    queues = [t, ClusterQueueState("serve", (serve,), cohort="c"), ClusterQueueState("other", (serve,), cohort="x")]
    q = flavor_quota(t, train, queues)
    assert (q.potential.gpus, q.available.gpus) == (potential, available)
    # Outside a cohort a queue has its own nominal quota alone.
    alone = flavor_quota(replace(t, cohort=None), train, queues)
    assert (alone.potential.gpus, alone.available.gpus) == (24, max(24 - train.reserved.gpus, 0))


def test_a_calibration_prices_spot_pools_with_the_measured_rate():
    # Issue 26: the dispatcher plans with the user's calibration. w0's pool is cheaper on the catalog, but its zone
    # reclaimed spot nodes so often that w1 wins once the measured rate replaces the default one.
    from placement.model.calibration import Calibration, SpotRow

    prices = {"w0": ("us-east-1", 20.0), "w1": ("us-east-2", 21.0)}
    workers = [worker(k, r) for k, (r, _) in prices.items()]
    wl = workload("job", 16, allowed=tuple(prices))
    (d,) = decide([wl], workers, pricing(prices), NOW).decisions
    assert d.clusters == ("w0",)
    import datetime as dt

    t = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    cal = Calibration(measured_from=t, measured_to=t, spot=(
        SpotRow("aws", "us-east-1", "us-east-1-z", "p5.48xlarge", node_hours=1000.0, reclaims=2000.0),
        SpotRow("aws", "us-east-2", "us-east-2-z", "p5.48xlarge", node_hours=1000.0, reclaims=0.0)))
    (d,) = decide([wl], workers, pricing(prices), NOW, Settings(calibration=cal)).decisions
    assert d.clusters == ("w1",)
