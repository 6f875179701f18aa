"""Commitment terms (AWS Capacity Blocks, ODCRs, Savings Plans; GCP committed use, future reservations), the
per-pool figures that refine them, quota lead times and pool availability, as data:
``placement/data/commitments.yaml``, overridden by a user's negotiated rates file (``placement portfolio --rates
FILE``, the same layout). Pure parsing of already-read documents; every figure keeps its source, date and
whether it was read at that source (``verified``).

How a term buys (its ``kind``):

* ``capacity-block``, ``odcr``, ``future-reservation``: nodes of one pool held for you (``guarantees_capacity``),
  whole nodes, paid for every hour of the term whether used or not.
* ``committed-use``: GCP resource-based commitments: whole nodes' resources of one machine type in a region,
  paid for every hour of the term; a discount on the matching usage, **no capacity** (the usage is on-demand
  usage, within on-demand quota and availability).
* ``savings-plan``: AWS Savings Plans: a **spend** commitment in USD per hour (at the plan's rates) over an
  instance family in one region (``scope: family-region``, EC2 Instance Savings Plans) or all of EC2 in every
  region (``scope: all``, Compute Savings Plans); the usage it covers is billed at the plan's rate for that
  instance type, the rest at on-demand; no capacity.

A rates file: ``terms`` rows replace fields of the row with the same ``id`` or add one (an ``id`` given twice in
one file is refused); ``rates`` rows set one term's figure for one instance type (and region); ``quota_lead_weeks``,
``availability`` and ``beyond_horizon`` entries replace the shipped ones; ``pools`` rows set availability for one
cloud/region/instance type.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from placement.errors import InputError, shown

KINDS = ("capacity-block", "odcr", "savings-plan", "committed-use", "future-reservation")
HOLDING_KINDS = ("capacity-block", "odcr", "future-reservation")  # hold nodes for you by default
PAYMENTS = ("upfront", "monthly")
SCOPES = ("pool", "family-region", "all")
CLOUDS = ("aws", "gcp")
BEYOND_RULES = ("last-weeks", "exclude")
SCHEMA = "gpufleet.commitments/v1"
TERM_FIELDS = ("id", "cloud", "kind", "discount", "accelerators", "durations_weeks", "start_within_weeks",
               "start_every_weeks", "lead_weeks", "max_nodes", "guarantees_capacity", "uses_quota", "payment",
               "source", "note", "min_gpus_per_node", "verified", "checked", "date", "scope")
REQUIRED_TERM_FIELDS = TERM_FIELDS[:14]
RATE_FIELDS = ("term", "region", "instance_type", "discount", "usd_per_node_hour", "source", "date", "verified",
               "checked", "note")
TOP_FIELDS = ("schema", "terms", "rates", "quota_lead_weeks", "availability", "pools", "beyond_horizon")
POOL_FIELDS = ("cloud", "region", "instance_type", "spot_availability", "on_demand_availability", "source")


@dataclass(frozen=True)
class Term:
    """One commitment one may buy: ``discount`` off the pool's on-demand price for every hour of the term
    (used or not; a :class:`Rate` row can refine it per instance type), in ``durations_weeks``, starting from
    ``lead_weeks`` on, at most ``start_within_weeks`` ahead (None: any week), on ``start_every_weeks``;
    ``max_nodes`` per purchase (nodes of the pool; a Savings Plan buys USD per hour and has no such bound)."""

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
    date: str = ""  # when the figure was read (or the date it was valid), ISO 8601
    scope: str = "pool"  # savings-plan: family-region | all; every other kind: pool

    @property
    def spend(self) -> bool:
        """A spend commitment (USD per hour over a scope), not nodes of one pool."""
        return self.kind == "savings-plan"

    def covers(self, cloud: str, accelerator: str, gpus: int) -> bool:
        """Whether this term is sold for a node of ``gpus`` ``accelerator`` GPUs on ``cloud``."""
        return cloud == self.cloud and accelerator in self.accelerators and gpus >= self.min_gpus_per_node

    def break_even(self, discount: float | None = None) -> float:
        """The share of its hours a term must be used to cost no more than on-demand for the same work."""
        return 1.0 - (self.discount if discount is None else discount)


@dataclass(frozen=True)
class Rate:
    """One figure of a term for one instance type (and region, or every region): a discount off on-demand or a
    price per node-hour, where it was read and whether it was read there."""

    term: str
    instance_type: str
    region: str | None
    discount: float | None
    usd_per_node_hour: float | None
    source: str
    date: str
    verified: bool
    checked: str = ""
    note: str = ""
    # Read live for dated offers (Capacity Blocks): start week -> USD per node-hour; only those weeks can start.
    weeks: Mapping[int, float] | None = None

    def discount_off(self, od_usd_per_node_hour: float) -> float:
        """The fraction off ``od_usd_per_node_hour`` this figure gives (a node-hour price may exceed it: < 0)."""
        if self.discount is not None:
            return self.discount
        if self.usd_per_node_hour is None:
            return 0.0  # dated offers only (``weeks``), none undated
        return 1.0 - self.usd_per_node_hour / od_usd_per_node_hour if od_usd_per_node_hour > 0 else 0.0


@dataclass(frozen=True)
class Figure:
    """The figure a commitment on one pool rests on: its discount, and the row it came from."""

    discount: float
    source: str
    date: str
    verified: bool
    checked: str
    per_pool: bool  # from a ``rates`` row (else the term's own figure)
    usd_per_node_hour: float | None = None
    weeks: Mapping[int, float] | None = None  # dated offers: start week -> USD per node-hour (only these weeks)


@dataclass(frozen=True)
class Book:
    """Terms by id, per-pool rates, quota lead weeks by cloud, availability (``spot``/``on_demand`` by cloud,
    per pool ``(cloud, region, instance type)``, and spot nodes to expect where no quota row exists), the rule
    for terms past the horizon, and where each figure came from."""

    terms: tuple[Term, ...]
    quota_lead_weeks: Mapping[str, int]
    spot_availability: Mapping[str, float]
    on_demand_availability: Mapping[str, float]
    pools: Mapping[tuple[str, str, str], tuple[float | None, float | None]]  # (spot, on-demand) availability
    sources: tuple[str, ...] = ()
    rates: Mapping[tuple[str, str | None, str], Rate] = field(default_factory=dict)  # (term, region, type)
    spot_nodes_without_quota: Mapping[str, float] = field(default_factory=dict)
    beyond_horizon: str = "last-weeks"
    beyond_horizon_weeks: int = 4
    notes: Mapping[str, str] = field(default_factory=dict)  # what each assumption rests on, by section

    def availability(self, cloud: str, region: str, instance_type: str, capacity: str) -> float:
        spot, od = self.pools.get((cloud, region, instance_type), (None, None))
        if capacity == "spot":
            return spot if spot is not None else self.spot_availability.get(cloud, 1.0)
        return od if od is not None else self.on_demand_availability.get(cloud, 1.0)

    def figure(self, term: Term, region: str, instance_type: str, od_usd_per_node_hour: float) -> Figure:
        """The figure ``term`` has on one pool: its ``rates`` row for that region, else for every region, else
        the term's own discount."""
        rate = self.rates.get((term.id, region, instance_type)) or self.rates.get((term.id, None, instance_type))
        if rate is None:
            return Figure(term.discount, term.source, term.date, term.verified, term.checked, False)
        return Figure(rate.discount_off(od_usd_per_node_hour), rate.source, rate.date, rate.verified, rate.checked,
                      True, rate.usd_per_node_hour, rate.weeks)


# ------------------------------------------------------------------------------------------------ parsing


def _num(value: Any, field: str, src: str, lo: float = 0.0, hi: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
            or not lo <= float(value) <= hi:
        raise InputError(field, f"must be a number from {lo:g} to {hi:g}, got {shown(value)}", source=src)
    return float(value)


def _int(value: Any, field: str, src: str, lo: int = 0, hi: int = 10**6) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise InputError(field, f"must be a whole number from {lo} to {hi}, got {shown(value)}", source=src)
    return int(value)


def _bool(value: Any, field: str, src: str) -> bool:
    if not isinstance(value, bool):
        raise InputError(field, f"must be true or false, got {shown(value)}", source=src)
    return value


def _text(value: Any, field: str, src: str, *, blank: bool = True) -> str:
    if value is None and blank:
        return ""
    if isinstance(value, dt.date):  # YAML reads an unquoted 2026-11-29 as a date
        return value.isoformat()
    if not isinstance(value, str) or (not blank and not value.strip()):
        raise InputError(field, f"must be {'a' if blank else 'a non-empty'} text, got {shown(value)}", source=src)
    return value


def _date(value: Any, field: str, src: str) -> str:
    text = _text(value, field, src)
    if text:
        try:
            dt.date.fromisoformat(text[:10])
        except ValueError:
            raise InputError(field, f"must be an ISO date such as 2026-11-29, got {shown(value)}", source=src) from None
    return text


def _mapping(value: Any, field: str, src: str, what: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InputError(field, f"must be a mapping ({what}), got {shown(value)}", source=src)
    return value


def _list(value: Any, field: str, src: str, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InputError(field, f"must be a list ({what}), got {shown(value)}", source=src)
    return value


def _term(row: Mapping[str, Any], where: str, src: str) -> Term:
    for f in row:
        if f not in TERM_FIELDS:
            raise InputError(f"{where}.{f}", "is not a term field; fields: " + ", ".join(TERM_FIELDS), source=src)
    for f in REQUIRED_TERM_FIELDS:
        if f not in row:
            raise InputError(f"{where}.{f}", "is missing (every term needs " + ", ".join(REQUIRED_TERM_FIELDS) + ")",
                             source=src)
    tid = _text(row["id"], f"{where}.id", src, blank=False)
    if row["kind"] not in KINDS:
        raise InputError(f"{where}.kind", f"must be one of {', '.join(KINDS)}, got {shown(row['kind'])}", source=src)
    if row["payment"] not in PAYMENTS:
        raise InputError(f"{where}.payment", f"must be upfront or monthly, got {shown(row['payment'])}", source=src)
    if row["cloud"] not in CLOUDS:
        raise InputError(f"{where}.cloud", f"must be aws or gcp, got {shown(row['cloud'])}", source=src)
    durations = row["durations_weeks"]
    if not isinstance(durations, list) or not durations:
        raise InputError(f"{where}.durations_weeks", f"must be a non-empty list of weeks, got {shown(durations)}",
                         source=src)
    accels = row["accelerators"]
    if not isinstance(accels, list) or not all(isinstance(a, str) for a in accels):
        raise InputError(f"{where}.accelerators", f"must be a list of accelerator names, got {shown(accels)}",
                         source=src)
    scope = row.get("scope", "pool")
    if row["kind"] == "savings-plan":
        scope = row.get("scope", "family-region")
        if scope not in ("family-region", "all"):
            raise InputError(f"{where}.scope", f"a savings-plan covers family-region or all, got {shown(scope)}",
                             source=src)
    elif scope != "pool":
        raise InputError(f"{where}.scope", f"only a savings-plan has a scope (family-region or all); a "
                         f"{row['kind']} is bought for one pool, got {shown(scope)}", source=src)
    within = row["start_within_weeks"]
    return Term(
        id=tid, cloud=row["cloud"], kind=row["kind"],
        discount=_num(row["discount"], f"{where}.discount", src, 0.0, 0.99),
        accelerators=tuple(accels),
        durations_weeks=tuple(_int(d, f"{where}.durations_weeks", src, 1, 520) for d in durations),
        start_within_weeks=None if within is None else _int(within, f"{where}.start_within_weeks", src, 0, 520),
        start_every_weeks=_int(row["start_every_weeks"], f"{where}.start_every_weeks", src, 1, 520),
        lead_weeks=_int(row["lead_weeks"], f"{where}.lead_weeks", src, 0, 520),
        max_nodes=_int(row["max_nodes"], f"{where}.max_nodes", src, 1),
        guarantees_capacity=_bool(row["guarantees_capacity"], f"{where}.guarantees_capacity", src),
        uses_quota=_bool(row["uses_quota"], f"{where}.uses_quota", src),
        payment=row["payment"], source=_text(row["source"], f"{where}.source", src, blank=False),
        note=_text(row.get("note"), f"{where}.note", src),
        min_gpus_per_node=_int(row.get("min_gpus_per_node", 1), f"{where}.min_gpus_per_node", src, 1, 64),
        verified=_bool(row.get("verified", True), f"{where}.verified", src),
        checked=_text(row.get("checked"), f"{where}.checked", src),
        date=_date(row.get("date"), f"{where}.date", src),
        scope=scope)


def _rate(row: Any, where: str, src: str, terms: Mapping[str, Term]) -> Rate:
    if not isinstance(row, Mapping):
        raise InputError(where, "must be a mapping: {term, instance_type, region, discount or usd_per_node_hour, "
                         "source, date}", source=src)
    for f in row:
        if f not in RATE_FIELDS:
            raise InputError(f"{where}.{f}", "is not a rate field; fields: " + ", ".join(RATE_FIELDS), source=src)
    term = _text(row.get("term"), f"{where}.term", src, blank=False)
    if term not in terms:
        raise InputError(f"{where}.term", f"names no term ({shown(term)}); terms: " + ", ".join(sorted(terms)),
                         source=src)
    has_d, has_p = row.get("discount") is not None, row.get("usd_per_node_hour") is not None
    if has_d == has_p:
        raise InputError(where, "give exactly one of discount (fraction off on-demand) and usd_per_node_hour",
                         source=src)
    region = row.get("region")
    return Rate(
        term=term, instance_type=_text(row.get("instance_type"), f"{where}.instance_type", src, blank=False),
        region=None if region is None else _text(region, f"{where}.region", src, blank=False),
        discount=_num(row["discount"], f"{where}.discount", src, -1.0, 0.99) if has_d else None,
        usd_per_node_hour=_num(row["usd_per_node_hour"], f"{where}.usd_per_node_hour", src, 0.0, 1e6) if has_p
        else None,
        source=_text(row.get("source"), f"{where}.source", src, blank=False),
        date=_date(row.get("date"), f"{where}.date", src),
        verified=_bool(row.get("verified", True), f"{where}.verified", src),
        checked=_text(row.get("checked"), f"{where}.checked", src), note=_text(row.get("note"), f"{where}.note", src))


def _cloud_numbers(doc: Mapping[str, Any], field: str, src: str, lo: float, hi: float) -> dict[str, float]:
    out: dict[str, float] = {}
    for cloud, v in doc.items():
        if cloud in ("source", "note"):
            continue
        if cloud not in CLOUDS:
            raise InputError(f"{field}.{cloud}", "is not a cloud (aws, gcp; source and note may say where the "
                             "figures come from)", source=src)
        out[str(cloud)] = _num(v, f"{field}.{cloud}", src, lo, hi)
    return out


def parse_book(doc: Any, src: str, base: Book | None = None) -> Book:
    """The commitments document ``doc`` (from ``src``), over ``base`` when it is a rates file. Every field is
    checked by type; a term id or a rate row given twice in one document is refused."""
    if not isinstance(doc, Mapping):
        raise InputError("terms", "the file must be a mapping with terms:, rates:, quota_lead_weeks:, "
                         f"availability:, pools: (got {shown(doc)})", source=src)
    for f in doc:
        if f not in TOP_FIELDS:
            raise InputError(str(f), "is not a section of a commitments file; sections: " + ", ".join(TOP_FIELDS),
                             source=src)
    if doc.get("schema", SCHEMA) != SCHEMA:
        raise InputError("schema", f"must be {SCHEMA}, got {shown(doc.get('schema'))}", source=src)
    rows: dict[str, dict[str, Any]] = {}
    if base is not None:
        for t in base.terms:
            rows[t.id] = {f: getattr(t, f) for f in TERM_FIELDS}
            rows[t.id]["accelerators"] = list(t.accelerators)
            rows[t.id]["durations_weeks"] = list(t.durations_weeks)
    seen: dict[str, int] = {}  # id -> its row in this document
    for i, row in enumerate(_list(doc.get("terms"), "terms", src, "term rows")):
        if not isinstance(row, Mapping) or "id" not in row:
            raise InputError(f"terms[{i}].id", "every term row needs an id", source=src)
        tid = _text(row["id"], f"terms[{i}].id", src, blank=False)
        if tid in seen:
            raise InputError(f"terms[{i}].id", f"{tid!r} is given twice in this file; one row per term (merge "
                             "the two)", source=src)
        seen[tid] = i
        rows[tid] = {**rows.get(tid, {}), **row}
    terms = tuple(_term(r, f"terms[{seen[tid]}]" if tid in seen else f"term {tid}", src) for tid, r in rows.items())
    by_id = {t.id: t for t in terms}
    rates: dict[tuple[str, str | None, str], Rate] = dict(base.rates) if base else {}
    mine: set[tuple[str, str | None, str]] = set()
    for i, row in enumerate(_list(doc.get("rates"), "rates", src, "per instance type figures of a term")):
        r = _rate(row, f"rates[{i}]", src, by_id)
        key = (r.term, r.region, r.instance_type)
        if key in mine:
            raise InputError(f"rates[{i}]", f"{r.term} {r.instance_type} {r.region or 'every region'} is given "
                             "twice in this file", source=src)
        mine.add(key)
        rates[key] = r
    lead = dict(base.quota_lead_weeks) if base else {}
    notes = dict(base.notes) if base else {}
    for cloud, v in _mapping(doc.get("quota_lead_weeks"), "quota_lead_weeks", src, "weeks by cloud").items():
        if cloud not in CLOUDS:
            raise InputError(f"quota_lead_weeks.{cloud}", "is not a cloud (aws, gcp)", source=src)
        weeks = v.get("weeks") if isinstance(v, Mapping) else v
        lead[str(cloud)] = _int(weeks, f"quota_lead_weeks.{cloud}", src, 0, 52)
    avail = _mapping(doc.get("availability"), "availability", src, "spot:, on_demand:, spot_nodes_without_quota:")
    for f in avail:
        if f not in ("spot", "on_demand", "spot_nodes_without_quota"):
            raise InputError(f"availability.{f}", "is not an availability entry (spot, on_demand, "
                             "spot_nodes_without_quota)", source=src)
    spot = dict(base.spot_availability) if base else {}
    od = dict(base.on_demand_availability) if base else {}
    spot_nodes = dict(base.spot_nodes_without_quota) if base else {}
    for name, target, hi in (("spot", spot, 1.0), ("on_demand", od, 1.0), ("spot_nodes_without_quota", spot_nodes,
                                                                               1e5)):
        section = _mapping(avail.get(name), f"availability.{name}", src, "a figure per cloud")
        target.update(_cloud_numbers(section, f"availability.{name}", src, 0.0, hi))
        if section.get("source") is not None:
            notes[f"availability.{name}"] = _text(section.get("source"), f"availability.{name}.source", src)
    pools = dict(base.pools) if base else {}
    for i, p in enumerate(_list(doc.get("pools"), "pools", src, "availability of one pool")):
        where = f"pools[{i}]"
        if not isinstance(p, Mapping) or not all(k in p for k in ("cloud", "region", "instance_type")):
            raise InputError(where, "needs cloud, region, instance_type (and spot/on_demand availability)", source=src)
        for f in p:
            if f not in POOL_FIELDS:
                raise InputError(f"{where}.{f}", "is not a pool field; fields: " + ", ".join(POOL_FIELDS), source=src)
        s = p.get("spot_availability")
        o = p.get("on_demand_availability")
        pools[(_text(p["cloud"], f"{where}.cloud", src, blank=False), _text(p["region"], f"{where}.region", src,
                                                                            blank=False),
               _text(p["instance_type"], f"{where}.instance_type", src, blank=False))] = (
            None if s is None else _num(s, f"{where}.spot_availability", src, 0.0, 1.0),
            None if o is None else _num(o, f"{where}.on_demand_availability", src, 0.0, 1.0))
    beyond = _mapping(doc.get("beyond_horizon"), "beyond_horizon", src, "rule:, weeks:")
    for f in beyond:
        if f not in ("rule", "weeks", "note"):
            raise InputError(f"beyond_horizon.{f}", "is not a beyond_horizon field (rule, weeks, note)", source=src)
    rule = beyond.get("rule", base.beyond_horizon if base else "last-weeks")
    if rule not in BEYOND_RULES:
        raise InputError("beyond_horizon.rule", f"must be one of {', '.join(BEYOND_RULES)}, got {shown(rule)}",
                         source=src)
    k = _int(beyond.get("weeks", base.beyond_horizon_weeks if base else 4), "beyond_horizon.weeks", src, 1, 52)
    return Book(terms, lead, spot, od, pools, (*(base.sources if base else ()), src), rates, spot_nodes, rule, k,
                notes)


@functools.cache
def commitment_book() -> Book:
    """The terms shipped with the package."""
    import yaml

    text = resources.files("placement.data").joinpath("commitments.yaml").read_text(encoding="utf-8")
    return parse_book(yaml.safe_load(text), "placement/data/commitments.yaml")


def with_rates(doc: Any, src: str) -> Book:
    """The shipped book with a user's negotiated rates file applied."""
    return parse_book(doc, src, commitment_book())


def with_live(book: Book, rates: Mapping[tuple[str, str | None, str], Rate], src: str) -> Book:
    """``book`` with figures read live from the clouds (:mod:`placement.live.commitments`) over its own."""
    return Book(book.terms, book.quota_lead_weeks, book.spot_availability, book.on_demand_availability, book.pools,
                (*book.sources, src), {**book.rates, **rates}, book.spot_nodes_without_quota, book.beyond_horizon,
                book.beyond_horizon_weeks, book.notes)
