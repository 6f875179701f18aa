"""The snapshot reads every hub Workload and every worker as it did before its fast paths (issue 33): the benchmark's
pass (1,000 Workloads, its ten hostile kinds among them) and Workloads hostile in each place a fast path guards, each
compared field by field, in one pass's order, with tests/placement/dispatch/reference_snapshot.py (the read of commit
df45f44 without any memo). The same error text for a Workload wrong in two places, too: what is read first still
reports."""

from __future__ import annotations

import copy
import random
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from siblings import sibling

from placement.dispatch import snapshot
from placement.dispatch.model import HubWorkload
from placement.model import contract

QUEUE = "all-workers"
CHECKS = {QUEUE: QUEUE}
CONFIGS = {QUEUE: ("w1", "w2")}
CQ_CHECKS = {QUEUE: frozenset({QUEUE})}
SPEC = {"accelerator": "H100", "gpus": 16, "hours": 3,
        "data": {"dataset": {"uri": "s3://d/x", "region": "us-east-1", "size_gb": 50}}}


# The loader test_decide_scale.py keeps for its reference and the benchmark (registered in sys.modules).
_load = sibling(__file__, "test_decide_scale.py")._load


@pytest.fixture(scope="module")
def reference() -> ModuleType:
    return _load("reference_snapshot", Path(__file__).with_name("reference_snapshot.py"))


def _same(fast: Any, slow: Any) -> None:
    """Every field alike, in order (a job's too), and equal."""
    assert repr(fast) == repr(slow)
    assert fast == slow
    if isinstance(fast, HubWorkload) and isinstance(slow, HubWorkload):
        assert list(fast.__dict__.items()) == list(slow.__dict__.items())
        if fast.job is not None and slow.job is not None:
            assert list(fast.job.__dict__.items()) == list(slow.job.__dict__.items())


def _owner_key(module: Any, wl: Any) -> Any:
    try:
        return module.owner_key(wl)
    except Exception as exc:  # the controller reports it on the Workload: the same error, by its text
        return f"raised {snapshot.problem_text(exc)}"


def _compare(reference: ModuleType, items: list[tuple[Any, Any]]) -> list[HubWorkload | None]:
    """Each Workload read by the snapshot (its memos filled by the ones before, as in a pass) and by the reference."""
    snapshot.forget_parsed_job_specs()
    fast = [snapshot.hub_workload(wl, owner, CHECKS, CONFIGS, CQ_CHECKS) for wl, owner in items]
    for (wl, owner), got in zip(items, fast, strict=True):
        _same(got, reference.hub_workload(wl, owner, CHECKS, CONFIGS, CQ_CHECKS))
        assert _owner_key(snapshot, wl) == _owner_key(reference, wl)
    return fast


def test_the_benchmark_pass_reads_as_before(bench: ModuleType, reference: ModuleType) -> None:
    rng = random.Random(7)
    clusters, objects = bench.fleet(20, rng)
    raw, owners = bench.hub(400, [c.stack for c in clusters], rng)
    raw, owners = copy.deepcopy(raw), copy.deepcopy(owners)
    for i in range(40):  # each of the benchmark's hostile kinds, four times
        j = i * 10
        bench.corrupt(i, raw[j], owners[("Job", bench.NS, f"j{j}")])
    items = [(wl, owners.get(snapshot.owner_key(wl))) for wl in raw]
    fast = _compare(reference, items)
    assert sum(w is not None and w.problem is not None for w in fast) >= 20
    assert sum(w is not None and w.job_error is not None for w in fast) >= 10
    assert sum(w is not None and w.checkpoint is not None for w in fast) >= 300
    hours = {(w.namespace, w.name): w.job.hours for w in fast if w is not None and w.job is not None}
    for c in clusters:
        _same(snapshot.worker_state(c.stack, c, objects[c.stack], bench.NOW, hours),
              reference.worker_state(c.stack, c, objects[c.stack], bench.NOW, hours))


def _raw(i: int) -> dict[str, Any]:
    return {"metadata": {"name": f"job-{i}", "namespace": "team-a", "uid": f"u{i}",
                         "creationTimestamp": "2026-11-23T10:00:00Z",
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": f"j{i}",
                                              "controller": True}]},
            "spec": {"queueName": QUEUE, "priority": 500, "podSets": [
                {"name": "main", "count": 2, "template": {"spec": {"containers": [
                    {"resources": {"requests": {"nvidia.com/gpu": "8"}}}]}}}]},
            "status": {"conditions": [{"type": "QuotaReserved", "status": "True"}],
                       "admission": {"clusterQueue": QUEUE, "podSetAssignments": [
                           {"name": "main", "count": 2, "resourceUsage": {"nvidia.com/gpu": "16", "cpu": "300"}}]},
                       "admissionChecks": [{"name": QUEUE, "state": "Pending"}]}}


def _annotations(i: int) -> dict[str, Any]:
    return {contract.JOB_SPEC: contract.job_spec_text({"name": f"j{i}", **SPEC}), contract.FABRIC_GROUP: "efa",
            contract.WORKERS: "w1,w2", **contract.checkpoint_annotations(f"s3://ckpt/j{i}", "aws", "us-east-1",
                                                                         140.0 if i % 2 else None)}


def _set(path: str, value: Any) -> Callable[[dict[str, Any], dict[str, Any]], None]:
    """A change of the Workload (``status.conditions``) or, under ``owner.``, of its owner's annotations (``owner.
    gpufleet.io/checkpoint-gb``); ``...`` as the value removes the field."""
    def change(wl: dict[str, Any], owner: dict[str, Any]) -> None:
        if path.startswith("owner."):
            target, keys = owner["metadata"]["annotations"], [path.removeprefix("owner.")]
        else:
            target, keys = wl, path.split(".")
        for k in keys[:-1]:
            target = target[k]
        if value is ...:
            target.pop(keys[-1], None)
        else:
            target[keys[-1]] = copy.deepcopy(value)
    return change


QR, EV, FIN = ({"type": t, "status": "True"} for t in ("QuotaReserved", "Evicted", "Finished"))
ALL = [QR, EV, FIN]
IN_POOL = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "gpufleet.io/pool", "operator": "In", "values": ["p1", "p2"]}]}]}}}
TEMPLATE = "spec.podSets"
ASSIGNED = "status.admission.podSetAssignments"

# Each a Workload hostile (or only unusual) in one place a fast path reads, or in two (which error reports).
CHANGES: list[list[Callable[[dict[str, Any], dict[str, Any]], None]]] = [
    [],
    # status.conditions: read in one walk of a list of dicts, else as condition_true reads them
    [_set("status.conditions", ...)], [_set("status.conditions", None)], [_set("status.conditions", [])],
    [_set("status.conditions", {"QuotaReserved": "True"})], [_set("status.conditions", "QuotaReserved")],
    [_set("status.conditions", 7)], [_set("status.conditions", [7, QR])], [_set("status.conditions", [QR, "x"])],
    [_set("status.conditions", [*ALL, "x"])], [_set("status.conditions", [QR, EV, None, FIN])],
    [_set("status.conditions", [QR, FIN, ["x"]])], [_set("status.conditions", ALL)],
    [_set("status.conditions", [{**QR, "status": "False"}, QR])],
    [_set("status.conditions", [QR, {**QR, "status": "x"}])],
    [_set("status.conditions", [{"type": "QuotaReserved", "status": "true"}, {"status": "True"}, EV])],
    [_set("status.conditions", [{"type": ["QuotaReserved"], "status": "True"}, FIN])],
    [_set("status.conditions", [EV, {"type": "Evicted", "status": "False"}, {**FIN, "status": "False"}])],
    [_set("status.conditions", [{}, QR])],
    # nominated clusters, cluster name, evictions, managed fields
    [_set("status.nominatedClusterNames", ["w1", "w2"])], [_set("status.nominatedClusterNames", "w1")],
    [_set("status.nominatedClusterNames", [1])], [_set("status.nominatedClusterNames", {})],
    [_set("status.nominatedClusterNames", ["w1", None])], [_set("status.nominatedClusterNames", 0)],
    [_set("status.clusterName", "w1")], [_set("status.clusterName", 5)], [_set("status.clusterName", "")],
    [_set("status.schedulingStats", {"evictions": [{"count": 2}, {"count": 3}]})],
    [_set("status.schedulingStats", {"evictions": []}), _set("status.requeueState", {"count": 4})],
    [_set("status.schedulingStats", {"evictions": "x"})], [_set("status.schedulingStats", {"evictions": [5]})],
    [_set("status.schedulingStats", {"evictions": [{"count": "x"}]})], [_set("status.requeueState", {"count": "x"})],
    [_set("status.schedulingStats", [])], [_set("status.schedulingStats", {"evictions": {"count": 1}})],
    [_set("metadata.managedFields", [{"manager": "kueue-admission", "subresource": "status",
                                      "time": "2026-11-23T10:05:00Z",
                                      "fieldsV1": {"f:status": {"f:nominatedClusterNames": {}}}}])],
    [_set("metadata.managedFields", [5])], [_set("metadata.managedFields", "x")],
    [_set("metadata.managedFields", [])], [_set("metadata.managedFields", {})],
    [_set("status.accumulatedPastExecutionTimeSeconds", 7200)],
    [_set("status.accumulatedPastExexcutionTimeSeconds", 3600)],
    [_set("status.accumulatedPastExecutionTimeSeconds", "72")],
    [_set("status.accumulatedPastExecutionTimeSeconds", None), _set("status.accumulatedPastExexcutionTimeSeconds", 36)],
    [_set("status.accumulatedPastExecutionTimeSeconds", 2**31)],
    [_set("status.accumulatedPastExecutionTimeSeconds", -1)],
    [_set("status.accumulatedPastExecutionTimeSeconds", None)],
    [_set("status.accumulatedPastExecutionTimeSeconds", True)],
    # two hostile fields: the one read first reports, as ever
    [_set("spec.priority", "high"), _set("status.conditions", [7])],
    [_set("status.conditions", [7]), _set("spec.podSets", [{"name": "main", "count": "x"}])],
    [_set("metadata.managedFields", [5]), _set("status.conditions", "x")],
    [_set("metadata.managedFields", [5]), _set("spec.priority", "high")],
    [_set("status.nominatedClusterNames", [1]), _set("status.schedulingStats", {"evictions": [5]})],
    [_set("status.schedulingStats", {"evictions": [5]}), _set("spec.priority", "high")],
    [_set("metadata", ["x"])], [_set("metadata", "x")], [_set("metadata.creationTimestamp", "yesterday")],
    [_set("metadata", ["x"]), _set("spec.priority", "high")],
    [_set("metadata.namespace", ...)], [_set("metadata.uid", 7)],
    [_set("spec.priority", "high")], [_set("spec.priority", None)], [_set("spec.priority", 7.9)], [_set("spec", [1])],
    [_set("spec.queueName", 5)], [_set("status", [1])], [_set("status.admission", ...)],
    [_set("status.admissionChecks", [{"name": QUEUE, "state": "Ready"}])], [_set("status.admissionChecks", [5])],
    [_set("status.admissionChecks", {QUEUE: "Pending"})], [_set("status.admissionChecks", [{"name": "other"}])],
    [_set("status.admissionChecks", [{"name": "other"}, {"name": QUEUE, "state": "Pending"}, {"name": QUEUE}])],
    [_set("status.admission.clusterQueue", "elsewhere")],
    # owner references
    [_set("metadata.ownerReferences", [])], [_set("metadata.ownerReferences", ...)],
    [_set("metadata.ownerReferences", {"kind": "Job"})], [_set("metadata.ownerReferences", "x")],
    [_set("metadata.ownerReferences", 5)], [_set("metadata.ownerReferences", [5])],
    [_set("metadata.ownerReferences", [{"apiVersion": "v1", "kind": "Pod", "name": "p"},
                                       {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "controller": True}])],
    [_set("metadata.ownerReferences", [{"apiVersion": "batch/v1", "kind": "Job", "name": "a"},
                                       {"apiVersion": "batch/v1", "kind": "Job", "name": "b"}])],
    [_set("metadata.ownerReferences", [{"apiVersion": "batch/v1", "kind": "Job", "name": "a"}, 5])],
    [_set("metadata.ownerReferences", [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "s",
                                        "controller": True}])],
    # pod sets: usages, assignments, templates and their pools
    [_set(ASSIGNED, {"main": 1})], [_set(ASSIGNED, ...)], [_set(ASSIGNED, [5])],
    [_set(ASSIGNED, [{"name": "main", "count": 2, "resourceUsage": {"nvidia.com/gpu": 16}}])],
    [_set(ASSIGNED, [{"name": "main", "count": 2, "resourceUsage": {"nvidia.com/gpu": "16", "cpu": "9" * 65}}])],
    [_set(ASSIGNED, [{"name": "main", "count": 2, "resourceUsage": {f"example.com/r{i}": "1" for i in range(40)}}])],
    [_set(ASSIGNED, [{"name": "main", "count": 2, "resourceUsage": ["8"]}])],
    [_set(ASSIGNED, [{"name": "main", "count": 2, "resourceUsage": {"nvidia.com/gpu": "16"}},
                     {"name": "main", "count": 3, "resourceUsage": {"nvidia.com/gpu": "24"}}])],
    [_set(TEMPLATE, [{"name": "main", "count": 2, "template": {"spec": {"nodeSelector": {"gpufleet.io/pool": "p"}}}}])],
    [_set(TEMPLATE, [{"name": "main", "count": 2, "template": {"spec": {"affinity": IN_POOL}}}])],
    [_set(TEMPLATE, [{"name": "main", "count": 2, "template": {"spec": {"nodeSelector": {}, "affinity": None}}}])],
    [_set(TEMPLATE, [{"name": "main", "count": 2, "template": {"spec": {"nodeSelector": {"zone": "a"}}}}])],
    [_set(TEMPLATE, [{"name": "main", "count": 2, "template": {"spec": {"affinity": {"nodeAffinity": 5}}}}])],
    [_set(TEMPLATE, [{"name": "main", "count": 2, "template": {"spec": ["x"]}}])],
    [_set(TEMPLATE, [{"name": "main", "count": 2, "template": {"spec": {}}}])],
    [_set(TEMPLATE, [{"name": "main", "count": 2, "template": {"spec": None}}])],
    [_set(TEMPLATE, [{"name": "main", "count": 2, "template": "x"}])],
    [_set(TEMPLATE, [{"name": "main", "count": 2, "template": []}])],
    [_set(TEMPLATE, [{"name": "main", "count": 2, "template": {"spec": "x"}}])],
    [_set(TEMPLATE, [{"name": "main", "count": 2, "template": {}}, {"name": "aux", "count": 1, "template": {
        "spec": {"containers": [{"resources": {"limits": {"cpu": "2"}}}]}}}])],
    [_set(TEMPLATE, "x")], [_set(TEMPLATE, [5])],
    # the owner's annotations
    [_set("owner." + contract.CHECKPOINT_HOME, ...)], [_set("owner." + contract.CHECKPOINT_HOME, "")],
    [_set("owner." + contract.CHECKPOINT_HOME, "s3://ckpt/a b")], [_set("owner." + contract.CHECKPOINT_HOME, 5)],
    [_set("owner." + contract.CHECKPOINT_HOME, "s3://" + "x" * 1100)],
    # whitespace the reader refuses in a URI, anywhere (str.isspace: ASCII, separators, Unicode spaces), and look-alikes
    *([_set("owner." + contract.CHECKPOINT_HOME, home)] for home in (
        "s3://ckpt/a\u3000b", "s3://ckpt/a\x1cb", "s3://ckpt/\x85", "\u00a0s3://ckpt/a", "s3://ckpt/a\u2028",
        "s3://ckpt/a\u200bb", "s3://ckpt/a\ufeffb", " ", "\t", "s3://ckpt/a\n")),
    [_set("owner." + contract.CHECKPOINT_REGION, ...)], [_set("owner." + contract.CHECKPOINT_REGION, "aws:nowhere-1")],
    [_set("owner." + contract.CHECKPOINT_REGION, "mars:us-east-1")], [_set("owner." + contract.CHECKPOINT_REGION, 5)],
    [_set("owner." + contract.CHECKPOINT_REGION, "gcp:us-central1")],
    [_set("owner." + contract.CHECKPOINT_GB, "lots")], [_set("owner." + contract.CHECKPOINT_GB, "")],
    [_set("owner." + contract.CHECKPOINT_GB, 140.0)], [_set("owner." + contract.CHECKPOINT_GB, "2e6")],
    [_set("owner." + contract.CHECKPOINT_HOME, ...), _set("owner." + contract.CHECKPOINT_REGION, ...),
     _set("owner." + contract.CHECKPOINT_GB, "5")],
    [_set("owner." + contract.FABRIC_GROUP, "Bad Group")], [_set("owner." + contract.FABRIC_GROUP, "nvlink")],
    [_set("owner." + contract.FABRIC_GROUP, ...)], [_set("owner." + contract.FABRIC_GROUP, 5)],
    [_set("owner." + contract.WORKERS, "w1,,W2")], [_set("owner." + contract.WORKERS, "")],
    [_set("owner." + contract.WORKERS, ["w1"])],
    # values equal to one another but not the same JSON (1, true, 1.0), or not kept (a mapping, too long): the
    # annotations' memo keeps strings only, so none of them is read as another
    *([_set("owner." + contract.FABRIC_GROUP, value)] for value in (1, True, 1.0, 1, True, 1.0, 0, False, 0.0, 0)),
    [_set("owner." + contract.WORKERS, {"w1": 1})], [_set("owner." + contract.CHECKPOINT_REGION, ["aws:us-east-1"])],
    [_set("owner." + contract.WORKERS, "w1," * 6000)], [_set("owner." + contract.WORKERS, "w1," * 6000)],
    [_set("owner." + contract.STEPS_PER_HOUR, 600)], [_set("owner." + contract.STEPS_PER_HOUR, 600.0)],
    [_set("owner." + contract.STEPS_PER_HOUR, 600)], [_set("owner." + contract.STEPS_PER_HOUR, 600.0)],
    [_set("owner." + contract.LAST_DURABLE_STEP, "1200"), _set("owner." + contract.STEPS_PER_HOUR, "600")],
    [_set("owner." + contract.LAST_DURABLE_STEP, "1200")], [_set("owner." + contract.STEPS_PER_HOUR, "600")],
    [_set("owner." + contract.LAST_DURABLE_STEP, "-1"), _set("owner." + contract.STEPS_PER_HOUR, "x")],
    [_set("owner." + contract.LAST_DURABLE_STEP, None)], [_set("owner." + contract.LAST_DURABLE_STEP, 12)],
    [_set("owner." + contract.FABRIC_GROUP, "Bad Group"), _set("owner." + contract.WORKERS, "W1"),
     _set("owner." + contract.CHECKPOINT_GB, "x"), _set("owner." + contract.STEPS_PER_HOUR, "600")],
    [_set("owner.example.com/other", "kept out of every read")],
    [_set("owner." + contract.JOB_SPEC, contract.job_spec_text({"name": "j", **SPEC, "checkpoint": {"size_gb": 9}}))],
    [_set("owner." + contract.JOB_SPEC, contract.job_spec_text({"name": "j", **SPEC, "model": {"parameters_b": 7}}))],
    [_set("owner." + contract.JOB_SPEC, contract.job_spec_text({"name": "Bad_Name", **SPEC}))],
    [_set("owner." + contract.JOB_SPEC, contract.job_spec_text({"name": "9-digit", **SPEC}))],
    [_set("owner." + contract.JOB_SPEC, contract.job_spec_text({"name": "a" * 60, **SPEC}))],
    [_set("owner." + contract.JOB_SPEC, contract.job_spec_text({"name": "j", **SPEC, "usd_per_hour_of_delay": 0}))],
    [_set("owner." + contract.JOB_SPEC, "{not json")], [_set("owner." + contract.JOB_SPEC, ["x"])],
    [_set("owner." + contract.JOB_SPEC, "")], [_set("owner." + contract.JOB_SPEC, ...)],
]


def _hostile_items() -> list[tuple[Any, Any]]:
    items: list[tuple[Any, Any]] = []
    for i, changes in enumerate(CHANGES):
        wl, owner = _raw(i), {"metadata": {"annotations": _annotations(i)}}
        for change in changes:
            change(wl, owner)
        items.append((wl, owner))
    # owners that are not what submit writes at all
    items += [(_raw(900), None), (_raw(901), {}), (_raw(902), {"metadata": None}), (_raw(903), {"metadata": ["x"]}),
              (_raw(904), {"metadata": {"annotations": None}}), (_raw(905), {"metadata": {"annotations": ["x"]}}),
              (_raw(906), {"metadata": {"annotations": {}}})]
    return items


def test_workloads_hostile_where_a_fast_path_reads_read_as_before(reference: ModuleType) -> None:
    items = _hostile_items()
    fast = _compare(reference, items)
    assert sum(w is not None and w.problem is not None for w in fast) >= 30
    assert sum(w is None for w in fast) >= 4
    assert sum(w is not None and bool(w.warnings) for w in fast) >= 15
    _compare(reference, items[::-1])  # the memos filled in another order


def _spec_texts() -> list[Any]:
    """Job specs of a few shapes in many sizes, in a pass's order: each size after another of its shape is read from
    that one's job (the GPUs, hours and name its own), unless its numbers are not plain or not the top-level ones."""
    text = contract.job_spec_text
    out: list[Any] = []
    for i, (gpus, hours) in enumerate([(8, 2), (16, 6), (32, 2.5), (8, 0), (16, 12), (24, 7.25), (64, 1), (8, 2)]):
        out += [text({"name": f"s{i}", **SPEC, "gpus": gpus, "hours": hours}),
                text({"name": f"t{i}", **SPEC, "gpus": gpus, "hours": hours, "usd_per_hour_of_delay": 3}),
                text({"name": f"u{i}", **SPEC, "gpus": gpus, "hours": hours, "gpus_per_node": 8})]
    out += [
        text({"name": "v1", **SPEC, "gpus": 0}), text({"name": "v2", **SPEC, "gpus": 10**9 - 1}),
        text({"name": "v3", **SPEC, "gpus": 8.0}), text({"name": "v4", **SPEC, "gpus": True}),
        text({"name": "v5", **SPEC, "gpus": "8"}), text({"name": "v6", **SPEC, "hours": "3"}),
        text({"name": "v7", **SPEC, "hours": -1}), text({"name": "v8", **SPEC, "hours": 1e3}),
        text({"name": "v9", **SPEC, "hours": 2.50}), text({"name": "v10", **SPEC, "hours": 10**6}),
        text({"name": "v11", **SPEC, "hours": 0.1 + 0.2}), text({"name": "v12", **SPEC, "gpus": 12}),
        text({"name": "a" * 58, **SPEC, "gpus": 8}), text({"name": "a" * 58, **SPEC, "gpus": 256}),  # a JobSet's pods
        text({"name": "9-lead", **SPEC, "gpus": 8}), text({"name": "9-lead", **SPEC, "gpus": 16}),
        text({"name": "w1", **SPEC, "data": {"dataset": {**SPEC["data"]["dataset"], "gpus": 8}}}),  # "gpus" twice
        text({"name": "w2", **{k: v for k, v in SPEC.items() if k != "gpus"}, "data": {"gpus": 16}}),  # nested only
        text({"name": "w3", **{k: v for k, v in SPEC.items() if k != "gpus"}, "data": {"gpus": 8}}),
        text({"name": "w4", **SPEC, "team": "hours"}),  # "hours" twice, once as a value
        text({"name": "w5", **SPEC}).replace('"gpus":16', '"gpus":16,"gpus":8'),  # the key twice
        text({"name": "w6", **SPEC}).replace('"hours":3', '"hours":3 '),  # not submit's form
        text({"name": "w9", **SPEC}).replace('"gpus":16', '"gpus":016'),  # leading zeros: not JSON
        text({"name": "w10", **SPEC}).replace('"hours":3', '"hours":03'),
        text({"name": "w11", **SPEC}).replace('"hours":3', '"hours":3.'),
        text({"name": "w12", **SPEC, "data": {"dataset": {**SPEC["data"]["dataset"], "gpus": 16}}}),  # nested first
        text({"name": "w13", **SPEC, "data": {"dataset": {**SPEC["data"]["dataset"], "gpus": 8}}}),
        text({"name": "w14", **SPEC, "gpus": 8, "data": {"dataset": {**SPEC["data"]["dataset"], "gpus": 16}}}),
        text({"name": "w15", **SPEC, "checkpoint": {"hours": 3}}),  # "hours" nested, after the top-level one
        text({"name": "w16", **SPEC, "checkpoint": {"hours": 5}}),
        text({"name": "w17", **SPEC, "hours": 5, "checkpoint": {"hours": 3}}),
        text({"name": "w7", **SPEC, "gpus_per_node": 4}),  # no H100 shape has 4 GPUs per node: refused at any size
        text({"name": "w8", **SPEC, "gpus_per_node": 4, "gpus": 8}),
    ]
    return out


def test_job_specs_of_one_shape_in_other_sizes_read_as_before(reference: ModuleType) -> None:
    items = []
    for i, spec_text in enumerate(_spec_texts()):
        wl, annotations = _raw(i), _annotations(i)
        annotations[contract.JOB_SPEC] = spec_text
        items.append((wl, {"metadata": {"annotations": annotations}}))
    fast = _compare(reference, items)
    assert snapshot._BY_SHAPE, "sizes of a shape are read from one of them"
    assert sum(w is not None and w.job is not None for w in fast) >= 30
    assert sum(w is not None and w.job_error is not None for w in fast) >= 10
    _compare(reference, items[::-1])
    _compare(reference, items[1::2] + items[::2])


def test_the_size_is_cut_only_around_plain_numbers_named_once() -> None:
    """No job field parse_job accepts today holds a "gpus" or "hours" of its own: a text naming either twice (a field
    of a newer schema, a value) is read the slow way all the same, as is a number JSON would read otherwise."""
    text = contract.job_spec_text({"name": "a", **SPEC, "hours": 7.25, "team": "ml"})
    key, _ = snapshot._split_name(text) or ("", "")
    assert snapshot._split_size(key) == (key.replace('"gpus":16', '"gpus":').replace('"hours":7.25', '"hours":'),
                                         16, 7.25)
    for odd in (key.replace('"hours":7.25', '"hours":7.25,"x":{"gpus":8}'),  # named twice
                key.replace('"accelerator"', '"x":{"hours":1},"accelerator"'), key.replace('"ml"', '"gpus"'),
                key.replace('"gpus":16', '"gpus":016'), key.replace('"gpus":16', '"gpus":16.0'),
                key.replace('"gpus":16', '"gpus":1e3'), key.replace('"gpus":16', '"gpus":-16'),
                key.replace('"hours":7.25', '"hours":7.'), key.replace('"hours":7.25', '"hours":07.25'),
                key.replace('"hours":7.25', '"hours":7.25e1'), key.replace('"hours":7.25', '"hours":"7.25"'),
                key.replace('"gpus":16', '"gpus" :16'), "{}", ""):
        assert snapshot._split_size(odd) is None, odd


def test_a_hub_workload_made_of_a_dict_refuses_a_name_that_is_no_field() -> None:
    fields = {"namespace": "t", "name": "w", "uid": "u", "created": 0.0, "priority": 0, "queue_name": "q",
              "cluster_queue": None, "check": None, "check_state": None, "allowed": ()}
    _same(HubWorkload.of(fields), HubWorkload(**fields))
    with pytest.raises(TypeError, match="nmae"):
        HubWorkload.of({**fields, "nmae": "w"})


def test_a_need_made_without_its_init_is_the_same_need() -> None:
    from placement.dispatch.model import Need
    from placement.model.kueue import Allocatable

    for pools in (None, frozenset({"p1"})):
        per_pod = Allocatable(1, 2, 3, 4)
        made, plain = Need.of("main", 2, per_pod, pools), Need("main", 2, per_pod, pools)
        _same(made, plain)
        assert list(made.__dict__.items()) == list(plain.__dict__.items()) and hash(made) == hash(plain)


def test_a_home_without_whitespace_is_read_as_the_reader_reads_it() -> None:
    """The snapshot's check of a home's URI for whitespace (str.split) is the reader's (str.isspace), on every
    character and on a URI."""
    for c in map(chr, range(sys.maxunicode + 1)):
        for home in (c, f"s3://b/{c}x"):
            assert (home.split() == [home]) == (not any(map(str.isspace, home))), ascii(home)
