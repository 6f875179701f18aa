"""What the dispatcher decides from, and what it decides: frozen dataclasses, no I/O.

Times are seconds since the epoch (``float``), durations in hours unless named ``_s``; money in USD;
resources per :class:`placement.model.kueue.Allocatable` (CPU millicores, memory MiB, GPUs, EFA devices).
:mod:`placement.dispatch.snapshot` builds these from the hub's and the workers' Kubernetes objects;
:func:`placement.dispatch.decide.decide` turns them into :class:`Decision`\\ s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Literal, TypeVar

from placement.fleet.stacks import ClusterStack
from placement.model.catalog import Offer
from placement.model.contract import Progress
from placement.model.jobspec import JobSpec
from placement.model.kueue import Allocatable

_T = TypeVar("_T")


def from_fields(cls: type[_T], fields: dict[str, Any]) -> _T:
    """``cls(**fields)`` of a frozen dataclass without its generated ``__init__`` (one ``object.__setattr__`` per
    field; the dispatcher's snapshot makes several per Workload of a pass): ``fields``, every field of ``cls`` in
    order and nothing else, becomes the instance's ``__dict__`` itself (the caller keeps no other reference to it), so
    the instance is equal, hashed and printed as ``__init__``'s. ``cls`` has no ``__post_init__``; the tests compare
    each use with ``__init__``'s instance."""
    made = object.__new__(cls)
    object.__setattr__(made, "__dict__", fields)
    return made

# Defaults of the `placement dispatch` flags (docs/kueue-hub.md#placement-dispatch).
WAIT_USD_PER_GPU_HOUR = 2.0  # what an hour of waiting costs per GPU the job holds idle
ADMISSION_DEADLINE_S = 300.0  # a nominated worker that has not admitted by then is replaced by the next best
DEFAULT_HOURS = 4.0  # length (or time left) of a workload whose length is unknown
REMAINING_FLOOR_HOURS = 0.25  # a running job past its expected length is assumed to need this much more

ZERO = Allocatable(0, 0, 0, 0)
# A resource a ClusterQueue flavor sets no lendingLimit/borrowingLimit for, when it sets one for another resource.
UNLIMITED = 2**62


@dataclass(frozen=True)
class Need:
    """One pod set of a Workload: ``count`` pods, each asking for ``per_pod``; ``pools`` the pool names its
    pods may run on (required node affinity / node selector on ``gpufleet.io/pool``), None when free."""

    name: str
    count: int
    per_pod: Allocatable
    pools: frozenset[str] | None = None

    @property
    def total(self) -> Allocatable:
        return self.per_pod.scaled(self.count)

    @classmethod
    def of(cls, name: str, count: int, per_pod: Allocatable, pools: frozenset[str] | None) -> Need:
        """``Need(name, count, per_pod, pools)`` without the frozen dataclass's ``__init__`` (one ``object.__setattr__``
        per field; the snapshot makes one per pod set of every Workload of a pass): the same fields in the same
        instance ``__dict__``, so equal and hashed alike."""
        s = object.__new__(cls)
        d = s.__dict__
        d["name"] = name
        d["count"] = count
        d["per_pod"] = per_pod
        d["pools"] = pools
        return s


@dataclass(frozen=True)
class CheckpointHome:
    """Where a job's checkpoints live (``placement submit``'s ``gpufleet.io/checkpoint-*`` annotations,
    :mod:`placement.dispatch.move`): ``uri`` in ``cloud``/``region``, ``gb`` GB (10^9 bytes) each, None when
    unknown; ``gb_from`` what the size comes from: the annotation (``gpufleet.io/checkpoint-gb``), the job spec's
    ``checkpoint.size_gb`` or its ``model.parameters_b`` (an upper bound: the training state), "" when unknown."""

    uri: str
    cloud: str
    region: str
    gb: float | None
    gb_from: str = "gpufleet.io/checkpoint-gb"

    @property
    def where(self) -> str:
        return f"{self.cloud}:{self.region}"

    @classmethod
    def of(cls, uri: str, cloud: str, region: str, gb: float | None, gb_from: str) -> CheckpointHome:
        """``CheckpointHome(uri, cloud, region, gb, gb_from)`` without the frozen dataclass's ``__init__`` (the snapshot
        makes one per Workload of a pass): its fields, in order, as the instance's ``__dict__``."""
        return from_fields(cls, {"uri": uri, "cloud": cloud, "region": region, "gb": gb, "gb_from": gb_from})


@dataclass(frozen=True)
class HubWorkload:
    """A Workload on the hub, with what its owner job recorded (``placement submit --via-hub``).

    ``check``/``check_state``: its MultiKueue admission check; ``allowed``: the clusters of that check's
    MultiKueueConfig; ``nominated_since``: when the current ``nominatedClusterNames`` were written, as the
    API server recorded it (the ``kueue-admission`` status entry of ``managedFields``), if known."""

    namespace: str
    name: str
    uid: str
    created: float
    priority: int
    queue_name: str
    cluster_queue: str | None
    check: str | None
    check_state: str | None
    allowed: tuple[str, ...]
    nominated: tuple[str, ...] = ()
    nominated_since: float | None = None
    cluster_name: str | None = None
    quota_reserved: bool = True
    evicted: bool = False
    finished: bool = False
    evictions: int = 0
    needs: tuple[Need, ...] = ()
    job: JobSpec | None = None
    job_error: str | None = None
    group: str | None = None
    group_workers: tuple[str, ...] | None = None
    # The job spec's own ``usd_per_hour_of_delay`` (USD per hour its results are late), when it sets one.
    delay_usd_per_hour: float | None = None
    # Why the Workload object itself could not be read (then nothing else here is to be trusted): it is
    # reported on the Workload and never nominated.
    problem: str | None = None
    # The job's checkpoint home, when its owner names one: a job with progress is priced for moving it.
    checkpoint: CheckpointHome | None = None
    # What its owner's optional annotations held that could not be read (each read as unknown, never refused):
    # said on the Workload's Event and in `--once --json`, each starting with the annotation's name.
    warnings: tuple[str, ...] = ()
    # How far the job got (``gpufleet.io/last-durable-step``, ``gpufleet.io/steps-per-hour``): what a move that
    # cannot resume throws away. None: unknown.
    progress: Progress | None = None
    # Hours the Workload was admitted in its previous admit-evict cycles: Kueue's own
    # ``status.accumulatedPastExecutionTimeSeconds`` / 3600 (its workload controller adds each admitted stretch
    # when the Admitted condition turns false). An upper bound on the work a restart from step 0 throws away
    # (it counts start-up and the time since the last checkpoint too), used when the job carries no
    # ``progress``. None: Kueue recorded none (never evicted) or the field could not be read.
    admitted_hours: float | None = None

    @classmethod
    def read(cls, **values: Any) -> HubWorkload:
        """``HubWorkload(**values)`` without the frozen dataclass's ``__init__`` (one ``object.__setattr__`` per field,
        ~30 of them; a snapshot makes one per Workload of a pass): the same fields in the same instance ``__dict__``
        (the defaults for those not given), so equal, hashed and shown alike. TypeError for a name that is not a
        field, or a field without a default left out."""
        if not values.keys() <= _HUB_FIELDS.keys() or not values.keys() >= _HUB_REQUIRED:
            raise TypeError(f"HubWorkload.read: unknown fields {sorted(values.keys() - _HUB_FIELDS.keys())}, missing "
                            f"{sorted(_HUB_REQUIRED - values.keys())}")
        s = object.__new__(cls)
        d = s.__dict__
        d.update(_HUB_FIELDS)
        d.update(values)
        return s

    @classmethod
    def of(cls, values: dict[str, Any]) -> HubWorkload:
        """:meth:`read` of a dict of fields (the snapshot's, one per Workload of a pass, made as a dict literal): the
        same object, without the keyword arguments' dict and the two checks of their names. TypeError for a name that
        is not a field (the instance would hold one more entry); a field left out takes its default (None for one
        without: the snapshot's tests compare every field with the reference's). ``values`` naming every field in
        their order (the snapshot's) becomes the instance's ``__dict__`` itself, as ``__init__`` would have filled
        it: no copy; the caller keeps no reference to it."""
        if len(values) == _HUB_COUNT and list(values) == _HUB_NAMES:
            return from_fields(cls, values)
        s = object.__new__(cls)
        d = s.__dict__
        d.update(_HUB_FIELDS)
        d.update(values)
        if len(d) != len(_HUB_FIELDS):
            raise TypeError(f"HubWorkload.of: unknown fields {sorted(values.keys() - _HUB_FIELDS.keys())}")
        return s

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def request(self) -> Allocatable:
        total = ZERO
        for n in self.needs:
            total = total + n.total
        return total

    def waiting_reason(self) -> str | None:
        """None when the Workload waits for a nomination: quota reserved on the hub, its MultiKueue check
        Pending, no cluster assigned, not being evicted and not finished (Kueue's own condition for
        nominating, ``workload.ShouldSkipClusterNomination`` in v0.19.2); else why not."""
        if self.finished:
            return "finished"
        if self.check is None:
            return "no MultiKueue admission check"
        if not self.quota_reserved:
            return "no quota reserved on the hub"
        if self.evicted:
            return "eviction in progress"
        if self.check_state != "Pending":
            return f"admission check {self.check} is {self.check_state}"
        if self.cluster_name:
            return f"assigned to {self.cluster_name}"
        return None


# Every field of a HubWorkload in order with its default (None for those without one, which HubWorkload.read requires).
_HUB_FIELDS: dict[str, Any] = {f.name: None if f.default is MISSING else f.default for f in fields(HubWorkload)}
_HUB_REQUIRED = frozenset(f.name for f in fields(HubWorkload) if f.default is MISSING)
_HUB_NAMES = list(_HUB_FIELDS)  # HubWorkload.of: a dict of exactly these keys, in this order, is an instance's dict
_HUB_COUNT = len(_HUB_NAMES)
if any(f.default_factory is not MISSING for f in fields(HubWorkload)):  # read() copies defaults: none may be a factory
    raise TypeError("HubWorkload.read cannot copy a default_factory")


@dataclass(frozen=True)
class FlavorState:
    """One flavor of a worker's ClusterQueue: the node pool it selects, its nominal quota and what
    admitted (quota-reserving) workloads hold of it.

    ``lending_limit``: at most this much of the nominal quota is lent to the queue's cohort;
    ``borrowing_limit``: at most this much is borrowed from it (Kueue's per-resource limits; None: the
    flavor sets none, :data:`UNLIMITED` for a resource it leaves out when it sets others)."""

    name: str
    pool: str | None
    nominal: Allocatable
    reserved: Allocatable = ZERO
    lending_limit: Allocatable | None = None
    borrowing_limit: Allocatable | None = None


@dataclass(frozen=True)
class QueuedWorkload:
    """A Workload in a worker's ClusterQueue: pending, or admitted on ``flavors``."""

    namespace: str
    name: str
    priority: int
    gpus: int
    created: float
    admitted: bool = False
    flavors: frozenset[str] = frozenset()
    remaining_hours: float | None = None  # admitted only: expected time left, when known
    hours: float | None = None  # pending only: expected length, when known


@dataclass(frozen=True)
class ClusterQueueState:
    name: str
    flavors: tuple[FlavorState, ...]  # in the queue's order: Kueue tries them one after the other
    workloads: tuple[QueuedWorkload, ...] = ()
    cohort: str | None = None  # spec.cohortName: the queues that lend to and borrow from each other


@dataclass(frozen=True)
class WorkerState:
    """A worker as the dispatcher sees it: its stack outputs (fleet file) and its live queues."""

    key: str
    cluster: ClusterStack | None
    reachable: bool = True
    error: str | None = None
    local_queues: Mapping[tuple[str, str], str] = field(default_factory=dict)  # (namespace, name) -> ClusterQueue
    cluster_queues: Mapping[str, ClusterQueueState] = field(default_factory=dict)


@dataclass(frozen=True)
class Memory:
    """What the dispatcher remembers of a Workload between passes (in memory, keyed by its uid, and on every
    Event it records: :mod:`placement.dispatch.memory`).

    ``since``: when the current nomination started; ``tried``: workers nominated in this round;
    ``first_at``: when the round's first nomination was written (0: none); ``evictions``: the Workload's
    eviction count when last decided; ``noted``: the situation last reported (kind and digest), so an
    unchanged one is not reported again."""

    nominated: tuple[str, ...]
    since: float
    tried: frozenset[str]
    first_at: float
    evictions: int = 0
    noted: str = ""
    ran_on: frozenset[str] = frozenset()  # workers that admitted it (where its progress was made)


@dataclass(frozen=True)
class Settings:
    wait_usd_per_gpu_hour: float = WAIT_USD_PER_GPU_HOUR
    deadline_s: float = ADMISSION_DEADLINE_S
    default_hours: float = DEFAULT_HOURS
    # The user's measured spot rates and speeds (placement.model.calibration.Calibration; issue 26), None: model only.
    calibration: Any = None


@dataclass(frozen=True)
class Pricing:
    """Catalog offers (optionally overlaid with live prices) the engine prices each worker's pools with.

    ``source``: ``catalog``, ``live`` or ``live+catalog``; ``read_at``: when the oldest price in use was read
    (epoch seconds: the oldest live answer, else the catalog's as-of date; None unknown); ``regions``: per
    fleet ``cloud/region`` where its prices come from (live, kept, catalog; :mod:`placement.dispatch.prices`)."""

    offers: tuple[Offer, ...]
    source: str = "catalog"
    read_at: float | None = None
    regions: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class WorkerScore:
    """One worker for one Workload: ``usd`` = ``cost_usd`` (the engine's total on ``pool``) + ``wait_usd``
    (``wait_hours`` × the job's ``usd_per_hour_of_delay`` when its spec sets one, else ``wait_hours`` × its
    GPUs × ``--wait-usd-per-gpu-hour``). ``fits`` False: never nominated, ``reason`` says why."""

    worker: str
    fits: bool
    reason: str = ""
    pool: str | None = None
    capacity: str | None = None
    cost_usd: float = 0.0
    wait_hours: float = 0.0
    wait_usd: float = 0.0
    # Hours until the results are home on this worker: the expected wait plus the engine's ready time
    # (transfer + run with its overhead); ``late``: beyond the job's ``deadline_hours``.
    ready_hours: float = 0.0
    late: bool = False
    # GPUs of ``pool`` the job would take beyond its queue's own free nominal quota: borrowed from another
    # queue of the cohort (the worker's inference queue), which may reclaim them (evicting the job).
    borrowed_gpus: int = 0
    # A job with progress elsewhere: reading its newest checkpoint from its home here, USD (in ``cost_usd``) and
    # hours (in ``ready_hours``); 0 where it ran (its own copy) or when it has no progress.
    move_usd: float = 0.0
    move_hours: float = 0.0
    # The move crosses clouds and the home's stack federates no identity of this worker: the job restarts from
    # step 0 here (``move_case`` restarts). What it throws away is priced instead: ``lost_hours`` of its work (its
    # last durable step over its steps per hour) at this worker's USD per hour of the job, ``lost_usd``, in
    # ``cost_usd`` and ``ready_hours``; None when how far it got is unknown (then ``move_known`` is False).
    restarts: bool = False
    # False: the job has progress to move here but its checkpoint's size (or, restarting, its progress) is
    # unknown, so the move is not counted (``move_usd`` and ``move_hours`` are 0, not its price).
    move_known: bool = True
    # How the job gets its progress here (placement.dispatch.move): same_cloud, federated or restarts; "" where
    # it ran or when it has nothing to move.
    move_case: str = ""
    lost_hours: float | None = None
    lost_usd: float | None = None
    # What ``lost_hours`` comes from: "progress" (the job's last durable step over its steps per hour) or
    # "admitted" (Kueue's accumulated admitted time: an upper bound); "" when not priced.
    lost_from: str = ""

    @property
    def usd(self) -> float:
        return self.cost_usd + self.wait_usd

    @classmethod
    def fitting(cls, worker: str, pool: str, capacity: str, cost_usd: float, wait_hours: float, wait_usd: float,
                ready_hours: float, late: bool, borrowed_gpus: int, move_usd: float, move_hours: float,
                restarts: bool, move_known: bool = True, move_case: str = "", lost_hours: float | None = None,
                lost_usd: float | None = None, lost_from: str = "") -> WorkerScore:
        """A score of a worker that fits: ``WorkerScore(worker, True, "", pool, ...)`` without the frozen
        dataclass's ``__init__`` (one ``object.__setattr__`` per field; the dispatcher makes one per Workload and
        worker): the same fields in the same instance ``__dict__``, so equal and hashed alike."""
        s = object.__new__(cls)
        s.__dict__.update(worker=worker, fits=True, reason="", pool=pool, capacity=capacity, cost_usd=cost_usd,
                          wait_hours=wait_hours, wait_usd=wait_usd, ready_hours=ready_hours, late=late,
                          borrowed_gpus=borrowed_gpus, move_usd=move_usd, move_hours=move_hours, restarts=restarts,
                          move_known=move_known, move_case=move_case, lost_hours=lost_hours, lost_usd=lost_usd,
                          lost_from=lost_from)
        return s


Action = Literal["nominate", "hold", "none"]


@dataclass(frozen=True)
class EventOut:
    """An Event to record on the Workload (``type`` Normal or Warning)."""

    type: str
    reason: str
    message: str


@dataclass(frozen=True)
class Decision:
    """For one waiting Workload: ``nominate`` writes ``clusters`` to ``.status.nominatedClusterNames``;
    ``hold`` keeps the current nomination; ``none`` nominates nothing (``reason`` NoWorkerFits, or
    Unreadable: the Workload or its job spec cannot be read, and it waits)."""

    workload: HubWorkload
    action: Action
    clusters: tuple[str, ...]
    reason: str  # Nominated | Renominated | DeadlinePassed | NoWorkerFits | Waiting | Unreadable
    message: str
    scores: tuple[WorkerScore, ...] = ()
    event: EventOut | None = None
    memory: Memory | None = None  # what to remember once the decision is carried out


@dataclass(frozen=True)
class Admitted:
    """A Workload this dispatcher nominated that a worker has admitted (``seconds`` since the first nomination)."""

    uid: str
    worker: str
    seconds: float


@dataclass(frozen=True)
class PassResult:
    decisions: tuple[Decision, ...]
    admitted: tuple[Admitted, ...] = ()
    keep: frozenset[str] = frozenset()  # uids whose memory is still needed
