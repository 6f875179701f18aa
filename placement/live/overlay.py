"""Apply live answers to a catalog and build the live quota table. Pure functions, no I/O.

Rules (for offers of the requested accelerators in regions that answered; everything else is untouched):
  * AWS offerings: a catalog zone where the shape is not offered is dropped; an offered zone the catalog
    lacks is added with the catalog's prices for that shape in that region (highest zone price),
    ``price_source`` ``catalog-region``.
  * AWS spot prices replace catalog spot prices per zone (``price_source`` ``aws-spot``).
  * AWS placement scores go on the offer; a low score raises its spot interruption rate (SCORE_RATES).
  * GCP accelerator types: as AWS offerings, by zone and GPU type.
  * GCP billing SKUs: a shape's price = gpus x GPU + vCPUs x Core + GiB x Ram + its bundled Local SSD when all
    are known, or gpus x the GPU-slice SKU for a fixed-machine family (A4) (``price_source`` ``gcp-billing``).
  * Quotas: AWS (limit from Service Quotas, usage from CloudWatch; a zero limit needs no usage),
    GCP (limit and usage from regions.get). A region whose answer is missing gets no entry, and so does
    an AWS quota whose usage class had no ``Complete`` CloudWatch result: unknown, never 0 usage.
  * Reservations (free nodes of a known shape): priced per node-hour at 0 when paid for either way (AWS
    Capacity Blocks, reservations under a commitment), else at the catalog's on-demand price of the shape
    in that zone, else in that region, else the highest on that cloud; a shape with no on-demand price
    anywhere in the catalog cannot be valued and is left out.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from placement.model.catalog import Catalog, Offer, with_origins
from placement.model.quotas import Quota, QuotaKey, QuotaTable, over_limit
from placement.model.shapes import Shape, shape_book

if TYPE_CHECKING:
    from placement.model.reservations import Reservation

# Placement score (1-10, AWS) -> spot interruptions per hour assumed for the offer (None: no change).
SCORE_RATES: tuple[tuple[int, float | None], ...] = ((8, None), (5, 0.1), (3, 0.25), (1, 0.5))


def score_rate(score: int) -> float | None:
    """Interruption rate for a placement score: >= 8 none, 5-7 0.1/h, 3-4 0.25/h, 1-2 0.5/h."""
    for floor, rate in SCORE_RATES:
        if score >= floor:
            return rate
    return SCORE_RATES[-1][1]


@dataclass
class LiveData:
    """What came back (only successful answers). Region keys are region names."""

    accelerators: set[str]
    aws_offerings: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # region -> type -> zone IDs
    aws_zone_ids: dict[str, dict[str, str]] = field(default_factory=dict)  # region -> zone name -> ID
    aws_spot_rows: dict[str, list[list[Any]]] = field(default_factory=dict)  # region -> [type, name, id, price]
    aws_scores: dict[str, dict[str, int]] = field(default_factory=dict)  # type -> zone ID -> score
    aws_quota_limits: dict[str, dict[str, float]] = field(default_factory=dict)  # region -> code -> vCPUs
    aws_usage: dict[str, dict[str, float]] = field(default_factory=dict)  # region -> class -> vCPUs
    aws_ondemand: dict[str, dict[str, float]] = field(default_factory=dict)  # type -> region -> USD/h
    gcp_quotas: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # region -> metric -> [lim, use]
    gcp_accel_zones: dict[str, list[str]] | None = None  # GPU type -> zones
    gcp_unit_prices: dict[str, dict[str, dict[str, list[float | None]]]] | None = None
    aws_reservations: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # region -> reservations
    gcp_reservations: list[dict[str, Any]] | None = None

    def aws_spot(self, region: str) -> dict[tuple[str, str], float] | None:
        """(type, zone ID) -> spot USD/h for a region that answered, else None."""
        rows = self.aws_spot_rows.get(region)
        if rows is None:
            return None
        names = self.aws_zone_ids.get(region, {})
        out: dict[tuple[str, str], float] = {}
        for itype, zname, zid, price in rows:
            zone = zid or names.get(zname)
            if zone:
                out[(itype, zone)] = float(price)
        return out


def gcp_machine_price(shape: Shape, region: str, units: dict[str, Any] | None, slot: int) -> float | None:
    """USD/h of one GCP machine from unit prices (slot 0 on-demand, 1 spot); None unless all parts are known: the
    GPUs, the family's cores and memory, and the bundled Local SSD (placement.live.gcp); a fixed-machine family
    (A4) is its GPU slices alone."""
    from placement.live.gcp import LOCAL_SSD_GIB, fixed_machine, host_stem

    if units is None:
        return None
    parts: list[tuple[Any, float]] = [(units["gpu"].get(shape.gke_accelerator, {}).get(region), shape.gpus)]
    if not fixed_machine(shape.name):
        stem = host_stem(shape.name)
        if stem is None:
            return None
        parts += [(units["core"].get(stem, {}).get(region), shape.vcpus),
                  (units["ram"].get(stem, {}).get(region), shape.memory_gib)]
        if shape.local_ssds:
            parts.append(((units.get("ssd") or {}).get("local", {}).get(region), shape.local_ssds * LOCAL_SSD_GIB))
    total = 0.0
    for pair, count in parts:
        if pair is None or pair[slot] is None:
            return None
        total += float(pair[slot]) * count
    return round(total, 4)


def _region_prices(offers: Iterable[Offer]) -> dict[tuple[str, str, str], tuple[float | None, float | None]]:
    """(cloud, region, type) -> highest (on-demand, spot) catalog price over its zones."""
    acc: dict[tuple[str, str, str], list[float | None]] = {}
    for o in offers:
        slot = acc.setdefault((o.cloud, o.region, o.instance_type), [None, None])
        for i, p in enumerate((o.price, o.spot_price)):
            if p is not None and (slot[i] is None or p > slot[i]):  # type: ignore[operator]
                slot[i] = p
    return {k: (v[0], v[1]) for k, v in acc.items()}


def _live_zones(data: LiveData, cloud: str, region: str, shape: Shape) -> set[str] | None:
    """Zones of ``region`` where live data says ``shape`` is offered; None when that is not known."""
    if cloud == "aws":
        by_type = data.aws_offerings.get(region)
        if by_type is None or shape.name not in by_type:
            return None
        return set(by_type[shape.name])
    if data.gcp_accel_zones is None or not shape.gke_accelerator:
        return None
    return {z for z in data.gcp_accel_zones.get(shape.gke_accelerator, []) if z.rsplit("-", 1)[0] == region}


def apply(catalog: Catalog, data: LiveData, *, new_pairs: bool = False) -> Catalog:
    """``catalog`` with live overlays (see module doc). ``new_pairs``: also add (region, shape) pairs the
    catalog lacks when live prices exist for them (``placement refresh``)."""
    book = shape_book()
    region_prices = _region_prices(catalog.offers)
    spot_cache: dict[str, dict[tuple[str, str], float] | None] = {}
    out: list[Offer] = []
    seen: dict[tuple[str, str, str], set[str]] = defaultdict(set)

    def overlay(o: Offer) -> Offer:
        price, spot, source = o.price, o.spot_price, o.price_source
        score: int | None = o.placement_score
        rate = o.interruptions_per_hour
        if o.cloud == "aws":
            od = data.aws_ondemand.get(o.instance_type, {}).get(o.region)
            if od is not None:
                price, source = od, "aws-pricing"
            if o.region not in spot_cache:
                spot_cache[o.region] = data.aws_spot(o.region)
            live_spot = (spot_cache[o.region] or {}).get((o.instance_type, o.zone))
            if live_spot is not None:
                spot = live_spot
                source = "aws-spot" if source == "catalog" else f"{source}+aws-spot"
            s = data.aws_scores.get(o.instance_type, {}).get(o.zone)
            if s is not None:
                score, rate = s, score_rate(s)
        else:
            units = data.gcp_unit_prices
            od_live = gcp_machine_price(o.shape, o.region, units, 0)
            spot_live = gcp_machine_price(o.shape, o.region, units, 1)
            if od_live is not None or spot_live is not None:
                price = od_live if od_live is not None else price
                spot = spot_live if spot_live is not None else spot
                source = "gcp-billing" if source == "catalog" else f"{source}+gcp-billing"
        return dataclasses.replace(o, price=price, spot_price=spot, price_source=source, placement_score=score,
                                   interruptions_per_hour=rate)

    for o in catalog.offers:
        if o.shape.accelerator not in data.accelerators:
            out.append(o)
            continue
        live = _live_zones(data, o.cloud, o.region, o.shape)
        if live is not None and o.zone not in live:
            continue  # the cloud says this shape is not offered in this zone (any more)
        seen[(o.cloud, o.region, o.instance_type)].add(o.zone)
        out.append(overlay(o))

    # Zones (and, for refresh, region/shape pairs) that live offerings list and the catalog lacks.
    regions = {("aws", r) for r in data.aws_offerings}
    if data.gcp_accel_zones is not None:
        regions |= {("gcp", z.rsplit("-", 1)[0]) for zs in data.gcp_accel_zones.values() for z in zs}
    for cloud, region in sorted(regions):
        for shape in sorted(book.for_cloud(cloud), key=lambda s: s.name):
            if shape.accelerator not in data.accelerators:
                continue
            live = _live_zones(data, cloud, region, shape)
            key = (cloud, region, shape.name)
            if not live:
                continue
            base = region_prices.get(key)
            if base is None and not new_pairs:
                continue  # no price known for this shape in this region: nothing to rank it by
            for zone in sorted(live - seen[key]):
                added = overlay(Offer(cloud=cloud, region=region, zone=zone, shape=shape,
                                      price=base[0] if base else None, spot_price=base[1] if base else None,
                                      price_source="catalog-region" if base else "live"))
                if added.price is None and added.spot_price is None:
                    continue
                out.append(added)
    answered = set()
    if data.aws_offerings or data.aws_spot_rows or data.aws_scores or data.aws_ondemand:
        answered.add("aws")
    if data.gcp_accel_zones is not None or data.gcp_unit_prices is not None:
        answered.add("gcp")
    origins = tuple(dataclasses.replace(o, live=o.live or o.cloud in answered) for o in catalog.provenance())
    return with_origins(tuple(out), origins)


def quotas(data: LiveData) -> QuotaTable:
    """The live quota table (see module doc)."""
    from placement.live.aws import CODE_USAGE_CLASS

    table: dict[QuotaKey, Quota] = {}
    warnings: list[str] = []
    for region, limits in data.aws_quota_limits.items():
        used = data.aws_usage.get(region)
        for code, limit in limits.items():
            cls = CODE_USAGE_CLASS.get(code)
            if used is not None and cls is not None and cls in used:
                table[("aws", region, code)] = Quota(limit=limit, usage=used[cls])
            elif limit <= 0:
                table[("aws", region, code)] = Quota(limit=0.0, usage=0.0)  # nothing to use, whatever the usage
    for region, metrics in data.gcp_quotas.items():
        for metric, (limit, usage) in metrics.items():
            table[("gcp", region, metric)] = Quota(limit=float(limit), usage=float(usage))
    for (cloud, region, key), q in sorted(table.items()):
        if q.usage > q.limit:  # headroom 0 (Quota.headroom), said once
            warnings.append(f"live {over_limit(cloud, region, key, q.limit, q.usage)}")
    return QuotaTable(table, warnings=tuple(warnings))


def _on_demand(offers: Iterable[Offer]) -> dict[tuple[str, ...], float]:
    """On-demand USD/h by (cloud, type, zone), (cloud, type, region) and (cloud, type): the highest seen."""
    out: dict[tuple[str, ...], float] = {}
    for o in offers:
        if o.price is None:
            continue
        for key in ((o.cloud, o.instance_type, "zone", o.zone), (o.cloud, o.instance_type, "region", o.region),
                    (o.cloud, o.instance_type)):
            if o.price > out.get(key, -1.0):
                out[key] = o.price
    return out


def reservations(data: LiveData, catalog: Catalog) -> tuple[Reservation, ...]:
    """Live reservations as :class:`Reservation` objects (see the module doc for the pricing rule)."""
    from placement.model.reservations import Reservation, parse_time

    book = shape_book()
    prices = _on_demand(catalog.offers)
    rows: list[tuple[str, str, dict[str, Any]]] = []
    for region, found in sorted(data.aws_reservations.items()):
        names = data.aws_zone_ids.get(region, {})
        for r in found:
            zone = r.get("zone_id") or names.get(r.get("zone") or "") or r.get("zone") or ""
            rows.append(("aws", region, {**r, "zone": zone}))
    for r in data.gcp_reservations or []:
        rows.append(("gcp", str(r["zone"]).rsplit("-", 1)[0], r))
    out = []
    for cloud, region, r in rows:
        shape = book.get(r["instance_type"])
        if shape is None or shape.cloud != cloud or not r.get("zone"):
            continue
        if r["kind"] == "capacity-block" or r.get("committed"):
            price: float | None = 0.0
        else:
            price = next((prices[k] for k in ((cloud, shape.name, "zone", r["zone"]),
                                              (cloud, shape.name, "region", region), (cloud, shape.name))
                          if k in prices), None)
        if price is None:
            continue
        ends = parse_time(r["ends"], "ends", cloud) if r.get("ends") else None
        out.append(Reservation(id=r["id"], cloud=cloud, region=region, zone=r["zone"], shape=shape,
                               count=int(r["count"]), usd_per_hour=price, ends=ends, source=cloud, kind=r["kind"]))
    return tuple(out)
