"""Kueue objects -> the dispatcher's snapshots, and the nomination it applies (Kueue v0.19.2 field names)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from placement.dispatch import snapshot
from placement.fleet.manifests import GROUP_ANNOTATION, JOB_SPEC_ANNOTATION, WORKERS_ANNOTATION
from placement.model.kueue import Allocatable


@pytest.mark.parametrize("text, value", [("1500m", 1.5), ("32Gi", 32 * 2**30), ("8", 8.0), (8, 8.0), ("1e3", 1000.0),
                                         ("2k", 2000.0), ("100Mi", 100 * 2**20), ("1E", 1e18)])
def test_quantities(text: Any, value: float):
    assert snapshot.quantity(text) == pytest.approx(value)


def test_pod_requests_count_sidecars_and_the_largest_init_container():
    template = {"spec": {
        "containers": [{"resources": {"requests": {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "8"}}}],
        "initContainers": [{"restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}},
                           {"resources": {"limits": {"cpu": "8", "memory": "512Mi"}}}]}}
    assert snapshot.pod_requests(template) == Allocatable(cpu_millis=8000, memory_mib=1024, gpus=8, efa=0)


@pytest.mark.parametrize("spec, pools", [
    ({}, None),
    ({"nodeSelector": {"gpufleet.io/pool": "a"}}, {"a"}),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpufleet.io/pool", "operator": "In", "values": ["a", "b"]}]},
        {"matchExpressions": [{"key": "gpufleet.io/pool", "operator": "In", "values": ["c"]}]}]}}}}, {"a", "b", "c"}),
    # A term without a pool constraint matches any pool (terms are ORed).
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpufleet.io/pool", "operator": "In", "values": ["a"]}]},
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z"]}]}]}}}}, None),
])
def test_pool_affinity(spec: dict[str, Any], pools: set[str] | None):
    got = snapshot.pool_affinity({"spec": spec})
    assert (None if got is None else set(got)) == pools


def hub_workload(**status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "job-x", "namespace": "team-a", "uid": "u1", "resourceVersion": "42",
                         "creationTimestamp": "2026-11-23T10:00:00Z",
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "x",
                                              "controller": True}],
                         "managedFields": [{"manager": "kueue-admission", "operation": "Apply", "subresource": "status",
                                            "time": "2026-11-23T10:05:00Z",
                                            "fieldsV1": {"f:status": {"f:nominatedClusterNames": {}}}}]},
            "spec": {"queueName": "all-workers", "priority": 500, "podSets": [{"name": "node", "count": 2}]},
            "status": {"admission": {"clusterQueue": "all-workers", "podSetAssignments": [
                {"name": "node", "count": 2,
                 "resourceUsage": {"nvidia.com/gpu": "16", "cpu": "300", "memory": "2Gi"}}]},
                       "conditions": [{"type": "QuotaReserved", "status": "True"},
                                      {"type": "PodsReady", "status": "False"}, {"type": "Custom", "status": "True"}],
                       "admissionChecks": [{"name": "all-workers", "state": "Pending"}],
                       "nominatedClusterNames": ["w1"], "requeueState": {"count": 1}, **status}}


OWNER = {"metadata": {"annotations": {
    JOB_SPEC_ANNOTATION: json.dumps({"name": "x", "accelerator": "H100", "gpus": 16, "hours": 5,
                                     "usd_per_hour_of_delay": 30}),
    GROUP_ANNOTATION: "efa", WORKERS_ANNOTATION: "w1,w2"}}}
CHECKS = {"all-workers": "all-workers"}
CONFIGS = {"all-workers": ("w1", "w2", "w3")}


def test_a_hub_workload_with_its_owners_annotations():
    wl = snapshot.hub_workload(hub_workload(), OWNER, CHECKS, CONFIGS, {"all-workers": frozenset({"all-workers"})})
    assert wl is not None
    assert (wl.key, wl.priority, wl.check_state, wl.allowed, wl.nominated) == (
        "team-a/job-x", 500, "Pending", ("w1", "w2", "w3"), ("w1",))
    assert wl.nominated_since == snapshot.parse_time("2026-11-23T10:05:00Z")
    assert wl.job is not None and wl.job.gpus == 16 and wl.group == "efa" and wl.group_workers == ("w1", "w2")
    assert wl.delay_usd_per_hour == 30.0 and wl.evictions == 1 and wl.waiting_reason() is None
    (need,) = wl.needs
    assert need.count == 2 and need.per_pod == Allocatable(150_000, 1024, 8, 0)  # the reserved usage, per pod


def test_the_jobs_price_of_waiting_is_its_delay_rate_only_when_its_spec_sets_one():
    cq = {"all-workers": frozenset({"all-workers"})}

    def owner(**extra: Any) -> dict[str, Any]:
        spec = {"name": "x", "accelerator": "H100", "gpus": 16, "hours": 5, **extra}
        return {"metadata": {"annotations": {JOB_SPEC_ANNOTATION: json.dumps(spec)}}}

    unset = snapshot.hub_workload(hub_workload(), owner(), CHECKS, CONFIGS, cq)
    zero = snapshot.hub_workload(hub_workload(), owner(usd_per_hour_of_delay=0), CHECKS, CONFIGS, cq)
    assert unset is not None and unset.delay_usd_per_hour is None  # the dispatcher's per-GPU default applies
    assert zero is not None and zero.delay_usd_per_hour == 0.0  # set to 0: waiting is free for this job


def test_only_workloads_of_a_cluster_queue_with_a_multikueue_check():
    raw = hub_workload()
    assert snapshot.hub_workload(raw, OWNER, CHECKS, CONFIGS, {"all-workers": frozenset()}) is None
    assert snapshot.hub_workload(raw, OWNER, {}, CONFIGS, {"all-workers": frozenset({"all-workers"})}) is None
    bad = {"metadata": {"annotations": {JOB_SPEC_ANNOTATION: json.dumps({"name": "x"})}}}
    wl = snapshot.hub_workload(raw, bad, CHECKS, CONFIGS, {"all-workers": frozenset({"all-workers"})})
    assert wl is not None and wl.job is None and wl.job_error is not None and "accelerator" in wl.job_error


def test_the_nomination_carries_kueues_whole_admission_status_and_only_changes_the_nomination():
    raw = hub_workload()
    body = snapshot.nomination(raw, ["w2"])
    assert body["metadata"] == {"name": "job-x", "namespace": "team-a", "uid": "u1", "resourceVersion": "42"}
    st = body["status"]
    assert st["nominatedClusterNames"] == ["w2"]
    assert st["admission"] == raw["status"]["admission"]
    assert st["admissionChecks"] == raw["status"]["admissionChecks"]
    assert st["requeueState"] == {"count": 1}
    assert [c["type"] for c in st["conditions"]] == ["QuotaReserved", "PodsReady"]  # Kueue's admission conditions
    assert "clusterName" not in st


def test_worker_state_flavors_in_queue_order_with_reservations_and_running_time_left():
    now = snapshot.parse_time("2026-11-23T12:00:00Z")
    assert now is not None
    objects = {
        "resourceflavors": [{"metadata": {"name": "f-spot"}, "spec": {"nodeLabels": {"gpufleet.io/pool": "spot"}}},
                            {"metadata": {"name": "f-od"}, "spec": {"nodeLabels": {"gpufleet.io/pool": "od"}}}],
        "localqueues": [{"metadata": {"name": "all-workers", "namespace": "team-a"}, "spec": {"clusterQueue": "cq"}}],
        "clusterqueues": [{"metadata": {"name": "cq"}, "spec": {"resourceGroups": [{"flavors": [
            {"name": "f-spot", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 32}]},
            {"name": "f-od", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 16}]}]}]},
            "status": {"flavorsReservation": [{"name": "f-spot", "resources": [{"name": "nvidia.com/gpu",
                                                                              "total": "8"}]}]}}],
        "workloads": [
            {"metadata": {"name": "run", "namespace": "team-a", "creationTimestamp": "2026-11-23T09:00:00Z"},
             "spec": {"queueName": "all-workers", "podSets": [{"name": "m", "count": 1}]},
             "status": {"conditions": [{"type": "QuotaReserved", "status": "True",
                                        "lastTransitionTime": "2026-11-23T10:00:00Z"}],
                        "admission": {"clusterQueue": "cq", "podSetAssignments": [
                            {"name": "m", "count": 1, "flavors": {"nvidia.com/gpu": "f-spot"},
                             "resourceUsage": {"nvidia.com/gpu": "8"}}]}}},
            {"metadata": {"name": "wait", "namespace": "team-a", "creationTimestamp": "2026-11-23T11:00:00Z"},
             "spec": {"queueName": "all-workers", "priority": 100, "podSets": [{"name": "m", "count": 2, "template": {
                 "spec": {"containers": [{"resources": {"requests": {"nvidia.com/gpu": "8"}}}]}}}]}},
            {"metadata": {"name": "done", "namespace": "team-a"}, "spec": {"queueName": "all-workers"},
             "status": {"conditions": [{"type": "Finished", "status": "True"}]}}]}
    w = snapshot.worker_state("w1", None, objects, now, {("team-a", "run"): 5.0, ("team-a", "wait"): 3.0})
    cq = w.cluster_queues["cq"]
    assert [(f.name, f.pool, f.nominal.gpus, f.reserved.gpus) for f in cq.flavors] == [
        ("f-spot", "spot", 32, 8, ), ("f-od", "od", 16, 0)]
    run, wait = sorted(cq.workloads, key=lambda q: q.name)
    assert run.admitted and run.flavors == {"f-spot"} and run.remaining_hours == pytest.approx(3.0)  # 5 h - 2 h
    assert not wait.admitted and wait.gpus == 16 and wait.priority == 100 and wait.hours == 3.0
    assert w.local_queues == {("team-a", "all-workers"): "cq"}
    assert cq.cohort is None and cq.flavors[0].lending_limit is None and cq.flavors[0].borrowing_limit is None


def test_worker_state_reads_each_queues_cohort_and_its_per_resource_lending_and_borrowing_limits():
    from placement.dispatch.model import UNLIMITED

    serve = {"metadata": {"name": "serve"}, "spec": {"cohortName": "gpufleet", "resourceGroups": [{"flavors": [
        {"name": "f", "resources": [{"name": "cpu", "nominalQuota": "4", "borrowingLimit": 0},
                                    {"name": "nvidia.com/gpu", "nominalQuota": 8, "borrowingLimit": 0,
                                     "lendingLimit": 4}]}]}]}}
    w = snapshot.worker_state("w1", None, {"clusterqueues": [serve]}, 0.0)
    (f,) = w.cluster_queues["serve"].flavors
    assert w.cluster_queues["serve"].cohort == "gpufleet"
    assert f.borrowing_limit is not None and (f.borrowing_limit.cpu_millis, f.borrowing_limit.gpus) == (0, 0)
    assert f.borrowing_limit.memory_mib == UNLIMITED  # no limit set on memory
    assert f.lending_limit is not None and f.lending_limit.gpus == 4 and f.lending_limit.cpu_millis == UNLIMITED


# ----------------------------------------------------------------------------- hostile objects (issue 21)


def _pending_workload(**status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "w", "namespace": "team-a", "uid": "u-1"},
            "spec": {"queueName": "all-workers", "podSets": [{"name": "main", "count": 1, "template": {}}]},
            "status": {"admission": {"clusterQueue": "all-workers", "podSetAssignments": []},
                       "conditions": [{"type": "QuotaReserved", "status": "True"}],
                       "admissionChecks": [{"name": "mk", "state": "Pending"}], **status}}


@pytest.mark.parametrize("status", [{"nominatedClusterNames": [1, 2]}, {"nominatedClusterNames": "aws"},
                                    {"clusterName": {"a": 1}}, {"admissionChecks": "mk"},
                                    {"admission": {"clusterQueue": "all-workers",
                                                   "podSetAssignments": [{"name": "main", "count": "lots"}]}}])
def test_a_workload_that_cannot_be_read_comes_back_with_its_problem(status: dict[str, Any]):
    wl = snapshot.hub_workload(_pending_workload(**status), None, {"mk": "cfg"}, {"cfg": ("a",)},
                               {"all-workers": frozenset({"mk"})})
    assert wl is not None and wl.problem is not None and "cannot be read" in wl.problem
    assert (wl.namespace, wl.name, wl.uid) == ("team-a", "w", "u-1")


@pytest.mark.parametrize("text", ["1e400", "-1", "lots", float("inf"), 10**400, [1], True])
def test_quantities_that_are_not_finite_non_negative_numbers_are_refused(text: Any):
    with pytest.raises(ValueError):
        snapshot.quantity(text)


def _direct(text: str) -> tuple[Any, str | None]:
    """What read_job_spec answered before its memo: parse_job on every annotation."""
    from placement.errors import InputError
    from placement.model.jobspec import parse_job

    doc = json.loads(text)
    try:
        return parse_job(doc), None
    except InputError as exc:
        return None, f"{JOB_SPEC_ANNOTATION}: {exc}"


@pytest.mark.parametrize("name", ["train-a", "train-b", "Bad_Name", "9starts-with-digit",
                                  "a" * 60, "", None, 7])
@pytest.mark.parametrize("gpus", [8, 64])
def test_memoised_job_specs_are_what_parse_job_says_name_by_name(name: Any, gpus: int) -> None:
    # One shape under many names: the memo must never hand one Workload's name, or its verdict on a name
    # (a DNS-1123 label; a JobSet's pod names when no node holds the job), to another.
    spec = {"accelerator": "H100", "gpus": gpus, "hours": 3, "data": {"dataset": {
        "uri": "s3://d/x", "region": "us-east-1", "size_gb": 50}}}
    for first in ("warm-up", name):  # cached by another name first, then its own
        snapshot.read_job_spec(json.dumps({"name": first, **spec}))
    text = json.dumps({"name": name, **spec})
    parsed, error = snapshot.read_job_spec(text)
    want, want_error = _direct(text)
    assert error == want_error
    assert (parsed[1] if parsed else None) == want


def test_memoised_job_spec_refused_for_another_field_names_that_field_first() -> None:
    # A name parse_job refuses and a bad field: the name is named first, whether or not the spec was cached.
    spec = {"accelerator": "H100", "gpus": 8, "hours": -1}
    for name in ("ok-name", "Bad_Name", "ok-name"):
        text = json.dumps({"name": name, **spec})
        assert snapshot.read_job_spec(text)[1] == _direct(text)[1]


def test_memoised_job_spec_is_a_whole_job_spec() -> None:
    from dataclasses import fields

    from placement.model.jobspec import JobSpec

    spec = {"accelerator": "H100", "gpus": 8, "hours": 3}
    snapshot.read_job_spec(json.dumps({"name": "one", **spec}))
    parsed, _ = snapshot.read_job_spec(json.dumps({"name": "two", **spec}))
    want, _ = _direct(json.dumps({"name": "two", **spec}))
    assert parsed is not None and type(parsed[1]) is JobSpec
    assert [getattr(parsed[1], f.name) for f in fields(JobSpec)] == [getattr(want, f.name) for f in fields(JobSpec)]
    assert hash(parsed[1]) == hash(want) and repr(parsed[1]) == repr(want)
