"""REFERENCE ONLY (tests): the dispatcher's decision function as it was before the fleet-scale rewrite of
issue 30 (placement/dispatch/decide.py at commit e722380), kept unchanged so that
tests/placement/dispatch/test_decide_scale.py can check that the memoised decide() takes the same decisions
on the benchmark's fleet. Not imported by placement/. Its original docstring follows.

The dispatcher's decision: which worker each waiting hub Workload should be nominated to. Pure.

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
"""

from __future__ import annotations

import bisect
import hashlib
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import astuple, dataclass, replace

from placement.dispatch.model import (
    Admitted,
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
from placement.fleet.choose import SINGLE_NODE
from placement.fleet.stacks import Pool
from placement.model.catalog import Offer
from placement.model.jobspec import JobSpec
from placement.model.kueue import Allocatable, allocatable
from placement.model.shapes import Shape, shape_book
from placement.plan.job import Candidate, plan

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
    rel = sorted(releases, key=lambda r: r[1])
    known = sum(g for g, _ in rel)
    if used > known:
        bisect.insort(rel, (used - known, default_hours), key=lambda r: r[1])
    used = max(used, known)
    deficit = backlog.total + need + used - nominal
    if deficit <= 0:
        return 0.0
    freed, last = 0, 0.0
    for gpus, hours in rel:
        freed += gpus
        last = max(last, hours)
        if freed >= deficit:
            return max(hours, 0.0)
    return last + backlog.work_of_first(deficit - freed) / max(nominal, 1)


@dataclass(frozen=True)
class _Option:
    """A flavor of a worker the job may use, priced."""

    flavor: FlavorState
    pool: Pool
    candidate: Candidate
    quota: FlavorQuota


class _Costs:
    """The engine's price of a job on every fleet pool, computed once per distinct job spec."""

    def __init__(self, pricing: Pricing, workers: Sequence[WorkerState]) -> None:
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
        self._memo: dict[JobSpec, tuple[dict[tuple[int, str], Candidate], dict[tuple[int, str], str]]] = {}

    def of(self, job: JobSpec) -> tuple[dict[tuple[int, str], Candidate], dict[tuple[int, str], str]]:
        hit = self._memo.get(job)
        if hit is None:
            p = plan(job, self.offers)
            runnable: dict[tuple[int, str], Candidate] = {(id(c.offer), str(c.capacity)): c for c in p.ranked}
            excluded: dict[tuple[int, str], str] = {(id(c.offer), str(c.capacity)): str(c.excluded)
                                                    for c in p.excluded}
            hit = self._memo[job] = (runnable, excluded)
        return hit


def _fits(a: Allocatable, b: Allocatable) -> bool:
    return a.cpu_millis <= b.cpu_millis and a.memory_mib <= b.memory_mib and a.gpus <= b.gpus and a.efa <= b.efa


def _minus(a: Allocatable, b: Allocatable) -> Allocatable:
    return Allocatable(a.cpu_millis - b.cpu_millis, a.memory_mib - b.memory_mib, a.gpus - b.gpus, a.efa - b.efa)


def _each(fn: Callable[..., int], *xs: Allocatable) -> Allocatable:
    """``fn`` applied resource by resource (Kueue accounts every flavor-resource pair on its own)."""
    return Allocatable(*(fn(*vals) for vals in zip(*(astuple(x) for x in xs), strict=True)))


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
        self.prios = sorted(by_prio, reverse=True)
        self.created: dict[int, list[float]] = {}
        self.rows: dict[int, list[tuple[int, float]]] = {}
        for p, rows in by_prio.items():
            rows.sort(key=lambda q: (q.created, q.namespace, q.name))
            self.created[p] = [q.created for q in rows]
            self.rows[p] = [(q.gpus, q.hours if q.hours is not None else default_hours) for q in rows]

    def ahead(self, wl: HubWorkload, virtual: Mapping[int, list[tuple[int, float]]]) -> Backlog:
        """What Kueue admits before ``wl`` (BestEffortFIFO: priority, then creation): this queue's pending
        workloads, then those nominated here in this pass and not yet copied, priority by priority."""
        own = self.names.get((wl.namespace, wl.name))
        own_created = own.created if own is not None and not own.admitted else math.inf
        backlog = Backlog()
        for p in sorted(set(self.prios) | set(virtual), reverse=True):
            if p < wl.priority:
                break
            rows = self.rows.get(p, [])
            if p == wl.priority and rows:
                rows = rows[:bisect.bisect_left(self.created[p], own_created)]
            for g, h in rows:
                backlog.add(g, h)
            for g, h in virtual.get(p, ()):
                backlog.add(g, h)
        return backlog


class _Pass:
    def __init__(self, workers: Sequence[WorkerState], pricing: Pricing, now: float, settings: Settings) -> None:
        self.workers = {w.key: w for w in workers}
        self.costs = _Costs(pricing, workers)
        self.now = now
        self.settings = settings
        self.book = shape_book()
        self.queues: dict[tuple[str, str], _Queues] = {}
        # Per (worker, ClusterQueue, flavor): the worker's queues do not change during a pass.
        self.quotas: dict[tuple[str, str, str], FlavorQuota] = {}
        # Workloads nominated to a worker whose copy it does not list yet: worker -> priority -> (GPUs, hours).
        self.virtual: dict[str, dict[int, list[tuple[int, float]]]] = defaultdict(lambda: defaultdict(list))

    def queues_of(self, worker: str, cq: ClusterQueueState) -> _Queues:
        q = self.queues.get((worker, cq.name))
        if q is None:
            q = self.queues[(worker, cq.name)] = _Queues(cq, self.settings.default_hours)
        return q

    def add_virtual(self, wl: HubWorkload, worker: str) -> None:
        w = self.workers.get(worker)
        if w is None:
            return
        cq_name = w.local_queues.get((wl.namespace, wl.queue_name))
        cq = w.cluster_queues.get(cq_name or "")
        if cq is not None and (wl.namespace, wl.name) in self.queues_of(worker, cq).names:
            return  # Kueue has copied it there already: the worker's own list counts it
        self.virtual[worker][wl.priority].append((wl.request.gpus, self.job_of(wl).hours))

    def job_of(self, wl: HubWorkload) -> JobSpec:
        return wl.job if wl.job is not None else synthetic_job(wl, self.settings.default_hours)

    def _flavor_reason(self, wl: HubWorkload, job: JobSpec, w: WorkerState, f: FlavorState, quota: FlavorQuota,
                       pools: Mapping[str, Pool]) -> tuple[str | None, Pool | None, Shape | None]:
        pool = pools.get(f.pool or "")
        if pool is None:
            return f"flavor {f.name}: pool {f.pool} not in the fleet file", None, None
        for n in wl.needs:
            if n.pools is not None and pool.name not in n.pools:
                return f"pool {pool.name} outside the job's pool affinity", None, None
        shape = self.book.get(pool.instance_type)
        if shape is None:
            return f"pool {pool.name}: unknown instance type {pool.instance_type}", None, None
        if shape.accelerator not in job.accelerators:
            return f"pool {pool.name}: {shape.accelerator} not accepted", None, None
        if pool.capacity not in job.capacities():
            return f"pool {pool.name}: {pool.capacity} not accepted", None, None
        if wl.group and wl.group != SINGLE_NODE and shape.fabric != wl.group:
            return f"pool {pool.name}: fabric {shape.fabric}, the job needs {wl.group}", None, None
        node = allocatable(shape)
        for n in wl.needs:
            if not _fits(n.per_pod, node):
                return f"pool {pool.name}: a {n.name} pod does not fit one {shape.name} node", None, None
        if not _fits(wl.request, quota.potential):
            # Kueue's "exceeds max quota": never admitted there, however long the job waits.
            lent = quota.potential.gpus - f.nominal.gpus
            return (f"flavor {f.name}: at most {quota.potential.gpus} GPUs (nominal quota {f.nominal.gpus}"
                    + (f" + {lent} its cohort lends" if lent > 0 else "")
                    + f") cannot hold the job's {wl.request.gpus}"), None, None
        return None, pool, shape

    def score(self, wl: HubWorkload, worker: str) -> WorkerScore:
        """The worker's score for ``wl``, or why it cannot take it."""
        if wl.group_workers is not None and worker not in wl.group_workers:
            return WorkerScore(worker, False, f"not in the job's {wl.group or 'fabric'} group")
        w = self.workers.get(worker)
        if w is None or w.cluster is None:
            return WorkerScore(worker, False, "not in the fleet file")
        if not w.reachable:
            return WorkerScore(worker, False, f"unreachable: {w.error or 'no answer'}")
        cq_name = w.local_queues.get((wl.namespace, wl.queue_name))
        if cq_name is None:
            return WorkerScore(worker, False, f"no LocalQueue {wl.queue_name} in {wl.namespace}")
        cq = w.cluster_queues.get(cq_name)
        if cq is None:
            return WorkerScore(worker, False, f"ClusterQueue {cq_name} not found")
        job = self.job_of(wl)
        reason = job.allows(w.cluster.cloud, w.cluster.region)
        if reason:
            return WorkerScore(worker, False, reason)
        pools = {p.name: p for p in w.cluster.pools}
        runnable, excluded = self.costs.of(job)
        options: list[_Option] = []
        reasons: list[str] = []
        for f in cq.flavors:
            quota = self.quotas.get((worker, cq.name, f.name))
            if quota is None:
                quota = self.quotas[(worker, cq.name, f.name)] = flavor_quota(cq, f, w.cluster_queues.values())
            why, pool, _ = self._flavor_reason(wl, job, w, f, quota, pools)
            if why is not None or pool is None:
                reasons.append(str(why))
                continue
            offer = self.costs.pool_offer.get((worker, pool.name))
            if offer is None:
                reasons.append(f"pool {pool.name}: no catalog price for {pool.instance_type} in {w.cluster.region}")
                continue
            cand = runnable.get((id(offer), pool.capacity))
            if cand is None:
                reasons.append(f"pool {pool.name}: {excluded.get((id(offer), pool.capacity), 'not priced')}")
                continue
            options.append(_Option(f, pool, cand, quota))
        if not options:
            return WorkerScore(worker, False, "; ".join(dict.fromkeys(reasons)) or "no flavor")
        req = wl.request
        # Kueue's flavor fungibility on gpufleet's queues (TryNextFlavor, BorrowingOverPreemption): the first
        # flavor with free quota of its own, else the first the cohort's idle quota makes room in, else the first.
        landing = next((o for o in options if _fits(req, _minus(o.flavor.nominal, o.flavor.reserved))),
                       next((o for o in options if _fits(req, o.quota.available)), options[0]))
        borrowed = max(0, landing.flavor.reserved.gpus + req.gpus - landing.flavor.nominal.gpus)
        names = {o.flavor.name for o in options}
        # The wait counts the quota the cohort lends as the queue's (what Kueue admits into) and the other
        # queues' use of it (serving) as held GPUs no release accounts for: they end after default_hours.
        nominal = sum(o.quota.potential.gpus for o in options)
        used = sum(max(o.quota.potential.gpus - o.quota.available.gpus, o.flavor.reserved.gpus) for o in options)
        queues = self.queues_of(worker, cq)
        ahead = queues.ahead(wl, self.virtual.get(worker, {}))
        releases = [(q.gpus, q.remaining_hours if q.remaining_hours is not None else self.settings.default_hours)
                    for q in queues.running if q.flavors & names and (q.namespace, q.name) != (wl.namespace, wl.name)]
        wait = expected_wait_hours(nominal, used, ahead, req.gpus, releases, self.settings.default_hours)
        # The engine's ready time (transfer + run with its overhead) after the wait for admission: what the
        # job's deadline_hours is held against, as `placement plan` holds the ready time alone.
        ready = wait + landing.candidate.ready_hours
        deadline = job.deadline_hours
        return WorkerScore(worker, True, pool=landing.pool.name, capacity=landing.pool.capacity,
                           cost_usd=landing.candidate.cost.total_usd, wait_hours=wait,
                           wait_usd=wait * wait_usd_per_hour(wl, self.settings), ready_hours=ready,
                           late=deadline is not None and ready > deadline, borrowed_gpus=borrowed)


def wait_usd_per_hour(wl: HubWorkload, settings: Settings) -> float:
    """What an hour of waiting for admission costs this job, USD: its spec's ``usd_per_hour_of_delay`` when
    set, else its GPUs × ``settings.wait_usd_per_gpu_hour``."""
    if wl.delay_usd_per_hour is not None:
        return wl.delay_usd_per_hour
    return wl.request.gpus * settings.wait_usd_per_gpu_hour


def _wait_price_text(wl: HubWorkload, settings: Settings) -> str:
    if wl.delay_usd_per_hour is not None:
        return f"${wl.delay_usd_per_hour:g}/h (the job's usd_per_hour_of_delay)"
    return f"{wl.request.gpus} GPUs x ${settings.wait_usd_per_gpu_hour:g}/GPU-h"


def _rank_key(s: WorkerScore) -> tuple[bool, float, float, str]:
    """Workers that meet the job's deadline first (a late one is never preferred), then the lower score."""
    return (s.late, round(s.usd, 6), round(s.cost_usd, 6), s.worker)


def _best(scores: Sequence[WorkerScore], exclude: Iterable[str] = ()) -> WorkerScore | None:
    skip = set(exclude)
    return min((s for s in scores if s.fits and s.worker not in skip), key=_rank_key, default=None)


def _explain(best: WorkerScore, scores: Sequence[WorkerScore], wl: HubWorkload, settings: Settings) -> str:
    text = (f"{best.worker}: ${best.usd:,.2f} = ${best.cost_usd:,.2f} on pool {best.pool} ({best.capacity}) + wait "
            f"{best.wait_hours:.2f} h x {_wait_price_text(wl, settings)}")
    if best.borrowed_gpus:
        # Not priced: how often serving reclaims is not known here; an eviction re-routes the job (resume).
        text += f"; borrows {best.borrowed_gpus} GPUs of the cohort's idle quota, which serving may reclaim"
    deadline = wl.job.deadline_hours if wl.job is not None else None
    if deadline is not None:
        text += (f"; ready in {best.ready_hours:,.1f} h, " + (f"after deadline_hours {deadline:g} (no worker meets it)"
                                                              if best.late else f"within deadline_hours {deadline:g}"))
    runner = min((s for s in scores if s.fits and s.worker != best.worker), key=_rank_key, default=None)
    if runner is not None:
        text += f"; next {runner.worker} ${runner.usd:,.2f}" + (" (misses the deadline)" if runner.late and
                                                                  not best.late else "")
    return text


def _no_fit(scores: Sequence[WorkerScore], wl: HubWorkload) -> str:
    if not scores:
        return f"its admission check {wl.check} lists no worker cluster"
    return "; ".join(f"{s.worker}: {s.reason}" for s in scores if not s.fits)


def resume(mem: Memory | None, wl: HubWorkload) -> Memory | None:
    """The memory to decide ``wl`` with: an eviction since ``mem`` was written ends the round, as an admission
    does (the worker(s) then nominated are the ones to avoid next). A dispatcher that saw the admission has
    already reset the round; one that recalled ``mem`` from an Event written before it has not."""
    if mem is None or wl.evictions <= mem.evictions or not mem.nominated:
        return mem
    return replace(mem, nominated=(), tried=frozenset(mem.nominated), first_at=0.0, noted="")


def _unreadable(wl: HubWorkload, mem: Memory | None, problem: str, now: float) -> Decision:
    """The Workload waits, with a Warning Event naming ``problem`` (not repeated while it stays the same)."""
    message = f"not nominated: {problem}"
    noted = note(UNREADABLE, message)
    event = None if mem is not None and mem.noted == noted else EventOut("Warning", UNREADABLE, message)
    new = Memory(nominated=(), since=now, tried=mem.tried if mem is not None else frozenset(), first_at=0.0,
                 evictions=wl.evictions, noted=noted)
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
                                                     first_at=0.0, evictions=wl.evictions, noted="")))
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
                             evictions=wl.evictions, noted=mem.noted if mem is not None else "")
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
            scores = tuple(ps.score(wl, k) for k in wl.allowed)
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
        best = _best(scores, tried)
        if best is None and tried:
            # Every worker that fits was tried: start a new round, still avoiding the current one if possible.
            tried = set(current)
            best = _best(scores, tried) or (_best(scores) if not current else None)
        first_at = mem.first_at if mem is not None and mem.first_at else now
        if best is None:
            if current:
                message = f"{lead}; no other worker fits, keeping {', '.join(current)}"
                noted = note(DEADLINE, ",".join(current))
                new = Memory(nominated=current, since=now, tried=frozenset(current), first_at=first_at,
                             evictions=wl.evictions, noted=noted)
                event = None if mem is not None and mem.noted == noted else EventOut("Warning", DEADLINE, message)
                decisions.append(Decision(wl, "hold", current, DEADLINE, message, scores, event, new))
                ps_add = current
            else:
                message = "no worker fits: " + _no_fit(scores, wl)
                noted = note(NO_FIT, message)
                new = Memory(nominated=(), since=now, tried=frozenset(tried), first_at=0.0,
                             evictions=wl.evictions, noted=noted)
                event = None if mem is not None and mem.noted == noted else EventOut("Warning", NO_FIT, message)
                decisions.append(Decision(wl, "none", (), NO_FIT, message, scores, event, new))
                ps_add = ()
            for n in ps_add:
                ps.add_virtual(wl, n)
            continue
        body = _explain(best, scores, wl, settings)
        message = f"{lead}; nominated {body}" if lead else f"nominated {body}"
        new = Memory(nominated=(best.worker,), since=now, tried=frozenset(tried | {best.worker}), first_at=first_at,
                     evictions=wl.evictions)
        decisions.append(Decision(wl, "nominate", (best.worker,), reason, message, scores,
                                  EventOut("Warning" if reason == DEADLINE else "Normal", reason, message), new))
        ps.add_virtual(wl, best.worker)
    return PassResult(decisions=tuple(decisions), admitted=tuple(admitted), keep=frozenset(keep))
