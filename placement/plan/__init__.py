"""The solvers: one job's plan, a burst placed jointly, a burst scheduled over time, and a capacity portfolio.

- :mod:`~placement.plan.job`: one job's candidates (offer x capacity, or a reservation), their cost and ranking.
  The single-job plan is the one-slot case of the others: a batch of one job picks the job plan's rank 1.
- :mod:`~placement.plan.batch`: jobs that share quota, now (one slot); :mod:`~placement.plan.schedule`: the same over
  slots of time; :mod:`~placement.plan.portfolio`: commitments over weeks of a forecast. All three solve an exact
  MILP with HiGHS through :mod:`~placement.plan.milp` (time budget, warm start, the tier-by-tier phase, gap).
- :mod:`~placement.plan.decides`, :mod:`~placement.plan.reservation_use`: what decides a plan, read from its rows.

Pure: data in, data out. May import :mod:`placement.model`, :mod:`placement.errors`, :mod:`placement.console`,
``highspy`` and itself; never the commands or an adapter.
"""
