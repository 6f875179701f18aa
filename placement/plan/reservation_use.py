"""Why a reservation in a job's scope is not used by its plan: read from the plan's rows, above both the
engine and the reservation loader (so neither imports the other)."""

from __future__ import annotations

from dataclasses import dataclass

from placement.model.reservations import Reservation
from placement.plan.job import Plan


@dataclass(frozen=True)
class Unused:
    """A reservation in a job's scope (its clouds, regions and zones, capacity any or reserved) that the plan
    does not use, and why: ``kind`` one of ``wrong-shape``, ``too-small``, ``ends-too-early``, ``cheaper``
    (another candidate costs less) or ``excluded`` (another reason, in ``reason``)."""

    reservation: Reservation
    kind: str
    reason: str


def _kind(reason: str) -> str:
    if "nodes, " in reason and " free" in reason:
        return "too-small"
    if " ends " in reason:
        return "ends-too-early"
    if "node" in reason or "fabric" in reason or "GPUs" in reason:
        return "wrong-shape"
    return "excluded"


def unused(plan: Plan, reservations: tuple[Reservation, ...] | list[Reservation]) -> list[Unused]:
    """Why each reservation in ``plan``'s job scope is not its chosen candidate (used ones are left out).

    Reads the plan's rows only (no candidate is built): reserved rows carry their reservation in their terms."""
    job = plan.job
    if "reserved" not in job.capacities():
        return []
    runnable = {id(r[11].reservation): r for r in plan.rows if r[11].reservation is not None}
    excluded = {id(r[11].reservation): r[17] for r in plan.excluded_rows
                if len(r) > 2 and r[11].reservation is not None}  # type: ignore[misc]
    chosen = plan.rows[0] if plan.rows else None
    out = []
    for res in reservations:
        if job.allows(res.cloud, res.region) or job.allows_zone(res.cloud, res.zone):
            continue  # outside the job's scope: not a reservation it could use
        if res.shape.accelerator not in job.accelerators:
            out.append(Unused(res, "wrong-shape", f"wrong shape: {res.instance_type} has {res.shape.accelerator}, the "
                              f"job takes {'/'.join(job.accelerators)}"))
        elif id(res) in excluded:
            reason = str(excluded[id(res)])
            kind = _kind(reason)
            for prefix in (f"reservation {res.id}: ", f"reservation {res.id} "):
                reason = reason.removeprefix(prefix)
            label = {"too-small": "too small", "ends-too-early": "ends too early", "wrong-shape": "wrong shape"}
            out.append(Unused(res, kind, f"{label[kind]}: {reason}" if kind in label else reason))
        elif id(res) in runnable and chosen is not None and runnable[id(res)] is not chosen:
            mine, best = runnable[id(res)], chosen
            out.append(Unused(res, "cheaper", f"another candidate costs less (${best[1] / 100:,.2f} against "
                              f"${mine[1] / 100:,.2f} here)"))
    return out
