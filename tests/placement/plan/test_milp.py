"""The HiGHS helpers the solvers share (placement.plan.milp): a solution checked against its own cost, and the
tier-by-tier count phase."""

from __future__ import annotations

import time

import highspy

from placement.plan.milp import checked_run, count_tiers, new_highs


class _ShiftedHighs:
    """Stands in for highspy.Highs whose presolve lost the objective offset: with presolve on it reports an
    objective below what its solution costs (and calls that optimal); with presolve off it is right."""

    def __init__(self, x, shift):
        import highspy

        self.options = {"presolve": "choose"}
        self.x, self.shift, self.runs = x, shift, []
        self.status = highspy.HighsModelStatus.kOptimal

    def getOptionValue(self, name):
        return (None, self.options[name])

    def setOptionValue(self, name, value):
        self.options[name] = value

    def setSolution(self, *args):
        pass

    def run(self):
        self.runs.append(self.options["presolve"])

    def getSolution(self):
        from types import SimpleNamespace

        return SimpleNamespace(value_valid=True, col_value=self.x)

    def getModelStatus(self):
        return self.status

    def getInfo(self):
        from types import SimpleNamespace

        cost = sum(c * v for c, v in zip(self.costs, self.x, strict=True))
        return SimpleNamespace(objective_function_value=cost - (self.shift if self.runs[-1] != "off" else 0.0))


def test_a_highs_objective_that_disagrees_with_its_solution_is_not_trusted():
    import time


    h = _ShiftedHighs([1.0, 0.0, 1.0], shift=8774.0)
    h.costs = [100.0, 50.0, 25.0]
    x, z = checked_run(h, 3, h.costs, [0.0] * 3, time.monotonic() + 10)
    assert z == 125.0 and h.runs == ["choose", "off"]  # solved again without presolve
    assert h.options["presolve"] == "choose"  # and the option is put back
    h = _ShiftedHighs([1.0, 0.0, 1.0], shift=0.0)
    h.costs = [100.0, 50.0, 25.0]
    assert checked_run(h, 3, h.costs, [0.0] * 3, time.monotonic() + 10)[1] == 125.0 and h.runs == ["choose"]


def _knapsack(capacity: float, sizes: list[float]):
    """One column per job (placed) and one slack per job (unplaced): placed + slack = 1, Σ size·placed ≤ capacity."""
    h = new_highs()
    n_jobs = len(sizes)
    n = 2 * n_jobs
    inf = highspy.kHighsInf
    h.addCols(n, [0.0] * n, [0.0] * n, [1.0] * n, 0, [], [], [])
    h.changeColsIntegrality(n, list(range(n)), [highspy.HighsVarType.kInteger] * n)
    for j in range(n_jobs):
        h.addRow(1.0, 1.0, 2, [j, n_jobs + j], [1.0, 1.0])
    h.addRow(-inf, capacity, n_jobs, list(range(n_jobs)), sizes)
    return h, n


def test_count_tiers_places_the_higher_tier_first_and_holds_its_count():
    # Jobs 0, 1 (tier 1) and 2 (tier 2), sizes 2, 2, 3, room for 4: both tier-1 jobs fit, so job 2 cannot.
    h, n = _knapsack(4.0, [2.0, 2.0, 3.0])
    warm = [0.0, 0.0, 1.0, 1.0, 1.0, 0.0]  # the start places job 2 alone
    out = count_tiers(h, n, [[3, 4], [5]], warm, time.monotonic() + 10, stop_on_failure=True)
    assert not out.failed and out.unproven == () and out.status == "Optimal"
    assert [round(v) for v in out.warm[3:]] == [0, 0, 1]
    # The held count survives the next objective: minimising tier 2's slack cannot unplace a tier-1 job.
    h.changeColsCost(n, list(range(n)), [0.0] * 5 + [1.0])
    h.run()
    assert [round(v) for v in list(h.getSolution().col_value)[3:]] == [0, 0, 1]


def test_count_tiers_keeps_a_start_that_places_a_tier_whole_without_solving():
    h, n = _knapsack(10.0, [2.0, 2.0, 3.0])
    warm = [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    runs = []
    h.run = lambda: runs.append(1)  # type: ignore[method-assign]
    out = count_tiers(h, n, [[3, 4], [5]], warm, time.monotonic() + 10, stop_on_failure=True)
    assert out.warm == warm and runs == []


def test_dive_turns_an_lp_optimum_into_a_whole_solution_within_the_bound():
    """max 5a + 4b s.t. 6a + 4b <= 24, a + 2b <= 6, integer: LP optimum (3, 1.5), value 21; the dive lands on a
    whole point the LP re-solves keep feasible, worth at most the bound."""
    from placement.plan.milp import dive, relative_gap

    inf = highspy.kHighsInf
    h = new_highs()
    h.addCols(2, [-5.0, -4.0], [0.0, 0.0], [inf, inf], 0, [], [], [])
    h.addRows(2, [-inf, -inf], [24.0, 6.0], 4, [0, 2], [0, 1, 0, 1], [6.0, 4.0, 1.0, 2.0])
    h.run()
    y = list(h.getSolution().col_value)
    bound = h.getInfo().objective_function_value
    assert y == [3.0, 1.5] and bound == -21.0
    x = dive(h, [0, 1], y, time.monotonic() + 5)
    assert x is not None and all(abs(v - round(v)) < 1e-9 for v in x)
    assert 6 * x[0] + 4 * x[1] <= 24 + 1e-9 and x[0] + 2 * x[1] <= 6 + 1e-9
    cost = -5 * x[0] - 4 * x[1]
    assert cost >= bound and relative_gap(cost, bound) >= 0.0
    assert dive(h, [0, 1], y, time.monotonic() - 1) is None  # past its deadline: nothing


def test_status_text_says_optimal_or_stopped_with_the_gap():
    from placement.plan.milp import status_text

    assert status_text("Optimal", 0.0049, False, 0.01) == "optimal, gap 0.49%"
    assert status_text("Time limit reached", 0.032, True, 0.01) == "time limit reached, gap 3.20% (asked 1%)"
