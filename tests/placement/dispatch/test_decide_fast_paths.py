"""The fast paths of issue 33 (a dispatch pass over 1,000 Workloads within its target) decide as the code they
skip: the tally of a Workload no queue lists (its wait shared by every shape landing on the same flavors, its
scores made from their shared fields) against the path every other Workload takes, on the benchmark's fleet with
hostile Workloads; the ranking read from a heap against a sort; a hub Workload made without the dataclass's
``__init__``; resource lists read without a closure, hostile quantities included."""

from __future__ import annotations

import math
from types import ModuleType
from typing import Any

import pytest
from siblings import sibling

from placement.dispatch import decide as decide_module
from placement.dispatch import snapshot
from placement.dispatch.model import HubWorkload, Need, Pricing, Settings, WorkerScore
from placement.model import kueue as ko
from placement.model.catalog import embedded_catalog
from placement.model.kueue import Allocatable


@pytest.fixture(scope="module")
def scale() -> ModuleType:
    return sibling(__file__, "test_decide_scale.py")


@pytest.mark.parametrize(("workers", "workloads", "malformed", "seed", "prices"),
                         [(12, 240, 24, 12, False), (30, 200, 20, 3, False), (12, 240, 24, 12, True)])
def test_the_shared_tally_decides_as_the_path_of_a_listed_workload(bench: ModuleType, scale: ModuleType,
                                                                   monkeypatch: pytest.MonkeyPatch, workers: int,
                                                                   workloads: int, malformed: int, seed: int,
                                                                   prices: bool) -> None:
    from dataclasses import replace

    pricing = Pricing(tuple(embedded_catalog().offers))
    wls, states = scale._fleet(bench, workers, workloads, malformed, seed)
    if prices:  # Workloads of one shape (one row of fits) at other prices of waiting: tallies apart, made apart
        wls = [replace(wl, delay_usd_per_hour=(7.5, 40.0)[i % 2]) if i % 3 == 0 else wl for i, wl in enumerate(wls)]
    settings = Settings(deadline_s=300)
    fast = decide_module.decide(wls, states, pricing, bench.NOW, settings)
    # Every Workload as if a worker's queue listed it: no tally kept, each wait worked out on its own, each score
    # made by _score.
    monkeypatch.setattr(decide_module._Pass, "is_listed", lambda self, wl, row: True)
    slow = decide_module.decide(wls, states, pricing, bench.NOW, settings)
    assert [repr(d) for d in fast.decisions] == [repr(d) for d in slow.decisions]  # bit for bit
    # The tally's scores, made from the fields they share, are those WorkerScore.fitting makes (_score): the same
    # instance __dict__, in the same order; late ones and waits among them.
    pairs = [(a, b) for x, y in zip(fast.decisions, slow.decisions, strict=True)
             for a, b in zip(x.scores, y.scores, strict=True)]
    assert all(list(a.__dict__.items()) == list(b.__dict__.items()) for a, b in pairs)
    assert any(a.late for a, _ in pairs) and any(a.wait_hours for a, _ in pairs)
    assert sum(d.reason == decide_module.UNREADABLE for d in fast.decisions) >= malformed


def _score(worker: str, usd: float, cost: float, late: bool = False) -> WorkerScore:
    return WorkerScore.fitting(worker, "p", "spot", cost, 0.0, usd - cost, 1.0, late, 0, 0.0, 0.0, False)


@pytest.mark.parametrize("rounded", [False, True])
def test_the_ranking_read_from_a_heap_is_the_stable_sort(rounded: bool) -> None:
    # Ties once rounded to 6 decimals (10.0000001, 9.9999999 and 10.0; 20.0000004 and 20.0000006 not; 30.0000004 and
    # 29.9999996, 8e-7 apart, are; 40.0000004 and 40.0000016 not, nor 50.0000004 and 50.0000024, 2e-6 apart, which
    # are told apart without rounding): the rounded cost, then the worker, then the place decide, however the raw scores
    # order them. Rounded or raw scores in the entries: the same order.
    scores = [_score("b", 10.0, 5.0), _score("a", 10.0, 5.0), _score("c", 10.0000001, 4.0), _score("d", 3.0, 3.0, True),
              _score("e", 9.9999999, 9.0), _score("b", 10.0, 5.0), _score("f", math.inf, 1.0),
              _score("g", 9.9999999, 4.0), _score("h", 20.0000006, 2.0), _score("i", 20.0000004, 3.0),
              _score("j", 3.0000001, 3.0000004, True), _score("k", 2.9999999, 3.0000001, True),
              _score("z", 29.9999996, 9.0), _score("l", 30.0000004, 5.0), _score("y", 40.0000004, 9.0),
              _score("m", 40.0000016, 5.0), _score("x", 50.0000004, 9.0), _score("n", 50.0000024, 5.0),
              _score("o", math.inf, 0.5)]
    entries = tuple((s.late, round(s.usd, 6) if rounded else s.usd, i, s) for i, s in enumerate(scores))
    assert rounded or all(e[:2] == decide_module._raw_key(e[3]) for e in entries)
    ranked = list(decide_module.Ranked(entries))
    assert ranked == decide_module._ranked(scores)
    assert [id(s) for s in ranked] == [id(s) for s in decide_module._ranked(scores)]  # equal keys: workers' order
    assert list(decide_module.Ranked(())) == []
    # Read in part, then again, and by two readers at once: the same order every time.
    shared = decide_module.Ranked(entries)
    first = iter(shared)
    assert next(first) is ranked[0]
    assert list(shared) == ranked
    assert [next(first) for _ in range(len(ranked) - 1)] == ranked[1:]
    assert list(shared) == ranked
    # The first not skipped, read at once or after a part: what a filtered iteration gives.
    for skip in (set(), {"c"}, {"c", "g", "a"}, {s.worker for s in scores}):
        want = next((s for s in ranked if s.worker not in skip), None)
        assert decide_module.Ranked(entries).first(skip) is want
        assert shared.first(skip) is want
        assert decide_module._best(decide_module.Ranked(entries), skip) is want


def test_a_hub_workload_read_is_the_dataclass_made_by_its_init() -> None:
    values: dict[str, Any] = {"namespace": "t", "name": "w", "uid": "u", "created": 1.0, "priority": 5,
                              "queue_name": "q", "cluster_queue": "cq", "check": "c", "check_state": "Pending",
                              "allowed": ("a", "b"), "needs": (Need("main", 2, Allocatable(1, 2, 8, 0)),),
                              "warnings": ("x",)}
    fast, slow = HubWorkload.read(**values), HubWorkload(**values)
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    assert fast.__dict__ == slow.__dict__
    with pytest.raises(TypeError):
        HubWorkload.read(**values, surprise=1)
    with pytest.raises(TypeError):
        HubWorkload.read(**{k: v for k, v in values.items() if k != "uid"})


def _slow_resources(rl: Any) -> Allocatable:
    """snapshot.resources as it was, with its closure."""
    rl = rl or {}
    if not isinstance(rl, dict):
        raise ValueError(f"a resource list must be a mapping, got {type(rl).__name__}")

    def get(name: str, scale: float = 1.0) -> int:
        return math.ceil(snapshot.quantity(rl[name]) * scale - 1e-9) if name in rl else 0

    return Allocatable(cpu_millis=get(ko.RES_CPU, 1000), memory_mib=get(ko.RES_MEMORY, 1 / 2**20),
                       gpus=get(ko.RES_GPU), efa=get(ko.RES_EFA))


@pytest.mark.parametrize("rl", [None, {}, {"cpu": "1500m", "memory": "32Gi", "nvidia.com/gpu": "8"},
                                {"cpu": 3, "memory": "1e3", ko.RES_EFA: "32", "nvidia.com/gpu": 8.5},
                                {"memory": "1e400"}, {"nvidia.com/gpu": float("nan")}, {"cpu": "-1"},
                                {"cpu": True}, {"cpu": [1]}, {"memory": "12Ki", "cpu": "0.1"}, ["cpu"], "8",
                                {"nvidia.com/gpu": "8", "cpu": "lots"}])
def test_resources_read_as_before(rl: Any) -> None:
    def outcome(fn: Any) -> Any:
        try:
            return fn(rl)
        except Exception as exc:  # the same error, of the same type
            return type(exc), str(exc)

    assert outcome(snapshot.resources) == outcome(_slow_resources)


def test_the_fields_a_score_shares_are_the_dataclass_fields_in_order() -> None:
    from dataclasses import fields

    assert list(decide_module._NO_MOVE_FIELDS) == [f.name for f in fields(WorkerScore)]
    fit = decide_module._Fit(None, None, "pool-a", "spot", 123.456789, 2.5, 8, 16, None, 0, ())  # type: ignore[arg-type]
    made = decide_module._Pass._made(None, fit, "w-1", 3.0, 4.0, {})  # type: ignore[arg-type]
    want = WorkerScore.fitting("w-1", "pool-a", "spot", 123.456789, 0.0, 0.0, 0.0, False, 8, 0.0, 0.0, False)
    assert list(made[1].items()) == list(want.__dict__.items())
    assert made[2:] == (fit, 3.0, 4.0, 2.5, 123.456789)


def test_a_decision_made_without_its_init_is_the_one_its_init_makes() -> None:
    from dataclasses import fields

    from placement.dispatch.model import Decision, EventOut, Memory

    wl = HubWorkload("ns", "wl", "uid-1", 1.0, 0, "q", "cq", "check", "Pending", ("w-0", "w-1"))
    mem_values = (("w-1",), 10.0, frozenset({"w-1", "w-0"}), 5.0, 2, "", frozenset({"w-0"}))
    event_values = ("Normal", "Nominated", "nominated w-1")
    for cls, values in ((Memory, mem_values), (EventOut, event_values)):
        made, want = decide_module._frozen(cls, *values), cls(*values)
        assert made == want and hash(made) == hash(want) and repr(made) == repr(want)
        assert list(made.__dict__.items()) == list(want.__dict__.items())
        assert not hasattr(cls, "__post_init__") and len(values) == len(fields(cls))
    d_values = (wl, "nominate", ("w-1",), "Nominated", "m", (), EventOut(*event_values), Memory(*mem_values))
    made, want = decide_module._frozen(Decision, *d_values), Decision(*d_values)
    assert made == want and repr(made) == repr(want) and not hasattr(Decision, "__post_init__")
    with pytest.raises(ValueError):
        decide_module._frozen(EventOut, "Normal", "Nominated")  # every field, or none made


def test_workloads_share_a_shape_exactly_when_their_jobs_needs_and_queues_are_equal() -> None:
    # The shape key reads a job's dataset and a pod set's resources by an id equal for equal values: equal objects
    # made apart share a shape, and any field that differs (the name aside) keeps shapes apart, as the plain key does.
    from dataclasses import fields, replace

    from placement.dispatch.model import Need
    from placement.model.jobspec import Dataset, JobSpec

    assert [f.name for f in fields(Need) if f.compare] == ["name", "count", "per_pod", "pools"]
    assert fields(JobSpec)[decide_module._JOB_DATASET].name == "dataset"

    def need(gpus: int = 8, count: int = 1, name: str = "main", pools: frozenset[str] | None = None) -> Need:
        return Need(name, count, Allocatable(1000, 2000, gpus, 0), pools)

    def job(name: str = "j", size: float = 10.0, **changes: Any) -> JobSpec:
        return replace(JobSpec(name=name, accelerators=("H100",), gpus=8, hours=2.0,
                               dataset=Dataset("s3://b/d", size, "us-east-1", "aws")), **changes)

    base = {"namespace": "t", "uid": "u", "created": 1.0, "priority": 0, "queue_name": "q", "cluster_queue": "cq",
            "check": "c", "check_state": "Pending", "allowed": ("w",)}
    variants: list[tuple[tuple[Need, ...], JobSpec, dict[str, Any]]] = [
        ((need(),), job(), {}), ((need(),), job("other"), {}), ((need(),), job(size=10.0), {}),
        ((need(),), job(size=11.0), {}), ((need(4),), job(), {}), ((need(count=2),), job(), {}),
        ((need(name="w"),), job(), {}), ((need(pools=frozenset({"p"})),), job(), {}),
        ((need(), need(name="w")), job(), {}), ((need(), need(name="w")), job(size=10.0), {}), ((), job(), {}),
        ((need(),), job(dataset=None), {}), ((need(),), job(hours=3.0), {}), ((need(),), job(), {"queue_name": "r"}),
        ((need(),), job(), {"group": "g"}), ((need(),), job(), {"namespace": "u"})]
    wls = [HubWorkload(**{**base, **extra}, name=f"w{i}", needs=needs, job=spec)
           for i, (needs, spec, extra) in enumerate(variants)]
    ps = decide_module._Pass([], Pricing(()), 0.0, Settings())
    shape = [ps.ask(wl).shape for wl in wls]

    def plain(wl: HubWorkload) -> tuple[Any, ...]:
        assert wl.job is not None
        return (replace(wl.job, name=""), wl.needs, wl.group, wl.group_workers, wl.namespace, wl.queue_name)

    for a, b in ((a, b) for a in range(len(wls)) for b in range(len(wls))):
        assert (shape[a] == shape[b]) == (plain(wls[a]) == plain(wls[b])), (variants[a], variants[b])
    assert len(set(shape)) < len(wls)  # some do share one


@pytest.mark.parametrize("counts", [(), (2,), (1, 3)])
def test_the_wait_price_and_warnings_texts_read_as_their_generic_forms(counts: tuple[int, ...]) -> None:
    # One pod set (the commonest) is read without a generator, no warning without a join: the same texts.
    needs = tuple(Need(f"p{i}", count, Allocatable(1000, 2000, 4 + i, 0)) for i, count in enumerate(counts))
    for warnings in ((), ("a bad annotation", "another")):
        wl = HubWorkload("t", "w", "u", 1.0, 0, "q", "cq", "c", "Pending", ("w",), needs=needs, warnings=warnings)
        gpus = sum(n.per_pod.gpus * n.count for n in needs)
        assert decide_module._wait_price_text(wl, Settings()) == (
            f"{gpus} GPUs x ${Settings().wait_usd_per_gpu_hour:g}/GPU-h")
        assert decide_module._warnings_text(wl) == "".join(f"; warning: {w}" for w in warnings)
