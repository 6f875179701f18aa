"""The placement core: candidates, their cost, quota feasibility and ranking. Pure functions.

Cost model (USD), for one candidate (offer × capacity):
  nodes       = ceil(gpus / gpus_per_node)
  on-demand   compute = nodes × price × hours
  spot        compute = nodes × spot_price × hours × (1 + r × (interval_h / 2 + restart_h))
  egress      = dataset home → candidate region + outputs candidate region → home, priced by the source
  total       = compute + egress; ranked by total, then by the lower hourly price.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
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

    def rank_key(self) -> tuple[int, float, float, str, str, str, str]:
        o = self.offer
        unknown = 0 if self.feasible else 1
        return (unknown, round(self.cost.total_usd, 6), round(self.usd_per_hour, 6), o.cloud, o.region, o.zone,
                o.instance_type + self.capacity)


@dataclass(frozen=True)
class Plan:
    """The ranked result for one job: runnable candidates first (cheapest first), then excluded ones."""

    job: JobSpec
    ranked: tuple[Candidate, ...]
    excluded: tuple[Candidate, ...] = field(default_factory=tuple)

    @property
    def chosen(self) -> Candidate | None:
        return self.ranked[0] if self.ranked else None


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


def candidates(job: JobSpec, offers: Iterable[Offer], quotas: QuotaTable | None = None,
               book: EgressBook | None = None) -> list[Candidate]:
    """Every candidate for ``job`` among ``offers`` (those of an accepted accelerator), excluded ones included."""
    book = book or egress_book()
    quotas = quotas or QuotaTable()
    accels = set(job.accelerators)
    capacities = job.capacities()
    egress_memo: dict[tuple[str, str], tuple[float, float]] = {}
    out: list[Candidate] = []
    for offer in offers:
        shape = offer.shape
        if shape.accelerator not in accels:
            continue
        nodes = math.ceil(job.gpus / shape.gpus)
        region_key = (offer.cloud, offer.region)
        eg = egress_memo.get(region_key)
        if eg is None:
            eg = egress_memo[region_key] = egress_cost(job, offer.cloud, offer.region, book)
        not_allowed = job.allows(offer.cloud, offer.region)
        for capacity in capacities:
            price = offer.spot_price if capacity == "spot" else offer.price
            key = shape.quota.key(capacity)
            quota = quotas.get(offer.cloud, offer.region, key)
            needed = nodes * shape.quota_per_node()
            qc = QuotaCheck(key=key, unit=shape.quota.unit, needed=needed,
                            headroom=None if quota is None else quota.headroom)
            rate = 0.0
            overhead = 0.0
            if capacity == "spot":
                rate = job.interruptions_per_hour if offer.interruptions_per_hour is None else max(
                    job.interruptions_per_hour, offer.interruptions_per_hour)
                overhead = spot_overhead(job, rate)
            hourly = nodes * price if price is not None else math.inf
            compute = hourly * job.hours * (1.0 + overhead)
            cost = Cost(compute_usd=compute, egress_usd=eg[0] + eg[1], dataset_egress_usd=eg[0],
                        outputs_egress_usd=eg[1], spot_overhead=overhead)
            reason = _exclusion(job, offer, capacity, nodes, price, hourly, qc, not_allowed)
            notes = _notes(job, offer, capacity, cost, qc)
            out.append(Candidate(offer=offer, capacity=capacity, nodes=nodes, usd_per_hour=hourly, cost=cost,
                                 quota=qc, excluded=reason, interruptions_per_hour=rate, notes=notes))
    return out


def _exclusion(job: JobSpec, offer: Offer, capacity: str, nodes: int, price: float | None, hourly: float,
               qc: QuotaCheck, not_allowed: str | None) -> str | None:
    if not_allowed:
        return not_allowed
    if price is None:
        return f"not offered as {capacity} here"
    if nodes > 1 and not offer.shape.multi_node:
        return f"{nodes} nodes need a multi-node GPU fabric; {offer.instance_type} has none"
    if job.max_usd_per_hour is not None and hourly > job.max_usd_per_hour:
        return f"${hourly:,.2f}/h is over max_usd_per_hour ${job.max_usd_per_hour:,.2f}"
    if qc.fits is False:
        return f"quota {qc.key}: needs {qc.needed} {qc.unit}, headroom {qc.headroom:g}"
    return None


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


def plan(job: JobSpec, offers: Iterable[Offer], quotas: QuotaTable | None = None,
         book: EgressBook | None = None) -> Plan:
    """Rank every candidate: known-feasible by total cost, then quota-unknown ones; excluded ones apart."""
    cands = candidates(job, offers, quotas, book)
    runnable = sorted((c for c in cands if not c.excluded), key=Candidate.rank_key)
    excluded = sorted((c for c in cands if c.excluded), key=Candidate.rank_key)
    return Plan(job=job, ranked=tuple(runnable), excluded=tuple(excluded))


def why_chosen(p: Plan) -> str:
    """One or two sentences on why the first row won."""
    best = p.chosen
    if best is None:
        return "nothing feasible: every candidate was excluded (see --all-candidates for the reasons)"
    o = best.offer
    head = (f"{o.cloud} {o.zone} {o.instance_type} x{best.nodes} {best.capacity}: "
            f"lowest total ${best.cost.total_usd:,.2f}")
    if best.feasible is None:
        head += "; quota unknown here (no quota data for " + (best.quota.key or "this shape") + "), verify before submitting"
    runner = next((c for c in p.ranked[1:] if (c.offer.cloud, c.offer.region, c.offer.instance_type, c.capacity)
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
