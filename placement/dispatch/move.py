"""The price of moving a job's progress to another worker: its checkpoint home and the cost of reading it from
elsewhere. Pure: annotations in, frozen dataclasses out.

``placement submit`` gives every job one durable checkpoint home (issue 25), named on the submitted Job/JobSet
(the names, forms and "unknown" are :mod:`placement.model.contract`'s, which ``submit`` writes with):

==================================  ==================================================================
``gpufleet.io/checkpoint-home``     the home's URI (``s3://…``, ``gs://…``) where every worker resumes from
``gpufleet.io/checkpoint-region``   the home's cloud and region, ``aws:us-east-1`` / ``gcp:us-central1``
``gpufleet.io/checkpoint-gb``       the size of one checkpoint, GB (10^9 bytes); absent when submit did not know it
==================================  ==================================================================

A job that has run (the dispatcher saw it admitted on a worker, or the Workload was evicted since) has progress
in that home. Re-routed to a worker that did not run it, the job first reads its newest checkpoint from the home:
``gb`` × the egress rate of the path (``placement/data/egress.yaml``, priced by the source cloud) added to that
worker's cost, and ``gb`` at the path's throughput added to its ready time (:func:`move`). A worker it ran on
resumes from its own synced copy: no move. Without ``-gb`` the size comes from the job spec (its
``checkpoint.size_gb``, else the training state of ``model.parameters_b``: an upper bound), and without either
it is unknown: the move is priced as unknown (:attr:`Move.known` False: no egress, no time) and the job is still
nominated. A tenant writes these annotations: :func:`checkpoint_home` never refuses a job for them; a missing or
malformed one is read as unknown with a warning naming the annotation.

**Across clouds** (issue 35) a worker reads the home only through the identity federation its stacks made: the
home's worker (the fleet worker whose ``checkpointUri`` holds the home) lists the destination in its ``federation``
output (:class:`placement.fleet.stacks.Federation`). Then the move is priced as above (case
:data:`FEDERATED`: the egress of the ``cross_cloud`` path and its transfer time). Without it the job restarts
from step 0 there (case :data:`RESTARTS`): nothing is read, and what it throws away is priced instead, its
last durable step over its steps per hour (``gpufleet.io/last-durable-step``, ``gpufleet.io/steps-per-hour``) in
hours, at the destination's USD per hour of the job (:func:`lost_progress`); unknown progress is priced as
unknown. Within one cloud the stacks grant every peer the home (case :data:`SAME_CLOUD`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from placement.dispatch.model import CheckpointHome, WorkerState
from placement.fleet.durable import checkpoint_size  # imported here, not per call: one home per Workload of a pass
from placement.model import contract
from placement.model.egress import EgressBook, transfer_hours, transfer_path, transfer_usd
from placement.model.jobspec import JobSpec
from placement.model.zones import known_regions

CHECKPOINT_HOME = contract.CHECKPOINT_HOME
CHECKPOINT_REGION = contract.CHECKPOINT_REGION
CHECKPOINT_GB = contract.CHECKPOINT_GB
LAST_DURABLE_STEP = contract.LAST_DURABLE_STEP
STEPS_PER_HOUR = contract.STEPS_PER_HOUR
MAX_CHECKPOINT_GB = contract.MAX_CHECKPOINT_GB
MAX_URI = contract.MAX_URI
FROM_ANNOTATION = CHECKPOINT_GB  # CheckpointHome.gb_from: the size the job's annotation gives
# Move.case: how the job gets its progress on the destination.
SAME_CLOUD = "same_cloud"  # the stacks grant every same-cloud peer the home: it resumes
FEDERATED = "federated"  # another cloud, and the home's stack federates the destination's identity: it resumes
RESTARTS = "restarts"  # another cloud without federation: it restarts from step 0, its progress lost


@dataclass(frozen=True)
class Move:
    """Reading the newest checkpoint on a worker in ``cloud``/``region`` from its home: ``usd`` (egress) and
    ``hours`` (transfer), over ``path`` (same_region, inter_region, cross_cloud). ``known`` False: the checkpoint's
    size is unknown, so the move is not priced (``usd`` and ``hours`` 0). ``case``: :data:`SAME_CLOUD`,
    :data:`FEDERATED` or :data:`RESTARTS` (nothing is read: ``usd`` and ``hours`` 0, the lost progress is priced
    by the caller, :func:`lost_progress`)."""

    usd: float
    hours: float
    path: str
    known: bool = True
    case: str = SAME_CLOUD

    @property
    def restarts(self) -> bool:
        """The destination cannot read the home (another cloud, no federation): the job restarts from step 0."""
        return self.case == RESTARTS


NO_MOVE = Move(0.0, 0.0, "")


def home_worker(home: CheckpointHome, workers: Iterable[WorkerState]) -> WorkerState | None:
    """The fleet worker whose checkpoint bucket holds ``home`` (its ``checkpointUri`` is a prefix of the home's
    URI, in the home's cloud), None when none does (a bucket of the user's own: no stack federates it)."""
    for w in workers:
        uri = w.cluster.checkpoint_uri if w.cluster is not None else None
        if uri and w.cluster is not None and w.cluster.cloud == home.cloud and \
                (home.uri == uri or home.uri.startswith(uri.rstrip("/") + "/")):
            return w
    return None


def federated(home: CheckpointHome, owner: WorkerState | None, worker: str) -> bool:
    """Whether ``worker`` reaches ``home`` (kept by ``owner``, :func:`home_worker`) through the identity
    federation the owner's stack made for it (its ``federation`` output names it)."""
    return owner is not None and owner.cluster is not None and worker in owner.cluster.federation


def lost_progress(hours: float | None, cost_usd: float, ready_hours: float) -> float | None:
    """What a restart from step 0 throws away, USD: ``hours`` of the job's work (its last durable step over its
    steps per hour; None: unknown, so None) at the destination's USD per hour of the job (the engine's
    ``cost_usd`` there over its ``ready_hours``)."""
    if hours is None:
        return None
    return hours * (cost_usd / ready_hours) if ready_hours > 0 else 0.0


def checkpoint_home(annotations: Mapping[str, Any]) -> tuple[CheckpointHome | None, tuple[str, ...]]:
    """The job's home from its annotations (None when it names none, or none that can be read) and the warnings
    of what was read as unknown, each naming its annotation (:func:`placement.model.contract.read_checkpoint`;
    hostile data: never raises, never refuses the job). The size is the annotation's, None when unknown."""
    found, warnings = contract.read_checkpoint(annotations, known_regions())
    return home_of(found), warnings


def home_of(found: contract.Checkpoint | None, job: JobSpec | None = None, uri: str | None = None
            ) -> CheckpointHome | None:
    """The :class:`CheckpointHome` of a home read from the annotations (at ``uri`` when given: the snapshot reads
    the annotations once for every URI that passes the same checks); without a size there, ``job``'s own (its
    ``checkpoint.size_gb``, else the training state of its model: :func:`placement.fleet.durable.checkpoint_size`),
    else unknown."""
    if found is None:
        return None
    gb, gb_from = found.gb, FROM_ANNOTATION
    if gb is None:  # with_job_size's, the home made once (one per Workload of a dispatcher pass)
        gb_from = ""
        if job is not None:
            size = checkpoint_size(job)
            if size is not None:
                gb, gb_from = size
    return CheckpointHome.of(found.home if uri is None else uri, found.cloud, found.region, gb, gb_from)


def with_job_size(home: CheckpointHome, job: JobSpec | None) -> CheckpointHome:
    """``home`` with the size ``job``'s spec gives when its annotation gave none (unchanged otherwise)."""
    if home.gb is not None or job is None:
        return home
    size = checkpoint_size(job)
    return home if size is None else replace(home, gb=size[0], gb_from=size[1])


def move(home: CheckpointHome, cloud: str, region: str, job: JobSpec, book: EgressBook,
         federation: bool = False) -> Move:
    """Reading one checkpoint from ``home`` on a worker in ``cloud``/``region``: egress USD (the source cloud's
    rate for the path, ``placement.model.egress.transfer_usd``) and hours at the path's throughput (the job's
    ``throughput_gbps`` for that path, else the data's); not priced (``known`` False) when the size is unknown.
    In another cloud the worker reads it only with ``federation`` (:func:`federated`); without, the job
    restarts there (case :data:`RESTARTS`, nothing read)."""
    path = transfer_path(home.cloud, home.region, cloud, region)
    case = SAME_CLOUD if cloud == home.cloud else FEDERATED if federation else RESTARTS
    if case == RESTARTS:
        return Move(0.0, 0.0, path, case=case)
    if home.gb is None:
        return Move(0.0, 0.0, path, known=False, case=case)
    usd = transfer_usd(book, home.cloud, home.region, cloud, region, home.gb)
    hours = transfer_hours(home.gb, job.gbps(path, book.throughput_gbps[path]))
    return Move(usd, hours, path, case=case)
