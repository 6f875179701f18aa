"""What the dispatcher observes on the workers for the plans (issue 26, item 1): spot nodes by zone and instance
type, their node-seconds and reclaims on a worker whose spot nodes come and go (the Kubernetes fake), provisioning
failures and admission waits, exported with the metric names the calibration reads; and read-only Nodes the only
new permission on a worker."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest
from dispatchfleet import Clock, Fleet

from infra.k8s import dispatcher as dp
from infra.k8s.kueue_objects import FLEX_START_CHECK
from placement.dispatch.observe import (
    PODS_READY_TIMEOUT,
    PROVISIONING_CHECKS,
    PROVISIONING_FAILED,
    SpotNode,
    observe_nodes,
    queue_events,
    spot_node,
    spot_nodes,
)
from placement.dispatch.snapshot import parse_time
from placement.dispatch.telemetry import Metrics

NODES = ("", "v1", "nodes")
WORKLOADS = ("kueue.x-k8s.io", "v1beta2", "workloads")
WORKER = "aws-use1-p5"


def node(name: str, *, spot: str | None = "eks", zone: str = "use1-az4", itype: str = "p5.48xlarge",
         taints: list[str] = (), unschedulable: bool = False) -> dict[str, Any]:  # type: ignore[assignment]
    labels = {"topology.kubernetes.io/zone": zone, "node.kubernetes.io/instance-type": itype}
    labels.update({"eks": {"eks.amazonaws.com/capacityType": "SPOT"},
                   "karpenter": {"karpenter.sh/capacity-type": "spot"},
                   "gke": {"cloud.google.com/gke-spot": "true"},
                   "preemptible": {"cloud.google.com/gke-preemptible": "true"},
                   None: {"eks.amazonaws.com/capacityType": "ON_DEMAND"}}[spot])
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "uid": f"uid-{name}", "labels": labels},
            "spec": {"taints": [{"key": t, "effect": "NoSchedule"} for t in taints],
                     **({"unschedulable": True} if unschedulable else {})}}


# ----------------------------------------------------------------------------- pure


@pytest.mark.parametrize("kind", ["eks", "karpenter", "gke", "preemptible"])
def test_each_clouds_capacity_label_marks_a_spot_node(kind: str) -> None:
    s = spot_node(node("n", spot=kind))
    assert s is not None and s.where == ("use1-az4", "p5.48xlarge")
    assert spot_node(node("n", spot=None)) is None


@pytest.mark.parametrize(("taints", "unschedulable", "signal"), [
    (["aws-node-termination-handler/spot-itn"], False, "aws-node-termination-handler/spot-itn"),
    (["cloud.google.com/impending-node-termination"], False, "cloud.google.com/impending-node-termination"),
    (["karpenter.sh/disrupted"], False, "karpenter.sh/disrupted"),
    ([], True, "node.kubernetes.io/unschedulable"),
    (["node.kubernetes.io/unschedulable"], False, "node.kubernetes.io/unschedulable"),
    (["ToBeDeletedByClusterAutoscaler", "node.kubernetes.io/unschedulable"], True, None),  # a scale-down
    (["nvidia.com/gpu"], False, None),
])
def test_termination_signals(taints: list[str], unschedulable: bool, signal: str | None) -> None:
    s = spot_node(node("n", taints=taints, unschedulable=unschedulable))
    assert s is not None and s.signal == signal


def test_hostile_node_objects_never_raise() -> None:
    weird: list[Any] = [None, 1, "node", {"metadata": []}, {"metadata": {"labels": "x"}},
                        {"metadata": {"name": "x", "labels": {"karpenter.sh/capacity-type": "spot"}},
                         "spec": {"taints": "all"}},
                        {"metadata": {"name": 5, "labels": {"karpenter.sh/capacity-type": "spot"}}}]
    assert set(spot_nodes(weird)) == {"x"}


def test_node_seconds_and_reclaims_over_observations() -> None:
    a, b, c = (SpotNode(f"u{i}", f"n{i}", "z1", "p5") for i in range(3))
    obs, tally = observe_nodes(None, {"u0": a, "u1": b}, 1000.0)
    assert obs.current == {("z1", "p5"): 2} and not obs.node_seconds and not obs.reclaims
    signalled = SpotNode("u0", "n0", "z1", "p5", "aws-node-termination-handler/spot-itn")
    obs, tally = observe_nodes(tally, {"u0": signalled, "u1": b}, 1060.0)
    assert obs.node_seconds == {("z1", "p5"): 120.0} and not obs.reclaims
    # u0 goes (it had its notice), u1 goes without any signal (a scale-down), u2 arrives.
    obs, tally = observe_nodes(tally, {"u2": c}, 1120.0)
    assert obs.node_seconds == {("z1", "p5"): 120.0} and obs.reclaims == {("z1", "p5"): 1}
    # A deletion the watch delivered with its final (tainted) state counts even if no tally saw the taint.
    gone = SpotNode("u2", "n2", "z1", "p5", "cloud.google.com/impending-node-termination")
    obs, tally = observe_nodes(tally, {}, 1180.0, deleted=[gone])
    assert obs.reclaims == {("z1", "p5"): 1} and obs.current == {}
    # A gap beyond max_gap_s (the worker unobserved) adds no node-seconds.
    obs, _ = observe_nodes(NodeTallyOf({"u0": a}, 0.0), {"u0": a}, 5000.0, max_gap_s=900.0)
    assert not obs.node_seconds


def NodeTallyOf(nodes: dict[str, SpotNode], at: float) -> Any:  # noqa: N802
    from placement.dispatch.observe import NodeTally

    return NodeTally(at, nodes)


def _workload(uid: str, conditions: list[dict[str, Any]], checks: list[dict[str, Any]] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    return {"metadata": {"name": uid, "namespace": "team-a", "uid": uid, "creationTimestamp": "2026-11-20T00:00:00Z"},
            "status": {"conditions": conditions, "admissionChecks": list(checks),
                       "admission": {"clusterQueue": "c-gpu"}}}


def test_provisioning_failures_and_admission_waits_after_since() -> None:
    t = "2026-11-20T00:10:00Z"
    wls = [_workload("a", [{"type": "Evicted", "status": "True", "reason": "PodsReadyTimeout",
                            "lastTransitionTime": t}]),
           _workload("b", [{"type": "QuotaReserved", "status": "True", "lastTransitionTime": t}]),
           _workload("c", [], [{"name": FLEX_START_CHECK, "state": "Retry", "lastTransitionTime": t}]),
           _workload("d", [{"type": "Evicted", "status": "True", "reason": "PodsReadyTimeout",
                            "lastTransitionTime": "2026-11-19T00:00:00Z"}]),  # before the observer started
           "not a workload"]
    since = parse_time("2026-11-20T00:00:00Z")
    assert since is not None
    found = queue_events(wls, since)
    assert sorted(r for r, _ in found.failures) == [PODS_READY_TIMEOUT, PROVISIONING_FAILED]
    assert [(q, s) for _, q, s in found.waits] == [("c-gpu", 600.0)]
    assert FLEX_START_CHECK in PROVISIONING_CHECKS  # the check the worker stacks create


# ----------------------------------------------------------------------------- on a worker (the fake)


def _taint(api: Any, name: str, key: str) -> None:
    with api.lock:
        obj = copy.deepcopy(api.objects[NODES][("", name)])
        obj["spec"]["taints"] = [*obj["spec"].get("taints", []), {"key": key, "effect": "NoSchedule"}]
        api._commit(NODES, obj, "MODIFIED")


def _value(m: Metrics, name: str, **labels: str) -> float:
    return m.registry.get_sample_value(name, labels) or 0.0


def test_spot_node_hours_and_reclaims_on_a_worker_whose_spot_nodes_come_and_go(fleet: Fleet) -> None:
    api = fleet.workers[WORKER]
    for n in (node("spot-1"), node("spot-2"), node("spot-3", zone="use1-az6"), node("od-1", spot=None)):
        api.create(NODES, n)
    since = time.time()
    wl = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
          "metadata": {"name": "stuck", "namespace": "team-a"},
          "spec": {"queueName": "gpu", "podSets": [{"name": "main", "count": 1, "template": {"spec": {
              "containers": [{"name": "trainer", "image": "trainer"}]}}}]},
          "status": {"conditions": [{"type": "Evicted", "status": "True", "reason": "PodsReadyTimeout",
                                     "message": "Exceeded the PodsReady timeout",
                                     "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                         time.gmtime(since + 5))}]}}
    clock = Clock()
    clock.t = since
    metrics = Metrics()
    c = fleet.controller("solo", lease=None, dry_run=True, clock=clock, metrics=metrics)
    c.run_once()
    at = {"worker": WORKER, "cloud": "aws", "region": "us-east-1", "instance_type": "p5.48xlarge"}
    assert _value(metrics, "gpufleet_spot_nodes", zone="use1-az4", **at) == 2
    assert _value(metrics, "gpufleet_spot_nodes", zone="use1-az6", **at) == 1
    assert _value(metrics, "gpufleet_spot_node_seconds_total", zone="use1-az4", **at) == 0

    _taint(api, "spot-1", "aws-node-termination-handler/spot-itn")  # its two-minute notice
    api.create(WORKLOADS, wl)
    clock.t += 60
    c.run_once()
    assert _value(metrics, "gpufleet_spot_node_seconds_total", zone="use1-az4", **at) == 120.0
    assert _value(metrics, "gpufleet_spot_node_seconds_total", zone="use1-az6", **at) == 60.0
    assert _value(metrics, "gpufleet_spot_reclaims_total", zone="use1-az4", **at) == 0
    assert _value(metrics, "gpufleet_provisioning_failures_total", worker=WORKER, reason=PODS_READY_TIMEOUT) == 1

    api.delete(NODES, "", "spot-1")  # reclaimed
    _taint(api, "spot-2", "ToBeDeletedByClusterAutoscaler")  # scaled down: not a reclaim
    api.delete(NODES, "", "spot-2")
    api.create(NODES, node("spot-4"))  # a replacement
    clock.t += 60
    c.run_once()
    assert _value(metrics, "gpufleet_spot_node_seconds_total", zone="use1-az4", **at) == 240.0
    assert _value(metrics, "gpufleet_spot_reclaims_total", zone="use1-az4", **at) == 1
    assert _value(metrics, "gpufleet_spot_nodes", zone="use1-az4", **at) == 1
    assert _value(metrics, "gpufleet_provisioning_failures_total", worker=WORKER, reason=PODS_READY_TIMEOUT) == 1
    assert _value(metrics, "gpufleet_spot_nodes", zone="use1-az4", worker="gcp-usc1-a3mega", cloud="gcp",
                  region="us-central1", instance_type="p5.48xlarge") == 0  # workers without spot nodes: none

    # Read-only Nodes is the one permission the observation adds on a worker.
    granted = {(r["apiGroups"][0], res) for r in dp.worker_reader_rules() for res in r["resources"]}
    assert ("", "nodes") in granted and all(set(r["verbs"]) <= {"get", "list", "watch"}
                                            for r in dp.worker_reader_rules())
