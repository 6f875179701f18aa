"""Turn plans into the versioned JSON document or a text table. Pure: returns data or strings.

Why one module: the JSON documents and the tables of plan, plan-batch and offers are rendered from the same helpers
(money, hours, notes, a candidate's figures), so a figure reads the same in both.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from placement.model.catalog import Catalog, Offer
from placement.model.trust import SPOT_NOT_CHEAPER, spot_not_cheaper, stale_clouds
from placement.plan.job import Candidate, Plan, request_text, why_chosen

if TYPE_CHECKING:
    import datetime as dt

    from placement.model.jobspec import JobSpec
    from placement.model.reservations import Reservation
    from placement.plan.batch import BatchResult

SCHEMA = "gpufleet.placement/v1"
# Fields added to v1 documents since it was cut (fields are only ever added): 1 = issue 19 (scaling_efficiency,
# overhead, checkpoint_interval_minutes, checkpoint_write_minutes, expected_interruptions, frontier).
# 2 = issues 26 and 27: per candidate interruption_source, interruptions_per_hour_p90, measured (26), cost.nat_usd,
# cost.checkpoint_storage_usd, cost.checkpoint_requests_usd, within_uncertainty_of, uncertainty_decider,
# checkpoint_interval_capped (27); per plan break_even_interruptions_per_hour, warnings, calibration (26), model_error
# (27); frontier ranks and misses_deadline (27).
SCHEMA_MINOR = 2


def _money(x: float) -> float | None:
    return None if math.isinf(x) or math.isnan(x) else round(x, 4)


def _hours(x: float) -> float | None:
    return None if math.isinf(x) or math.isnan(x) else round(x, 3)


def _rate(x: float) -> float | None:
    return None if math.isinf(x) or math.isnan(x) else round(x, 6)


def _ratio(x: float | None) -> float | None:
    """A MIP gap: null when there is no bound to measure it against (infinite or undefined)."""
    return None if x is None or math.isinf(x) or math.isnan(x) else x


def candidate_doc(c: Candidate, rank: int | None = None) -> dict[str, Any]:
    """One candidate as in the JSON contract (units in docs/placement.md, JSON reference)."""
    o = c.offer
    doc: dict[str, Any] = {
        "rank": rank,
        **_where(o),
        "nodes": c.nodes,
        "billed_gpus": c.billed_gpus,
        "idle_gpus": c.idle_gpus,
        "capacity": c.capacity,
        "usd_per_hour": _money(c.usd_per_hour),
        "hours": _hours(c.hours),
        "transfer_hours": _hours(c.transfer_hours),
        "ready_hours": _hours(c.ready_hours),
        "interruptions_per_hour": _rate(c.interruptions_per_hour),
        "interruption_source": c.interruption_source,
        "interruptions_per_hour_p90": _rate(c.interruptions_per_hour_p90),
        "measured": list(c.measured),
        "scaling_efficiency": _rate(c.scaling_efficiency),
        "overhead": _rate(c.overhead),
        "checkpoint_interval_minutes": _hours(c.checkpoint_interval_minutes),
        "checkpoint_write_minutes": _hours(c.checkpoint_write_minutes),
        "expected_interruptions": _hours(c.expected_interruptions),
        "checkpoint_interval_capped": c.checkpoint_interval_capped,
        "checkpoint_interval_basis": c.checkpoint_interval_basis,
        "daly_interval_minutes": _hours(c.daly_interval_minutes) if c.checkpoint_interval_basis != "fixed" else None,
        "checkpoint_gb": _rate(c.checkpoint_gb),
        "checkpoints_written": _hours(c.checkpoints_written),
        "checkpoint_keep": c.checkpoint_keep,
        "checkpoint_retention_days": _hours(c.checkpoint_retention_days),
        "cost": {
            "compute_usd": _money(c.cost.compute_usd),
            "egress_usd": _money(c.cost.egress_usd),
            "delay_usd": _money(c.cost.delay_usd),
            "nat_usd": _money(c.cost.nat_usd),
            "checkpoint_storage_usd": _money(c.cost.checkpoint_storage_usd),
            "checkpoint_requests_usd": _money(c.cost.checkpoint_requests_usd),
            "total_usd": _money(c.cost.total_usd),
        },
        "quota": {"key": c.quota.key, "unit": c.quota.unit, "needed": c.quota.needed, "headroom": c.quota.headroom},
        "feasible": c.feasible,
        "notes": list(notes(c)),
        "price_source": o.price_source,
    }
    if _suspect(c):
        doc["spot_not_cheaper"] = True
    if o.price_as_of and c.reservation is None:
        doc["price_as_of"] = o.price_as_of  # when the catalog row's figures held (issue 36)
    if o.price_flag and c.reservation is None:
        doc["price_flag"] = o.price_flag  # the catalog row's documented reason its price is suspect (issue 36)
    if c.reservation is not None:
        r = c.reservation
        doc["reservation"] = {"id": r.id, "kind": r.kind, "source": r.source, "count": r.count,
                              "usd_per_hour": r.usd_per_hour,
                              "ends": None if r.ends is None else r.ends.isoformat().replace("+00:00", "Z")}
    if o.placement_score is not None:
        doc["placement_score"] = o.placement_score
    if c.excluded:
        doc["excluded_reason"] = c.excluded
    return doc


def _suspect(c: Candidate) -> bool:
    """A spot candidate on an offer whose spot price is not below on-demand (placement.model.trust)."""
    return c.capacity == "spot" and spot_not_cheaper(c.offer)


def notes(c: Candidate) -> tuple[str, ...]:
    """A candidate's notes, with the catalog-trust flag on a spot price at or above on-demand."""
    return (*c.notes, SPOT_NOT_CHEAPER) if _suspect(c) else c.notes


def catalog_info(catalog: Catalog, now: dt.datetime | None = None) -> dict[str, Any]:
    """Where the offers came from: ``source``/``as_of`` summarised, and per cloud in ``clouds``. With ``now``,
    each cloud says whether its catalog is ``stale`` (old: placement.model.trust.stale)."""
    counts = catalog.offers_per_cloud
    old = set(stale_clouds(catalog, now)) if now is not None else set()
    clouds = {o.cloud: {"source": o.source, "path": o.path, "as_of": o.as_of, "modified": o.modified,
                        "live": o.live, "offers": counts.get(o.cloud, 0),
                        **({"stale": o.cloud in old} if now is not None else {})} for o in catalog.provenance()}
    return {"source": catalog.source, "as_of": catalog.as_of, "offers": len(catalog.offers), "clouds": clouds}


def catalog_text(catalog: Catalog) -> str:
    """Per cloud, where its offers came from: ``aws embedded as of 2026-11-01, gcp /x/gcp.csv (...)``."""
    return ", ".join(o.describe() for o in catalog.provenance()) or catalog.source


def cheaper_doc(p: Plan) -> dict[str, Any] | None:
    """The ``cheaper_unconfirmed`` object: a quota-unknown candidate cheaper than the chosen one."""
    found = p.cheaper_unconfirmed
    if found is None or p.chosen is None:
        return None
    rank, c = found
    return {**candidate_doc(c, rank), "saves_usd": _money(p.chosen.cost.total_usd - c.cost.total_usd),
            "request": {"cloud": c.offer.cloud, "region": c.offer.region, "quota": c.quota.key, "unit": c.quota.unit,
                        "amount": c.quota.needed}}


def unused_reservations(p: Plan, reservations: Sequence[Reservation]) -> list[dict[str, Any]]:
    """``reservations_unused``: each reservation in the job's scope the plan does not use, and why."""
    if not reservations:
        return []  # nothing to report: a plan without reservations does not load their module
    from placement.plan.reservation_use import unused

    return [{"id": u.reservation.id, "cloud": u.reservation.cloud, "region": u.reservation.region,
             "zone": u.reservation.zone, "instance_type": u.reservation.instance_type, "count": u.reservation.count,
             "kind": u.kind, "reason": u.reason} for u in unused(p, list(reservations))]


def plan_doc(
    p: Plan, catalog: Catalog, *, top: int, all_candidates: bool, sources: Sequence[dict[str, Any]] = (),
    now: dt.datetime | None = None, reservations: Sequence[Reservation] = (),
) -> dict[str, Any]:
    """The ``gpufleet.placement/v1`` document for one job."""
    shown = list(p.ranked) if all_candidates else list(p.head(top))
    cands = [_tie(p, candidate_doc(c, i + 1), c) for i, c in enumerate(shown)]
    if all_candidates:
        cands += [candidate_doc(c) for c in p.excluded]
    return {
        "schema": SCHEMA,
        "schema_minor": SCHEMA_MINOR,
        "kind": "plan",
        "job": p.job.name,
        "catalog": catalog_info(catalog, now),
        "sources": list(sources),
        "chosen": candidate_doc(p.chosen, 1) if p.chosen else None,
        "cheaper_unconfirmed": cheaper_doc(p),
        "why": why_chosen(p),
        "runnable": len(p.rows),
        "excluded": len(p.excluded_rows),
        "closest_reasons": [] if p.rows else closest_reasons(p, catalog),
        "reservations_unused": unused_reservations(p, reservations),
        "candidates": cands,
        "frontier": [_frontier_doc(c, rank) for c, rank in p.frontier_ranked],
        "model_error": _model_error(p),
        "checkpoint_interval_why": interval_why(p, p.chosen) if p.chosen else None,
    }


def _model_error(p: Plan) -> dict[str, Any]:
    """The scaling curve the job uses and its measured error band (issue 27; docs/cost-model-fit.md)."""
    from placement.model.physics import curve_name
    from placement.model.physics_data import physics_book

    book = physics_book()
    cv = curve_name(p.job.workload, p.job.training)
    speed, scaling = book.evidence.get(cv, (0, 0))
    # band: the RMS of every held-out point of the curve (speed ratios and scaling points), what ties are called
    # on; the two kinds apart, with how many points each (issue 36).
    return {"curve": cv, "band": book.band(p.job.workload, p.job.training),
            "speed_band": book.speed_band(p.job.workload, p.job.training), "speed_points": speed,
            "scaling_band": book.scaling_band(p.job.workload, p.job.training), "scaling_points": scaling}


def _tie(p: Plan, doc: dict[str, Any], c: Candidate) -> dict[str, Any]:
    """Mark a candidate whose total is within the model's measured error of the chosen one's (issue 27)."""
    decide = p.uncertain(c)
    if decide is not None:
        doc["within_uncertainty_of"] = 1
        doc["uncertainty_decider"] = decide
        doc["uncertainty_band"] = _model_error(p)["band"]
    return doc


def _frontier_doc(c: Candidate, rank: int) -> dict[str, Any]:
    """A frontier entry: its rank filled in; one excluded only by the deadline says ``misses_deadline``."""
    doc = candidate_doc(c, rank)
    doc["misses_deadline"] = bool(c.excluded and c.excluded.startswith("ready in "))
    return doc


def batch_doc(
    result: BatchResult, catalog: Catalog, greedy: BatchResult | None = None, sources: Sequence[dict[str, Any]] = (),
    now: dt.datetime | None = None,
) -> dict[str, Any]:
    """The ``gpufleet.placement/v1`` document for a batch: one ``chosen`` per job, the total and solver status."""
    jobs = []
    for a in result.assignments:
        jobs.append(
            {
                "job": a.job.name,
                "chosen": candidate_doc(a.candidate, 1) if a.candidate else None,
                "placed": a.candidate is not None,
                "reason": a.reason,
                "priority": a.job.priority_value,
                "moved": a.moved,
                "alone": candidate_doc(a.alone, 1) if a.alone else None,
                "binding": [{"cloud": b.cloud, "region": b.region, "quota": b.key, "unit": b.unit,
                             "needed": b.needed, "headroom": b.headroom, "used": b.used, "taken_by": list(b.taken_by)}
                            for b in a.binding],
            }
        )
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "schema_minor": SCHEMA_MINOR,
        "kind": "batch",
        "catalog": catalog_info(catalog, now),
        "sources": list(sources),
        "jobs": jobs,
        "placed": result.placed,
        "unplaceable": len(result.assignments) - result.placed,
        "total_usd": _money(result.total_usd),
        "solver": {"name": result.solver, "status": result.status, "mip_gap": _ratio(result.gap)},
        "quota_used": [
            {"cloud": g[0], "region": g[1], "quota": g[2], "used": v} for g, v in sorted(result.quota_used.items())
        ],
    }
    if greedy is not None:
        doc["greedy"] = {
            "total_usd": _money(greedy.total_usd),
            "placed": greedy.placed,
            "saved_usd": _money(greedy.total_usd - result.total_usd) if greedy.placed == result.placed else None,
        }
    return doc


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: set[int] | None = None) -> str:
    """A plain aligned text table, no trailing spaces on any line."""
    right = right or set()
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        pairs = enumerate(zip(cells, widths, strict=True))
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in pairs).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def fit_table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: set[int] | None = None, *,
              width: int | None = None, drop: Sequence[str] = (), wrap_last: bool = True) -> str:
    """A table that fits ``width`` columns (``None``: no limit).

    Too wide, the last column (free text such as notes; with ``wrap_last``) moves to a wrapped, indented line
    under its row; still too wide, the columns named in ``drop`` are hidden in that order, and a last line
    names them."""
    right = right or set()
    full = table(headers, rows, right)
    if width is None or max(map(len, full.splitlines())) <= width:
        return full
    last = len(headers) - 1 if wrap_last else None
    keep = [i for i in range(len(headers)) if i != last]
    hidden: list[str] = []

    def render(cols: list[int]) -> list[str]:
        narrow = table([headers[i] for i in cols], [[r[i] for i in cols] for r in rows],
                       {n for n, i in enumerate(cols) if i in right}).splitlines()
        return narrow

    lines = render(keep)
    for name in drop:
        if max(map(len, lines)) <= width or name not in headers:
            continue
        keep.remove(list(headers).index(name))
        hidden.append(name)
        lines = render(keep)
    out = lines[:2]
    for row, text in zip(rows, lines[2:], strict=True):
        out.append(text)
        if last is not None and row[last]:
            out += textwrap.wrap(row[last], width=max(width, 20), initial_indent="    ", subsequent_indent="    ",
                                 break_on_hyphens=False)
    if hidden:
        out.append(wrap(f"(hidden to fit {width} columns: {', '.join(hidden)}; --json has every field)", width))
    return "\n".join(out)


def wrap(text: str, width: int | None, indent: str = "") -> str:
    """``text`` wrapped at ``width`` columns (``None``: one line), continuation lines indented by ``indent``."""
    if width is None:
        return text
    return "\n".join(textwrap.wrap(text, width=max(width, 20), subsequent_indent=indent, break_on_hyphens=False))


def _usd(x: float) -> str:
    return "-" if math.isinf(x) else f"{x:,.2f}"


def _headroom(c: Candidate) -> str:
    if c.quota.headroom is None:
        # The need is known without --quotas: say it, so the table answers "how much do I ask for".
        return f"{c.quota.needed} {c.quota.unit} / ?" if c.quota.needed else "unknown"
    return f"{c.quota.needed}/{c.quota.headroom:g} {c.quota.unit}"


def quota_request_line(c: Candidate | None) -> str | None:
    """The one line saying what quota to ask for when the chosen candidate's quota is unknown (None when it is
    known, or nothing is chosen): "quota: confirm or request 768 vcpu of headroom on L-417A185B in us-east-1"."""
    if c is None or c.quota.known or c.reservation is not None:
        return None
    return f"quota: {request_text(c)} (--quotas FILE or --live checks it)"


def job_terms(job: JobSpec) -> str:
    """The header's echo of what the job asked for beyond its size: the deadline and the price of delay."""
    parts = []
    if job.deadline_hours is not None:
        parts.append(f"deadline_hours {job.deadline_hours:g}")
    if job.usd_per_hour_of_delay:
        parts.append(f"delay valued at ${job.usd_per_hour_of_delay:,.2f}/h")
    return "".join(f", {x}" for x in parts)


PLAN_HEADERS = (
    "#",
    "cloud",
    "region",
    "zone",
    "instance x nodes",
    "capacity",
    "$/h",
    "compute $",
    "egress $",
    "total $",
    "ready in h",
    "quota need/headroom",
    "nat $",
    "ckpt store $",
    "ckpt req $",
    "ckpt every",
    "notes",
)


def _h(x: float) -> str:
    return "-" if math.isinf(x) else f"{x:,.1f}"


def _row_notes(c: Candidate) -> tuple[str, ...]:
    """The notes a row shows: the reason it is excluded, else its notes."""
    return (c.excluded,) if c.excluded else notes(c)


def common_notes(rows: Sequence[Sequence[str]]) -> tuple[str, ...]:
    """Notes every one of two or more rows carries, in the first row's order: said once above the table."""
    if len(rows) < 2:
        return ()
    rest = [set(n) for n in rows[1:]]
    return tuple(n for n in rows[0] if all(n in r for r in rest))


def candidate_row(c: Candidate, rank: str, said: Sequence[str] = ()) -> list[str]:
    """One table row; notes in ``said`` (told once above the table) are left out."""
    o = c.offer
    text = ", ".join(n for n in _row_notes(c) if n not in said)
    total = _usd(c.cost.total_usd)
    if c.cost.delay_usd:
        total += f" (delay {_usd(c.cost.delay_usd)})"
    return [
        rank,
        o.cloud,
        o.region,
        o.zone,
        f"{o.instance_type} x{c.nodes}",
        c.capacity,
        _usd(c.usd_per_hour),
        _usd(c.cost.compute_usd),
        _usd(c.cost.egress_usd),
        total,
        _h(c.ready_hours),
        _headroom(c),
        _usd(c.cost.nat_usd),
        _usd(c.cost.checkpoint_storage_usd),
        _usd(c.cost.checkpoint_requests_usd),
        interval_text(c),
        text,
    ]


# At 80 columns a table keeps where (cloud, region) and what it costs (total): zone IDs go first.
# The bill's other lines (issue 27) are hidden first: the total already counts them, --json has each.
PLAN_DROP = ("ckpt every", "nat $", "ckpt store $", "ckpt req $", "zone", "compute $", "egress $", "ready in h",
             "quota need/headroom", "$/h")


def plan_text(
    p: Plan, catalog: Catalog, *, top: int, all_candidates: bool, sources: Sequence[dict[str, Any]] = (),
    width: int | None = None, reservations: Sequence[Reservation] = (),
) -> str:
    """The plan as a table and the "why" line, fitted to ``width`` columns (``None``: no limit)."""
    shown = list(p.ranked) if all_candidates else list(p.head(top))
    every = shown + (list(p.excluded) if all_candidates else [])
    said = common_notes([_row_notes(c) for c in every])
    rows = [candidate_row(c, str(i + 1), said) for i, c in enumerate(shown)]
    if all_candidates:
        rows += [candidate_row(c, "x", said) for c in p.excluded]
    headers: tuple[str, ...] = PLAN_HEADERS
    drop: tuple[str, ...] = PLAN_DROP
    hurried = p.job.deadline_hours is not None or p.job.usd_per_hour_of_delay > 0
    if p.job.usd_per_hour_of_delay > 0:  # the delay in a column of its own, so "total $" stays narrow
        headers, rows = _delay_column(shown + (list(p.excluded) if all_candidates else []), rows)
    if hurried:  # when the job has a deadline or prices delay, "ready in h" is the last column hidden
        drop = (*(d for d in PLAN_DROP if d != "ready in h"), "delay $", "ready in h")
    out = [wrap(
        f"job {p.job.name}: {p.job.gpus} x {'/'.join(p.job.accelerators)}, {p.job.hours:g} h on "
        f"{p.job.accelerators[0]}, capacity {p.job.capacity}{job_terms(p.job)} (catalog: {catalog_text(catalog)})",
        width, "    ")
    ]
    if said:
        out.append(wrap("every row: " + ", ".join(said), width, "    "))
    if rows:
        right = {i for i, h in enumerate(headers) if h in _RIGHT}
        out.append(fit_table(headers, rows, right=right, width=width, drop=drop))
    if not p.rows:
        reasons = closest_reasons(p, catalog)
        out.append("(no runnable candidate)" + (": closest reasons:" if reasons else ""))
        out += [wrap(f"  - {r}", width, "    ") for r in reasons]
    hidden = len(p.rows) - len(shown)
    if hidden > 0 and not all_candidates:
        out.append(wrap(f"... {hidden} more runnable, {len(p.excluded_rows)} excluded (--all-candidates lists them)",
                        width))
    out += [wrap(f"reservation {u['id']} ({u['instance_type']} x{u['count']} in {u['zone']}) not used: {u['reason']}",
                 width, "    ") for u in unused_reservations(p, reservations)]
    out.append(sources_text(sources, width))
    if p.chosen is not None:
        out.append(wrap("run: " + run_text(p.chosen, p), width, "     "))
    out.append(wrap("why: " + why_chosen(p), width, "     "))
    request = quota_request_line(p.chosen)
    if request:
        out.append(wrap(request, width, "       "))
    return "\n".join(x for x in out if x)


_RIGHT = {"#", "$/h", "compute $", "egress $", "delay $", "total $", "ready in h", "nat $", "ckpt store $",
          "ckpt req $"}


def _delay_column(cands: Sequence[Candidate], rows: list[list[str]]) -> tuple[tuple[str, ...], list[list[str]]]:
    """PLAN_HEADERS with "delay $" after "egress $", and the rows with the delay moved there out of "total $"."""
    i = PLAN_HEADERS.index("egress $") + 1
    total = PLAN_HEADERS.index("total $")
    out = []
    for c, r in zip(cands, rows, strict=True):
        r = list(r)
        r[total] = _usd(c.cost.total_usd)
        out.append([*r[:i], _usd(c.cost.delay_usd), *r[i:]])
    return (*PLAN_HEADERS[:i], "delay $", *PLAN_HEADERS[i:]), out


def duration_text(minutes: float) -> str:
    """A duration given in minutes, with the precision it needs: ``0.04 s``, ``2.5 s``, ``40 s``, ``1.6 min``,
    ``25 min``, ``2.5 h``: two significant figures below a minute and below ten, never "0 s" for a nonzero time."""
    seconds = minutes * 60
    if seconds < 10:
        return f"{seconds:.2g} s" if seconds < 1 else f"{seconds:.1f} s"
    if seconds < 59.5:
        return f"{seconds:.0f} s"
    if minutes < 9.95:
        return f"{minutes:.1f} min"
    if minutes < 119.5:
        return f"{minutes:.0f} min"
    return f"{minutes / 60:,.1f} h"


BASIS_WORDS = {"cost": "cost-optimal", "daly": "Daly", "fixed": "fixed", "run": "once, at the end",
               "no-write": "default"}


def interval_text(c: Candidate) -> str:
    """The table's "ckpt every" cell: the interval and, in a word, why (issue 36)."""
    return f"{duration_text(c.checkpoint_interval_minutes)} ({BASIS_WORDS.get(c.checkpoint_interval_basis, '')})"


def interval_why(p: Plan | None, c: Candidate) -> str:
    """Why the candidate checkpoints when it does, in one clause."""
    basis = c.checkpoint_interval_basis
    if basis == "fixed":
        capped = ", capped at the run" if c.checkpoint_interval_capped else ""
        return f"checkpoint.interval_minutes{capped}"
    if basis == "no-write":
        return "the 30-minute default: the write time is unknown (set model.parameters_b or checkpoint.size_gb)"
    daly = c.daly_interval_minutes
    if basis == "daly":
        return "Daly's wall-time optimum (checkpoint storage is not billed here)"
    if basis == "run" and not math.isfinite(daly):
        return "one checkpoint at the end: nothing interrupts the run but the end"
    more = None
    if p is not None and math.isfinite(daly) and daly > 0 and abs(daly - c.checkpoint_interval_minutes) > 1e-6:
        more = p.total_at_interval(c, daly / 60.0) - c.cost.total_usd
    lead = ("the lowest total: compute over the expected wall time plus checkpoint storage and requests"
            if basis == "cost" else "one checkpoint at the end: the lowest total over any shorter interval")
    if more is None or not math.isfinite(more):
        return lead
    if more < 0.005:
        return f"{lead}, as at Daly's wall-time optimum ({duration_text(daly)})"
    return f"{lead}; Daly's wall-time optimum, every {duration_text(daly)}, would cost ${more:,.2f} more"


def run_text(c: Candidate, p: Plan | None = None) -> str:
    """The chosen candidate's run: checkpoint interval (and why) and write time, expected interruptions, overhead."""
    parts = [f"{c.hours:,.1f} h of training"]
    if c.nodes > 1:
        parts.append(f"scaling efficiency {c.scaling_efficiency:.0%} on {c.nodes} nodes "
                     f"({c.offer.shape.fabric_gbps:g} Gbps each)")
    minutes = c.checkpoint_write_minutes
    write = ("write time unknown: set model.parameters_b or checkpoint.size_gb" if not minutes
             else f"{duration_text(minutes)} to write")
    capped = ", capped at the run" if c.checkpoint_interval_capped else ""
    why = "" if c.checkpoint_interval_basis in ("fixed", "no-write") else f"; {interval_why(p, c)}"
    parts.append(f"checkpoint every {duration_text(c.checkpoint_interval_minutes)}{capped} ({write}{why})")
    parts.append(f"{c.expected_interruptions:,.2f} expected interruptions")
    parts.append(f"+{c.overhead:.1%} run time for interruptions and checkpoints")
    return ", ".join(parts)


def closest_reasons(p: Plan, catalog: Catalog, limit: int = 3) -> list[str]:
    """Why nothing runs, most telling first: accelerators no allowed cloud offers at all, then the reasons the
    excluded candidates give, the cheapest candidate's first, each with how many candidates it excluded."""
    out = []
    offered = {(o.cloud, o.shape.accelerator) for o in catalog.offers}
    clouds = sorted({o.cloud for o in catalog.offers} | set(p.job.allow_clouds))
    for cloud in clouds:
        if (p.job.allow_clouds and cloud not in p.job.allow_clouds) or cloud in p.job.deny_clouds:
            continue  # the job rules this cloud out itself
        missing = [a for a in p.job.accelerators if (cloud, a) not in offered]
        if len(missing) == len(p.job.accelerators):
            out.append(f"no offer of {'/'.join(missing)} on {cloud} in the catalog")
    counts: dict[str, int] = {}
    for c in sorted(p.excluded, key=lambda c: c.cost.total_usd):
        reason = c.excluded or "excluded"
        counts[reason] = counts.get(reason, 0) + 1
    for reason, n in list(counts.items())[:limit]:
        out.append(f"{reason} ({n} candidate{'s' if n != 1 else ''})")
    return out


def sources_text(sources: Sequence[dict[str, Any]], width: int | None = None) -> str:
    if not sources:
        return ""
    rows = [
        [
            s.get("cloud", ""),
            s.get("service", ""),
            s.get("region", "") or "-",
            s.get("status", ""),
            s.get("detail", "") or "",
        ]
        for s in sources
    ]
    return "sources:\n" + fit_table(("cloud", "service", "region", "status", "detail"), rows, width=width)


def batch_quota_lines(result: BatchResult, names: int = 3) -> list[str]:
    """One "quota: request ..." line per quota the placed jobs need whose headroom is unknown, the jobs' needs
    summed (a batch's jobs share a region's quota)."""
    need: dict[tuple[str | None, str, str, str, str], list[Candidate]] = {}
    for a in result.assignments:
        c = a.candidate
        if c is None or c.quota.known or c.reservation is not None:
            continue
        need.setdefault((c.quota.key, c.offer.cloud, c.offer.region, c.quota.unit, c.capacity), []).append(c)
    jobs = {id(a.candidate): a.job.name for a in result.assignments if a.candidate is not None}
    out = []
    for (code, _, region, unit, _), cands in need.items():
        total = sum(c.quota.needed for c in cands)
        who = [jobs[id(c)] for c in cands]
        more = f", {len(who) - names} more" if len(who) > names else ""
        ask = (f"confirm or request {total} {unit} of headroom on {code} in {region}" if code is not None
               else request_text(cands[0]))
        out.append(f"quota: {ask} (for {', '.join(who[:names])}{more}; --quotas FILE or --live checks it)")
    return out


def batch_text(result: BatchResult, catalog: Catalog, greedy: BatchResult | None = None,
               width: int | None = None) -> str:
    """One row per job, the total and the greedy comparison, fitted to ``width`` columns (``None``: no limit)."""
    rows = []
    row_notes = [(a.reason or "unplaceable",) if a.candidate is None else notes(a.candidate)
                 for a in result.assignments]
    said = common_notes(row_notes)
    priorities = len({a.job.priority_value for a in result.assignments}) > 1
    delay = any(a.candidate is not None and a.candidate.cost.delay_usd for a in result.assignments)
    deadlines = any(a.job.deadline_hours is not None for a in result.assignments)
    for a, n in zip(result.assignments, row_notes, strict=True):
        c = a.candidate
        prio = [str(a.job.priority_value)] if priorities else []
        text = ", ".join(x for x in n if x not in said)
        deadline = ([_h(a.job.deadline_hours) if a.job.deadline_hours is not None else "-"] if deadlines else [])
        if c is None:
            rows.append([a.job.name, *prio, "-", "-", "-", "-", "-", "-", "-", "-", *(["-"] if delay else []), "-",
                         "-", *deadline, "-", text])
            continue
        o = c.offer
        rows.append([a.job.name, *prio, o.cloud, o.region, o.zone, f"{o.instance_type} x{c.nodes}", c.capacity,
                     _usd(c.usd_per_hour), _usd(c.cost.compute_usd), _usd(c.cost.egress_usd),
                     *([_usd(c.cost.delay_usd)] if delay else []), _usd(c.cost.total_usd), _h(c.ready_hours),
                     *deadline, _headroom(c), text])
    headers = ("job", *(["priority"] if priorities else []), "cloud", "region", "zone", "instance x nodes",
               "capacity", "$/h", "compute $", "egress $", *(["delay $"] if delay else []), "total $", "ready in h",
               *(["due h"] if deadlines else []), "quota need/headroom", "notes")
    right = {i for i, h in enumerate(headers) if h in _RIGHT or h in ("priority", "due h")}
    hurried = delay or deadlines
    drop = ("zone", "compute $", "egress $", "delay $", "quota need/headroom", "$/h",
            *(("due h", "ready in h") if hurried else ()))
    if not hurried:
        drop = ("zone", "compute $", "egress $", "ready in h", "quota need/headroom", "$/h")
    out = [wrap("every job: " + ", ".join(said), width, "    ")] if said else []
    out.append(fit_table(headers, rows, right=right, width=width, drop=drop))
    out += [wrap(line, width, "       ") for line in batch_quota_lines(result)]
    out.append(wrap(
        f"placed {result.placed}/{len(result.assignments)}, total ${result.total_usd:,.2f} "
        f"(solver {result.solver}: {result.status}; catalog: {catalog_text(catalog)})", width, "    "
    ))
    if greedy is not None:
        if greedy.placed == result.placed:
            out.append(wrap(
                f"one-by-one greedy in arrival order: ${greedy.total_usd:,.2f}; "
                f"joint placement saves ${greedy.total_usd - result.total_usd:,.2f}", width, "    "
            ))
        elif greedy.placed < result.placed:
            out.append(wrap(
                f"one-by-one greedy in arrival order places only {greedy.placed} "
                f"(${greedy.total_usd:,.2f}); joint placement places {result.placed}", width, "    "
            ))
        else:  # more jobs, but not the higher-priority ones
            out.append(wrap(
                f"one-by-one greedy in arrival order places {greedy.placed} (${greedy.total_usd:,.2f}) by leaving "
                f"higher-priority jobs out; joint placement places {result.placed}, higher priority first",
                width, "    "))
    moved = [a for a in result.assignments if a.moved]
    if moved:
        out.append(f"placed differently from planning each job alone ({len(moved)}):")
        for a in moved:
            alone = a.alone
            assert alone is not None
            if a.candidate is None:
                here = "unplaced (its row says why)"
            else:
                delta = a.candidate.cost.total_usd - alone.cost.total_usd
                here = (f"{_place(a.candidate)} ${a.candidate.cost.total_usd:,.2f} "
                        + ("(the same cost)" if abs(delta) < 0.005 else f"(${delta:+,.2f})".replace("$+", "+$")))
                if a.binding:
                    here += f"; first choice full: {a.binding[0].text()}"
            out.append(wrap(f"  {a.job.name}: alone {_place(alone)} ${alone.cost.total_usd:,.2f}; here {here}",
                            width, "      "))
    return "\n".join(out)


def _place(c: Candidate) -> str:
    o = c.offer
    return f"{o.cloud} {o.region} {o.zone} {o.instance_type} x{c.nodes} {c.capacity}"


def offers_text(offers: Sequence[Offer], width: int | None = None) -> str:
    """One row per offer, fitted to ``width`` columns (``None``: no limit)."""
    rows = [
        [
            o.cloud,
            o.region,
            o.zone,
            o.instance_type,
            o.shape.accelerator,
            str(o.shape.gpus),
            "-" if o.price is None else f"{o.price:,.2f}",
            "-" if o.spot_price is None else f"{o.spot_price:,.2f}",
        ]
        for o in offers
    ]
    text = fit_table(
        ("cloud", "region", "zone", "instance", "accelerator", "GPUs", "on-demand $/h", "spot $/h"),
        rows,
        right={5, 6, 7},
        width=width,
        drop=("zone", "accelerator"),
        wrap_last=False,
    )
    suspect = sum(1 for o in offers if spot_not_cheaper(o))
    if suspect:
        text += "\n" + wrap(f"({suspect} of these offers have a spot price at or above on-demand: no spare spot "
                            "capacity, or a catalog error; JSON spot_not_cheaper)", width)
    return text


def _where(o: Offer) -> dict[str, Any]:
    """Where an offer is and what one node of it holds (shared by every JSON document)."""
    return {
        "cloud": o.cloud,
        "region": o.region,
        "zone": o.zone,
        "instance_type": o.instance_type,
        "accelerator": o.shape.accelerator,
        "gpus_per_node": o.shape.gpus,
    }


def offer_doc(o: Offer) -> dict[str, Any]:
    doc = {**_where(o), "usd_per_hour": o.price, "spot_usd_per_hour": o.spot_price}
    if spot_not_cheaper(o):
        doc["spot_not_cheaper"] = True
    return doc
