"""Re-routing a job with progress (issue 25, item 2, the dispatcher's part): the move of its newest checkpoint from
its home to each other worker is priced (egress of the path + transfer time, in that worker's cost and ready time),
changes the pick where it should, is said in the Nominated Event, and the tenant-written annotations are hostile
input (issue 39: a missing or malformed one is read as unknown with a warning on that Workload, never refused; an
unknown size prices the move as unknown and the job is still nominated)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from siblings import sibling

from placement.dispatch import memory as remembered
from placement.dispatch import snapshot
from placement.dispatch.decide import decide, progress
from placement.dispatch.model import CheckpointHome, Memory
from placement.dispatch.move import CHECKPOINT_GB, CHECKPOINT_HOME, CHECKPOINT_REGION, checkpoint_home
from placement.fleet.manifests import JOB_SPEC_ANNOTATION
from placement.model.egress import egress_book, transfer_hours, transfer_usd

_h = sibling(__file__, "test_decide.py")
NOW, NS, QUEUE, pricing, worker, workload = _h.NOW, _h.NS, _h.QUEUE, _h.pricing, _h.worker, _h.workload
HOME = CheckpointHome(uri="s3://team-a-ckpt/llm", cloud="aws", region="us-east-1", gb=2000.0)
GOOD = {CHECKPOINT_HOME: HOME.uri, CHECKPOINT_REGION: "aws:us-east-1", CHECKPOINT_GB: "2000"}


def _fleet() -> tuple[list[Any], Any]:
    # a ran the job and evicted it; b (us-west-2) is a little cheaper than c (us-east-1, the checkpoint's region).
    workers = [worker("a", "us-east-1"), worker("b", "us-west-2"), worker("c", "us-east-1")]
    return workers, pricing({"a": ("us-east-1", 30.0), "b": ("us-west-2", 29.0), "c": ("us-east-1", 30.0)})


def _evicted(**kw: Any) -> tuple[Any, dict[str, Memory]]:
    wl = workload("llm", allowed=("a", "b", "c"), evictions=1, **kw)
    mem = Memory(nominated=("a",), since=NOW - 3000, tried=frozenset({"a"}), first_at=NOW - 3000, evictions=0)
    return wl, {wl.uid: mem}


def test_the_move_of_the_checkpoint_is_priced_and_changes_the_pick() -> None:
    workers, prices = _fleet()
    plain, mem = _evicted()
    (without,) = decide([plain], workers, prices, NOW, memory=mem).decisions
    assert without.clusters == ("b",)  # no checkpoint home: the cheaper worker

    moving, mem = _evicted(checkpoint=HOME)
    (d,) = decide([moving], workers, prices, NOW, memory=mem).decisions
    assert d.action == "nominate" and d.clusters == ("c",)  # b pays for reading 2,000 GB across the country
    scores = {s.worker: s for s in d.scores}
    base = {s.worker: s for s in without.scores}
    egress = transfer_usd(egress_book(), "aws", "us-east-1", "aws", "us-west-2", 2000.0)
    assert egress > 0 and scores["b"].move_usd == pytest.approx(egress)
    assert scores["b"].cost_usd == pytest.approx(base["b"].cost_usd + egress)
    hours = transfer_hours(2000.0, egress_book().throughput_gbps["inter_region"])
    assert scores["b"].move_hours == pytest.approx(hours)
    assert scores["b"].ready_hours == pytest.approx(base["b"].ready_hours + hours)
    assert scores["c"].move_usd == 0.0 and scores["c"].move_hours > 0  # same region: no egress, still the read
    assert scores["a"].move_usd == 0.0 and scores["a"].move_hours == 0.0  # where it ran: its own copy
    assert d.event is not None and d.event.reason == "Renominated"
    assert "re-route move: it ran on a" in d.event.message
    assert "2000 GB checkpoint from aws:us-east-1" in d.event.message
    assert "$0.00 egress" in d.event.message and HOME.uri in d.event.message
    assert d.memory is not None and d.memory.ran_on == frozenset({"a"})


def test_a_job_without_progress_or_with_a_cheap_move_keeps_the_cheaper_worker() -> None:
    workers, prices = _fleet()
    fresh = workload("fresh", allowed=("a", "b", "c"), checkpoint=HOME)  # never ran: nothing to move
    assert progress(fresh, None) is None
    (d,) = decide([fresh], workers, prices, NOW).decisions
    assert d.clusters == ("b",) and all(s.move_usd == 0 for s in d.scores) and "re-route" not in d.message
    small, mem = _evicted(checkpoint=replace(HOME, gb=10.0))  # $0.20 to move: b stays the cheaper
    (d,) = decide([small], workers, prices, NOW, memory=mem).decisions
    assert d.clusters == ("b",) and "re-route move" in d.message


def test_progress_on_an_unknown_worker_prices_every_worker() -> None:
    wl = workload("lost", allowed=("a", "b", "c"), evictions=2, checkpoint=HOME)
    assert progress(wl, None) == frozenset()
    workers, prices = _fleet()
    (d,) = decide([wl], workers, prices, NOW).decisions
    assert {s.worker for s in d.scores if s.move_hours > 0} == {"a", "b", "c"}
    assert "a worker not known here" in d.message


def test_where_it_ran_is_remembered_on_admission_and_survives_a_restart_in_the_events() -> None:
    workers, prices = _fleet()
    wl = workload("llm", allowed=("a", "b", "c"), checkpoint=HOME)
    (d,) = decide([wl], workers, prices, NOW).decisions
    admitted = replace(wl, cluster_name=d.clusters[0], check_state="Ready")
    (a,) = decide([admitted], workers, prices, NOW + 60, memory={wl.uid: d.memory}).decisions
    assert a.memory is not None and a.memory.ran_on == frozenset(d.clusters)
    event = {"metadata": {"name": "e", "namespace": NS, "annotations": remembered.as_annotations(a.memory, NOW)},
             "involvedObject": {"kind": "Workload", "uid": wl.uid, "namespace": NS},
             "source": {"component": "gpufleet-dispatch"}, "reportingComponent": remembered.REPORTING,
             "reportingInstance": "x"}
    assert remembered.recall([event], "gpufleet-dispatch")[wl.uid].ran_on == frozenset(d.clusters)
    del event["metadata"]["annotations"][remembered.RAN_ON]  # an Event of an older dispatcher: still memory
    assert remembered.recall([event], "gpufleet-dispatch")[wl.uid].ran_on == frozenset()


@pytest.mark.parametrize(("change", "named"), [
    ({CHECKPOINT_GB: "lots"}, CHECKPOINT_GB), ({CHECKPOINT_GB: "nan"}, CHECKPOINT_GB),
    ({CHECKPOINT_GB: "1e400"}, CHECKPOINT_GB), ({CHECKPOINT_GB: "-1"}, CHECKPOINT_GB),
    ({CHECKPOINT_GB: 12}, CHECKPOINT_GB), ({CHECKPOINT_GB: "9" * 5000}, CHECKPOINT_GB),
    ({CHECKPOINT_REGION: "us-east-1"}, CHECKPOINT_REGION), ({CHECKPOINT_REGION: "azure:eastus"}, CHECKPOINT_REGION),
    ({CHECKPOINT_REGION: "aws:mars-1"}, CHECKPOINT_REGION), ({CHECKPOINT_REGION: ["aws:us-east-1"]}, CHECKPOINT_REGION),
    ({CHECKPOINT_HOME: ""}, CHECKPOINT_HOME), ({CHECKPOINT_HOME: "s3://a\nb"}, CHECKPOINT_HOME),
    ({CHECKPOINT_HOME: {"uri": 1}}, CHECKPOINT_HOME), ({CHECKPOINT_HOME: None}, CHECKPOINT_HOME),
])
def test_hostile_checkpoint_annotations_are_read_as_unknown_naming_the_annotation(change: dict[str, Any],
                                                                                 named: str) -> None:
    home, warnings = checkpoint_home({**GOOD, **change})
    (why,) = warnings
    assert why.startswith(named) and "9" * 100 not in why
    if named == CHECKPOINT_GB:  # the size is unknown; the home is still the home
        assert home == replace(HOME, gb=None, gb_from="")
    else:  # the home and its region are required together
        assert home is None


def test_a_missing_annotation_is_named_and_none_at_all_is_no_home() -> None:
    assert checkpoint_home({}) == (None, ())
    assert checkpoint_home(GOOD) == (replace(HOME), ())
    home, (why,) = checkpoint_home({CHECKPOINT_HOME: HOME.uri})
    assert home is None and why.startswith(CHECKPOINT_REGION)
    # No size: valid (submit writes none when it does not know it), no warning.
    assert checkpoint_home({CHECKPOINT_HOME: HOME.uri, CHECKPOINT_REGION: "aws:us-east-1"}) == (
        replace(HOME, gb=None, gb_from=""), ())


def _raw(name: str, annotations: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    wl = {"metadata": {"name": f"job-{name}", "namespace": NS, "uid": f"uid-{name}",
                       "creationTimestamp": "2026-11-20T00:00:00Z",
                       "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name,
                                            "controller": True}]},
          "spec": {"queueName": QUEUE, "priority": 1000, "podSets": [{"name": "main", "count": 1, "template": {
              "spec": {"containers": [{"resources": {"requests": {"nvidia.com/gpu": "8"}}}]}}}]},
          "status": {"conditions": [{"type": "QuotaReserved", "status": "True"}],
                     "admission": {"clusterQueue": QUEUE, "podSetAssignments": [
                         {"name": "main", "count": 1, "resourceUsage": {"nvidia.com/gpu": "8"}}]},
                     "admissionChecks": [{"name": QUEUE, "state": "Pending"}]}}
    spec = json.dumps({"name": name, "accelerator": "H100", "gpus": 8, "hours": 10, "capacity": "spot"})
    owner = {"metadata": {"annotations": {JOB_SPEC_ANNOTATION: spec, **annotations}}}
    return wl, owner


def test_a_bad_annotation_is_a_warning_on_its_workload_which_is_still_nominated() -> None:
    checks, configs, cq_checks = {QUEUE: QUEUE}, {QUEUE: ("a", "b", "c")}, {QUEUE: frozenset({QUEUE})}
    wls = [snapshot.hub_workload(*_raw(n, ann), checks, configs, cq_checks)
           for n, ann in (("bad", {**GOOD, CHECKPOINT_GB: "1e400"}), ("good", GOOD),
                          ("region", {**GOOD, CHECKPOINT_REGION: "aws:mars-1"}))]
    assert all(w is not None for w in wls)
    bad, good, region = wls
    assert bad is not None and bad.job_error is None and bad.warnings[0].startswith(CHECKPOINT_GB)
    assert bad.checkpoint is not None and bad.checkpoint.gb is None
    assert region is not None and region.checkpoint is None and region.warnings[0].startswith(CHECKPOINT_REGION)
    assert good is not None and good.checkpoint == HOME and good.job_error is None and good.warnings == ()
    workers, prices = _fleet()
    result = {d.workload.name: d for d in decide([bad, good, region], workers, prices, NOW).decisions}
    for name in ("job-bad", "job-region"):
        d = result[name]
        assert d.action == "nominate" and d.event is not None and d.event.type == "Warning"
        assert "warning: " in d.event.message and ("1e400" in d.event.message or "mars-1" in d.event.message)
    assert result["job-good"].action == "nominate" and result["job-good"].event.type == "Normal"


def test_an_unknown_size_prices_the_move_as_unknown_and_still_nominates() -> None:
    workers, prices = _fleet()
    plain, mem = _evicted()
    (without,) = decide([plain], workers, prices, NOW, memory=mem).decisions
    unknown, mem = _evicted(checkpoint=replace(HOME, gb=None, gb_from=""))
    (d,) = decide([unknown], workers, prices, NOW, memory=mem).decisions
    assert d.action == "nominate" and d.clusters == without.clusters  # nothing counted: the cheaper worker
    scores = {s.worker: s for s in d.scores}
    assert not scores["b"].move_known and scores["b"].move_usd == 0 and scores["b"].move_hours == 0
    assert scores["b"].cost_usd == pytest.approx({s.worker: s for s in without.scores}["b"].cost_usd)
    assert scores["a"].move_known  # where it ran: no move at all
    assert d.event is not None and "of unknown size" in d.event.message
    assert "priced as unknown" in d.event.message and "not counted" in d.event.message


def test_without_an_annotated_size_the_job_specs_model_bounds_the_move() -> None:
    checks, configs, cq_checks = {QUEUE: QUEUE}, {QUEUE: ("a", "b", "c")}, {QUEUE: frozenset({QUEUE})}
    wl, owner = _raw("llm", {CHECKPOINT_HOME: HOME.uri, CHECKPOINT_REGION: "aws:us-east-1"})
    spec = json.loads(owner["metadata"]["annotations"][JOB_SPEC_ANNOTATION])
    owner["metadata"]["annotations"][JOB_SPEC_ANNOTATION] = json.dumps(
        {**spec, "model": {"parameters_b": 7, "training": "full"}})
    hw = snapshot.hub_workload(wl, owner, checks, configs, cq_checks)
    assert hw is not None and hw.checkpoint is not None and hw.warnings == ()
    assert hw.checkpoint.gb == pytest.approx(98.0) and hw.checkpoint.gb_from == "model.parameters_b"
    workers, prices = _fleet()
    moving = replace(hw, evictions=1)
    mem = {hw.uid: Memory(nominated=("a",), since=NOW - 3000, tried=frozenset({"a"}), first_at=NOW - 3000)}
    (d,) = decide([moving], workers, prices, NOW, memory=mem).decisions
    scores = {s.worker: s for s in d.scores}
    egress = transfer_usd(egress_book(), "aws", "us-east-1", "aws", "us-west-2", 98.0)
    assert scores["b"].move_known and scores["b"].move_usd == pytest.approx(egress)
    assert d.event is not None and "at most 98 GB" in d.event.message


def test_a_worker_in_another_cloud_than_the_home_is_told_the_job_restarts_there() -> None:
    # The home is in GCP, every worker in AWS: no stack grants an AWS training role a GCS bucket.
    workers, prices = _fleet()
    home = CheckpointHome(uri="gs://team-a-ckpt/llm", cloud="gcp", region="us-central1", gb=10.0)
    wl, mem = _evicted(checkpoint=home)
    (d,) = decide([wl], workers, prices, NOW, memory=mem).decisions
    scores = {s.worker: s for s in d.scores}
    assert scores["b"].restarts and scores["c"].restarts and not scores["a"].restarts  # a: its own copy
    assert d.clusters == ("b",) and d.event is not None
    assert "federate no identity of it there: the job restarts from step 0" in d.event.message
    assert scores["b"].move_case == "restarts" and scores["b"].move_usd == 0.0  # nothing read: it restarts
    # Same cloud: no such note (the stacks grant the peers of a hub each other's buckets).
    same, mem = _evicted(checkpoint=replace(HOME, gb=10.0))
    (d,) = decide([same], workers, prices, NOW, memory=mem).decisions
    assert not any(s.restarts for s in d.scores) and "step 0" not in d.message
