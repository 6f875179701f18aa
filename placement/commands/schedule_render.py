"""Rendering of a :class:`~placement.plan.schedule.Schedule`: the schedule table, per-slot usage bars of each quota
key, the JSON fields it adds to the batch document, and the Gantt chart PNG (matplotlib, the ``charts`` extra,
imported only when a chart is asked for)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from placement.commands.render import _headroom, _usd, batch_doc, batch_quota_lines, catalog_text, fit_table, wrap

if TYPE_CHECKING:
    import datetime as dt

    from placement.model.catalog import Catalog
    from placement.plan.batch import BatchResult
    from placement.plan.schedule import Schedule

BARS = " .:-=+*#"  # usage as a share of the headroom, ASCII so any terminal and log shows it; '!' = over
CHART_WIDTH = 84  # text columns of the usage bars (slots are merged, their peak shown, to fit)


def _h(x: float | None) -> str:
    return "-" if x is None else f"{x:,.1f}"


def _saved(s: Schedule, at_once: BatchResult | None) -> tuple[str, float | None]:
    if at_once is None:
        return "", None
    if at_once.placed == s.placed:
        saved = at_once.total_usd - s.total_usd
        return (f"all at once (every job starting at --now, as --no-schedule plans it): ${at_once.total_usd:,.2f}; "
                f"scheduling saves ${saved:,.2f}"), saved
    return (f"all at once (every job starting at --now, as --no-schedule plans it) places {at_once.placed} "
            f"(${at_once.total_usd:,.2f}); the schedule places {s.placed}"), None


def usage_bars(s: Schedule, width: int = CHART_WIDTH) -> list[str]:
    """One line per quota group: its peak use per column of merged slots as a share of its headroom."""
    if not s.usage:
        return []
    n = len(next(iter(s.usage.values())))
    per = max(1, math.ceil(n / width))
    span = per * s.grid.slot_h
    out = [f"usage per quota key, each column {span:g} h (peak): ' ' idle {BARS[1:]} full, ! over"]
    label = max(len(f"{g[0]} {g[1]} {g[2]}") for g in s.usage)
    for g, used in sorted(s.usage.items()):
        room = s.headroom[g]
        cells = []
        for k in range(0, n, per):
            u = max(used[k:k + per])
            r = min(room[k:k + per])
            if u <= 0:
                cells.append(" ")
            elif u > r + 1e-9:
                cells.append("!")
            else:
                cells.append(BARS[max(1, min(len(BARS) - 1, math.ceil(u / r * (len(BARS) - 1))))])
        peak = max(used)
        out.append(f"  {f'{g[0]} {g[1]} {g[2]}'.ljust(label)} |{''.join(cells).rstrip().ljust(len(cells))}| "
                   f"peak {peak:g}/{max(room):g} {s.units[g]}")
    return out


def schedule_text(s: Schedule, catalog: Catalog, at_once: BatchResult | None = None,
                  width: int | None = None) -> str:
    """The schedule table (one row per job: where, its start, when its results are ready, its wait, its cost split
    into compute, egress and delay, its deadline and quota), the quota to request, the usage bars and the totals."""
    rows = []
    priorities = len({x.job.priority_value for x in s.jobs}) > 1
    deadlines = any(x.job.deadline_hours is not None for x in s.jobs)
    for x in s.jobs:
        c = x.candidate
        prio = [str(x.job.priority_value)] if priorities else []
        due = _h(x.job.deadline_hours) if x.job.deadline_hours is not None else "-"
        if c is None:
            rows.append([x.job.name, *prio, "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", due, "-",
                         x.reason or "unplaced"])
            continue
        o = c.offer
        cost = c.cost
        rows.append([x.job.name, *prio, f"{o.cloud} {o.region}", f"{o.instance_type} x{c.nodes}", c.capacity,
                     _h(x.start_h), _h(x.end_h), _h(x.wait_h), _usd(cost.compute_usd),
                     _usd(cost.egress_usd + cost.extra_usd), _usd(cost.delay_usd + x.wait_usd), _usd(x.total_usd),
                     due, _headroom(c), ""])
    headers = ("job", *(["priority"] if priorities else []), "where", "instance x nodes", "capacity", "start h",
               "ready at h", "wait h", "compute $", "egress $", "delay $", "total $", "due h", "quota need/headroom",
               "notes")
    numeric = {"priority", "start h", "ready at h", "wait h", "compute $", "egress $", "delay $", "total $", "due h"}
    right = {i for i, h in enumerate(headers) if h in numeric}
    # Narrow terminals lose the split first, then the quota; "ready at h" and "due h" stay while a job has a deadline.
    drop = ("compute $", "egress $", "delay $", "quota need/headroom", "wait h", "capacity", "start h",
            *(() if deadlines else ("due h",)))
    out = [wrap(f"schedule from {s.grid.now:%Y-%m-%d %H:%M}Z (hours from --now; {s.grid.horizon_h:g} h horizon, "
                f"{s.grid.slot_h:g} h slots; ready at h: when the job's results are home)", width, "    ")]
    out.append(fit_table(headers, rows, right=right, width=width, drop=drop))
    out += [wrap(line, width, "       ") for line in batch_quota_lines(s.as_batch())]
    out.extend(usage_bars(s, min(CHART_WIDTH, max(20, (width or 120) - 60))))
    out.append(wrap(f"placed {s.placed}/{len(s.jobs)}, total ${s.total_usd:,.2f} with waits (solver {s.solver}: "
                    f"{s.status}; catalog: {catalog_text(catalog)})", width, "    "))
    line, _ = _saved(s, at_once)
    if line:
        out.append(wrap(line, width, "    "))
    return "\n".join(out)


def schedule_doc(s: Schedule, catalog: Catalog, at_once: BatchResult | None = None,
                 sources: Sequence[dict[str, Any]] = (), now: dt.datetime | None = None,
                 greedy: BatchResult | None = None) -> dict[str, Any]:
    """The batch document of the schedule, with per job ``start_hours``, ``end_hours``, ``waits_hours`` and
    ``wait_usd``, and a ``schedule`` section: the grid, per-slot usage per quota key, the all-at-once total.
    ``greedy`` (one-by-one, all at once) fills the document's ``greedy`` entry, against the schedule's total."""
    doc = batch_doc(s.as_batch(), catalog, greedy, sources, now)
    for entry, x in zip(doc["jobs"], s.jobs, strict=True):
        entry["earliest_start_hours"] = x.earliest_h
        entry["start_hours"] = x.start_h
        entry["end_hours"] = x.end_h
        entry["waits_hours"] = x.wait_h
        entry["wait_usd"] = round(x.wait_usd, 2)
        entry["total_usd"] = round(x.total_usd, 2) if x.candidate is not None else None
    _, saved = _saved(s, at_once)
    doc["schedule"] = {
        "now": s.grid.now.isoformat().replace("+00:00", "Z"),
        "horizon_hours": s.grid.horizon_h,
        "slot_hours": s.grid.slot_h,
        "usage": [{"cloud": g[0], "region": g[1], "quota": g[2], "unit": s.units[g], "headroom": list(s.headroom[g]),
                   "used": list(u)} for g, u in sorted(s.usage.items())],
        "all_at_once": None if at_once is None else {"total_usd": round(at_once.total_usd, 2),
                                                     "placed": at_once.placed},
        "saved_usd": None if saved is None else round(saved, 2),
    }
    return doc


def write_chart(s: Schedule, path: str) -> None:
    """A Gantt chart of the schedule (one bar per placed job, coloured by where it runs) as a PNG at ``path``,
    written whole or not at all. Its path and the charts extra were checked before the solve
    (:func:`placement.commands.common.check_chart`)."""
    import matplotlib

    from placement.files.outputs import written

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    placed = [x for x in s.jobs if x.candidate is not None]
    fig, ax = plt.subplots(figsize=(10, 1.2 + 0.4 * max(len(s.jobs), 1)))
    colours: dict[str, Any] = {}
    cmap = plt.get_cmap("tab10")
    for row, x in enumerate(reversed(s.jobs)):
        if x.candidate is None or x.start_h is None or x.end_h is None:
            continue
        o = x.candidate.offer
        where = f"{o.cloud} {o.region} {x.candidate.capacity}"
        first = where not in colours
        colour = colours.setdefault(where, cmap(len(colours) % 10))
        ax.barh(row, x.end_h - x.start_h, left=x.start_h, color=colour, label=where if first else None)
        if x.wait_h:
            ax.barh(row, x.wait_h, left=x.earliest_h, color="none", edgecolor="grey", hatch="//")
    ax.set_yticks(range(len(s.jobs)), [x.job.name for x in reversed(s.jobs)])
    ax.set_xlabel(f"hours from {s.grid.now:%Y-%m-%d %H:%M}Z")
    ax.set_xlim(0, max([s.grid.horizon_h, *(x.end_h or 0 for x in placed)]))
    ax.set_title(f"schedule: {s.placed}/{len(s.jobs)} placed, ${s.total_usd:,.2f} (hatched: waiting)")
    if colours:
        ax.legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    try:
        with written(path) as fh:
            fig.savefig(fh, format="png")
    finally:
        plt.close(fig)
