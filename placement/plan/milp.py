"""The HiGHS helpers every solver of :mod:`placement.plan` shares (batch, schedule, portfolio): a silent solver, a
run within what is left of a time budget, a solution checked against its own cost, the tier-by-tier count phase,
a dive (an integer solution from an LP optimum), and the status and gap a plan reports.

A time budget is a deadline on :func:`time.monotonic` (seconds), set once by the command (``--time-limit``) and
spent by every solve of a plan in turn: each run gets what is left, never less than :data:`MIN_RUN_S`.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# The least time one HiGHS run is given (seconds), even when the budget is spent: enough to return the warm start.
MIN_RUN_S = 0.1
# With several priority tiers, each tier's count problem gets this share of the budget left, split over the tiers
# still to solve, so that the later tiers and the cost phase keep time.
TIER_SHARE = 0.6


def new_highs() -> Any:
    """A silent ``highspy.Highs``. HiGHS prints its banner from the C++ constructor straight to file
    descriptor 1, before any option can be set, which would corrupt ``--json`` on stdout: the constructor runs
    with descriptor 1 pointed at /dev/null."""
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


def time_left(deadline: float) -> float:
    """Seconds a run may take before ``deadline`` (``time.monotonic()``), at least :data:`MIN_RUN_S`."""
    return max(deadline - time.monotonic(), MIN_RUN_S)


def run_until(h: Any, deadline: float) -> None:
    """Run HiGHS with whatever is left of the budget."""
    h.setOptionValue("time_limit", time_left(deadline))
    h.run()


def status_of(h: Any) -> str:
    """HiGHS's model status in its own words ("Optimal", "Time limit reached", ...)."""
    return str(h.modelStatusToString(h.getModelStatus()))


def is_optimal(h: Any) -> bool:
    import highspy

    return bool(h.getModelStatus() == highspy.HighsModelStatus.kOptimal)


def mip_gap(h: Any) -> float:
    """The relative MIP gap of the last run (a fraction); ``inf`` when HiGHS has no finite one."""
    gap = float(h.getInfo().mip_gap)
    return gap if math.isfinite(gap) else math.inf


def cost_of(costs: Sequence[float], x: Sequence[float]) -> float:
    """The objective of ``x``, worked out from the solution itself (not the solver's presolved objective)."""
    return math.fsum(c * v for c, v in zip(costs, x, strict=True))


def checked_run(h: Any, n: int, costs: Sequence[float], hint: list[float],
                deadline: float) -> tuple[list[float], float] | None:
    """Run HiGHS from ``hint``; (solution, its cost) or None without an optimal solution.

    The cost is worked out from the solution itself. HiGHS's presolve can lose the objective offset of
    the presolved model (then the reported objective, bound and gap are all shifted and "optimal" means
    nothing; seen with highspy 1.16 on these restricted problems): when the reported objective disagrees
    with the solution's cost, the same problem is solved again without presolve."""
    default = h.getOptionValue("presolve")[1]
    try:
        for presolve in (default, "off"):
            h.setOptionValue("presolve", presolve)
            h.setSolution(n, list(range(n)), hint)
            run_until(h, deadline)
            solution = h.getSolution()
            if not solution.value_valid or not is_optimal(h):
                return None
            x = list(solution.col_value)
            z = cost_of(costs, x)
            if abs(h.getInfo().objective_function_value - z) <= 1e-7 * max(abs(z), 1.0):
                return x, z
        return None
    finally:
        h.setOptionValue("presolve", default)


@dataclass(frozen=True)
class TierCounts:
    """What the count phase left: the warm start for the next phase, HiGHS's last status, the tiers (by
    position) whose count the time limit left unproven, and whether a run ended with no solution at all."""

    warm: list[float]
    status: str
    unproven: tuple[int, ...]
    failed: bool


def count_tiers(h: Any, n: int, tiers: Sequence[Sequence[int]], warm: list[float], deadline: float, *,
                stop_on_failure: bool) -> TierCounts:
    """Phase 1 of a prioritised MILP: for each tier from the highest, the most of its jobs placed, with the higher
    tiers' counts held.

    ``tiers``: per tier, the columns of its jobs' "unplaced" slacks (each 0..1); ``warm``: a feasible start. A tier
    the start already places whole needs no solve. Each solve minimises the tier's slacks from the warm start,
    then the count is held for the later phases: the slacks fixed at 0 when the whole tier is placed (with
    several tiers), else a row ``Σ slacks ≤ count``. Solving the objectives in turn keeps the cost objective free
    of big-M penalties, whose weak LP bound would otherwise stall the search. With ``stop_on_failure``, a run
    that ends without a solution stops the phase (``failed``); otherwise the warm start so far is kept.
    """
    import highspy

    inf = highspy.kHighsInf
    status, unproven, failed = "Optimal", [], False
    for k, members in enumerate(tiers):
        if sum(warm[i] for i in members) > 0.5:  # the incumbent leaves some of this tier unplaced: can more fit?
            cost = [0.0] * n
            for i in members:
                cost[i] = 1.0
            h.changeColsCost(n, list(range(n)), cost)
            h.setSolution(n, list(range(n)), warm)
            share = 1.0 if len(tiers) == 1 else TIER_SHARE / (len(tiers) - k)
            run_until(h, time.monotonic() + max(deadline - time.monotonic(), 0.0) * share)
            status = status_of(h)
            if not h.getSolution().value_valid:
                failed = True
                if stop_on_failure:
                    break
            else:
                if not is_optimal(h) and len(tiers) > 1:
                    unproven.append(k)
                warm = list(h.getSolution().col_value)
        count = float(round(sum(warm[i] for i in members)))
        if count == 0 and len(tiers) > 1:  # the whole tier placed: fix its slacks rather than add a row
            h.changeColsBounds(len(members), list(members), [0.0] * len(members), [0.0] * len(members))
        else:
            h.addRow(-inf, count, len(members), list(members), [1.0] * len(members))
    return TierCounts(warm=warm, status=status, unproven=tuple(unproven), failed=failed)


def dive(relax: Any, integer: Sequence[int], y: Sequence[float], deadline: float,
         rounds: int = 40) -> list[float] | None:
    """An integer solution by diving from the LP optimum ``y`` of ``relax`` (an LP whose column bounds it
    changes): every round fixes the integer columns that are whole at their value and a quarter of the others,
    nearest to whole first, at their rounding, and re-solves from the last basis. None when a re-solve has no
    solution or the deadline passes. A few warm-started LPs where a branch and bound's root can take many times
    as long; the caller proves the answer against its own bound."""
    fixed: dict[int, float] = {}
    x = list(y)
    for _ in range(rounds):
        free = [i for i in integer if i not in fixed]
        frac = sorted((i for i in free if abs(x[i] - round(x[i])) > 1e-6), key=lambda i: abs(x[i] - round(x[i])))
        for i in free:
            if abs(x[i] - round(x[i])) <= 1e-6:
                fixed[i] = float(round(x[i]))
        if not frac:
            return x
        for i in frac[:max(1, len(frac) // 4)]:
            fixed[i] = float(round(x[i]))
        if time.monotonic() > deadline:
            return None
        idx = list(fixed)
        vals = [fixed[i] for i in idx]
        relax.changeColsBounds(len(idx), idx, vals, vals)
        run_until(relax, deadline)
        if not relax.getSolution().value_valid:
            return None
        x = list(relax.getSolution().col_value)
    return None


def relative_gap(cost: float, bound: float) -> float:
    """``(cost − bound) / cost``: how far a solution of ``cost`` may be from the optimum a ``bound`` proves."""
    return max(cost - bound, 0.0) / max(abs(cost), 1e-9)


def status_text(status: str, gap: float, time_limited: bool, asked: float) -> str:
    """A solve's status as a reader needs it beside a figure: optimal within the gap asked, or stopped at the time
    limit with the gap it reached."""
    if time_limited:
        return f"time limit reached, gap {gap:.2%} (asked {asked:.0%})"
    if status == "Optimal":
        return f"optimal, gap {gap:.2%}"
    return f"{status.lower()}, gap {gap:.2%}"
