"""``placement submit``: place a job on a cluster that exists and hand it to that cluster's Kueue queue.

Steps: read the clusters from their Pulumi stack outputs (``--stacks FILE`` or ``--stack NAME``), rank
the job over the catalog exactly as ``placement plan`` does, keep the candidates some stack's node
pool can hold (same cloud, region, zone, instance type and capacity, enough ``maxNodes``), take the
best of those, render a ``batch/v1`` Job (one node) or a ``jobset.x-k8s.io/v1alpha2`` JobSet (several
nodes) for that pool, and create it with the Kubernetes Python client (or print it with ``--dry-run``).

Rendering is pure (dicts in, dicts out); only :func:`run_submit` reads files, runs ``pulumi`` and
talks to a cluster. The Kueue naming scheme (queue names, pool label, GPU taint, topology levels)
comes from :mod:`placement.kueue`, the per-node resources from its :func:`allocatable`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from placement import kueue as ko
from placement.engine import Candidate, Plan
from placement.errors import InputError
from placement.jobspec import JobSpec
from placement.render import SCHEMA, candidate_doc, catalog_info, table
from placement.shapes import Shape
from placement.zones import is_aws_zone_id

if TYPE_CHECKING:
    from placement.catalog import Catalog

EXIT_OK, EXIT_NOTHING_FEASIBLE, EXIT_BAD_INPUT = 0, 1, 2

JOBSET_GROUP, JOBSET_VERSION, JOBSET_PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"
JOBSET_API = f"{JOBSET_GROUP}/{JOBSET_VERSION}"
KUEUE_GROUP, KUEUE_VERSION = "kueue.x-k8s.io", "v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
JOB_LABEL = "gpufleet.io/job"
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpufleet"}

CONTAINER = "trainer"
REPLICATED_JOB = "node"  # JobSet pods are <jobset>-node-0-<rank>; rank 0 is the rendezvous host
MASTER_PORT = 29500
CHECKPOINT_DIR = "/checkpoints"
CHECKPOINT_VOLUME = "checkpoints"
CHECKPOINT_PVC = "gpufleet-checkpoints"
FSX_CSI_DRIVER = "fsx.csi.aws.com"
GCSFUSE_CSI_DRIVER = "gcsfuse.csi.storage.gke.io"
# Share of a node's allocatable CPU/memory (pro rata to the GPUs taken) the trainer requests. The rest
# stays for the sidecars admission webhooks inject (GCS FUSE) and the GPUDirect RxDM daemon.
REQUEST_FRACTION = 0.9
JOB_BACKOFF_LIMIT = 3  # single node: pod retries (a spot reclaim counts as one) before the Job fails
JOBSET_MAX_RESTARTS = 3  # multi node: whole-group restarts from the last checkpoint before the JobSet fails
API_TIMEOUT_S = 30.0
NOMINATE_TIMEOUT_S = 30.0  # External dispatcher: how long to wait for Kueue to create the hub Workload
PULUMI_TIMEOUT_S = 120.0
NEW_STACK_ROWS = 5  # "needs a new stack" candidates shown next to the existing-cluster ones

# GKE GPUDirect: what Google's TCPX / TCPXO / RDMA manifests (GoogleCloudPlatform/container-engine-accelerators,
# gpudirect-*/nccl-test*.yaml) put in a training pod, keyed by the shape's fabric kind. The RxDM daemon runs
# as a native sidecar (an init container with restartPolicy Always) so the Job completes when training exits.
NVIDIA_LIB_HOST = "/home/kubernetes/bin/nvidia/lib64"
NVIDIA_LIB = "/usr/local/nvidia/lib64"
TCPXO_RXDM_IMAGE = "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpxo/tcpgpudmarxd-dev:v1.0.9"
TCPX_RXDM_IMAGE = "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpx/tcpgpudmarxd-dev:v2.0.12"


class SubmitError(Exception):
    """A failure talking to the cluster: printed as one line with ``code`` as the exit code."""

    def __init__(self, message: str, code: int = EXIT_NOTHING_FEASIBLE) -> None:
        super().__init__(message)
        self.code = code


# ----------------------------------------------------------------------------- stack outputs


@dataclass(frozen=True)
class Pool:
    """One node pool as a cluster stack exports it (``nodePools[i]``). ``min_nodes`` is 0 for stacks
    that export none (older outputs): the pool is then treated as scaling from zero."""

    name: str
    instance_type: str
    capacity: str  # spot | on-demand
    zone: str
    max_nodes: int
    min_nodes: int = 0


@dataclass(frozen=True)
class TrainingAccount:
    """The training service account (``trainingServiceAccount``): its name and the namespaces the stack
    created it in, bound to the cloud's checkpoint identity (IRSA / Workload Identity)."""

    name: str
    namespaces: tuple[str, ...]


@dataclass(frozen=True)
class Queue:
    namespace: str
    name: str


@dataclass(frozen=True)
class ClusterStack:
    """A worker cluster from its stack outputs. ``local_queues`` is ``None`` when the stack exports no
    ``kueue`` output (then the queue name follows :func:`placement.kueue.local_queue_name`)."""

    stack: str
    cloud: str
    region: str
    cluster_name: str
    pools: tuple[Pool, ...]
    kubeconfig: Any
    checkpoint_uri: str | None
    filesystem: Mapping[str, Any] | None
    service_account: TrainingAccount | None
    local_queues: tuple[Queue, ...] | None
    gpu_networks: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def default_namespace(self) -> str | None:
        return self.local_queues[0].namespace if self.local_queues else None

    def queue_for(self, namespace: str) -> str | None:
        """This cluster's own LocalQueue in ``namespace`` (``<clusterName>-gpu``), or None."""
        name = ko.cluster_queue_name(self.cluster_name)
        if self.local_queues is None:
            return name
        return name if Queue(namespace, name) in self.local_queues else None


@dataclass(frozen=True)
class HubStack:
    """The MultiKueue hub from its stack outputs: ``workers`` maps the MultiKueueCluster name (the worker's
    stack name) to the worker's clusterName."""

    stack: str
    workers: Mapping[str, str]
    dispatcher: str
    local_queues: tuple[Queue, ...]
    kubeconfig: Any = None

    def worker_key(self, cluster_name: str) -> str | None:
        return next((k for k, v in self.workers.items() if v == cluster_name), None)


@dataclass(frozen=True)
class Stacks:
    clusters: tuple[ClusterStack, ...]
    hubs: tuple[HubStack, ...]


def _get(outputs: Mapping[str, Any], key: str, stack: str, source: str, kind: type | tuple[type, ...] = str) -> Any:
    value = outputs.get(key)
    if value is None or not isinstance(value, kind):
        what = "a string" if kind is str else "a mapping" if kind is dict else "a list"
        raise InputError(f"{stack}.{key}", f"must be {what} (re-export with `pulumi stack output --json "
                         "--show-secrets`)", source=source)
    return value


def _whole(value: Any, where: str, source: str) -> int:
    # Pulumi prints numbers as JSON numbers; mocks and YAML may give 4.0.
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) or value < 0:
        raise InputError(where, f"must be a whole number, got {value!r}", source=source)
    return int(value)


def _queues(raw: Any, where: str, source: str) -> tuple[Queue, ...]:
    if not isinstance(raw, list) or not all(isinstance(q, Mapping) and isinstance(q.get("namespace"), str)
                                            and isinstance(q.get("name"), str) for q in raw):
        raise InputError(where, "must be a list of {namespace, name}", source=source)
    return tuple(Queue(q["namespace"], q["name"]) for q in raw)


def _training_account(raw: Any, stack: str, source: str) -> TrainingAccount | None:
    """``{name, namespaces: [...]}``; the older ``{namespace, name}`` (one namespace) is read too."""
    if raw is None:
        return None
    where = f"{stack}.trainingServiceAccount"
    if not isinstance(raw, Mapping) or not isinstance(raw.get("name"), str) or not raw["name"]:
        raise InputError(where, "must be a mapping with name and namespaces", source=source)
    namespaces = raw.get("namespaces")
    if namespaces is None and isinstance(raw.get("namespace"), str):
        namespaces = [raw["namespace"]]
    if not isinstance(namespaces, list) or not all(isinstance(n, str) and n for n in namespaces):
        raise InputError(f"{where}.namespaces", "must be a list of namespace names", source=source)
    return TrainingAccount(name=raw["name"], namespaces=tuple(namespaces))


def parse_cluster(stack: str, outputs: Mapping[str, Any], source: str) -> ClusterStack:
    """One worker stack's outputs (the names :func:`infra.outputs.export_cluster` exports)."""
    cloud = _get(outputs, "cloud", stack, source)
    if cloud not in ("aws", "gcp"):
        raise InputError(f"{stack}.cloud", f"must be aws or gcp, got {cloud!r}", source=source)
    pools = []
    for i, raw in enumerate(_get(outputs, "nodePools", stack, source, list)):
        where = f"{stack}.nodePools[{i}]"
        if not isinstance(raw, Mapping):
            raise InputError(where, "must be a mapping", source=source)
        for key in ("name", "instanceType", "capacity", "zone"):
            if not isinstance(raw.get(key), str) or not raw[key]:
                raise InputError(f"{where}.{key}", "is required (a string)", source=source)
        if raw["capacity"] not in ("spot", "on-demand"):
            raise InputError(f"{where}.capacity", f"must be spot or on-demand, got {raw['capacity']!r}", source=source)
        min_nodes = _whole(raw["minNodes"], f"{where}.minNodes", source) if "minNodes" in raw else 0
        pools.append(Pool(name=raw["name"], instance_type=raw["instanceType"], capacity=raw["capacity"],
                          zone=raw["zone"], max_nodes=_whole(raw.get("maxNodes"), f"{where}.maxNodes", source),
                          min_nodes=min_nodes))
    service_account = _training_account(outputs.get("trainingServiceAccount"), stack, source)
    kueue = outputs.get("kueue")
    local_queues = None
    if kueue is not None:
        if not isinstance(kueue, Mapping):
            raise InputError(f"{stack}.kueue", "must be a mapping with clusterQueue and localQueues", source=source)
        local_queues = _queues(kueue.get("localQueues"), f"{stack}.kueue.localQueues", source)
    fs = outputs.get("checkpointFilesystem")
    if fs is not None and not isinstance(fs, Mapping):
        raise InputError(f"{stack}.checkpointFilesystem", "must be a mapping or null", source=source)
    nets_raw = outputs.get("gpuNetworks") or {}
    if not isinstance(nets_raw, Mapping) or not all(isinstance(v, list) for v in nets_raw.values()):
        raise InputError(f"{stack}.gpuNetworks", "must map pool names to lists of GKE network names", source=source)
    uri = outputs.get("checkpointUri")
    return ClusterStack(
        stack=stack, cloud=cloud, region=_get(outputs, "region", stack, source),
        cluster_name=_get(outputs, "clusterName", stack, source), pools=tuple(pools),
        kubeconfig=outputs.get("kubeconfig"), checkpoint_uri=uri if isinstance(uri, str) and uri else None,
        filesystem=fs, service_account=service_account, local_queues=local_queues,
        gpu_networks={str(k): tuple(str(n) for n in v) for k, v in nets_raw.items()})


def parse_hub(stack: str, outputs: Mapping[str, Any], source: str) -> HubStack:
    """The hub stack's outputs (:func:`infra.k8s.hub.build_hub`)."""
    workers = _get(outputs, "workers", stack, source, dict)
    kueue = _get(outputs, "kueue", stack, source, dict)
    return HubStack(stack=stack, workers={str(k): str(v) for k, v in workers.items()},
                    dispatcher=str(outputs.get("dispatcher") or "AllAtOnce"),
                    local_queues=_queues(kueue.get("localQueues"), f"{stack}.kueue.localQueues", source),
                    kubeconfig=outputs.get("kubeconfig"))


def parse_stacks(doc: Any, source: str) -> Stacks:
    """A mapping of stack name -> that stack's outputs; one stack's bare outputs are accepted too."""
    if isinstance(doc, Mapping) and ("clusterName" in doc or doc.get("role") == "hub"):
        stem = os.path.basename(source).split(".")[0] or "stack"
        doc = {stem: doc}
    if not isinstance(doc, Mapping) or not doc:
        raise InputError("--stacks", "must map stack names to `pulumi stack output --json --show-secrets` "
                         "documents (see README: placement submit)", source=source)
    clusters, hubs = [], []
    for name, outputs in doc.items():
        if not isinstance(outputs, Mapping):
            raise InputError(str(name), "must be a stack's outputs (a mapping)", source=source)
        if outputs.get("role") == "hub":
            hubs.append(parse_hub(str(name), outputs, source))
        else:
            clusters.append(parse_cluster(str(name), outputs, source))
    return Stacks(clusters=tuple(clusters), hubs=tuple(hubs))


def pulumi_outputs(stack: str) -> dict[str, Any]:
    """``pulumi stack output --stack NAME --json --show-secrets``; a one-line error when that fails."""
    cmd = ["pulumi", "stack", "output", "--stack", stack, "--json", "--show-secrets"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PULUMI_TIMEOUT_S, check=False)
    except FileNotFoundError:
        raise SubmitError("--stack: the pulumi CLI is not on PATH; install it, or export the outputs and pass "
                          "--stacks FILE (see README: placement submit)", EXIT_BAD_INPUT) from None
    except subprocess.TimeoutExpired:
        raise SubmitError(f"--stack {stack}: `pulumi stack output` did not answer in {PULUMI_TIMEOUT_S:g} s") from None
    if proc.returncode != 0:
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        raise SubmitError(f"--stack {stack}: `pulumi stack output` failed: {lines[-1] if lines else proc.returncode}",
                          EXIT_BAD_INPUT)
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise SubmitError(f"--stack {stack}: `pulumi stack output --json` printed no JSON", EXIT_BAD_INPUT) from None
    if not isinstance(doc, dict):
        raise SubmitError(f"--stack {stack}: `pulumi stack output --json` printed no mapping", EXIT_BAD_INPUT)
    return doc


# ----------------------------------------------------------------------------- matching candidates to pools


@dataclass(frozen=True)
class Existing:
    """A candidate some stack's pool can run; ``note`` explains an approximate (zone name vs ID) match."""

    cluster: ClusterStack
    pool: Pool
    namespace: str
    queue: str
    note: str | None = None


@dataclass(frozen=True)
class Choice:
    """The ranked candidates annotated with the existing cluster each can use (``None``: needs a new stack)."""

    ranked: tuple[Candidate, ...]
    existing: tuple[Existing | None, ...]
    reasons: tuple[str, ...]  # why pools of a wanted accelerator cannot take the job

    @property
    def chosen_index(self) -> int | None:
        return next((i for i, e in enumerate(self.existing) if e is not None), None)


def _zone_kind(cloud: str, zone: str) -> str:
    return "id" if cloud == "aws" and is_aws_zone_id(zone) else "name"


def match_existing(plan: Plan, clusters: Sequence[ClusterStack], job: JobSpec,
                   hub: HubStack | None = None) -> Choice:
    """Annotate every runnable candidate of ``plan`` with the pool that can run it, if any.

    A pool matches a candidate with the same cloud, region, zone, instance type and capacity when
    its ``maxNodes`` covers the candidate's nodes and the team namespace has this cluster's
    LocalQueue (and, through a hub, the hub lists the cluster and has the queue too). AWS stacks
    export zone IDs; a catalog with zone names (SkyPilot's) cannot be compared zone by zone, so
    then the dearest zone of the region stands for the pool.
    """
    ranked = plan.ranked
    wanted = set(job.accelerators)
    index: dict[tuple[str, str, str, str], list[tuple[ClusterStack, Pool]]] = {}
    reasons: list[str] = []
    for cl in clusters:
        for pool in cl.pools:
            index.setdefault((cl.cloud, cl.region, pool.instance_type, pool.capacity), []).append((cl, pool))

    def blocker(cl: ClusterStack, pool: Pool, nodes: int) -> tuple[str | None, str, str]:
        ns = job.team or cl.default_namespace()
        if ns is None:
            return "set team: the stack exports no kueue.localQueues to pick a namespace from", "", ""
        queue = cl.queue_for(ns)
        if queue is None:
            return f"namespace {ns} has no LocalQueue {ko.cluster_queue_name(cl.cluster_name)}", ns, ""
        if pool.max_nodes < nodes:
            return f"maxNodes {pool.max_nodes} < {nodes} nodes needed", ns, queue
        if hub is not None:
            if hub.worker_key(cl.cluster_name) is None:
                return f"not a worker of hub {hub.stack}", ns, queue
            if Queue(ns, queue) not in hub.local_queues:
                return f"hub {hub.stack} has no LocalQueue {queue} in {ns}", ns, queue
        return None, ns, queue

    existing: list[Existing | None] = [None] * len(ranked)
    loose: dict[tuple[str, str], int] = {}  # (stack, pool) -> index of its dearest zone-name candidate
    for i, c in enumerate(ranked):
        o = c.offer
        for cl, pool in index.get((o.cloud, o.region, o.instance_type, c.capacity), []):
            exact = pool.zone == o.zone
            approx = not exact and _zone_kind(o.cloud, pool.zone) != _zone_kind(o.cloud, o.zone)
            if not (exact or approx):
                continue
            why, ns, queue = blocker(cl, pool, c.nodes)
            if why is not None:
                continue
            if exact:
                existing[i] = Existing(cl, pool, ns, queue)
                break
            key = (cl.stack, pool.name)
            prev = loose.get(key)
            if prev is None or c.cost.total_usd > ranked[prev].cost.total_usd:
                loose[key] = i
    for (stack, pool_name), i in loose.items():
        if existing[i] is not None:
            continue
        cl = next(x for x in clusters if x.stack == stack)
        pool = next(p for p in cl.pools if p.name == pool_name)
        _, ns, queue = blocker(cl, pool, ranked[i].nodes)
        existing[i] = Existing(cl, pool, ns, queue, note=f"pool zone {pool.zone} is a zone ID, the catalog lists zone "
                               "names: priced at the region's dearest zone")

    matched = {(e.cluster.stack, e.pool.name) for e in existing if e is not None}
    excluded = plan.excluded
    from placement.shapes import shape_book

    book = shape_book()
    for cl in clusters:
        for pool in cl.pools:
            shape = book.get(pool.instance_type)
            if shape is None or shape.accelerator not in wanted or (cl.stack, pool.name) in matched:
                continue
            nodes = -(-job.gpus // shape.gpus)
            why, _, _ = blocker(cl, pool, nodes)
            if why is None:
                ex = next((c for c in excluded if c.offer.instance_type == pool.instance_type
                           and c.offer.region == cl.region and c.offer.zone == pool.zone
                           and c.capacity == pool.capacity), None)
                why = f"not runnable: {ex.excluded}" if ex is not None else f"no {pool.capacity} catalog offer in " \
                      f"{pool.zone}"
            reasons.append(f"{cl.stack}/{pool.name} ({pool.instance_type} {pool.capacity}): {why}")
    if not reasons and not matched:
        reasons.append(f"no stack has a {'/'.join(job.accelerators)} node pool")
    return Choice(ranked=ranked, existing=tuple(existing), reasons=tuple(reasons))


# ----------------------------------------------------------------------------- rendering


@dataclass(frozen=True)
class Target:
    """Where the job goes: the chosen candidate on an existing pool, in ``namespace`` behind ``queue``."""

    job: JobSpec
    candidate: Candidate
    existing: Existing
    via_hub: bool

    @property
    def shape(self) -> Shape:
        return self.candidate.offer.shape

    @property
    def nodes(self) -> int:
        return self.candidate.nodes

    @property
    def gpus_per_node(self) -> int:
        """GPUs each pod asks for: the whole node when the job spans nodes, else just what it needs."""
        return self.shape.gpus if self.nodes > 1 else min(self.shape.gpus, self.job.gpus)

    @property
    def kind(self) -> str:
        return "JobSet" if self.nodes > 1 else "Job"


def _quantity(n: int) -> str:
    # Quantities as strings: what the API server returns and what the typed Python client accepts.
    return str(n)


def gke_networks(target: Target) -> tuple[str, ...]:
    """The GKE ``Network`` names a pod of the pool attaches, from the stack's ``gpuNetworks`` output; for
    stacks without it, the names infra/gcp gives them (vpc1..N, or gvnic-1 and rdma-0..N-1)."""
    exported = target.existing.cluster.gpu_networks.get(target.existing.pool.name)
    if exported:
        return exported
    s = target.shape
    if s.fabric == "rdma":
        return (*(f"gvnic-{i}" for i in range(1, s.gpu_vpcs + 1)), *(f"rdma-{i}" for i in range(s.rdma_subnets)))
    return tuple(f"vpc{i}" for i in range(1, s.gpu_vpcs + 1))


def _device_list(gpus: int, extra: Sequence[str]) -> str:
    paths = [f"/dev/nvidia{i}" for i in range(gpus)] + ["/dev/nvidiactl", "/dev/nvidia-uvm", *extra]
    return "".join(f"- path: {p}\n" for p in paths)


def _gpudirect(target: Target) -> dict[str, Any]:
    """Pod additions for a GKE GPUDirect shape: annotations, sidecars, volumes, trainer env and mounts."""
    s = target.shape
    nets = gke_networks(target)
    interfaces = [{"interfaceName": "eth0", "network": "default"}]
    interfaces += [{"interfaceName": f"eth{i}", "network": n} for i, n in enumerate(nets, start=1)]
    out: dict[str, Any] = {
        "annotations": {"networking.gke.io/default-interface": "eth0",
                        "networking.gke.io/interfaces": json.dumps(interfaces)},
        "sidecars": [], "volumes": [], "env": [{"name": "LD_LIBRARY_PATH", "value": NVIDIA_LIB}], "mounts": [],
    }
    host = {"sys": "/sys", "proc-sys": "/proc/sys"}
    daemon_mounts = [{"name": "nvidia-lib", "mountPath": NVIDIA_LIB}, {"name": "sys", "mountPath": "/hostsysfs"},
                     {"name": "proc-sys", "mountPath": "/hostprocsysfs"}]
    if s.fabric == "tcpxo":
        out["annotations"]["devices.gke.io/container.tcpxo-daemon"] = _device_list(
            s.gpus, ["/dev/dmabuf_import_helper"])
        out["sidecars"].append({
            "name": "tcpxo-daemon", "image": TCPXO_RXDM_IMAGE, "restartPolicy": "Always",
            "command": ["/bin/sh", "-c"],
            "args": ["set -ex\nchmod 755 /fts/entrypoint_rxdm_container.sh\n/fts/entrypoint_rxdm_container.sh "
                     f"--num_hops=2 --num_nics={len(nets)} --uid= --alsologtostderr"],
            "securityContext": {"capabilities": {"add": ["NET_ADMIN", "NET_BIND_SERVICE"]}},
            "volumeMounts": daemon_mounts, "env": [{"name": "LD_LIBRARY_PATH", "value": NVIDIA_LIB}]})
        host["aperture-devices"] = "/dev/aperture_devices"
        out["env"].append({"name": "NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY", "value": "/dev/aperture_devices"})
        out["mounts"] += [{"name": "nvidia-lib", "mountPath": NVIDIA_LIB},
                          {"name": "aperture-devices", "mountPath": "/dev/aperture_devices"}]
        out["volumes"].append({"name": "nvidia-lib", "hostPath": {"path": NVIDIA_LIB_HOST}})
    elif s.fabric == "tcpx":
        out["annotations"]["devices.gke.io/container.tcpx-daemon"] = _device_list(s.gpus, [])
        out["sidecars"].append({
            "name": "tcpx-daemon", "image": TCPX_RXDM_IMAGE, "restartPolicy": "Always",
            "command": ["/tcpgpudmarxd/build/app/tcpgpudmarxd", "--gpu_nic_preset", "a3vm", "--gpu_shmem_type", "fd",
                        "--uds_path", "/run/tcpx", "--setup_param", "--verbose 128 2 0 "],
            "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}},
            "volumeMounts": [*daemon_mounts, {"name": "tcpx-socket", "mountPath": "/run/tcpx"}],
            "env": [{"name": "LD_LIBRARY_PATH", "value": NVIDIA_LIB}]})
        out["env"].append({"name": "NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX", "value": "/run/tcpx"})
        out["mounts"] += [{"name": "nvidia-lib", "mountPath": NVIDIA_LIB},
                          {"name": "tcpx-socket", "mountPath": "/run/tcpx"}]
        out["volumes"] += [{"name": "nvidia-lib", "hostPath": {"path": NVIDIA_LIB_HOST}},
                           {"name": "tcpx-socket", "emptyDir": {}}]
    else:  # rdma: the gIB NCCL plugin from nccl-rdma-installer, no RxDM daemon
        host = {}
        out["mounts"] += [{"name": "nvidia", "mountPath": "/usr/local/nvidia"},
                          {"name": "gib", "mountPath": "/usr/local/gib"}]
        out["volumes"] += [{"name": "nvidia", "hostPath": {"path": "/home/kubernetes/bin/nvidia"}},
                           {"name": "gib", "hostPath": {"path": "/home/kubernetes/bin/gib"}}]
    out["volumes"] += [{"name": name, "hostPath": {"path": path}} for name, path in host.items()]
    return out


def _gs_bucket(uri: str) -> tuple[str, str]:
    rest = uri.removeprefix("gs://")
    bucket, _, prefix = rest.partition("/")
    return bucket, prefix.strip("/")


def checkpoint_parts(target: Target) -> tuple[list[dict[str, Any]], dict[str, Any] | None, dict[str, str], list[str]]:
    """(extra objects, pod volume, pod annotations, warnings) for the checkpoint store of the cluster.

    AWS with FSx for Lustre: a static PersistentVolume (``fsx.csi.aws.com``) bound to the PVC
    ``gpufleet-checkpoints`` in the namespace, mounted at the DRA path so files land in the bucket.
    GCP: the bucket through the GCS FUSE CSI driver (inline volume, Workload Identity).
    AWS without FSx: nothing to mount; the job writes to ``CHECKPOINT_URI`` with its IRSA role.
    """
    cl = target.existing.cluster
    ns = target.existing.namespace
    fs = cl.filesystem or {}
    warnings: list[str] = []
    if cl.cloud == "aws" and fs.get("kind") == "fsx":
        missing = [k for k in ("id", "dnsName", "mountName") if not fs.get(k)]
        if missing:
            raise InputError(f"{cl.stack}.checkpointFilesystem.{missing[0]}", "is required for an FSx mount")
        pv_name = f"{cl.cluster_name}-ckpt-{ns}"[:253]
        storage = f"{_whole(fs.get('capacityGb', 1200), f'{cl.stack}.checkpointFilesystem.capacityGb', '')}Gi"
        pv = {"apiVersion": "v1", "kind": "PersistentVolume",
              "metadata": {"name": pv_name, "labels": dict(MANAGED_BY)},
              "spec": {"capacity": {"storage": storage}, "volumeMode": "Filesystem",
                       "accessModes": ["ReadWriteMany"], "persistentVolumeReclaimPolicy": "Retain",
                       "storageClassName": "", "mountOptions": ["flock"],
                       "claimRef": {"namespace": ns, "name": CHECKPOINT_PVC},
                       "csi": {"driver": FSX_CSI_DRIVER, "volumeHandle": str(fs["id"]),
                               "volumeAttributes": {"dnsname": str(fs["dnsName"]),
                                                    "mountname": str(fs["mountName"])}}}}
        pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
               "metadata": {"name": CHECKPOINT_PVC, "namespace": ns, "labels": dict(MANAGED_BY)},
               "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": pv_name,
                        "resources": {"requests": {"storage": storage}}}}
        volume = {"name": CHECKPOINT_VOLUME, "persistentVolumeClaim": {"claimName": CHECKPOINT_PVC},
                  "subPath": str(fs.get("path") or "").strip("/")}
        return [pv, pvc], volume, {}, warnings
    if cl.cloud == "gcp" and cl.checkpoint_uri and cl.checkpoint_uri.startswith("gs://"):
        bucket, prefix = _gs_bucket(cl.checkpoint_uri)
        options = "implicit-dirs" + (f",only-dir={prefix}" if prefix else "")
        volume = {"name": CHECKPOINT_VOLUME, "csi": {"driver": GCSFUSE_CSI_DRIVER,
                                                     "volumeAttributes": {"bucketName": bucket,
                                                                          "mountOptions": options}}}
        if fs.get("kind") in ("lustre", "filestore"):
            warnings.append(f"{cl.stack} has a {fs['kind']} checkpoint tier; submit mounts the bucket only")
        return [], volume, {"gke-gcsfuse/volumes": "true"}, warnings
    if not cl.checkpoint_uri:
        warnings.append(f"{cl.stack} exports no checkpointUri: the job gets no checkpoint location")
    return [], None, {}, warnings


def _resources(target: Target) -> dict[str, Any]:
    shape, per_node = target.shape, target.gpus_per_node
    alloc = ko.allocatable(shape)
    share = per_node / shape.gpus * REQUEST_FRACTION
    requests = {"cpu": f"{math.floor(alloc.cpu_millis * share)}m",
                "memory": f"{math.floor(alloc.memory_mib * share)}Mi", ko.RES_GPU: _quantity(per_node)}
    limits = {ko.RES_GPU: _quantity(per_node)}
    if target.candidate.offer.cloud == "aws" and shape.fabric == "efa" and target.nodes > 1:
        requests[ko.RES_EFA] = limits[ko.RES_EFA] = _quantity(shape.fabric_nics)
    return {"requests": requests, "limits": limits}


def _env(target: Target, name: str, mounted: bool) -> list[dict[str, Any]]:
    job, cl = target.job, target.existing.cluster
    env: list[dict[str, Any]] = [{"name": "GPUFLEET_JOB", "value": job.name}]
    if cl.checkpoint_uri:
        env.append({"name": "CHECKPOINT_URI", "value": cl.checkpoint_uri})
    if mounted:
        env.append({"name": "CHECKPOINT_DIR", "value": CHECKPOINT_DIR})
    # torchrun-style rendezvous: rank 0's stable DNS name through the JobSet's headless service.
    master = f"{name}-{REPLICATED_JOB}-0-0.{name}" if target.nodes > 1 else "127.0.0.1"
    rank: dict[str, Any] = ({"valueFrom": {"fieldRef": {
        "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}}
        if target.nodes > 1 else {"value": "0"})
    env += [{"name": "MASTER_ADDR", "value": master}, {"name": "MASTER_PORT", "value": str(MASTER_PORT)},
            {"name": "NNODES", "value": str(target.nodes)}, {"name": "NODE_RANK", **rank},
            {"name": "NPROC_PER_NODE", "value": str(target.gpus_per_node)}]
    if cl.cloud == "aws" and target.shape.fabric == "efa" and target.nodes > 1:
        env += [{"name": "FI_PROVIDER", "value": "efa"}, {"name": "FI_EFA_USE_DEVICE_RDMA", "value": "1"}]
    return env


def render(target: Target) -> tuple[list[dict[str, Any]], list[str]]:
    """The objects to create (PV/PVC first when needed, the Job or JobSet last) and warnings."""
    job, ex = target.job, target.existing
    cl, name, ns = ex.cluster, job.name, ex.namespace
    if target.nodes > 1 and len(f"{name}-{REPLICATED_JOB}-0-{target.nodes - 1}") > 63:
        raise InputError("name", f"at most {63 - len(f'-{REPLICATED_JOB}-0-{target.nodes - 1}')} characters for a "
                         f"{target.nodes}-node job (pod host names are <name>-{REPLICATED_JOB}-0-<rank>)")
    extra, volume, annotations, warnings = checkpoint_parts(target)
    container: dict[str, Any] = {"name": CONTAINER, "image": job.image}
    if job.command:
        container["command"] = list(job.command)
    env = _env(target, name, volume is not None)
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    sidecars: list[dict[str, Any]] = []
    if volume is not None:
        sub = volume.pop("subPath", "")
        mounts.append({"name": CHECKPOINT_VOLUME, "mountPath": CHECKPOINT_DIR, **({"subPath": sub} if sub else {})})
        volumes.append(volume)
    pod_annotations = dict(annotations)
    if cl.cloud == "gcp" and target.shape.fabric in ("tcpx", "tcpxo", "rdma") and target.nodes > 1:
        gd = _gpudirect(target)
        pod_annotations.update(gd["annotations"])
        env += gd["env"]
        mounts += gd["mounts"]
        volumes += gd["volumes"]
        sidecars += gd["sidecars"]
    if target.nodes > 1 and not target.via_hub and ko.tas_enabled(ex.pool.min_nodes, ex.pool.max_nodes,
                                                                  target.shape):
        # Only then does the worker's flavor name the cloud's Topology (a TAS annotation is never admitted on
        # a flavor without one): ask Kueue to keep the pods in the narrowest network block it can. Pools that
        # scale carry no Topology, nor do the hub's flavors (README.md (Kueue on every cluster, the MultiKueue hub)).
        pod_annotations[PREFERRED_TOPOLOGY] = ko.TOPOLOGY_LEVELS[cl.cloud][0]
    container.update(env=env, resources=_resources(target), volumeMounts=mounts)
    pod_spec: dict[str, Any] = {"restartPolicy": "Never"}
    sa = cl.service_account
    if sa is None:
        warnings.append(f"{cl.stack} exports no trainingServiceAccount: the pods run as the default service "
                        "account of their namespace, without the checkpoint identity")
    else:
        pod_spec["serviceAccountName"] = sa.name
        if ns not in sa.namespaces:
            warnings.append(f"{cl.stack} has no training service account {sa.name} in {ns} (only in "
                            f"{', '.join(sa.namespaces) or 'no namespace'}): the pods will not start until "
                            f"ServiceAccount {ns}/{sa.name} exists; `pulumi up` the stack, which creates it in "
                            "every team namespace bound to the checkpoint identity")
    pod_spec["nodeSelector"] = {ko.POOL_LABEL: ex.pool.name}
    pod_spec["tolerations"] = [dict(ko.GPU_TOLERATION)]
    if sidecars:
        pod_spec["initContainers"] = sidecars
    pod_spec["containers"] = [container]
    pod_spec["volumes"] = volumes
    pod_meta: dict[str, Any] = {"labels": {JOB_LABEL: name}}
    if pod_annotations:
        pod_meta["annotations"] = pod_annotations
    o = target.candidate.offer
    meta = {"name": name, "namespace": ns,
            "labels": {QUEUE_LABEL: ex.queue, PRIORITY_LABEL: job.priority, JOB_LABEL: name, **MANAGED_BY},
            "annotations": {"gpufleet.io/placement": f"{o.cloud}/{o.zone}/{o.instance_type}/"
                                                     f"{target.candidate.capacity}",
                            "gpufleet.io/stack": cl.stack, "gpufleet.io/pool": ex.pool.name}}
    pod = {"metadata": pod_meta, "spec": pod_spec}
    obj: dict[str, Any]
    if target.nodes == 1:
        obj = {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
               "spec": {"suspend": True, "parallelism": 1, "completions": 1, "backoffLimit": JOB_BACKOFF_LIMIT,
                        "template": pod}}
    else:
        obj = {"apiVersion": JOBSET_API, "kind": "JobSet", "metadata": meta,
               "spec": {"suspend": True, "network": {"enableDNSHostnames": True},
                        "failurePolicy": {"maxRestarts": JOBSET_MAX_RESTARTS},
                        "replicatedJobs": [{"name": REPLICATED_JOB, "replicas": 1, "template": {"spec": {
                            "parallelism": target.nodes, "completions": target.nodes, "completionMode": "Indexed",
                            "backoffLimit": 0, "template": pod}}}]}}
    if job.gpus % target.shape.gpus and target.nodes > 1:
        warnings.append(f"{job.gpus} GPUs round up to {target.nodes} whole nodes of {target.shape.gpus}")
    return [*extra, obj], warnings


# ----------------------------------------------------------------------------- applying


@dataclass(frozen=True)
class Submitted:
    kind: str
    namespace: str
    name: str
    uid: str
    workload: str | None  # the hub Workload nominated (External dispatcher), if any
    reused: tuple[str, ...]  # PV/PVC that already existed


def _kubeconfig_doc(value: Any, what: str) -> dict[str, Any]:
    import yaml

    if isinstance(value, str):
        if value == "[secret]":
            raise SubmitError(f"{what} is masked: export the outputs with --show-secrets", EXIT_BAD_INPUT)
        try:
            value = yaml.safe_load(value)
        except yaml.YAMLError:
            value = None
    if not isinstance(value, Mapping) or not value.get("clusters"):
        raise SubmitError(f"{what} is not a kubeconfig (YAML/JSON with clusters, users, contexts)", EXIT_BAD_INPUT)
    return dict(value)


def api_client(kubeconfig: Any = None, path: str | None = None, what: str = "kubeconfig") -> Any:
    """A Kubernetes ``ApiClient`` for a kubeconfig (stack output) or a kubeconfig file, without touching the
    process-wide default configuration."""
    from kubernetes import client, config

    conf = client.Configuration()
    try:
        if path:
            config.load_kube_config(config_file=path, client_configuration=conf)
        else:
            config.load_kube_config_from_dict(_kubeconfig_doc(kubeconfig, what), client_configuration=conf)
    except SubmitError:
        raise
    except Exception as exc:  # ConfigException, missing exec plugin, unreadable file: one line, not a traceback
        raise SubmitError(f"{path or what}: cannot load the kubeconfig: {str(exc).splitlines()[0]}",
                          EXIT_BAD_INPUT) from None
    return client.ApiClient(conf)


def _api_message(exc: Any) -> str:
    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        body = {}
    message = body.get("message") if isinstance(body, dict) else None
    return str(message or exc.reason or "error").splitlines()[0]


def _create(api: Any, doc: Mapping[str, Any]) -> dict[str, Any]:
    from kubernetes import client

    kind, ns = doc["kind"], doc["metadata"].get("namespace")
    body = dict(doc)

    def model(cls: Any) -> Any:
        # The typed client takes models; quantities are strings in render(), so the round trip is exact.
        return cls.from_dict(body)

    resp: Any
    if kind == "JobSet":
        resp = client.CustomObjectsApi(api).create_namespaced_custom_object(
            JOBSET_GROUP, JOBSET_VERSION, ns, JOBSET_PLURAL, body, _request_timeout=API_TIMEOUT_S)
    elif kind == "Job":
        resp = client.BatchV1Api(api).create_namespaced_job(ns, model(client.V1Job),
                                                             _request_timeout=API_TIMEOUT_S)
    elif kind == "PersistentVolume":
        resp = client.CoreV1Api(api).create_persistent_volume(model(client.V1PersistentVolume),
                                                              _request_timeout=API_TIMEOUT_S)
    elif kind == "PersistentVolumeClaim":
        resp = client.CoreV1Api(api).create_namespaced_persistent_volume_claim(
            ns, model(client.V1PersistentVolumeClaim), _request_timeout=API_TIMEOUT_S)
    else:  # pragma: no cover - render() produces only the kinds above
        raise ValueError(kind)
    return dict(api.sanitize_for_serialization(resp))


def _nominate(api: Any, namespace: str, uid: str, cluster_key: str) -> str | None:
    """External dispatcher: write the chosen worker into the hub Workload's ``status.nominatedClusterNames``."""
    from kubernetes import client

    custom = client.CustomObjectsApi(api)
    deadline = time.monotonic() + NOMINATE_TIMEOUT_S
    while True:
        found: Any = custom.list_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, namespace, "workloads",
                                                     label_selector=f"{JOB_UID_LABEL}={uid}",
                                                     _request_timeout=API_TIMEOUT_S)
        items = found.get("items") or []
        if items:
            name = str(items[0]["metadata"]["name"])
            custom.patch_namespaced_custom_object_status(
                KUEUE_GROUP, KUEUE_VERSION, namespace, "workloads", name,
                {"status": {"nominatedClusterNames": [cluster_key]}}, _request_timeout=API_TIMEOUT_S)
            return name
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.5)


def apply(docs: Sequence[Mapping[str, Any]], job_api: Any, storage_api: Any,
          nominate: str | None = None) -> Submitted:
    """Create ``docs`` in order: PV/PVC with ``storage_api`` (the worker; existing ones are reused), the
    Job/JobSet with ``job_api`` (the worker, or the hub). API errors become :class:`SubmitError`."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    reused: list[str] = []
    main = docs[-1]
    for doc in docs:
        is_job = doc is main
        try:
            created = _create(job_api if is_job else storage_api, doc)
        except ApiException as exc:
            if exc.status == 409 and not is_job:
                reused.append(f"{doc['kind']} {doc['metadata']['name']}")
                continue
            code = EXIT_BAD_INPUT if exc.status in (400, 409, 422) else EXIT_NOTHING_FEASIBLE
            raise SubmitError(f"creating {doc['kind']} {doc['metadata'].get('namespace', '-')}/"
                              f"{doc['metadata']['name']}: HTTP {exc.status}: {_api_message(exc)}", code) from None
        except (HTTPError, OSError) as exc:
            raise SubmitError(f"creating {doc['kind']} {doc['metadata']['name']}: cannot reach the API server "
                              f"({exc.__class__.__name__})") from None
        if is_job:
            meta = created.get("metadata") or {}
            uid = str(meta.get("uid") or "")
            workload = None
            if nominate and uid:
                try:
                    workload = _nominate(job_api, main["metadata"]["namespace"], uid, nominate)
                except (ApiException, HTTPError, OSError) as exc:
                    raise SubmitError(f"created {main['kind']} {main['metadata']['name']} but could not nominate "
                                      f"worker {nominate}: {getattr(exc, 'status', '')} "
                                      f"{_api_message(exc) if isinstance(exc, ApiException) else exc}") from None
                if workload is None:
                    raise SubmitError(f"created {main['kind']} {main['metadata']['name']} but Kueue made no Workload "
                                      f"within {NOMINATE_TIMEOUT_S:g} s to nominate {nominate} on; nominate it "
                                      f"with: {nominate_hint(main, uid, nominate)}")
            return Submitted(kind=str(main["kind"]), namespace=str(main["metadata"]["namespace"]),
                             name=str(main["metadata"]["name"]), uid=uid, workload=workload, reused=tuple(reused))
    raise AssertionError("unreachable: the last document is the job")


def nominate_hint(main: Mapping[str, Any], uid: str, key: str) -> str:
    ns = main["metadata"]["namespace"]
    return (f"kubectl -n {ns} patch workload $(kubectl -n {ns} get workloads -l {JOB_UID_LABEL}={uid} -o name "
            f"| cut -d/ -f2) --subresource=status --type=merge -p "
            f"'{{\"status\":{{\"nominatedClusterNames\":[\"{key}\"]}}}}'")


# ----------------------------------------------------------------------------- output


def manifest_yaml(docs: Sequence[Mapping[str, Any]]) -> str:
    """The objects as one multi-document YAML stream (``kubectl apply -f -`` takes it as is); multi-line
    strings (device lists, scripts) as literal blocks."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    return yaml.dump_all([dict(d) for d in docs], Dumper=Dumper, sort_keys=False)


def _usd(x: float) -> str:
    return "-" if math.isinf(x) else f"{x:,.2f}"


def shown(choice: Choice) -> list[int]:
    """Indexes of the rows to show: every existing-cluster candidate plus the best few needing a new stack."""
    new = [i for i, e in enumerate(choice.existing) if e is None][:NEW_STACK_ROWS]
    return sorted({i for i, e in enumerate(choice.existing) if e is not None} | set(new))


def text_table(job: JobSpec, choice: Choice, catalog: Catalog) -> str:
    chosen = choice.chosen_index
    rows = []
    for i in shown(choice):
        c, e = choice.ranked[i], choice.existing[i]
        o = c.offer
        where = f"{e.cluster.stack}/{e.pool.name}" if e else "needs a new stack"
        notes = ", ".join([*c.notes, *([e.note] if e and e.note else [])])
        rows.append([("*" if i == chosen else "") + str(i + 1), o.cloud, o.region, o.zone,
                     f"{o.instance_type} x{c.nodes}", c.capacity, _usd(c.usd_per_hour), _usd(c.cost.total_usd),
                     where, notes])
    head = (f"job {job.name}: {job.gpus} x {'/'.join(job.accelerators)}, {job.hours:g} h, capacity {job.capacity} "
            f"(catalog {catalog.source}, as of {catalog.as_of})")
    body = table(("#", "cloud", "region", "zone", "instance x nodes", "capacity", "$/h", "total $", "cluster",
                  "notes"), rows, right={0, 6, 7}) if rows else "(no runnable candidate)"
    return head + "\n" + body


def why(choice: Choice) -> str:
    i = choice.chosen_index
    if i is None:
        return "no existing cluster can run this job: " + "; ".join(choice.reasons)
    c, e = choice.ranked[i], choice.existing[i]
    assert e is not None
    text = (f"cheapest existing cluster: {e.cluster.stack} pool {e.pool.name} ({c.offer.zone} {c.offer.instance_type}"
            f" x{c.nodes} {c.capacity}), total ${c.cost.total_usd:,.2f}")
    best = choice.ranked[0]
    if i > 0 and best.cost.total_usd < c.cost.total_usd:
        text += (f"; a new stack in {best.offer.cloud} {best.offer.zone} ({best.offer.instance_type} {best.capacity}) "
                 f"would cost ${c.cost.total_usd - best.cost.total_usd:,.2f} less")
    return text


def submit_doc(job: JobSpec, choice: Choice, catalog: Catalog, *, via_hub: bool, dry_run: bool,
               target: Target | None, manifest: Sequence[Mapping[str, Any]] | None, warnings: Sequence[str],
               submitted: Submitted | None) -> dict[str, Any]:
    """The ``gpufleet.placement/v1`` document of kind ``submit``."""
    def cand(i: int) -> dict[str, Any]:
        e = choice.existing[i]
        d = candidate_doc(choice.ranked[i], i + 1)
        if e is not None and e.note:
            d["notes"].append(e.note)
        d["existing_cluster"] = {"stack": e.cluster.stack, "pool": e.pool.name} if e else None
        return d

    chosen = None
    if target is not None and choice.chosen_index is not None:
        e = target.existing
        chosen = {**cand(choice.chosen_index), "stack": e.cluster.stack, "pool": e.pool.name, "queue": e.queue,
                  "namespace": e.namespace, "cluster": e.cluster.cluster_name, "kind": target.kind,
                  "via_hub": via_hub}
    doc: dict[str, Any] = {
        "schema": SCHEMA, "kind": "submit", "job": job.name, "catalog": catalog_info(catalog),
        "dry_run": dry_run, "chosen": chosen, "why": why(choice),
        "candidates": [cand(i) for i in shown(choice)], "warnings": list(warnings),
    }
    if manifest is not None:
        doc["manifest"] = list(manifest)
    if submitted is not None:
        doc["submitted"] = {"kind": submitted.kind, "namespace": submitted.namespace, "name": submitted.name,
                            "uid": submitted.uid, "workload_selector": f"{JOB_UID_LABEL}={submitted.uid}",
                            "nominated_workload": submitted.workload, "reused": list(submitted.reused)}
    return doc


# ----------------------------------------------------------------------------- command


def load_stacks(args: argparse.Namespace) -> Stacks:
    from placement.inputs import UsageError, load_yaml

    if not args.stacks and not args.stack:
        raise UsageError("submit: pass --stacks FILE (exported outputs) or --stack NAME (repeatable)")
    clusters: list[ClusterStack] = []
    hubs: list[HubStack] = []
    if args.stacks:
        s = parse_stacks(load_yaml(args.stacks, "--stacks"), args.stacks)
        clusters += s.clusters
        hubs += s.hubs
    for name in args.stack:
        s = parse_stacks({name: pulumi_outputs(name)}, f"pulumi stack {name}")
        clusters += s.clusters
        hubs += s.hubs
    names = [c.stack for c in clusters] + [h.stack for h in hubs]
    dup = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if dup:
        raise UsageError(f"--stack: stack {dup!r} given twice")
    return Stacks(clusters=tuple(clusters), hubs=tuple(hubs))


def _pick_hub(stacks: Stacks) -> HubStack | None:
    from placement.inputs import UsageError

    if len(stacks.hubs) > 1:
        raise UsageError("--via-hub: more than one hub stack given (" + ", ".join(h.stack for h in stacks.hubs)
                         + "); pass one")
    return stacks.hubs[0] if stacks.hubs else None


def run_submit(args: argparse.Namespace) -> int:
    """``placement submit``: exit 0 placed (or printed), 1 no existing cluster / cluster error, 2 bad input."""
    try:
        return _run(args)
    except SubmitError as exc:
        print(f"placement: error: {exc}", file=sys.stderr)
        return exc.code


def _run(args: argparse.Namespace) -> int:
    from placement.engine import plan
    from placement.inputs import UsageError, load_catalog, load_quotas, load_yaml
    from placement.jobspec import parse_job

    job = parse_job(load_yaml(args.job, "job spec"))
    stacks = load_stacks(args)
    if not stacks.clusters:
        raise UsageError("--stacks: no worker cluster stack given (only hub stacks)")
    hub = _pick_hub(stacks) if args.via_hub else None
    catalog = load_catalog(args.catalog)
    result = plan(job, catalog.offers, load_quotas(args.quotas))
    choice = match_existing(result, stacks.clusters, job, hub)
    i = choice.chosen_index
    target = None
    manifest: list[dict[str, Any]] | None = None
    warnings: list[str] = []
    if i is not None:
        existing = choice.existing[i]
        assert existing is not None
        target = Target(job=job, candidate=choice.ranked[i], existing=existing, via_hub=args.via_hub)
        manifest, warnings = render(target)
        if args.via_hub and hub is None:
            warnings.append(f"--via-hub without a hub stack: assuming the hub has LocalQueue {existing.queue} in "
                            f"{existing.namespace}")
    table_text = text_table(job, choice, catalog)
    summary = []
    if target is not None:
        e = target.existing
        route = f"hub queue {e.queue} -> worker {e.cluster.cluster_name}" if args.via_hub else f"queue {e.queue}"
        summary.append(f"chosen: {e.cluster.stack} pool {e.pool.name}, {target.kind} {e.namespace}/{job.name}, {route}")
    summary += [f"warning: {w}" for w in warnings]
    summary.append("why: " + why(choice))

    if target is None or manifest is None:
        if args.json:
            print(json.dumps(submit_doc(job, choice, catalog, via_hub=args.via_hub, dry_run=args.dry_run,
                                        target=None, manifest=None, warnings=warnings, submitted=None), indent=2))
        else:
            print(table_text, file=sys.stderr if args.dry_run else sys.stdout)
        print(f"placement: no existing cluster can run {job.name}: " + "; ".join(choice.reasons), file=sys.stderr)
        return EXIT_NOTHING_FEASIBLE

    if args.dry_run:
        if args.json:
            print(json.dumps(submit_doc(job, choice, catalog, via_hub=args.via_hub, dry_run=True, target=target,
                                        manifest=manifest, warnings=warnings, submitted=None), indent=2))
        else:
            print(table_text + "\n" + "\n".join(summary), file=sys.stderr)
            sys.stdout.write(manifest_yaml(manifest))
        return EXIT_OK

    if not args.json:
        print(table_text + "\n" + "\n".join(summary))
        sys.stdout.flush()
    submitted = _submit(args, target, manifest, hub)
    if args.json:
        print(json.dumps(submit_doc(job, choice, catalog, via_hub=args.via_hub, dry_run=False, target=target,
                                    manifest=manifest, warnings=warnings, submitted=submitted), indent=2))
    else:
        e = target.existing
        print(f"submitted {submitted.kind} {submitted.namespace}/{submitted.name} to "
              f"{'the hub' if args.via_hub else e.cluster.cluster_name} (queue {e.queue})")
        for r in submitted.reused:
            print(f"reused existing {r}")
        if submitted.workload:
            print(f"nominated worker {hub.worker_key(e.cluster.cluster_name) if hub else ''} on Workload "
                  f"{submitted.workload}")
        print(f"watch: kubectl -n {submitted.namespace} get workloads -l {JOB_UID_LABEL}={submitted.uid}")
        print(f"       kubectl -n {submitted.namespace} get {submitted.kind.lower()} {submitted.name}")
    return EXIT_OK


def _submit(args: argparse.Namespace, target: Target, manifest: Sequence[Mapping[str, Any]],
            hub: HubStack | None) -> Submitted:
    cl = target.existing.cluster
    storage = manifest[:-1]
    if args.via_hub:
        if not args.kubeconfig and (hub is None or hub.kubeconfig is None):
            raise SubmitError("--via-hub: pass --kubeconfig with the hub cluster's kubeconfig (the hub stack "
                              "exports none)", EXIT_BAD_INPUT)
        job_api = api_client(hub.kubeconfig if hub and not args.kubeconfig else None, args.kubeconfig,
                             f"{hub.stack if hub else 'hub'}.kubeconfig")
        # PV/PVC live on the worker, where MultiKueue creates the pods; the hub only holds the job.
        storage_api = api_client(cl.kubeconfig, None, f"{cl.stack}.kubeconfig") if storage else job_api
        key = hub.worker_key(cl.cluster_name) if hub and hub.dispatcher == "External" else None
    else:
        if not args.kubeconfig and cl.kubeconfig is None:
            raise SubmitError(f"{cl.stack} exports no kubeconfig: pass --kubeconfig PATH", EXIT_BAD_INPUT)
        job_api = storage_api = api_client(cl.kubeconfig, args.kubeconfig, f"{cl.stack}.kubeconfig")
        key = None
    return apply(manifest, job_api, storage_api, nominate=key)
