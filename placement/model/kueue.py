"""The Kueue naming scheme and per-node resources shared by the Pulumi stacks and the placement tools.

Pure data and functions, no Pulumi and no Kubernetes client: ``infra/k8s`` renders the cluster and hub
objects from these names, ``placement submit`` labels jobs with them and ``placement dispatch`` reads
the hub and worker queues by them. Dependencies point one way: ``infra/`` imports this module.

Naming scheme (the same on every worker cluster and on the hub, because MultiKueue copies a
workload to a worker under the same namespace and LocalQueue name):

* ResourceFlavor: the pool name (``spec.nodeLabels``: ``gpufleet.io/pool``, ``node.kubernetes.io/instance-type``
  and ``gpufleet.io/fabric`` of the pool, :func:`flavor_node_labels`).
* ClusterQueue: ``<clusterName>-gpu`` (training) and ``<clusterName>-inference`` (serving), one cohort.
* LocalQueue, in each team namespace: ``<clusterName>-gpu`` (this cluster only) and
  ``all-workers`` (the hub's queue that spans every worker).
* On the hub, per worker (keyed by the worker stack's short name): MultiKueueCluster, MultiKueueConfig
  and AdmissionCheck ``<key>``, kubeconfig Secret ``multikueue-<key>``, flavors ``<key>-<capacity>``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from placement.model.priorities import PRIORITY_CLASSES as PRIORITY_CLASSES
from placement.model.priorities import SERVING_PRIORITY_CLASS as SERVING_PRIORITY_CLASS
from placement.model.shapes import Shape

API_GROUP = "kueue.x-k8s.io"
API_VERSION = "kueue.x-k8s.io/v1beta2"
KUEUE_NAMESPACE = "kueue-system"
POOL_LABEL = "gpufleet.io/pool"
# Well-known node label the kubelet sets from the cloud's instance type (EKS) / machine type (GKE).
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
# The GPU fabric of a node (placement/data/shapes.yaml fabric.kind: efa, tcpx, tcpxo, rdma or none), a label
# every GPU node pool carries on both clouds. Pool names repeat across clouds (``h100-spot`` is a p5 pool on
# one worker and an A3 High pool on another), so a flavor that names only its pool cannot keep a TCPX job off
# an EFA worker: Kueue compares a pod's node affinity only on its flavor's own label keys.
FABRIC_LABEL = "gpufleet.io/fabric"
# Every GPU node pool carries this taint, so only pods that asked for a GPU flavor land there.
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}

RES_CPU = "cpu"
RES_MEMORY = "memory"
RES_GPU = "nvidia.com/gpu"
RES_EFA = "vpc.amazonaws.com/efa"
RES_HUGEPAGES = "hugepages-2Mi"
# 2 MiB huge pages every pod on an EFA fabric requests (libfabric's EFA provider registers its bounce
# buffers in them; AWS's EFA-on-EKS examples request 5120Mi per node-sized pod). EFA nodes reserve exactly
# this at boot (infra/aws/gpu_nodes.py), the kubelet reports it as allocatable ``hugepages-2Mi`` and
# takes it out of allocatable memory, and Kueue's quota covers it.
EFA_HUGEPAGES_MIB = 5120

ALL_WORKERS = "all-workers"
MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"
MULTIKUEUE_KUBECONFIG_KEY = "kubeconfig"

# The WorkloadPriorityClasses live in placement.model.priorities (a job spec reads them without this module).

# Node labels the platform puts on GPU nodes, from the widest network domain down to the host.
TOPOLOGY_LEVELS: dict[str, tuple[str, ...]] = {
    "gcp": ("cloud.google.com/gce-topology-block", "cloud.google.com/gce-topology-subblock",
            "cloud.google.com/gce-topology-host", "kubernetes.io/hostname"),
    "aws": ("topology.k8s.aws/network-node-layer-1", "topology.k8s.aws/network-node-layer-2",
            "topology.k8s.aws/network-node-layer-3", "kubernetes.io/hostname"),
}

# Dispatcher names of Kueue's Configuration.multiKueue.dispatcherName. "External" is any name Kueue
# does not implement: Kueue then waits for another controller (``placement dispatch``) to set
# .status.nominatedClusterNames.
DISPATCHERS: dict[str, str] = {
    "AllAtOnce": "kueue.x-k8s.io/multikueue-dispatcher-all-at-once",
    "Incremental": "kueue.x-k8s.io/multikueue-dispatcher-incremental",
    "External": "gpufleet.io/placement",
}

# Per-node system reserve, shared by EKS and GKE nodes (see allocatable()).
DAEMONSET_RESERVE_CPU_MILLIS = 500
DAEMONSET_RESERVE_MEMORY_MIB = 1024
EVICTION_HARD_MEMORY_MIB = 100

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


# ---------------------------------------------------------------------------------------------- resources


@dataclass(frozen=True)
class Allocatable:
    """What one node of a shape offers to pods: CPU in millicores, memory in MiB, GPUs, EFA devices and
    2 MiB huge pages in MiB."""

    cpu_millis: int
    memory_mib: int
    gpus: int
    efa: int
    hugepages_mib: int = 0

    def scaled(self, nodes: int) -> Allocatable:
        return Allocatable(self.cpu_millis * nodes, self.memory_mib * nodes, self.gpus * nodes, self.efa * nodes,
                           self.hugepages_mib * nodes)

    def __add__(self, other: Allocatable) -> Allocatable:
        return Allocatable(self.cpu_millis + other.cpu_millis, self.memory_mib + other.memory_mib,
                           self.gpus + other.gpus, self.efa + other.efa, self.hugepages_mib + other.hugepages_mib)


def kube_reserved_cpu_millis(vcpus: int) -> int:
    """CPU the kubelet reserves (millicores): 6% of the first core, 1% of the second, 0.5% of cores
    3-4 and 0.25% of every core above 4. This is the formula both EKS (AL2023 nodeadm) and GKE use."""
    tiers = ((1, 0.06), (1, 0.01), (2, 0.005), (math.inf, 0.0025))
    return _tiered(vcpus * 1000, tuple((size * 1000, rate) for size, rate in tiers))


def kube_reserved_memory_mib(memory_gib: int) -> int:
    """Memory the kubelet reserves (MiB), GKE's formula: 25% of the first 4 GiB, 20% of the next 4,
    10% of the next 8, 6% of the next 112 and 2% above 128 GiB. EKS reserves ``11 MiB x maxPods +
    255 MiB``, far less on GPU hosts; the GKE formula is used on both clouds as the conservative bound."""
    tiers = ((4, 0.25), (4, 0.20), (8, 0.10), (112, 0.06), (math.inf, 0.02))
    return _tiered(memory_gib * 1024, tuple((size * 1024, rate) for size, rate in tiers))


def _tiered(amount: float, tiers: tuple[tuple[float, float], ...]) -> int:
    reserved, left = 0.0, float(amount)
    for size, rate in tiers:
        take = min(left, size)
        reserved += take * rate
        left -= take
        if left <= 0:
            break
    return math.ceil(reserved)


def allocatable(shape: Shape) -> Allocatable:
    """Per-node resources Kueue may hand out on ``shape`` (the one place this is defined).

    GPUs: ``shape.gpus``. EFA devices: ``shape.fabric_nics`` on EFA shapes (the EFA device plugin
    advertises one ``vpc.amazonaws.com/efa`` per interface), else 0. CPU and memory: the shape's
    vCPUs / memory minus the system reserve, which is kube-reserved (:func:`kube_reserved_cpu_millis`,
    :func:`kube_reserved_memory_mib`) plus the 100 MiB hard-eviction threshold plus an allowance of
    500m CPU / 1 GiB per node for the DaemonSets every GPU node runs (CNI, kube-proxy, NVIDIA/EFA
    device plugins, NCCL installers, log and metric agents). EFA shapes also reserve
    :data:`EFA_HUGEPAGES_MIB` of 2 MiB huge pages, which the kubelet takes out of allocatable memory.
    """
    efa = shape.fabric == "efa"
    hugepages = EFA_HUGEPAGES_MIB if efa else 0
    cpu = shape.vcpus * 1000 - kube_reserved_cpu_millis(shape.vcpus) - DAEMONSET_RESERVE_CPU_MILLIS
    memory = (shape.memory_gib * 1024 - kube_reserved_memory_mib(shape.memory_gib)
              - EVICTION_HARD_MEMORY_MIB - DAEMONSET_RESERVE_MEMORY_MIB - hugepages)
    return Allocatable(cpu_millis=max(cpu, 0), memory_mib=max(memory, 0), gpus=shape.gpus,
                       efa=shape.fabric_nics if efa else 0, hugepages_mib=hugepages)


def flavor_node_labels(pool_name: str, shape: Shape) -> dict[str, str]:
    """``spec.nodeLabels`` of a worker's ResourceFlavor for one pool: its pool name, instance type and fabric.

    Kueue injects them into every pod it admits on the flavor, and its flavor assigner compares a pod's
    node selector and required node affinity only on these keys (pkg/scheduler/flavorassigner,
    ``flavorSelector``): naming the instance type and the fabric is what lets a job's affinity on them
    rule a flavor out.
    """
    return {POOL_LABEL: pool_name, INSTANCE_TYPE_LABEL: shape.name, FABRIC_LABEL: shape.fabric}


def covered_resources(shapes: Iterable[Shape]) -> list[str]:
    """Resources a ClusterQueue covers: cpu, memory, GPUs, plus EFA devices and 2 MiB huge pages when any
    shape has EFA (EFA pods request both; Kueue does not admit a request for a resource it does not cover)."""
    resources = [RES_CPU, RES_MEMORY, RES_GPU]
    if any(s.fabric == "efa" for s in shapes):
        resources += [RES_EFA, RES_HUGEPAGES]
    return resources


def tas_enabled(min_nodes: int, max_nodes: int, shape: Shape) -> bool:
    """Whether a pool's flavor names the cloud's Topology (Kueue topology-aware scheduling, TAS).

    The one rule, shared by the worker's ResourceFlavors and ``placement submit`` (which adds the
    ``podset-preferred-topology`` annotation only to jobs bound for such a pool). TAS matters only
    where a job can span nodes over a GPU fabric (``max_nodes > 1`` on a fabric shape), and it only
    works on capacity that is standing: Kueue places a TAS workload on nodes that already exist, and
    until it is admitted its pods stay suspended, so the cluster autoscaler never sees a pending pod
    and never adds a node. A TAS flavor on a pool that scales from zero never admits anything, and on
    a pool with ``0 < min_nodes < max_nodes`` it never admits a job larger than the standing nodes,
    though the flavor's quota counts ``max_nodes``. So only fixed-size pools (``min_nodes ==
    max_nodes``) get TAS; pools that scale rely on the cloud's placement for locality (the AWS
    cluster placement group, the GKE COMPACT placement policy), which keeps every node of the pool
    in one network block anyway.
    """
    return max_nodes > 1 and shape.multi_node and min_nodes >= max_nodes


# ---------------------------------------------------------------------------------------------- names


def cluster_queue_name(cluster_name: str) -> str:
    """The worker's ClusterQueue: ``<clusterName>-gpu``."""
    return f"{cluster_name}-gpu"


def inference_queue_name(cluster_name: str) -> str:
    """The worker's serving ClusterQueue (and its LocalQueue in every team namespace): ``<clusterName>-inference``."""
    return f"{cluster_name}-inference"


def local_queue_name(cluster_name: str, team: str) -> str:
    """Name of the LocalQueue in namespace ``team`` that sends work to that cluster's GPUs.

    The name is the same in every team namespace and on the hub (whose per-worker queue has the
    worker's name), so a job labelled ``kueue.x-k8s.io/queue-name: <this>`` in namespace ``team``
    reaches the same cluster whether submitted to the worker directly or through the hub.
    """
    if not DNS_LABEL.fullmatch(team):
        raise ValueError(f"team {team!r} is not a valid namespace name")
    return cluster_queue_name(cluster_name)


def topology_name(cloud: str) -> str:
    return f"{cloud}-gpu-topology"


# The fourth EC2 network layer, labelled only on nodes of four-layer shapes (Shape.network_layers).
AWS_LAYER_4 = "topology.k8s.aws/network-node-layer-4"


def topology_levels(shape: Shape) -> tuple[str, ...]:
    """The Topology levels of ``shape``'s nodes, widest first, host last: the cloud's, plus EC2's fourth
    network layer on four-layer AWS shapes (Kueue leaves out nodes missing any level's label)."""
    levels = TOPOLOGY_LEVELS[shape.cloud]
    if shape.cloud == "aws" and shape.network_layers == 4:
        return (*levels[:-1], AWS_LAYER_4, levels[-1])
    return levels


def shape_topology_name(shape: Shape) -> str:
    """The Topology a pool of ``shape`` names: the cloud's, or one of its own for four-layer AWS shapes."""
    base, levels = topology_name(shape.cloud), topology_levels(shape)
    return base if levels == TOPOLOGY_LEVELS[shape.cloud] else f"{base}-{len(levels) - 1}-layers"


def preferred_topology_level(shape: Shape) -> str:
    """The narrowest network level of ``shape``'s Topology: GKE's sub-block (``gce-topology-host`` below it is
    one physical machine, not a network domain), EC2's layer 3, or layer 4 on four-layer shapes.
    ``kueue.x-k8s.io/podset-preferred-topology`` names it, so Kueue keeps a job's pods in one such domain when
    they fit and widens level by level when they do not."""
    if shape.cloud == "gcp":
        return "cloud.google.com/gce-topology-subblock"
    return topology_levels(shape)[-2]


def worker_key(stack: str) -> str:
    """``org/project/aws-use1-p5`` -> ``aws-use1-p5``; must be a DNS label (it names hub objects)."""
    key = stack.rsplit("/", 1)[-1]
    if not DNS_LABEL.fullmatch(key):
        raise ValueError(f"worker stack {stack!r}: {key!r} is not a DNS-1123 label")
    return key


def hub_flavor_name(key: str, capacity_kind: str) -> str:
    return f"{key}-{capacity_kind}"


def kubeconfig_secret_name(key: str) -> str:
    """The hub Secret (namespace kueue-system) holding the kubeconfig MultiKueue uses for worker ``key``."""
    return f"multikueue-{key}"


# ``placement dispatch`` on the hub: its name (Deployment, ServiceAccount, Lease, Event source) and the Secret
# with its read-only kubeconfig for each worker. The hub stack creates them; the controller reads them.
DISPATCH_NAME = "gpufleet-dispatch"


def dispatch_secret_name(key: str) -> str:
    """The hub Secret (namespace kueue-system, key ``kubeconfig``) with the dispatcher's read-only kubeconfig
    for worker ``key`` (the MultiKueueCluster name)."""
    return f"{DISPATCH_NAME}-{key}"
