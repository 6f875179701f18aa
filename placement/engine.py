"""The placement core: candidates, their cost, quota feasibility and ranking. Pure functions.

Cost model (USD), for one candidate (offer × capacity):
  nodes       = ceil(gpus / gpus_per_node)
  on-demand   compute = nodes × price × hours
  spot        compute = nodes × spot_price × hours × (1 + r × (interval_h / 2 + restart_h))
  egress      = dataset home → candidate region + outputs candidate region → home, priced by the source
  total       = compute + egress; ranked by total, then by the lower hourly price.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

from placement.catalog import Offer
from placement.egress import EgressBook, egress_book, transfer_usd
from placement.jobspec import JobSpec
from placement.quotas import QuotaTable

Capacity = Literal["spot", "on-demand"]


@dataclass(frozen=True)
class Cost:
    """USD for the whole job on one candidate."""

    compute_usd: float
    egress_usd: float
    dataset_egress_usd: float
    outputs_egress_usd: float
    spot_overhead: float  # multiplier - 1 applied to spot compute for interruptions (0 on-demand)

    @property
    def total_usd(self) -> float:
        return self.compute_usd + self.egress_usd


@dataclass(frozen=True)
class QuotaCheck:
    """Quota a candidate consumes (``needed``, in ``unit``) against ``headroom`` (None = unknown)."""

    key: str | None
    unit: str
    needed: int
    headroom: float | None

    @property
    def known(self) -> bool:
        return self.headroom is not None

    @property
    def fits(self) -> bool | None:
        return None if self.headroom is None else self.needed <= self.headroom


@dataclass(frozen=True)
class Candidate:
    """One way to run the job: an offer, a capacity kind and a node count, with cost and quota."""

    offer: Offer
    capacity: Capacity
    nodes: int
    usd_per_hour: float
    cost: Cost
    quota: QuotaCheck
    excluded: str | None = None
    interruptions_per_hour: float = 0.0
    notes: tuple[str, ...] = ()

    @property
    def feasible(self) -> bool | None:
        """True: runnable and quota known to fit. None: runnable, quota unknown. False: excluded."""
        if self.excluded:
            return False
        return self.quota.fits

    @property
    def quota_group(self) -> tuple[str, str, str] | None:
        """The (cloud, region, key) whose headroom this candidate draws on, when known."""
        if self.quota.key is None or self.quota.headroom is None:
            return None
        return (self.offer.cloud, self.offer.region, self.quota.key)


# A candidate before it becomes a Candidate object: ranking 50,000 offers only materialises the rows shown.
# (unknown, total, hourly, cloud, region, zone, tiebreak, offer, capacity, nodes, rate, overhead, compute,
#  dataset_egress, outputs_egress, quota key, unit, needed, headroom, excluded reason)
Row = tuple[int, float, float, str, str, str, str, Offer, str, int, float, float, float, float, float,
            "str | None", str, int, "float | None", "str | None"]


@dataclass(frozen=True)
class Plan:
    """The ranked result for one job: runnable candidates (known-feasible cheapest first, then quota-unknown)
    and the excluded ones. Candidates are built on first access."""

    job: JobSpec
    rows: tuple[Row, ...]
    excluded_rows: tuple[Row, ...] = ()

    @functools.cached_property
    def ranked(self) -> tuple[Candidate, ...]:
        return tuple(_candidate(self.job, r) for r in self.rows)

    @functools.cached_property
    def excluded(self) -> tuple[Candidate, ...]:
        return tuple(_candidate(self.job, r) for r in sorted(self.excluded_rows, key=_row_key))

    def head(self, n: int) -> tuple[Candidate, ...]:
        """The first ``n`` runnable candidates, without building the rest."""
        if "ranked" in self.__dict__:
            return self.ranked[:n]
        return tuple(_candidate(self.job, r) for r in self.rows[:n])

    @property
    def chosen(self) -> Candidate | None:
        return self.head(1)[0] if self.rows else None


def _row_key(r: Row) -> tuple[int, float, float, str, str, str, str]:
    return r[:7]  # type: ignore[return-value]


def spot_overhead(job: JobSpec, rate: float) -> float:
    """Fraction of extra run time lost to interruptions: r × (interval_h / 2 + restart_h)."""
    return rate * (job.checkpoint_interval_minutes / 60.0 / 2.0 + job.restart_minutes / 60.0)


def egress_cost(job: JobSpec, cloud: str, region: str, book: EgressBook) -> tuple[float, float]:
    """(dataset in, outputs back) USD for running ``job`` in ``cloud``/``region``."""
    ds = job.dataset
    if ds is None:
        return 0.0, 0.0
    inbound = transfer_usd(book, ds.cloud, ds.region, cloud, region, ds.size_gb)
    outbound = transfer_usd(book, cloud, region, ds.cloud, ds.region, job.outputs_gb)
    return inbound, outbound


def _rows(job: JobSpec, offers: Iterable[Offer], quotas: QuotaTable | None,
          book: EgressBook | None) -> Iterator[Row]:
    book = book or egress_book()
    table = (quotas or QuotaTable()).quotas
    accels = set(job.accelerators)
    capacities = job.capacities()
    egress_memo: dict[tuple[str, str], tuple[float, float]] = {}
    allowed_memo: dict[tuple[str, str], str | None] = {}
    overhead_default = spot_overhead(job, job.interruptions_per_hour)
    cap = job.max_usd_per_hour
    for offer in offers:
        shape = offer.shape
        if shape.accelerator not in accels:
            continue
        nodes = -(-job.gpus // shape.gpus)
        cloud, region = offer.cloud, offer.region
        region_key = (cloud, region)
        eg = egress_memo.get(region_key)
        if eg is None:
            eg = egress_memo[region_key] = egress_cost(job, cloud, region, book)
            allowed_memo[region_key] = job.allows(cloud, region)
        not_allowed = allowed_memo[region_key]
        for capacity in capacities:
            if capacity == "spot":
                price = offer.spot_price
                key = shape.quota.spot
                if offer.interruptions_per_hour is None or offer.interruptions_per_hour <= job.interruptions_per_hour:
                    rate, overhead = job.interruptions_per_hour, overhead_default
                else:
                    rate = offer.interruptions_per_hour
                    overhead = spot_overhead(job, rate)
            else:
                price = offer.price
                key = shape.quota.on_demand
                rate = overhead = 0.0
            quota = table.get((cloud, region, key)) if key is not None else None
            needed = nodes * (shape.vcpus if shape.quota.unit == "vcpu" else shape.gpus)
            headroom = None if quota is None else quota.headroom
            hourly = nodes * price if price is not None else math.inf
            compute = hourly * job.hours * (1.0 + overhead)
            total = compute + eg[0] + eg[1]
            reason: str | None = None
            if not_allowed:
                reason = not_allowed
            elif price is None:
                reason = f"not offered as {capacity} here"
            elif nodes > 1 and shape.fabric == "none":
                reason = f"{nodes} nodes need a multi-node GPU fabric; {shape.name} has none"
            elif cap is not None and hourly > cap:
                reason = f"${hourly:,.2f}/h is over max_usd_per_hour ${cap:,.2f}"
            elif headroom is not None and needed > headroom:
                reason = f"quota {key}: needs {needed} {shape.quota.unit}, headroom {headroom:g}"
            yield (0 if headroom is not None else 1, round(total, 6), round(hourly, 6) if price is not None else hourly,
                   cloud, region, offer.zone, shape.name + capacity, offer, capacity, nodes, rate, overhead, compute,
                   eg[0], eg[1], key, shape.quota.unit, needed, headroom, reason)


def _candidate(job: JobSpec, r: Row) -> Candidate:
    (_, _, hourly, _, _, _, _, offer, capacity, nodes, rate, overhead, compute, eg_in, eg_out, key, unit, needed,
     headroom, reason) = r
    qc = QuotaCheck(key=key, unit=unit, needed=needed, headroom=headroom)
    cost = Cost(compute_usd=compute, egress_usd=eg_in + eg_out, dataset_egress_usd=eg_in,
                outputs_egress_usd=eg_out, spot_overhead=overhead)
    return Candidate(offer=offer, capacity=capacity, nodes=nodes, usd_per_hour=hourly,  # type: ignore[arg-type]
                     cost=cost, quota=qc, excluded=reason, interruptions_per_hour=rate,
                     notes=_notes(job, offer, capacity, cost, qc))


def candidates(job: JobSpec, offers: Iterable[Offer], quotas: QuotaTable | None = None,
               book: EgressBook | None = None) -> list[Candidate]:
    """Every candidate for ``job`` among ``offers`` (those of an accepted accelerator), excluded ones included."""
    return [_candidate(job, r) for r in _rows(job, offers, quotas, book)]


def plan(job: JobSpec, offers: Iterable[Offer], quotas: QuotaTable | None = None,
         book: EgressBook | None = None) -> Plan:
    """Rank every candidate: known-feasible by total cost, then quota-unknown ones; excluded ones apart."""
    runnable: list[Row] = []
    excluded: list[Row] = []
    for r in _rows(job, offers, quotas, book):
        (excluded if r[19] else runnable).append(r)
    runnable.sort(key=_row_key)
    return Plan(job=job, rows=tuple(runnable), excluded_rows=tuple(excluded))


def _notes(job: JobSpec, offer: Offer, capacity: str, cost: Cost, qc: QuotaCheck) -> tuple[str, ...]:
    notes = []
    if not qc.known:
        notes.append("quota unknown")
    if capacity == "spot" and cost.spot_overhead:
        notes.append(f"spot +{cost.spot_overhead:.1%} for interruptions")
    if offer.placement_score is not None:
        notes.append(f"placement score {offer.placement_score}")
    if job.dataset is not None and job.dataset.cloud != offer.cloud:
        notes.append("cross-cloud egress")
    elif job.dataset is not None and job.dataset.region != offer.region:
        notes.append("inter-region egress")
    if offer.price_source != "catalog":
        notes.append(f"price: {offer.price_source}")
    return tuple(notes)


def why_chosen(p: Plan) -> str:
    """One or two sentences on why the first row won."""
    best = p.chosen
    if best is None:
        return "nothing feasible: every candidate was excluded (see --all-candidates for the reasons)"
    o = best.offer
    head = (f"{o.cloud} {o.zone} {o.instance_type} x{best.nodes} {best.capacity}: "
            f"lowest total ${best.cost.total_usd:,.2f}")
    if best.feasible is None:
        head += (f"; quota unknown here (no quota data for {best.quota.key or 'this shape'}), "
                 "verify before submitting")
    runner = next((c for c in p.head(50)[1:] if (c.offer.cloud, c.offer.region, c.offer.instance_type, c.capacity)
                   != (o.cloud, o.region, o.instance_type, best.capacity)), None)
    if runner is None:
        return head + "; the only runnable candidate."
    r = runner.offer
    delta = runner.cost.total_usd - best.cost.total_usd
    parts = [f"${delta:,.2f} less than next best {r.cloud} {r.region} {r.instance_type} {runner.capacity}"]
    d_compute = runner.cost.compute_usd - best.cost.compute_usd
    d_egress = runner.cost.egress_usd - best.cost.egress_usd
    if d_egress > 0 and d_compute < 0:
        parts.append(f"its compute is ${-d_compute:,.2f} cheaper but moving the data costs ${d_egress:,.2f} more")
    elif d_egress < 0 < d_compute:
        parts.append(f"egress costs ${-d_egress:,.2f} more here, outweighed by ${d_compute:,.2f} cheaper compute")
    if best.feasible and runner.feasible is None:
        parts.append("and this one's quota is known to fit")
    return head + " (" + "; ".join(parts) + ")."
