"""Joint placement of a burst of jobs that compete for the same quota, solved exactly as a MILP (HiGHS).

    subject to Σ_c x[j,c] + u[j] = 1                     for every job j
               Σ_(j,c in g) needed[j,c]·x[j,c] ≤ headroom[g]  for every known (cloud, region, quota key) g
               x binary, 0 ≤ u ≤ 1
    phase 1:   minimise Σ_j u[j]                          (place as many jobs as quota allows: U*)
    phase 2:   minimise Σ_j Σ_c total_usd[j,c]·x[j,c] + UNKNOWN·Σ (x on quota-unknown candidates)
               subject to Σ_j u[j] ≤ U*

UNKNOWN exceeds any job's cost, so quota-unknown candidates rank after every known-feasible one, as
in the single-job plan. Both phases are solved to HiGHS's MIP gap tolerance (``mip_rel_gap``).

A reservation is one more group g: its key is ``reservation:<id>``, each candidate on it draws its node
count, and its headroom is the reservation's free nodes. Jobs that are identical for placement (every
field but name, team, priority, image, command and the dataset URI) are interchangeable in any
solution; among them the earlier ones in the file get the placements, cheapest first.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from placement.catalog import Offer
from placement.egress import EgressBook
from placement.engine import Candidate, Plan, Row, _candidate, plan
from placement.jobspec import JobSpec
from placement.quotas import QuotaTable

if TYPE_CHECKING:
    import datetime as dt

    from placement.reservations import Reservation


@dataclass(frozen=True)
class Assignment:
    """Where one job went (``candidate`` None = unplaceable, with ``reason``)."""

    job: JobSpec
    candidate: Candidate | None
    reason: str | None = None


@dataclass(frozen=True)
class BatchResult:
    """The batch plan: one assignment per job in input order, the total USD and how it was solved."""

    assignments: tuple[Assignment, ...]
    total_usd: float
    solver: str
    status: str
    quota_used: dict[tuple[str, str, str], float]
    gap: float = 0.0  # relative MIP gap of the cost phase (0 = proven optimal)

    @property
    def placed(self) -> int:
        return sum(1 for a in self.assignments if a.candidate is not None)


def _group(r: Row) -> tuple[str, str, str] | None:
    """The (cloud, region, quota key) a candidate row draws on, or None when its quota is unknown."""
    t = r[11]
    return None if t.headroom is None else (r[4], r[5], t.key)  # type: ignore[return-value]


def _needed(r: Row) -> int:
    return r[11].needed


def _headroom(r: Row) -> float:
    return r[11].headroom  # type: ignore[return-value]


def _total(r: Row) -> float:
    """The exact total USD of a row (the row's sort key is rounded to the cent)."""
    return r[14] + r[11].eg + r[16]


def _option_key(r: Row) -> tuple[object, ...]:
    g = _group(r)
    return ("unknown",) if g is None else (g, _needed(r))


def _options(p: Plan) -> list[Row]:
    """Runnable candidates of one job, pruned to those that can matter to the optimum.

    Within one quota group and the same quota draw, only the cheapest candidate can be optimal; of the
    quota-unknown ones only the cheapest (they compete for nothing).
    """
    best: dict[tuple[object, ...], Row] = {}
    for r in p.rows:  # ranked: cheapest first
        best.setdefault(_option_key(r), r)
    return list(best.values())


def _result(plans: Sequence[Plan], picks: Sequence[Row | None], solver: str, status: str, why: Sequence[str],
            gap: float = 0.0) -> BatchResult:
    used: dict[tuple[str, str, str], float] = defaultdict(float)
    out = []
    total = 0.0
    for p, r, reason in zip(plans, picks, why, strict=True):
        if r is None:
            out.append(Assignment(p.job, None, reason))
            continue
        g = _group(r)
        if g is not None:
            used[g] += _needed(r)
        total += _total(r)
        out.append(Assignment(p.job, _candidate(p.job, r)))
    return BatchResult(tuple(out), total, solver, status, dict(used), gap=gap)


def _placement_key(job: JobSpec) -> JobSpec:
    """``job`` without the fields that do not change where or at what cost it runs."""
    ds = job.dataset
    return dataclasses.replace(job, name="", team=None, priority="production", image="", command=(),
                               dataset=None if ds is None else dataclasses.replace(ds, uri=""))


def _earlier_first(jobs: Sequence[JobSpec], picks: list[Row | None]) -> list[Row | None]:
    """Among identical jobs, hand the placements to the earlier ones (cheapest to the first): any solution
    can be permuted so, at the same total cost and quota use."""
    classes: dict[JobSpec, list[int]] = defaultdict(list)
    for j, job in enumerate(jobs):
        classes[_placement_key(job)].append(j)
    out = list(picks)
    for members in classes.values():
        if len(members) < 2:
            continue
        placed = sorted((picks[j] for j in members if picks[j] is not None), key=lambda r: r[:10])  # type: ignore[index]
        for k, j in enumerate(members):
            out[j] = placed[k] if k < len(placed) else None
    return out


def _greedy_picks(plans: Sequence[Plan]) -> list[Row | None]:
    used: dict[tuple[str, str, str], float] = defaultdict(float)
    picks: list[Row | None] = []
    for p in plans:
        chosen = None
        for r in p.rows:
            g = _group(r)
            if g is None or used[g] + _needed(r) <= _headroom(r):
                chosen = r
                break
        if chosen is not None and (g := _group(chosen)) is not None:
            used[g] += _needed(chosen)
        picks.append(chosen)
    return picks


def _lp_rounding(h: Any, cols: Sequence[tuple[int, Row]], n_x: int, n_jobs: int,
                 by_job: dict[int, list[int]]) -> tuple[list[float], float, list[float]] | None:
    """A good first incumbent from the LP relaxation: keep its integral assignments and solve the small
    MILP of the few fractional jobs (the relaxation of this assignment structure is nearly integral).

    Returns (incumbent, LP bound, reduced costs) for reduced-cost fixing, or None without an LP optimum."""

    lp = h.getLp()
    lp.integrality_ = []
    relax = new_highs()
    relax.passModel(lp)
    relax.run()
    if not relax.getSolution().value_valid:
        return None
    x = list(relax.getSolution().col_value)
    reduced = list(relax.getSolution().col_dual)
    bound = relax.getInfo().objective_function_value
    out = [0.0] * (n_x + n_jobs)
    left: dict[tuple[str, str, str], float] = {}
    fractional = []
    for j in range(n_jobs):
        members = by_job[j]
        best = max(members, key=lambda i: x[i], default=None)
        if best is not None and x[best] > 1 - 1e-6:
            out[best] = 1.0
            g = _group(cols[best][1])
            if g is not None:
                left[g] = left.get(g, _headroom(cols[best][1])) - _needed(cols[best][1])
        elif x[n_x + j] > 1 - 1e-6:
            out[n_x + j] = 1.0
        else:
            fractional.append(j)
    if fractional:
        _place_exactly(fractional, cols, n_x, by_job, left, h.getLp().col_cost_, out)
    return out, bound, reduced


def _place_exactly(jobs: list[int], cols: Sequence[tuple[int, Row]], n_x: int, by_job: dict[int, list[int]],
                   left: dict[tuple[str, str, str], float], cost: Sequence[float], out: list[float]) -> None:
    """Solve the small MILP of the LP's fractional jobs against the quota the integral ones left."""
    import highspy

    sub = new_highs()
    sub.setOptionValue("time_limit", 5.0)
    members = [i for j in jobs for i in by_job[j]]
    big = max((cost[i] for i in members), default=0.0) * 10 + 1.0
    n = len(members) + len(jobs)
    sub.addCols(n, [cost[i] for i in members] + [big] * len(jobs), [0.0] * n, [1.0] * n, 0, [], [], [])
    integer = [highspy.HighsVarType.kInteger] * len(members)
    sub.changeColsIntegrality(len(members), list(range(len(members))), integer)  # type: ignore[arg-type]
    pos = {i: k for k, i in enumerate(members)}
    for k, j in enumerate(jobs):
        idx = [pos[i] for i in by_job[j]] + [len(members) + k]
        sub.addRow(1.0, 1.0, len(idx), idx, [1.0] * len(idx))
    groups: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    for i in members:
        g = _group(cols[i][1])
        if g is not None:
            groups[g].append(i)
    for g, idx in groups.items():
        room = left.get(g, _headroom(cols[idx[0]][1]))
        sub.addRow(-highspy.kHighsInf, room, len(idx), [pos[i] for i in idx], [float(_needed(cols[i][1])) for i in idx])
    sub.run()
    if not sub.getSolution().value_valid:
        for j in jobs:
            out[n_x + j] = 1.0
        return
    y = list(sub.getSolution().col_value)
    for j in jobs:
        picked = [i for i in by_job[j] if y[pos[i]] > 0.5]
        if picked:
            out[picked[0]] = 1.0
        else:
            out[n_x + j] = 1.0


def new_highs() -> Any:
    """A silent ``highspy.Highs``. HiGHS prints its banner from the C++ constructor straight to file
    descriptor 1, before any option can be set, which would corrupt ``plan-batch --json`` on stdout: the
    constructor runs with descriptor 1 pointed at /dev/null."""
    import highspy

    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        h = highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)
    h.setOptionValue("output_flag", False)
    return h


def _run(h: Any, deadline: float) -> None:
    """Run HiGHS with whatever is left of the batch's time budget."""
    h.setOptionValue("time_limit", max(deadline - time.monotonic(), 0.1))
    h.run()


def _checked_run(h: Any, n: int, costs: Sequence[float], hint: list[float],
                 deadline: float) -> tuple[list[float], float] | None:
    """Run HiGHS from ``hint``; (solution, its cost) or None without an optimal solution.

    The cost is worked out from the solution itself. HiGHS's presolve can lose the objective offset of
    the presolved model (then the reported objective, bound and gap are all shifted and "optimal" means
    nothing; seen with highspy 1.16 on these restricted problems): when the reported objective disagrees
    with the solution's cost, the same problem is solved again without presolve."""
    import highspy

    default = h.getOptionValue("presolve")[1]
    try:
        for presolve in (default, "off"):
            h.setOptionValue("presolve", presolve)
            h.setSolution(n, list(range(n)), hint)
            _run(h, deadline)
            solution = h.getSolution()
            if not solution.value_valid or h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
                return None
            x = list(solution.col_value)
            z = math.fsum(c * v for c, v in zip(costs, x, strict=True))
            if abs(h.getInfo().objective_function_value - z) <= 1e-7 * max(abs(z), 1.0):
                return x, z
        return None
    finally:
        h.setOptionValue("presolve", default)


def _solve_by_reduced_costs(h: Any, n: int, n_x: int, costs: Sequence[float], hint: list[float], bound: float,
                            reduced: Sequence[float], deadline: float) -> tuple[list[float], str, float]:
    """Solve the MILP over a growing set of columns, exactly; (solution, status, gap).

    LP duality gives, for any integer solution x, cost(x) >= LP bound + Σ reduced[i]·x[i] over columns at
    their lower bound in the LP optimum. So once a restricted MILP (columns with small reduced cost)
    has a solution of cost z, no left-out column with reduced cost above z - bound can improve on it:
    the restricted optimum is the optimum. Otherwise the columns that could still matter are added and
    the MILP is solved again. Each restricted MILP is solved to the final gap: a loose solve leaves a
    worse incumbent, so a larger z - bound and many more columns in the next round, which costs more
    than it saves. The set grows a hundredfold per round (in reduced cost), capped at z - bound.

    The gap is HiGHS's once that proof holds. When time runs out first, a restricted problem's bound says
    nothing about the columns left out: the gap is then (z - LP bound) / z, which does hold.
    """
    incumbent = math.fsum(c * v for c, v in zip(costs, hint, strict=True))
    per_job = max(abs(bound), 1.0) / max(n - n_x, 1)
    threshold = 1e-3 * per_job  # columns within 0.1% of an average job's cost of the LP's choice
    allowed = [reduced[i] <= threshold or hint[i] > 0.5 for i in range(n_x)]
    while True:
        h.changeColsBounds(n_x, list(range(n_x)), [0.0] * n_x, [1.0 if a else 0.0 for a in allowed])
        found = _checked_run(h, n, costs, hint, deadline)
        if found is None:
            solution = h.getSolution()
            if solution.value_valid:
                x = list(solution.col_value)
                z = math.fsum(c * v for c, v in zip(costs, x, strict=True))
                if z < incumbent:
                    hint, incumbent = x, z
            status = h.modelStatusToString(h.getModelStatus())
            return hint, status, max(incumbent - bound, 0.0) / max(abs(incumbent), 1.0)
        x, z = found
        if z > incumbent:  # HiGHS stopped at the gap above the hint: keep the better one
            x, z = hint, incumbent
        slack = z - bound + 1e-9 * max(abs(z), 1.0)
        threshold = min(slack, threshold * 100)
        extra = [i for i in range(n_x) if not allowed[i] and reduced[i] <= slack]
        if not extra:
            return x, "Optimal", float(h.getInfo().mip_gap)
        for i in extra:
            if reduced[i] <= threshold:
                allowed[i] = True
        hint, incumbent = x, z


def _plans(jobs: Iterable[JobSpec], offers: Sequence[Offer], quotas: QuotaTable | None, book: EgressBook | None,
           reservations: Sequence[Reservation], now: dt.datetime | None) -> list[Plan]:
    """One plan per job; identical jobs share one (their candidates are the same)."""
    memo: dict[JobSpec, Plan] = {}
    out = []
    for job in jobs:
        key = _placement_key(job)
        p = memo.get(key)
        if p is None:
            p = memo[key] = plan(job, offers, quotas, book, reservations=reservations, now=now)
        out.append(p if p.job is job else dataclasses.replace(p, job=job))
    return out


def greedy(jobs: Iterable[JobSpec], offers: Sequence[Offer], quotas: QuotaTable | None = None,
           book: EgressBook | None = None, *, reservations: Sequence[Reservation] = (),
           now: dt.datetime | None = None) -> BatchResult:
    """Place jobs one by one in arrival order, each on its cheapest candidate that still fits."""
    plans = _plans(jobs, offers, quotas, book, reservations, now)
    picks = _greedy_picks(plans)
    return _result(plans, picks, "greedy", "done", ["no candidate left with quota headroom"] * len(plans))


def solve(jobs: Sequence[JobSpec], offers: Sequence[Offer], quotas: QuotaTable | None = None,
          book: EgressBook | None = None, *, reservations: Sequence[Reservation] = (),
          now: dt.datetime | None = None, time_limit_s: float = 30.0, mip_rel_gap: float = 1e-4) -> BatchResult:
    """Minimise the batch's total cost subject to quota headroom per (cloud, region, quota key) and to
    each reservation's free nodes."""
    import highspy

    deadline = time.monotonic() + time_limit_s
    plans = _plans(jobs, offers, quotas, book, reservations, now)
    options = [_options(p) for p in plans]
    # Greedy is a feasible solution: hand it to HiGHS as the first incumbent.
    start = _greedy_picks(plans)
    start_placed = sum(1 for r in start if r is not None)
    max_cost = max((_total(r) for opts in options for r in opts), default=0.0)
    unknown_penalty = max_cost * 2 + 1.0

    cols: list[tuple[int, Row]] = [(j, r) for j, opts in enumerate(options) for r in opts]
    n_x = len(cols)
    n = n_x + len(jobs)
    costs = [_total(r) + (unknown_penalty if _group(r) is None else 0.0) for _, r in cols]
    costs += [0.0] * len(jobs)

    h = new_highs()
    h.setOptionValue("mip_rel_gap", mip_rel_gap)
    inf = highspy.kHighsInf
    # Phase 1 objective: count unplaced jobs only.
    h.addCols(n, [0.0] * n_x + [1.0] * len(jobs), [0.0] * n, [1.0] * n, 0, [], [], [])
    h.changeColsIntegrality(n_x, list(range(n_x)), [highspy.HighsVarType.kInteger] * n_x)  # type: ignore[arg-type]

    lower: list[float] = []
    upper: list[float] = []
    starts: list[int] = []
    index: list[int] = []
    value: list[float] = []
    by_job: dict[int, list[int]] = defaultdict(list)
    by_group: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    for i, (j, r) in enumerate(cols):
        by_job[j].append(i)
        g = _group(r)
        if g is not None:
            by_group[g].append(i)
    for j in range(len(jobs)):
        starts.append(len(index))
        index.extend(by_job[j] + [n_x + j])
        value.extend([1.0] * (len(by_job[j]) + 1))
        lower.append(1.0)
        upper.append(1.0)
    for members in by_group.values():
        starts.append(len(index))
        index.extend(members)
        value.extend(float(_needed(cols[i][1])) for i in members)
        lower.append(-inf)
        upper.append(_headroom(cols[members[0]][1]))
    if starts:
        h.addRows(len(starts), lower, upper, len(index), starts, index, value)

    warm = [0.0] * n
    index_of = {(j, _option_key(r)): i for i, (j, r) in enumerate(cols)}
    for j, pick in enumerate(start):
        warm[n_x + j if pick is None else index_of[(j, _option_key(pick))]] = 1.0
    h.setSolution(n, list(range(n)), warm)

    # Phase 1: the most jobs quota allows. Phase 2: at that count, the least cost. Solving the two
    # objectives in turn keeps the cost objective free of big-M penalties, whose weak LP bound would
    # otherwise stall the search.
    status = "Optimal"
    if start_placed < len(jobs):
        _run(h, deadline)
        status = h.modelStatusToString(h.getModelStatus())
        if not h.getSolution().value_valid:
            return _result(plans, [None] * len(plans), "HiGHS", status, [f"solver: {status}"] * len(plans))
        warm = list(h.getSolution().col_value)
    h.addRow(-inf, float(round(sum(warm[n_x:]))), len(jobs), list(range(n_x, n)), [1.0] * len(jobs))
    h.changeColsCost(n, list(range(n)), costs)
    hint = warm
    relaxed = _lp_rounding(h, cols, n_x, len(jobs), by_job)
    if relaxed is None:
        h.setSolution(n, list(range(n)), hint)
        _run(h, deadline)
        status = h.modelStatusToString(h.getModelStatus())
        solution = h.getSolution()
        if not solution.value_valid:
            return _result(plans, [None] * len(plans), "HiGHS", status, [f"solver: {status}"] * len(plans))
        x, gap = list(solution.col_value), float(h.getInfo().mip_gap)
    else:
        rounded, bound, reduced = relaxed
        if sum(rounded[n_x:]) <= sum(warm[n_x:]):
            hint = rounded
        x, status, gap = _solve_by_reduced_costs(h, n, n_x, costs, hint, bound, reduced, deadline)
    picks: list[Row | None] = [None] * len(jobs)
    for i, (j, r) in enumerate(cols):
        if x[i] > 0.5:
            picks[j] = r
    picks = _earlier_first(jobs, picks)
    why = ["no runnable candidate" if not options[j] else "quota headroom taken by cheaper placements"
           for j in range(len(jobs))]
    return _result(plans, picks, "HiGHS", status, why, gap=gap)
