"""Kueue objects (``kueue.x-k8s.io/v1beta2``) derived from a stack's node pools, as plain dicts.

Pure functions, no Pulumi: :mod:`infra.k8s.addons` and :mod:`infra.k8s.hub` turn these dicts into
resources and tests validate them against the Kueue v0.19 CRDs. The naming scheme and the per-node
:func:`allocatable` resources live in :mod:`placement.model.kueue` (shared with ``placement submit`` and
``placement dispatch``; ``infra/`` imports ``placement/``, never the reverse) and are re-exported here.

Quotas always follow the node pools: a flavor's nominal quota is ``pool.max_nodes`` times the
per-node :func:`allocatable` resources of the pool's shape, so Kueue never admits more than the
pool can hold at full scale.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from infra.config import StackConfig
from infra.config.pools import NodePoolConfig
from placement.model.kueue import (
    ALL_WORKERS,
    API_VERSION,
    DISPATCHERS,
    FABRIC_LABEL,
    GPU_TAINT,
    GPU_TOLERATION,
    INSTANCE_TYPE_LABEL,
    KUEUE_NAMESPACE,
    MULTIKUEUE_CONTROLLER,
    MULTIKUEUE_KUBECONFIG_KEY,
    POOL_LABEL,
    PRIORITY_CLASSES,
    RES_CPU,
    RES_EFA,
    RES_GPU,
    RES_HUGEPAGES,
    RES_MEMORY,
    SERVING_PRIORITY_CLASS,
    TOPOLOGY_LEVELS,
    Allocatable,
    allocatable,
    covered_resources,
    flavor_node_labels,
    hub_flavor_name,
    inference_queue_name,
    kubeconfig_secret_name,
    shape_topology_name,
    tas_enabled,
    topology_levels,
    topology_name,
    worker_key,
)
from placement.model.kueue import cluster_queue_name as _cluster_queue_name
from placement.model.kueue import local_queue_name as _local_queue_name
from placement.model.shapes import Shape

__all__ = ["ALL_WORKERS", "API_VERSION", "DISPATCHERS", "FABRIC_LABEL", "INSTANCE_TYPE_LABEL", "flavor_node_labels",
           "GPU_TAINT", "GPU_TOLERATION", "KUEUE_NAMESPACE", "SERVING_PRIORITY_CLASS",
           "MULTIKUEUE_CONTROLLER", "MULTIKUEUE_KUBECONFIG_KEY", "POOL_LABEL", "PRIORITY_CLASSES", "RES_CPU",
           "RES_EFA", "RES_GPU", "RES_HUGEPAGES", "RES_MEMORY", "TOPOLOGY_LEVELS", "Allocatable", "allocatable",
           "covered_resources",
           "hub_flavor_name", "kubeconfig_secret_name", "tas_enabled", "topology_name", "worker_key"]


# GKE flex-start with queued provisioning (Dynamic Workload Scheduler): Kueue's ProvisioningRequest admission
# check asks GKE for all of a workload's nodes at once and admits it only once they are granted. Kueue v0.19.2
# has no feature gate for it: it starts the check's controller when the autoscaling.x-k8s.io ProvisioningRequest
# API is served, which GKE does on the versions that offer flex-start.
PROVISIONING_CONTROLLER = "kueue.x-k8s.io/provisioning-request"
QUEUED_PROVISIONING_CLASS = "queued-provisioning.gke.io"
FLEX_START_CHECK = "flex-start"  # the AdmissionCheck and its ProvisioningRequestConfig
QUEUED_TAINT_TOLERATION = {"key": "cloud.google.com/gke-queued", "operator": "Equal", "value": "true",
                           "effect": "NoSchedule"}


def inference_nodes(pool: NodePoolConfig, share: float) -> int:
    """Nodes of ``pool`` the inference ClusterQueue owns: ``share`` of ``max_nodes``, rounded down; none on
    flex-start pools, whose nodes only come through a training job's ProvisioningRequest."""
    if pool.queued:
        return 0
    return min(pool.max_nodes, math.floor(pool.max_nodes * share + 1e-9))


def training_quota(pool: NodePoolConfig, share: float) -> Allocatable:
    """The training ClusterQueue's nominal quota on ``pool``: the nodes the inference queue does not own."""
    return allocatable(pool.shape).scaled(pool.max_nodes - inference_nodes(pool, share))


def quota_entries(quota: Allocatable, covered: Sequence[str]) -> list[dict[str, Any]]:
    """``resources`` of one ClusterQueue flavor, in ``covered`` order (a CRD rule wants every covered one)."""
    values: dict[str, Any] = {RES_CPU: f"{quota.cpu_millis}m", RES_MEMORY: f"{quota.memory_mib}Mi",
                              RES_GPU: quota.gpus, RES_EFA: quota.efa, RES_HUGEPAGES: f"{quota.hugepages_mib}Mi"}
    return [{"name": r, "nominalQuota": values[r]} for r in covered]


# ---------------------------------------------------------------------------------------------- names


def cluster_name_of(cfg_or_cluster: StackConfig | str) -> str:
    return cfg_or_cluster if isinstance(cfg_or_cluster, str) else cfg_or_cluster.cluster_name


def cluster_queue_name(cfg_or_cluster: StackConfig | str) -> str:
    """The worker's ClusterQueue: ``<clusterName>-gpu`` (:func:`placement.model.kueue.cluster_queue_name`)."""
    return _cluster_queue_name(cluster_name_of(cfg_or_cluster))


def local_queue_name(cfg_or_cluster: StackConfig | str, team: str) -> str:
    """The LocalQueue in namespace ``team`` for that cluster's GPUs (:func:`placement.model.kueue.local_queue_name`)."""
    return _local_queue_name(cluster_name_of(cfg_or_cluster), team)


def flavor_name(pool: NodePoolConfig) -> str:
    return pool.name


def pool_scheduling(pool: NodePoolConfig) -> dict[str, Any]:
    """Node selector and tolerations that put a pod on ``pool`` (what its ResourceFlavor injects): the pool's
    name, instance type and fabric (:func:`placement.model.kueue.flavor_node_labels`)."""
    tolerations = [dict(GPU_TOLERATION), *([dict(QUEUED_TAINT_TOLERATION)] if pool.queued else [])]
    return {"nodeSelector": flavor_node_labels(pool.name, pool.shape), "tolerations": tolerations}


def ordered_pools(cfg: StackConfig) -> list[NodePoolConfig]:
    """Pools in the order Kueue should try their flavors: by ``kueue.flavor_order``, then config order."""
    return sorted(cfg.node_pools, key=lambda p: cfg.kueue.flavor_order.index(p.capacity_kind))


def uses_topology(pool: NodePoolConfig) -> bool:
    """:func:`tas_enabled` for a configured pool."""
    return tas_enabled(pool.min_nodes, pool.max_nodes, pool.shape)


# ---------------------------------------------------------------------------------------------- objects


def _obj(kind: str, name: str, spec: Mapping[str, Any] | None = None, *, namespace: str | None = None,
         labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"app.kubernetes.io/managed-by": "gpufleet", **(labels or {})}}
    if namespace:
        meta["namespace"] = namespace
    out: dict[str, Any] = {"apiVersion": API_VERSION, "kind": kind, "metadata": meta}
    if spec is not None:
        out["spec"] = dict(spec)
    return out


def topology(cloud: str, shape: Shape | None = None) -> dict[str, Any]:
    """The Topology of a cloud's GPU network (of ``shape``'s nodes when given: four-layer AWS shapes have their
    own), widest level first, host last (a CRD rule)."""
    name, levels = ((topology_name(cloud), TOPOLOGY_LEVELS[cloud]) if shape is None
                    else (shape_topology_name(shape), topology_levels(shape)))
    return _obj("Topology", name, {"levels": [{"nodeLabel": lv} for lv in levels]})


def resource_flavor(pool: NodePoolConfig, cloud: str) -> dict[str, Any]:
    """One flavor per node pool: selects the pool's nodes and tolerates the GPU taint.

    Its ``nodeLabels`` name the pool, its instance type and its fabric: Kueue compares a job's node affinity
    only on these keys, so a job whose affinity names another cloud's instance type or fabric is never
    admitted on this flavor even where the pool name repeats."""
    # GKE taints queued-provisioning nodes; admitted pods get that toleration from the flavor too.
    sched = pool_scheduling(pool)
    spec: dict[str, Any] = {"nodeLabels": sched["nodeSelector"], "tolerations": sched["tolerations"]}
    if uses_topology(pool):
        spec["topologyName"] = shape_topology_name(pool.shape)
    return _obj("ResourceFlavor", flavor_name(pool), spec,
                labels={"gpufleet.io/capacity": pool.capacity_kind, "gpufleet.io/instance-type": pool.shape.name})


def preemption_policy() -> dict[str, Any]:
    """Higher-priority work evicts lower-priority work in the queue; lent quota is always reclaimable."""
    return {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any",
            "borrowWithinCohort": {"policy": "Never"}}


def flavor_fungibility() -> dict[str, Any]:
    """Before borrowing or preempting in a flavor, try the next flavor (usually spot after on-demand):
    borrowed quota can be reclaimed and preemption kills running GPU work, while free capacity in the
    next flavor costs neither. When every flavor needs one or the other, borrowing wins."""
    return {"whenCanBorrow": "TryNextFlavor", "whenCanPreempt": "TryNextFlavor",
            "preference": "BorrowingOverPreemption"}


def team_namespace_selector(teams: Sequence[str]) -> dict[str, Any]:
    return {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": list(teams)}]}


def cluster_queue(cfg: StackConfig) -> dict[str, Any]:
    """The cluster's training ClusterQueue: one flavor per pool, quota = the pool's max nodes less those the
    inference queue owns (:func:`inference_nodes`), x allocatable. It borrows the inference queue's idle
    quota (no borrowing limit) and gives it back when serving reclaims it (:func:`inference_cluster_queue`)."""
    pools = ordered_pools(cfg)
    covered = covered_resources(p.shape for p in pools)
    spec = {
        "cohortName": cfg.kueue.cohort,
        "namespaceSelector": team_namespace_selector(cfg.kueue.teams),
        "queueingStrategy": "BestEffortFIFO",
        "resourceGroups": [{
            "coveredResources": covered,
            "flavors": [{"name": flavor_name(p),
                         "resources": quota_entries(training_quota(p, cfg.kueue.inference_share), covered)}
                        for p in pools],
        }],
        "preemption": preemption_policy(),
        "flavorFungibility": flavor_fungibility(),
    }
    queued = [flavor_name(p) for p in pools if p.queued]
    if queued:
        # Only workloads assigned a flex-start flavor wait for a ProvisioningRequest; the other flavors admit as before.
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": FLEX_START_CHECK, "onFlavors": queued}]}
    return _obj("ClusterQueue", cluster_queue_name(cfg), spec)


def provisioning_request_config() -> dict[str, Any]:
    """GKE queued provisioning for the flex-start flavors. Only pod sets asking for GPUs get a
    ProvisioningRequest; Kueue's default retry strategy (3 tries, 60 s doubling to 30 min) then deactivates a
    workload GKE cannot provision, rather than holding its quota."""
    return _obj("ProvisioningRequestConfig", FLEX_START_CHECK, {
        "provisioningClassName": QUEUED_PROVISIONING_CLASS,
        "managedResources": [RES_GPU],
    })


def provisioning_admission_check() -> dict[str, Any]:
    """The AdmissionCheck the ClusterQueue applies to its flex-start flavors."""
    return _obj("AdmissionCheck", FLEX_START_CHECK, {
        "controllerName": PROVISIONING_CONTROLLER,
        "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig", "name": FLEX_START_CHECK},
    })


def local_queue(name: str, namespace: str, cluster_queue_ref: str) -> dict[str, Any]:
    return _obj("LocalQueue", name, {"clusterQueue": cluster_queue_ref}, namespace=namespace)


def local_queues(cfg: StackConfig) -> list[dict[str, Any]]:
    """Per team namespace: this cluster's queue and the ``all-workers`` queue the hub dispatches to."""
    cq = cluster_queue_name(cfg)
    out = []
    for team in cfg.kueue.teams:
        out.append(local_queue(local_queue_name(cfg, team), team, cq))
        out.append(local_queue(ALL_WORKERS, team, cq))
    return out


def inference_preemption_policy() -> dict[str, Any]:
    """Serving reclaims the quota it lent to training at once, whatever the training priority (``Any``); within
    its own queue a higher-priority server evicts a lower one. It never borrows, so training has nothing to
    reclaim from it, and it never preempts training that stays within its own quota."""
    return {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any",
            "borrowWithinCohort": {"policy": "Never"}}


def inference_cluster_queue(cfg: StackConfig) -> dict[str, Any] | None:
    """The serving ClusterQueue ``<clusterName>-inference`` in the training cohort, or None when every pool is
    flex-start. A pool too small for ``inferenceShare`` to round to a node gives it a zero quota: serving
    there waits (visibly Pending in the queue) until the operator raises the share.

    It owns :func:`inference_nodes` of each pool (flex-start pools excluded) and lends them to the training
    queue while idle; ``borrowingLimit`` 0 keeps serving within what it owns, so training (whose preemption
    reclaims only from queues that borrow) can never evict a server, while a serving burst evicts the
    training workloads that borrowed its quota (:func:`inference_preemption_policy`).
    """
    share = cfg.kueue.inference_share
    pools = [p for p in ordered_pools(cfg) if not p.queued]
    if not pools:
        return None
    covered = covered_resources(p.shape for p in pools)
    flavors = []
    for p in pools:
        entries = quota_entries(allocatable(p.shape).scaled(inference_nodes(p, share)), covered)
        flavors.append({"name": flavor_name(p), "resources": [{**e, "borrowingLimit": 0} for e in entries]})
    spec = {
        "cohortName": cfg.kueue.cohort,
        "namespaceSelector": team_namespace_selector(cfg.kueue.teams),
        "queueingStrategy": "BestEffortFIFO",
        "resourceGroups": [{"coveredResources": covered, "flavors": flavors}],
        "preemption": inference_preemption_policy(),
        "flavorFungibility": flavor_fungibility(),
    }
    return _obj("ClusterQueue", inference_queue_name(cfg.cluster_name), spec)


def inference_local_queues(cfg: StackConfig) -> list[dict[str, Any]]:
    """Per team namespace: LocalQueue ``<clusterName>-inference`` for serving Deployments, StatefulSets and
    LeaderWorkerSets (label ``kueue.x-k8s.io/queue-name``, priority class ``serving``)."""
    name = inference_queue_name(cfg.cluster_name)
    return [local_queue(name, team, name) for team in cfg.kueue.teams]


def priority_classes(serving: bool = False) -> list[dict[str, Any]]:
    """WorkloadPriorityClasses production / burst / low, and ``serving`` above them on workers (``serving``)
    (top-level ``value``, no spec)."""
    out = []
    for name, value, description in ((SERVING_PRIORITY_CLASS,) if serving else ()) + PRIORITY_CLASSES:
        obj = _obj("WorkloadPriorityClass", name)
        obj["value"] = value
        obj["description"] = description
        out.append(obj)
    return out


def worker_objects(cfg: StackConfig) -> list[dict[str, Any]]:
    """Every Kueue object of a worker cluster, dependencies first."""
    objs = priority_classes(serving=True)
    # One Topology per distinct level set of the pools that use one (four-layer AWS shapes have their own).
    objs += list({shape_topology_name(p.shape): topology(cfg.cloud, p.shape)
                  for p in cfg.node_pools if uses_topology(p)}.values())
    objs += [resource_flavor(p, cfg.cloud) for p in cfg.node_pools]
    if any(p.queued for p in cfg.node_pools):
        objs += [provisioning_request_config(), provisioning_admission_check()]
    objs.append(cluster_queue(cfg))
    inference = inference_cluster_queue(cfg)
    if inference is not None:
        objs.append(inference)
    objs += local_queues(cfg)
    if inference is not None:
        objs += inference_local_queues(cfg)
    return objs


# ---------------------------------------------------------------------------------------------- Kueue install


# ---- waitForPodsReady: never evicted while booting
# The autoscaler's limit on bringing up a node (past it the scale-up has failed and the group backs off).
# AWS: our Cluster Autoscaler's --max-node-provision-time (infra/aws/autoscaler.py MAX_NODE_PROVISION_TIME;
# tests/infra/test_kueue.py ties the two). GKE: the managed Cluster Autoscaler, whose limit is not
# configurable; upstream's default --max-node-provision-time is 15 min (cluster-autoscaler config flags).
NODE_PROVISION_SECONDS: dict[str, int] = {"aws": 20 * 60, "gcp": 15 * 60}
# After the node is Ready: pulling the trainer image (the NGC PyTorch image is ~10 GB compressed, ~20 GB
# unpacked) onto an empty disk and starting it, plus the fabric DaemonSets (device plugins, GPUDirect NCCL
# installers) the pod's resources wait for. Ten minutes is 10 GB at ~140 Mbit/s end to end, well below
# what a GPU node's network and disks sustain.
IMAGE_PULL_ALLOWANCE_SECONDS = 10 * 60
# Re-queuing after a pods-ready eviction: never deactivate (backoffLimitCount unset: Kueue re-queues
# endlessly), first retry after 60 s (Kueue's default base), doubling to at most 30 min so a spot shortage
# is retried twice an hour rather than Kueue's default once an hour.
REQUEUE_BACKOFF_BASE_SECONDS = 60
REQUEUE_BACKOFF_MAX_SECONDS = 30 * 60
# The hub's own timeout outlasts every worker's by this much, so the worker, which sees its nodes, decides.
HUB_PODS_READY_MARGIN_SECONDS = 10 * 60


def pods_ready_timeout_seconds(cloud: str) -> int:
    """Kueue's ``waitForPodsReady.timeout`` on a worker of ``cloud``: the slowest path from admission to a
    running pod, a node provisioned from zero (:data:`NODE_PROVISION_SECONDS`) then the image pulled and
    started (:data:`IMAGE_PULL_ALLOWANCE_SECONDS`). A shorter timeout evicts gangs whose nodes are still
    booting (p5 from zero) and re-queues them forever."""
    return NODE_PROVISION_SECONDS[cloud] + IMAGE_PULL_ALLOWANCE_SECONDS


def hub_pods_ready_timeout_seconds() -> int:
    """The hub's timeout: Kueue v0.19 always runs waitForPodsReady (30 min when the block is left out, which is
    shorter than an AWS worker's); the hub waits for the slowest worker and then some."""
    return max(pods_ready_timeout_seconds(c) for c in NODE_PROVISION_SECONDS) + HUB_PODS_READY_MARGIN_SECONDS


def pods_ready_config(timeout_seconds: int) -> dict[str, Any]:
    """Kueue's ``waitForPodsReady`` block (config.kueue.x-k8s.io/v1beta2). ``recoveryTimeout`` (a running
    workload that lost a pod, e.g. a JobSet restarting after a spot reclaim, waits for the replacement node)
    is the same boot path, so the same time; no ``backoffLimitCount``: spot churn never deactivates a
    Workload."""
    duration = f"{timeout_seconds}s"
    return {"timeout": duration, "blockAdmission": False, "recoveryTimeout": duration,
            "requeuingStrategy": {"timestamp": "Eviction", "backoffBaseSeconds": REQUEUE_BACKOFF_BASE_SECONDS,
                                  "backoffMaxSeconds": REQUEUE_BACKOFF_MAX_SECONDS}}


# Kueue integrations (Configuration.integrations.frameworks, v0.19.2 names). Serving: Deployments and
# StatefulSets (their pods are admitted through the implicitly enabled "pod" integration) and LeaderWorkerSet
# (its controller is installed next to Kueue, infra/k8s/addons.py), so inference draws on the inference queue.
# Workers only: the hub dispatches training through MultiKueue, and its worker RBAC covers training kinds only.
TRAINING_FRAMEWORKS = ("batch/job", "jobset.x-k8s.io/jobset", "kubeflow.org/pytorchjob", "kubeflow.org/mpijob",
                       "trainer.kubeflow.org/trainjob", "ray.io/rayjob", "ray.io/raycluster")
SERVING_FRAMEWORKS = ("deployment", "statefulset", "leaderworkerset.x-k8s.io/leaderworkerset")


def manager_config(dispatcher: str | None = None, *, wait_for_pods_ready: bool = True,
                   cloud: str | None = None) -> str:
    """Kueue's ``controller_manager_config.yaml`` (chart value ``managerConfig.controllerManagerConfigYaml``).

    ``dispatcher`` is a key of :data:`DISPATCHERS` (hub only). On a worker of ``cloud``
    (``wait_for_pods_ready``), a workload whose pods are not all ready :func:`pods_ready_timeout_seconds`
    after admission is evicted and re-queued with a backoff, never deactivated: quota assumes pools at max
    size, so a failed scale-up (spot or capacity shortage) must not hold quota forever. Kueue v0.19 cannot
    switch the check off, so without ``wait_for_pods_ready`` (the hub) the timeout is the hub's
    (:func:`hub_pods_ready_timeout_seconds`).
    """
    config: dict[str, Any] = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443", "enableClusterQueueResources": True},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        "controller": {"groupKindConcurrency": {
            "Job.batch": 5, "Pod": 5, "Workload.kueue.x-k8s.io": 5, "LocalQueue.kueue.x-k8s.io": 1,
            "Cohort.kueue.x-k8s.io": 1, "ClusterQueue.kueue.x-k8s.io": 1, "ResourceFlavor.kueue.x-k8s.io": 1}},
        "clientConnection": {"qps": 50, "burst": 100},
        # Serving runs on the workers' inference queues, never through the hub's MultiKueue.
        "integrations": {"frameworks": [*TRAINING_FRAMEWORKS, *(SERVING_FRAMEWORKS if dispatcher is None else ())]},
    }
    if wait_for_pods_ready:
        # The slowest cloud when none is named: a longer timeout never evicts a booting gang.
        timeout = (pods_ready_timeout_seconds(cloud) if cloud is not None
                   else max(pods_ready_timeout_seconds(c) for c in NODE_PROVISION_SECONDS))
    else:
        timeout = hub_pods_ready_timeout_seconds()
    config["waitForPodsReady"] = pods_ready_config(timeout)
    if dispatcher is not None:
        if dispatcher not in DISPATCHERS:
            raise ValueError(f"dispatcher must be one of {', '.join(DISPATCHERS)}, got {dispatcher!r}")
        config["multiKueue"] = {"dispatcherName": DISPATCHERS[dispatcher], "gcInterval": "1m",
                                "workerLostTimeout": "15m"}
    return yaml.safe_dump(config, sort_keys=False)


# ---------------------------------------------------------------------------------------------- hub


@dataclass(frozen=True)
class WorkerPool:
    """A worker's node pool as read from its ``nodePools`` stack output."""

    name: str
    shape: Shape
    capacity_kind: str
    max_nodes: int


@dataclass(frozen=True)
class Worker:
    """A worker cluster as the hub sees it. ``key`` (the stack's short name) names its hub objects."""

    key: str
    cluster_name: str
    cloud: str
    pools: tuple[WorkerPool, ...]


def worker_from_outputs(stack: str, outputs: Mapping[str, Any]) -> Worker:
    """Parse a worker stack's outputs (``clusterName``, ``cloud``, ``nodePools``) into a :class:`Worker`.

    Raises :class:`ValueError` naming the worker stack and the output when one is missing or malformed (an
    older or hand-edited stack): the hub sizes its quotas from these, so it never guesses.
    """
    from placement.model.shapes import shape_book

    def bad(what: str) -> ValueError:
        return ValueError(f"worker stack {stack}: output {what}; run `pulumi up` on that worker stack first")

    cluster_name, cloud, raw_pools = (outputs.get(k) for k in ("clusterName", "cloud", "nodePools"))
    if not isinstance(cluster_name, str) or not cluster_name:
        raise bad("clusterName is missing or not a cluster name")
    if cloud not in ("aws", "gcp"):
        raise bad("cloud is missing or not aws/gcp")
    if not isinstance(raw_pools, list):
        raise bad("nodePools is missing or not a list")
    pools = []
    for i, raw in enumerate(raw_pools):
        if not isinstance(raw, Mapping):
            raise bad(f"nodePools[{i}] is not a mapping")
        shape = shape_book().get(str(raw.get("instanceType")))
        if shape is None:
            raise bad(f"nodePools[{i}].instanceType is missing or not a shape of placement/data/shapes.yaml")
        name, capacity, max_nodes = raw.get("name"), raw.get("capacity"), raw.get("maxNodes")
        if not isinstance(name, str) or not name:
            raise bad(f"nodePools[{i}].name is missing")
        if capacity not in ("spot", "on-demand"):
            raise bad(f"nodePools[{i}].capacity is missing or not spot/on-demand")
        # Stack outputs carry numbers as JSON/protobuf doubles: 4 arrives as 4.0.
        if (isinstance(max_nodes, bool) or not isinstance(max_nodes, (int, float))
                or not (0 < max_nodes <= 100_000 and float(max_nodes).is_integer())):
            raise bad(f"nodePools[{i}].maxNodes is missing or not a positive whole number")
        pools.append(WorkerPool(name=name, shape=shape, capacity_kind=capacity, max_nodes=int(max_nodes)))
    return Worker(key=worker_key(stack), cluster_name=cluster_name, cloud=cloud, pools=tuple(pools))


def hub_resource_flavor(key: str, capacity_kind: str) -> dict[str, Any]:
    """A quota-only flavor on the hub (no node labels: hub workloads never run pods on the hub)."""
    return _obj("ResourceFlavor", hub_flavor_name(key, capacity_kind), {},
                labels={"gpufleet.io/worker": key, "gpufleet.io/capacity": capacity_kind})


def worker_capacity(worker: Worker, capacity_kind: str) -> Allocatable:
    """Sum over a worker's pools of one capacity kind of ``max_nodes`` x allocatable."""
    total = Allocatable(0, 0, 0, 0)
    for p in worker.pools:
        if p.capacity_kind == capacity_kind:
            total = total + allocatable(p.shape).scaled(p.max_nodes)
    return total


def hub_flavors(workers: Sequence[Worker], flavor_order: Sequence[str], *, quota: bool) -> list[dict[str, Any]]:
    """The hub flavors of ``workers`` in ``flavor_order`` (kind first, then worker), each with the worker's
    capacity of that kind (``quota``) or a nominal quota of 0 (a queue that borrows it from the cohort)."""
    covered = covered_resources(p.shape for w in workers for p in w.pools)
    zero = Allocatable(0, 0, 0, 0)
    return [{"name": hub_flavor_name(w.key, kind),
             "resources": quota_entries(worker_capacity(w, kind) if quota else zero, covered)}
            for kind in flavor_order for w in workers]


def hub_cohort(name: str, workers: Sequence[Worker], flavor_order: Sequence[str]) -> dict[str, Any]:
    """The hub's Cohort ``name``: it alone holds each worker's capacity (per capacity kind), once.

    Every hub ClusterQueue (one per worker and ``all-workers``) is in it with a nominal quota of 0 and
    borrows from this pool, so a worker's capacity is admitted once however the jobs are split between
    its own queue and ``all-workers``. (Were the quota on the queues, each would hold the worker's full
    capacity and the hub would admit twice what the worker has.)"""
    covered = covered_resources(p.shape for w in workers for p in w.pools)
    return _obj("Cohort", name, {"resourceGroups": [{"coveredResources": covered,
                                                    "flavors": hub_flavors(workers, flavor_order, quota=True)}]})


def hub_cluster_queue(name: str, workers: Sequence[Worker], flavor_order: Sequence[str], admission_check: str,
                      teams: Sequence[str], cohort: str) -> dict[str, Any]:
    """A hub ClusterQueue over the flavors of ``workers``, admitting through the MultiKueue AdmissionCheck
    ``admission_check``. Its nominal quota is 0: it borrows the workers' capacity from the hub Cohort
    ``cohort`` (:func:`hub_cohort`), unlimited, and nothing it lends can be reclaimed."""
    covered = covered_resources(p.shape for w in workers for p in w.pools)
    flavors = hub_flavors(workers, flavor_order, quota=False)
    spec = {
        "cohortName": cohort,
        "namespaceSelector": team_namespace_selector(teams),
        "queueingStrategy": "BestEffortFIFO",
        "resourceGroups": [{"coveredResources": covered, "flavors": flavors}],
        "preemption": {"withinClusterQueue": "LowerPriority"},
        "flavorFungibility": flavor_fungibility(),
        "admissionChecksStrategy": {"admissionChecks": [{"name": admission_check}]},
    }
    return _obj("ClusterQueue", name, spec)


def multikueue_cluster(key: str, secret_name: str) -> dict[str, Any]:
    """The hub's handle on a worker: a kubeconfig in Secret ``secret_name`` (namespace kueue-system)."""
    return _obj("MultiKueueCluster", key,
                {"clusterSource": {"kubeConfig": {"locationType": "Secret", "location": secret_name}}})


def multikueue_config(name: str, clusters: Sequence[str]) -> dict[str, Any]:
    return _obj("MultiKueueConfig", name, {"clusters": list(clusters)})


def admission_check(name: str, config_name: str) -> dict[str, Any]:
    return _obj("AdmissionCheck", name, {
        "controllerName": MULTIKUEUE_CONTROLLER,
        "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": config_name},
    })


def hub_worker_layout(hub_cfg: StackConfig) -> list[tuple[str, str]]:
    """``(key, kind)`` of every object :func:`hub_worker_objects` returns, dependencies first.

    Known before any worker output is, so the hub can declare its resources up front.
    """
    layout = [(f"flavor-{kind}", "ResourceFlavor") for kind in hub_cfg.kueue.flavor_order]
    layout += [("multikueuecluster", "MultiKueueCluster"), ("multikueueconfig", "MultiKueueConfig"),
               ("admissioncheck", "AdmissionCheck"), ("clusterqueue", "ClusterQueue")]
    layout += [(f"localqueue-{team}", "LocalQueue") for team in hub_cfg.kueue.teams]
    return layout


def hub_worker_objects(worker: Worker, hub_cfg: StackConfig) -> dict[str, dict[str, Any]]:
    """A worker's objects on the hub, keyed as in :func:`hub_worker_layout`: two quota flavors,
    MultiKueueCluster/Config, AdmissionCheck, a ClusterQueue named like the worker's own queue and
    a LocalQueue per team with the worker's LocalQueue name."""
    queue = cluster_queue_name(worker.cluster_name)
    objs = {f"flavor-{kind}": hub_resource_flavor(worker.key, kind) for kind in hub_cfg.kueue.flavor_order}
    objs["multikueuecluster"] = multikueue_cluster(worker.key, kubeconfig_secret_name(worker.key))
    objs["multikueueconfig"] = multikueue_config(worker.key, [worker.key])
    objs["admissioncheck"] = admission_check(worker.key, worker.key)
    objs["clusterqueue"] = hub_cluster_queue(queue, [worker], hub_cfg.kueue.flavor_order, worker.key,
                                             hub_cfg.kueue.teams, hub_cfg.kueue.cohort)
    for team in hub_cfg.kueue.teams:
        objs[f"localqueue-{team}"] = local_queue(local_queue_name(worker.cluster_name, team), team, queue)
    return objs


def hub_all_workers_layout(hub_cfg: StackConfig) -> list[tuple[str, str]]:
    """``(key, kind)`` of every object :func:`hub_all_workers_objects` returns, dependencies first."""
    layout = [("cohort", "Cohort"), ("multikueueconfig", "MultiKueueConfig"), ("admissioncheck", "AdmissionCheck"),
              ("clusterqueue", "ClusterQueue")]
    layout += [(f"localqueue-{team}", "LocalQueue") for team in hub_cfg.kueue.teams]
    return layout


def hub_all_workers_objects(workers: Sequence[Worker], hub_cfg: StackConfig) -> dict[str, dict[str, Any]]:
    """The hub Cohort holding every worker's capacity (:func:`hub_cohort`) and the ``all-workers``
    MultiKueueConfig / AdmissionCheck / ClusterQueue / LocalQueues."""
    objs = {
        "cohort": hub_cohort(hub_cfg.kueue.cohort, workers, hub_cfg.kueue.flavor_order),
        "multikueueconfig": multikueue_config(ALL_WORKERS, [w.key for w in workers]),
        "admissioncheck": admission_check(ALL_WORKERS, ALL_WORKERS),
        "clusterqueue": hub_cluster_queue(ALL_WORKERS, workers, hub_cfg.kueue.flavor_order, ALL_WORKERS,
                                          hub_cfg.kueue.teams, hub_cfg.kueue.cohort),
    }
    for team in hub_cfg.kueue.teams:
        objs[f"localqueue-{team}"] = local_queue(ALL_WORKERS, team, ALL_WORKERS)
    return objs


def multikueue_kubeconfig(worker_kubeconfig: str | Mapping[str, Any], token: str, user: str) -> str:
    """A token kubeconfig for the Kueue controller on the hub to reach a worker.

    Server and CA come from the worker's (exec-plugin) kubeconfig, which only works where the cloud
    CLI runs; the controller needs a static service-account ``token`` instead.
    """
    doc = yaml.safe_load(worker_kubeconfig) if isinstance(worker_kubeconfig, str) else dict(worker_kubeconfig)
    contexts = {c["name"]: c["context"] for c in doc.get("contexts") or []}
    clusters = {c["name"]: c["cluster"] for c in doc.get("clusters") or []}
    if not clusters:
        raise ValueError("worker kubeconfig has no clusters")
    current = contexts.get(doc.get("current-context", ""))
    cluster_name = current["cluster"] if current else next(iter(clusters))
    cluster = clusters[cluster_name]
    entry: dict[str, Any] = {"server": cluster["server"]}
    if cluster.get("certificate-authority-data"):
        entry["certificate-authority-data"] = cluster["certificate-authority-data"]
    kubeconfig = {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": cluster_name, "cluster": entry}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": cluster_name, "context": {"cluster": cluster_name, "user": user}}],
        "current-context": cluster_name,
    }
    return yaml.safe_dump(kubeconfig, sort_keys=False)
