"""Where a submitted job's checkpoints live and what writing them costs. Pure: stack outputs and a job in, data out.

Every job gets one durable checkpoint home, independent of the worker it lands on: ``<checkpointUri>/<job>``, an
object-store URI in the bucket of the worker ``placement submit`` planned it for (its home region). A fast
filesystem, where the pod mounts one, is a cache synced to that home: FSx for Lustre through its data repository
association (files under ``/checkpoints`` are exported to ``s3://<bucket>/checkpoints/`` and imported back), GKE
Managed Lustre through the stack's export CronJob (docs/gcp.md). The pod learns both (``GPUFLEET_CHECKPOINT_DIR``,
``GPUFLEET_CHECKPOINT_CACHE_DIR``) and the hub dispatcher reads the home, its region and one checkpoint's size from
the job's annotations to price moving it (:data:`HOME_ANNOTATION`, :data:`REGION_ANNOTATION`, :data:`GB_ANNOTATION`:
the names, forms and "unknown" of :mod:`placement.model.contract`, which both sides use).

What the pod writes to (:func:`destination`) is also what the plan must price: the interval, the write time and
the overhead come from that destination (:func:`priced_job`), not from the job spec's default object store.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from placement.model import contract
from placement.model.physics import checkpoint_gb
from placement.model.physics_data import physics_book

if TYPE_CHECKING:
    from placement.fleet.choose import Group
    from placement.fleet.stacks import ClusterStack
    from placement.model.catalog import Offer
    from placement.model.jobspec import JobSpec
    from placement.plan.job import Candidate

HOME_ANNOTATION = contract.CHECKPOINT_HOME
REGION_ANNOTATION = contract.CHECKPOINT_REGION
GB_ANNOTATION = contract.CHECKPOINT_GB
DEFAULT_KEEP = contract.DEFAULT_CHECKPOINT_KEEP  # GPUFLEET_CHECKPOINT_KEEP: checkpoints the trainer keeps
METRICS_PORT = contract.DEFAULT_METRICS_PORT  # GPUFLEET_METRICS_PORT: the trainer's Prometheus port
MOUNT_PATH = "/checkpoints"  # where a checkpoint volume is mounted in the pod

# A stack's checkpointFilesystem kind -> (GPUFLEET_CHECKPOINT_DESTINATION, the engine's checkpoint destination).
# Filestore has no row in the physics book: it is priced as the object store, and said so.
_FILESYSTEMS = {"fsx": ("fsx", "fsx-lustre"), "lustre": ("managed-lustre", "managed-lustre"),
                "filestore": ("filestore", "object-store")}


@dataclass(frozen=True)
class Destination:
    """What a pod writes its checkpoints to.

    ``kind`` is ``GPUFLEET_CHECKPOINT_DESTINATION`` (fsx | managed-lustre | filestore | s3 | gcs | local);
    ``engine`` the engine's destination it is priced as (object-store | fsx-lustre | managed-lustre);
    ``capacity_gb`` / ``tier`` (MB/s per TiB) the filesystem's size and throughput tier (None: the physics book's
    default, or no filesystem); ``mounted`` whether a fast filesystem is mounted at :data:`MOUNT_PATH` as a cache
    of the home.
    """

    kind: str
    engine: str
    capacity_gb: float | None = None
    tier: float | None = None
    mounted: bool = False

    def label(self) -> str:
        """``fsx 2400 GB × 250 MB/s/TiB`` or ``s3``."""
        if self.capacity_gb is None:
            return self.kind
        tier = f" × {self.tier:g} MB/s/TiB" if self.tier is not None else ""
        return f"{self.kind} {self.capacity_gb:g} GB{tier}"


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def destination(cl: ClusterStack, volume: Mapping[str, Any] | None) -> Destination:
    """What a pod on ``cl`` writes to, given the checkpoint ``volume`` it mounts (None: none).

    A claim on the stack's filesystem (FSx, Managed Lustre, Filestore) is that filesystem at its size and tier
    (``checkpointFilesystem.capacityGb`` / ``throughputMbpsPerTib``); anything else (a GCS FUSE bucket, nothing)
    is the cloud's object store, or ``local`` without a ``checkpointUri``."""
    fs = cl.filesystem or {}
    kind = fs.get("kind")
    if volume is not None and "persistentVolumeClaim" in volume and kind in _FILESYSTEMS:
        name, engine = _FILESYSTEMS[str(kind)]
        return Destination(kind=name, engine=engine, capacity_gb=_number(fs.get("capacityGb")),
                           tier=_number(fs.get("throughputMbpsPerTib")), mounted=True)
    uri = cl.checkpoint_uri or ""
    if uri.startswith("s3://"):
        return Destination(kind="s3", engine="object-store")
    if uri.startswith("gs://"):
        return Destination(kind="gcs", engine="object-store")
    return Destination(kind="local", engine="object-store")


def home(cl: ClusterStack, job_name: str) -> str | None:
    """The job's durable checkpoint home: ``<checkpointUri>/<job>`` of the planned worker, None without one."""
    return f"{cl.checkpoint_uri.rstrip('/')}/{job_name}" if cl.checkpoint_uri else None


def home_region(cl: ClusterStack) -> str:
    """``aws:us-east-1`` / ``gcp:us-central1``: where the home bucket is (the stack's region)."""
    return contract.region_text(cl.cloud, cl.region)


SIZE_FROM_SPEC = "checkpoint.size_gb"
SIZE_FROM_MODEL = "model.parameters_b"


def checkpoint_size(job: JobSpec) -> tuple[float, str] | None:
    """One checkpoint's size in GB and what it comes from: the job's ``checkpoint.size_gb`` (:data:`SIZE_FROM_SPEC`),
    else the model's training state (:data:`SIZE_FROM_MODEL`: weights and, for full training, the optimizer: an
    upper bound of what a checkpoint holds); None when the job spec says neither (the size is unknown)."""
    if job.checkpoint_size_gb is not None:
        return float(job.checkpoint_size_gb), SIZE_FROM_SPEC
    if job.parameters_b is not None:
        return float(checkpoint_gb(job.parameters_b, job.training, physics_book())), SIZE_FROM_MODEL
    return None


def checkpoint_size_gb(job: JobSpec) -> float | None:
    """One checkpoint's size in GB (:func:`checkpoint_size`), None when unknown."""
    size = checkpoint_size(job)
    return size[0] if size is not None else None


def priced_job(job: JobSpec, dest: Destination) -> JobSpec:
    """``job`` with its checkpoint destination replaced by the one the pod writes to, at that filesystem's size
    and tier. A ``checkpoint.write_gbps`` the job states is a measurement and is kept."""
    return dataclasses.replace(job, checkpoint_destination=dest.engine,
                               filesystem_capacity_gb=dest.capacity_gb if dest.engine != "object-store" else None,
                               filesystem_mbps_per_tib=dest.tier if dest.engine != "object-store" else None)


def same_candidate(found: Iterable[Candidate], like: Candidate) -> Candidate | None:
    """The candidate of ``found`` on ``like``'s offer, capacity and node count (not excluded), if any."""
    o = like.offer
    for c in found:
        if (c.offer.cloud, c.offer.region, c.offer.zone, c.offer.instance_type) == (
                o.cloud, o.region, o.zone, o.instance_type) and c.capacity == like.capacity \
                and c.nodes == like.nodes and not c.excluded:
            return c
    return None


def reprice(job: JobSpec, candidate: Candidate, dest: Destination, offers: Sequence[Offer]) -> Candidate:
    """``candidate`` priced with checkpoints written to ``dest`` (same offer, capacity and nodes); unchanged when
    the destination is the one the job already names or the engine finds no such candidate."""
    from placement.plan.job import candidates

    priced = priced_job(job, dest)
    if (priced.checkpoint_destination, priced.filesystem_capacity_gb, priced.filesystem_mbps_per_tib) == (
            job.checkpoint_destination, job.filesystem_capacity_gb, job.filesystem_mbps_per_tib):
        return candidate
    o = candidate.offer
    same = [x for x in offers if (x.cloud, x.region, x.zone, x.instance_type) == (
        o.cloud, o.region, o.zone, o.instance_type)]
    return same_candidate(candidates(priced, same), candidate) or candidate


@dataclass(frozen=True)
class Budget:
    """The restart budget's basis through the hub: the most interruption-prone capacity the job's affinity
    admits (``worker``/``pool``/``capacity``) and the interruptions the plan expects there (``expected``)."""

    expected: float
    worker: str
    pool: str
    capacity: str


def hub_budget(job: JobSpec, planned: Candidate, planned_worker: str, planned_pool: str, group: Group,
               offers: Sequence[Offer]) -> Budget:
    """The pool of ``group`` (any member's pool the portable affinity admits) where the job would expect the
    most interruptions over its run, priced like ``planned``; the planned pool when none expects more."""
    from placement.plan.job import candidates

    best = Budget(float(planned.expected_interruptions), planned_worker, planned_pool, planned.capacity)
    for m in group.members:
        cl = m.cluster
        for p in m.pools:
            here = [o for o in offers if (o.cloud, o.region, o.zone, o.instance_type) == (
                cl.cloud, cl.region, p.zone, p.instance_type)]
            if not here:
                continue
            forced = dataclasses.replace(job, capacity=p.capacity)  # type: ignore[arg-type]
            for c in candidates(forced, here):
                if c.excluded or c.capacity != p.capacity or c.nodes != group.nodes:
                    continue
                expected = float(c.expected_interruptions)
                if expected > best.expected:
                    best = Budget(expected, m.key, p.name, p.capacity)
    return best
