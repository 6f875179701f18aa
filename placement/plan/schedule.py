"""A burst scheduled over time: each job gets a candidate and a start, against quota and reservations per slot.

The plan's horizon (``horizon_h`` hours from ``now``) is cut into slots of ``slot_h`` hours. A job may start at
its earliest start (``earliest_start``: hours from now, or a time) or at any slot boundary after it, before the
horizon ends; it holds its candidate's quota (or reservation nodes) in every slot its run overlaps, from the
start until its results are home (``ready_hours``: data in, the run with its expected interruptions, outputs
back; holding the nodes through the transfers is the conservative reading). Exact MILP (HiGHS):

    x[j,o,t] = 1: job j runs on option o from start t;  u[j] = 1: job j left unplaced
    subject to Σ_(o,t) x[j,o,t] + u[j] = 1                                   for every job j
               Σ_(j,o,t: o in g, t overlaps s) needed[j,o]·x[j,o,t] ≤ headroom[g]   for every group g, slot s
               t + ready[j,o] ≤ deadline[j]        (no column that ends late exists)
               window_start[o] ≤ t, t + ready[j,o] ≤ window_end[o]   (a reservation only inside its window)
    phase 1:   for each priority tier, highest first: minimise the tier's unplaced count, then hold it
    phase 2:   minimise Σ (total_usd[j,o] + usd_per_hour_of_delay[j]·(t − earliest[j]))·x[j,o,t]

``total_usd`` is the single-job plan's total (compute, egress, and delay priced over the ready hours); waiting
adds the job's ``usd_per_hour_of_delay`` per hour after its earliest start. Priorities are lexicographic, as in
:mod:`placement.plan.batch`: no placement or timing of lower tiers can cost a higher tier a place, and a deadline is a
constraint, never a price, so no tier is pushed past it. A job's options are its candidates pruned to those
that can matter: the cheapest per (quota group, draw, ready hours), and of those only the ones no other option
of the same group and draw beats on both cost and ready time.

Quota headroom is taken as constant over the horizon (the quota file is a snapshot); a reservation's free
nodes count only inside its window ``[starts, ends)``. Unknown quota bounds nothing (those options rank after
every known one, as in a plan).

Why one module: the grid, the options, the column generation and the compact final MILP are stages of one solve that
share its columns and slot indices; the HiGHS helpers it shares with batch and the portfolio are
:mod:`placement.plan.milp`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from placement.errors import InputError, UsageError, shown
from placement.model.catalog import Offer
from placement.model.egress import EgressBook
from placement.model.jobspec import JobSpec
from placement.model.quotas import QuotaTable
from placement.plan.batch import (
    Assignment,
    BatchResult,
    _group,
    _needed,
    _placement_key,
    _tiers,
    _total,
)
from placement.plan.job import Candidate, Row, _candidate, plan
from placement.plan.milp import (
    checked_run,
    cost_of,
    count_tiers,
    is_optimal,
    mip_gap,
    new_highs,
    run_until,
    status_of,
)

if TYPE_CHECKING:
    from placement.model.reservations import Reservation

DEFAULT_HORIZON_H = 168.0  # one week
DEFAULT_SLOT_H = 1.0
MAX_HORIZON_H = 24 * 366.0  # a year: beyond it no quota or price snapshot means anything
MAX_SLOTS = 20_000  # horizon / slot: the model has a capacity row per group and slot
Group = tuple[str, str, str]
MAX_ADDED = 50_000  # columns the reduced-cost step may add to one MILP (column generation)
GENERATE_ABOVE = 20_000  # (job, option, start) columns: beyond this many, the model's columns are generated
# The gap asked of the cost phase is shared: the pricing stops once its bound is within PRICING_SHARE of it, the
# rest is the integrality gap of the schedule the MILP finds. A quarter was enough while the LP was nearly integral;
# with the billing-catalogue prices (2026-11) the cheap quota is contended, a third of the jobs are fractional in the
# LP and the best integer schedule lies ~0.8 % above it, past the 0.75 % a quarter left (scripts/bench_schedule.py:
# 100 jobs, 1 %; 0.1 and 0.15 both prove it, 0.15 with fewer pricing rounds).
PRICING_SHARE = 0.15
# The neighbourhood MILP (a first incumbent): the generated columns whose reduced cost against the final LP's duals
# is within this share of the gap asked (with those the LP or the incumbent use); 0.05-0.5 measured, 0.1 fastest.
NEIGHBOURHOOD_SHARE = 0.1


@dataclass(frozen=True)
class Grid:
    """The schedule's time axis: ``horizon_h`` hours from ``now`` in slots of ``slot_h`` hours."""

    now: dt.datetime
    horizon_h: float = DEFAULT_HORIZON_H
    slot_h: float = DEFAULT_SLOT_H

    @property
    def slots(self) -> int:
        return math.ceil(self.horizon_h / self.slot_h - 1e-9)

    def hours(self, when: dt.datetime) -> float:
        return (when - self.now).total_seconds() / 3600.0


def grid(now: dt.datetime, horizon_h: float = DEFAULT_HORIZON_H, slot_h: float = DEFAULT_SLOT_H) -> Grid:
    """A checked :class:`Grid` (``--horizon-hours``, ``--slot-hours``)."""
    if not (isinstance(horizon_h, int | float) and 0 < horizon_h <= MAX_HORIZON_H):
        raise UsageError(f"--horizon-hours: must be more than 0 and at most {MAX_HORIZON_H:g} (a year), got "
                         f"{shown(horizon_h)}")
    if not (isinstance(slot_h, int | float) and 0 < slot_h <= horizon_h):
        raise UsageError(f"--slot-hours: must be more than 0 and at most --horizon-hours ({horizon_h:g}), got "
                         f"{shown(slot_h)}")
    if horizon_h / slot_h > MAX_SLOTS:
        raise UsageError(f"--slot-hours: {horizon_h:g} h in slots of {slot_h:g} h is {horizon_h / slot_h:,.0f} "
                         f"slots; at most {MAX_SLOTS:,}: use longer slots")
    return Grid(now, float(horizon_h), float(slot_h))


def earliest_hours(job: JobSpec, g: Grid, where: str = "") -> float:
    """A job's earliest start in hours from ``g.now`` (0 when it has none or it has passed), checked against
    its deadline and the horizon (an :class:`InputError` naming ``earliest_start``)."""
    from placement.model.reservations import parse_time

    raw = job.earliest_start
    field = f"{where}earliest_start"
    if raw is None:
        return 0.0
    hours = g.hours(parse_time(raw, field, "", blank="")) if isinstance(raw, str) else float(raw)
    hours = max(hours, 0.0)  # a start already passed means: now
    if job.deadline_hours is not None and hours >= job.deadline_hours:
        raise InputError(field, f"{hours:,.1f} h from --now is not before deadline_hours {job.deadline_hours:g}: "
                         "the job could never finish in time; move earliest_start earlier or the deadline later")
    if hours >= g.horizon_h:
        raise InputError(field, f"{hours:,.1f} h from --now is beyond the horizon ({g.horizon_h:g} h); raise "
                         "--horizon-hours or drop the job from this burst")
    return hours


def check_windows(reservations: Sequence[Reservation], g: Grid) -> None:
    """Refuse a reservation whose window is over by ``g.now``: a schedule cannot use the past."""
    for r in reservations:
        if r.ends is not None and r.ends <= g.now:
            raise InputError(f"reservation {r.id}: ends", f"{r.ends:%Y-%m-%dT%H:%M}Z is not after --now "
                             f"({g.now:%Y-%m-%dT%H:%M}Z): its window is in the past; drop the row or fix the date",
                             source=r.source)


@dataclass(frozen=True)
class Option:
    """One way to run a job: a pruned candidate row, the quota group it draws on (None: unknown), the draw,
    its ready hours, its total USD and the window (hours from now) it must start and end in."""

    row: Row
    group: Group | None
    needed: int
    ready_h: float
    usd: float
    start_min: float = 0.0
    end_max: float = math.inf


@dataclass(frozen=True)
class Slotted:
    """Where and when one job runs: ``candidate`` None = unplaced (``reason`` says why). Hours from now:
    ``start_h``, ``end_h`` (results home), ``wait_h`` after its earliest start, priced at ``wait_usd``;
    ``total_usd`` = the candidate's total + ``wait_usd``."""

    job: JobSpec
    candidate: Candidate | None
    earliest_h: float
    start_h: float | None = None
    end_h: float | None = None
    wait_h: float | None = None
    wait_usd: float = 0.0
    reason: str | None = None

    @property
    def total_usd(self) -> float:
        return 0.0 if self.candidate is None else self.candidate.cost.total_usd + self.wait_usd


@dataclass(frozen=True)
class Schedule:
    """The schedule: one :class:`Slotted` per job in input order; ``usage`` per quota group and slot (the
    groups any placed job draws on), with each group's ``headroom`` per slot and unit."""

    jobs: tuple[Slotted, ...]
    total_usd: float
    solver: str
    status: str
    gap: float
    grid: Grid
    usage: dict[Group, tuple[float, ...]]
    headroom: dict[Group, tuple[float, ...]]
    units: dict[Group, str]

    @property
    def placed(self) -> int:
        return sum(1 for s in self.jobs if s.candidate is not None)

    def as_batch(self) -> BatchResult:
        """The schedule as a :class:`BatchResult` (for the batch renderers): its total includes the waits."""
        used = {g: max(v, default=0.0) for g, v in self.usage.items()}
        out = tuple(Assignment(s.job, s.candidate, s.reason) for s in self.jobs)
        return BatchResult(out, self.total_usd, self.solver, self.status, used, gap=self.gap)


# --------------------------------------------------------------------------------------------- options


def _window(r: Reservation | None, g: Grid) -> tuple[float, float]:
    if r is None:
        return 0.0, math.inf
    lo = 0.0 if r.starts is None else max(g.hours(r.starts), 0.0)
    hi = math.inf if r.ends is None else g.hours(r.ends)
    return lo, hi


def options(p_rows: Sequence[Row], g: Grid) -> list[Option]:
    """A job's runnable rows pruned to the options that can matter to a schedule (see the module doc)."""
    best: dict[tuple[object, ...], Row] = {}
    for r in p_rows:  # ranked: known quota first, cheapest first
        t = r[11]
        key = (_group(r), _needed(r), round(r[15], 9), t.reservation.id if t.reservation is not None else None)
        if key not in best or _total(r) < _total(best[key]):
            best[key] = r
    out = []
    for r in best.values():
        lo, hi = _window(r[11].reservation, g)
        out.append(Option(r, _group(r), _needed(r), r[15], _total(r), lo, hi))
    kept = []
    for o in out:  # drop an option another one of the same group, draw and window beats on cost and time
        beaten = any(q is not o and q.group == o.group and q.needed == o.needed and q.group is not None
                     and (q.start_min, q.end_max) == (o.start_min, o.end_max)
                     and q.usd <= o.usd and q.ready_h <= o.ready_h and (q.usd, q.ready_h) != (o.usd, o.ready_h)
                     for q in out)
        if not beaten:
            kept.append(o)
    return kept


def starts(o: Option, earliest: float, deadline: float | None, g: Grid) -> list[float]:
    """Every start of option ``o`` for a job that may start at ``earliest``: that time and each slot boundary
    after it, before the horizon ends, such that it ends by its deadline and inside its window."""
    lo = max(earliest, o.start_min)
    end_by = min(deadline if deadline is not None else math.inf, o.end_max)
    if not (lo < g.horizon_h and lo + o.ready_h <= end_by + 1e-9):
        return []  # the starts rise: none later ends in time either
    # The boundaries k·slot_h with k in [k0, k1): before the horizon's end and ending by end_by (both tests as
    # written, the float estimate of k1 only a first guess; one comprehension instead of a loop per start).
    k0 = math.floor(lo / g.slot_h + 1e-9) + 1
    last = min(g.horizon_h - 1e-9, end_by + 1e-9 - o.ready_h + g.slot_h) / g.slot_h

    def fits(k: int) -> bool:
        return k * g.slot_h < g.horizon_h - 1e-9 and k * g.slot_h + o.ready_h <= end_by + 1e-9

    k1 = max(k0, math.ceil(last) if math.isfinite(last) else k0)
    while k1 > k0 and not fits(k1 - 1):
        k1 -= 1
    while fits(k1):
        k1 += 1
    return [lo, *(k * g.slot_h for k in range(k0, k1))]


def occupied(start: float, ready_h: float, slot_h: float) -> range:
    """The slots a run from ``start`` for ``ready_h`` hours overlaps."""
    first = math.floor(start / slot_h + 1e-9)
    last = max(math.ceil((start + ready_h) / slot_h - 1e-9), first + 1)
    return range(first, last)


@dataclass(frozen=True)
class Column:
    job: int
    option: Option
    start: float
    cost: float  # what the objective pays (with the unknown-quota penalty)
    usd: float  # what the plan pays: the option's total + the wait
    slots: range


# --------------------------------------------------------------------------------------------- solving


def _engine_reservations(reservations: Sequence[Reservation]) -> list[Reservation]:
    """Reservations as the single-job engine should see them: windows are the schedule's to apply."""
    return [dataclasses.replace(r, starts=None, ends=None) for r in reservations]


def prepare(jobs: Sequence[JobSpec], offers: Sequence[Offer], quotas: QuotaTable | None, book: EgressBook | None,
            reservations: Sequence[Reservation], g: Grid) -> tuple[list[float], list[list[Option]], list[str]]:
    """Each job's earliest start (hours), its options, and why it has none (for the unplaced)."""
    earliest = [earliest_hours(j, g, f"jobs[{i}].") for i, j in enumerate(jobs)]
    check_windows(reservations, g)
    engine_res = _engine_reservations(reservations)
    by_id = {r.id: r for r in reservations}
    memo: dict[JobSpec, tuple[list[Option], str]] = {}
    opts: list[list[Option]] = []
    why: list[str] = []
    for job in jobs:
        key = dataclasses.replace(_placement_key(job), earliest_start=None)
        if key not in memo:
            full = plan(job, offers, quotas, book, reservations=engine_res, now=g.now)
            rows = []
            for r in full.rows:
                res = r[11].reservation
                if res is not None:  # back to the reservation with its window
                    r = (*r[:11], _with_reservation(r[11], by_id[res.id]), *r[12:])  # type: ignore[assignment]
                rows.append(r)
            reason = "no runnable candidate"
            if not full.rows and full.excluded_rows:
                reason = f"no runnable candidate ({full.excluded[0].excluded})"
            memo[key] = (options(rows, g), reason)
        o, reason = memo[key]
        opts.append(o)
        why.append(reason)
    return earliest, opts, why


def _with_reservation(t: Any, r: Reservation) -> Any:
    """A copy of the row's terms pointing at the reservation with its window."""
    import copy

    out = copy.copy(t)
    out.reservation = r
    return out


def columns(jobs: Sequence[JobSpec], earliest: Sequence[float], opts: Sequence[Sequence[Option]],
            g: Grid) -> list[Column]:
    """Every (job, option, start) column, with its objective cost."""
    max_usd = max((o.usd for os_ in opts for o in os_), default=0.0)
    max_wait = max((j.usd_per_hour_of_delay for j in jobs), default=0.0) * g.horizon_h
    unknown = 2 * (max_usd + max_wait) + 1.0
    # A group no combination of jobs can overfill in any slot bounds nothing: its options are "free".
    most: dict[Group, dict[int, int]] = defaultdict(dict)
    for j, os_ in enumerate(opts):
        for o in os_:
            if o.group is not None:
                most[o.group][j] = max(most[o.group].get(j, 0), o.needed)
    free = {grp for grp, need in most.items()
            if sum(need.values()) <= min(_headroom(o) for os_ in opts for o in os_ if o.group == grp) + 1e-9}
    out = []
    for j, (job, e) in enumerate(zip(jobs, earliest, strict=True)):
        # Exact pruning: a column costing at least the job's cheapest free option at its first start is never
        # needed (that option takes nothing from any other job), nor is any later start of a costlier one.
        bound = math.inf
        for o in opts[j]:
            if o.group is None or o.group in free:
                first = starts(o, e, job.deadline_hours, g)[:1]
                if first:
                    bound = min(bound, o.usd + job.usd_per_hour_of_delay * (first[0] - e)
                                + (unknown if o.group is None else 0.0))
        for o in opts[j]:
            for t in starts(o, e, job.deadline_hours, g):
                usd = o.usd + job.usd_per_hour_of_delay * (t - e)
                cost = usd + (unknown if o.group is None else 0.0)
                if cost > bound + 1e-9 or (cost == bound and o.group is not None and o.group not in free):
                    if job.usd_per_hour_of_delay > 0:
                        break  # later starts cost more still
                    continue
                out.append(Column(j, o, t, cost, usd, occupied(t, o.ready_h, g.slot_h)))
                if o.group is None or o.group in free:
                    break  # a free option's first start is the only one worth having
    return out


def _headroom(o: Option) -> float:
    room = o.row[11].headroom
    return math.inf if room is None else float(room)


def _greedy(n_jobs: int, order: Sequence[int], cols: Sequence[Column]) -> list[int | None]:
    """Each job in ``order`` on its cheapest column that still fits: the first incumbent."""
    by_job: dict[int, list[int]] = defaultdict(list)
    for i, c in enumerate(cols):
        by_job[c.job].append(i)
    used: dict[tuple[Group, int], float] = defaultdict(float)
    picks: list[int | None] = [None] * n_jobs
    for j in order:
        for i in sorted(by_job[j], key=lambda i: (cols[i].cost, cols[i].start)):
            c = cols[i]
            g = c.option.group
            if g is None or all(used[(g, s)] + c.option.needed <= _headroom(c.option) + 1e-9 for s in c.slots):
                picks[j] = i
                if g is not None:
                    for s in c.slots:
                        used[(g, s)] += c.option.needed
                break
    return picks


def solve(jobs: Sequence[JobSpec], offers: Sequence[Offer], quotas: QuotaTable | None = None,
          book: EgressBook | None = None, *, reservations: Sequence[Reservation] = (), now: dt.datetime | None = None,
          horizon_h: float = DEFAULT_HORIZON_H, slot_h: float = DEFAULT_SLOT_H, time_limit_s: float = 30.0,
          mip_rel_gap: float = 1e-4, generate: bool | None = None) -> Schedule:
    """Schedule ``jobs`` (see the module doc). ``time_limit_s`` bounds candidate generation and solving
    together; the best schedule found by then is returned with its gap. ``generate``: build the model's
    columns by column generation (:func:`_solve_generated`); None = when there are more than
    :data:`GENERATE_ABOVE` (job, option, start) columns."""
    import highspy

    deadline = time.monotonic() + time_limit_s
    g = grid(now or dt.datetime.now(dt.UTC), horizon_h, slot_h)
    jobs = list(jobs)
    earliest, opts, why = prepare(jobs, offers, quotas, book, reservations, g)
    if generate is None:  # every column in the model while that stays small, else generated as needed
        generate = sum(len(starts(o, e, j.deadline_hours, g)) for j, e, os_ in zip(jobs, earliest, opts, strict=True)
                       for o in os_) > GENERATE_ABOVE
    if generate:
        gcols, gpicks, gstatus, ggap = _solve_generated(jobs, earliest, opts, g, deadline, mip_rel_gap)
        return _schedule(jobs, earliest, gcols, _left_shift(gcols, gpicks), why, opts, g, "HiGHS", gstatus, ggap)
    cols = columns(jobs, earliest, opts, g)
    n_x, n_jobs = len(cols), len(jobs)
    n = n_x + n_jobs
    order = sorted(range(n_jobs), key=lambda j: -jobs[j].priority_value)
    greedy = _greedy(n_jobs, order, cols)

    h = new_highs()
    h.setOptionValue("mip_rel_gap", mip_rel_gap)
    inf = highspy.kHighsInf
    h.addCols(n, [0.0] * n_x + [1.0] * n_jobs, [0.0] * n, [1.0] * n, 0, [], [], [])
    if n_x:
        h.changeColsIntegrality(n_x, list(range(n_x)), [highspy.HighsVarType.kInteger] * n_x)  # type: ignore[arg-type]
    by_job: dict[int, list[int]] = defaultdict(list)
    by_cell: dict[tuple[Group, int], list[int]] = defaultdict(list)
    for i, c in enumerate(cols):
        by_job[c.job].append(i)
        if c.option.group is not None:
            for s in c.slots:
                by_cell[(c.option.group, s)].append(i)
    lower: list[float] = []
    upper: list[float] = []
    row_starts: list[int] = []
    index: list[int] = []
    value: list[float] = []
    for j in range(n_jobs):
        row_starts.append(len(index))
        index.extend([*by_job[j], n_x + j])
        value.extend([1.0] * (len(by_job[j]) + 1))
        lower.append(1.0)
        upper.append(1.0)
    for members in by_cell.values():
        room = _headroom(cols[members[0]].option)
        # A cell no combination of its jobs can overfill bounds nothing: left out of the model.
        most: dict[int, int] = {}
        for i in members:
            most[cols[i].job] = max(most.get(cols[i].job, 0), cols[i].option.needed)
        if sum(most.values()) <= room + 1e-9:
            continue
        row_starts.append(len(index))
        index.extend(members)
        value.extend(float(cols[i].option.needed) for i in members)
        lower.append(-inf)
        upper.append(room)
    if row_starts:
        h.addRows(len(row_starts), lower, upper, len(index), row_starts, index, value)

    warm = [0.0] * n
    for j, pick in enumerate(greedy):
        warm[n_x + j if pick is None else pick] = 1.0
    # The priority tiers' counts first (placement.plan.milp.count_tiers): a run without a solution keeps the
    # greedy start for the rest.
    tiers = [[n_x + j for j in tier] for tier in _tiers(jobs)]
    counted = count_tiers(h, n, tiers, warm, deadline, stop_on_failure=False)
    status, warm = counted.status, counted.warm
    costs = [c.cost for c in cols] + [0.0] * n_jobs
    h.changeColsCost(n, list(range(n)), costs)
    found = checked_run(h, n, costs, warm, deadline)
    status = status_of(h)
    if found is not None:
        x, gap = found[0], mip_gap(h)
    else:  # the better of the warm start and what HiGHS found by the deadline
        solution = h.getSolution()
        x = warm
        if solution.value_valid and cost_of(costs, list(solution.col_value)) <= cost_of(costs, warm):
            x = list(solution.col_value)
        gap = mip_gap(h)
    picks: list[int | None] = [None] * n_jobs
    for i in range(n_x):
        if x[i] > 0.5:
            picks[cols[i].job] = i
    picks = _left_shift(cols, picks)
    return _schedule(jobs, earliest, cols, picks, why, opts, g, "HiGHS", status, gap)


def _left_shift(cols: Sequence[Column], picks: Sequence[int | None]) -> list[int | None]:
    """Start each placed job as early as its option allows without overfilling a slot, earliest first.

    A column's cost never falls with its start (a wait is priced at a rate >= 0), so this keeps the optimum's
    cost and only breaks ties (a job with no price of delay would otherwise start anywhere in the horizon)."""
    out = list(picks)
    used: dict[tuple[Group, int], float] = defaultdict(float)
    for i in out:
        grp = None if i is None else cols[i].option.group
        if i is not None and grp is not None:
            for s in cols[i].slots:
                used[(grp, s)] += cols[i].option.needed
    same: dict[tuple[int, int], list[int]] = defaultdict(list)
    for k, c in enumerate(cols):
        same[(c.job, id(c.option))].append(k)
    for j in sorted((j for j, i in enumerate(out) if i is not None), key=lambda j: cols[out[j]].start):  # type: ignore[index]
        i = out[j]
        assert i is not None
        c = cols[i]
        g = c.option.group
        for k in same[(j, id(c.option))]:
            e = cols[k]
            if e.start >= c.start or e.cost > c.cost:
                continue
            if g is not None:
                for s in c.slots:
                    used[(g, s)] -= c.option.needed
                fits = all(used[(g, s)] + c.option.needed <= _headroom(c.option) + 1e-9 for s in e.slots)
                for s in (e.slots if fits else c.slots):
                    used[(g, s)] += c.option.needed
                if not fits:
                    continue
            out[j] = i = k
            c = e
    return out


def _schedule(jobs: Sequence[JobSpec], earliest: Sequence[float], cols: Sequence[Column], picks: Sequence[int | None],
              why: Sequence[str], opts: Sequence[Sequence[Option]], g: Grid, solver: str, status: str,
              gap: float) -> Schedule:
    n_slots = max([g.slots, *(cols[i].slots.stop for i in picks if i is not None)])
    usage: dict[Group, list[float]] = {}
    room: dict[Group, list[float]] = {}
    units: dict[Group, str] = {}
    out = []
    total = 0.0
    for j, job in enumerate(jobs):
        i = picks[j]
        if i is None:
            has_start = any(starts(o, earliest[j], job.deadline_hours, g) for o in opts[j])
            reason = why[j] if not opts[j] else "no room left" if has_start else (
                "no start in the horizon lets it finish by its deadline (or inside its reservation's window)")
            out.append(Slotted(job, None, earliest[j], reason=reason))
            continue
        c = cols[i]
        o = c.option
        total += c.usd
        wait = c.start - earliest[j]
        out.append(Slotted(job, _candidate(job, o.row), earliest[j], c.start, c.start + o.ready_h, wait,
                           job.usd_per_hour_of_delay * wait))
        if o.group is not None:
            if o.group not in usage:
                usage[o.group] = [0.0] * n_slots
                units[o.group] = o.row[11].unit
                lo, hi = o.start_min, o.end_max
                room[o.group] = [_headroom(o) if s * g.slot_h + 1e-9 >= lo and (s + 1) * g.slot_h <= hi + 1e-9
                                 else 0.0 for s in range(n_slots)]
            for s in c.slots:
                usage[o.group][s] += o.needed
    return Schedule(tuple(out), total, solver, status, gap, g, {k: tuple(v) for k, v in usage.items()},
                    {k: tuple(v) for k, v in room.items()}, units)


# ----------------------------------------------------------------------------------- column generation


def _feasible(n_jobs: int, cols: Sequence[Column], x: Sequence[float]) -> bool:
    """Whether ``x`` (u[j] per job, then one x per column) gives each job one column or none, integral, and
    fills no group's slot past its headroom."""
    taken = [round(x[j]) for j in range(n_jobs)]
    used: dict[tuple[Group, int], float] = defaultdict(float)
    for i, c in enumerate(cols):
        v = x[n_jobs + i]
        if abs(v - round(v)) > 1e-6:
            return False
        if v > 0.5:
            taken[c.job] += 1
            if c.option.group is not None:
                for s in c.slots:
                    used[(c.option.group, s)] += c.option.needed
                    if used[(c.option.group, s)] > _headroom(c.option) + 1e-6:
                        return False
    return all(t == 1 for t in taken)


def _compact_mip(n_jobs: int, cols: Sequence[Column], costs: Sequence[float], lower: Sequence[float],
                 upper: Sequence[float], tier_rows: Sequence[tuple[list[int], float]]) -> Any:
    """The schedule MILP over ``cols`` alone (variables: u[j] for each job, then one x per column; bounds and
    costs as given), with a capacity row only where it can bind.

    Exact: the load of a group in slot s is the sum over the columns that hold s; with s' the last slot at or
    before s where one of those columns starts, every column that holds s started at or before s' and ends
    after s, so it holds s' too and load(s) <= load(s'). Rows at the slots where some column starts therefore
    imply all the others; of those, a row no combination of its jobs can overfill is left out as well."""
    import highspy

    n = n_jobs + len(cols)
    m = new_highs()
    inf = highspy.kHighsInf
    m.addCols(n, list(costs), list(lower), list(upper), 0, [], [], [])
    if cols:
        m.changeColsIntegrality(len(cols), list(range(n_jobs, n)),
                                [highspy.HighsVarType.kInteger] * len(cols))  # type: ignore[arg-type]
    by_job: dict[int, list[int]] = defaultdict(list)
    by_group: dict[Group, list[int]] = defaultdict(list)
    for i, c in enumerate(cols):
        by_job[c.job].append(n_jobs + i)
        if c.option.group is not None:
            by_group[c.option.group].append(i)
    lo: list[float] = []
    hi: list[float] = []
    starts_: list[int] = []
    index: list[int] = []
    value: list[float] = []
    for j in range(n_jobs):
        starts_.append(len(index))
        index.extend([j, *by_job[j]])
        value.extend([1.0] * (1 + len(by_job[j])))
        lo.append(1.0)
        hi.append(1.0)
    for members, count in tier_rows:
        starts_.append(len(index))
        index.extend(members)
        value.extend([1.0] * len(members))
        lo.append(-inf)
        hi.append(count)
    for mine in by_group.values():
        room = _headroom(cols[mine[0]].option)
        for s in sorted({cols[i].slots.start for i in mine}):
            here = [i for i in mine if cols[i].slots.start <= s < cols[i].slots.stop]
            most: dict[int, int] = {}
            for i in here:
                most[cols[i].job] = max(most.get(cols[i].job, 0), cols[i].option.needed)
            if sum(most.values()) <= room + 1e-9:
                continue
            starts_.append(len(index))
            index.extend(n_jobs + i for i in here)
            value.extend(float(cols[i].option.needed) for i in here)
            lo.append(-inf)
            hi.append(room)
    m.addRows(len(starts_), lo, hi, len(index), starts_, index, value)
    return m



@dataclass(frozen=True)
class _Starts:
    """Every start of one job's option as arrays: start hours, objective cost, USD, first and last slot (+1)."""

    job: int
    option: Option
    t: Any
    cost: Any
    usd: Any
    first: Any
    last: Any


def _all_starts(jobs: Sequence[JobSpec], earliest: Sequence[float], opts: Sequence[Sequence[Option]],
                g: Grid) -> list[_Starts]:
    import numpy as np

    max_usd = max((o.usd for os_ in opts for o in os_), default=0.0)
    max_wait = max((j.usd_per_hour_of_delay for j in jobs), default=0.0) * g.horizon_h
    unknown = 2 * (max_usd + max_wait) + 1.0
    out = []
    for j, (job, e) in enumerate(zip(jobs, earliest, strict=True)):
        for o in opts[j]:
            t = np.array(starts(o, e, job.deadline_hours, g), dtype=float)
            if not len(t):
                continue
            usd = o.usd + job.usd_per_hour_of_delay * (t - e)
            first = np.floor(t / g.slot_h + 1e-9).astype(int)
            last = np.maximum(np.ceil((t + o.ready_h) / g.slot_h - 1e-9).astype(int), first + 1)
            out.append(_Starts(j, o, t, usd + (unknown if o.group is None else 0.0), usd, first, last))
    return out


def _solve_generated(jobs: Sequence[JobSpec], earliest: Sequence[float], opts: Sequence[Sequence[Option]], g: Grid,
                     deadline: float, mip_rel_gap: float) -> tuple[list[Column], list[int | None], str, float]:
    """The schedule MILP by column generation, exact to ``mip_rel_gap``: the (job, option, start) columns enter
    the model only when their reduced cost against the LP's duals can improve it, so the model holds a few per
    job instead of every start of every option.

    Each phase (the priority tiers' counts, then the cost) solves its LP relaxation over all columns by pricing:
    rc = cost − π_job − needed·Σ_(slots it holds) μ_(group, slot), with π, μ the assignment and capacity duals,
    prefix sums over the slots making a price one subtraction per start. At the LP optimum L (no column prices
    below 0) LP duality gives cost(x) ≥ L + Σ rc·x for every integer x, so after the MILP over the generated
    columns finds z, every column with rc ≤ z − L is added and the MILP solved again: none left out can beat it.
    """
    import highspy
    import numpy as np

    n_jobs = len(jobs)
    priced = _all_starts(jobs, earliest, opts, g)
    n_slots = max([g.slots, *(int(p.last.max()) for p in priced)])
    groups = sorted({p.option.group for p in priced if p.option.group is not None})
    gi = {grp: k for k, grp in enumerate(groups)}
    room = {p.option.group: _headroom(p.option) for p in priced if p.option.group is not None}
    h = new_highs()
    inf = highspy.kHighsInf
    h.addCols(n_jobs, [0.0] * n_jobs, [0.0] * n_jobs, [1.0] * n_jobs, 0, [], [], [])
    for j in range(n_jobs):
        h.addRow(1.0, 1.0, 1, [j], [1.0])
    for grp in groups:
        h.addRows(n_slots, [-inf] * n_slots, [room[grp]] * n_slots, 0, [0] * n_slots, [], [])
    cols: list[Column] = []
    index: dict[tuple[int, float], int] = {}  # (id of its _Starts, start) -> column number
    phase_now: list[Sequence[int] | None] = [None]  # the phase being solved: a tier's jobs, or None (cost)
    tier_rows: list[tuple[list[int], float]] = []  # each tier's unplaced jobs and the most of them left out

    def add(p: _Starts, k: int) -> int:
        key = (id(p), float(p.t[k]))
        if key in index:
            return index[key]
        rows = [p.job]
        if p.option.group is not None:
            base = n_jobs + gi[p.option.group] * n_slots
            rows += [base + s for s in range(int(p.first[k]), int(p.last[k]))]
        vals = [1.0] + [float(p.option.needed)] * (len(rows) - 1)
        h.addCol(float(p.cost[k]) if phase_now[0] is None else 0.0, 0.0, 1.0, len(rows), rows, vals)
        cols.append(Column(p.job, p.option, float(p.t[k]), float(p.cost[k]), float(p.usd[k]),
                           range(int(p.first[k]), int(p.last[k]))))
        index[key] = n_jobs + len(cols) - 1
        return index[key]

    # The greedy incumbent (priority order, cheapest start that fits) and each option's first start.
    used = np.zeros((len(groups), n_slots))
    order = sorted(range(n_jobs), key=lambda j: -jobs[j].priority_value)
    mine: dict[int, list[_Starts]] = defaultdict(list)
    for p in priced:
        mine[p.job].append(p)
        add(p, 0)
    warm_cols: dict[int, int] = {}
    for j in order:
        best: tuple[float, _Starts, int] | None = None
        for p in mine[j]:
            for k in np.argsort(p.cost, kind="stable"):
                if best is not None and p.cost[k] >= best[0]:
                    break
                if p.option.group is None or all(used[gi[p.option.group], int(p.first[k]):int(p.last[k])]
                                                 + p.option.needed <= room[p.option.group] + 1e-9):
                    best = (float(p.cost[k]), p, int(k))
                    break
        if best is not None:
            _, p, k = best
            warm_cols[j] = add(p, k)
            if p.option.group is not None:
                used[gi[p.option.group], int(p.first[k]):int(p.last[k])] += p.option.needed

    def objective(phase: Sequence[int] | None) -> list[float]:
        u = [0.0] * n_jobs
        if phase is None:
            return u + [c.cost for c in cols]
        for j in phase:
            u[j] = 1.0
        return u + [0.0] * len(cols)

    # Every start of every (job, option) in flat arrays, so that a pricing round is a few array operations
    # (one per start in Python took a third of the solve): segment i holds priced[i]'s starts.
    sizes = np.array([len(p.t) for p in priced], dtype=int)
    offs = np.concatenate(([0], np.cumsum(sizes))).astype(int)
    seg_of = np.repeat(np.arange(len(priced)), sizes)
    seg_job = np.array([p.job for p in priced], dtype=int)
    flat_job = np.repeat(seg_job, sizes)
    flat_cost = np.concatenate([p.cost for p in priced]) if priced else np.zeros(0)
    flat_need = np.repeat([float(p.option.needed) if p.option.group is not None else 0.0 for p in priced], sizes)
    flat_g = np.repeat([gi[p.option.group] if p.option.group is not None else 0 for p in priced], sizes)
    flat_first = np.concatenate([p.first for p in priced]) if priced else np.zeros(0, dtype=int)
    flat_last = np.concatenate([p.last for p in priced]) if priced else np.zeros(0, dtype=int)
    has_group = flat_need > 0

    def price(phase: Sequence[int] | None,
              duals: Sequence[float]) -> tuple[list[tuple[float, _Starts, Any]], Any, Any]:
        """Per (job, option): the starts' reduced costs, the start with the least one (the first, as argmin)
        and that least reduced cost."""
        y = np.asarray(duals)
        pi = y[:n_jobs]
        rc = (flat_cost if phase is None else np.zeros(len(flat_cost))) - pi[flat_job]
        if groups:
            mu = y[n_jobs:n_jobs + len(groups) * n_slots].reshape(len(groups), n_slots)
            pre = np.concatenate((np.zeros((len(groups), 1)), np.cumsum(mu, axis=1)), axis=1)
            held = pre[flat_g, flat_last] - pre[flat_g, flat_first]
            rc = np.where(has_group, rc - flat_need * held, rc)
        if not priced:
            return [], np.zeros(0, dtype=int), np.zeros(0)
        least = np.minimum.reduceat(rc, offs[:-1])
        at = np.flatnonzero(rc == least[seg_of])
        first = at[np.unique(seg_of[at], return_index=True)[1]]
        return ([(0.0, p, rc[offs[i]:offs[i + 1]]) for i, p in enumerate(priced)], first - offs[:-1], least)

    def phase_solve(phase: Sequence[int] | None, warm: list[float]) -> tuple[list[float], str, float]:
        """Column generation for the LP, then the MILP over the columns, then the columns the bound lets in.

        With π, μ the restricted LP's duals and m_j = min(0, the least reduced cost of job j's columns), every
        integer schedule x costs at least LB + Σ_i (rc_i − m_j(i))·x_i, LB = L_restricted + Σ_j m_j (each job
        takes one column or none): LB bounds the full LP, and a column with rc_i > z − LB + m_j is in no
        schedule cheaper than z. Pricing stops once LB is within :data:`PRICING_SHARE` of the gap asked of
        L_restricted."""
        slack_share = PRICING_SHARE * mip_rel_gap if phase is None else 0.0
        n = n_jobs + len(cols)
        # The LP: integrality off and the phase's costs set once; columns added later get their cost in add().
        h.changeColsIntegrality(n, list(range(n)), [highspy.HighsVarType.kContinuous] * n)  # type: ignore[arg-type]
        h.changeColsCost(n, list(range(n)), objective(phase))
        while True:  # the LP over every column, by pricing
            run_until(h, deadline)
            if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
                return warm, status_of(h), math.inf
            restricted = h.getInfo().objective_function_value
            duals = list(h.getSolution().row_dual)
            best: dict[int, list[tuple[float, _Starts, int]]] = defaultdict(list)
            priced_now, kmin, rcmin = price(phase, duals)
            least_of = np.zeros(n_jobs)
            np.minimum.at(least_of, seg_job, rcmin)
            least = least_of.tolist()
            below = -1e-9 * max(1.0, abs(restricted))
            for i in np.flatnonzero(rcmin < below).tolist():
                p, k = priced[i], int(kmin[i])
                if (id(p), float(p.t[k])) not in index:
                    best[p.job].append((float(rcmin[i]), p, k))
            bound = restricted + sum(least)
            if not best or restricted - bound <= slack_share * max(abs(restricted), 1.0) + 1e-9 \
                    or time.monotonic() >= deadline:
                break
            for offers_ in best.values():
                for _, p, k in sorted(offers_, key=lambda e: e[0])[:4]:
                    add(p, k)
        warm = _rounded(list(h.getSolution().col_value), warm)
        if phase is None:
            warm = _neighbourhood(warm, restricted, bound)
        x, status, z = _mip(warm, accept_below=within(bound) if phase is None else None)
        gap = max(z - bound, 0.0) / max(abs(z), 1.0)
        if phase is not None or gap > mip_rel_gap:
            # Not yet proven within the gap (a count must be exact): every column that could still be in a
            # better integer schedule joins, and the MILP runs again.
            more = []
            for _, p, rc in priced_now:
                for kk in np.nonzero(rc <= z - bound + least[p.job] + 1e-9 * max(abs(z), 1.0))[0]:
                    if (id(p), float(p.t[kk])) not in index:
                        more.append((p, int(kk)))
            if more and len(more) <= MAX_ADDED:
                for p, k in more:
                    add(p, k)
                x, status, z = _mip(x + [0.0] * (n_jobs + len(cols) - len(x)),
                                    accept_below=within(bound) if phase is None else None)
                gap = max(z - bound, 0.0) / max(abs(z), 1.0)
            elif more:
                status = f"{status}; {len(more):,} columns could still improve it (gap vs the bound: {gap:.2%})"
        return x, status, gap if phase is None else 0.0

    def within(bound: float) -> float:
        """The most a schedule may cost to be proven within the gap asked of the bound ``bound``."""
        return bound + mip_rel_gap * max(abs(bound), 1.0) if bound >= 0 else bound * (1 - mip_rel_gap)

    def _neighbourhood(warm: list[float], restricted: float, bound: float) -> list[float]:
        """A better incumbent for the cost phase from the MILP over the generated columns that the final LP
        prices near zero (reduced cost within :data:`NEIGHBOURHOOD_SHARE` of the gap asked, or used by the LP or
        by ``warm``); ``warm`` when that is no better. Its root solves in a fraction of the whole restricted
        MILP's, and what it finds is proven against the pricing bound like any other schedule."""
        n = n_jobs + len(cols)
        warm = warm + [0.0] * (n - len(warm))
        sol = h.getSolution()
        rc = list(sol.col_dual) + [0.0] * (n - len(sol.col_dual))
        lp = list(sol.col_value) + [0.0] * (n - len(sol.col_value))
        near = NEIGHBOURHOOD_SHARE * mip_rel_gap * max(abs(restricted), 1.0)
        out = [i for i in range(n_jobs, n) if lp[i] <= 1e-9 and warm[i] < 0.5 and rc[i] > near]
        if not out:
            return warm
        h.changeColsBounds(len(out), out, [0.0] * len(out), [0.0] * len(out))
        try:
            x, _, z = _mip(warm, time.monotonic() + max(deadline - time.monotonic(), 0.0) / 3, within(bound))
        finally:
            h.changeColsBounds(len(out), out, [0.0] * len(out), [1.0] * len(out))
        return x if _feasible(n_jobs, cols, x) and z < cost_of(objective(None), warm) else warm

    def _rounded(lp: list[float], warm: list[float]) -> list[float]:
        """A first incumbent from the LP: its integral assignments held, the MILP of the fractional jobs solved
        (this relaxation is nearly integral); ``warm`` when that is no better."""
        n = n_jobs + len(cols)
        lp = lp + [0.0] * (n - len(lp))
        by_job: dict[int, list[int]] = defaultdict(list)
        for i, c in enumerate(cols):
            by_job[c.job].append(n_jobs + i)
        fix: list[int] = []
        value: list[float] = []
        for j in range(n_jobs):
            whole = next((i for i in by_job[j] if lp[i] > 1 - 1e-6), None)
            if whole is not None or lp[j] > 1 - 1e-6:
                fix += by_job[j]
                value += [1.0 if i == whole else 0.0 for i in by_job[j]]
        if not fix:
            return warm
        h.changeColsBounds(len(fix), fix, value, value)
        x, _, z = _mip(warm, time.monotonic() + max(deadline - time.monotonic(), 0.0) / 3)
        h.changeColsBounds(len(fix), fix, [0.0] * len(fix), [1.0] * len(fix))
        costs = objective(phase_now[0])
        before = math.fsum(c * v for c, v in zip(costs, warm + [0.0] * (n - len(warm)), strict=True))
        feasible = all(abs(sum(x[i] for i in by_job[j]) + x[j] - 1) < 1e-6 for j in range(n_jobs))
        return x if feasible and z < before else warm

    def _mip(warm: list[float], until: float | None = None,
             accept_below: float | None = None) -> tuple[list[float], str, float]:
        """The MILP over the generated columns, as its own compact model (:func:`_compact_mip`): the pricing
        model keeps a capacity row for every slot (a new column may start anywhere), the MILP needs only the
        rows where one of its columns starts."""
        n = n_jobs + len(cols)
        warm = warm + [0.0] * (n - len(warm))
        costs = objective(phase_now[0])
        lp = h.getLp()
        m = _compact_mip(n_jobs, cols, costs, list(lp.col_lower_), list(lp.col_upper_), tier_rows)
        m.setOptionValue("mip_rel_gap", 0.75 * mip_rel_gap)  # the rest of the gap is the pricing's
        stop = deadline if until is None else until
        if accept_below is not None:
            return _accepting(m, n, costs, warm, stop, accept_below)
        found = checked_run(m, n, costs, warm, stop)
        h.changeColsCost(n, list(range(n)), costs)
        if found is None:
            sol = m.getSolution()
            x = list(sol.col_value) if sol.value_valid else warm
            return x, status_of(m), cost_of(costs, x)
        return found[0], "Optimal", found[1]

    def _accepting(m: Any, n: int, costs: Sequence[float], warm: list[float], stop: float,
                   accept_below: float) -> tuple[list[float], str, float]:
        """Run the compact MILP ``m`` until it finds a schedule proven within the gap against the pricing bound.

        The phase's gap is proven against the pricing bound, not HiGHS's own: the first schedule that checks
        feasible and costs at most ``accept_below`` (worked out from the schedule itself) is proven within it,
        so the run stops there (a callback) instead of going on to close HiGHS's own gap over the restricted
        columns, and not sooner (HiGHS's own gap is set to 0). Presolve is off: with a start given, HiGHS's
        presolve can lose the objective offset and report the start optimal at once (highspy 1.16, see
        checked_run), and its reruns cost more than presolve saves on these models. The start ``warm`` is
        given to HiGHS, or returned at once when it is proven already."""
        if _feasible(n_jobs, cols, warm) and cost_of(costs, warm) <= accept_below:
            return warm, "Optimal", cost_of(costs, warm)
        proven: list[tuple[list[float], float]] = []

        def improving(e: Any) -> None:
            x = list(e.data_out.mip_solution)
            z = cost_of(costs, x)
            if z <= accept_below and _feasible(n_jobs, cols, x):
                proven.append((x, z))

        def interrupt(e: Any) -> None:
            if proven:
                e.data_in.user_interrupt = True

        m.setOptionValue("presolve", "off")
        # HiGHS's own gap is over the restricted columns only: stopping at it can leave a schedule the pricing
        # bound does not prove (seen on the pre-2026-11 prices: 1.21 %, then too many columns to add), so the run
        # goes on until the callback accepts a schedule, the restricted MILP is solved, or the time is up.
        m.setOptionValue("mip_rel_gap", 0.0)
        m.cbMipImprovingSolution.subscribe(improving)
        m.cbMipInterrupt.subscribe(interrupt)
        if _feasible(n_jobs, cols, warm):
            m.setSolution(n, list(range(n)), warm)
        run_until(m, stop)
        if proven:
            return proven[-1][0], "Optimal", proven[-1][1]
        sol = m.getSolution()
        x = list(sol.col_value) if sol.value_valid and _feasible(n_jobs, cols, list(sol.col_value)) else warm
        if cost_of(costs, x) > cost_of(costs, warm) and _feasible(n_jobs, cols, warm):
            x = warm
        status = "Optimal" if is_optimal(m) else status_of(m)
        return x, status, cost_of(costs, x)

    warm = [0.0] * (n_jobs + len(cols))
    for j in range(n_jobs):
        if j in warm_cols:
            warm[warm_cols[j]] = 1.0
        else:
            warm[j] = 1.0
    status, gap = "Optimal", 0.0
    for tier in _tiers(jobs):
        if sum(warm[j] for j in tier) > 0.5:
            phase_now[0] = tier
            warm, status, _ = phase_solve(tier, warm)
        count = float(round(sum(warm[j] for j in tier)))
        h.addRow(-inf, count, len(tier), list(tier), [1.0] * len(tier))
        tier_rows.append((list(tier), count))
    phase_now[0] = None
    x, status, gap = phase_solve(None, warm)
    x = x + [0.0] * (n_jobs + len(cols) - len(x))
    picks: list[int | None] = [None] * n_jobs
    for i, c in enumerate(cols):
        if x[n_jobs + i] > 0.5:
            picks[c.job] = i
    # every start of the picked options, for the left shift
    for j, pick in enumerate(picks):
        if pick is None:
            continue
        for p in mine[j]:
            if p.option is cols[pick].option:
                for k in range(len(p.t)):
                    if (id(p), float(p.t[k])) not in index:
                        index[(id(p), float(p.t[k]))] = -1
                        cols.append(Column(p.job, p.option, float(p.t[k]), float(p.cost[k]), float(p.usd[k]),
                                           range(int(p.first[k]), int(p.last[k]))))
    return cols, picks, status, gap
