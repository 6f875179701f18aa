"""The objects ``placement submit`` creates, as plain dicts. Pure: a target in, manifests out.

One node: a ``batch/v1`` Job; several nodes: a ``jobset.x-k8s.io/v1alpha2`` JobSet (one Indexed Job,
one pod per node). Both are created suspended for Kueue. :func:`render` targets one existing pool of one
cluster (pinned by node selector); :func:`render_portable` targets the group of workers a job sent through
the MultiKueue hub may land on (``placement submit --via-hub``): no pool node selector, a required node
affinity on the group's pool names, instance types and fabric, requests that fit the smallest node of the
group, the group's fabric settings, and the job spec and the group recorded as annotations for ``placement dispatch``.

The Kueue naming scheme and per-node resources come from :mod:`placement.model.kueue`. The annotations and
environment a job carries for the dispatcher, ``placement report`` and the trainer (names, forms, what "unknown"
looks like) are :mod:`placement.model.contract`'s, which every reader uses too.

How the job runs to its end (:class:`Lifecycle`, docs/trainer-contract.md): node disruptions and lost peers
restart it within a budget sized from the plan's expected interruptions (:func:`restart_budget`), any
other trainer failure fails it at once; the trainer learns its dataset, checkpoint directory, interval and
deadline from ``GPUFLEET_*`` variables (:func:`job_env`) and has ``terminationGracePeriodSeconds`` within the
cloud's reclaim notice to checkpoint; a deadline becomes Kueue's maximum execution time.

Why one module: a Job or JobSet is one object: its pods' environment, checkpoint storage, fabric devices and failure
policy are built by the helpers here for the same manifest, and :func:`render` and :func:`render_portable` share all
of them.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from placement.errors import InputError
from placement.fleet import durable
from placement.fleet.choose import Existing, Group, gke_networks
from placement.fleet.stacks import ClusterStack, whole
from placement.model import checkpoint_volumes as cv
from placement.model import contract
from placement.model import kueue as ko
from placement.model.jobspec import JobSpec
from placement.model.k8snames import job_name_problem, jobset_name_problem
from placement.model.shapes import Shape
from placement.plan.job import Candidate

JOBSET_GROUP, JOBSET_VERSION, JOBSET_PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"
JOBSET_API = f"{JOBSET_GROUP}/{JOBSET_VERSION}"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
JOB_LABEL = contract.JOB_LABEL
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpufleet"}

# What submit records on the job for `placement dispatch` and `placement report` (they read them from the
# Workload's owner): placement.model.contract's names.
JOB_SPEC_ANNOTATION = contract.JOB_SPEC  # the job's YAML mapping, as JSON (every job)
GROUP_ANNOTATION = contract.FABRIC_GROUP  # efa | tcpx | tcpxo | rdma | single-node (--via-hub)
WORKERS_ANNOTATION = contract.WORKERS  # comma-separated MultiKueueCluster names of the group (--via-hub)
CLUSTER_ANNOTATION = contract.CLUSTER  # on storage objects: the worker they are created on

CONTAINER = "trainer"
REPLICATED_JOB = "node"  # JobSet pods are <jobset>-node-0-<rank>; rank 0 is the rendezvous host
MASTER_PORT = 29500
CHECKPOINT_DIR = "/checkpoints"
CHECKPOINT_VOLUME = "checkpoints"
CHECKPOINT_PVC = cv.CLAIM_NAME  # what the stack's checkpointFilesystem.claimName names in every team namespace
CHECKPOINT_CONFIGMAP = "gpufleet-checkpoint"
FSX_CSI_DRIVER = cv.FSX_CSI_DRIVER
GCSFUSE_CSI_DRIVER = "gcsfuse.csi.storage.gke.io"
GCSFUSE_ANNOTATION = "gke-gcsfuse/volumes"
GCS_PV_SIZE = "5Ti"  # a bucket has no size; a PV must state one
# Share of a node's allocatable CPU/memory (pro rata to the GPUs taken) the trainer requests. The rest
# stays for the sidecars admission webhooks inject (GCS FUSE) and the GPUDirect RxDM daemon.
REQUEST_FRACTION = 0.9
MAX_EXEC_TIME_LABEL = "kueue.x-k8s.io/max-exec-time-seconds"  # Kueue: the Workload's maximumExecutionTimeSeconds

# ---- restarts sized from the plan (see restart_budget and docs/trainer-contract.md)
# Restarts every job gets at least: an on-demand gang still meets hardware faults and node failures.
MIN_RESTARTS = 3
# The budget covers the run's disruptions with this probability, interruptions being a Poisson process at
# the plan's rate (the engine's model): P(more disruptions than the budget) <= 1 - RESTART_COVERAGE.
RESTART_COVERAGE = 0.99
# The trainer's "a peer is gone, restart the gang" exit code (EX_TEMPFAIL of sysexits.h). Any other non-zero
# exit of the trainer is an application failure and fails the job at once.
RETRY_EXIT_CODE = contract.RETRY_EXIT_CODE
DISRUPTION_CONDITION = "DisruptionTarget"  # set by eviction, preemption, node shutdown, taint eviction, pod GC
JOBSET_RESTART_RULE = "NodeDisruptionOrLostPeer"  # JobSet rule names: ^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$
JOBSET_FAIL_RULE = "ApplicationFailure"

# ---- reclaim notices: AWS Spot 2 minutes (EC2 User Guide, "Spot Instance interruption notices"), GCP Spot
# 30 seconds (Compute Engine "Spot VMs", preemption process)
RECLAIM_NOTICE_SECONDS = {"aws": 120, "gcp": 30}
# What the trainer gets between SIGTERM and SIGKILL (terminationGracePeriodSeconds). GKE: graceful node
# shutdown on a Spot reclaim splits the 30 s into 15 s for ordinary pods, then 15 s for system-critical ones
# (GKE "Spot VMs" concepts page), so a longer grace is cut to 15 s anyway. AWS: the 2-minute notice less
# 30 s for the notice to reach the node and the drain to start; the node is gone at 120 s.
GRACE_SECONDS = {"aws": 90, "gcp": 15}

# GKE GPUDirect: what Google's TCPX / TCPXO / RDMA manifests (GoogleCloudPlatform/container-engine-accelerators,
# gpudirect-*/nccl-test*.yaml) put in a training pod, keyed by the shape's fabric kind. The RxDM daemon runs
# as a native sidecar (an init container with restartPolicy Always) so the Job completes when training exits.
# Its image, NCCL_LIB_DIR and the NCCL env script come from placement/data/gpudirect.yaml, the table that also
# pins the installers the stack applies (placement.model.gpudirect).
NVIDIA_LIB_HOST = "/home/kubernetes/bin/nvidia/lib64"
NVIDIA_LIB = "/usr/local/nvidia/lib64"
# The trainer runs `<shell> -c <prelude> <CONTAINER> <command...>`: the prelude sources the fabric's NCCL env
# script, then execs the user's command with its arguments untouched. Google's scripts are bash.
NCCL_ENV_SHELL = "/bin/bash"


@dataclass(frozen=True)
class Target:
    """Where the job goes: the chosen candidate on an existing pool, in ``namespace`` behind ``queue``."""

    job: JobSpec
    candidate: Candidate
    existing: Existing
    via_hub: bool = False
    # The job spec's YAML mapping as the user wrote it: recorded on the job (gpufleet.io/job-spec) for
    # `placement report`; None: not recorded.
    job_doc: Mapping[str, Any] | None = None
    now: dt.datetime | None = None  # submission time (aware): fixes GPUFLEET_DEADLINE
    # Through the hub: the interruptions the restart budget is sized for (the most interruption-prone capacity
    # the job's affinity admits, placement.fleet.durable.hub_budget) and which pool that is; None: the candidate's.
    restart_expected: float | None = None
    restart_basis: str | None = None
    # What the pod writes checkpoints to (the candidate is priced for it); None: the job spec's destination.
    destination: durable.Destination | None = None

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


@dataclass(frozen=True)
class Storage:
    """Checkpoint storage of a pod: objects to create first, the volume and its sub-path, pod annotations,
    container env and envFrom entries, and warnings."""

    objects: tuple[dict[str, Any], ...] = ()
    volume: dict[str, Any] | None = None
    sub_path: str = ""
    annotations: Mapping[str, str] = field(default_factory=dict)
    env: tuple[dict[str, Any], ...] = ()
    env_from: tuple[dict[str, Any], ...] = ()
    warnings: tuple[str, ...] = ()
    # More volumes and their mounts (the credentials of a home in the other cloud: placement.fleet.federation).
    volumes: tuple[dict[str, Any], ...] = ()
    mounts: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class Lifecycle:
    """How the job is run to its end: the restart budget, what the trainer is told (docs/trainer-contract.md)
    and how it is stopped.

    ``restarts`` whole-gang restarts (JobSet ``maxRestarts``) or pod retries (Job ``backoffLimit``) the node
    disruptions and lost peers may use; ``checkpoint_interval_s`` the planned interval (seconds);
    ``deadline`` the RFC 3339 UTC time results are due (None: no deadline or no submission time);
    ``max_exec_seconds`` Kueue's limit on admitted time (the job's ``deadline_hours``, None: none);
    ``grace_s`` the pod's terminationGracePeriodSeconds, which fits every cloud it may run on.
    """

    restarts: int = MIN_RESTARTS
    checkpoint_interval_s: int = contract.DEFAULT_INTERVAL_SECONDS
    deadline: str | None = None
    max_exec_seconds: int | None = None
    grace_s: int = min(GRACE_SECONDS.values())


def planned_interruptions(candidate: Candidate) -> float:
    """Interruptions the plan expects over the whole run of ``candidate`` (the mean of a Poisson count): the
    engine's ``Candidate.expected_interruptions`` (spot reclaims and hardware faults of the whole gang, from
    the exact expected-time model; docs/cost-model.md). Infinite (the gang never finishes) is kept infinite."""
    planned = float(candidate.expected_interruptions)
    return planned if planned > 0 else 0.0


def restart_budget(expected: float, coverage: float = RESTART_COVERAGE) -> int:
    """Restarts to allow for a run expecting ``expected`` interruptions: the smallest ``n`` with
    P(N > n) <= 1 - ``coverage`` for N ~ Poisson(``expected``), and at least :data:`MIN_RESTARTS`.

    At 16 expected interruptions that is 26 (ceil(16 x 1.5 + 2) is the same); at 1, 4; at 0.1, 3.
    """
    lam = float(expected)
    if not lam > 0.0:  # also NaN
        return MIN_RESTARTS
    if lam > 1e4:  # normal approximation (an exact sum would take lam steps); inf is capped
        z = 2.3263478740408408  # the standard normal's 99th percentile
        return max(MIN_RESTARTS, math.ceil(min(lam, 1e9) + z * math.sqrt(min(lam, 1e9)) + 0.5))
    n, cdf = 0, 0.0
    log_lam = math.log(lam)
    while True:
        cdf += math.exp(-lam + n * log_lam - math.lgamma(n + 1))
        if cdf >= coverage or n > lam + 40 * math.sqrt(lam) + 100:
            return max(n, MIN_RESTARTS)
        n += 1


def planned_interval_seconds(job: JobSpec, candidate: Candidate) -> int:
    """The checkpoint interval the plan priced (seconds): the candidate's own (``Candidate.
    checkpoint_interval_minutes``, the optimum under ``auto``), else the job's ``checkpoint.interval_minutes``,
    else the contract's default (30 minutes)."""
    minutes: float | None = candidate.checkpoint_interval_minutes
    if not (minutes is not None and math.isfinite(minutes) and minutes > 0):
        minutes = job.checkpoint_interval_minutes
    if not (minutes is not None and math.isfinite(minutes) and minutes > 0):
        minutes = contract.DEFAULT_INTERVAL_SECONDS / 60
    return max(1, round(float(minutes) * 60))


def lifecycle(job: JobSpec, candidate: Candidate, clouds: Sequence[str], now: dt.datetime | None = None,
              expected: float | None = None) -> Lifecycle:
    """The :class:`Lifecycle` of ``job`` run as ``candidate`` on any of ``clouds``; ``now`` (aware) the time of
    submission, which fixes the deadline; ``expected`` the interruptions to size restarts for (None: the
    candidate's own; through the hub, the most interruption-prone capacity its affinity admits)."""
    deadline = None
    max_exec = None
    if job.deadline_hours is not None:
        # Kueue counts admitted time, never more than the time since submission: past it the deadline is missed.
        max_exec = max(1, math.ceil(job.deadline_hours * 3600))
        if now is not None:
            deadline = contract.deadline_text(now + dt.timedelta(hours=job.deadline_hours))
    grace = min((GRACE_SECONDS[c] for c in clouds if c in GRACE_SECONDS), default=min(GRACE_SECONDS.values()))
    planned = planned_interruptions(candidate) if expected is None else max(0.0, float(expected))
    return Lifecycle(restarts=restart_budget(planned),
                     checkpoint_interval_s=planned_interval_seconds(job, candidate), deadline=deadline,
                     max_exec_seconds=max_exec, grace_s=grace)


def pod_failure_policy(gang: bool) -> dict[str, Any]:
    """The Job's ``podFailurePolicy`` (Kubernetes: rules in order, the first match wins).

    A node disruption (the pod's ``DisruptionTarget`` condition: spot reclaim drain, node shutdown, taint
    eviction of a failed node, pod GC of a deleted node, preemption) and the trainer's lost-peer exit
    :data:`RETRY_EXIT_CODE` are restarts. In a gang (``gang``: one pod per node of a JobSet, ``backoffLimit``
    0) they fail the Job with reason ``PodFailurePolicy``, which the JobSet's rule turns into a counted
    gang restart; on one node they ``Count`` against the Job's ``backoffLimit`` (the budget). Any other
    non-zero exit of the trainer is an application failure: the single-node Job fails at once (``FailJob``),
    and in a gang it exceeds ``backoffLimit`` 0 (reason ``BackoffLimitExceeded``), which fails the JobSet.
    Sidecars (GPUDirect RxDM) are not judged: only the ``trainer`` container's exit codes count.
    """
    restart = "FailJob" if gang else "Count"
    rules: list[dict[str, Any]] = [
        {"action": restart, "onPodConditions": [{"type": DISRUPTION_CONDITION, "status": "True"}]},
        {"action": restart, "onExitCodes": {"containerName": CONTAINER, "operator": "In",
                                            "values": [RETRY_EXIT_CODE]}},
    ]
    if not gang:
        rules.append({"action": "FailJob", "onExitCodes": {"containerName": CONTAINER, "operator": "NotIn",
                                                           "values": [0]}})
    return {"rules": rules}


def jobset_failure_policy(restarts: int) -> dict[str, Any]:
    """The JobSet's ``failurePolicy`` (JobSet v0.12.0: rules in order, the first match wins).

    A child Job failed by its pod failure policy (reason ``PodFailurePolicy``: a node disruption or a lost
    peer, :func:`pod_failure_policy`) restarts the whole gang from its last checkpoint (``RestartJobSet``),
    counted against ``maxRestarts`` = ``restarts``, the budget sized from the plan. Any other failure
    (``BackoffLimitExceeded``: the trainer failed on its own) fails the JobSet at once (``FailJobSet``)
    instead of burning the gang's GPUs on restarts that fail the same way.
    """
    return {"maxRestarts": restarts, "restartStrategy": "Recreate", "rules": [
        {"name": JOBSET_RESTART_RULE, "action": "RestartJobSet", "onJobFailureReasons": ["PodFailurePolicy"]},
        {"name": JOBSET_FAIL_RULE, "action": "FailJobSet"},
    ]}


def job_env(plan: PodPlan) -> list[dict[str, Any]]:
    """What the trainer is told about its job (docs/trainer-contract.md; the names and forms are
    :mod:`placement.model.contract`'s): ``GPUFLEET_DATASET_URI``, ``GPUFLEET_CHECKPOINT_DIR``,
    ``GPUFLEET_CHECKPOINT_INTERVAL_SECONDS``, ``GPUFLEET_DEADLINE``, ``GPUFLEET_GRACE_SECONDS``,
    ``GPUFLEET_RETRY_EXIT_CODE`` and ``GPUFLEET_MAX_RESTARTS``. What is unknown is left out."""
    c = contract
    job, life = plan.job, plan.lifecycle
    env: list[dict[str, Any]] = [
        {"name": c.ENV_TEAM, "value": job.team or plan.namespace},
        {"name": c.ENV_WORKLOAD, "value": job.workload},
        {"name": c.ENV_ACCELERATOR, "value": plan.accelerator or "/".join(job.accelerators)},
        {"name": c.ENV_NODES, "value": str(plan.nodes)},
        {"name": c.ENV_GPUS_PER_NODE, "value": str(plan.gpus_per_node)},
    ]
    if job.dataset is not None:
        env.append({"name": c.ENV_DATASET_URI, "value": job.dataset.uri})
    ckpt = _checkpoint_dir(plan)
    if ckpt is not None:
        env.append({"name": c.ENV_CHECKPOINT_DIR, "value": ckpt})
    ck = plan.checkpoints
    if ck is not None:
        if ck.cache_dir:
            env.append({"name": c.ENV_CHECKPOINT_CACHE_DIR, "value": ck.cache_dir})
        env.append({"name": c.ENV_CHECKPOINT_DESTINATION, "value": ck.destination.kind})
        if ck.destination.tier is not None:  # unknown (no filesystem): left out
            env.append({"name": c.ENV_CHECKPOINT_TIER, "value": c.tier_text(ck.destination.tier)})
    env += [{"name": c.ENV_CHECKPOINT_KEEP, "value": str(c.DEFAULT_CHECKPOINT_KEEP)},
            {"name": c.ENV_METRICS_PORT, "value": str(c.DEFAULT_METRICS_PORT)}]
    env.append({"name": c.ENV_CHECKPOINT_INTERVAL_SECONDS, "value": str(life.checkpoint_interval_s)})
    if life.deadline is not None:
        env.append({"name": c.ENV_DEADLINE, "value": life.deadline})
    env += [{"name": c.ENV_GRACE_SECONDS, "value": str(life.grace_s)},
            {"name": c.ENV_RETRY_EXIT_CODE, "value": str(c.RETRY_EXIT_CODE)},
            {"name": c.ENV_MAX_RESTARTS, "value": str(life.restarts)}]
    return env


def _checkpoint_dir(plan: PodPlan) -> str | None:
    """The job's own checkpoint directory: under the mounted claim or bucket (``/checkpoints/<job>``), else
    under the worker's bucket (``$CHECKPOINT_URI/<job>``; through the hub Kubernetes expands
    ``$(CHECKPOINT_URI)`` from the worker's ConfigMap); None when the job has no checkpoint location."""
    name = plan.job.name
    if plan.checkpoints is not None and plan.checkpoints.home:
        return plan.checkpoints.home  # the durable home, the same wherever the job lands
    if plan.storage.volume is not None:
        return f"{CHECKPOINT_DIR}/{name}"
    uri = next((e.get("value") for e in plan.storage.env if e.get("name") == contract.ENV_CHECKPOINT_URI), None)
    if uri:
        return f"{str(uri).rstrip('/')}/{name}"
    if plan.storage.env_from:
        return f"$({contract.ENV_CHECKPOINT_URI})/{name}"
    return None


@dataclass(frozen=True)
class Checkpoints:
    """The job's checkpoint home and what its pods write to (:mod:`placement.fleet.durable`): ``home`` the durable
    URI (None: the worker exports no checkpointUri), ``cache_dir`` the mounted filesystem path synced to it (None:
    none), ``destination`` what the pod writes to, ``cloud``/``region`` where the home is, ``size_gb`` one
    checkpoint's size (None: unknown)."""

    home: str | None
    cache_dir: str | None
    destination: durable.Destination
    cloud: str
    region: str
    size_gb: float | None = None

    def annotations(self) -> dict[str, str]:
        """The job object's ``gpufleet.io/checkpoint-*`` annotations (the hub dispatcher prices a move from them):
        none without a home; the size only when it is known (:func:`placement.model.contract.
        checkpoint_annotations`)."""
        return contract.checkpoint_annotations(self.home, self.cloud, self.region, self.size_gb)


def checkpoints_of(job: JobSpec, home_cluster: ClusterStack, dest: durable.Destination) -> Checkpoints:
    """The :class:`Checkpoints` of ``job`` homed on ``home_cluster``'s bucket and writing to ``dest``; the cache is
    the job's directory on the mounted filesystem, whose data repository holds the home."""
    return Checkpoints(home=durable.home(home_cluster, job.name),
                       cache_dir=f"{CHECKPOINT_DIR}/{job.name}" if dest.mounted else None,
                       destination=dest, cloud=home_cluster.cloud, region=home_cluster.region,
                       size_gb=durable.checkpoint_size_gb(job))


@dataclass(frozen=True)
class PodPlan:
    """Everything that differs between a pinned and a portable pod: what it asks for and where it may run."""

    name: str
    namespace: str
    job: JobSpec
    nodes: int
    gpus_per_node: int
    cpu_millis: int
    memory_mib: int
    efa: int  # vpc.amazonaws.com/efa per pod (0: none)
    fabric: str  # the GPUDirect kind to wire on GKE (tcpx | tcpxo | rdma), "efa", or "none"
    gpu_vpcs_shape: Shape | None  # the shape whose GPUDirect sidecar and devices the pod carries
    networks: tuple[str, ...]
    service_account: str | None
    storage: Storage
    scheduling: Mapping[str, Any]  # nodeSelector / affinity, tolerations
    efa_rdma_read: bool = False  # every node the pod may land on has EFA RDMA read
    lifecycle: Lifecycle = field(default_factory=lambda: Lifecycle())
    accelerator: str = ""
    checkpoints: Checkpoints | None = None


def _quantity(n: int) -> str:
    # Quantities as strings: what the API server returns and what the typed Python client accepts.
    return str(n)


def _device_list(gpus: int, extra: Sequence[str]) -> str:
    paths = [f"/dev/nvidia{i}" for i in range(gpus)] + ["/dev/nvidiactl", "/dev/nvidia-uvm", *extra]
    return "".join(f"- path: {p}\n" for p in paths)


def nccl_command(fabric_kind: str, command: Sequence[str]) -> list[str]:
    """The trainer's command on a GKE GPUDirect fabric: source Google's NCCL env script (TCPXO
    ``nccl-env-profile.sh``, RDMA ``set_nccl_env.sh``) then exec ``command``; ``command`` itself when the
    fabric has no script (TCPX: its settings are plain env) or the job gives no command (the image's own
    entrypoint must source it then)."""
    from placement.model.gpudirect import fabric

    script = fabric(fabric_kind).env_script
    if script is None or not command:
        return list(command)
    prelude = f'source "{script}" && exec "$@"'
    return [NCCL_ENV_SHELL, "-c", prelude, CONTAINER, *command]


def _nccl_warnings(fabric_kind: str, job: JobSpec) -> list[str]:
    """A job without a command on a fabric whose NCCL settings come from a script: the image must source it."""
    from placement.model.gpudirect import fabric

    if fabric_kind not in ("tcpx", "tcpxo", "rdma") or job.command:
        return []
    script = fabric(fabric_kind).env_script
    return [f"{job.name} has no command: its image's entrypoint must source {script} before NCCL starts "
            f"({fabric_kind} runs at a fraction of its bandwidth without it)"] if script else []


def _gpudirect(shape: Shape, nets: Sequence[str]) -> dict[str, Any]:
    """Pod additions for a GKE GPUDirect shape: annotations, sidecars, volumes, trainer env and mounts."""
    from placement.model.gpudirect import fabric

    s = shape
    row = fabric(s.fabric)
    interfaces = [{"interfaceName": "eth0", "network": "default"}]
    interfaces += [{"interfaceName": f"eth{i}", "network": n} for i, n in enumerate(nets, start=1)]
    out: dict[str, Any] = {
        "annotations": {"networking.gke.io/default-interface": "eth0",
                        "networking.gke.io/interfaces": json.dumps(interfaces)},
        "sidecars": [], "volumes": [], "mounts": [],
        "env": [{"name": "LD_LIBRARY_PATH", "value": NVIDIA_LIB}, {"name": "NCCL_LIB_DIR", "value": row.nccl_lib_dir},
                *({"name": k, "value": v} for k, v in row.nccl_env.items())],
    }
    host = {"sys": "/sys", "proc-sys": "/proc/sys"}
    daemon_mounts = [{"name": "nvidia-lib", "mountPath": NVIDIA_LIB}, {"name": "sys", "mountPath": "/hostsysfs"},
                     {"name": "proc-sys", "mountPath": "/hostprocsysfs"}]
    if s.fabric == "tcpxo":
        out["annotations"]["devices.gke.io/container.tcpxo-daemon"] = _device_list(
            s.gpus, ["/dev/dmabuf_import_helper"])
        out["sidecars"].append({
            "name": "tcpxo-daemon", "image": row.rxdm_image, "restartPolicy": "Always",
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
            "name": "tcpx-daemon", "image": row.rxdm_image, "restartPolicy": "Always",
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


def _fsx_objects(cl: ClusterStack, ns: str) -> tuple[dict[str, Any], dict[str, Any], str]:
    """For a stack that predates the stack-made claims (no ``checkpointFilesystem.claimName``): a static FSx for
    Lustre PersistentVolume bound to the namespace's PVC, and the DRA sub-path to mount."""
    fs = dict(cl.filesystem or {})
    fs["capacityGb"] = whole(fs.get("capacityGb", 1200), f"{cl.stack}.checkpointFilesystem.capacityGb", "")
    pv, pvc = cv.volume_objects(cl.cluster_name, ns, fs, where=f"{cl.stack}.checkpointFilesystem")
    return pv, pvc, cv.sub_path(fs)


def _claim(cl: ClusterStack, ns: str) -> str | None:
    """The checkpoint claim the stack created in ``ns`` (``checkpointFilesystem.claimName``), if it did."""
    fs = cl.filesystem or {}
    claim = fs.get("claimName")
    if not claim or fs.get("kind") not in cv.KINDS:
        return None
    if cl.service_account is not None and ns not in cl.service_account.namespaces:
        return None  # the stack made the claim only in its training namespaces
    return str(claim)


def _gcs_objects(cl: ClusterStack, ns: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The checkpoint bucket as a static GCS FUSE PersistentVolume (GKE's static provisioning: the bucket is
    the volume handle, ``only-dir`` the prefix) bound to the namespace's PVC."""
    assert cl.checkpoint_uri
    bucket, prefix = _gs_bucket(cl.checkpoint_uri)
    pv_name = f"{cl.cluster_name}-ckpt-{ns}"[:253]
    pv = {"apiVersion": "v1", "kind": "PersistentVolume",
          "metadata": {"name": pv_name, "labels": dict(MANAGED_BY)},
          "spec": {"capacity": {"storage": GCS_PV_SIZE}, "accessModes": ["ReadWriteMany"],
                   "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                   "mountOptions": ["implicit-dirs", *([f"only-dir={prefix}"] if prefix else [])],
                   "claimRef": {"namespace": ns, "name": CHECKPOINT_PVC},
                   "csi": {"driver": GCSFUSE_CSI_DRIVER, "volumeHandle": bucket}}}
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": CHECKPOINT_PVC, "namespace": ns, "labels": dict(MANAGED_BY)},
           "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": pv_name,
                    "resources": {"requests": {"storage": GCS_PV_SIZE}}}}
    return pv, pvc


def checkpoint_storage(cl: ClusterStack, ns: str) -> Storage:
    """The checkpoint store of one cluster.

    A filesystem tier (FSx for Lustre, Managed Lustre, Filestore): the claim the stack made in the namespace
    (``checkpointFilesystem.claimName``, ``gpufleet-checkpoints``), mounted by name; nothing is created. FSx
    mounts its data-repository path, so files land in the bucket.
    Older AWS stacks without the claim: a static PersistentVolume (``fsx.csi.aws.com``) bound to the PVC
    ``gpufleet-checkpoints``, created by submit.
    GCP without a filesystem: the bucket through the GCS FUSE CSI driver (inline volume, Workload Identity).
    AWS without FSx: nothing to mount; the job writes to ``CHECKPOINT_URI`` with its IRSA role.
    """
    fs = cl.filesystem or {}
    warnings: list[str] = []
    env = ({"name": contract.ENV_CHECKPOINT_URI, "value": cl.checkpoint_uri},) if cl.checkpoint_uri else ()
    claim = _claim(cl, ns)
    if claim:
        volume = {"name": CHECKPOINT_VOLUME, "persistentVolumeClaim": {"claimName": claim}}
        return Storage(volume=volume, sub_path=cv.sub_path(fs), env=env)
    if cl.cloud == "aws" and fs.get("kind") == "fsx":
        pv, pvc, sub = _fsx_objects(cl, ns)
        volume = {"name": CHECKPOINT_VOLUME, "persistentVolumeClaim": {"claimName": CHECKPOINT_PVC}}
        return Storage(objects=(pv, pvc), volume=volume, sub_path=sub, env=env)
    if cl.cloud == "gcp" and cl.checkpoint_uri and cl.checkpoint_uri.startswith("gs://"):
        bucket, prefix = _gs_bucket(cl.checkpoint_uri)
        options = "implicit-dirs" + (f",only-dir={prefix}" if prefix else "")
        volume = {"name": CHECKPOINT_VOLUME, "csi": {"driver": GCSFUSE_CSI_DRIVER,
                                                     "volumeAttributes": {"bucketName": bucket,
                                                                          "mountOptions": options}}}
        if fs.get("kind") in ("lustre", "filestore"):
            warnings.append(f"{cl.stack} has a {fs['kind']} checkpoint tier; submit mounts the bucket only")
        return Storage(volume=volume, annotations={GCSFUSE_ANNOTATION: "true"}, env=env, warnings=tuple(warnings))
    if not cl.checkpoint_uri:
        warnings.append(f"{cl.stack} exports no checkpointUri: the job gets no checkpoint location")
    return Storage(env=env, warnings=tuple(warnings))


def _env(plan: PodPlan) -> list[dict[str, Any]]:
    name, nodes = plan.name, plan.nodes
    c = contract
    env: list[dict[str, Any]] = [{"name": c.ENV_JOB, "value": plan.job.name}, *plan.storage.env]
    if plan.storage.volume is not None:
        env.append({"name": c.ENV_MOUNTED_CHECKPOINT_DIR, "value": CHECKPOINT_DIR})
    # torchrun-style rendezvous: rank 0's stable DNS name through the JobSet's headless service.
    master = f"{name}-{REPLICATED_JOB}-0-0.{name}" if nodes > 1 else "127.0.0.1"
    rank: dict[str, Any] = ({"valueFrom": {"fieldRef": {
        "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}}
        if nodes > 1 else {"value": "0"})
    env += [{"name": c.ENV_MASTER_ADDR, "value": master}, {"name": c.ENV_MASTER_PORT, "value": str(MASTER_PORT)},
            {"name": c.ENV_NNODES, "value": str(nodes)}, {"name": c.ENV_NODE_RANK, **rank},
            {"name": c.ENV_NPROC_PER_NODE, "value": str(plan.gpus_per_node)}]
    env += torchrun_env(master, nodes, plan.gpus_per_node, rank)
    env += efa_env(plan.fabric, plan.efa_rdma_read)
    return env


def torchrun_env(master: str, nodes: int, gpus_per_node: int, rank: Mapping[str, Any]) -> list[dict[str, Any]]:
    """What ``torchrun`` reads when its options are not on its command line (each option's ``PET_<OPTION>``:
    torch.distributed.argparse_util.env, the PyTorch 2.x launcher): ranks per node = the node's GPUs,
    ``--nnodes`` = the nodes, this pod's ``--node-rank`` (the JobSet completion index), and the static
    rendezvous on rank 0's pod through the JobSet's headless service (``--master-addr``/``--master-port``;
    torchrun would take 127.0.0.1 otherwise, and a gang of nodes would wait for each other there). So
    ``torchrun train.py`` with no options runs the gang; options given on the command line still win."""
    return [{"name": "PET_NNODES", "value": str(nodes)}, {"name": "PET_NPROC_PER_NODE", "value": str(gpus_per_node)},
            {"name": "PET_NODE_RANK", **rank}, {"name": "PET_MASTER_ADDR", "value": master},
            {"name": "PET_MASTER_PORT", "value": str(MASTER_PORT)}]


def efa_env(fabric: str, rdma_read: bool) -> list[dict[str, Any]]:
    """libfabric settings of an EFA pod: the EFA provider, and device RDMA only where every node the pod may
    land on has RDMA read (libfabric aborts on FI_EFA_USE_DEVICE_RDMA=1 without it; unset, it decides from
    the device's capabilities)."""
    if fabric != "efa":
        return []
    env = [{"name": "FI_PROVIDER", "value": "efa"}]
    if rdma_read:
        env.append({"name": "FI_EFA_USE_DEVICE_RDMA", "value": "1"})
    return env


def _resources(plan: PodPlan) -> dict[str, Any]:
    requests = {"cpu": f"{plan.cpu_millis}m", "memory": f"{plan.memory_mib}Mi",
                ko.RES_GPU: _quantity(plan.gpus_per_node)}
    limits = {ko.RES_GPU: _quantity(plan.gpus_per_node)}
    if plan.efa:
        requests[ko.RES_EFA] = limits[ko.RES_EFA] = _quantity(plan.efa)
        # Huge page requests must equal their limits; the node reserves this much (placement.model.kueue).
        requests[ko.RES_HUGEPAGES] = limits[ko.RES_HUGEPAGES] = f"{ko.EFA_HUGEPAGES_MIB}Mi"
    return {"requests": requests, "limits": limits}


def per_node_requests(shape: Shape, gpus: int) -> tuple[int, int]:
    """(CPU millicores, memory MiB) a pod taking ``gpus`` of a node of ``shape`` requests: its share of the
    node's allocatable (:func:`placement.model.kueue.allocatable`) times :data:`REQUEST_FRACTION`."""
    alloc = ko.allocatable(shape)
    share = gpus / shape.gpus * REQUEST_FRACTION
    return math.floor(alloc.cpu_millis * share), math.floor(alloc.memory_mib * share)


def _job_object(plan: PodPlan, meta: dict[str, Any], pod_annotations: Mapping[str, str]) -> dict[str, Any]:
    job, name = plan.job, plan.name
    # The naming rules of the kind rendered (a JobSet's pod names are DNS-1035 labels with a random suffix).
    problem = jobset_name_problem(name, plan.nodes, REPLICATED_JOB) if plan.nodes > 1 else job_name_problem(name)
    if problem:
        raise InputError("name", f"{problem}; rename the job")
    container: dict[str, Any] = {"name": CONTAINER, "image": job.image}
    gpudirect = plan.fabric in ("tcpx", "tcpxo", "rdma") and plan.gpu_vpcs_shape is not None
    if job.command:
        container["command"] = nccl_command(plan.fabric, job.command) if gpudirect else list(job.command)
    env = _env(plan) + job_env(plan)
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    sidecars: list[dict[str, Any]] = []
    if plan.storage.volume is not None:
        sub = plan.storage.sub_path
        mounts.append({"name": CHECKPOINT_VOLUME, "mountPath": CHECKPOINT_DIR, **({"subPath": sub} if sub else {})})
        volumes.append(dict(plan.storage.volume))
    mounts += [dict(m) for m in plan.storage.mounts]
    volumes += [dict(v) for v in plan.storage.volumes]
    annotations = {**plan.storage.annotations, **pod_annotations}
    if gpudirect and plan.gpu_vpcs_shape is not None:
        gd = _gpudirect(plan.gpu_vpcs_shape, plan.networks)
        annotations.update(gd["annotations"])
        env += gd["env"]
        mounts += gd["mounts"]
        volumes += gd["volumes"]
        sidecars += gd["sidecars"]
    container["env"] = env
    if plan.storage.env_from:
        container["envFrom"] = list(plan.storage.env_from)
    container.update(resources=_resources(plan), volumeMounts=mounts)
    # The trainer's Prometheus metrics (docs/trainer-contract.md#metrics): a named port, and the pod annotations a
    # Prometheus's conventional `kubernetes-pods` job scrapes (the prometheus-community chart's default).
    container["ports"] = [{"name": "metrics", "containerPort": contract.DEFAULT_METRICS_PORT, "protocol": "TCP"}]
    annotations.update({"prometheus.io/scrape": "true", "prometheus.io/port": str(contract.DEFAULT_METRICS_PORT),
                        "prometheus.io/path": "/metrics"})
    # The trainer's SIGTERM -> emergency checkpoint window, within the reclaim notice of every cloud it may land on.
    pod_spec: dict[str, Any] = {"restartPolicy": "Never", "terminationGracePeriodSeconds": plan.lifecycle.grace_s}
    if plan.service_account:
        pod_spec["serviceAccountName"] = plan.service_account
    pod_spec.update(plan.scheduling)
    if sidecars:
        pod_spec["initContainers"] = sidecars
    pod_spec["containers"] = [container]
    pod_spec["volumes"] = volumes
    pod_meta: dict[str, Any] = {"labels": {JOB_LABEL: name}}
    if annotations:
        pod_meta["annotations"] = annotations
    pod = {"metadata": pod_meta, "spec": pod_spec}
    life = plan.lifecycle
    if life.max_exec_seconds is not None:
        meta = {**meta, "labels": {**meta.get("labels", {}), MAX_EXEC_TIME_LABEL: str(life.max_exec_seconds)}}
    if plan.nodes == 1:
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
                "spec": {"suspend": True, "parallelism": 1, "completions": 1, "backoffLimit": life.restarts,
                         "podFailurePolicy": pod_failure_policy(gang=False), "template": pod}}
    return {"apiVersion": JOBSET_API, "kind": "JobSet", "metadata": meta,
            "spec": {"suspend": True, "network": {"enableDNSHostnames": True},
                     "failurePolicy": jobset_failure_policy(life.restarts),
                     "replicatedJobs": [{"name": REPLICATED_JOB, "replicas": 1, "template": {"spec": {
                         "parallelism": plan.nodes, "completions": plan.nodes, "completionMode": "Indexed",
                         "backoffLimit": 0, "podFailurePolicy": pod_failure_policy(gang=True),
                         "template": pod}}}]}}


def _account_warnings(cl: ClusterStack, ns: str) -> list[str]:
    sa = cl.service_account
    if sa is None:
        return [f"{cl.stack} exports no trainingServiceAccount: the pods run as the default service "
                "account of their namespace, without the checkpoint identity"]
    if ns not in sa.namespaces:
        return [f"{cl.stack} has no training service account {sa.name} in {ns} (only in "
                f"{', '.join(sa.namespaces) or 'no namespace'}): the pods will not start until "
                f"ServiceAccount {ns}/{sa.name} exists; `pulumi up` the stack, which creates it in "
                "every team namespace bound to the checkpoint identity"]
    return []


LAUNCHER = ("python", "-m", "placement.trainer.launch", "--")  # the trainer contract's entrypoint
_PYTHON = re.compile(r"^python(3(\.\d+)?)?$")
_SHELLS = ("sh", "bash", "dash", "zsh")


def starts_with_launcher(command: Sequence[str]) -> bool:
    """Whether ``command`` runs the launcher first: ``python[3[.N]] -m placement.trainer.launch ...`` (any path
    to the interpreter), also as the script of ``sh -c`` / ``bash -c`` (after an optional ``exec``)."""
    words = list(command)
    if len(words) >= 3 and words[0].rsplit("/", 1)[-1] in _SHELLS and words[1] == "-c":
        words = words[2].split()
        if words[:1] == ["exec"]:
            words = words[1:]
    return len(words) >= 3 and bool(_PYTHON.match(words[0].rsplit("/", 1)[-1])) \
        and words[1:3] == ["-m", "placement.trainer.launch"]


def command_warnings(job: JobSpec) -> list[str]:
    """A job without ``command`` runs its image's own entrypoint (ENTRYPOINT and CMD): say so, since for an
    image such as the default NGC PyTorch one that starts a shell and exits at once. A command that does not
    start with the launcher: say so, naming it (docs/trainer-contract.md#the-launcher)."""
    if not job.command:
        return [f"job {job.name} has no command: the container runs the image's own entrypoint ({job.image}); "
                "set command: in the job spec to run your training"]
    if starts_with_launcher(job.command):
        return []
    return [f"job {job.name}'s command does not start with the launcher ({' '.join(LAUNCHER)}): torchrun exits 1 "
            "on a drain, which fails the job, and a trainer that exits 0 on one completes it; start the command "
            f"with `{' '.join(LAUNCHER)}` (docs/trainer-contract.md#the-launcher)"]


def render(target: Target) -> tuple[list[dict[str, Any]], list[str]]:
    """The objects to create on one cluster (PV/PVC first when needed, the Job or JobSet last) and warnings."""
    job, ex = target.job, target.existing
    cl, name, ns = ex.cluster, job.name, ex.namespace
    storage = checkpoint_storage(cl, ns)
    warnings = command_warnings(job) + list(storage.warnings)
    shape = target.shape
    cpu, memory = per_node_requests(shape, target.gpus_per_node)
    multi = target.nodes > 1
    fabric = shape.fabric if multi and (shape.fabric != "efa" or cl.cloud == "aws") else "none"
    plan = PodPlan(
        name=name, namespace=ns, job=job, nodes=target.nodes, gpus_per_node=target.gpus_per_node,
        cpu_millis=cpu, memory_mib=memory, efa=shape.fabric_nics if fabric == "efa" else 0, fabric=fabric,
        gpu_vpcs_shape=shape if cl.cloud == "gcp" else None, efa_rdma_read=shape.efa_rdma_read,
        networks=gke_networks(cl, ex.pool, shape) if cl.cloud == "gcp" else (),
        service_account=cl.service_account.name if cl.service_account else None, storage=storage,
        scheduling={"nodeSelector": ko.flavor_node_labels(ex.pool.name, shape),
                    "tolerations": [dict(ko.GPU_TOLERATION)]},
        lifecycle=lifecycle(job, target.candidate, (cl.cloud,), target.now), accelerator=shape.accelerator,
        checkpoints=checkpoints_of(job, cl, durable.destination(cl, storage.volume)))
    pod_annotations: dict[str, str] = {}
    if multi and not target.via_hub and ko.tas_enabled(ex.pool.min_nodes, ex.pool.max_nodes, shape):
        # Only then does the worker's flavor name the cloud's Topology (a TAS annotation is never admitted on
        # a flavor without one): ask Kueue to keep the pods in the narrowest network block it can. Pools that
        # scale carry no Topology, nor do the hub's flavors (docs/kueue-hub.md#the-hub-stackspulumihubyaml).
        pod_annotations[PREFERRED_TOPOLOGY] = ko.preferred_topology_level(shape)
    warnings += _account_warnings(cl, ns)
    if cl.cloud == "gcp":
        warnings += _nccl_warnings(fabric, job)
    o = target.candidate.offer
    meta = {"name": name, "namespace": ns,
            "labels": {QUEUE_LABEL: ex.queue, PRIORITY_LABEL: job.priority, JOB_LABEL: name, **MANAGED_BY},
            "annotations": {contract.PLACEMENT: f"{o.cloud}/{o.zone}/{o.instance_type}/{target.candidate.capacity}",
                            contract.STACK: cl.stack, contract.POOL: ex.pool.name,
                            **({contract.JOB_SPEC: job_spec_annotation(target.job_doc)}
                               if target.job_doc is not None else {}),
                            **(plan.checkpoints.annotations() if plan.checkpoints else {})}}
    obj = _job_object(plan, meta, pod_annotations)
    if job.gpus % shape.gpus and multi:
        warnings.append(f"{job.gpus} GPUs round up to {target.nodes} whole nodes of {shape.gpus}")
    return [*storage.objects, obj], warnings


# ----------------------------------------------------------------------------- through the hub


def _portable_storage(group: Group, ns: str) -> tuple[Storage, dict[str, list[dict[str, Any]]]]:
    """Checkpoint storage valid on every member, and the objects to create on each (by worker key).

    Every member gets ConfigMap ``gpufleet-checkpoint`` (``CHECKPOINT_URI`` = its own bucket, which its
    training identity can write) read by the pod through ``envFrom``. When every member's stack made the claim
    ``gpufleet-checkpoints`` in the namespace (``checkpointFilesystem.claimName``) at the same sub-path, the
    pod mounts it at ``/checkpoints`` and nothing else is created. Otherwise, when every member can back that
    PVC the same way (all AWS with FSx for Lustre and the same data-repository path, or all GKE, whose bucket
    becomes a static GCS FUSE volume) each gets its PV/PVC and the pod mounts it; otherwise nothing is mounted
    and the job writes to ``$CHECKPOINT_URI``.
    """
    per_worker: dict[str, list[dict[str, Any]]] = {}
    warnings: list[str] = []
    claims = {m.key: _claim(m.cluster, ns) for m in group.members}
    claimed = all(claims.values()) and len(set(claims.values())) == 1
    fsx = [m for m in group.members if m.cluster.cloud == "aws" and (m.cluster.filesystem or {}).get("kind") == "fsx"]
    gcs = [m for m in group.members if m.cluster.cloud == "gcp" and (m.cluster.checkpoint_uri or "").startswith("gs://")]
    mounted: dict[str, tuple[dict[str, Any], ...]] = {}
    sub_paths: set[str] = set()
    if claimed:
        # Every member made the same claim in the namespace: mount it by name wherever the job lands.
        for m in group.members:
            mounted[m.key] = ()
            sub_paths.add(cv.sub_path(m.cluster.filesystem or {}))
    elif len(fsx) == len(group.members):
        for m in fsx:
            pv, pvc, sub = _fsx_objects(m.cluster, ns)
            mounted[m.key] = (pv, pvc)
            sub_paths.add(sub)
    elif len(gcs) == len(group.members):
        for m in gcs:
            mounted[m.key] = _gcs_objects(m.cluster, ns)
    if len(sub_paths) > 1:
        warnings.append("the group's checkpoint file systems mount different paths (FSx data-repository paths); "
                        "the job writes to $CHECKPOINT_URI instead of mounting /checkpoints")
        mounted = {}
    elif not mounted and len(group.members) > 1:
        warnings.append("the group's workers keep checkpoints differently (FSx, S3, GCS); the job writes to "
                        "$CHECKPOINT_URI (its worker's bucket) instead of mounting /checkpoints")
    for m in group.members:
        objs: list[dict[str, Any]] = []
        if m.cluster.checkpoint_uri:
            objs.append({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": CHECKPOINT_CONFIGMAP, "namespace": ns, "labels": dict(MANAGED_BY)},
                         "data": {contract.ENV_CHECKPOINT_URI: m.cluster.checkpoint_uri}})
        else:
            warnings.append(f"{m.key} exports no checkpointUri: a job that lands there gets no checkpoint location")
        if m.key in mounted:
            objs += list(mounted[m.key])
        for o in objs:
            o["metadata"].setdefault("annotations", {})[CLUSTER_ANNOTATION] = m.key
        per_worker[m.key] = objs
    volume = None
    annotations: dict[str, str] = {}
    if mounted:
        volume = {"name": CHECKPOINT_VOLUME, "persistentVolumeClaim": {"claimName": CHECKPOINT_PVC}}
        if gcs and not claimed:
            annotations[GCSFUSE_ANNOTATION] = "true"
    env_from = ({"configMapRef": {"name": CHECKPOINT_CONFIGMAP, "optional": True}},)
    storage = Storage(volume=volume, sub_path=next(iter(sub_paths), ""), annotations=annotations,
                      env_from=env_from, warnings=tuple(warnings))
    return storage, per_worker


def _cross_cloud(storage: Storage, per_worker: dict[str, list[dict[str, Any]]], group: Group, home: ClusterStack,
                 ns: str, job: str) -> Storage:
    """``storage`` with what a member of the other cloud than the home (``home``, the planned worker) needs to
    reach the job's home (:mod:`placement.fleet.federation`): its ConfigMaps added to ``per_worker`` and the pod's
    optional credential volume, mount and envFrom; a member the home's stack federates nothing for is warned of
    (a job moved there restarts from step 0). Unchanged when every member is in the home's cloud or the home's
    worker exports no checkpoint location."""
    from placement.fleet import federation as fd

    reaches = [r for m in group.members if (r := fd.reach(home, m.key, m.cluster)) is not None]
    if not reaches or not home.checkpoint_uri:
        return storage
    warnings = list(storage.warnings)
    for r in reaches:
        made = fd.objects(home, r, ns, job)
        for o in made:
            o["metadata"].setdefault("annotations", {})[CLUSTER_ANNOTATION] = r.key
        per_worker.setdefault(r.key, []).extend(made)
        why = fd.warning(r, home)
        if why:
            warnings.append(why)
    volumes, mounts, env_from = fd.pod_parts(job, home.cloud)
    return replace(storage, volumes=(*storage.volumes, *volumes), mounts=(*storage.mounts, *mounts),
                   env_from=(*storage.env_from, *env_from), warnings=tuple(warnings))


def job_spec_annotation(job_doc: Mapping[str, Any]) -> str:
    """The job's YAML mapping as compact JSON (fields this version does not know travel along)."""
    return contract.job_spec_text(job_doc)


def portable_affinity(group: Group, fabric: str) -> dict[str, Any]:
    """The required node affinity of a job sent through the hub: the group's pools, instance types and (on a
    multi-node fabric) fabric, in one term. Each worker's flavors carry the same three labels
    (:func:`placement.model.kueue.flavor_node_labels`), so a worker's Kueue only admits the job on a flavor of the
    group: pool names alone repeat across clouds."""
    types = sorted({s.name for s in group.shapes()})
    exprs = [{"key": ko.POOL_LABEL, "operator": "In", "values": list(group.pool_names)},
             {"key": ko.INSTANCE_TYPE_LABEL, "operator": "In", "values": types}]
    if fabric != "none":
        exprs.append({"key": ko.FABRIC_LABEL, "operator": "In", "values": [fabric]})
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": exprs}]}}}


def portable_destination(existing: Existing, group: Group, volume: Mapping[str, Any] | None) -> durable.Destination:
    """What a job sent through the hub writes to: the planned worker's filesystem when it is the group's only
    member (its data repository holds the home), else the home's object store: another worker's filesystem
    would sync to that worker's own bucket, not to the job's home."""
    if len(group.members) == 1 and group.members[0].cluster is existing.cluster:
        return durable.destination(existing.cluster, volume)
    return durable.destination(existing.cluster, None)


def render_portable(job: JobSpec, job_doc: Mapping[str, Any], candidate: Candidate, existing: Existing, group: Group,
                    now: dt.datetime | None = None, expected: float | None = None
                    ) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]], list[str]]:
    """The job for the hub's ``all-workers`` queue, valid on every member of ``group``, and the storage objects
    to create on each member first (by worker key), plus warnings.

    No pool node selector: the admitting worker's ResourceFlavor injects its pool label, so the worker's
    flavor order (spot, then on-demand, or the reverse) picks the capacity; a required node affinity keeps
    the pods on the group's pools, instance types and fabric (:func:`portable_affinity`). CPU/memory
    requests fit the smallest node of the group; EFA asks for the fewest interfaces among its shapes; GKE
    GPUDirect pods name the group's GPU networks.
    """
    ns = existing.namespace
    shapes = group.shapes()
    per_node = group.gpus_per_node
    reqs = [per_node_requests(s, per_node) for s in shapes]
    storage, per_worker = _portable_storage(group, ns)
    first = existing.cluster
    storage = _cross_cloud(storage, per_worker, group, first, ns, job.name)
    warnings = command_warnings(job) + list(storage.warnings)
    fabric = group.name if group.name != "single-node" else "none"
    efa = min(s.fabric_nics for s in shapes) if fabric == "efa" else 0
    affinity = portable_affinity(group, fabric)
    clouds = sorted({m.cluster.cloud for m in group.members})
    plan = PodPlan(
        name=job.name, namespace=ns, job=job, nodes=group.nodes, gpus_per_node=per_node,
        cpu_millis=min(r[0] for r in reqs), memory_mib=min(r[1] for r in reqs), efa=efa, fabric=fabric,
        gpu_vpcs_shape=candidate.offer.shape if fabric in ("tcpx", "tcpxo", "rdma") else None,
        efa_rdma_read=bool(shapes) and all(s.efa_rdma_read for s in shapes),
        networks=group.networks, service_account=first.service_account.name if first.service_account else None,
        storage=storage, scheduling={"affinity": affinity, "tolerations": [dict(ko.GPU_TOLERATION)]},
        lifecycle=lifecycle(job, candidate, clouds, now, expected), accelerator=candidate.offer.shape.accelerator,
        checkpoints=checkpoints_of(job, first, portable_destination(existing, group, storage.volume)))
    for m in group.members:
        warnings += _account_warnings(m.cluster, ns)
    warnings += _nccl_warnings(fabric, job)
    o = candidate.offer
    annotations = {contract.PLACEMENT: f"{o.cloud}/{o.zone}/{o.instance_type}/{candidate.capacity}",
                   contract.JOB_SPEC: job_spec_annotation(job_doc), contract.FABRIC_GROUP: group.name,
                   contract.WORKERS: contract.workers_text(group.keys)}
    assert plan.checkpoints is not None
    annotations.update(plan.checkpoints.annotations())
    meta = {"name": job.name, "namespace": ns,
            "labels": {QUEUE_LABEL: ko.ALL_WORKERS, PRIORITY_LABEL: job.priority, JOB_LABEL: job.name, **MANAGED_BY},
            "annotations": annotations}
    obj = _job_object(plan, meta, {})
    if job.gpus % per_node and group.nodes > 1:
        warnings.append(f"{job.gpus} GPUs round up to {group.nodes} whole nodes of {per_node}")
    return obj, per_worker, warnings


def manifest_yaml(docs: Sequence[Mapping[str, Any]], headers: Sequence[str | None] = ()) -> str:
    """The objects as one multi-document YAML stream; multi-line strings (device lists, scripts) as literal
    blocks. ``headers[i]``, when given, is a comment put above document ``i`` (which cluster it goes to)."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    parts = []
    for i, d in enumerate(docs):
        header = headers[i] if i < len(headers) else None
        comment = "".join(f"# {line}\n" for line in header.splitlines()) if header else ""
        parts.append(comment + yaml.dump(dict(d), Dumper=Dumper, sort_keys=False))
    return "---\n".join(parts)
