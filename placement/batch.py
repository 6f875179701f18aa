"""Joint placement of a burst of jobs that compete for the same quota, solved exactly as a MILP (HiGHS).

    minimise   Σ_j Σ_c total_usd[j,c]·x[j,c] + UNPLACED·Σ_j u[j] + UNKNOWN·Σ (x on quota-unknown candidates)
    subject to Σ_c x[j,c] + u[j] = 1                     for every job j
               Σ_(j,c in g) needed[j,c]·x[j,c] ≤ headroom[g]  for every known (cloud, region, quota key) g
               x binary, 0 ≤ u ≤ 1

UNPLACED exceeds any job's cost, so the solver places as many jobs as quota allows before saving money;
UNKNOWN ranks quota-unknown candidates after every known-feasible one, as the single-job plan does.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from placement.catalog import Offer
from placement.egress import EgressBook
from placement.engine import Candidate, plan
from placement.jobspec import JobSpec
from placement.quotas import QuotaTable


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

    @property
    def placed(self) -> int:
        return sum(1 for a in self.assignments if a.candidate is not None)


def _options(job: JobSpec, offers: Sequence[Offer], quotas: QuotaTable, book: EgressBook | None) -> list[Candidate]:
    """Runnable candidates of one job, pruned to those that can matter to the optimum.

    Within one quota group and the same quota draw, only the cheapest candidate can be optimal; of the
    quota-unknown ones only the cheapest (they compete for nothing).
    """
    best: dict[tuple[object, ...], Candidate] = {}
    for c in plan(job, offers, quotas, book).ranked:  # ranked: cheapest first
        group = c.quota_group
        key: tuple[object, ...] = ("unknown",) if group is None else (group, c.quota.needed)
        if key not in best:
            best[key] = c
    return list(best.values())


def greedy(jobs: Iterable[JobSpec], offers: Sequence[Offer], quotas: QuotaTable | None = None,
           book: EgressBook | None = None) -> BatchResult:
    """Place jobs one by one in arrival order, each on its cheapest candidate that still fits."""
    quotas = quotas or QuotaTable()
    used: dict[tuple[str, str, str], float] = defaultdict(float)
    out = []
    total = 0.0
    for job in jobs:
        chosen = None
        for c in plan(job, offers, quotas, book).ranked:
            g = c.quota_group
            if g is None or used[g] + c.quota.needed <= c.quota.headroom:  # type: ignore[operator]
                chosen = c
                break
        if chosen is None:
            out.append(Assignment(job, None, "no candidate left with quota headroom"))
            continue
        if chosen.quota_group is not None:
            used[chosen.quota_group] += chosen.quota.needed
        total += chosen.cost.total_usd
        out.append(Assignment(job, chosen))
    return BatchResult(tuple(out), total, "greedy", "done", dict(used))


def solve(jobs: Sequence[JobSpec], offers: Sequence[Offer], quotas: QuotaTable | None = None,
          book: EgressBook | None = None, *, time_limit_s: float = 60.0) -> BatchResult:
    """Minimise the batch's total cost subject to quota headroom per (cloud, region, quota key)."""
    import highspy

    quotas = quotas or QuotaTable()
    options = [_options(job, offers, quotas, book) for job in jobs]
    max_cost = max((c.cost.total_usd for opts in options for c in opts), default=0.0)
    unknown_penalty = max_cost * 2 + 1.0
    unplaced_penalty = (unknown_penalty + max_cost) * 2 + 1.0

    cols: list[tuple[int, Candidate]] = [(j, c) for j, opts in enumerate(options) for c in opts]
    n_x = len(cols)
    n = n_x + len(jobs)
    costs = [c.cost.total_usd + (unknown_penalty if c.quota_group is None else 0.0) for _, c in cols]
    costs += [unplaced_penalty] * len(jobs)

    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", float(time_limit_s))
    h.setOptionValue("mip_rel_gap", 1e-9)
    inf = highspy.kHighsInf
    h.addCols(n, costs, [0.0] * n, [1.0] * n, 0, [], [], [])
    h.changeColsIntegrality(n_x, list(range(n_x)), [highspy.HighsVarType.kInteger] * n_x)

    lower, upper, starts, index, value = [], [], [], [], []
    by_job: dict[int, list[int]] = defaultdict(list)
    by_group: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    for i, (j, c) in enumerate(cols):
        by_job[j].append(i)
        if c.quota_group is not None:
            by_group[c.quota_group].append(i)
    for j in range(len(jobs)):
        starts.append(len(index))
        index.extend(by_job[j] + [n_x + j])
        value.extend([1.0] * (len(by_job[j]) + 1))
        lower.append(1.0)
        upper.append(1.0)
    headroom: dict[tuple[str, str, str], float] = {}
    for g, members in by_group.items():
        cap = cols[members[0]][1].quota.headroom
        assert cap is not None
        headroom[g] = cap
        starts.append(len(index))
        index.extend(members)
        value.extend(float(cols[i][1].quota.needed) for i in members)
        lower.append(-inf)
        upper.append(cap)
    if starts:
        h.addRows(len(starts), lower, upper, len(index), starts, index, value)
    h.run()
    status = h.modelStatusToString(h.getModelStatus())
    x = list(h.getSolution().col_value) if n else []
    if len(x) < n:
        return BatchResult(tuple(Assignment(j, None, f"solver: {status}") for j in jobs), 0.0, "HiGHS", status, {})

    chosen: dict[int, Candidate] = {}
    for i, (j, c) in enumerate(cols):
        if x[i] > 0.5:
            chosen[j] = c
    used: dict[tuple[str, str, str], float] = defaultdict(float)
    out = []
    total = 0.0
    for j, job in enumerate(jobs):
        c = chosen.get(j)
        if c is None:
            why = "no runnable candidate" if not options[j] else "quota headroom taken by cheaper placements"
            out.append(Assignment(job, None, why))
            continue
        if c.quota_group is not None:
            used[c.quota_group] += c.quota.needed
        total += c.cost.total_usd
        out.append(Assignment(job, c))
    return BatchResult(tuple(out), total, "HiGHS", status, dict(used))
