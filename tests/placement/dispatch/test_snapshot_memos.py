"""The snapshot's fast paths of issue 33 part 3, each against what it stands in for (the reads of every Workload of
a pass are compared with the reference read in test_snapshot_reference.py; these pin each shortcut alone)."""

from __future__ import annotations

import copy
import sys
from dataclasses import fields
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from siblings import sibling

from placement.dispatch import snapshot
from placement.dispatch.model import HubWorkload

_load = sibling(__file__, "test_decide_scale.py")._load


@pytest.fixture(scope="module")
def reference() -> ModuleType:
    return _load("reference_snapshot", Path(__file__).with_name("reference_snapshot.py"))

FIELDS: dict[str, Any] = {"namespace": "t", "name": "w", "uid": "u", "created": 0.0, "priority": 0, "queue_name": "q",
                          "cluster_queue": None, "check": None, "check_state": None, "allowed": ()}


def _every_field(**changes: Any) -> dict[str, Any]:
    plain = HubWorkload(**{**FIELDS, **changes})
    return {f.name: getattr(plain, f.name) for f in fields(HubWorkload)}


def test_a_hub_workload_of_every_field_in_order_is_the_one_init_makes() -> None:
    values = _every_field(evictions=3, warnings=("a",))
    made = HubWorkload.of(dict(values))
    plain = HubWorkload(**values)
    assert made == plain and repr(made) == repr(plain) and list(vars(made).items()) == list(vars(plain).items())


def test_a_hub_workload_of_its_fields_in_another_order_keeps_the_fields_order() -> None:
    values = _every_field(priority=7)
    shuffled = dict(reversed(values.items()))
    made = HubWorkload.of(shuffled)
    assert list(vars(made)) == [f.name for f in fields(HubWorkload)]
    assert made == HubWorkload(**values)


def test_a_hub_workload_of_as_many_names_as_fields_but_one_unknown_is_refused() -> None:
    values = _every_field()
    del values["problem"]
    values["prolbem"] = None  # as many names, one of them no field
    with pytest.raises(TypeError, match="prolbem"):
        HubWorkload.of(values)


def _workload(assignments: Any = ..., pod_sets: Any = ...) -> dict[str, Any]:
    status: dict[str, Any] = {"admission": {"clusterQueue": "q"}}
    if assignments is not ...:
        status["admission"]["podSetAssignments"] = copy.deepcopy(assignments)
    spec: dict[str, Any] = {}
    if pod_sets is not ...:
        spec["podSets"] = copy.deepcopy(pod_sets)
    return {"spec": spec, "status": status}


def _usage(count: Any = 2, name: Any = "main", **usage: Any) -> list[dict[str, Any]]:
    return [{"name": name, "count": count, "resourceUsage": usage or {"nvidia.com/gpu": "16", "cpu": "300"}}]


def _sets(count: Any = 2, name: Any = "main", template: Any = None) -> list[dict[str, Any]]:
    return [{"name": name, "count": count, "template": template if template is not None else {"spec": {
        "containers": [{"resources": {"requests": {"nvidia.com/gpu": "8"}}}]}}}]


def _pool(values: Any) -> dict[str, Any]:
    return {"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "gpufleet.io/pool", "operator": "In", "values": values}]}]}}}}}


def _deep(levels: int) -> Any:
    value: Any = "x"
    for _ in range(levels):
        value = {"k": value}
    return value


# Pod sets and assignments that compare equal (==) but are not the same JSON, or differ in what needs reads.
NEEDS_CASES: list[dict[str, Any]] = [
    _workload(_usage(), _sets()), _workload(_usage(count=True), _sets()), _workload(_usage(count=1), _sets(count=1)),
    _workload(_usage(count=1.0), _sets(count=1.0)), _workload(_usage(count=True), _sets(count=True)),
    _workload(_usage(count=2.0), _sets()), _workload(_usage(count=0), _sets(count=0)),
    _workload(_usage(count=False), _sets(count=0.0)), _workload(_usage(count="2"), _sets()),
    _workload(_usage(name=1), _sets(name=1)), _workload(_usage(name=True), _sets(name=True)),
    _workload(_usage(name=1.0), _sets(name=1.0)), _workload(_usage(name="1"), _sets(name="1")),
    _workload(_usage(**{"nvidia.com/gpu": 16}), _sets()), _workload(_usage(**{"nvidia.com/gpu": 16.0}), _sets()),
    _workload(_usage(**{"nvidia.com/gpu": True}), _sets()), _workload(_usage(**{"nvidia.com/gpu": "16"}), _sets()),
    _workload(_usage(**{"cpu": "300", "nvidia.com/gpu": "16"}), _sets()),
    _workload([{"resourceUsage": {"nvidia.com/gpu": "16", "cpu": "300"}, "count": 2, "name": "main"}], _sets()),
    _workload(_usage(), _sets(template=_pool(["p1"]))), _workload(_usage(), _sets(template=_pool([1]))),
    _workload(_usage(), _sets(template=_pool([True]))), _workload(_usage(), _sets(template=_pool([1.0]))),
    _workload(_usage(), _sets(template=_pool(["p1", "p2"]))), _workload(_usage(), _sets(template=_pool(None))),
    _workload(..., _sets()), _workload(None, _sets()), _workload([], _sets()), _workload(_usage(), None),
    _workload(_usage(), []), _workload(_usage(), ...), _workload(..., ...), _workload(None, None),
    _workload(..., _sets(count=2, template={})), _workload(..., _sets(count=True, template={})),
    _workload(..., _sets(template={"spec": {"containers": [{"resources": {"limits": {"cpu": 2}}}]}})),
    _workload(..., _sets(template={"spec": {"containers": [{"resources": {"limits": {"cpu": 2.0}}}]}})),
    _workload(..., _sets(template={"spec": {"containers": [{"resources": {"limits": {"cpu": True}}}]}})),
    _workload(_usage(**{"memory": "1e400"}), _sets()), _workload(_usage(count="lots"), _sets()),
    _workload({"main": 1}, _sets()), _workload(_usage(), "x"), _workload([5], _sets()), _workload(_usage(), [5]),
    _workload(_usage(**{"nvidia.com/gpu": float("nan")}), _sets()),
    _workload(_usage(), _sets(template=_deep(30))), _workload(_usage(), _sets(template=_deep(60))),
    _workload(_usage(), _sets(template={"spec": {"nodeSelector": {"gpufleet.io/pool": "p" * 20_000}}})),
    _workload(_usage(), _sets(template={"spec": {"nodeSelector": {"gpufleet.io/pool": "p" * 20_000}}})),
    {"spec": {"podSets": _sets()}, "status": {"admission": "x"}}, {"spec": {"podSets": _sets()}, "status": []},
    {"spec": [], "status": {"admission": {"podSetAssignments": _usage()}}}, {"spec": None, "status": None},
    {"spec": {"podSets": tuple(_sets())}, "status": {"admission": {"podSetAssignments": tuple(_usage())}}},
]


def _needs_read(read: Any, wl: Any) -> str:
    try:
        return repr(read(wl))
    except Exception as exc:
        return f"raised {snapshot.problem_text(exc)}"


def test_pod_sets_read_after_any_other_read_as_their_own(reference: ModuleType) -> None:
    """Every case read right after every other (the first's read kept, the second compared with it) reads as the
    reference reads it: a value equal to another (True and 1, 1.0 and 1) is kept apart where needs reads it other
    than through int()."""
    expected = [_needs_read(reference.needs, wl) for wl in NEEDS_CASES]
    for first in NEEDS_CASES:
        for wl, want in zip(NEEDS_CASES, expected, strict=True):
            snapshot.forget_parsed_job_specs()
            _needs_read(snapshot.needs, first)
            assert _needs_read(snapshot.needs, wl) == want, (first, wl)


def test_a_home_made_without_its_init_is_the_same_home() -> None:
    from placement.dispatch.model import CheckpointHome

    for gb, gb_from in ((None, ""), (140.0, "gpufleet.io/checkpoint-gb"), (9.0, "checkpoint.size_gb")):
        made = CheckpointHome.of("s3://b/j", "aws", "us-east-1", gb, gb_from)
        plain = CheckpointHome("s3://b/j", "aws", "us-east-1", gb, gb_from)
        assert made == plain and repr(made) == repr(plain) and hash(made) == hash(plain)
        assert list(vars(made).items()) == list(vars(plain).items())


def test_a_job_named_without_job_with_is_the_job_job_with_makes() -> None:
    from placement.model.jobspec import job_with, parse_job

    job = parse_job({"name": "a", "accelerator": "H100", "gpus": 16, "hours": 3, "usd_per_hour_of_delay": 2})
    made, plain = snapshot._named(job, "b"), job_with(job, name="b")
    assert made == plain and repr(made) == repr(plain) and list(vars(made).items()) == list(vars(plain).items())
    assert job.name == "a"  # the job kept in the memo is left as it was


def _read_by_json(value: str) -> tuple[Any, Any]:
    """contract.read_job_spec_text without its check of a text opening with as many '[' as the recursion limit."""
    import json

    from placement.model import contract

    try:
        doc = json.loads(value)
    except RecursionError:
        return None, f"{contract.JOB_SPEC}: nested too deeply to read"
    except ValueError as exc:
        return None, f"{contract.JOB_SPEC}: not JSON ({str(exc)[:80]})"
    return (doc, None) if isinstance(doc, dict) else (None, f"{contract.JOB_SPEC}: not a JSON object")


def test_a_job_spec_nested_as_deep_as_the_recursion_limit_is_refused_as_json_refuses_it() -> None:
    from placement.model import contract

    limit = sys.getrecursionlimit()
    for n in (1, limit // 2, limit - 1, limit, limit + 1, 3 * limit):
        for tail in ("", "]" * n, "1" + "]" * n, " ", "{"):
            for text in ("[" * n + tail, " " + "[" * n + tail, "[" + " " + "[" * n + tail):
                assert contract.read_job_spec_text(text) == _read_by_json(text), (n, tail[:3], text[:3])


def _worker_objects(limits: dict[str, Any], conditions: Any) -> dict[str, list[dict[str, Any]]]:
    rows = [{"name": res, "nominalQuota": "8", **limits.get(res, {})} for res in ("cpu", "memory", "nvidia.com/gpu",
                                                                                "vpc.amazonaws.com/efa")]
    return {"resourceflavors": [{"metadata": {"name": "f"}, "spec": {"nodeLabels": {"gpufleet.io/pool": "p"}}}],
            "localqueues": [{"metadata": {"name": "lq", "namespace": "t"}, "spec": {"clusterQueue": "cq"}}],
            "clusterqueues": [{"metadata": {"name": "cq"}, "spec": {"resourceGroups": [{"flavors": [
                {"name": "f", "resources": rows}]}]}}],
            "workloads": [{"metadata": {"name": "w", "namespace": "t",
                                        "creationTimestamp": "2026-11-23T10:00:00Z"},
                           "spec": {"queueName": "lq", "podSets": [{"name": "main", "count": 3, "template": {}}]},
                           "status": {"conditions": conditions, "admission": {
                               "clusterQueue": "cq", "podSetAssignments": [
                                   {"name": "main", "count": 3, "resourceUsage": {"nvidia.com/gpu": "24"}}]}}}]}


QR_AT = {"type": "QuotaReserved", "status": "True", "lastTransitionTime": "2026-11-23T11:00:00Z"}


@pytest.mark.parametrize("limits", [{}, {"cpu": {"lendingLimit": "2"}}, {"nvidia.com/gpu": {"borrowingLimit": 0}},
                                    {"memory": {"lendingLimit": "1Gi", "borrowingLimit": "2Gi"},
                                     "vpc.amazonaws.com/efa": {"borrowingLimit": 1}}])
@pytest.mark.parametrize("conditions", [None, [], [QR_AT], [{"type": "Finished", "status": "True"}, QR_AT],
                                        [QR_AT, {"type": "Finished", "status": "True"}], [{"type": "Finished"}, 5],
                                        [{**QR_AT, "status": "False"}], [5, QR_AT], "x", 7, {"QuotaReserved": 1}])
def test_a_worker_reads_as_the_reference_reads_it(reference: ModuleType, limits: dict[str, Any],
                                                  conditions: Any) -> None:
    objects = _worker_objects(limits, conditions)

    def read(module: Any) -> str:
        try:
            return repr(module.worker_state("k", None, objects, 1.8e9, {("t", "w"): 5.0}))
        except Exception as exc:
            return f"raised {snapshot.problem_text(exc)}"

    assert read(snapshot) == read(reference)


def _limit_by_replace(rows: Any, field: str) -> Any:
    """snapshot._limit as it was (dataclasses.replace): the reference snapshot imports the snapshot's own."""
    from dataclasses import replace

    from placement.dispatch.model import UNLIMITED
    from placement.model import kueue as ko

    limited = {str(r.get("name")): r.get(field) for r in rows if r.get(field) is not None}
    if not limited:
        return None
    values = snapshot.resources(limited)
    names = {ko.RES_CPU: "cpu_millis", ko.RES_MEMORY: "memory_mib", ko.RES_GPU: "gpus", ko.RES_EFA: "efa"}
    return replace(values, **{attr: UNLIMITED for res, attr in names.items() if res not in limited})


@pytest.mark.parametrize("limits", [{}, {"cpu": {"lendingLimit": "2"}}, {"nvidia.com/gpu": {"borrowingLimit": 0}},
                                    {"memory": {"lendingLimit": "1Gi", "borrowingLimit": "2Gi"},
                                     "vpc.amazonaws.com/efa": {"borrowingLimit": 1}},
                                    {r: {"lendingLimit": "3"} for r in ("cpu", "memory", "nvidia.com/gpu",
                                                                        "vpc.amazonaws.com/efa", "example.com/x")}])
def test_a_flavors_limits_read_as_dataclasses_replace_read_them(limits: dict[str, Any]) -> None:
    rows = _worker_objects(limits, None)["clusterqueues"][0]["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    for field in ("lendingLimit", "borrowingLimit"):
        assert repr(snapshot._limit(rows, field)) == repr(_limit_by_replace(rows, field))


@pytest.mark.parametrize("rl", [None, {}, {"cpu": "1500m", "memory": "32Gi", "nvidia.com/gpu": "8",
                                           "vpc.amazonaws.com/efa": 4}, {"nvidia.com/gpu": 2.5}, {"cpu": 0}])
def test_a_resource_list_made_without_its_init_is_the_allocatable_init_makes(rl: Any) -> None:
    from placement.model.kueue import Allocatable

    made = snapshot.resources(rl)
    plain = Allocatable(made.cpu_millis, made.memory_mib, made.gpus, made.efa)
    assert made == plain and repr(made) == repr(plain) and hash(made) == hash(plain)
    assert list(vars(made).items()) == list(vars(plain).items())
    assert made + plain == plain.scaled(2)


def test_a_workers_queued_workloads_and_flavors_are_the_ones_init_makes(bench: ModuleType) -> None:
    import random
    from dataclasses import fields

    from placement.dispatch.model import FlavorState, QueuedWorkload

    clusters, objects = bench.fleet(4, random.Random(7))
    seen = 0
    for c in clusters:
        state = snapshot.worker_state(c.stack, c, objects[c.stack], bench.NOW, {})
        for queue in state.cluster_queues.values():
            for made in (*queue.flavors, *queue.workloads):
                cls = type(made)
                assert cls in (FlavorState, QueuedWorkload)
                plain = cls(**{f.name: getattr(made, f.name) for f in fields(cls)})
                assert made == plain and repr(made) == repr(plain) and hash(made) == hash(plain)
                assert list(vars(made).items()) == list(vars(plain).items())
                seen += 1
    assert seen >= 12


def test_annotations_too_long_or_not_strings_are_read_but_never_kept() -> None:
    from placement.model import contract
    from placement.model.zones import known_regions

    for value in ("w1," * 6000, ["w1"], {"w1": 1}, 5, True):
        annotations = {contract.WORKERS: value, contract.CHECKPOINT_HOME: "s3://b/j",
                       contract.CHECKPOINT_REGION: "aws:us-east-1"}
        snapshot.forget_parsed_job_specs()
        for _ in range(2):
            read, uri = snapshot._read_annotations(annotations)
            assert uri == "s3://b/j"
            assert read == contract.read_annotations(annotations, known_regions(), job_spec=False)
        assert snapshot._ANNOTATIONS == {}


def _time_by_datetime(value: Any) -> Any:
    from datetime import datetime

    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


TIMES: list[Any] = [
    "2026-11-23T18:03:05Z", "2026-11-23T18:03:59Z", "2026-11-23T18:03:60Z", "2026-11-23T18:03:5xZ",
    "2026-11-23T18:03:-1Z", "2026-11-23T18:03:+1Z", "2026-11-23T18:03: 1Z", "2026-11-23T18:03:05z",
    "2026-11-23T18:03:05.5Z", "2026-11-23T18:03:05+00:00", "2026-11-23 18:03:05Z", "2026-11-23T18:03:\\u0665\\u0665Z",
    "2026-11-23T18:03:\u0665\u0665Z", "\u0662026-11-23T18:03:05Z", "2026-02-30T18:03:05Z", "2026-02-28T18:03:05Z",
    "2026-02-30T18:03:06Z", "2026-11-23T24:00:00Z", "2026-12-31T23:59:59Z", "1969-12-31T23:59:59Z",
    "0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "2026-W47-1T18:03:05Z", "2026-W47-1T18:03:06Z",
    "20261123T180305Z", "2026-11-23T18:03:05ZZ", "2026-11-23T18:03:0Z", "", None, 0, 1.5, ["2026-11-23T18:03:05Z"],
]


def test_times_read_after_any_other_read_as_datetime_reads_them() -> None:
    for first in TIMES:
        for value in TIMES:
            snapshot.forget_parsed_job_specs()
            snapshot.parse_time(first)
            assert snapshot.parse_time(value) == _time_by_datetime(value), (first, value)
            assert snapshot.parse_time(value) == _time_by_datetime(value), (first, value)
    snapshot.forget_parsed_job_specs()
    start = _time_by_datetime("2026-11-23T18:00:00Z")
    for second in range(3 * 3600):  # every second of three hours, each minute kept on its first
        text = f"2026-11-23T{18 + second // 3600}:{second // 60 % 60:02d}:{second % 60:02d}Z"
        assert snapshot.parse_time(text) == start + second == _time_by_datetime(text)
