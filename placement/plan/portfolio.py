"""The reserved base a forecast justifies: what to commit to, where, from when and for how long, and how each
week's demand is served by reserved, spot and on-demand capacity within quota. Exact MILP (HiGHS).

Units: GPU-hours of useful work (at the pool's speed as the catalog's accelerator, one GPU-hour of the class's
accelerator); weeks of 168 hours; USD. A pool is one (cloud, region, instance type) of the catalog with an
on-demand price; its GPU-hour prices are the cheapest zone's node price / GPUs per node.

    variables  n[k] ∈ Z≥0    nodes bought of commitment k = (term, pool, start week, weeks)
               r, s, d ≥ 0   useful GPU-hours of class c in week w on pool p: reserved, spot, on-demand
               x ≥ 0         GPU-hours of class c in week w left unserved (priced far above on-demand)
               q[g] ≥ 0      quota (in the group's unit) to request now, usable from the cloud's lead week
    minimise   Σ_k n·G·168·weeks·(1 − discount)·od_price  +  Σ s·spot_price·(1 + ov_s)  +  Σ d·od_price·(1 + ov_d)
               + Σ x·UNSERVED + ε·Σ q
    subject to Σ_(w'≤w) served[c,w'] ≤ Σ_(w'≤w) demand[c,w']           (no work before it arrives)
               Σ_(w'≤w) served[c,w'] ≥ Σ_(w'≤w−within+1) demand[c,w']   (each week's demand done within its weeks)
               Σ_p s[c,w,p] ≤ interruptible[c]·served[c,w]             (only the tolerant share on spot)
               Σ_c r[c,w,p]·(1 + ov_d) ≤ Σ_(k on p, active in w) n[k]·G·168    (reserved hours are the bought ones)
               Σ_(p in g) d·(1 + ov_d)·u_p / a_od(p) + Σ_(k on g, uses quota) n·G·168·u_p ≤ 168·(H_g + q_g·[w ≥ lead])
               Σ_(p in g') s·(1 + ov_s)·u_p / a_spot(p) ≤ 168·(H_g' + q_g'·[w ≥ lead])
with ``served = Σ_p (r + s + d) + x``; ``ov`` the expected interruption overhead of the class's gang on that
capacity (:func:`placement.model.physics.gang`: Daly's model, spot reclaims and hardware faults), ``a`` the share of
the quota one can expect to obtain (:class:`placement.model.commitments.Book`; spot availability is data until a
calibration measures it: :func:`calibrated_spot`), ``u_p`` quota units per GPU (vCPUs on AWS), ``H`` the headroom
(unknown quota bounds nothing). A term's whole cost counts, also the weeks past the horizon: it is owed.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from placement.errors import InputError, shown
from placement.model.catalog import Offer
from placement.model.commitments import Book, Term
from placement.model.quotas import QuotaTable

SCHEMA = "gpufleet.forecast/v1"
HOURS_PER_WEEK = 168.0
MAX_WEEKS = 52  # a year: beyond it no quota, price or forecast means much
CLASS_FIELDS = ("name", "workload", "accelerators", "gpus_per_job", "hours_per_run", "interruptible",
                "within_weeks", "regions", "clouds", "demand_gpu_hours", "checkpoint_write_minutes")


@dataclass(frozen=True)
class DemandClass:
    """Weekly demand (useful GPU-hours) of one workload class: which accelerators it accepts, its gang size
    (``gpus_per_job``, for the interruption physics) and run length, the share that tolerates interruption,
    and ``within_weeks``: each week's demand must be done within that many weeks (1: the same week)."""

    name: str
    workload: str
    accelerators: tuple[str, ...]
    demand: tuple[float, ...]
    interruptible: float = 0.0
    within_weeks: int = 1
    gpus_per_job: int = 8
    hours_per_run: float = 24.0
    regions: tuple[str, ...] = ()
    clouds: tuple[str, ...] = ()
    checkpoint_write_minutes: float = 5.0


@dataclass(frozen=True)
class Forecast:
    weeks: int
    classes: tuple[DemandClass, ...]

    def scaled(self, factor: float) -> Forecast:
        return replace(self, classes=tuple(replace(c, demand=tuple(d * factor for d in c.demand))
                                           for c in self.classes))


def _fnum(v: Any, field: str, lo: float = 0.0, hi: float = math.inf) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or not lo <= v <= hi:
        raise InputError(field, f"must be a number from {lo:g} to {hi:g}, got {shown(v)}")
    return float(v)


def parse_forecast(doc: Any) -> Forecast:
    """A forecast document (``schema: gpufleet.forecast/v1``, ``weeks``, ``classes``), validated."""
    from placement.model.shapes import shape_book

    if not isinstance(doc, Mapping):
        raise InputError("classes", "the forecast must be a mapping with weeks: and classes:")
    if doc.get("schema", SCHEMA) != SCHEMA:
        raise InputError("schema", f"must be {SCHEMA}, got {shown(doc.get('schema'))}")
    weeks_raw = doc.get("weeks")
    if isinstance(weeks_raw, bool) or not isinstance(weeks_raw, int) or weeks_raw < 1:
        raise InputError("weeks", f"must be a whole number of weeks >= 1, got {shown(weeks_raw)}")
    if weeks_raw > MAX_WEEKS:
        raise InputError("weeks", f"{weeks_raw} is beyond a year; plan at most {MAX_WEEKS} weeks")
    weeks = int(weeks_raw)
    raw = doc.get("classes")
    if not isinstance(raw, list) or not raw:
        raise InputError("classes", "must be a non-empty list of workload classes")
    book = shape_book()
    out = []
    for i, c in enumerate(raw):
        w = f"classes[{i}]"
        if not isinstance(c, Mapping):
            raise InputError(w, "must be a mapping")
        for f in c:
            if f not in CLASS_FIELDS:
                raise InputError(f"{w}.{f}", "is not a class field; fields: " + ", ".join(CLASS_FIELDS))
        acc = c.get("accelerators")
        acc = [acc] if isinstance(acc, str) else acc
        if not isinstance(acc, list) or not acc:
            raise InputError(f"{w}.accelerators", "must name the accelerators it accepts, e.g. [H100, H200]")
        accels = tuple(book.canonical_accelerator(str(a)) for a in acc)
        for a, given in zip(accels, acc, strict=True):
            if a not in book.accelerators():
                raise InputError(f"{w}.accelerators", f"unknown accelerator {shown(given)}; known: "
                                 + ", ".join(sorted(book.accelerators())))
        demand = c.get("demand_gpu_hours")
        if not isinstance(demand, list) or len(demand) != weeks:
            raise InputError(f"{w}.demand_gpu_hours", f"must list {weeks} weekly GPU-hour figures (weeks: {weeks})")
        for k, d in enumerate(demand):
            if isinstance(d, int | float) and not isinstance(d, bool) and d < 0:
                raise InputError(f"{w}.demand_gpu_hours[{k}]", f"is negative ({d:g}); demand is GPU-hours >= 0")
        out.append(DemandClass(
            name=str(c.get("name") or f"class-{i}"), workload=str(c.get("workload", "llm")), accelerators=accels,
            demand=tuple(_fnum(d, f"{w}.demand_gpu_hours[{k}]", 0.0, 1e9) for k, d in enumerate(demand)),
            interruptible=_fnum(c.get("interruptible", 0.0), f"{w}.interruptible", 0.0, 1.0),
            within_weeks=int(_fnum(c.get("within_weeks", 1), f"{w}.within_weeks", 1, weeks)),
            gpus_per_job=int(_fnum(c.get("gpus_per_job", 8), f"{w}.gpus_per_job", 1, 1e5)),
            hours_per_run=_fnum(c.get("hours_per_run", 24.0), f"{w}.hours_per_run", 0.1, 8784),
            regions=tuple(str(r) for r in c.get("regions") or ()), clouds=tuple(str(r) for r in c.get("clouds") or ()),
            checkpoint_write_minutes=_fnum(c.get("checkpoint_write_minutes", 5.0), f"{w}.checkpoint_write_minutes",
                                           0.0, 1440)))
    return Forecast(weeks, tuple(out))


# ------------------------------------------------------------------------------------------------ pools


@dataclass(frozen=True)
class Pool:
    """One (cloud, region, instance type): USD per GPU-hour on demand and on spot (None: no spot), GPUs per
    node, quota keys and units per GPU."""

    cloud: str
    region: str
    instance_type: str
    accelerator: str
    gpus: int
    od_usd: float
    spot_usd: float | None
    od_key: str | None
    spot_key: str | None
    units_per_gpu: float
    unit: str


def pools(offers: Sequence[Offer], accelerators: set[str]) -> list[Pool]:
    """The catalog's pools of ``accelerators``: the cheapest zone's prices per GPU-hour."""
    best: dict[tuple[str, str, str], Pool] = {}
    for o in offers:
        sh = o.shape
        if sh.accelerator not in accelerators or o.price is None:
            continue
        key = (o.cloud, o.region, sh.name)
        units = (sh.vcpus if sh.quota.unit == "vcpu" else sh.gpus) / sh.gpus
        od = o.price / sh.gpus
        sp = None if o.spot_price is None else o.spot_price / sh.gpus
        old = best.get(key)
        if old is not None:
            od = min(od, old.od_usd)
            sp = sp if old.spot_usd is None else old.spot_usd if sp is None else min(sp, old.spot_usd)
        best[key] = Pool(o.cloud, o.region, sh.name, sh.accelerator, sh.gpus, od, sp, sh.quota.on_demand,
                         sh.quota.spot, units, sh.quota.unit)
    return sorted(best.values(), key=lambda p: (p.cloud, p.region, p.instance_type))


SpotFigures = tuple[float | None, float]  # (availability share or None: not measured, reclaims per node-hour)


def calibrated_spot(pool: Pool, calibration: Mapping[tuple[str, str, str], SpotFigures] | None
                    ) -> SpotFigures | None:
    """Hook for measured spot figures: (availability share, reclaims per node-hour) of a pool, when a
    calibration (``placement/model/calibration.py``, issue 26) has measured them. The caller passes them as a mapping
    by (cloud, region, instance type) (:func:`spot_calibration`); None when not measured (the data's figures
    are used). An availability of None: only the rate was measured."""
    if calibration is None:
        return None
    return calibration.get((pool.cloud, pool.region, pool.instance_type))


def spot_calibration(cal: Any, offers: Sequence[Offer], prior_rate: float = 0.05
                     ) -> dict[tuple[str, str, str], SpotFigures]:
    """The measured spot figures of a ``placement.model.calibration.Calibration`` per (cloud, region, instance type)
    of ``offers``: the reclaim rate is the Gamma posterior mean of ``prior_rate`` (reclaims per node-hour, of
    the calibration's prior weight in node-hours) updated with the fleet's measured node-hours and reclaims
    (the region's row, else its zones pooled, else the instance type's in the cloud), as ``plan`` does. The
    calibration measures no availability share (issue 26's file has none): that stays the data's (None)."""
    from placement.model.calibration import SpotIndex, posterior

    index = SpotIndex(cal.spot)
    out: dict[tuple[str, str, str], SpotFigures] = {}
    for o in offers:
        key = (o.cloud, o.region, o.shape.name)
        if key in out:
            continue
        hit = index.find(o.cloud, o.region, "", o.shape.name)
        if hit is not None:
            out[key] = (None, posterior(prior_rate, cal.prior_weight, hit[0], hit[1])[0])
    return out


def overheads(c: DemandClass, pool: Pool, spot_rate: float) -> tuple[float, float]:
    """Expected extra run time (fraction) of the class's gang on the pool: (on-demand, spot)."""
    from placement.model.physics import gang
    from placement.model.physics_data import physics_book

    book = physics_book()
    nodes = max(1, math.ceil(c.gpus_per_job / pool.gpus))
    write_h = c.checkpoint_write_minutes / 60.0
    common = {"faults_per_gpu_hour": book.faults_per_gpu_hour, "restart_h": 0.25,
              "replacement_h": book.spot_replacement_minutes / 60.0, "write_h": write_h, "interval_h": None}
    od = gang(c.hours_per_run, nodes, pool.gpus, spot_rate=0.0, **common).overhead  # type: ignore[arg-type]
    sp = gang(c.hours_per_run, nodes, pool.gpus, spot_rate=spot_rate, **common).overhead  # type: ignore[arg-type]
    return od, sp


# ------------------------------------------------------------------------------------------------ model


@dataclass(frozen=True)
class Buy:
    """One commitment instance: ``term`` on ``pool`` from week ``start`` for ``weeks``."""

    term: Term
    pool: Pool
    start: int
    weeks: int

    def usd_per_node(self) -> float:
        return self.pool.od_usd * (1 - self.term.discount) * self.pool.gpus * HOURS_PER_WEEK * self.weeks

    def active(self, w: int) -> bool:
        return self.start <= w < self.start + self.weeks


def buys(book: Book, ps: Sequence[Pool], weeks: int) -> list[Buy]:
    """Every commitment the terms allow on the pools within the horizon."""
    out = []
    for t in book.terms:
        for p in ps:
            if p.cloud != t.cloud or p.accelerator not in t.accelerators or p.gpus < t.min_gpus_per_node:
                continue
            if t.discount == 0 and t.uses_quota and book.availability(p.cloud, p.region, p.instance_type,
                                                                      "on-demand") >= 1.0:
                continue  # on-demand rates for every hour, in the same quota: never cheaper than on-demand itself
            last = weeks - 1 if t.start_within_weeks is None else min(weeks - 1, t.start_within_weeks)
            for start in range(t.lead_weeks, last + 1, t.start_every_weeks):
                left = weeks - start
                reach = min((d for d in t.durations_weeks if d >= left), default=None)
                for d in t.durations_weeks:
                    if d <= left or d == reach:  # a longer term past the horizon costs more and serves nothing more
                        out.append(Buy(t, p, start, d))
    return out


def _usable(c: DemandClass, x: Pool) -> bool:
    """Whether class ``c`` may run on pool ``x`` (its accelerators, regions and clouds)."""
    return x.accelerator in c.accelerators and (not c.regions or x.region in c.regions) and (
        not c.clouds or x.cloud in c.clouds)


def _dominated(p: Pool, ps: Sequence[Pool], quotas: QuotaTable | None, book: Book,
               classes: Sequence[DemandClass] = ()) -> bool:
    """A pool with unknown quota that another such pool of the same cloud, accelerator and node size beats on
    every price and availability, and that every class able to use it may use as well: never needed (every
    term applies to both alike)."""
    def free(x: Pool) -> bool:
        return quotas is None or all(k is None or quotas.get(x.cloud, x.region, k) is None
                                     for k in (x.od_key, x.spot_key))

    def avail(x: Pool) -> tuple[float, float]:
        return (book.availability(x.cloud, x.region, x.instance_type, "spot"),
                book.availability(x.cloud, x.region, x.instance_type, "on-demand"))

    if not free(p):
        return False
    for o in ps:
        if o is p or (o.cloud, o.accelerator, o.gpus) != (p.cloud, p.accelerator, p.gpus) or not free(o):
            continue
        if not all(_usable(c, o) for c in classes if _usable(c, p)):
            continue  # a class restricted to p's region or cloud cannot move to o
        spot_ok = p.spot_usd is None or (o.spot_usd is not None and o.spot_usd <= p.spot_usd)
        a_o, a_p = avail(o), avail(p)
        if o.od_usd <= p.od_usd and spot_ok and a_o[0] >= a_p[0] and a_o[1] >= a_p[1] and (
                (o.od_usd, o.spot_usd, o.region, o.instance_type) < (p.od_usd, p.spot_usd or 0.0, p.region,
                                                                      p.instance_type)
                if o.spot_usd is not None else o.od_usd < p.od_usd):
            return True
    return False


@dataclass(frozen=True)
class Commitment:
    """A bought commitment: ``nodes`` of its term on its pool; its cost, the upfront part, the share of its
    hours it must be used to pay off against on-demand, and the share the plan uses."""

    buy: Buy
    nodes: int
    total_usd: float
    upfront_usd: float
    break_even: float
    planned_use: float


@dataclass(frozen=True)
class QuotaRequest:
    cloud: str
    region: str
    key: str
    unit: str
    headroom: float
    request: float
    lead_weeks: int


@dataclass(frozen=True)
class Week:
    demand: float
    reserved: float
    spot: float
    on_demand: float
    unserved: float


@dataclass(frozen=True)
class Answer:
    """One solve: total USD (commitments + spot + on-demand; unserved priced apart), what it bought, each
    week's mix, the quota to request, the solver status and gap."""

    total_usd: float
    commitments: tuple[Commitment, ...]
    weeks: tuple[Week, ...]
    quota: tuple[QuotaRequest, ...]
    unserved_gpu_hours: float
    status: str
    gap: float
    buy_nodes: Mapping[Buy, int]


def solve(f: Forecast, offers: Sequence[Offer], quotas: QuotaTable | None, book: Book, *,
          spot: bool = True, on_demand: bool = True, commit: bool = True, spot_any: bool = False,
          fixed: Mapping[Buy, int] | None = None, only: Sequence[Buy] | None = None,
          calibration: Mapping[tuple[str, str, str], SpotFigures] | None = None,
          spot_rate: float = 0.05, time_limit_s: float = 10.0, mip_rel_gap: float = 0.01) -> Answer:
    """Solve the portfolio MILP. ``spot``/``on_demand``/``commit`` switch those capacities off (the baselines);
    ``spot_any`` lets every GPU-hour take spot (all-spot); ``fixed`` fixes commitment sizes (what-if); ``only``
    restricts the commitments tried (tests)."""
    import highspy

    from placement.plan.milp import new_highs

    t0 = time.monotonic()
    accels = {a for c in f.classes for a in c.accelerators}
    ps = pools(offers, accels)
    ps = [p for p in ps if not _dominated(p, ps, quotas, book, f.classes)]
    cand = list(only) if only is not None else (buys(book, ps, f.weeks) if commit else [])
    if fixed is not None:
        cand = list(fixed)
    h = new_highs()
    h.setOptionValue("mip_rel_gap", mip_rel_gap)
    h.setOptionValue("time_limit", time_limit_s)
    inf = highspy.kHighsInf
    cost: list[float] = []
    lo: list[float] = []
    hi: list[float] = []
    integer: list[int] = []

    def var(c: float, upper: float = inf, is_int: bool = False, lower: float = 0.0) -> int:
        cost.append(c)
        lo.append(lower)
        hi.append(upper)
        if is_int:
            integer.append(len(cost) - 1)
        return len(cost) - 1

    n_of: dict[Buy, int] = {}
    for b in cand:
        if fixed is not None:
            v = float(fixed[b])
            n_of[b] = var(b.usd_per_node(), v, False, v)
        else:
            n_of[b] = var(b.usd_per_node(), float(b.term.max_nodes), True)
    max_od = max((p.od_usd for p in ps), default=1.0)
    unserved_usd = 10.0 * max_od * 2 + 100.0
    rows: list[tuple[float, float, list[int], list[float]]] = []
    by_pool_week: dict[tuple[int, int], list[tuple[int, float]]] = defaultdict(list)  # reserved draws
    od_quota: dict[tuple[tuple[str, str, str], int], list[tuple[int, float]]] = defaultdict(list)
    spot_quota: dict[tuple[tuple[str, str, str], int], list[tuple[int, float]]] = defaultdict(list)
    rvars: dict[tuple[int, int, int], tuple[int, int, int]] = {}
    served: dict[tuple[int, int], list[int]] = defaultdict(list)
    unserved: dict[tuple[int, int], int] = {}
    spot_of: dict[tuple[int, int], list[int]] = defaultdict(list)
    pool_index = {(p.cloud, p.region, p.instance_type): i for i, p in enumerate(ps)}
    held: dict[tuple[int, int], float] = {}
    for ci, c in enumerate(f.classes):
        mine = [i for i, p in enumerate(ps) if _usable(c, p)]
        for pi in mine:
            p = ps[pi]
            measured = calibrated_spot(p, calibration)
            rate = measured[1] if measured is not None else spot_rate
            ov_d, ov_s = overheads(c, p, rate)
            held[(ci, pi)] = 1 + ov_d  # node-hours held per useful GPU-hour on reserved capacity
            a_s = measured[0] if measured is not None and measured[0] is not None else book.availability(
                p.cloud, p.region, p.instance_type, "spot")
            a_d = book.availability(p.cloud, p.region, p.instance_type, "on-demand")
            for w in range(f.weeks):
                r = var(0.0) if cand else -1
                s = var(p.spot_usd * (1 + ov_s)) if spot and p.spot_usd is not None and a_s > 0 and (
                    c.interruptible > 0 or spot_any) else -1
                d = var(p.od_usd * (1 + ov_d)) if on_demand and a_d > 0 else -1
                rvars[(ci, w, pi)] = (r, s, d)
                for v in (r, s, d):
                    if v >= 0:
                        served[(ci, w)].append(v)
                if r >= 0:
                    by_pool_week[(pi, w)].append((r, 1 + ov_d))
                if s >= 0:
                    spot_of[(ci, w)].append(s)
                    if p.spot_key is not None:
                        spot_quota[((p.cloud, p.region, p.spot_key), w)].append(
                            (s, (1 + ov_s) * p.units_per_gpu / a_s / HOURS_PER_WEEK))
                if d >= 0 and p.od_key is not None:
                    od_quota[((p.cloud, p.region, p.od_key), w)].append(
                        (d, (1 + ov_d) * p.units_per_gpu / a_d / HOURS_PER_WEEK))
        for w in range(f.weeks):
            unserved[(ci, w)] = var(unserved_usd)
    # quota requests, per group
    groups = {g for g, _ in od_quota} | {g for g, _ in spot_quota}
    qvar: dict[tuple[str, str, str], int] = {}
    for g in sorted(groups):
        if quotas is not None and quotas.get(*g) is not None:
            qvar[g] = var(1e-3)  # a request costs nothing but is asked for only when it pays
    # commitments: reserved capacity, and quota drawn by those that use it (nodes x GPUs x units per GPU)
    for b, v in n_of.items():
        pi = pool_index[(b.pool.cloud, b.pool.region, b.pool.instance_type)]
        for w in range(f.weeks):
            if b.active(w):
                by_pool_week[(pi, w)].append((v, -b.pool.gpus * HOURS_PER_WEEK))
                if b.term.uses_quota and b.pool.od_key is not None:
                    od_quota[((b.pool.cloud, b.pool.region, b.pool.od_key), w)].append(
                        (v, b.pool.gpus * b.pool.units_per_gpu))
    for terms in by_pool_week.values():
        if any(coef > 0 for _, coef in terms):
            rows.append((-inf, 0.0, [v for v, _ in terms], [c for _, c in terms]))
    for table in (od_quota, spot_quota):
        for (g, w), terms in table.items():
            q = quotas.get(*g) if quotas is not None else None
            if q is None:
                continue  # unknown quota bounds nothing
            idx = [v for v, _ in terms]
            val = [c for _, c in terms]
            if w >= book.quota_lead_weeks.get(g[0], 0) and g in qvar:
                idx.append(qvar[g])
                val.append(-1.0)
            rows.append((-inf, q.headroom, idx, val))
    for ci, c in enumerate(f.classes):
        cum_d = 0.0
        prev = -1
        for w in range(f.weeks):
            cum_d += c.demand[w]
            due = sum(c.demand[: max(w - c.within_weeks + 2, 0)]) if w < f.weeks - 1 else cum_d
            done = var(0.0, cum_d + 1e-6, False, max(due - 1e-6, 0.0))  # GPU-hours done by the end of week w
            week_vars = [*served[(ci, w)], unserved[(ci, w)]]
            idx = [done, *week_vars] + ([prev] if prev >= 0 else [])
            rows.append((0.0, 0.0, idx, [1.0] + [-1.0] * len(week_vars) + ([-1.0] if prev >= 0 else [])))
            prev = done
            if spot_of[(ci, w)] and not spot_any:
                coef = {v: -c.interruptible for v in week_vars}
                for v in spot_of[(ci, w)]:
                    coef[v] += 1.0
                rows.append((-inf, 0.0, list(coef), list(coef.values())))
    n = len(cost)
    h.addCols(n, cost, lo, hi, 0, [], [], [])
    if integer:
        h.changeColsIntegrality(len(integer), integer, [highspy.HighsVarType.kInteger] * len(integer))  # type: ignore[arg-type]
    starts: list[int] = []
    index: list[int] = []
    value: list[float] = []
    lower: list[float] = []
    upper: list[float] = []
    for lo_, hi_, idx, val in rows:
        starts.append(len(index))
        index.extend(idx)
        value.extend(val)
        lower.append(lo_)
        upper.append(hi_)
    if starts:
        h.addRows(len(starts), lower, upper, len(index), starts, index, value)
    x: list[float] | None = None
    status, gap = "Optimal", 0.0
    if integer:
        found = _rounded(h, integer, mip_rel_gap, t0 + time_limit_s)
        if found is not None:
            x, gap = found
    if x is None:
        h.setOptionValue("time_limit", max(time_limit_s - (time.monotonic() - t0), 0.1))
        h.run()
        status = h.modelStatusToString(h.getModelStatus())
        sol = h.getSolution()
        if not sol.value_valid:
            raise InputError("classes", f"the portfolio problem has no solution ({status})")
        x = list(sol.col_value)
        gap = float(h.getInfo().mip_gap) if integer else 0.0
    apart = set(unserved.values()) | set(qvar.values()) | set(n_of.values())
    usage = math.fsum(cost[v] * max(x[v], 0.0) for v in range(len(x)) if v not in apart)
    return _answer(f, ps, x, n_of, rvars, unserved, qvar, quotas, book, status,
                   gap if math.isfinite(gap) else 0.0, usage, held)


def _rounded(h: Any, integer: Sequence[int], mip_rel_gap: float, deadline: float) -> tuple[list[float], float] | None:
    """A proven-good portfolio without a full branch and bound, when there is one.

    The LP relaxation's cost L bounds every portfolio from below. The MILP restricted to the commitments the LP
    buys any of is small; its solution (or, failing that, the LP's commitments rounded to the nearest and up,
    with the rest re-solved: both feasible, the unserved hours absorb a shortfall) costs z. When (z − L)/z is
    within ``mip_rel_gap`` it is returned with that gap, which holds for the full problem. Otherwise the full
    branch and bound gets it as its first incumbent, with the commitments whose LP reduced cost exceeds z − L
    fixed at 0 (exact: none of them is in any portfolio cheaper than z), and None is returned."""
    from placement.plan.milp import new_highs

    lp = h.getLp()
    lp.integrality_ = []
    relax = new_highs()
    relax.passModel(lp)
    relax.setOptionValue("time_limit", max(deadline - time.monotonic(), 0.1))
    relax.run()
    if not relax.getSolution().value_valid:
        return None
    bound = relax.getInfo().objective_function_value
    y = list(relax.getSolution().col_value)
    reduced = list(relax.getSolution().col_dual)
    costs = list(lp.col_cost_)

    def value(x: Sequence[float]) -> float:  # from the solution itself, not the solver's (presolved) objective
        return math.fsum(c * v for c, v in zip(costs, x, strict=True))

    # The MILP restricted to the commitments the LP buys any of: small, and close to the optimum.
    zero = [i for i in integer if y[i] <= 1e-9]
    sub = new_highs()
    sub.passModel(h.getLp())
    if zero:
        sub.changeColsBounds(len(zero), zero, [0.0] * len(zero), [0.0] * len(zero))
    sub.setOptionValue("mip_rel_gap", mip_rel_gap / 4)
    sub.setOptionValue("time_limit", max((deadline - time.monotonic()) / 2, 0.1))
    sub.run()
    candidates: list[list[float]] = []
    if sub.getSolution().value_valid:
        candidates.append(list(sub.getSolution().col_value))
    if not candidates or (value(candidates[0]) - bound) / max(abs(value(candidates[0])), 1e-9) > mip_rel_gap:
        for rounding in (round, math.ceil):  # both feasible: the unserved hours absorb a shortfall
            fixed = [float(math.ceil(y[i] - 1e-7)) if rounding is math.ceil else float(round(y[i])) for i in integer]
            relax.changeColsBounds(len(integer), list(integer), fixed, fixed)
            relax.setOptionValue("time_limit", max(deadline - time.monotonic(), 0.1))
            relax.run()
            if relax.getSolution().value_valid:
                candidates.append(list(relax.getSolution().col_value))
    if not candidates:
        return None
    x = min(candidates, key=value)
    z = value(x)
    gap = max(z - bound, 0.0) / max(abs(z), 1e-9)
    if gap <= mip_rel_gap:
        return x, gap
    # Reduced-cost fixing (exact): a commitment at 0 in the LP optimum whose reduced cost exceeds z - L cannot be
    # bought in any portfolio cheaper than z, so it is fixed at 0 for the branch and bound.
    out = [i for i in integer if y[i] < 1e-9 and reduced[i] > z - bound + 1e-6]
    if out:
        h.changeColsBounds(len(out), out, [0.0] * len(out), [0.0] * len(out))
    h.setSolution(len(x), list(range(len(x))), x)
    return None


def _answer(f: Forecast, ps: Sequence[Pool], x: Sequence[float], n_of: Mapping[Buy, int],
            rvars: Mapping[tuple[int, int, int], tuple[int, int, int]], unserved: Mapping[tuple[int, int], int],
            qvar: Mapping[tuple[str, str, str], int], quotas: QuotaTable | None, book: Book, status: str,
            gap: float, usage_usd: float, held: Mapping[tuple[int, int], float]) -> Answer:
    def val(v: int) -> float:
        return 0.0 if v < 0 else max(x[v], 0.0)

    bought = {b: round(x[v]) for b, v in n_of.items() if x[v] > 0.5}
    used_on: dict[tuple[str, str, str, int], float] = defaultdict(float)
    weeks = []
    for w in range(f.weeks):
        r_sum = s_sum = d_sum = u_sum = 0.0
        for ci in range(len(f.classes)):
            for pi, p in enumerate(ps):
                if (ci, w, pi) not in rvars:
                    continue
                r, s, d = rvars[(ci, w, pi)]
                r_sum += val(r)
                s_sum += val(s)
                d_sum += val(d)
                used_on[(p.cloud, p.region, p.instance_type, w)] += val(r) * held[(ci, pi)]
            u_sum += val(unserved[(ci, w)])
        weeks.append(Week(sum(c.demand[w] for c in f.classes), r_sum, s_sum, d_sum, u_sum))
    commitments = []
    for b, nodes in sorted(bought.items(), key=lambda kv: (kv[0].start, kv[0].term.id, kv[0].pool.region)):
        cost = b.usd_per_node() * nodes
        cap = nodes * b.pool.gpus * HOURS_PER_WEEK
        # reserved hours of the pool in a week are shared by every commitment active on it: pro rata
        use = 0.0
        for w in range(f.weeks):
            if not b.active(w):
                continue
            on_pool = sum(bought[o] * o.pool.gpus * HOURS_PER_WEEK for o in bought
                          if o.pool == b.pool and o.active(w))
            use += used_on[(b.pool.cloud, b.pool.region, b.pool.instance_type, w)] * cap / max(on_pool, 1e-9)
        commitments.append(Commitment(b, nodes, cost, cost if b.term.payment == "upfront" else 0.0,
                                      b.term.break_even(), use / (cap * b.weeks)))
    quota = []
    for g, v in sorted(qvar.items()):
        if x[v] > 1e-6:
            q = quotas.get(*g) if quotas is not None else None
            unit = next((p.unit for p in ps if p.cloud == g[0] and g[2] in (p.od_key, p.spot_key)), "")
            quota.append(QuotaRequest(g[0], g[1], g[2], unit, q.headroom if q else 0.0, math.ceil(x[v] - 1e-6),
                                      book.quota_lead_weeks.get(g[0], 0)))
    u_total = sum(wk.unserved for wk in weeks)
    # commitments (their whole terms) + spot and on-demand hours; the unserved penalty and quota epsilon apart
    total = math.fsum(c.total_usd for c in commitments) + usage_usd
    return Answer(total, tuple(commitments), tuple(weeks), tuple(quota), u_total, status, gap, bought)


def portfolio_report(f: Forecast, offers: Sequence[Offer], quotas: QuotaTable | None, book: Book,
                     **kw: Any) -> dict[str, Any]:
    """The chosen portfolio and its comparisons: all on-demand, all spot, reserve the peak, demand ±20 %."""
    best = solve(f, offers, quotas, book, **kw)
    simple = {k: v for k, v in kw.items() if k in ("calibration", "spot_rate")}
    base = {
        "all_on_demand": solve(f, offers, quotas, book, spot=False, commit=False, **simple),
        "all_spot": solve(f, offers, quotas, book, commit=False, spot_any=True, **simple),
        "reserve_the_peak": solve(f, offers, quotas, book, spot=False, on_demand=False, **kw),
    }
    moves = {}
    for name, factor in (("demand_plus_20", 1.2), ("demand_minus_20", 0.8)):
        g = f.scaled(factor)
        moves[name] = (solve(g, offers, quotas, book, **kw),
                       solve(g, offers, quotas, book, fixed=best.buy_nodes, **simple) if best.buy_nodes else None)
    return {"best": best, "baselines": base, "moves": moves}
