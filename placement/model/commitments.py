"""Commitment terms (AWS Capacity Blocks, ODCRs, Savings Plans; GCP committed use, future reservations), quota
lead times and pool availability, as data: ``placement/data/commitments.yaml``, overridden by a user's negotiated
rates file (``placement portfolio --rates FILE``, the same layout: ``terms`` rows replace fields of the row with
the same ``id`` or add one; ``quota_lead_weeks`` and ``availability`` entries replace the shipped ones, and
``pools`` rows set availability for one cloud/region/instance type). Pure parsing of already-read documents."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from placement.errors import InputError, shown
from placement.model.packaged import packaged_text

KINDS = ("capacity-block", "odcr", "savings-plan", "committed-use", "future-reservation")
PAYMENTS = ("upfront", "monthly")
SCHEMA = "gpufleet.commitments/v1"
TERM_FIELDS = ("id", "cloud", "kind", "discount", "accelerators", "durations_weeks", "start_within_weeks",
               "start_every_weeks", "lead_weeks", "max_nodes", "guarantees_capacity", "uses_quota", "payment",
               "source", "note", "min_gpus_per_node", "verified", "checked")


@dataclass(frozen=True)
class Term:
    """One commitment one may buy: ``discount`` off the pool's on-demand price for every hour of the term
    (used or not), in ``durations_weeks``, starting from ``lead_weeks`` on, at most ``start_within_weeks``
    ahead (None: any week), on ``start_every_weeks``; ``max_nodes`` per purchase."""

    id: str
    cloud: str
    kind: str
    discount: float
    accelerators: tuple[str, ...]
    durations_weeks: tuple[int, ...]
    start_within_weeks: int | None
    start_every_weeks: int
    lead_weeks: int
    max_nodes: int
    guarantees_capacity: bool
    uses_quota: bool
    payment: str
    source: str
    note: str = ""
    min_gpus_per_node: int = 1  # sold for nodes of at least this many GPUs (Capacity Blocks: full-size instances)
    verified: bool = True  # False: the figure could not be read at its source (``checked`` says why)
    checked: str = ""  # what reading the source found, and when

    def break_even(self) -> float:
        """The share of its hours a term must be used to cost no more than on-demand for the same work."""
        return 1.0 - self.discount


@dataclass(frozen=True)
class Book:
    """Terms by id, quota lead weeks by cloud, availability (``spot``/``on_demand`` by cloud, and per pool
    ``(cloud, region, instance type)``) and where each figure came from."""

    terms: tuple[Term, ...]
    quota_lead_weeks: Mapping[str, int]
    spot_availability: Mapping[str, float]
    on_demand_availability: Mapping[str, float]
    pools: Mapping[tuple[str, str, str], tuple[float | None, float | None]]  # (spot, on-demand) availability
    sources: tuple[str, ...] = ()

    def availability(self, cloud: str, region: str, instance_type: str, capacity: str) -> float:
        spot, od = self.pools.get((cloud, region, instance_type), (None, None))
        if capacity == "spot":
            return spot if spot is not None else self.spot_availability.get(cloud, 1.0)
        return od if od is not None else self.on_demand_availability.get(cloud, 1.0)


def _num(value: Any, field: str, src: str, lo: float = 0.0, hi: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= float(value) <= hi:
        raise InputError(field, f"must be a number from {lo:g} to {hi:g}, got {shown(value)}", source=src)
    return float(value)


def _int(value: Any, field: str, src: str, lo: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise InputError(field, f"must be a whole number >= {lo}, got {shown(value)}", source=src)
    return int(value)


def _term(row: Mapping[str, Any], where: str, src: str) -> Term:
    for f in row:
        if f not in TERM_FIELDS:
            raise InputError(f"{where}.{f}", "is not a term field; fields: " + ", ".join(TERM_FIELDS), source=src)
    for f in TERM_FIELDS[:-4]:
        if f not in row:
            raise InputError(f"{where}.{f}", "is missing (every term needs " + ", ".join(TERM_FIELDS[:-4]) + ")",
                             source=src)
    if row["kind"] not in KINDS:
        raise InputError(f"{where}.kind", f"must be one of {', '.join(KINDS)}, got {shown(row['kind'])}", source=src)
    if row["payment"] not in PAYMENTS:
        raise InputError(f"{where}.payment", f"must be upfront or monthly, got {shown(row['payment'])}", source=src)
    if row["cloud"] not in ("aws", "gcp"):
        raise InputError(f"{where}.cloud", f"must be aws or gcp, got {shown(row['cloud'])}", source=src)
    durations = row["durations_weeks"]
    if not isinstance(durations, list) or not durations:
        raise InputError(f"{where}.durations_weeks", "must be a non-empty list of weeks", source=src)
    accels = row["accelerators"]
    if not isinstance(accels, list) or not all(isinstance(a, str) for a in accels):
        raise InputError(f"{where}.accelerators", "must be a list of accelerator names", source=src)
    within = row["start_within_weeks"]
    return Term(
        id=str(row["id"]), cloud=row["cloud"], kind=row["kind"],
        discount=_num(row["discount"], f"{where}.discount", src, 0.0, 0.99),
        accelerators=tuple(accels),
        durations_weeks=tuple(_int(d, f"{where}.durations_weeks", src, 1) for d in durations),
        start_within_weeks=None if within is None else _int(within, f"{where}.start_within_weeks", src),
        start_every_weeks=_int(row["start_every_weeks"], f"{where}.start_every_weeks", src, 1),
        lead_weeks=_int(row["lead_weeks"], f"{where}.lead_weeks", src),
        max_nodes=_int(row["max_nodes"], f"{where}.max_nodes", src, 1),
        guarantees_capacity=bool(row["guarantees_capacity"]), uses_quota=bool(row["uses_quota"]),
        payment=row["payment"], source=str(row["source"]), note=str(row.get("note") or ""),
        min_gpus_per_node=_int(row.get("min_gpus_per_node", 1), f"{where}.min_gpus_per_node", src, 1),
        verified=bool(row.get("verified", True)), checked=str(row.get("checked") or ""))


def parse_book(doc: Any, src: str, base: Book | None = None) -> Book:
    """The commitments document ``doc`` (from ``src``), over ``base`` when it is a rates file."""
    if not isinstance(doc, Mapping):
        raise InputError("terms", "the file must be a mapping with terms:, quota_lead_weeks:, availability:",
                         source=src)
    rows: dict[str, dict[str, Any]] = {}
    if base is not None:
        for t in base.terms:
            rows[t.id] = {f: getattr(t, f) for f in TERM_FIELDS}
            rows[t.id]["accelerators"] = list(t.accelerators)
            rows[t.id]["durations_weeks"] = list(t.durations_weeks)
    raw_terms = doc.get("terms") or []
    if not isinstance(raw_terms, list):
        raise InputError("terms", "must be a list of term rows", source=src)
    for i, row in enumerate(raw_terms):
        if not isinstance(row, Mapping) or "id" not in row:
            raise InputError(f"terms[{i}].id", "every term row needs an id", source=src)
        rows[str(row["id"])] = {**rows.get(str(row["id"]), {}), **row}
    terms = tuple(_term(r, f"terms[{i}]", src) for i, r in enumerate(rows.values()))
    lead = dict(base.quota_lead_weeks) if base else {}
    for cloud, v in (doc.get("quota_lead_weeks") or {}).items():
        weeks = v.get("weeks") if isinstance(v, Mapping) else v
        lead[str(cloud)] = _int(weeks, f"quota_lead_weeks.{cloud}", src)
    avail = doc.get("availability") or {}
    spot = dict(base.spot_availability) if base else {}
    od = dict(base.on_demand_availability) if base else {}
    for name, target in (("spot", spot), ("on_demand", od)):
        for cloud, v in (avail.get(name) or {}).items():
            if cloud in ("aws", "gcp"):
                target[cloud] = _num(v, f"availability.{name}.{cloud}", src, 0.0, 1.0)
    pools = dict(base.pools) if base else {}
    for i, p in enumerate(doc.get("pools") or []):
        where = f"pools[{i}]"
        if not isinstance(p, Mapping) or not all(k in p for k in ("cloud", "region", "instance_type")):
            raise InputError(where, "needs cloud, region, instance_type (and spot/on_demand availability)", source=src)
        s = p.get("spot_availability")
        o = p.get("on_demand_availability")
        pools[(str(p["cloud"]), str(p["region"]), str(p["instance_type"]))] = (
            None if s is None else _num(s, f"{where}.spot_availability", src, 0.0, 1.0),
            None if o is None else _num(o, f"{where}.on_demand_availability", src, 0.0, 1.0))
    return Book(terms, lead, spot, od, pools, (*(base.sources if base else ()), src))


@functools.cache
def commitment_book() -> Book:
    """The terms shipped with the package."""
    import yaml

    text = packaged_text("commitments.yaml")
    return parse_book(yaml.safe_load(text), "placement/data/commitments.yaml")


def with_rates(doc: Any, src: str) -> Book:
    """The shipped book with a user's negotiated rates file applied."""
    return parse_book(doc, src, commitment_book())
