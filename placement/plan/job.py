"""The placement core: candidates, their cost, quota feasibility and ranking. Pure functions.

Cost model (USD; hours; GB), for one candidate (offer × capacity, or a reservation); the physics (speed per
workload, memory fit, scaling efficiency, Daly's interruption model) is :mod:`placement.model.physics`, every
formula and constant in docs/cost-model.md:
  nodes        as few as possible: a job of >= the largest node of its accelerator on that cloud runs on
               full-size nodes only; a smaller job on one node that holds all its GPUs (job gpus_per_node
               overrides); billed GPUs = nodes × GPUs per node. Several nodes without a GPU fabric run on
               the plain network (low efficiency) unless the job sets require_fabric
  run hours    hours × speed[first listed] / speed[this one] × e_ref / e: speeds of the job's workload
               class, e the candidate's scaling efficiency, e_ref the first accelerator's on 3200 Gbps
  rate         R = nodes × (r_spot + GPUs per node × f): spot reclaims (r per node: the job's, or a higher
               one from a live placement score; 0 unless spot) and hardware faults f (every capacity)
  overhead     Daly's exact expected time with checkpoint writes C = size / write throughput, at the job's
               interval or (auto) the one that minimises the candidate's total: compute over the expected wall
               time plus checkpoint storage and requests (issue 36; Daly's wall-time optimum when checkpoints
               are not billed); a spot restart includes a replacement node
  compute      nodes × price × run hours × (1 + overhead)
  egress       dataset home → candidate region + outputs back, priced by the source
  nat, ckpt    NAT processing, checkpoint storage and PUTs (placement/model/bill.py)
  transfer     (dataset + outputs GB) × 8 / Gbps of the path (same region / inter-region / cross-cloud) / 3600
  ready        transfer hours + run hours × (1 + overhead)
  delay        ready hours × the job's usd_per_hour_of_delay
  total        compute + egress + NAT + checkpoint storage + checkpoint requests + delay
Ranked: quota known to fit first, then quota unknown; by total (to the cent), then fewer nodes, then the
lower hourly price, then cloud, region, zone, instance type, capacity (reserved, on-demand, spot).

Why one module: the cost model above, the per-job memo that prices it (:class:`_Context`) and the ranking loop that
reads the memo's fields (:func:`_scan`) are one unit: each formula lives in one place and a 50,000-offer plan's hot
loop reads it without calls across modules; batch, schedule, decides and dispatch use the same rows and memo
(``_candidate``, ``_never``), and the text helpers at the end describe a plan in the engine's own terms.
"""

from __future__ import annotations

import bisect
import datetime as dt
import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from placement.model.bill import bill_book, checkpoint_usd, checkpoints_written, nat_usd, put_usd_per_checkpoint
from placement.model.catalog import Offer
from placement.model.egress import EgressBook, egress_book, transfer_hours, transfer_path, transfer_usd
from placement.model.jobspec import JobSpec
from placement.model.physics import (
    Gang,
    checkpoint_gb,
    cost_optimal_interval,
    efficiency,
    gang,
    impractical_reason,
    memory_reason,
    wall_ratio,
    write_gbps,
)
from placement.model.physics_data import physics_book
from placement.model.quotas import QuotaTable
from placement.model.shapes import Shape, node_plan

if TYPE_CHECKING:
    from placement.model.reservations import Reservation

Capacity = Literal["spot", "on-demand", "reserved"]
CAPACITY_ORDER = {"reserved": 0, "on-demand": 1, "spot": 2}  # the last tie-break: the surer capacity first
TIE_USD = 0.005  # totals closer than half a cent are a tie (they print the same)
UNCERTAIN_LOOK = 50  # "why" names the first of the top ranks the model cannot tell from the chosen one


@dataclass(frozen=True)
class Cost:
    """USD for the whole job on one candidate. ``delay_usd`` is the value of the time until results are
    ready (ready hours × the job's usd_per_hour_of_delay), 0 unless the job sets a rate."""

    compute_usd: float
    egress_usd: float
    dataset_egress_usd: float
    outputs_egress_usd: float
    spot_overhead: float  # expected extra run time (fraction): interruptions and checkpoint writes, any capacity
    delay_usd: float = 0.0
    nat_usd: float = 0.0  # NAT gateway processing of the data moved (placement/model/bill.py)
    checkpoint_storage_usd: float = 0.0  # the checkpoint bucket: kept and noncurrent versions over the run
    checkpoint_requests_usd: float = 0.0  # PUTs writing the checkpoints

    @property
    def extra_usd(self) -> float:
        """The bill's other lines: NAT processing, checkpoint storage and requests."""
        return self.nat_usd + self.checkpoint_storage_usd + self.checkpoint_requests_usd

    @property
    def total_usd(self) -> float:
        return self.compute_usd + self.egress_usd + self.extra_usd + self.delay_usd


@dataclass(frozen=True)
class QuotaCheck:
    """Quota a candidate consumes (``needed``, in ``unit``) against ``headroom`` (None = unknown).

    A reserved candidate's quota is its reservation: key ``reservation:<id>``, unit ``node``, headroom
    the reservation's free nodes."""

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
    """One way to run the job: an offer, a capacity kind and a node count, with cost, time and quota.

    Hours: ``hours`` the run time on this accelerator and fabric without interruptions, ``transfer_hours``
    moving the data, ``ready_hours`` until the results are home. ``interruptions_per_hour`` is the job-level
    spot rate used (nodes × the per-node rate; 0 unless spot). ``scaling_efficiency`` is per-GPU throughput
    against one node (0 < e <= 1); ``expected_interruptions`` the expected stops over the whole run (spot
    reclaims and hardware faults); checkpoints every ``checkpoint_interval_minutes``, each written in
    ``checkpoint_write_minutes``."""

    offer: Offer
    capacity: Capacity
    nodes: int
    usd_per_hour: float
    cost: Cost
    quota: QuotaCheck
    excluded: str | None = None
    interruptions_per_hour: float = 0.0
    notes: tuple[str, ...] = ()
    hours: float = 0.0
    transfer_hours: float = 0.0
    ready_hours: float = 0.0
    idle_gpus: int = 0
    reservation: Reservation | None = None
    scaling_efficiency: float = 1.0
    checkpoint_interval_minutes: float = 0.0
    checkpoint_write_minutes: float = 0.0
    expected_interruptions: float = 0.0
    checkpoint_interval_capped: bool = False  # the job's fixed interval is longer than the run: capped at it
    # Calibration (issue 26): where the spot rate came from (job | calibration | live | default; None off spot),
    # its 90th percentile (job level, like interruptions_per_hour), and which figures were measured (speed, scaling).
    interruption_source: str | None = None
    interruptions_per_hour_p90: float = 0.0
    measured: tuple[str, ...] = ()
    # Why the checkpoint interval (issue 36): physics.Gang.basis (fixed, daly, cost, run, no-write), and the
    # wall-time optimum it is compared with (0 when the job fixes the interval).
    checkpoint_interval_basis: str = "daly"
    daly_interval_minutes: float = 0.0
    # What the checkpoint lines were priced on (issue 36), so each can be reproduced from the candidate alone:
    # one checkpoint's GB (0: unknown, not billed), how many the run writes, how many stay current, and the days
    # a replaced one stays billed on this cloud.
    checkpoint_gb: float = 0.0
    checkpoints_written: float = 0.0
    checkpoint_keep: int = 3
    checkpoint_retention_days: float = 0.0

    @property
    def overhead(self) -> float:
        """Expected extra run time as a fraction: interruptions (restart and lost work) and checkpoint writes."""
        return self.cost.spot_overhead

    @property
    def gpus_per_node(self) -> int:
        return self.offer.shape.gpus

    @property
    def billed_gpus(self) -> int:
        """GPUs paid for: whole nodes, so more than the job asked for when it does not fill the last one."""
        return self.nodes * self.offer.shape.gpus

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


class Terms:
    """What every offer of one (cloud, region, shape, capacity) shares for one job - or one reservation.

    ``reason`` excludes all of them at once (region not allowed, wrong node shape, no fabric, quota too
    small, past the deadline); ``None`` lets each offer be priced."""

    __slots__ = ("capacity", "order", "nodes", "idle", "run_h", "rate", "overhead", "transfer_h", "ready_h",
                 "eg_in", "eg_out", "eg", "key", "unit", "needed", "headroom", "unknown", "reason", "reservation",
                 "delay_rate", "mult", "delay", "eff", "gang", "write_h", "late", "nat", "ck_store", "ck_req",
                 "cost_opt", "cloud", "region")

    capacity: str
    order: int
    nodes: int
    idle: int
    run_h: float
    rate: float
    overhead: float
    transfer_h: float
    ready_h: float
    eg_in: float
    eg_out: float
    eg: float
    key: str | None
    unit: str
    needed: int
    headroom: float | None
    unknown: int
    reason: str | None
    reservation: Reservation | None
    delay_rate: float
    mult: float
    delay: float  # USD: ready_h × delay_rate
    eff: float  # scaling efficiency
    gang: Gang  # interruptions at the job's spot rate
    write_h: float  # checkpoint write hours
    late: bool  # the group's only reason is the deadline
    nat: float  # USD: NAT processing (placement/model/bill.py); eg includes it
    ck_store: float  # USD: checkpoint storage; eg includes it
    ck_req: float  # USD: checkpoint PUTs; eg includes it
    cost_opt: bool  # the interval is auto and checkpoints are billed: it depends on each offer's price (issue 36)
    cloud: str
    region: str

    def copy(self) -> Terms:
        """A copy to reprice for one offer (its spot rate, or its price under the cost-optimal interval)."""
        out = Terms()
        for name in Terms.__slots__:
            setattr(out, name, getattr(self, name))
        return out


# A runnable candidate before it becomes a Candidate object: ranking 50,000 offers only materialises the rows
# shown. The first ten fields are the sort key (``seq`` keeps equal keys in input order; ``cents`` is the
# total in whole cents, so totals that print the same tie):
# (unknown, cents, nodes, hourly, cloud, region, zone, instance type, capacity order, seq,
#  offer, terms, rate, overhead, compute, ready hours, delay, excluded reason, gang)
Row = tuple[int, float, int, float, str, str, str, str, int, int, Offer, Terms, float, float, float, float, float,
            "str | None", Gang]
# An excluded candidate whose whole group was excluded: (offer, terms); its cost is worked out when shown.
Deferred = tuple[Offer, Terms]
_MISSING: dict[str, tuple[Terms, ...] | None] = {}  # sentinel: a shape not looked at yet


def _cents(usd: float) -> float:
    """USD to whole cents (an int-valued key; inf stays inf for what has no price)."""
    x = usd * 100.0 + 0.5
    return float(int(x)) if x < 1e300 else math.inf  # NaN and overflow are "no price", never a crash


def nodes_for(job: JobSpec, shape: Shape) -> tuple[int, str | None]:
    """(nodes, why this shape cannot run the job or None): see :func:`placement.model.shapes.node_plan`.

    The shape rule's hint "(gpus_per_node: N allows it)" is only kept where it is true: N GPUs per node of a
    shape without a GPU fabric do not run a multi-node job that sets ``require_fabric``."""
    nodes, reason = node_plan(job.gpus, shape, job.gpus_per_node)
    if reason is not None and reason.endswith("allows it)") and -(-job.gpus // shape.gpus) > 1 \
            and shape.fabric == "none" and (job.require_fabric or shape.fabric_gbps <= 0):
        why = "the job sets require_fabric" if job.require_fabric else "its network bandwidth is unknown"
        reason = reason[:reason.rindex(" (gpus_per_node")] + f"; several {shape.name} have no GPU fabric and {why}"
    return nodes, reason


def spot_overhead(job: JobSpec, rate: float, nodes: int = 1, gpus_per_node: int = 8, run_h: float = 1.0,
                  write_h: float = 0.0) -> float:
    """Expected extra run time (fraction) of a spot gang of ``nodes`` at job-level spot rate ``rate``:
    Daly's exact model with hardware faults, checkpoint writes of ``write_h`` hours and a replacement wait
    (see :func:`placement.model.physics.gang`)."""
    return _gang(job, nodes, gpus_per_node, rate / max(nodes, 1), run_h, write_h).overhead


def _gang(job: JobSpec, nodes: int, gpus_per_node: int, spot_rate: float, run_h: float, write_h: float,
          auto_h: float | None = None, daly_h: float | None = None) -> Gang:
    """The gang's interruption terms: ``spot_rate`` per node (0 unless spot), the job's restart and interval (or,
    under auto, ``auto_h`` when given: the cost-optimal one)."""
    book = physics_book()
    faults = book.faults_per_gpu_hour if job.faults_per_gpu_hour is None else job.faults_per_gpu_hour
    repl = book.spot_replacement_minutes if job.spot_replacement_minutes is None else job.spot_replacement_minutes
    interval = None if job.checkpoint_interval_minutes is None else job.checkpoint_interval_minutes / 60.0
    return gang(run_h, nodes, gpus_per_node, spot_rate=spot_rate, faults_per_gpu_hour=faults,
                restart_h=job.restart_minutes / 60.0, replacement_h=repl / 60.0, write_h=write_h, interval_h=interval,
                auto_interval_h=auto_h, daly_interval_h=daly_h)


def checkpoint_write_hours(job: JobSpec, nodes: int) -> float:
    """Hours to write one checkpoint: size (the job's, else from model.parameters_b, else unknown: 0) over
    the write throughput (the job's, else its destination's for ``nodes`` nodes)."""
    book = physics_book()
    size = job.checkpoint_size_gb
    if size is None and job.parameters_b is not None:
        size = checkpoint_gb(job.parameters_b, job.training, book)
    if not size:
        return 0.0
    gbps = job.checkpoint_write_gbps
    if gbps is None:
        gbps = write_gbps(job.checkpoint_destination, nodes, book, job.filesystem_capacity_gb,
                          job.filesystem_mbps_per_tib)
    return size * 8.0 / gbps / 3600.0


def egress_cost(job: JobSpec, cloud: str, region: str, book: EgressBook,
                allowance_gb: float = 0.0) -> tuple[float, float]:
    """(dataset in, outputs back) USD for running ``job`` in ``cloud``/``region``."""
    ds = job.dataset
    if ds is None:
        return 0.0, 0.0
    inbound = transfer_usd(book, ds.cloud, ds.region, cloud, region, ds.size_gb, allowance_gb=allowance_gb)
    outbound = transfer_usd(book, cloud, region, ds.cloud, ds.region, job.outputs_gb, allowance_gb=allowance_gb)
    return inbound, outbound


def data_hours(job: JobSpec, cloud: str, region: str, book: EgressBook) -> float:
    """Hours to move the dataset to ``cloud``/``region`` and the outputs back, at the path's throughput."""
    ds = job.dataset
    if ds is None:
        return 0.0
    path = transfer_path(ds.cloud, ds.region, cloud, region)
    return transfer_hours(ds.size_gb + job.outputs_gb, job.gbps(path, book.throughput_gbps[path]))


class _Context:
    """Per-job memo of everything that depends on the region, the shape or the zone, not on the offer."""

    def __init__(self, job: JobSpec, quotas: QuotaTable | None, book: EgressBook | None,
                 allowance_gb: float, now: dt.datetime | None) -> None:
        self.job = job
        self.headrooms = (quotas or QuotaTable()).headrooms
        self.book = book or egress_book()
        self.allowance_gb = allowance_gb
        self.now = now
        self.accels = set(job.accelerators)
        caps = job.capacities()
        self.offer_caps = tuple(c for c in ("on-demand", "spot") if c in caps)
        self.reserved = "reserved" in caps
        self.regions: dict[tuple[str, str], tuple[float, float, float, str | None]] = {}
        self.shapes: dict[int, tuple[int, int, float, str | None, float, float, Gang, Gang] | None] = {}
        self.zones: dict[tuple[str, str], str | None] = {}
        self.gangs: dict[tuple[int, int, float, float, float], Gang] = {}
        self.cost_gangs: dict[tuple[str, int, int, float, float, float, float], Gang] = {}
        self.derived: dict[tuple[int, float | None, float], Terms] = {}
        # The excluded spot rows of the scan that are not excluded for good by their region or node shape (in scan
        # order): the only excluded rows the break-even search can use (placement.plan.decides.break_even).
        self.open_spot: list[Row | Deferred] = []
        self.phys = physics_book()
        first = job.accelerators[0]
        self.ref_speed = job.speed_of(first)
        self.coef = self.phys.coefficients(job.workload, job.training)
        self.bill = bill_book()
        size = job.checkpoint_size_gb
        if size is None and job.parameters_b is not None:
            size = checkpoint_gb(job.parameters_b, job.training, self.phys)
        self.ck_gb = size or 0.0  # one checkpoint's GB (0: unknown, its storage not billed)
        ref_gpn = self.phys.reference_gpus_per_node
        self.ref_eff = efficiency(-(-job.gpus // ref_gpn), self.phys.reference_gbps, ref_gpn, self.ref_speed,
                                  self.coef, self.phys.reference_gbps, ref_gpn)

    def gang(self, nodes: int, gpus_per_node: int, spot_rate: float, run_h: float, write_h: float) -> Gang:
        """:func:`_gang`, memoised: one computation per (nodes, node size, rate, run, write) of a plan."""
        key = (nodes, gpus_per_node, spot_rate, run_h, write_h)
        g = self.gangs.get(key)
        if g is None:
            g = self.gangs[key] = _gang(self.job, nodes, gpus_per_node, spot_rate, run_h, write_h)
        return g

    def cost_gang(self, cloud: str, nodes: int, gpus_per_node: int, spot_rate: float, run_h: float, write_h: float,
                  hourly: float) -> Gang:
        """The gang at the interval that minimises the job's total on a candidate costing ``hourly`` USD per hour
        of wall time (issue 36): compute (and the value of delay) over Daly's expected wall time plus the
        checkpoints' storage (``keep`` current ones over the wall time, each replaced one for the retention) and
        PUTs. :func:`placement.model.physics.cost_optimal_interval` solves the continuous problem; the exact bill (whole
        checkpoints, the first ``keep`` kept current) is then priced at it, at Daly's optimum and at the intervals
        that write a whole number of checkpoints next to it, and the cheapest wins. Memoised per plan."""
        key = (cloud, nodes, gpus_per_node, spot_rate, run_h, write_h, hourly)
        g = self.cost_gangs.get(key)
        if g is None:
            g = self.cost_gangs[key] = self._cost_gang(cloud, nodes, gpus_per_node, spot_rate, run_h, write_h, hourly)
        return g

    def _cost_gang(self, cloud: str, nodes: int, gpus_per_node: int, spot_rate: float, run_h: float, write_h: float,
                   hourly: float) -> Gang:
        base = self.gang(nodes, gpus_per_node, spot_rate, run_h, write_h)
        job, book, size = self.job, self.bill, self.ck_gb
        if (job.checkpoint_interval_minutes is not None or not size or cloud not in book.clouds or write_h <= 0
                or not 0 < hourly < math.inf or not base.rate > 0 or not 0 < run_h < math.inf
                or not math.isfinite(base.overhead)):
            return base
        keep = book.keep if job.checkpoint_keep is None else job.checkpoint_keep
        days = book.retention_days(cloud) if job.checkpoint_retention_days is None else job.checkpoint_retention_days
        per_day = size * book.clouds[cloud].storage_usd_per_gb_month / book.days_per_month
        delay = job.usd_per_hour_of_delay
        a = hourly + delay + per_day * keep / 24.0
        b = per_day * days + put_usd_per_checkpoint(book, cloud, size)  # USD per checkpoint written
        tau = cost_optimal_interval(base.rate, write_h, base.restart_h, a, b)
        tries = {min(tau, run_h) if math.isfinite(tau) else run_h}
        n = run_h / tau if math.isfinite(tau) and tau > 0 else 1.0
        whole = {max(math.floor(n), 1), max(math.ceil(n), 1), *range(1, min(keep, 8) + 2)}
        # An interval writing m checkpoints: run/(m - 1/2), the middle of the range that writes m (1/τ between
        # (m-1)/run and m/run), so the count does not change when the interval is read back rounded.
        tries |= {min(run_h / (m - 0.5), run_h) for m in whole if m <= max(n, 1.0) + 1}
        rate, restart = base.rate, base.restart_h
        put = put_usd_per_checkpoint(book, cloud, size)

        def total(t: float) -> float:
            # placement.model.bill.checkpoint_usd's lines, inline (the same arithmetic, its constants worked out once)
            wall = run_h * wall_ratio(rate, t, write_h, restart)
            written = checkpoints_written(run_h, t)
            store = per_day * (min(float(keep), written) * wall / 24.0 + max(written - keep, 0.0) * days)
            return (hourly + delay) * wall + store + written * put

        best_t, best_usd = None, total(base.interval_h)
        for t in sorted(tries):
            usd = total(t)
            if math.isfinite(usd) and usd < best_usd * (1.0 - 1e-9):
                best_t, best_usd = t, usd
        if best_t is None:
            return base
        return _gang(job, nodes, gpus_per_node, spot_rate, run_h, write_h, auto_h=best_t,
                     daly_h=base.daly_interval_h)

    def offer_terms(self, t: Terms, cloud: str, per_node: float | None, hourly: float, gpus_per_node: int) -> Terms:
        """``t`` repriced for one offer: at its own spot rate ``per_node`` (a live or calibrated one), and, when the
        interval depends on the price (``t.cost_opt``), at the cost-optimal interval for ``hourly``. ``t`` itself
        when neither changes it."""
        key = (id(t), per_node, hourly if t.cost_opt else 0.0)
        d = self.derived.get(key)
        if d is not None:
            return d
        rate = per_node if per_node is not None else (self.job.interruptions_per_hour if t.order == 2 else 0.0)
        g = self.gang(t.nodes, gpus_per_node, rate, t.run_h, t.write_h)
        if t.cost_opt:
            cheap = self.cost_gang(cloud, t.nodes, gpus_per_node, rate, t.run_h, t.write_h, hourly)
            # The cheapest interval stretches the wall time: where that misses the deadline Daly's (the shortest
            # wall time) may still meet it, and a candidate that can meet it is not excluded for its interval.
            if (cheap is not g and self.job.deadline_hours is not None
                    and deadline_reason(self.job, t.transfer_h + t.run_h * (1.0 + cheap.overhead)) is not None):
                cheap = g
            g = cheap
        if g is t.gang:
            d = t
        else:
            d = t.copy()
            d.gang, d.overhead = g, g.overhead
            if per_node is not None:
                d.rate = t.nodes * per_node
            d.mult = t.run_h * (1.0 + g.overhead)
            d.ready_h = t.transfer_h + d.mult
            d.delay = d.ready_h * t.delay_rate if t.delay_rate else 0.0
            d.nat, d.ck_store, d.ck_req = self.extras(cloud, t.region, t.run_h, g, d.mult)
            d.eg = t.eg_in + t.eg_out + d.nat + d.ck_store + d.ck_req
            if t.reason is None:
                d.reason = _never(g, t.run_h) or self.time_reason(d.ready_h, t.reservation)
                d.late = d.reason is not None and d.reason.startswith("ready in ")
        self.derived[key] = d
        return d

    def region(self, cloud: str, region: str) -> tuple[float, float, float, str | None]:
        """(dataset egress USD, outputs egress USD, transfer hours, not-allowed reason)."""
        memo = self.regions.get((cloud, region))
        if memo is None:
            eg_in, eg_out = egress_cost(self.job, cloud, region, self.book, self.allowance_gb)
            memo = self.regions[(cloud, region)] = (eg_in, eg_out, data_hours(self.job, cloud, region, self.book),
                                                    self.job.allows(cloud, region))
        return memo

    def shape(self, shape: Shape) -> tuple[int, int, float, str | None, float, float, Gang, Gang] | None:
        """(nodes, idle GPUs, run hours, node-shape reason, scaling efficiency, checkpoint write hours, the gang
        off spot, the gang on spot at the job's rate), or None when the job does not take its accelerator.
        Once per shape of a plan, never per offer."""
        key = id(shape)
        if key in self.shapes:
            return self.shapes[key]
        memo: tuple[int, int, float, str | None, float, float, Gang, Gang] | None = None
        job = self.job
        if shape.accelerator in self.accels:
            nodes, reason = nodes_for(job, shape)
            if reason is None and nodes > 1 and shape.fabric == "none":
                if job.require_fabric:
                    reason = f"{nodes} nodes and require_fabric: {shape.name} has no GPUDirect/EFA fabric"
                elif shape.fabric_gbps <= 0:
                    reason = f"{nodes} nodes need a network; the shape data gives {shape.name} no bandwidth"
            if job.parameters_b is not None and shape.gpu_memory_gib > 0 and (
                    reason is None or reason.endswith("allows it)")):
                # Memory first: a node-shape hint ("gpus_per_node: N allows it") cannot help a model that fits
                # no GPU of the shape (the state per GPU does not depend on the node size).
                reason = memory_reason(job.parameters_b, job.training, job.gpus, shape.accelerator,
                                       shape.gpu_memory_gib, self.phys, workload=job.workload,
                                       sequence_length=job.sequence_length, micro_batch=job.micro_batch,
                                       activation_checkpointing=job.activation_checkpointing) or reason
            speed = job.speed_of(shape.accelerator)
            eff = efficiency(nodes, shape.fabric_gbps, shape.gpus, speed, self.coef, self.phys.reference_gbps,
                             self.phys.reference_gpus_per_node) if shape.fabric_gbps > 0 else (
                1.0 if nodes <= 1 else 1e-9)
            eff = measured_efficiency(job, shape.accelerator, nodes) or eff  # the user's runs (calibration)
            run_h = job.hours * (self.ref_speed / speed) * (self.ref_eff / eff)
            write_h = checkpoint_write_hours(job, nodes)
            memo = (nodes, nodes * shape.gpus - job.gpus, run_h, reason, eff, write_h,
                    self.gang(nodes, shape.gpus, 0.0, run_h, write_h),
                    self.gang(nodes, shape.gpus, job.interruptions_per_hour, run_h, write_h))
        self.shapes[key] = memo
        return memo

    def extras(self, cloud: str, region: str, run_h: float, g: Gang, wall_h: float) -> tuple[float, float, float]:
        """(NAT USD, checkpoint storage USD, checkpoint request USD) of one candidate group."""
        job = self.job
        ds = job.dataset
        nat = 0.0 if ds is None else nat_usd(self.bill, cloud, region, ds.cloud, ds.region, ds.size_gb + job.outputs_gb)
        size = self.ck_gb
        if not size or not math.isfinite(run_h):
            return nat, 0.0, 0.0
        store, req = checkpoint_usd(self.bill, cloud, size, run_h, g.interval_h, wall_h, job.checkpoint_keep,
                                    job.checkpoint_retention_days)
        return nat, store, req

    def zone(self, cloud: str, zone: str) -> str | None:
        key = (cloud, zone)
        if key not in self.zones:
            self.zones[key] = self.job.allows_zone(cloud, zone)
        return self.zones[key]

    def terms(self, cloud: str, region: str, shape: Shape, capacity: str,
              reservation: Reservation | None = None) -> Terms | None:
        """The shared terms of (cloud, region, shape, capacity), or None when the job does not take the shape."""
        sh = self.shape(shape)
        if sh is None:
            return None
        job = self.job
        nodes, idle, run_h, shape_reason, eff, write_h, g_off, g_spot = sh
        eg_in, eg_out, transfer_h, region_reason = self.region(cloud, region)
        t = Terms()
        t.capacity, t.order, t.nodes, t.idle, t.run_h = capacity, CAPACITY_ORDER[capacity], nodes, idle, run_h
        t.cloud, t.region = cloud, region
        t.cost_opt = (job.checkpoint_interval_minutes is None and self.ck_gb > 0 and write_h > 0
                      and cloud in self.bill.clouds)
        t.eg_in, t.eg_out, t.eg, t.transfer_h = eg_in, eg_out, eg_in + eg_out, transfer_h
        t.reservation = reservation
        t.delay_rate = job.usd_per_hour_of_delay
        t.eff, t.write_h = eff, write_h
        if capacity == "spot":
            t.gang, t.rate = g_spot, nodes * job.interruptions_per_hour
        else:
            t.gang, t.rate = g_off, 0.0
        t.overhead = t.gang.overhead
        t.mult = run_h * (1.0 + t.overhead)
        t.ready_h = transfer_h + t.mult
        t.delay = t.ready_h * t.delay_rate if t.delay_rate else 0.0
        t.nat, t.ck_store, t.ck_req = self.extras(cloud, region, run_h, t.gang, t.mult)
        t.eg += t.nat + t.ck_store + t.ck_req
        if reservation is not None:
            t.key, t.unit, t.needed, t.headroom = reservation.quota_key, "node", nodes, float(reservation.count)
        else:
            t.key = shape.quota.spot if capacity == "spot" else shape.quota.on_demand
            t.unit = shape.quota.unit
            t.needed = nodes * (shape.vcpus if shape.quota.unit == "vcpu" else shape.gpus)
            t.headroom = self.headrooms.get((cloud, region, t.key)) if t.key is not None else None
        t.unknown = 0 if t.headroom is not None else 1
        t.reason = region_reason or shape_reason or _never(t.gang, run_h) or _unbounded(job, run_h, transfer_h)
        t.late = False
        if t.reason is None:
            t.reason = self.fit_reason(t)
            t.late = t.reason is not None and t.reason.startswith("ready in ")
        return t

    def fit_reason(self, t: Terms) -> str | None:
        """Reasons that hold for the whole group: quota or reservation too small, deadline, reservation end."""
        if t.headroom is not None and t.needed > t.headroom:
            if t.reservation is not None:
                return f"reservation {t.reservation.id}: needs {t.needed} nodes, {t.headroom:g} free"
            return f"quota {t.key}: needs {t.needed} {t.unit}, headroom {t.headroom:g}"
        return self.time_reason(t.ready_h, t.reservation)

    def time_reason(self, ready_h: float, reservation: Reservation | None) -> str | None:
        """The deadline (reason text starts "ready in ") or a reservation that ends first."""
        late = deadline_reason(self.job, ready_h)
        if late is not None:
            return late
        if reservation is not None and reservation.ends is not None:
            now = self.now or dt.datetime.now(dt.UTC)
            left = reservation.hours_left(now) or 0.0
            if left < ready_h:
                return (f"reservation {reservation.id} ends {reservation.ends:%Y-%m-%d %H:%M}Z, {max(left, 0):,.1f} h "
                        f"from now, before the job is ready ({ready_h:,.1f} h)")
        if reservation is not None and reservation.starts is not None:
            now = self.now or dt.datetime.now(dt.UTC)
            if reservation.starts > now:  # a future window: plan-batch's schedule can wait for it, a plan now cannot
                return (f"reservation {reservation.id} starts {reservation.starts:%Y-%m-%d %H:%M}Z, "
                        f"{(reservation.starts - now).total_seconds() / 3600:,.1f} h from now")
        return None


def deadline_reason(job: JobSpec, ready_hours: float) -> str | None:
    """Why results ready in ``ready_hours`` miss the job's ``deadline_hours`` (text starting "ready in "), or
    None when they meet it or the job has none. ``placement dispatch`` passes a candidate's ``ready_hours``
    plus the expected wait for admission, so planning and dispatch apply one rule."""
    deadline = job.deadline_hours
    if deadline is not None and ready_hours > deadline:
        ready, limit = _past_deadline_figures(ready_hours, deadline)
        return f"ready in {ready} h, after deadline_hours {limit}"
    return None


def _past_deadline_figures(ready: float, deadline: float) -> tuple[str, str]:
    """``ready`` and ``deadline`` (hours, ready > deadline) at one precision: the deadline's own decimals (up to
    3) and at least one, more while the two would read the same (``49.86`` after ``49.83``, never ``49.8`` after
    ``49.829``)."""
    written = f"{deadline:g}"
    decimals = 0 if "e" in written or "." not in written else len(written.split(".")[1])
    d = max(1, min(decimals, 3))
    while d < 6 and round(ready, d) <= round(deadline, d):
        d += 1
    return f"{ready:.{d}f}", (written if decimals <= d and "e" not in written else f"{deadline:.{d}f}")


def _never(g: Gang, run_h: float = 1.0) -> str | None:
    """A gang that cannot finish in practice (:func:`placement.model.physics.impractical_reason`): expected wall
    time beyond 10x its run time, or more interruptions than a restart budget could cover. Never raises."""
    return impractical_reason(g, run_h)


def _unbounded(job: JobSpec, run_h: float, transfer_h: float) -> str | None:
    """A run or a transfer that takes no finite time (a speed ratio beyond a float, a denormal throughput)."""
    if not math.isfinite(run_h):
        return (f"its run time is not a finite number of hours (speed {job.speed_of(job.accelerators[0]):g} on "
                f"{job.accelerators[0]} against a far smaller one here): give speed ratios within a factor of "
                "1e300")
    if not math.isfinite(transfer_h):
        return ("moving the data takes no finite time at the path's throughput: raise data.throughput_gbps "
                "or drop the override")
    return None


def _priced(ctx: _Context, offer: Offer, t: Terms, seq: int) -> Row:
    """The full row of one offer under terms ``t`` (also for excluded ones, when shown): repriced for the offer
    when its spot rate is its own (live, calibrated) or the interval follows its price (``t.cost_opt``)."""
    job = ctx.job
    capacity = t.capacity
    price = offer.spot_price if capacity == "spot" else offer.price
    per_node = offer_spot_rate(job, offer) if capacity == "spot" else None
    # A row excluded for good (not only by the deadline) is shown, never ranked: its interval stays Daly's.
    settled = t.reason is not None and not t.late
    if per_node is not None or (t.cost_opt and price is not None and not settled):
        t = ctx.offer_terms(t, offer.cloud, per_node, t.nodes * price if price is not None else math.inf,
                            offer.shape.gpus)
    rate, overhead, mult, ready_h, g = t.rate, t.overhead, t.mult, t.ready_h, t.gang
    reason = t.reason
    if price is None:
        hourly = math.inf
        reason = reason or ctx.zone(offer.cloud, offer.zone) or f"not offered as {capacity} here"
    else:
        hourly = t.nodes * price
        reason = reason or ctx.zone(offer.cloud, offer.zone)
        cap = job.max_usd_per_hour
        if reason is None and cap is not None and hourly > cap:
            reason = f"${hourly:,.2f}/h is over max_usd_per_hour ${cap:,.2f}"
    compute = hourly * mult
    delay = ready_h * t.delay_rate if t.delay_rate else 0.0
    total = compute + t.eg + delay
    return (t.unknown, _cents(total), t.nodes, hourly, offer.cloud, offer.region, offer.zone, offer.shape.name,
            t.order, seq, offer, t, rate, overhead, compute, ready_h, delay, reason, g)


def _scan(ctx: _Context, offers: Iterable[Offer], reservations: Sequence[Reservation],
          runnable: list[Row], excluded: list[Row | Deferred], ordered: list[Row | Deferred] | None) -> None:
    """Split every candidate into ``runnable`` rows and ``excluded`` ones (``ordered``: all, in input order).

    The hot loop of ranking a big catalog: everything that does not depend on the offer itself comes from
    the per-(shape, region) terms and a per-zone memo, so an offer costs two dict lookups and a few
    multiplications per capacity."""
    by_shape: dict[int, dict[str, tuple[Terms, ...] | None] | None] = {}
    zones: dict[str, str | None] = {}
    cap = ctx.job.max_usd_per_hour
    seq = 0
    job_rate = ctx.job.interruptions_per_hour
    from_job = ctx.job.interruptions_from_job
    add_run, add_ex = runnable.append, excluded.append
    add_open = ctx.open_spot.append
    for offer in offers:
        shape = offer.shape
        regions = by_shape.get(id(shape), _MISSING)
        if regions is _MISSING:
            regions = by_shape[id(shape)] = None if ctx.shape(shape) is None else {}
        if regions is None:
            continue  # not an accelerator the job takes
        region = offer.region
        group = regions.get(region, ())
        if group == ():
            group = regions[region] = _group(ctx, offer.cloud, region, shape)
        if group is None:
            continue
        if type(group[0]) is _Pending:  # all or none are: excluded for good whatever the offer and its zone
            seq += len(group)
            for t in group:
                add_ex((offer, t))
                if ordered is not None:
                    ordered.append((offer, t))
            continue
        zone = offer.zone
        zone_reason = zones[zone] if zone in zones else zones.setdefault(zone, ctx.zone(offer.cloud, zone))
        for t in group:
            seq += 1
            if t.reason is not None or zone_reason is not None:
                item = (offer, t)
                add_ex(item)
                if t.order == 2:  # never pending terms here: those groups were filed above
                    add_open(item)
                if ordered is not None:
                    ordered.append(item)
                continue
            if t.cost_opt:  # the interval follows this offer's price: priced in full (a memo per distinct price)
                row = _priced(ctx, offer, t, seq)
                if row[17]:
                    add_ex(row)
                    if t.order == 2:
                        add_open(row)
                else:
                    add_run(row)
                if ordered is not None:
                    ordered.append(row)
                continue
            if t.order == 2:  # spot
                price = offer.spot_price
                live_rate = offer.interruptions_per_hour
                if not from_job and ((live_rate is not None and live_rate > job_rate)
                                     or offer.calibrated_rate is not None):
                    row = _priced(ctx, offer, t, seq)
                    if row[17]:
                        add_ex(row)
                        add_open(row)  # a spot row
                    else:
                        add_run(row)
                    if ordered is not None:
                        ordered.append(row)
                    continue
            else:
                price = offer.price
            if price is None or (cap is not None and t.nodes * price > cap):
                row = _priced(ctx, offer, t, seq)
                add_ex(row)
                if t.order == 2:
                    add_open(row)
            else:
                hourly = t.nodes * price
                compute = hourly * t.mult
                delay = t.delay
                total = compute + t.eg + delay
                row = (t.unknown, _cents(total), t.nodes, hourly, offer.cloud, region, zone,
                       shape.name, t.order, seq, offer, t, t.rate, t.overhead, compute, t.ready_h, delay, None,
                       t.gang)
                add_run(row)
            if ordered is not None:
                ordered.append(row)
    if not ctx.reserved:
        return
    for r in reservations:
        rt = ctx.terms(r.cloud, r.region, r.shape, "reserved", r)
        if rt is None:
            continue
        seq += 1
        offer = Offer(cloud=r.cloud, region=r.region, zone=r.zone, shape=r.shape, price=r.usd_per_hour,
                      spot_price=None, price_source=f"reservation ({r.kind}: {r.source})")
        row = _priced(ctx, offer, rt, seq)
        (excluded if row[17] else runnable).append(row)
        if ordered is not None:
            ordered.append(row)


class _Pending(Terms):
    """The terms of a group excluded for good by its region or its node shape, before they are worked out: what
    every reader of an excluded row asks of a group first (``capacity``, ``order``, ``reason``, ``late``) and
    the rest on :func:`_full`, once per group, only when one of its rows is shown. Most groups of a big catalog
    are such (every machine type of an accelerator the job takes, in every region: most cannot hold it)."""

    __slots__ = ("shape", "full")
    shape: Shape
    full: Terms | None

    def resolve(self, ctx: _Context) -> Terms:
        """The group's terms in full (the same object for every row of the group, as a group's terms are)."""
        full: Terms | None = self.full
        if full is None:
            full = self.full = ctx.terms(self.cloud, self.region, self.shape, self.capacity)
            assert full is not None and full.reason == self.reason  # the same rule, the reason it was excluded for
        return full


def _group(ctx: _Context, cloud: str, region: str, shape: Shape) -> tuple[Terms, ...] | None:
    sh = ctx.shape(shape)
    if sh is None:
        return None
    # The reason a group's terms would give first, when it is the region's or the node shape's: every row is
    # excluded for it, whatever the capacity and the offer (see _Context.terms).
    reason = ctx.region(cloud, region)[3] or sh[3]
    out: list[Terms] = []
    for capacity in ctx.offer_caps:
        if reason is not None:
            pending = _Pending()
            pending.cloud, pending.region, pending.shape, pending.capacity = cloud, region, shape, capacity
            pending.order, pending.reason, pending.late, pending.full = CAPACITY_ORDER[capacity], reason, False, None
            out.append(pending)
        else:
            t = ctx.terms(cloud, region, shape, capacity)
            if t is None:
                return None
            out.append(t)
    return tuple(out) if out else None


def _full(ctx: _Context, item: Row | Deferred) -> Row:
    if len(item) == 2:
        offer, t = item  # type: ignore[misc]
        if type(t) is _Pending:
            t = t.resolve(ctx)
        return _priced(ctx, offer, t, 0)
    return item  # type: ignore[return-value]


def _candidate(job: JobSpec, r: Row) -> Candidate:
    (_, _, nodes, hourly, _, _, _, _, _, _, offer, t, rate, overhead, compute, ready_h, delay, reason, g) = r
    qc = QuotaCheck(key=t.key, unit=t.unit, needed=t.needed, headroom=t.headroom)
    cost = Cost(compute_usd=compute, egress_usd=t.eg_in + t.eg_out, dataset_egress_usd=t.eg_in,
                outputs_egress_usd=t.eg_out, spot_overhead=overhead, delay_usd=delay, nat_usd=t.nat,
                checkpoint_storage_usd=t.ck_store, checkpoint_requests_usd=t.ck_req)
    c = Candidate(offer=offer, capacity=t.capacity, nodes=nodes, usd_per_hour=hourly,  # type: ignore[arg-type]
                  cost=cost, quota=qc, excluded=reason, interruptions_per_hour=rate, hours=t.run_h,
                  transfer_hours=t.transfer_h, ready_hours=ready_h, idle_gpus=t.idle, reservation=t.reservation,
                  scaling_efficiency=t.eff, checkpoint_interval_minutes=g.interval_h * 60.0,
                  checkpoint_write_minutes=t.write_h * 60.0,
                  expected_interruptions=g.expected_interruptions if math.isfinite(g.overhead) else math.inf,
                  checkpoint_interval_capped=g.interval_capped, checkpoint_interval_basis=g.basis,
                  daly_interval_minutes=g.daly_interval_h * 60.0 if math.isfinite(g.daly_interval_h) else math.inf)
    source, p90 = spot_source(job, offer) if t.capacity == "spot" else (None, 0.0)
    measured = tuple(m for m, key in (("speed", f"speed:{offer.shape.accelerator}"),
                                      ("scaling", f"scaling:{offer.shape.accelerator}x{nodes}"))
                     if key in job.measured)
    book = bill_book()
    size = job.checkpoint_size_gb
    if size is None and job.parameters_b is not None:
        size = checkpoint_gb(job.parameters_b, job.training, physics_book())
    retention = (job.checkpoint_retention_days if job.checkpoint_retention_days is not None
                 else book.retention_days(offer.cloud))
    return Candidate(**{**c.__dict__, "notes": _notes(job, c), "interruption_source": source,
                        "interruptions_per_hour_p90": nodes * p90, "measured": measured,
                        "checkpoint_gb": size or 0.0,
                        "checkpoints_written": checkpoints_written(t.run_h, g.interval_h) if size else 0.0,
                        "checkpoint_keep": book.keep if job.checkpoint_keep is None else job.checkpoint_keep,
                        "checkpoint_retention_days": retention})


def offer_spot_rate(job: JobSpec, offer: Offer) -> float | None:
    """The per-node spot rate ``offer`` sets for ``job`` in place of the job's, or None. The job's explicit
    ``spot.interruptions_per_hour`` wins over everything (None); else the calibrated rate (any value; its prior
    already holds the live rate), else a live rate above the default (a placement score that says a pool is
    riskier than the default assumes is heeded)."""
    if job.interruptions_from_job:
        return None
    if offer.calibrated_rate is not None:
        return offer.calibrated_rate
    r = offer.interruptions_per_hour
    return r if r is not None and r > job.interruptions_per_hour else None


def spot_source(job: JobSpec, offer: Offer) -> tuple[str, float]:
    """(where the spot rate of ``job`` on ``offer`` comes from, its 90th percentile per node-hour): ``job`` (its
    own figure, taken as known; it wins over calibration and live rates alike), ``calibration`` (the Gamma
    posterior), ``live`` or ``default`` (the Gamma prior of ``job.prior_node_hours``)."""
    from placement.model.gamma import gamma_quantile, prior_p90

    if job.interruptions_from_job:
        return "job", job.interruptions_per_hour
    r = offer_spot_rate(job, offer)
    if r is None:
        return "default", prior_p90(job.interruptions_per_hour, job.prior_node_hours)
    if offer.calibrated_rate is not None and r == offer.calibrated_rate and offer.calibrated_weight:
        w = offer.calibrated_weight
        return "calibration", gamma_quantile(0.9, r * w, w)
    return "live", prior_p90(r, job.prior_node_hours)


def measured_efficiency(job: JobSpec, accelerator: str, nodes: int) -> float | None:
    """The scaling efficiency the user's runs measured for ``accelerator`` at ``nodes``
    (:mod:`placement.model.calibration`)."""
    for a, n, e in job.scaling:
        if a == accelerator and n == nodes:
            return e
    return None


@dataclass(frozen=True)
class Plan:
    """The ranked result for one job: runnable candidates (known-feasible cheapest first, then quota-unknown)
    and the excluded ones. Candidates are built on first access."""

    job: JobSpec
    rows: tuple[Row, ...]
    excluded_rows: tuple[Row | Deferred, ...] = ()
    context: _Context | None = None

    @functools.cached_property
    def ranked(self) -> tuple[Candidate, ...]:
        return tuple(_candidate(self.job, r) for r in self.rows)

    @functools.cached_property
    def excluded(self) -> tuple[Candidate, ...]:
        ctx = self.context or _Context(self.job, None, None, 0.0, None)
        rows = sorted((_full(ctx, r) for r in self.excluded_rows), key=lambda r: r[:9])
        return tuple(_candidate(self.job, r) for r in rows)

    def head(self, n: int) -> tuple[Candidate, ...]:
        """The first ``n`` runnable candidates, without building the rest."""
        if "ranked" in self.__dict__:
            return self.ranked[:n]
        # Built once each and kept: why_chosen and uncertain ask for the chosen one again for every row they
        # compare with it (a plan is frozen; its own __dict__ holds the memo, as cached_property does).
        built: list[Candidate] = self.__dict__.setdefault("_head", [])
        for r in self.rows[len(built):n]:
            built.append(_candidate(self.job, r))
        return tuple(built[:n])

    @property
    def chosen(self) -> Candidate | None:
        return self.head(1)[0] if self.rows else None

    @functools.cached_property
    def frontier(self) -> tuple[Candidate, ...]:
        """The cost/ready-time Pareto set, fastest first: each is cheaper (compute + egress and the bill's
        other lines, to the cent) than every one ready sooner. It takes the runnable candidates and those
        excluded only by ``deadline_hours`` (their ``excluded`` reason starts "ready in "), so a reader sees
        what the deadline costs. Rows sharing terms share their ready time and delay, so the first of each in
        the ranked rows is its cheapest: only those few are sorted."""
        return tuple(c for c, _ in self.frontier_ranked)

    @functools.cached_property
    def frontier_ranked(self) -> tuple[tuple[Candidate, int], ...]:
        """:attr:`frontier` with each one's rank: a runnable one's place in the ranking, one that misses the
        deadline the place it would take among the runnable ones had the job no deadline."""
        firsts: dict[tuple[int, float], Row] = {}
        for r in self.rows:
            key = (id(r[11]), r[15])
            if key not in firsts:
                firsts[key] = r
        late: list[Row] = []
        if self.job.deadline_hours is not None:
            ctx = self.context or _Context(self.job, None, None, 0.0, None)
            seen: set[tuple[int, float]] = set()
            for item in self.excluded_rows:
                t = item[11] if len(item) > 2 else item[1]  # type: ignore[misc]
                if not t.late:
                    continue
                r = _full(ctx, item)
                if r[17] is None or not r[17].startswith("ready in ") or r[1] == math.inf:
                    continue
                key = (id(r[11]), r[15])
                if key in seen:
                    continue
                seen.add(key)
                late.append(r)
        best = math.inf
        out: list[tuple[Row, int]] = []
        ranks = {id(r): i + 1 for i, r in enumerate(self.rows)} if firsts else {}
        pool = list(firsts.values()) + late
        for r in sorted(pool, key=lambda r: (r[15], r[14] + r[11].eg, r[:10])):
            spend = _cents(r[14] + r[11].eg)
            if spend < best:
                best = spend
                rank = ranks.get(id(r))
                if rank is None:
                    rank = bisect.bisect_left([x[:10] for x in self.rows], r[:10]) + 1
                out.append((r, rank))
        return tuple((_candidate(self.job, r), rank) for r, rank in out)

    def uncertain(self, c: Candidate) -> str | None:
        """What would decide between the chosen candidate and ``c`` when their totals differ by less than the
        model's measured error band of the job's curve (a tie the model cannot break), else None.

        Two candidates the model predicts alike share its error, which then cancels: never a tie on that account.
        Alike: the same accelerator at the same node count, and, when either side has more than one node, the
        same node size and fabric (on one node the fabric carries no traffic: efficiency is exactly 1 on both).
        The decider is a measurement the user can make on the two candidates: the job's step time on each GPU
        (``placement profile`` on one node of each), or NCCL bus bandwidth at the job's node counts."""
        best = self.chosen
        if best is None or c is best:
            return None
        sb, sc = best.offer.shape, c.offer.shape
        multi = max(best.nodes, c.nodes) > 1
        if sb.accelerator == sc.accelerator and best.nodes == c.nodes and (
                not multi or (sb.gpus, sb.fabric_gbps) == (sc.gpus, sc.fabric_gbps)):
            return None
        band = physics_book().band(self.job.workload, self.job.training)
        if band <= 0 or abs(c.cost.total_usd - best.cost.total_usd) > band * max(best.cost.compute_usd,
                                                                               c.cost.compute_usd):
            return None
        if sb.accelerator != sc.accelerator:
            return (f"measure the job's step time on both GPUs: `placement profile --config <the job's model "
                    f"config>` on one {sb.name} node ({sb.accelerator}) and one {sc.name} node ({sc.accelerator}), "
                    "then plan with the calibration it writes")
        if sb.fabric_gbps != sc.fabric_gbps:
            return (f"measure NCCL bus bandwidth on both at the job's node count: nccl-tests all_reduce_perf across "
                    f"{best.nodes} {sb.name} nodes ({sb.fabric_gbps:g} Gbps each) and across {c.nodes} {sc.name} "
                    f"nodes ({sc.fabric_gbps:g} Gbps each)")
        return (f"measure the scaling: nccl-tests all_reduce_perf across {best.nodes} and across {c.nodes} {sb.name} "
                "nodes, or the job's step time at both sizes (placement calibrate reads it from the fleet)")

    @functools.cached_property
    def cheapest_unhurried(self) -> Candidate | None:
        """The candidate with the lowest compute + egress had the job no ``deadline_hours`` and no
        ``usd_per_hour_of_delay`` (same quota tier as the chosen one), when that is not the chosen one; None
        otherwise. What the deadline or the price of delay changed."""
        job = self.job
        if (job.deadline_hours is None and not job.usd_per_hour_of_delay) or not self.rows:
            return None
        tier = self.rows[0][0]
        ctx = self.context or _Context(job, None, None, 0.0, None)
        pool: list[Row] = [r for r in self.rows if r[0] == tier]
        for item in self.excluded_rows:
            t = item[11] if len(item) > 2 else item[1]  # type: ignore[misc]
            if t.late and t.unknown == tier:
                r = _full(ctx, item)
                if r[17] is not None and r[17].startswith("ready in "):
                    pool.append(r)
        def key(r: Row) -> tuple[float, float, tuple[object, ...]]:
            return (_cents(r[14] + r[11].eg), r[15], r[:10])

        cheapest = min(pool, key=key)
        chosen = self.rows[0]
        if key(cheapest)[0] >= _cents(chosen[14] + chosen[11].eg):
            return None
        return _candidate(job, cheapest)

    def total_at_interval(self, c: Candidate, interval_h: float) -> float:
        """``c``'s total USD had it checkpointed every ``interval_h`` hours (its other terms as they are): what the
        plan's choice of interval is compared with (Daly's wall-time optimum, issue 36)."""
        ctx = self.context or _Context(self.job, None, None, 0.0, None)
        per_node = c.interruptions_per_hour / c.nodes if c.nodes else 0.0
        g = _gang(self.job, c.nodes, c.gpus_per_node, per_node, c.hours, c.checkpoint_write_minutes / 60.0,
                  auto_h=interval_h)
        mult = c.hours * (1.0 + g.overhead)
        nat, store, req = ctx.extras(c.offer.cloud, c.offer.region, c.hours, g, mult)
        delay = (c.transfer_hours + mult) * self.job.usd_per_hour_of_delay
        return c.usd_per_hour * mult + c.cost.egress_usd + nat + store + req + delay

    @property
    def cheaper_unconfirmed(self) -> tuple[int, Candidate] | None:
        """(rank, candidate) of the cheapest quota-unknown candidate when it is cheaper than the chosen,
        known-feasible one: worth a quota request. None otherwise."""
        rows = self.rows
        if not rows or rows[0][0] != 0:
            return None
        i = bisect.bisect_left(rows, (1,))
        if i >= len(rows) or rows[i][1] >= rows[0][1]:  # whole cents: cheaper by at least one
            return None
        return i + 1, _candidate(self.job, rows[i])


def candidates(job: JobSpec, offers: Iterable[Offer], quotas: QuotaTable | None = None,
               book: EgressBook | None = None, *, reservations: Sequence[Reservation] = (),
               now: dt.datetime | None = None, egress_allowance_gb: float = 0.0) -> list[Candidate]:
    """Every candidate for ``job`` among ``offers`` (those of an accepted accelerator) and ``reservations``,
    excluded ones included, in input order."""
    ctx = _Context(job, quotas, book, egress_allowance_gb, now)
    ordered: list[Row | Deferred] = []
    _scan(ctx, offers, reservations, [], [], ordered)
    return [_candidate(job, _full(ctx, r)) for r in ordered]


def plan(job: JobSpec, offers: Iterable[Offer], quotas: QuotaTable | None = None,
         book: EgressBook | None = None, *, reservations: Sequence[Reservation] = (),
         now: dt.datetime | None = None, egress_allowance_gb: float = 0.0) -> Plan:
    """Rank every candidate: known-feasible by total cost, then quota-unknown ones; excluded ones apart.

    ``reservations`` add ``reserved`` candidates (jobs with capacity any or reserved); ``now`` is the time
    reservation end dates are compared with (default: the current time); ``egress_allowance_gb`` is AWS
    internet egress still free this month, which only the caller can know is unspent (default 0)."""
    ctx = _Context(job, quotas, book, egress_allowance_gb, now)
    runnable: list[Row] = []
    excluded: list[Row | Deferred] = []
    _scan(ctx, offers, reservations, runnable, excluded, None)
    runnable.sort()
    return Plan(job=job, rows=tuple(runnable), excluded_rows=tuple(excluded), context=ctx)


def runnable_figures(p: Plan) -> dict[tuple[int, str], tuple[float, float]]:
    """``(id(offer), capacity) -> (total USD, ready hours)`` of each runnable candidate of ``p``: the figures
    :class:`Candidate` gives (``cost.total_usd``, ``ready_hours``), computed alike, without building the
    candidates (the dispatcher prices every job shape of a pass on every pool and needs nothing else)."""
    out: dict[tuple[int, str], tuple[float, float]] = {}
    for r in p.rows:
        offer, t, compute, ready_h, delay = r[10], r[11], r[14], r[15], r[16]
        out[(id(offer), str(t.capacity))] = (compute + t.eg + delay, ready_h)
    return out


def _notes(job: JobSpec, c: Candidate) -> tuple[str, ...]:
    offer, cost, qc = c.offer, c.cost, c.quota
    notes = []
    if c.reservation is not None:
        r = c.reservation
        ends = "open-ended" if r.ends is None else f"ends {r.ends:%Y-%m-%d %H:%M}Z"
        notes.append(f"reservation {r.id} ({r.count} free, {ends})")
    elif not qc.known:
        notes.append("quota unknown")
    if c.reservation is None and c.capacity in offer.shape.quota.unverified:
        notes.append(f"quota key {qc.key} unverified for {offer.instance_type} {c.capacity} (shapes.yaml)")
    if c.idle_gpus > 0:
        notes.append(f"{c.idle_gpus} idle GPUs billed ({c.billed_gpus} for {job.gpus})")
    if c.nodes > 1 and offer.shape.fabric_gbps < physics_book().reference_gbps:
        notes.append(f"scaling {c.scaling_efficiency:.0%} on {offer.shape.fabric_gbps:g} Gbps"
                     + ("" if offer.shape.multi_node else " without GPUDirect"))
    if cost.spot_overhead >= 0.01:
        notes.append(f"+{cost.spot_overhead:.1%} for interruptions and checkpoints")
    if c.checkpoint_interval_capped and job.checkpoint_interval_minutes is not None:
        notes.append(f"checkpoint.interval_minutes {job.checkpoint_interval_minutes:,.0f} is longer than the "
                     f"{c.hours * 60:,.0f}-minute run: capped at the run (one checkpoint at its end)")
    if offer.placement_score is not None:
        notes.append(f"placement score {offer.placement_score}")
    if abs(c.hours - job.hours) > 1e-9:
        notes.append(f"{offer.shape.accelerator}: {c.hours:,.1f} h of run time")
    if job.dataset is not None and job.dataset.cloud != offer.cloud:
        notes.append("cross-cloud egress")
    elif job.dataset is not None and job.dataset.region != offer.region:
        notes.append("inter-region egress")
    if offer.price_source != "catalog" and c.reservation is None:
        notes.append(f"price: {offer.price_source}")
    if offer.price_flag and c.reservation is None:
        notes.append("price flagged in the catalog (unverified or an outlier; --json price_flag says why)")
    return tuple(notes)


def _where(c: Candidate) -> str:
    o = c.offer
    return f"{o.cloud} {o.region} {o.zone} {o.instance_type} x{c.nodes} {c.capacity}"


def why_chosen(p: Plan) -> str:
    """One or two sentences on why the first row won, against the table's rank 2."""
    best = p.chosen
    if best is None and not p.excluded_rows and p.job.capacity == "reserved":
        return ("nothing feasible: capacity is reserved and no reservation of its accelerators was given "
                "(--reservations PATH, or --live to read them)")
    if best is None:
        fits = no_gpu_fits(p.job)
        if fits:
            return f"nothing feasible: {fits}"
        return "nothing feasible: every candidate was excluded (see --all-candidates for the reasons)"
    head = f"{_where(best)}: lowest total ${best.cost.total_usd:,.2f}"
    if best.capacity == "spot" and _spot_not_cheaper(best.offer):
        # Not a bargain: a spot price at or above on-demand means no spare spot capacity (or a catalog error).
        head = (f"{_where(best)}: total ${best.cost.total_usd:,.2f}, but its spot price is not below on-demand here "
                "(no spare spot capacity, or a catalog error: expect reclaims, or no capacity at all; "
                "capacity: on-demand avoids it)")
    if best.reservation is not None:
        head += f" on reservation {best.reservation.id}"
    if best.feasible is None:
        head += (f"; quota unknown here (no quota data for {best.quota.key or 'this shape'}), "
                 "verify before submitting")
    top = p.head(2)
    if len(top) < 2:
        text = head + "; the only runnable candidate"
    else:
        runner = top[1]
        delta = runner.cost.total_usd - best.cost.total_usd
        if abs(delta) < TIE_USD:
            if runner.nodes > best.nodes:
                order = f"fewer nodes ({best.nodes} against {runner.nodes})"
            elif runner.usd_per_hour > best.usd_per_hour:
                order = "the lower hourly price"
            else:
                order = "the fixed order cloud, region, zone, instance type, capacity"
            text = head + f" (a tie with rank 2 {_where(runner)}; first by {order})"
        else:
            parts = [f"${delta:,.2f} less than rank 2 {_where(runner)}: {difference_text(best, runner)}"]
            if best.feasible and runner.feasible is None:
                parts.append("and this one's quota is known to fit")
            text = head + " (" + "; ".join(parts) + ")"
    for rank, other in enumerate(p.head(UNCERTAIN_LOOK)[1:], start=2):
        decide = p.uncertain(other)
        if decide is not None:
            text += (f"; within the model's measured error ({band_text(p.job)}) of rank {rank} {_where(other)}, "
                     f"so the model cannot tell them apart: {decide}")
            break
    hurry = hurry_text(p)
    if hurry:
        text += f"; {hurry}"
    cheaper = p.cheaper_unconfirmed
    if cheaper is not None:
        rank, c = cheaper
        text += (f". Rank {rank}, {_where(c)}, would cost ${best.cost.total_usd - c.cost.total_usd:,.2f} less but "
                 f"its quota is unknown: {request_text(c)}")
    return text + "."


BILL_LINES = (("compute", "compute_usd"), ("egress", "egress_usd"), ("NAT", "nat_usd"),
              ("checkpoint storage", "checkpoint_storage_usd"), ("checkpoint requests", "checkpoint_requests_usd"),
              ("delay", "delay_usd"))  # total = the sum of these (Cost.total_usd)


def line_differences(best: Candidate, other: Candidate) -> list[tuple[str, int]]:
    """``other``'s bill lines minus ``best``'s, in whole cents that add up to the difference of the totals (as
    both print, to the cent): each line rounded, the rounding left over put on the largest line. Lines that
    differ by a cent or less are summed into one ("the other lines")."""
    diffs = [(name, getattr(other.cost, attr) - getattr(best.cost, attr)) for name, attr in BILL_LINES]
    named = [(n, d) for n, d in diffs if abs(d) > 0.01 + 1e-9]
    rest = sum(d for n, d in diffs if abs(d) <= 0.01 + 1e-9)
    total = round(other.cost.total_usd * 100) - round(best.cost.total_usd * 100)
    cents = [(n, round(d * 100)) for n, d in named]
    if round(rest * 100):
        cents.append(("the other lines", round(rest * 100)))
    left = total - sum(c for _, c in cents)
    if left and cents:
        i = max(range(len(cents)), key=lambda k: abs(cents[k][1]))
        cents[i] = (cents[i][0], cents[i][1] + left)
    elif left:
        cents.append(("the other lines", left))
    return [(n, c) for n, c in cents if c]


def difference_text(best: Candidate, other: Candidate) -> str:
    """``other``'s bill lines against ``best``'s, every line more than a cent apart, adding up to the difference:
    "compute $2.21 more, NAT $4.95 more, egress $2.20 less" (``more``: ``other`` pays more)."""
    parts = [f"{name} ${abs(c) / 100:,.2f} {'more' if c > 0 else 'less'}" for name, c in line_differences(best, other)]
    return "there " + ", ".join(parts) if parts else "the same lines"


def band_text(job: JobSpec) -> str:
    """The job's curve's error band and the evidence behind it: "±26 % for llm-full, the RMS of its 10 held-out
    points (3 speed ratios, 7 scaling points)"."""
    from placement.model.physics import curve_name

    book = physics_book()
    cv = curve_name(job.workload, job.training)
    speed, scaling = book.evidence.get(cv, (0, 0))
    return (f"±{book.band(job.workload, job.training):.0%} for {cv}, the RMS of its {speed + scaling} held-out points: "
            f"{speed} speed ratio{'s' if speed != 1 else ''}, {scaling} scaling point{'s' if scaling != 1 else ''}")


def no_gpu_fits(job: JobSpec) -> str | None:
    """When no GPU the shape data knows holds the job's model at its GPU count: say so, naming the largest GPU
    and its room (and how many GPUs would shard the state thin enough), else None."""
    from placement.model.shapes import shape_book

    if job.parameters_b is None:
        return None
    book = physics_book()
    sb = shape_book()
    sizes = [(s.gpu_memory_gib, s.accelerator) for s in sb.shapes.values() if s.gpu_memory_gib > 0]
    if not sizes:
        return None
    gib, accel = max(sizes)
    why = memory_reason(job.parameters_b, job.training, job.gpus, accel, gib, book, workload=job.workload,
                        sequence_length=job.sequence_length, micro_batch=job.micro_batch,
                        activation_checkpointing=job.activation_checkpointing)
    if why is None:
        return None
    from placement.model.physics import activation_gb_per_gpu, usable_gb

    room = usable_gb(gib, book)
    act = activation_gb_per_gpu(job.parameters_b, job.sequence_length, job.micro_batch,
                                job.activation_checkpointing) if job.workload == "llm" else 0.0
    state = book.training_bytes_per_parameter[job.training] * job.parameters_b
    hint = ""
    if act < room:
        hint = f"; {math.ceil(state / (room - act)):,} or more GPUs would shard it thin enough"
    return (f"the model fits no GPU at {job.gpus} GPUs: the largest, {accel}, has {room:,.0f} GB free of "
            f"{gib:g} GiB ({why.split('; ')[0]}){hint}")


def _spot_not_cheaper(offer: Offer) -> bool:
    """:func:`placement.model.trust.spot_not_cheaper` (imported late: trust is a reader of catalogs, not of plans)."""
    from placement.model.trust import spot_not_cheaper

    return spot_not_cheaper(offer)


def hurry_text(p: Plan) -> str | None:
    """What the deadline or the price of delay costs, when it changed the pick: "meeting the 36 h deadline
    costs $6,080.00 more than the cheapest plan, ready 1.8 h sooner"."""
    best, cheap = p.chosen, p.cheapest_unhurried
    if best is None or cheap is None:
        return None
    # Every bill line but the value of delay (the total's formula less delay_usd): what the deadline costs in money.
    more = (best.cost.total_usd - best.cost.delay_usd) - (cheap.cost.total_usd - cheap.cost.delay_usd)
    sooner = cheap.ready_hours - best.ready_hours
    when = f"ready {sooner:,.1f} h sooner" if sooner >= 0.05 else "ready as soon"
    if cheap.excluded:
        return (f"meeting the {p.job.deadline_hours:g} h deadline costs ${more:,.2f} more than the cheapest plan "
                f"({_where(cheap)}), {when}")
    return (f"valuing delay at ${p.job.usd_per_hour_of_delay:,.2f}/h picks a plan whose bill (all but the delay) is "
            f"${more:,.2f} more than the cheapest ({_where(cheap)}), {when}")


def request_text(c: Candidate) -> str:
    """What to ask for to make a quota-unknown candidate usable."""
    o = c.offer
    if c.quota.key is None:
        return (f"no verified quota key for {o.instance_type} {c.capacity}; check its limit in {o.cloud} {o.region} "
                f"covers {c.quota.needed} {c.quota.unit}")
    return f"confirm or request {c.quota.needed} {c.quota.unit} of headroom on {c.quota.key} in {o.region}"
