"""The scan's pending terms (placement.plan.job._Pending): a group excluded for good by its region or its node
shape is worked out only when one of its rows is shown, and the break-even search reads only the excluded spot rows
kept apart. Both must give what the eager scan over every row gives."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from siblings import sibling

from placement.model.catalog import Offer, embedded_catalog
from placement.plan import decides
from placement.plan import job as engine

_jobs = sibling(__file__, "test_decides.py")._jobs


def _eager_group(ctx: Any, cloud: str, region: str, shape: Any) -> Any:
    """The scan's groups before pending terms: every group's terms worked out at once."""
    out = []
    for capacity in ctx.offer_caps:
        t = ctx.terms(cloud, region, shape, capacity)
        if t is None:
            return None
        out.append(t)
    return tuple(out) if out else None


def _offers() -> tuple[Offer, ...]:
    """The embedded catalog plus, for each of its shapes, a single-node copy without a fabric in a few regions:
    groups a multi-node job excludes by node shape (most of a big catalog), next to runnable ones."""
    base = embedded_catalog().offers
    extra = []
    for o in base[::7]:
        lone = dataclasses.replace(o.shape, name=f"x-{o.shape.name}", fabric="none", fabric_nics=0)
        extra.append(dataclasses.replace(o, shape=lone))
    return (*base, *extra)


def test_pending_groups_show_and_rank_as_the_eager_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    offers = _offers()
    pending_seen = 0
    for job in _jobs(12, seed=7):
        fast = engine.plan(job, offers)
        pending_seen += sum(type(item[1]) is engine._Pending for item in fast.excluded_rows if len(item) == 2)
        with monkeypatch.context() as m:
            m.setattr(engine, "_group", _eager_group)
            slow = engine.plan(job, offers)
        assert len(fast.excluded_rows) == len(slow.excluded_rows), job.name
        assert fast.ranked == slow.ranked, job.name
        assert fast.excluded == slow.excluded, job.name  # every excluded row priced as the eager terms price it
        assert fast.frontier == slow.frontier and fast.cheapest_unhurried == slow.cheapest_unhurried, job.name
        assert decides.break_even(fast) == decides.break_even(slow), job.name
    assert pending_seen > 1000  # the test covers what it names


def test_the_break_even_search_needs_no_excluded_row_the_scan_left_out() -> None:
    offers = _offers()
    found = 0
    for job in _jobs(16, seed=33):
        p = engine.plan(job, offers)
        kept = decides.break_even(p)
        assert p.context is not None
        spot = [item for item in p.excluded_rows if (item[1] if len(item) == 2 else item[11]).order == 2]
        assert p.context.open_spot == [item for item in spot if type(item[-1]) is not engine._Pending]
        p.context.open_spot = list(p.excluded_rows)  # every excluded row, as the search read them before
        assert decides.break_even(p) == kept, job.name
        found += kept is not None
    assert found >= 4
