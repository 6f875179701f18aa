"""The dispatcher's decision: which worker each waiting hub Workload should be nominated to. Pure.

``decide(workloads, workers, pricing, now, settings, memory)`` scores every worker the Workload's
MultiKueueConfig lists, for every Workload waiting for a nomination, in Kueue's order (priority, then
arrival), and returns one :class:`~placement.dispatch.model.Decision` per Workload.

Score of a worker (USD) = cost + wait:

* **cost**: the placement engine's total (compute with the spot overhead, plus the dataset's egress to
  the worker's region and the outputs back) of the job on the pool Kueue would admit it to: the first
  flavor, in the worker ClusterQueue's order, that the job may use and that has free quota for it now,
  else the first it may use at all;
* **wait**: expected hours until admission (:func:`expected_wait_hours` over the flavors the job may
  use) priced at the job's own ``usd_per_hour_of_delay`` (USD per hour its results are late) when its
  spec sets one, else at its GPUs × ``--wait-usd-per-gpu-hour`` (USD per GPU-hour).

A worker's training queue has its flavors' nominal quota plus what the other queues of its cohort lend
and do not use (:func:`flavor_quota`): on gpufleet's workers, the idle share of each pool its inference
queue owns (``kueue.inferenceShare``). A job admitted on borrowed quota can be evicted when serving
reclaims it; the wait (for admission) does not price that risk, which the dispatcher cannot know: the
Event says how many GPUs the job borrows, and an eviction re-routes the job away from that worker
(:func:`resume`).

A flavor the job may use: its pool is in the fleet file with a shape of an accepted accelerator and a
capacity the job accepts, in the job's fabric group and pool affinity, each pod fits one node, the
flavor's quota with what its cohort can lend (:func:`flavor_quota`'s ``potential``) holds the whole job,
and the engine prices it
(clouds, regions, ``max_usd_per_hour``). A worker without one, outside the Workload's MultiKueueConfig or
the job's group, unreachable, or without the job's LocalQueue, is never nominated. A worker whose expected
wait plus the engine's ready time is past the job's ``deadline_hours`` is never preferred over one that meets
it; then ties go to the lower score, the lower cost, the worker key. Workloads nominated earlier in the pass
count as backlog for later ones. A Workload or job spec that cannot be read (or names a field this version
does not know) is never nominated nor guessed: it waits, with an ``Unreadable`` Event.

Why one module: the score above is one computation over one pass's state (backlog, flavor quotas, memoised costs and
fits) that every function here shares; it is pure and tested whole against a frozen reference
(``tests/placement/dispatch/reference_decide.py``). The Kubernetes side is :mod:`placement.dispatch.controller`.
"""

from __future__ import annotations

import bisect
import hashlib
import heapq
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, fields, replace
from itertools import compress, repeat
from typing import Any, NamedTuple, TypeVar

from placement.dispatch.model import (
    Admitted,
    CheckpointHome,
    ClusterQueueState,
    Decision,
    EventOut,
    FlavorState,
    HubWorkload,
    Memory,
    PassResult,
    Pricing,
    QueuedWorkload,
    Settings,
    WorkerScore,
    WorkerState,
)
from placement.dispatch.move import (
    FEDERATED,
    FROM_ANNOTATION,
    LAST_DURABLE_STEP,
    NO_MOVE,
    STEPS_PER_HOUR,
    Move,
    federated,
    home_worker,
    lost_progress,
    move,
)
from placement.fleet.choose import SINGLE_NODE
from placement.fleet.durable import SIZE_FROM_MODEL
from placement.fleet.stacks import Pool
from placement.model.bill import bill_book, nat_usd
from placement.model.catalog import Offer
from placement.model.contract import Progress
from placement.model.egress import egress_book
from placement.model.jobspec import JobSpec, job_with
from placement.model.kueue import Allocatable, allocatable
from placement.model.shapes import shape_book
from placement.plan.job import Plan, data_hours, egress_cost, plan, runnable_figures

NOMINATED, RENOMINATED, DEADLINE, NO_FIT, WAITING, ADMITTED, UNREADABLE = (
    "Nominated", "Renominated", "DeadlinePassed", "NoWorkerFits", "Waiting", "Admitted", "Unreadable")


class Backlog:
    """Pending work Kueue admits before a job, in its order: ``(gpus, hours)`` segments with running sums, so
    the GPU-hours of its first ``n`` GPUs come from a bisection rather than a walk."""

    def __init__(self, entries: Iterable[tuple[int, float]] = ()) -> None:
        self.gpus = [0]
        self.work = [0.0]
        self.hours: list[float] = []
        for g, h in entries:
            self.add(g, h)

    def add(self, gpus: int, hours: float) -> None:
        self.gpus.append(self.gpus[-1] + gpus)
        self.work.append(self.work[-1] + gpus * hours)
        self.hours.append(hours)

    @property
    def total(self) -> int:
        return self.gpus[-1]

    def work_of_first(self, n: float) -> float:
        """GPU-hours of the first ``n`` GPUs of the backlog (a job cut part-way counts pro rata)."""
        if n <= 0:
            return 0.0
        i = bisect.bisect_left(self.gpus, n)
        if i >= len(self.gpus):
            return self.work[-1]
        return self.work[i - 1] + (n - self.gpus[i - 1]) * self.hours[i - 1]


def expected_wait_hours(nominal: int, used: int, ahead: Sequence[tuple[int, float]] | Backlog, need: int,
                        releases: Iterable[tuple[int, float]], default_hours: float) -> float:
    """Hours until ``need`` GPUs are free for the job in flavors with ``nominal`` GPUs of quota.

    ``used``: GPUs admitted workloads hold there; ``releases``: ``(gpus, hours left)`` of those running
    workloads (held GPUs no release accounts for end after ``default_hours``); ``ahead``: ``(gpus, hours)``
    of the pending workloads Kueue admits first (higher priority, or equal priority and queued earlier), in
    that order. The job starts once ``deficit = ahead GPUs + need + used - nominal`` GPUs have been
    released: no wait when the deficit is not positive; else the time at which the running workloads, in
    the order they end, have released it; when even all of them do not cover it, the backlog itself must
    run first: the last end plus the GPU-hours of the first ``deficit - released`` GPUs of the backlog
    spread over the ``nominal`` GPUs. More backlog (a workload ahead, more GPUs needed or held) never
    lowers the wait.
    """
    backlog = ahead if isinstance(ahead, Backlog) else Backlog(ahead)
    return Releases.of(used, releases, default_hours).wait(nominal, backlog, need)


class Releases:
    """The running workloads of some flavors in the order they end, ready for :meth:`wait`: ``ends``
    ``(gpus, hours left)`` sorted by hours (held GPUs no release accounts for end after the default hours),
    ``freed`` their running GPU sums, ``used`` the GPUs held. Built once per worker and job shape in a pass,
    then asked for the wait of each Workload of that shape."""

    def __init__(self, ends: Sequence[tuple[int, float]], used: int) -> None:
        self.ends = tuple(ends)
        self.used = used
        freed, self.freed = 0, []
        for g, _ in self.ends:
            freed += g
            self.freed.append(freed)
        # The last end (0 if none), as a walk over ``ends`` that starts at 0 and keeps the maximum finds it.
        self.last = max([0.0, *(h for _, h in self.ends)])

    @classmethod
    def of(cls, used: int, releases: Iterable[tuple[int, float]], default_hours: float) -> Releases:
        rel = sorted(releases, key=lambda r: r[1])
        known = sum(g for g, _ in rel)
        if used > known:
            bisect.insort(rel, (used - known, default_hours), key=lambda r: r[1])
        return cls(rel, max(used, known))

    def wait(self, nominal: int, backlog: Backlog, need: int) -> float:
        """:func:`expected_wait_hours` for ``need`` GPUs behind ``backlog`` in ``nominal`` GPUs of quota."""
        deficit = backlog.total + need + self.used - nominal
        if deficit <= 0:
            return 0.0
        i = bisect.bisect_left(self.freed, deficit)
        if i < len(self.freed):
            return max(self.ends[i][1], 0.0)
        return self.last + backlog.work_of_first(deficit - (self.freed[-1] if self.freed else 0)) / max(nominal, 1)


@dataclass(frozen=True)
class _Usable:
    """A flavor of a worker a job shape may use before pricing: its pool, quota and the offer that prices it."""

    flavor: FlavorState
    pool: Pool
    quota: FlavorQuota
    offer: Offer

    @property
    def priced_as(self) -> tuple[int, str]:
        """Its key among a plan's runnable candidates (:func:`runnable_figures`)."""
        return (id(self.offer), self.pool.capacity)


class _Costs:
    """The engine's price of a job on every fleet pool, computed once per distinct job spec."""

    def __init__(self, pricing: Pricing, workers: Sequence[WorkerState], calibration: Any = None) -> None:
        index: dict[tuple[str, str, str], list[Offer]] = defaultdict(list)
        for o in pricing.offers:
            index[(o.cloud, o.region, o.instance_type)].append(o)
        self.pool_offer: dict[tuple[str, str], Offer] = {}
        for w in workers:
            cl = w.cluster
            if cl is None:
                continue
            for p in cl.pools:
                offers = index.get((cl.cloud, cl.region, p.instance_type), [])
                exact = [o for o in offers if o.zone == p.zone]
                # AWS stacks export zone IDs, some catalogs zone names: then the region's dearest zone stands in.
                pick = exact[0] if exact else max(offers, key=lambda o: (o.price or 0.0, o.spot_price or 0.0),
                                                  default=None)
                if pick is not None:
                    self.pool_offer[(w.key, p.name)] = pick
        self.offers = tuple({id(o): o for o in self.pool_offer.values()}.values())
        self.calibration = calibration
        if calibration is not None:  # measured spot rates on the pools' offers (the live rate is their prior)
            from placement.model.calibration import calibrated_offers

            swap = dict(zip(map(id, self.offers), calibrated_offers(calibration, self.offers,
                                                                    JobSpec.interruptions_per_hour), strict=True))
            self.pool_offer = {k: swap[id(o)] for k, o in self.pool_offer.items()}
            self.offers = tuple(swap.values())
        # By the job (or the key :meth:`of` was given), and by its dry job (or that key's): :meth:`of`.
        self._memo: dict[object, _Priced] = {}
        self._dry: dict[object, _Priced] = {}
        self._moves: dict[tuple[object, ...], dict[tuple[str, str], tuple[float, float, float] | None]] = {}

    def _plan(self, job: JobSpec) -> Plan:
        if self.calibration is not None:
            from placement.model.calibration import calibrated_job

            return plan(calibrated_job(self.calibration, job), self.offers)
        return plan(job, self.offers)

    def of(self, job: JobSpec, key: tuple[object, ...] | None = None) -> _Priced:
        """The engine's candidates for ``job``. Its name prices nothing, so Workloads that differ only in their
        names share one plan (callers pass the job under :func:`_cost_key`). A job whose data is all that sets
        it apart from others (:func:`_dry_job`) shares their plan, with its data's moves added per region
        (:meth:`_with_data`): the same candidates are excluded, for the same reasons.

        ``key``: the job's fields but the name, in their order, its dataset by any id equal for equal datasets
        (:meth:`_Pass.ask`): equal only for equal jobs, and hashed and compared in C rather than by the dataclass's
        methods over ~50 fields (the plans are memoised by it, and its dry job's by it with the data cleared)."""
        plain = key is None or len(key) != _JOB_FIELD_COUNT - 1
        hit = self._memo.get(job if plain else key)
        if hit is None:
            dry = _dry_job(job) if self.calibration is None else None
            dry_key: object = dry
            if dry is not None and not plain:
                cleared = list(key)  # type: ignore[arg-type]
                cleared[_JOB_DATASET - 1], cleared[_JOB_OUTPUTS - 1], cleared[_JOB_THROUGHPUT - 1] = None, 0.0, ()
                dry_key = tuple(cleared)
            base = None if dry is None else self._dry.get(dry_key)
            if dry is not None and base is None:
                base = self._dry[dry_key] = _Priced({}, plan(dry, self.offers))
            figures = None if base is None else self._with_data(job, base)
            if base is None or figures is None:
                p = self._plan(job)
                hit = _Priced(runnable_figures(p), p)
            else:
                hit = _Priced(figures, base.plan, base)
            self._memo[job if plain else key] = hit
        return hit

    def _data_moves(self, job: JobSpec, cloud: str, region: str) -> tuple[float, float, float] | None:
        """(dataset in + outputs back USD, NAT USD, transfer hours) of ``job``'s data for a pool in ``cloud``/
        ``region``, as the engine's plan computes them; None when the transfer takes no finite time (the engine
        then excludes the pool)."""
        ds = job.dataset
        assert ds is not None
        book = egress_book()
        eg_in, eg_out = egress_cost(job, cloud, region, book)
        hours = data_hours(job, cloud, region, book)
        if not math.isfinite(hours):
            return None
        nat = nat_usd(bill_book(), cloud, region, ds.cloud, ds.region, ds.size_gb + job.outputs_gb)
        return eg_in + eg_out, nat, hours

    def _with_data(self, job: JobSpec, base: _Priced) -> dict[tuple[int, str], tuple[float, float]] | None:
        """:func:`runnable_figures` of ``job`` from the plan of its :func:`_dry_job` (``base``): each runnable
        candidate's total with the data's egress and NAT added as the engine's ``Terms`` sums them
        (``eg_in + eg_out``, then ``+= nat + checkpoint storage + requests``), its ready hours after the
        transfer. Exact for a job without a deadline, a price of delay or reservations (whose exclusions
        and delay depend on the ready time): None for those, and when a transfer takes no finite time. The
        moves are memoised per data (dataset, outputs, throughput) and region."""
        moves = self._moves.setdefault((job.dataset, job.outputs_gb, job.throughput_gbps), {})
        out: dict[tuple[int, str], tuple[float, float]] = {}
        for where, rows in base.by_region().items():
            if where not in moves:
                moves[where] = self._data_moves(job, *where)
            moved = moves[where]
            if moved is None:
                return None
            egress, nat, hours = moved
            for key, compute, ready_h, ck_store, ck_req in rows:
                # eg = egress; eg += nat + ck_store + ck_req; total = compute + eg + 0.0: the same sums, in that order.
                out[key] = (compute + (egress + (nat + ck_store + ck_req)) + 0.0, hours + ready_h)
        return out


def _dry_job(job: JobSpec) -> JobSpec | None:
    """``job`` without its data, when its plan then differs from the job's only by each region's data moves
    (:meth:`_Costs._with_data`): a job with a dataset and no deadline nor price of delay (with one, the
    transfer time decides exclusions and adds delay). None otherwise."""
    if job.dataset is None or job.deadline_hours is not None or job.usd_per_hour_of_delay:
        return None
    return job_with(job, dataset=None, outputs_gb=0.0, throughput_gbps=())


def _cost_key(job: JobSpec) -> JobSpec:
    """``job`` as the engine prices it: without its name (nothing in a plan's figures depends on it)."""
    return job_with(job, name="") if job.name else job


class _Priced:
    """One job's candidates by (offer, capacity): the runnable ones at once, why the others are excluded on
    first need (building every excluded candidate is most of a plan's cost), from ``plan``: the job's own,
    or the one of its :func:`_dry_job`, whose exclusions are the job's."""

    def __init__(self, runnable: dict[tuple[int, str], tuple[float, float]], plan: Plan,
                 shared: _Priced | None = None) -> None:
        self.runnable = runnable  # (offer id, capacity) -> (total USD, ready hours)
        self.plan = plan
        self._shared = shared  # the dry job's, when ``plan`` is its: one table of exclusions for all its jobs
        self._excluded: dict[tuple[int, str], str] | None = None
        self._by_region: dict[tuple[str, str], list[tuple[tuple[int, str], float, float, float, float]]] | None = None

    def by_region(self) -> dict[tuple[str, str], list[tuple[tuple[int, str], float, float, float, float]]]:
        """The runnable candidates of ``plan`` by (cloud, region): (key as in ``runnable``, compute USD, ready
        hours, checkpoint storage USD, checkpoint requests USD) each, for :meth:`_Costs._with_data`."""
        if self._by_region is None:
            self._by_region = defaultdict(list)
            for r in self.plan.rows:
                offer, t = r[10], r[11]
                self._by_region[(offer.cloud, offer.region)].append(((id(offer), str(t.capacity)), r[14], r[15],
                                                                     t.ck_store, t.ck_req))
        return self._by_region

    def excluded(self, key: tuple[int, str]) -> str:
        if self._shared is not None:
            return self._shared.excluded(key)
        if self._excluded is None:
            self._excluded = {(id(c.offer), str(c.capacity)): str(c.excluded) for c in self.plan.excluded}
        return self._excluded.get(key, "not priced")


def _fits(a: Allocatable, b: Allocatable) -> bool:
    return a.cpu_millis <= b.cpu_millis and a.memory_mib <= b.memory_mib and a.gpus <= b.gpus and a.efa <= b.efa


def _minus(a: Allocatable, b: Allocatable) -> Allocatable:
    return Allocatable(a.cpu_millis - b.cpu_millis, a.memory_mib - b.memory_mib, a.gpus - b.gpus, a.efa - b.efa)


def _each(fn: Callable[..., int], *xs: Allocatable) -> Allocatable:
    """``fn`` applied resource by resource (Kueue accounts every flavor-resource pair on its own)."""
    # The fields in order, as dataclasses.astuple lists them (without its deep copy of each int).
    return Allocatable(*(fn(*vals) for vals in zip(*((x.cpu_millis, x.memory_mib, x.gpus, x.efa, x.hugepages_mib)
                                                      for x in xs), strict=True)))


@dataclass(frozen=True)
class FlavorQuota:
    """What one flavor of a ClusterQueue can hold, with the quota its cohort lends (Kueue's accounting).

    ``potential``: the most it could ever hold, its cohort idle (a job above it is never admitted there:
    Kueue's ``PotentialAvailable``, the "exceeds max quota" check); ``available``: what it can admit now
    without preempting (``Available``). ``potential - available`` is held: by the queue's own workloads and
    by the other queues' use of what they lend."""

    potential: Allocatable
    available: Allocatable


def flavor_quota(cq: ClusterQueueState, flavor: FlavorState, queues: Iterable[ClusterQueueState]) -> FlavorQuota:
    """The quota ``cq`` has on ``flavor``: its own nominal quota plus what the other queues of its cohort lend
    and do not use, per Kueue v0.19.2 (``pkg/cache/scheduler/resource_node.go``) for a cohort of
    ClusterQueues with no Cohort object above it (``queues``: every ClusterQueue of the worker).

    Each queue ``c`` of the cohort puts ``lendable(c) = min(nominal, lendingLimit)`` of a flavor-resource in
    the cohort and keeps ``local(c) = nominal - lendable(c)`` to itself. The cohort holds ``Q = sum
    lendable`` and its usage is ``U = sum max(0, used(c) - local(c))``. Then for ``cq`` (``t``):
    ``available = max(0, local(t) - used(t)) + min(Q - U, lendable(t) - max(0, used(t) - local(t)) +
    borrowingLimit(t))`` and ``potential = min(local(t) + Q, nominal(t) + borrowingLimit(t))`` (no
    borrowing limit: no ``min``). A queue without a cohort has its nominal quota alone.

    On gpufleet's workers the training queue (no limits) thus reaches the pool's whole quota: its own
    nominal quota plus the inference queue's idle share (``inferenceShare``), which the inference queue lends
    (no lending limit) and reclaims when serving needs it. A Cohort object's own quota, or a cohort tree,
    is not read: what it could lend is left out (the dispatcher then errs towards "does not fit")."""
    members = [c for c in queues if cq.cohort is not None and c.cohort == cq.cohort and c.name != cq.name]
    if cq.cohort is None:
        return FlavorQuota(flavor.nominal, _each(lambda n, u: max(0, n - u), flavor.nominal, flavor.reserved))
    same = [f for c in members for f in c.flavors if f.name == flavor.name]

    def lendable(f: FlavorState) -> Allocatable:
        return f.nominal if f.lending_limit is None else _each(min, f.nominal, f.lending_limit)

    own_lend = lendable(flavor)
    local = _minus(flavor.nominal, own_lend)
    pool = own_lend
    usage = _each(lambda u, lo: max(0, u - lo), flavor.reserved, local)
    for f in same:
        lend = lendable(f)
        pool = pool + lend
        usage = usage + _each(lambda u, n, ln: max(0, u - (n - ln)), f.reserved, f.nominal, lend)
    in_parent = _each(lambda u, lo: max(0, u - lo), flavor.reserved, local)
    parent = _minus(pool, usage)
    potential = local + pool
    if flavor.borrowing_limit is not None:
        limit = flavor.borrowing_limit
        parent = _each(lambda p, ln, up, b: min(p, ln - up + b), parent, own_lend, in_parent, limit)
        potential = _each(lambda p, n, b: min(p, n + b), potential, flavor.nominal, limit)
    available = _each(lambda lo, u, p: max(0, max(0, lo - u) + p), local, flavor.reserved, parent)
    return FlavorQuota(potential, available)


def synthetic_job(wl: HubWorkload, default_hours: float) -> JobSpec:
    """For a Workload whose owner recorded no job spec: its GPUs on any accelerator, no data, ``default_hours``."""
    return JobSpec(name=wl.name[:63] or "workload", accelerators=tuple(sorted(shape_book().accelerators())),
                   gpus=max(wl.request.gpus, 1), hours=default_hours)


class _Queues:
    """Per worker ClusterQueue: the pending workloads by priority (for the backlog ahead) and the running ones."""

    def __init__(self, cq: ClusterQueueState, default_hours: float) -> None:
        self.names: dict[tuple[str, str], QueuedWorkload] = {}
        by_prio: dict[int, list[QueuedWorkload]] = defaultdict(list)
        self.running: list[QueuedWorkload] = []
        for q in cq.workloads:
            self.names[(q.namespace, q.name)] = q
            if q.admitted:
                self.running.append(q)
            else:
                by_prio[q.priority].append(q)
        self.running_keys = frozenset((q.namespace, q.name) for q in self.running)
        self.prios = sorted(by_prio, reverse=True)
        self.created: dict[int, list[float]] = {}
        self.rows: dict[int, list[tuple[int, float]]] = {}
        for p, rows in by_prio.items():
            rows.sort(key=lambda q: (q.created, q.namespace, q.name))
            self.created[p] = [q.created for q in rows]
            self.rows[p] = [(q.gpus, q.hours if q.hours is not None else default_hours) for q in rows]
        # (priority, pending rows of that priority ahead) -> [virtual additions seen, the backlog then].
        self._ahead: dict[tuple[int, int], tuple[int, Backlog]] = {}

    def ahead(self, wl: HubWorkload, virtual: Mapping[int, list[tuple[int, float]]],
              added: Sequence[tuple[int, int, float]] = ()) -> Backlog:
        """What Kueue admits before ``wl`` (BestEffortFIFO: priority, then creation): this queue's pending
        workloads, then those nominated here in this pass and not yet copied, priority by priority.

        ``added``: every ``(priority, GPUs, hours)`` put in ``virtual`` so far, in order. The backlog of a
        (priority, place in it) is kept: a Workload nominated since at that same priority only extends it (it
        comes last), one of a lower priority does not change it; one of a higher priority rebuilds it."""
        own = self.names.get((wl.namespace, wl.name)) if self.names else None
        prio = wl.priority
        rows = self.rows.get(prio, [])
        # A Workload not (or no longer pending) in this queue comes after all of its priority.
        cut = (len(rows) if own is None or own.admitted or not rows
               else bisect.bisect_left(self.created[prio], own.created))
        hit = self._ahead.get((prio, cut))
        if hit is not None:
            seen, backlog = hit
            if seen == len(added):  # nothing nominated here since
                return backlog
            for p, g, h in added[seen:]:
                if p > prio:
                    break
                if p == prio:
                    backlog.add(g, h)
            else:
                self._ahead[(prio, cut)] = (len(added), backlog)
                return backlog
        backlog = Backlog()
        for p in sorted(set(self.prios) | set(virtual), reverse=True):
            if p < prio:
                break
            rows = self.rows.get(p, [])
            if p == prio and rows:
                rows = rows[:cut]
            for g, h in rows:
                backlog.add(g, h)
            for g, h in virtual.get(p, ()):
                backlog.add(g, h)
        self._ahead[(prio, cut)] = (len(added), backlog)
        return backlog


class _Ask(NamedTuple):
    """What one Workload asks of every worker, worked out once per pass: its job (or the synthetic one), what it
    requests, the id of its shape (Workloads of one shape get the same answer from a worker, but for their
    place in its queue) and the price of an hour of its waiting. (A named tuple: one is made per Workload.)"""

    job: JobSpec
    cost_key: JobSpec  # the job as the engine prices it (:func:`_cost_key`)
    request: Allocatable
    shape: int
    place: int  # the id of what decides which flavors of a worker it may use (not its price)
    wait_usd_per_hour: float


class _Fit(NamedTuple):
    """What a worker offers a job shape, the same for every Workload of that shape in a pass: the flavor Kueue
    would admit it to (``pool``, ``capacity``, the engine's cost and ready hours there), the GPUs it borrows,
    and the quota and running work of the flavors it may use (for the wait). A named tuple: one is made per
    job shape and worker, the cheapest record to build."""

    cq: ClusterQueueState
    queues: _Queues
    pool: str
    capacity: str
    cost_usd: float
    ready_hours: float
    borrowed: int
    nominal: int
    releases: Releases
    # For a Workload that is itself one of the running ones (left out of its own releases): the raw figures.
    used: int
    running: tuple[tuple[tuple[str, str], int, float], ...]


# (index of the landing flavor, GPUs borrowed there, nominal GPUs, releases, GPUs held, running workloads).
_Landing = tuple[int, int, int, Releases, int, tuple[tuple[tuple[str, str], int, float], ...]]


class _Pass:
    def __init__(self, workers: Sequence[WorkerState], pricing: Pricing, now: float, settings: Settings) -> None:
        self.workers = {w.key: w for w in workers}
        self.costs = _Costs(pricing, workers, settings.calibration)
        self.now = now
        self.settings = settings
        self.book = shape_book()
        self.queues: dict[tuple[str, str], _Queues] = {}
        # Per (worker, ClusterQueue, flavor): the worker's queues do not change during a pass.
        self.quotas: dict[tuple[str, str, str], FlavorQuota] = {}
        # Workloads nominated to a worker whose copy it does not list yet: worker -> priority -> (GPUs, hours),
        # and in the order they were added: worker -> (priority, GPUs, hours).
        self.virtual: dict[str, dict[int, list[tuple[int, float]]]] = defaultdict(lambda: defaultdict(list))
        self.added: dict[str, list[tuple[int, int, float]]] = defaultdict(list)
        self.asks: dict[int, _Ask] = {}  # by the id() of the HubWorkload, which the pass's caller holds
        # Per shape: its id, the job as the engine prices it, the id of its place and what it requests (:meth:`ask`).
        self.shapes: dict[tuple[object, ...], tuple[int, JobSpec, int, Allocatable]] = {}
        self.places: dict[tuple[object, ...], int] = {}
        # Values by an id equal for equal values, and that id by the id() of each object seen (:meth:`canonical`).
        self.canon: dict[object, int] = {}
        self.job_keys: list[tuple[object, ...]] = []  # per shape: its job's key (:meth:`_Costs.of`)
        self.by_id: dict[int, int] = {}
        # Per shape and list of workers: what each offers the shape, in that order (:meth:`row`).
        self.rows: dict[tuple[int, tuple[str, ...]], tuple[_Fit | WorkerScore, ...]] = {}
        # The scores of a pass (frozen) shared by the Workloads that get the same one: by (id of the fit, price of an
        # hour of waiting), then wait hours, for those with no move (the fit's shape sets the deadline), each with its
        # rank key; beside them the fields those scores share and the fit's cost as the rank key rounds it.
        self.made: dict[tuple[int, float], _Made] = {}
        # Every (namespace, name) a worker's queue lists: a Workload outside it is listed by no row (:meth:`is_listed`).
        self.copied = frozenset((q.namespace, q.name) for w in workers for cq in w.cluster_queues.values()
                                for q in cq.workloads)
        # Every worker a Workload was added to (:meth:`add_virtual`), in order: the workers whose backlog grew
        # since a tally was made are those of its tail.
        self.log: list[str] = []
        self.last: dict[str, int] = {}  # each worker's last place in :attr:`log`
        # Per (id of a row, priority, price of waiting): the scores of the row's workers when last scored, and
        # how long :attr:`log` was then (:meth:`ranked_scores`).
        self.tallies: dict[tuple[int, int, float], _Tally] = {}
        # Per id of a row: its places where a worker fits, those by worker, and their workers (:meth:`spots_of`).
        self.spots: dict[int, tuple[list[int], dict[str, list[int]], list[str]]] = {}
        self.listed: dict[int, frozenset[tuple[str, str]]] = {}
        self.priced: dict[int, _Priced] = {}  # by shape (:attr:`_Ask.shape`)
        self.landings: dict[tuple[int, str, tuple[bool, ...]], _Landing] = {}
        self.usable: dict[tuple[int, str], tuple[ClusterQueueState, tuple[_Usable | str, ...]] | WorkerScore] = {}
        # By what decides the flavors (:attr:`_Ask.place`), then worker: :meth:`_place`.
        self.by_place: dict[int, dict[str, Any]] = {}
        self.releases: dict[tuple[str, str, frozenset[str]], tuple[Releases, int, tuple[tuple[tuple[str, str],
                                                                                           int, float], ...]]] = {}
        self.nodes: dict[str, Allocatable] = {}
        self.unfit: dict[tuple[int, str, int], WorkerScore] = {}
        self.moves: dict[tuple[object, ...], Move] = {}
        self.owners: dict[CheckpointHome, WorkerState | None] = {}  # each home's worker (:func:`home_worker`)
        # The wait of a Workload no queue lists, by (priority, GPUs), then the id in :attr:`queued` of the worker's
        # queues, releases and nominal GPUs of the flavors it may land on: [the worker's last place in :attr:`log`
        # then, hours].
        self.waits: dict[tuple[int, int], dict[int, list[Any]]] = {}
        # The id of each (id of a worker's queues, id of the releases, nominal GPUs) of the flavors a fit may land on
        # (the second key of :attr:`waits`), and per (id of a row, price of waiting) what :meth:`_plan_of`
        # reads of each place where a worker fits: (the place, the worker, its scores by wait, its _Made, that id).
        self.queued: dict[tuple[int, int, int], int] = {}
        self.parts: dict[tuple[int, float], list[tuple[int, str, dict[float, Any], _Made, int]]] = {}

    def queues_of(self, worker: str, cq: ClusterQueueState) -> _Queues:
        q = self.queues.get((worker, cq.name))
        if q is None:
            q = self.queues[(worker, cq.name)] = _Queues(cq, self.settings.default_hours)
        return q

    def add_virtual(self, wl: HubWorkload, worker: str) -> None:
        w = self.workers.get(worker)
        if w is None:
            return
        own = (wl.namespace, wl.name)
        if own in self.copied:  # else no queue of any worker lists it (the commonest case: nothing to look up)
            cq_name = w.local_queues.get((wl.namespace, wl.queue_name))
            cq = w.cluster_queues.get(cq_name or "")
            if cq is not None and own in self.queues_of(worker, cq).names:
                return  # Kueue has copied it there already: the worker's own list counts it
        ask = self.ask(wl)
        row = (ask.request.gpus, ask.job.hours)
        self.virtual[worker][wl.priority].append(row)
        self.added[worker].append((wl.priority, *row))
        self.last[worker] = len(self.log)
        self.log.append(worker)

    def job_of(self, wl: HubWorkload) -> JobSpec:
        return self.ask(wl).job

    def ask(self, wl: HubWorkload) -> _Ask:
        hit = self.asks.get(id(wl))
        if hit is None:
            job = wl.job if wl.job is not None else synthetic_job(wl, self.settings.default_hours)
            # The job as the engine prices it (:func:`_cost_key`) as its fields but the name, in their order: equal
            # exactly when those jobs are (a JobSpec's __eq__ compares the same tuple), and hashed and compared in C
            # rather than by the dataclass's own methods over ~50 fields, once per Workload.
            # Its dataset and the per-pod resources of a Workload's one pod set (their dataclasses hash and compare in
            # Python) by their ids in :attr:`canon`: equal exactly when they are (:meth:`canonical`).
            attrs = job.__dict__
            values = tuple(attrs.values())
            if len(values) == _JOB_FIELD_COUNT and next(iter(attrs)) == "name":
                ds = values[_JOB_DATASET]
                if ds is not None:
                    canon = self.by_id.get(id(ds))  # self.canonical(ds), its commonest case without a call
                    job_key = values[1:_JOB_DATASET] + (self.canonical(ds) if canon is None else canon,) + values[
                        _JOB_DATASET + 1:]
                else:
                    job_key = values[1:]
            else:
                job_key = (_cost_key(job),)
            needs = wl.needs
            if len(needs) == 1:  # Need's __eq__ compares (name, count, per_pod, pools): this tuple does
                n = needs[0]
                canon = self.by_id.get(id(n.per_pod))  # self.canonical(n.per_pod), without a call when known
                needs_key: tuple[object, ...] = (n.name, n.count, self.canonical(n.per_pod) if canon is None else canon,
                                                 n.pools)
            else:
                needs_key = needs  # never equal to the one above: a Need is no str
            shape = (job_key, needs_key, wl.group, wl.group_workers, wl.namespace, wl.queue_name)
            known = self.shapes.get(shape)
            if known is None:
                # What follows from the shape: worked out for its first Workload (every other's is equal).
                place = (needs_key, wl.group, wl.group_workers, wl.namespace, wl.queue_name, job.accelerators,
                         job.capacities(), job.allow_clouds, job.deny_clouds, job.allow_regions, job.deny_regions)
                pid = self.places.setdefault(place, len(self.places))
                self.job_keys.append(job_key)
                known = self.shapes[shape] = (len(self.shapes), _cost_key(job), pid, wl.request)
            sid, cost_key, pid, request = known
            price = (wl.delay_usd_per_hour if wl.delay_usd_per_hour is not None
                     else request.gpus * self.settings.wait_usd_per_gpu_hour)  # wait_usd_per_hour(wl, settings)
            hit = self.asks[id(wl)] = _new_tuple(_Ask, (job, cost_key, request, sid, pid, price))
        return hit

    def canonical(self, value: object) -> int:
        """An id of ``value`` equal for equal values, looked up by its ``id()`` (``value`` is held by a Workload the
        pass's caller holds, or by its :attr:`asks`) before hashing it."""
        at = id(value)
        hit = self.by_id.get(at)
        if hit is None:
            hit = self.by_id[at] = self.canon.setdefault(value, len(self.canon))
        return hit

    def _flavor_reason(self, wl: HubWorkload, ask: _Ask, f: FlavorState, quota: FlavorQuota,
                       pools: Mapping[str, Pool]) -> tuple[str | None, Pool | None]:
        job = ask.job
        pool = pools.get(f.pool or "")
        if pool is None:
            return f"flavor {f.name}: pool {f.pool} not in the fleet file", None
        for n in wl.needs:
            if n.pools is not None and pool.name not in n.pools:
                return f"pool {pool.name} outside the job's pool affinity", None
        shape = self.book.get(pool.instance_type)
        if shape is None:
            return f"pool {pool.name}: unknown instance type {pool.instance_type}", None
        if shape.accelerator not in job.accelerators:
            return f"pool {pool.name}: {shape.accelerator} not accepted", None
        if pool.capacity not in job.capacities():
            return f"pool {pool.name}: {pool.capacity} not accepted", None
        if wl.group and wl.group != SINGLE_NODE and shape.fabric != wl.group:
            return f"pool {pool.name}: fabric {shape.fabric}, the job needs {wl.group}", None
        node = self.nodes.get(shape.name)
        if node is None:
            node = self.nodes[shape.name] = allocatable(shape)
        for n in wl.needs:
            if not _fits(n.per_pod, node):
                return f"pool {pool.name}: a {n.name} pod does not fit one {shape.name} node", None
        if not _fits(ask.request, quota.potential):
            # Kueue's "exceeds max quota": never admitted there, however long the job waits.
            lent = quota.potential.gpus - f.nominal.gpus
            return (f"flavor {f.name}: at most {quota.potential.gpus} GPUs (nominal quota {f.nominal.gpus}"
                    + (f" + {lent} its cohort lends" if lent > 0 else "")
                    + f") cannot hold the job's {ask.request.gpus}"), None
        return None, pool

    def _usable(self, wl: HubWorkload, ask: _Ask, worker: str
                ) -> tuple[ClusterQueueState, tuple[_Usable | str, ...]] | WorkerScore:
        """The worker's ClusterQueue for ``wl`` and, flavor by flavor in its order, what ``wl``'s shape may use
        (or why not), memoised per worker and what decides it (:attr:`_Ask.place`); or why no flavor at all."""
        key = (ask.place, worker)
        hit = self.usable.get(key)
        if hit is not None:
            return hit
        out: tuple[ClusterQueueState, tuple[_Usable | str, ...]] | WorkerScore
        if wl.group_workers is not None and worker not in wl.group_workers:
            out = WorkerScore(worker, False, f"not in the job's {wl.group or 'fabric'} group")
        elif (w := self.workers.get(worker)) is None or w.cluster is None:
            out = WorkerScore(worker, False, "not in the fleet file")
        elif not w.reachable:
            out = WorkerScore(worker, False, f"unreachable: {w.error or 'no answer'}")
        elif (cq_name := w.local_queues.get((wl.namespace, wl.queue_name))) is None:
            out = WorkerScore(worker, False, f"no LocalQueue {wl.queue_name} in {wl.namespace}")
        elif (cq := w.cluster_queues.get(cq_name)) is None:
            out = WorkerScore(worker, False, f"ClusterQueue {cq_name} not found")
        elif reason := ask.job.allows(w.cluster.cloud, w.cluster.region):
            out = WorkerScore(worker, False, reason)
        else:
            pools = {p.name: p for p in w.cluster.pools}
            flavors: list[_Usable | str] = []
            for f in cq.flavors:
                quota = self.quotas.get((worker, cq.name, f.name))
                if quota is None:
                    quota = self.quotas[(worker, cq.name, f.name)] = flavor_quota(cq, f, w.cluster_queues.values())
                why, pool = self._flavor_reason(wl, ask, f, quota, pools)
                if why is not None or pool is None:
                    flavors.append(str(why))
                    continue
                offer = self.costs.pool_offer.get((worker, pool.name))
                if offer is None:
                    flavors.append(f"pool {pool.name}: no catalog price for {pool.instance_type} in "
                                   f"{w.cluster.region}")
                    continue
                flavors.append(_Usable(f, pool, quota, offer))
            out = (cq, tuple(flavors))
        self.usable[key] = out
        return out

    def _releases(self, worker: str, cq: ClusterQueueState, names: frozenset[str]
                  ) -> tuple[Releases, int, tuple[tuple[tuple[str, str], int, float], ...]]:
        """The running work of the flavors ``names`` of a worker's queue, ready for the wait: (releases, GPUs
        held, the running workloads), memoised per worker, queue and flavors."""
        key = (worker, cq.name, names)
        hit = self.releases.get(key)
        if hit is None:
            default = self.settings.default_hours
            running = tuple(((q.namespace, q.name), q.gpus, q.remaining_hours if q.remaining_hours is not None
                             else default) for q in self.queues_of(worker, cq).running if q.flavors & names)
            quotas = [(f, self.quotas[(worker, cq.name, f.name)]) for f in cq.flavors if f.name in names]
            used = sum(max(q.potential.gpus - q.available.gpus, f.reserved.gpus) for f, q in quotas)
            hit = self.releases[key] = (Releases.of(used, [(g, h) for _, g, h in running], default), used, running)
        return hit

    def _landing(self, ask: _Ask, worker: str, cq: ClusterQueueState, flavors: Sequence[_Usable | str],
                 figures: Sequence[tuple[float, float] | None]) -> _Landing:
        """The flavor (index into ``flavors``) Kueue would admit the job to among those it may use and the
        engine prices (at least one), with the GPUs it borrows there and the quota and running work of them all
        (for the wait)."""
        options = [(i, u) for i, (u, fig) in enumerate(zip(flavors, figures, strict=True))
                   if not isinstance(u, str) and fig is not None]
        req = ask.request
        # Kueue's flavor fungibility on gpufleet's queues (TryNextFlavor, BorrowingOverPreemption): the first
        # flavor with free quota of its own, else the first the cohort's idle quota makes room in, else the first.
        i, landing = next((o for o in options if _fits(req, _minus(o[1].flavor.nominal, o[1].flavor.reserved))),
                          next((o for o in options if _fits(req, o[1].quota.available)), options[0]))
        borrowed = max(0, landing.flavor.reserved.gpus + req.gpus - landing.flavor.nominal.gpus)
        names = frozenset(u.flavor.name for _, u in options)
        # The wait counts the quota the cohort lends as the queue's (what Kueue admits into) and the other
        # queues' use of it (serving) as held GPUs no release accounts for: they end after default_hours.
        nominal = sum(u.quota.potential.gpus for _, u in options)
        return (i, borrowed, nominal, *self._releases(worker, cq, names))

    def score(self, wl: HubWorkload, worker: str, ran_on: frozenset[str] | None = None) -> WorkerScore:
        """The worker's score for ``wl``, or why it cannot take it."""
        return self.scores(wl, (worker,), ran_on)[0]

    def move(self, wl: HubWorkload, job: JobSpec, worker: str) -> Move:
        """Reading ``wl``'s newest checkpoint from its home on ``worker`` (memoised per home, job throughput and
        worker region)."""
        home = wl.checkpoint
        w = self.workers.get(worker)
        if home is None or w is None or w.cluster is None:
            return NO_MOVE
        fed = False
        if w.cluster.cloud != home.cloud:  # across clouds only through the federation the home's stack made
            if home not in self.owners:
                self.owners[home] = home_worker(home, self.workers.values())
            fed = federated(home, self.owners[home], worker)
        key = (home, job.throughput_gbps, w.cluster.cloud, w.cluster.region, fed)
        hit = self.moves.get(key)
        if hit is None:
            hit = self.moves[key] = move(home, w.cluster.cloud, w.cluster.region, job, egress_book(), fed)
        return hit

    def row(self, wl: HubWorkload, ask: _Ask, workers: Sequence[str]) -> tuple[_Fit | WorkerScore, ...]:
        """What each of ``workers`` offers ``wl``'s shape, or why it cannot take it: the same for every Workload
        of that shape in a pass, so memoised per shape and list of workers (Workloads of one shape list the same
        workers)."""
        key = (ask.shape, tuple(workers))
        hit = self.rows.get(key)
        if hit is None:
            hit = self.rows[key] = self._fits(wl, ask, workers)
        return hit

    def _fits(self, wl: HubWorkload, ask: _Ask, workers: Sequence[str]) -> tuple[_Fit | WorkerScore, ...]:
        """What each of ``workers`` offers ``wl``'s shape, in that order: the flavor Kueue would admit it to among
        those it may use and the engine prices, with its cost, or why none; what depends on the worker and not on the
        prices is looked up once per (what decides the flavors, worker): :meth:`_place`."""
        places = self.by_place.get(ask.place)
        if places is None:
            places = self.by_place[ask.place] = {}
        priced = None
        runnable: Mapping[tuple[int, str], tuple[float, float]] = {}
        out: list[_Fit | WorkerScore] = []
        for worker in workers:
            entry = places.get(worker)
            if entry is None:
                entry = places[worker] = self._place(wl, ask, worker)
            if isinstance(entry, WorkerScore):
                out.append(entry)
                continue
            if priced is None:
                priced = self.priced.get(ask.shape)
                if priced is None:  # per shape: hashing a JobSpec (~50 fields) costs more than the look-up saves
                    priced = self.priced[ask.shape] = self.costs.of(ask.cost_key, self.job_keys[ask.shape])
                runnable = priced.runnable
            cq, flavors, keys, queues = entry
            # runnable.get(None) is None: no figures for a flavor the shape may not use (map: no comprehension frame).
            figures = [*map(runnable.get, keys)]
            if not any(figures):
                out.append(self.unfit.get((ask.place, worker, id(priced.plan))) or self._unfit(ask, worker, flavors,
                                                                                             priced))
                continue
            key = (ask.place, worker, tuple(map(bool, figures)))  # figures are (USD, hours) pairs or None
            landing = self.landings.get(key)
            if landing is None:
                landing = self.landings[key] = self._landing(ask, worker, cq, flavors, figures)
            i, borrowed, nominal, releases, used, running = landing
            usd, ready = figures[i]  # type: ignore[misc]
            pool = flavors[i].pool  # type: ignore[union-attr]
            # _Fit(...) as its _make builds it, without the named tuple's __new__ frame.
            out.append(_new_tuple(_Fit, (cq, queues, pool.name, pool.capacity, usd, ready, borrowed, nominal, releases,
                                         used, running)))
        return tuple(out)

    def _place(self, wl: HubWorkload, ask: _Ask, worker: str
               ) -> tuple[ClusterQueueState, tuple[_Usable | str, ...], tuple[tuple[int, str] | None, ...], _Queues
                          ] | WorkerScore:
        """What :meth:`_fits` reads of a worker before the prices: why no flavor at all, or its ClusterQueue, the
        flavors the shape may use (or why not), their keys among a plan's candidates and the queue's workloads."""
        usable = self._usable(wl, ask, worker)
        if isinstance(usable, WorkerScore):
            return usable
        cq, flavors = usable
        return cq, flavors, tuple(None if isinstance(u, str) else u.priced_as for u in flavors), self.queues_of(worker,
                                                                                                               cq)

    def _unfit(self, ask: _Ask, worker: str, flavors: Sequence[_Usable | str], priced: _Priced) -> WorkerScore:
        """Why ``worker`` cannot take the shape when the engine prices none of the flavors it may use: from the
        flavors (per what decides them and the worker) and the plan's exclusions, shared by the shapes of one plan (a
        dry job's, whose runnable candidates are those of each of its jobs)."""
        at = (ask.place, worker, id(priced.plan))
        hit = self.unfit.get(at)
        if hit is None:
            reasons = [u if isinstance(u, str) else
                       f"pool {u.pool.name}: {priced.excluded((id(u.offer), u.pool.capacity))}" for u in flavors]
            hit = self.unfit[at] = WorkerScore(worker, False, "; ".join(dict.fromkeys(reasons)) or "no flavor")
        return hit

    def scores(self, wl: HubWorkload, workers: Sequence[str], ran_on: frozenset[str] | None = None
               ) -> tuple[WorkerScore, ...]:
        """Each worker's score for ``wl``, or why it cannot take it (:meth:`ranked_scores`)."""
        return self.ranked_scores(wl, workers, ran_on)[0]

    def ranked_scores(self, wl: HubWorkload, workers: Sequence[str], ran_on: frozenset[str] | None = None
                      ) -> tuple[tuple[WorkerScore, ...], Ranked]:
        """Each worker's score for ``wl`` (the hot loop of a pass: one per Workload and worker), or why it
        cannot take it, and the workers that fit best first (as :func:`_ranked` orders them): what the worker
        offers the Workload's shape (:meth:`row`, memoised) and the wait in its queue behind what Kueue admits
        first. ``ran_on``: for a job with progress (:func:`progress`), the workers that ran it; every other
        worker's cost and ready time carry the move of its checkpoint.

        A Workload no worker lists and with nothing to move has, on each worker, the score the last one of its
        shape, priority and price of waiting had there, unless something was nominated there since (its backlog
        grew): only those workers are scored again (:attr:`tallies`)."""
        ask = self.ask(wl)
        moving = ran_on if wl.checkpoint is not None else None
        row = self.row(wl, ask, workers)
        workers = tuple(workers)
        shared = moving is None and not self.is_listed(wl, row)
        key = (id(row), wl.priority, ask.wait_usd_per_hour)
        tally = self.tallies.get(key) if shared else None
        log = self.log
        if tally is None:
            tally = _Tally(len(log), [])
            if shared:
                # The places where no worker fits keep the row's WorkerScore (why not); the others are scored.
                tally.scores = list(row)  # type: ignore[arg-type]
                self._tally_pairs(wl, ask, workers, row, None, tally)
                self.tallies[key] = tally
            else:
                tally.scores = self._pairs(wl, ask, workers, row, range(len(row)), moving, tally.keyed)
        elif tally.seen != len(log):
            # Only the workers that fit and that something was nominated to since are scored again (their backlog
            # grew): found from the log's tail or from each worker's last nomination, whichever is shorter to read.
            seen = tally.seen
            fitting, places, fitting_workers = self.spots.get(id(row)) or self.spots_of(row, workers)
            if len(log) - seen < len(fitting):
                again = [i for w in set(log[seen:]) for i in places.get(w, ())]
            else:
                # The places whose worker's last nomination is at ``seen`` or later, read in C.
                again = list(compress(fitting, map(seen.__le__, map(self.last.get, fitting_workers,
                                                                     repeat(-1, len(fitting))))))
            self._tally_pairs(wl, ask, workers, row, again, tally)
            tally.seen, tally.ranked, tally.frozen = len(log), None, None
        if tally.ranked is None:
            tally.ranked = Ranked(tuple(tally.keyed.values()))
            tally.frozen = tuple(tally.scores)
        assert tally.frozen is not None
        return tally.frozen, tally.ranked

    def spots_of(self, row: Sequence[_Fit | WorkerScore], workers: Sequence[str]
                 ) -> tuple[list[int], dict[str, list[int]], list[str]]:
        """The places of ``row`` where a worker fits (in order), those places by worker, and their workers (memoised
        per row): what a tally scores (:meth:`_tally_pairs`)."""
        hit = self.spots.get(id(row))
        if hit is None:
            fitting = [i for i, fit in enumerate(row) if not isinstance(fit, WorkerScore)]
            places: dict[str, list[int]] = defaultdict(list)
            for i in fitting:
                places[workers[i]].append(i)
            hit = self.spots[id(row)] = (fitting, places, [workers[i] for i in fitting])
        return hit

    def is_listed(self, wl: HubWorkload, row: tuple[_Fit | WorkerScore, ...]) -> bool:
        """Whether a queue of ``row``'s fits lists ``wl`` (Kueue copied it there): at once for a Workload no worker
        lists (:attr:`copied`), else from :meth:`row_names`."""
        own = (wl.namespace, wl.name)
        return own in self.copied and own in self.row_names(row)

    def row_names(self, row: tuple[_Fit | WorkerScore, ...]) -> frozenset[tuple[str, str]]:
        """(namespace, name) of every workload the queues of ``row``'s fits list (memoised per row)."""
        hit = self.listed.get(id(row))
        if hit is None:
            hit = self.listed[id(row)] = frozenset(n for fit in row if not isinstance(fit, WorkerScore)
                                                   for n in fit.queues.names)
        return hit

    def _pairs(self, wl: HubWorkload, ask: _Ask, workers: Sequence[str], row: Sequence[_Fit | WorkerScore],
               indices: Iterable[int], moving: frozenset[str] | None,
               keyed: dict[int, _Keyed]) -> list[WorkerScore]:
        """The score for ``wl`` of each worker at ``indices`` of ``workers`` (``row`` what each offers its shape):
        why it does not fit, or its cost and wait behind what Kueue admits first (:meth:`_score`). What is the same
        for every worker is read once, and the commonest wait (none) is worked out here as :meth:`Releases.wait`
        does. ``keyed`` gets (late, score USD, place, score) at each place whose worker fits (:data:`_Keyed`), and
        loses the others. For a Workload a queue of the row lists, or with progress to move (:meth:`_tally_pairs`
        scores the others)."""
        out: list[WorkerScore] = []
        virtual, added = self.virtual, self.added
        own = (wl.namespace, wl.name)
        need, price, deadline = ask.request.gpus, ask.wait_usd_per_hour, ask.job.deadline_hours
        for i in indices:
            fit = row[i]
            if isinstance(fit, WorkerScore):
                out.append(fit)
                keyed.pop(i, None)
                continue
            worker = workers[i]
            queues = fit.queues
            releases = fit.releases
            backlog = queues.ahead(wl, virtual.get(worker, _NO_VIRTUAL), added.get(worker, ()))
            if queues.running_keys and own in queues.running_keys:
                releases = Releases.of(fit.used, [(g, h) for k, g, h in fit.running if k != own],
                                       self.settings.default_hours)
            if backlog.gpus[-1] + need + releases.used - fit.nominal <= 0:
                wait = 0.0
            else:
                wait = releases.wait(fit.nominal, backlog, need)
            if moving is None or worker in moving:
                score = self._score(fit, worker, wait, price, deadline, NO_MOVE)
            else:
                score = self._score(fit, worker, wait, price, deadline, self.move(wl, ask.job, worker), wl.progress,
                                    wl.admitted_hours)
            out.append(score)
            keyed[i] = (*_raw_key(score), i, score)
        return out

    def _made(self, fit: _Fit, worker: str, price: float, deadline: float | None,
              made_by: dict[tuple[int, float], _Made]) -> _Made:
        """The scores with no move of ``fit`` (on ``worker``) at ``price`` per hour of waiting, by wait
        (:attr:`made`), and what :meth:`_tally_pairs` makes them of."""
        at = (id(fit), price)
        made = made_by.get(at)
        if made is None:
            # The fields of WorkerScore.fitting(worker, fit.pool, fit.capacity, fit.cost_usd, wait, wait * price, ready,
            # late, fit.borrowed, 0.0, 0.0, False) (:meth:`_score` with no move) but the wait's four, in its order: a
            # copy of the constant ones with the fit's five set (a quarter of the cost of a 19-key literal).
            fields = _NO_MOVE_FIELDS.copy()
            fields["worker"], fields["pool"], fields["capacity"] = worker, fit.pool, fit.capacity
            fields["cost_usd"], fields["borrowed_gpus"] = fit.cost_usd, fit.borrowed
            made = made_by[at] = ({}, fields, fit, price, deadline, fit.ready_hours, fit.cost_usd)
        return made

    def _tally_pairs(self, wl: HubWorkload, ask: _Ask, workers: Sequence[str], row: Sequence[_Fit | WorkerScore],
                     indices: Iterable[int] | None, tally: _Tally) -> None:
        """:meth:`_pairs` for a Workload no queue of the row lists and with nothing to move, into ``tally`` (its row,
        priority and price of waiting): the score at each of ``indices`` (places where a worker fits; None: all) set
        in ``tally.scores``, whose places where no worker fits hold the row's WorkerScore already (they never change).
        Such a Workload waits on a worker as every other of its priority and GPUs does behind the same queue and
        flavors: that wait is worked out once per worker until something is nominated there (:attr:`waits`), for
        every shape that lands on those flavors. What each place of the row needs is looked up once per tally
        (:attr:`_Tally.plan`)."""
        plan = tally.plan
        if plan is None or indices is None:
            fitting = self.spots_of(row, workers)[0]
            if indices is None:
                indices = fitting
            if plan is None:
                plan = tally.plan = self._plan_of(wl, ask, workers, row, fitting)
        scores, keyed, last, virtual, added = tally.scores, tally.keyed, self.last, self.virtual, self.added
        need = ask.request.gpus
        for i in indices:
            worker, cell, scored, made = plan[i]  # type: ignore[misc]  # only places where a worker fits
            version = last.get(worker, -1)
            if cell[0] == version:
                wait = cell[1]
            else:
                fit = made[2]
                backlog = fit.queues.ahead(wl, virtual.get(worker, _NO_VIRTUAL), added.get(worker, ()))
                releases = fit.releases
                if backlog.gpus[-1] + need + releases.used - fit.nominal <= 0:
                    wait = 0.0
                else:
                    wait = releases.wait(fit.nominal, backlog, need)
                cell[0], cell[1] = version, wait
            hit = scored.get(wait)
            if hit is None:
                # The score with no move at ``wait`` hours (:meth:`_score`'s, whose fields WorkerScore.fitting sets in
                # this order) from the fields ``made``'s scores share: a copy with the wait's four set, one by one (a
                # four-target assignment builds a tuple), without the frozen dataclass's ``__init__``; with its entry
                # in the ranking (:data:`_Keyed`), kept in ``made``. Written here, not in a function of its own: a pass
                # makes ~11,000 (a call for each cost ~8M instructions a pass); the only place one is made so.
                _, fields, _, price, deadline, ready_hours, cost_usd = made
                score: WorkerScore = _new_object(WorkerScore)
                ready = wait + ready_hours
                wait_usd = wait * price
                late = deadline is not None and ready > deadline
                d = score.__dict__
                d.update(fields)
                d["wait_hours"] = wait
                d["wait_usd"] = wait_usd
                d["ready_hours"] = ready
                d["late"] = late
                # _raw_key(score): its usd is cost_usd + wait_usd. The place ``i`` may be kept with it: ``scored`` is
                # this fit's (and price's), and a fit is made for one place of one row, which every tally reading
                # it shares.
                hit = scored[wait] = (score, (late, cost_usd + wait_usd, i, score))
            scores[i] = hit[0]
            keyed[i] = hit[1]

    def _plan_of(self, wl: HubWorkload, ask: _Ask, workers: Sequence[str], row: Sequence[_Fit | WorkerScore],
                 fitting: list[int]) -> list[_PlanEntry | None]:
        """Per place of ``row``: None where the worker does not fit, else (the worker, its wait cell in :attr:`waits`,
        its scores by wait and the rest of its entry in :attr:`made`). What a place's entry holds but its wait cell
        is the same for every tally of the row at the Workload's price of waiting (:attr:`parts`); the cell is the
        one of the priority and GPUs of the tally's Workloads."""
        price = ask.wait_usd_per_hour
        parts = self.parts.get((id(row), price))
        if parts is None:
            made_by, queued = self.made, self.queued
            deadline = ask.job.deadline_hours
            parts = self.parts[(id(row), price)] = []
            for i in fitting:
                fit: _Fit = row[i]  # type: ignore[assignment]
                worker = workers[i]
                # The id of the flavors' queue, releases and quota the wait depends on besides priority and GPUs.
                on = queued.setdefault((id(fit.queues), id(fit.releases), fit.nominal), len(queued))
                made = made_by.get((id(fit), price)) or self._made(fit, worker, price, deadline, made_by)
                parts.append((i, worker, made[0], made, on))
        cells = self.waits.get((wl.priority, ask.request.gpus))
        if cells is None:
            cells = self.waits[(wl.priority, ask.request.gpus)] = {}
        plan: list[_PlanEntry | None] = [None] * len(row)
        for i, worker, scored, made, on in parts:
            cell = cells.get(on)
            if cell is None:  # -2: never a worker's last place in the log, so worked out at first use
                cell = cells[on] = [-2, 0.0]
            plan[i] = (worker, cell, scored, made)
        return plan

    @staticmethod
    def _score(fit: _Fit, worker: str, wait: float, price: float, deadline: float | None, m: Move,
               done: Progress | None = None, admitted_hours: float | None = None) -> WorkerScore:
        # The engine's ready time (transfer + run with its overhead) after the wait for admission: what the
        # job's deadline_hours is held against, as `placement plan` holds the ready time alone.
        ready = wait + fit.ready_hours
        cost = fit.cost_usd
        if m is NO_MOVE:
            return WorkerScore.fitting(worker, fit.pool, fit.capacity, cost, wait, wait * price, ready,
                                       deadline is not None and ready > deadline, fit.borrowed, 0.0, 0.0, False)
        cost, ready = cost + m.usd, ready + m.hours
        known, lost_h, lost_usd, lost_from = m.known, None, None, ""
        if m.restarts:
            # Restarting from step 0 redoes the work up to its last durable step: those hours, at this worker's
            # USD per hour of the job, in its cost and its ready time. Without the trainer's progress on the job,
            # Kueue's accumulated admitted time bounds it from above; neither: priced as unknown.
            lost_h = done.hours if done is not None else None
            lost_from = "progress" if lost_h is not None else ""
            if lost_h is None and admitted_hours is not None:
                lost_h, lost_from = admitted_hours, "admitted"
            lost_usd = lost_progress(lost_h, fit.cost_usd, fit.ready_hours)
            known = lost_usd is not None
            if lost_h is not None and lost_usd is not None:
                cost, ready = cost + lost_usd, ready + lost_h
        return WorkerScore.fitting(worker, fit.pool, fit.capacity, cost, wait, wait * price, ready,
                                   deadline is not None and ready > deadline, fit.borrowed, m.usd, m.hours, m.restarts,
                                   known, m.case, lost_h, lost_usd, lost_from)


class _Tally:
    """The scores of one row's workers for the Workloads that share them (:meth:`_Pass.ranked_scores`): ``seen``
    the length of :attr:`_Pass.log` when they were made and, until one changes, the workers that fit best first
    and the scores as a tuple."""

    __slots__ = ("seen", "scores", "keyed", "ranked", "frozen", "plan")

    def __init__(self, seen: int, scores: list[WorkerScore]) -> None:
        self.seen = seen
        self.scores = scores
        # Per place of a worker that fits: (late, score USD, the place, its score) (:meth:`_Pass._pairs`).
        self.keyed: dict[int, _Keyed] = {}
        self.ranked: Ranked | None = None
        self.frozen: tuple[WorkerScore, ...] | None = None
        self.plan: list[_PlanEntry | None] | None = None  # per place of the row (:meth:`_Pass._plan_of`)


# The scores with no move of one fit at one price of an hour of waiting (:attr:`_Pass.made`): (by wait hours, each
# with its entry in a ranking; the fields they share; the fit; the price; the job's deadline_hours; the fit's ready
# hours and cost USD). A tuple: one is made per fit and price of a pass.
_Made = tuple[dict[float, tuple[WorkerScore, "_Keyed"]], dict[str, Any], _Fit, float, "float | None", float, float]
# A place of a tally's plan where a worker fits: the worker, its wait cell, its scores by wait and its _Made.
_PlanEntry = tuple[str, list[Any], dict[float, tuple[WorkerScore, "_Keyed"]], _Made]


_NO_VIRTUAL: Mapping[int, list[tuple[int, float]]] = {}
_new_tuple = tuple.__new__
_new_object = object.__new__
_FIELD_NAMES = {cls: tuple(f.name for f in fields(cls)) for cls in (Memory, Decision, EventOut)}
_T = TypeVar("_T", Memory, Decision, EventOut)


def _frozen(cls: type[_T], *values: Any) -> _T:
    """``cls(*values)`` with every field given, in order, without the frozen dataclass's ``__init__`` (one
    ``object.__setattr__`` per field, 3x the cost; a pass makes one of each per Workload): the same instance
    ``__dict__``, so equal, hashed and printed alike. ``cls`` has no ``__post_init__`` (a test holds this)."""
    made: _T = object.__new__(cls)
    made.__dict__.update(zip(_FIELD_NAMES[cls], values, strict=True))
    return made
# A WorkerScore's fields in their order, as WorkerScore.fitting sets them for a score with no move (:meth:`_Pass._made`
# sets the fit's and :meth:`_Pass._tally_pairs` the wait's). A test holds it to the dataclass's fields.
_NO_MOVE_FIELDS: dict[str, Any] = {
    "worker": "", "fits": True, "reason": "", "pool": None, "capacity": None, "cost_usd": 0.0, "wait_hours": 0.0,
    "wait_usd": 0.0, "ready_hours": 0.0, "late": False, "borrowed_gpus": 0, "move_usd": 0.0, "move_hours": 0.0,
    "restarts": False, "move_known": True, "move_case": "", "lost_hours": None, "lost_usd": None, "lost_from": ""}
_JOB_FIELD_COUNT = len(fields(JobSpec))  # a JobSpec's fields (its __dict__ holds them in order, the name first)
# Where its dataset, outputs_gb and throughput_gbps are in that order (:meth:`_Pass.ask`, :meth:`_Costs.of`).
_JOB_DATASET, _JOB_OUTPUTS, _JOB_THROUGHPUT = (
    [f.name for f in fields(JobSpec)].index(name) for name in ("dataset", "outputs_gb", "throughput_gbps"))
# What :class:`Ranked` orders by before rounding (:func:`_raw_key`), or the whole :func:`_rank_key`.
# (late, score USD, place in the row, score): an entry of :class:`Ranked` (:func:`_raw_key`, then the place and score).
_Keyed = tuple[bool, float, int, WorkerScore]


class Ranked:
    """The workers that fit, best first, as :func:`_ranked` orders them, from (late, score USD, place, score) of each
    (:data:`_Keyed`: :func:`_raw_key`, flat, so that comparing two costs one tuple comparison, not two nested). Read
    from a heap as far as the reader goes: a pass reads the first one or two of each Workload's workers (the best not
    yet tried, the runner-up), not their whole order. Rounding (``round(x, 6)``, the costliest step of a key) is left
    to the reads: rounding never reverses an order, so the entries that share a late flag and a rounded score are
    next to each other in the order of their raw keys; each such group, popped whole, is put in :func:`_rank_key`'s
    order (the rounded cost, then the worker), the places breaking the remaining ties as the stable sort does (the
    scores are never compared). Two scores more than :data:`_APART` apart never round alike: the next entry that
    far from a popped one (or of another late flag) ends its group without a rounding."""

    __slots__ = ("entries", "_heap", "_read")

    def __init__(self, entries: tuple[_Keyed, ...]) -> None:
        self.entries = entries
        self._heap: list[_Keyed] | None = None  # made on the first read
        self._read: list[WorkerScore] = []  # popped from the heap so far, best first: every later read starts here

    def __iter__(self) -> Iterator[WorkerScore]:
        read, i = self._read, 0
        while True:
            if i < len(read):
                yield read[i]
                i += 1
                continue
            if not self._pop_group():
                return

    def first(self, skip: AbstractSet[str] = frozenset()) -> WorkerScore | None:
        """The first worker of the order not in ``skip`` (what ``next`` over a filtered iteration gives, without
        its generators)."""
        read, i = self._read, 0
        while True:
            while i < len(read):
                s = read[i]
                if s.worker not in skip:
                    return s
                i += 1
            if not self._pop_group():
                return None

    def _pop_group(self) -> bool:
        """Pops the next group of equal (late, rounded score) onto :attr:`_read`, in order; False when none is left."""
        heap = self._heap
        if heap is None:
            heap = self._heap = list(self.entries)
            heapq.heapify(heap)
        if not heap:
            return False
        first = heapq.heappop(heap)
        late, usd = first[0], first[1]
        # The commonest case: the next entry is of another late flag or far apart (a NaN or an infinite score
        # compares False here and is rounded as any other).
        if not heap or heap[0][0] != late or heap[0][1] - usd > _APART:
            self._read.append(first[3])
            return True
        usd6 = round(usd, 6)
        if round(heap[0][1], 6) != usd6:
            self._read.append(first[3])
            return True
        group = [first]
        while heap and heap[0][0] == late and round(heap[0][1], 6) == usd6:
            group.append(heapq.heappop(heap))
        group.sort(key=lambda e: (round(e[3].cost_usd, 6), e[3].worker, e[2]))
        self._read.extend(e[3] for e in group)
        return True


# Two floats whose difference (as computed) exceeds this never round alike to 6 decimals: each is within 0.5e-6 of its
# rounding (or is its own rounding, where doubles are more than 1e-6 apart), and the subtraction errs by far less.
_APART = 2e-6


def wait_usd_per_hour(wl: HubWorkload, settings: Settings) -> float:
    """What an hour of waiting for admission costs this job, USD: its spec's ``usd_per_hour_of_delay`` when
    set, else its GPUs × ``settings.wait_usd_per_gpu_hour``."""
    if wl.delay_usd_per_hour is not None:
        return wl.delay_usd_per_hour
    return wl.request.gpus * settings.wait_usd_per_gpu_hour


def _wait_price_text(wl: HubWorkload, settings: Settings) -> str:
    if wl.delay_usd_per_hour is not None:
        return f"${wl.delay_usd_per_hour:g}/h (the job's usd_per_hour_of_delay)"
    needs = wl.needs  # wl.request.gpus, without its Allocatable sums (one pod set, the commonest: without a generator)
    gpus = 0 + needs[0].per_pod.gpus * needs[0].count if len(needs) == 1 else sum(n.per_pod.gpus * n.count
                                                                                for n in needs)
    return f"{gpus} GPUs x ${settings.wait_usd_per_gpu_hour:g}/GPU-h"


def _raw_key(s: WorkerScore) -> tuple[bool, float]:
    """What :func:`_rank_key` rounds, for :class:`Ranked`: whether the worker misses the deadline, and the score."""
    return (s.late, s.usd)


def _rank_key(s: WorkerScore) -> tuple[bool, float, float, str]:
    """Workers that meet the job's deadline first (a late one is never preferred), then the lower score."""
    return (s.late, round(s.usd, 6), round(s.cost_usd, 6), s.worker)


def _ranked(scores: Sequence[WorkerScore]) -> list[WorkerScore]:
    """The workers that fit, best first (:func:`_rank_key`; a stable sort, so equal keys keep their order)."""
    return sorted((s for s in scores if s.fits), key=_rank_key)


def _best(ranked: Iterable[WorkerScore], exclude: Iterable[str] = ()) -> WorkerScore | None:
    """The best of ``ranked`` (:func:`_ranked`) not in ``exclude``."""
    skip = set(exclude)
    if isinstance(ranked, Ranked):
        return ranked.first(skip)
    return next((s for s in ranked if s.worker not in skip), None)


def _explain(best: WorkerScore, ranked: Iterable[WorkerScore], wl: HubWorkload, settings: Settings,
             ran_on: frozenset[str] | None = None) -> str:
    text = (f"{best.worker}: ${best.usd:,.2f} = ${best.cost_usd:,.2f} on pool {best.pool} ({best.capacity}) + wait "
            f"{best.wait_hours:.2f} h x {_wait_price_text(wl, settings)}")
    if best.borrowed_gpus:
        # Not priced: how often serving reclaims is not known here; an eviction re-routes the job (resume).
        text += f"; borrows {best.borrowed_gpus} GPUs of the cohort's idle quota, which serving may reclaim"
    home = wl.checkpoint
    if ran_on is not None and home is not None:
        text += "; " + _move_text(best, home, ran_on)
    deadline = wl.job.deadline_hours if wl.job is not None else None
    if deadline is not None:
        text += (f"; ready in {best.ready_hours:,.1f} h, " + (f"after deadline_hours {deadline:g} (no worker meets it)"
                                                              if best.late else f"within deadline_hours {deadline:g}"))
    runner = (ranked.first({best.worker}) if isinstance(ranked, Ranked)
              else next((s for s in ranked if s.worker != best.worker), None))
    if runner is not None:
        text += f"; next {runner.worker} ${runner.usd:,.2f}" + (" (misses the deadline)" if runner.late and
                                                                  not best.late else "")
    return text


def checkpoint_text(home: CheckpointHome) -> str:
    """``its 140 GB checkpoint`` as the Event says it, naming where an unannotated size comes from."""
    if home.gb is None:
        return "its checkpoint (of unknown size)"
    if home.gb_from == SIZE_FROM_MODEL:
        return f"its checkpoint (at most {home.gb:g} GB, the training state of the job spec's {home.gb_from})"
    if home.gb_from != FROM_ANNOTATION:
        return f"its {home.gb:g} GB checkpoint (the job spec's {home.gb_from})"
    return f"its {home.gb:g} GB checkpoint"


def _move_text(best: WorkerScore, home: CheckpointHome, ran_on: frozenset[str]) -> str:
    """What moving the job's progress to ``best`` costs (in its score), or that it resumes where it ran."""
    if best.worker in ran_on:
        return f"resumes where it ran ({checkpoint_text(home)} is there and in {home.where}): no move"
    ran = f"it ran on {', '.join(sorted(ran_on))}" if ran_on else "it ran on a worker not known here"
    if best.restarts:
        # Another cloud, and the home's stack federates no identity of this worker: nothing is read.
        text = (f"re-route move: {ran}; {best.worker} is in another cloud than the home ({home.where}, "
                f"{home.uri[:200]}) and its stacks federate no identity of it there: the job restarts from step 0 "
                "(docs/kueue-hub.md#checkpoints-across-clouds); ")
        if best.lost_usd is not None and best.lost_hours is not None:
            basis = ("its last durable step over its steps per hour" if best.lost_from == "progress" else
                     "at most: the hours Kueue counted it admitted before, accumulatedPastExecutionTimeSeconds; no "
                     f"{LAST_DURABLE_STEP} with {STEPS_PER_HOUR} on its job")
            return text + (f"the progress it throws away, {best.lost_hours:,.2f} h of work ({basis}), costs "
                           f"${best.lost_usd:,.2f} at this worker's rate, in the cost and the ready time")
        return text + (f"the progress it throws away is priced as unknown: no {LAST_DURABLE_STEP} with "
                       f"{STEPS_PER_HOUR} on its job and no admitted time recorded by Kueue, so it is not counted "
                       "here")
    text = f"re-route move: {ran}; {checkpoint_text(home)} from {home.where} ({home.uri[:200]}) "
    if best.move_case == FEDERATED:
        text += f"read through the identity federation of the home's stack with {best.worker} (resumes there) "
    if best.move_known:
        text += (f"costs ${best.move_usd:,.2f} egress and {best.move_hours:.2f} h here, in the cost and the ready "
                 "time")
    else:
        text += (f"is priced as unknown: no {FROM_ANNOTATION}, and neither checkpoint.size_gb nor "
                 "model.parameters_b in its job spec, so the move's egress and time are not counted here")
    return text


def _warnings_text(wl: HubWorkload) -> str:
    """The annotations of ``wl``'s job read as unknown, for its Event (empty when none)."""
    if not wl.warnings:  # the commonest case, without a generator
        return ""
    return "".join(f"; warning: {w}" for w in wl.warnings)


def _no_fit(scores: Sequence[WorkerScore], wl: HubWorkload) -> str:
    if not scores:
        return f"its admission check {wl.check} lists no worker cluster"
    return "; ".join(f"{s.worker}: {s.reason}" for s in scores if not s.fits)


def progress(wl: HubWorkload, mem: Memory | None) -> frozenset[str] | None:
    """The workers ``wl``'s job ran on when it has progress to move (a checkpoint home, and admitted somewhere
    before: the dispatcher saw it, or the Workload was evicted since); empty when it ran on a worker not known
    here (then every worker reads the checkpoint from its home); None when there is nothing to move."""
    if wl.checkpoint is None:
        return None
    ran_on = mem.ran_on if mem is not None else frozenset()
    if ran_on or wl.evictions > 0:
        return ran_on
    return None


def _ran(mem: Memory | None) -> frozenset[str]:
    """The workers a Workload ran on, as remembered (kept through every decision about it)."""
    return mem.ran_on if mem is not None else frozenset()


def resume(mem: Memory | None, wl: HubWorkload) -> Memory | None:
    """The memory to decide ``wl`` with: an eviction since ``mem`` was written ends the round, as an admission
    does (the worker(s) then nominated are the ones to avoid next). A dispatcher that saw the admission has
    already reset the round; one that recalled ``mem`` from an Event written before it has not."""
    if mem is None or wl.evictions <= mem.evictions or not mem.nominated:
        return mem
    # Evicted, so admitted first: the worker then nominated ran it (its progress is there and in its home).
    return replace(mem, nominated=(), tried=frozenset(mem.nominated), first_at=0.0, noted="",
                   ran_on=mem.ran_on | frozenset(mem.nominated))


def _unreadable(wl: HubWorkload, mem: Memory | None, problem: str, now: float) -> Decision:
    """The Workload waits, with a Warning Event naming ``problem`` (not repeated while it stays the same)."""
    message = f"not nominated: {problem}"
    noted = note(UNREADABLE, message)
    event = None if mem is not None and mem.noted == noted else EventOut("Warning", UNREADABLE, message)
    new = Memory(nominated=(), since=now, tried=mem.tried if mem is not None else frozenset(), first_at=0.0,
                 evictions=wl.evictions, noted=noted, ran_on=_ran(mem))
    return Decision(wl, "none", (), UNREADABLE, message, (), event, new)


def note(kind: str, text: str) -> str:
    """What ``Memory.noted`` keeps of a reported situation: its kind and a digest of its text (short enough to
    travel on an Event annotation)."""
    return f"{kind}:{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def decide(workloads: Sequence[HubWorkload], workers: Sequence[WorkerState], pricing: Pricing, now: float,
           settings: Settings | None = None, memory: Mapping[str, Memory] | None = None) -> PassResult:
    """One pass over every hub Workload: a :class:`Decision` for each one waiting for a nomination, the
    admissions of Workloads this dispatcher nominated (for the time-to-admission metric), and which
    memories to keep. ``memory`` is what earlier passes remembered (:class:`Memory` by uid), or what the
    controller recalled from the Events of an earlier leader; an eviction since it was written starts a new
    round (:func:`resume`)."""
    memory = memory or {}
    settings = settings or Settings()
    ps = _Pass(workers, pricing, now, settings)
    decisions: list[Decision] = []
    admitted: list[Admitted] = []
    keep: set[str] = set()
    holding: list[tuple[HubWorkload, Memory]] = []
    deciding: list[HubWorkload] = []
    current_memory: dict[str, Memory | None] = {}
    for wl in workloads:
        mem = memory.get(wl.uid)
        if wl.finished:
            continue
        if mem is not None:
            keep.add(wl.uid)
        if wl.problem is not None or (wl.job_error is not None and wl.waiting_reason() is None):
            # Unreadable: reported on the Workload (once per distinct problem), never nominated, never guessed.
            keep.add(wl.uid)
            decisions.append(_unreadable(wl, mem, str(wl.problem or wl.job_error), now))
            continue
        if wl.cluster_name and mem is not None and mem.nominated and mem.first_at:
            admitted.append(Admitted(wl.uid, wl.cluster_name, max(now - mem.first_at, 0.0)))
            decisions.append(Decision(wl, "hold", (wl.cluster_name,), ADMITTED, f"admitted on {wl.cluster_name}",
                                      memory=replace(mem, nominated=(), tried=frozenset({wl.cluster_name}),
                                                     first_at=0.0, evictions=wl.evictions, noted="",
                                                     ran_on=mem.ran_on | {wl.cluster_name})))
            continue
        if wl.waiting_reason() is not None:
            continue
        keep.add(wl.uid)
        mem = resume(mem, wl)
        if wl.nominated:
            if mem is None or mem.nominated != wl.nominated:
                # Nominated by an earlier leader (or by hand): its clock started when the API server recorded it,
                # and the workers tried earlier in the round (if remembered) stay tried.
                since = min(wl.nominated_since if wl.nominated_since is not None else now, now)
                mem = Memory(nominated=wl.nominated, since=since,
                             tried=frozenset(wl.nominated) | (mem.tried if mem is not None else frozenset()),
                             first_at=mem.first_at if mem is not None and mem.first_at else since,
                             evictions=wl.evictions, noted=mem.noted if mem is not None else "", ran_on=_ran(mem))
            valid = all(n in wl.allowed and (w := ps.workers.get(n)) is not None and w.reachable for n in wl.nominated)
            if valid and now - mem.since < settings.deadline_s:
                holding.append((wl, mem))
                continue
        current_memory[wl.uid] = mem
        deciding.append(wl)

    for wl, mem in holding:
        for n in wl.nominated:
            ps.add_virtual(wl, n)
        decisions.append(Decision(wl, "hold", wl.nominated, WAITING,
                                  f"nominated {', '.join(wl.nominated)} {now - mem.since:.0f} s ago", memory=mem))

    deciding.sort(key=lambda w: (-w.priority, w.created, w.key))
    for wl in deciding:
        mem = current_memory.get(wl.uid)
        try:
            ran_on = None if wl.checkpoint is None else progress(wl, mem)  # progress(): None without a home
            scores, ranked = ps.ranked_scores(wl, wl.allowed, ran_on)
        except Exception as exc:  # whatever one job's data does to the pricing, the others are still decided
            from placement.dispatch.snapshot import problem_text

            decisions.append(_unreadable(wl, mem, f"cannot be priced: {problem_text(exc)}", now))
            continue
        current = wl.nominated
        tried = set(mem.tried) if mem is not None else set()
        if current:
            # The deadline passed (or a nominated worker left the fleet): the next best not yet tried.
            tried |= set(current)
            reason, prev = DEADLINE, ", ".join(current)
            since = mem.since if mem is not None and mem.nominated == current else (wl.nominated_since or now)
            gone = [n for n in current if n not in wl.allowed or n not in ps.workers or not ps.workers[n].reachable]
            lead = (f"{', '.join(gone)} can no longer take it" if gone
                    else f"{prev} did not admit within {settings.deadline_s:g} s ({now - since:.0f} s)")
        elif mem is not None and (mem.nominated or mem.tried):
            reason, prev = RENOMINATED, ", ".join(mem.nominated) or ", ".join(sorted(mem.tried))
            lead = f"nomination of {prev} was cleared (eviction {wl.evictions})"
        else:
            reason, lead = NOMINATED, ""
        best = ranked.first(tried)  # _best(ranked, tried): ``tried`` is a set of this Workload's already
        if best is None and tried:
            # Every worker that fits was tried: start a new round, still avoiding the current one if possible.
            tried = set(current)
            best = _best(ranked, tried) or (_best(ranked) if not current else None)
        first_at = mem.first_at if mem is not None and mem.first_at else now
        if best is None:
            if current:
                message = f"{lead}; no other worker fits, keeping {', '.join(current)}"
                noted = note(DEADLINE, ",".join(current))
                new = Memory(nominated=current, since=now, tried=frozenset(current), first_at=first_at,
                             evictions=wl.evictions, noted=noted, ran_on=_ran(mem))
                event = None if mem is not None and mem.noted == noted else EventOut("Warning", DEADLINE, message)
                decisions.append(Decision(wl, "hold", current, DEADLINE, message, scores, event, new))
                ps_add = current
            else:
                message = "no worker fits: " + _no_fit(scores, wl) + _warnings_text(wl)
                noted = note(NO_FIT, message)
                new = Memory(nominated=(), since=now, tried=frozenset(tried), first_at=0.0,
                             evictions=wl.evictions, noted=noted, ran_on=_ran(mem))
                event = None if mem is not None and mem.noted == noted else EventOut("Warning", NO_FIT, message)
                decisions.append(Decision(wl, "none", (), NO_FIT, message, scores, event, new))
                ps_add = ()
            for n in ps_add:
                ps.add_virtual(wl, n)
            continue
        body = _explain(best, ranked, wl, settings, ran_on)
        message = (f"{lead}; nominated {body}" if lead else f"nominated {body}") + _warnings_text(wl)
        # Memory(nominated, since, tried, first_at, evictions, noted, ran_on), EventOut(...) and Decision(...), each
        # made as its __init__ makes it (:func:`_frozen`): the commonest decision of a pass.
        worker = (best.worker,)
        new = _frozen(Memory, worker, now, frozenset(tried | {best.worker}), first_at, wl.evictions, "", _ran(mem))
        # A Warning when an annotation of its job could not be read (read as unknown): said on the Workload.
        kind = "Warning" if reason == DEADLINE or wl.warnings else "Normal"
        decisions.append(_frozen(Decision, wl, "nominate", worker, reason, message, scores,
                                 _frozen(EventOut, kind, reason, message), new))
        ps.add_virtual(wl, best.worker)
    return PassResult(decisions=tuple(decisions), admitted=tuple(admitted), keep=frozenset(keep))
