"""The memoised decision function (issue 30, dispatch at fleet scale) takes exactly the decisions the one before it
took (tests/placement/dispatch/reference_decide.py), on the benchmark's fleet (scripts/bench_dispatch.py): every
Decision equal, messages, scores, Events and memory included, over a first pass and a second one with
nominations, passed admission deadlines, evictions, an unreachable worker and Workloads already copied to a
worker (pending and running)."""

from __future__ import annotations

import copy
import importlib.util
import json
import random
import sys
from dataclasses import fields, is_dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from placement.dispatch.decide import decide
from placement.dispatch.model import Pricing, Settings, WorkerState
from placement.fleet.manifests import JOB_SPEC_ANNOTATION
from placement.model.catalog import embedded_catalog


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def reference() -> ModuleType:
    return _load("reference_decide", Path(__file__).with_name("reference_decide.py"))


def _fleet(bench: ModuleType, workers: int, workloads: int, malformed: int, seed: int
           ) -> tuple[list[Any], list[WorkerState]]:
    rng = random.Random(seed)
    clusters, objects = bench.fleet(workers, rng)
    raw, owners = bench.hub(workloads, [c.stack for c in clusters], rng)
    raw, owners = copy.deepcopy(raw), copy.deepcopy(owners)
    for owner in owners.values():  # the frozen reference prices no moves of progress (tests/.../test_move.py does)
        for name in ("gpufleet.io/checkpoint-home", "gpufleet.io/checkpoint-region", "gpufleet.io/checkpoint-gb"):
            owner["metadata"]["annotations"].pop(name, None)
    for i in range(malformed):
        j = i * workloads // malformed
        bench.corrupt(i, raw[j], owners[("Job", bench.NS, f"j{j}")])
    for i in range(1, workloads, 7):  # deadlines and a price of delay on some jobs
        ann = owners[("Job", bench.NS, f"j{i}")]["metadata"]["annotations"]
        try:
            spec = json.loads(ann[JOB_SPEC_ANNOTATION])
        except (TypeError, ValueError, RecursionError):
            continue
        if isinstance(spec, dict):
            spec.update({"deadline_hours": rng.choice((3, 12, 30)), "usd_per_hour_of_delay": rng.choice((0, 50))})
            ann[JOB_SPEC_ANNOTATION] = json.dumps(spec)
    # Two hub Workloads Kueue has copied already: one pending on the first worker, one running on the second.
    first, second = clusters[0].stack, clusters[1].stack
    template = objects[first]["workloads"]
    pending = {"metadata": {"name": "job-j3", "namespace": bench.NS, "creationTimestamp": bench.rfc3339(bench.NOW)},
               "spec": {"queueName": bench.QUEUE, "priority": 1000, "podSets": [{"name": "main", "count": 1,
                        "template": {"spec": {"containers": [{"resources": {"requests": {"nvidia.com/gpu": "8"}}}]}}}]}}
    template.append(pending)
    running = copy.deepcopy(next((w for w in objects[second]["workloads"] if w["metadata"]["name"] == "run-0"),
                                 None) or pending)
    running["metadata"]["name"] = "job-j4"
    objects[second]["workloads"].append(running)
    return bench.snapshots(raw, owners, clusters, objects)


def _figures(value: Any) -> Any:
    """``value`` with every float rounded to 12 significant digits: the memoised code sums a candidate's cost in
    another order than the reference, so totals may differ in the last bit (1e-16 relative), never more."""
    if isinstance(value, float):
        return float(f"{value:.12g}")
    if is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__, *(_figures(getattr(value, f.name)) for f in fields(value)))
    if isinstance(value, (list, tuple)):
        return tuple(_figures(v) for v in value)
    if isinstance(value, (set, frozenset)):
        return frozenset(_figures(v) for v in value)
    if isinstance(value, dict):
        return {k: _figures(v) for k, v in value.items()}
    return value


def _same(new: Any, old: Any) -> None:
    assert len(new.decisions) == len(old.decisions)
    for a, b in zip(new.decisions, old.decisions, strict=True):
        assert (a.workload.key, a.action, a.clusters, a.reason) == (b.workload.key, b.action, b.clusters, b.reason)
        assert a.message == b.message
        assert _figures(a.scores) == _figures(b.scores)
        # Memory now also keeps where a Workload ran (issue 25's re-route pricing), which the reference did not.
        mem = replace(a.memory, ran_on=frozenset()) if a.memory is not None else None
        assert _figures(replace(a, memory=mem)) == _figures(b)
    assert new.admitted == old.admitted
    assert new.keep == old.keep


@pytest.mark.parametrize(("workers", "workloads", "malformed", "seed"), [(12, 240, 24, 12), (5, 160, 0, 5)])
def test_same_decisions_as_the_reference_on_the_benchmark_fleet(bench: ModuleType, reference: ModuleType,
                                                                workers: int, workloads: int, malformed: int,
                                                                seed: int) -> None:
    pricing = Pricing(tuple(embedded_catalog().offers))
    wls, states = _fleet(bench, workers, workloads, malformed, seed)
    settings = Settings(deadline_s=300)
    first = decide(wls, states, pricing, bench.NOW, settings)
    _same(first, reference.decide(wls, states, pricing, bench.NOW, settings))
    assert sum(d.action == "nominate" for d in first.decisions) > workloads // 2

    # The second pass: a third nominated long ago (deadline passed), a third evicted since, one worker gone.
    memory = {d.workload.uid: d.memory for d in first.decisions if d.memory is not None}
    decided = {d.workload.uid: d for d in first.decisions}
    later = []
    for i, wl in enumerate(wls):
        d = decided[wl.uid]
        if d.action == "nominate" and i % 3 == 0:
            wl = replace(wl, nominated=d.clusters, nominated_since=bench.NOW - 1000)
        elif d.action == "nominate" and i % 3 == 1:
            wl = replace(wl, evictions=wl.evictions + 1)
        later.append(wl)
    states = [replace(states[2], reachable=False, error="no answer"), *states[:2], *states[3:]]
    second = decide(later, states, pricing, bench.NOW + 600, settings, memory)
    _same(second, reference.decide(later, states, pricing, bench.NOW + 600, settings, memory))
    assert {d.reason for d in second.decisions} >= {"DeadlinePassed", "Renominated", "Unreadable"} if malformed \
        else {"DeadlinePassed", "Renominated"}
