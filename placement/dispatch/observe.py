"""What the dispatcher observes on every worker for the plans (issue 26): spot nodes and their reclaims,
provisioning failures and admission waits. Pure: Kubernetes objects (dicts) in, frozen dataclasses out; the
controller turns them into Prometheus counters (:class:`placement.dispatch.telemetry.Metrics`), and Prometheus,
not this process, keeps them across restarts (``increase()`` over a window ignores a counter's reset).

**Spot nodes.** A node is spot when one of the clouds' capacity-type labels says so (:data:`SPOT_LABELS`: EKS
managed node groups ``eks.amazonaws.com/capacityType=SPOT``, Karpenter ``karpenter.sh/capacity-type=spot``, GKE
``cloud.google.com/gke-spot=true`` and ``cloud.google.com/gke-preemptible=true``); it is counted by its zone
(``topology.kubernetes.io/zone``) and instance type (``node.kubernetes.io/instance-type``). Between two
observations of a worker each spot node of the first adds the seconds between them (a gap longer than
``max_gap_s``, a worker that could not be read, adds nothing: not observed is not counted).

**Reclaims.** A spot node that goes away (deleted, or absent from the worker's list) counts as reclaimed when its
last state carried one of the clouds' termination signals (:data:`TERMINATION_TAINTS`: the AWS Node Termination
Handler's ``aws-node-termination-handler/spot-itn``, GKE's ``cloud.google.com/impending-node-termination``,
Karpenter's ``karpenter.sh/disrupted``; or the node cordoned, ``node.kubernetes.io/unschedulable`` /
``spec.unschedulable``, which is how EKS managed node groups drain a spot node on its two-minute notice). A node
the cluster autoscaler was removing (``ToBeDeletedByClusterAutoscaler``, ``DeletionCandidateOfClusterAutoscaler``)
is a scale-down, never a reclaim, and so is a node that goes without any signal. Karpenter taints a node it
consolidates with the same ``karpenter.sh/disrupted``: on Karpenter-managed spot nodes a consolidation counts as
a reclaim (an over-count). The pods' ``DisruptionTarget`` condition is not read: the dispatcher's identity on a
worker may read nodes and Kueue objects, not pods.

**Provisioning failures** (from the worker's Kueue Workloads): an ``Evicted`` condition with reason
``PodsReadyTimeout`` (Kueue's ``waitForPodsReady``), and an admission check of a ProvisioningRequest check
(``provisioning_checks``) in state ``Retry`` or ``Rejected`` (Kueue's provisioning controller sets them when the
ProvisioningRequest fails). **Admission waits**: a Workload's ``QuotaReserved`` time minus its creation. Each is
counted once, by its transition time, and only when that is after ``since`` (the observer's start), so a
restarted dispatcher does not count again what its predecessor counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from placement.dispatch.snapshot import parse_time

SPOT_LABELS: tuple[tuple[str, str], ...] = (
    ("eks.amazonaws.com/capacityType", "SPOT"),
    ("karpenter.sh/capacity-type", "spot"),
    ("cloud.google.com/gke-spot", "true"),
    ("cloud.google.com/gke-preemptible", "true"),
)
ZONE_LABEL = "topology.kubernetes.io/zone"
TYPE_LABEL = "node.kubernetes.io/instance-type"
UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
TERMINATION_TAINTS = ("aws-node-termination-handler/spot-itn", "cloud.google.com/impending-node-termination",
                      "karpenter.sh/disrupted", UNSCHEDULABLE)
SCALE_DOWN_TAINTS = ("ToBeDeletedByClusterAutoscaler", "DeletionCandidateOfClusterAutoscaler")
PODS_READY_TIMEOUT, PROVISIONING_FAILED = "pods_ready_timeout", "provisioning_request_failed"
# The ProvisioningRequest admission checks gpufleet's workers create (infra.k8s.kueue_objects.FLEX_START_CHECK);
# a check whose name says "provisioning" is taken for one too.
PROVISIONING_CHECKS = frozenset({"flex-start"})
MAX_LABEL = 63  # a label value longer than a Kubernetes label value is cut (metric label cardinality and size)

Where = tuple[str, str]  # (zone, instance type)


@dataclass(frozen=True)
class SpotNode:
    """A spot node as last seen: ``signal`` the termination signal it carries (None: none, or a scale-down)."""

    uid: str
    name: str
    zone: str
    instance_type: str
    signal: str | None = None

    @property
    def where(self) -> Where:
        return self.zone, self.instance_type


def _text(value: Any) -> str:
    return value[:MAX_LABEL] if isinstance(value, str) else ""


def spot_node(node: Any) -> SpotNode | None:
    """The node as a :class:`SpotNode`, None when it is not spot (or not a node object: hostile data never
    raises)."""
    if not isinstance(node, Mapping):
        return None
    meta = node.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    labels = meta.get("labels")
    labels = labels if isinstance(labels, Mapping) else {}
    if not any(labels.get(k) == v for k, v in SPOT_LABELS):
        return None
    uid, name = _text(meta.get("uid")) or _text(meta.get("name")), _text(meta.get("name"))
    if not uid:
        return None
    return SpotNode(uid=uid, name=name, zone=_text(labels.get(ZONE_LABEL)) or "unknown",
                    instance_type=_text(labels.get(TYPE_LABEL)) or "unknown", signal=termination_signal(node))


def termination_signal(node: Mapping[str, Any]) -> str | None:
    """The first of :data:`TERMINATION_TAINTS` the node carries (``spec.unschedulable`` counts as the cordon
    taint), None when it carries none or is being scaled down by the cluster autoscaler."""
    spec = node.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    taints = spec.get("taints")
    keys = {t.get("key") for t in taints if isinstance(t, Mapping)} if isinstance(taints, list) else set()
    if keys & set(SCALE_DOWN_TAINTS):
        return None
    if spec.get("unschedulable") is True:
        keys.add(UNSCHEDULABLE)
    return next((t for t in TERMINATION_TAINTS if t in keys), None)


def spot_nodes(nodes: Iterable[Any]) -> dict[str, SpotNode]:
    """The spot nodes of a worker's node list, by uid."""
    out = {}
    for n in nodes:
        s = spot_node(n)
        if s is not None:
            out[s.uid] = s
    return out


@dataclass(frozen=True)
class NodeTally:
    """A worker's spot nodes at ``at`` (epoch seconds)."""

    at: float
    nodes: Mapping[str, SpotNode] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeObservation:
    """What changed on a worker between two observations, by (zone, instance type): ``current`` spot nodes now,
    ``node_seconds`` observed since the last observation, ``reclaims`` (spot nodes gone with a termination
    signal)."""

    current: Mapping[Where, int]
    node_seconds: Mapping[Where, float]
    reclaims: Mapping[Where, int]


def observe_nodes(last: NodeTally | None, now_nodes: Mapping[str, SpotNode], now: float,
                  deleted: Iterable[SpotNode] = (), max_gap_s: float = 900.0) -> tuple[NodeObservation, NodeTally]:
    """The observation of a worker's spot nodes at ``now`` after ``last`` (None: the first), and the tally to
    keep. ``deleted``: spot nodes whose deletion the watch delivered since ``last``, as last seen (their final
    state carries the signal even when the previous tally did not yet)."""
    current: dict[Where, int] = {}
    for n in now_nodes.values():
        current[n.where] = current.get(n.where, 0) + 1
    seconds: dict[Where, float] = {}
    reclaims: dict[Where, int] = {}
    if last is not None:
        gap = now - last.at
        if 0 < gap <= max_gap_s:
            for n in last.nodes.values():
                seconds[n.where] = seconds.get(n.where, 0.0) + gap
        gone = {n.uid: n for n in deleted}
        for uid, n in last.nodes.items():
            if uid not in now_nodes and uid not in gone:
                gone[uid] = n  # left the list without a delivered deletion: its last state is all we know
        for uid, n in gone.items():
            signal = n.signal or (last.nodes[uid].signal if uid in last.nodes else None)
            if uid not in now_nodes and signal is not None:
                reclaims[n.where] = reclaims.get(n.where, 0) + 1
    return NodeObservation(current, seconds, reclaims), NodeTally(now, dict(now_nodes))


@dataclass(frozen=True)
class QueueEvents:
    """Provisioning failures (``(reason, key)``: the key dedupes one failure across passes) and admission waits
    (``(uid, ClusterQueue, seconds)``) found in a worker's Workloads."""

    failures: tuple[tuple[str, str], ...] = ()
    waits: tuple[tuple[str, str, float], ...] = ()


def _conditions(wl: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    status = wl.get("status")
    conds = status.get("conditions") if isinstance(status, Mapping) else None
    return [c for c in conds if isinstance(c, Mapping)] if isinstance(conds, list) else []


def queue_events(workloads: Iterable[Any], since: float,
                 provisioning_checks: frozenset[str] = PROVISIONING_CHECKS) -> QueueEvents:
    """Provisioning failures and admission waits in a worker's Workloads whose transition is after ``since``
    (epoch seconds). ``provisioning_checks``: names of the worker's ProvisioningRequest admission checks (and any
    check whose name contains ``provisioning``)."""
    failures: list[tuple[str, str]] = []
    waits: list[tuple[str, str, float]] = []
    for wl in workloads:
        if not isinstance(wl, Mapping) or not isinstance(wl.get("metadata"), Mapping):
            continue
        meta = wl["metadata"]
        uid = _text(meta.get("uid")) or f"{_text(meta.get('namespace'))}/{_text(meta.get('name'))}"
        for c in _conditions(wl):
            at = parse_time(c.get("lastTransitionTime"))
            if at is None or at < since:
                continue
            if c.get("type") == "Evicted" and c.get("status") == "True" and c.get("reason") == "PodsReadyTimeout":
                failures.append((PODS_READY_TIMEOUT, f"{uid}@{at}"))
            elif c.get("type") == "QuotaReserved" and c.get("status") == "True":
                created = parse_time(meta.get("creationTimestamp"))
                status = wl.get("status")
                admission = status.get("admission") if isinstance(status, Mapping) else None
                cq = admission.get("clusterQueue") if isinstance(admission, Mapping) else None
                if created is not None and at >= created:
                    waits.append((f"{uid}@{at}", _text(cq) or "unknown", at - created))
        status = wl.get("status")
        checks = status.get("admissionChecks") if isinstance(status, Mapping) else None
        for ac in checks if isinstance(checks, list) else []:
            if not isinstance(ac, Mapping) or ac.get("state") not in ("Retry", "Rejected"):
                continue
            name = _text(ac.get("name"))
            if name not in provisioning_checks and "provisioning" not in name:
                continue
            at = parse_time(ac.get("lastTransitionTime"))
            if at is not None and at >= since:
                failures.append((PROVISIONING_FAILED, f"{uid}/{name}@{at}"))
    return QueueEvents(tuple(failures), tuple(waits))
