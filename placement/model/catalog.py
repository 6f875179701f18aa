"""Offer catalogs: the embedded default, the one ``placement refresh`` writes, and SkyPilot-format CSVs.

Parsing takes text and returns data; reading files is left to the caller (the CLI) except for the
embedded catalog, which ships inside the package, and the refreshed one in the user's data directory
(:func:`default_catalog` picks the newer of the two).

Why one module: the embedded, refreshed and CSV catalogs share one :class:`Offer`, one set of row checks and one
price check.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
import operator
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from placement.console import paused_gc
from placement.errors import InputError, shown
from placement.model.numbers import (
    MAX_PRICE_USD,
    finite_number,
    median,
    non_negative_number,
    non_negative_price,
    positive_int,
)
from placement.model.packaged import packaged_text
from placement.model.shapes import CLOUDS, QuotaKeys, Shape, shape_book
from placement.model.text import csv_rows
from placement.model.zones import instance_type_mismatch, region_mismatch, zone_in_region

CATALOG_SCHEMA = "gpufleet.catalog/v1"
DATA_DIR_ENV = "GPUFLEET_DATA_DIR"  # overrides platformdirs.user_data_dir("gpufleet")
REFRESHED_NAME = "catalog.json"
# The build-time check of a gpufleet.catalog/v1 document (issue 36): a row's on-demand price must lie within
# these multiples of the median on-demand price of the same machine type across the catalog's regions, and its
# spot price must not exceed its on-demand price, unless the row carries a documented reason (``flag``).
# 0.6 / 1.67 (= 1 / 0.6): GCP's and AWS's dearest regions list a machine at up to ~1.45x its cheapest
# (a3-highgpu-8g: us-central1 $88.49, asia-northeast1 $126.64 in the billing catalogue); half-priced rows (a GPU
# left out of the sum) fall below 0.6.
MEDIAN_LOW, MEDIAN_HIGH = 0.6, 1.67
SKYPILOT_COLUMNS = ("InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB", "Price",
                    "SpotPrice", "Region", "AvailabilityZone")


@dataclass(frozen=True)
class Offer:
    """One instance type in one zone. Prices in USD per node-hour; ``None`` = not offered that way."""

    cloud: str
    region: str
    zone: str
    shape: Shape
    price: float | None
    spot_price: float | None
    # Live signals (issue: live data). ``placement_score`` is AWS's 1-10 spot placement score;
    # ``interruptions_per_hour`` overrides the job's spot interruption rate for this offer.
    placement_score: int | None = None
    interruptions_per_hour: float | None = None
    price_source: str = "catalog"
    # Calibration (issue 26): the posterior spot rate per node-hour from the user's measured reclaims
    # (placement.model.calibration) and the posterior's weight in node-hours (its Gamma rate parameter, for the 90th
    # percentile, worked out only for the candidates shown); it replaces the job's default rate (and a live one).
    calibrated_rate: float | None = None
    calibrated_weight: float | None = None
    # Provenance of the row's prices (issue 36): the id of its source in the catalog's ``row_sources``, the date
    # the prices held, and a documented reason when a price is suspect (unverified, an outlier against the same
    # machine elsewhere, spot above on-demand). A plan whose chosen price carries a flag says so.
    price_ref: str | None = None
    price_as_of: str | None = None
    price_flag: str | None = None

    @property
    def instance_type(self) -> str:
        return self.shape.name


_new = object.__new__
_set = object.__setattr__


def new_offer(cloud: str, region: str, zone: str, shape: Shape, price: float | None,
              spot_price: float | None) -> Offer:
    """``Offer(cloud, region, zone, shape, price, spot_price)`` with every other field at its default: the same
    object (fields, equality, hash, repr), built with one attribute write instead of the frozen ``__init__``'s
    fourteen (a catalog read from its cache builds tens of thousands). The other fields are not in the instance's
    ``__dict__``: they read the class attribute a dataclass keeps for each default (every default of
    :class:`Offer` is a plain value; ``tests/placement/model/test_catalog.py`` keeps it so), and a six-key dict is
    half the memory of fifteen."""
    o = _new(Offer)
    _set(o, "__dict__", {"cloud": cloud, "region": region, "zone": zone, "shape": shape, "price": price,
                         "spot_price": spot_price})
    return o


@dataclass(frozen=True)
class CatalogOrigin:
    """Where one cloud's offers came from: the embedded catalog (``as_of`` its date), a CSV file (``path``,
    ``modified`` its modification date; a CSV says nothing about when its prices held), and whether live
    answers were overlaid on them."""

    cloud: str
    source: str  # "embedded" | "refresh" (written by placement refresh, ``path`` where) | "csv"
    path: str | None = None
    as_of: str | None = None
    modified: str | None = None
    live: bool = False

    def label(self) -> str:
        """``embedded`` or the CSV path: what the catalog's combined ``source`` string is made of."""
        return self.path if self.source == "csv" and self.path else self.source

    def describe(self) -> str:
        """One cloud's provenance in words, e.g. ``aws embedded as of 2026-11-01``."""
        text = f"{self.cloud} {self.label()}"
        if self.source == "refresh" and self.path:
            text += f" ({self.path})"
        if self.as_of:
            text += f" as of {self.as_of}"
        elif self.modified:
            text += f" (file modified {self.modified})"
        return text + (" + live" if self.live else "")


@dataclass(frozen=True)
class Catalog:
    """A set of offers with where they came from and how old they are.

    ``origins`` says per cloud where its offers came from; ``source`` and ``as_of`` summarise them (the
    sources actually used, joined with ``+``; the oldest known as-of date, else ``unknown``).
    """

    offers: tuple[Offer, ...]
    as_of: str
    source: str
    origins: tuple[CatalogOrigin, ...] = ()
    # One line per harmless oddity of a user's catalog (a row given twice with the same prices), for stderr.
    warnings: tuple[str, ...] = field(default=(), compare=False)
    # What each row's ``price_ref`` names (a gpufleet.catalog/v1 document's ``row_sources``): source and date.
    row_sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    @functools.cached_property
    def offers_per_cloud(self) -> dict[str, int]:
        """How many offers each cloud has (counted once: a catalog does not change)."""
        return dict(collections.Counter(map(operator.attrgetter("cloud"), self.offers)))

    def provenance(self) -> tuple[CatalogOrigin, ...]:
        """The per-cloud origins; for a catalog built without them, one per cloud present, from ``source``."""
        if self.origins:
            return self.origins
        clouds = sorted(self.offers_per_cloud)
        return tuple(CatalogOrigin(cloud=c, source=self.source, as_of=self.as_of) for c in clouds)

    def merged(self, other: Catalog, clouds: Iterable[str]) -> Catalog:
        """This catalog with every offer of ``clouds`` replaced by ``other``'s."""
        replaced = set(clouds)
        keep = tuple(o for o in self.offers if o.cloud not in replaced)
        origins = tuple(o for o in self.provenance() if o.cloud not in replaced)
        origins += tuple(o for o in other.provenance() if o.cloud in replaced)
        # The counts per cloud follow from the two catalogs' own (not counted again over every offer).
        counts = collections.Counter({c: n for c, n in self.offers_per_cloud.items() if c not in replaced})
        counts.update(other.offers_per_cloud)
        merged = with_origins(keep + other.offers, tuple(sorted(origins, key=lambda o: o.cloud)), counts)
        return with_counts(dataclasses.replace(merged, warnings=self.warnings + other.warnings,
                                               row_sources={**self.row_sources, **other.row_sources}), counts)


def with_origins(offers: tuple[Offer, ...], origins: tuple[CatalogOrigin, ...],
                 counts: Mapping[str, int] | None = None) -> Catalog:
    """A catalog whose ``source`` / ``as_of`` summarise ``origins`` (only clouds that have offers count).
    ``counts``: the offers per cloud, when the caller knows them exactly (a catalog read from a cache entry or
    merged from two whose counts are known), so tens of thousands of offers are not walked again to find the
    clouds present (:func:`with_counts` then gives the catalog them)."""
    present = {o.cloud for o in offers} if counts is None else {c for c, n in counts.items() if n}
    used = tuple(o for o in origins if o.cloud in present) or origins
    dates = sorted(o.as_of for o in used if o.as_of)
    source = "+".join(dict.fromkeys(o.label() for o in used))
    if any(o.live for o in used):
        source += "+live"
    return Catalog(offers=offers, as_of=dates[0] if dates else "unknown", source=source, origins=used)


def with_counts(catalog: Catalog, counts: Mapping[str, int]) -> Catalog:
    """``catalog`` with :attr:`Catalog.offers_per_cloud` already known (``counts``, exact: the caller's
    promise); the same catalog (``dataclasses.replace`` forgets it)."""
    catalog.__dict__["offers_per_cloud"] = {c: n for c, n in counts.items() if n}  # the cached_property's slot
    return catalog


def _price(value: Any, field: str, source: str) -> float | None:
    if value is None or value == "" or (isinstance(value, str) and not value.strip()):
        return None
    price = finite_number(value, field, source=source, what="a price in USD per hour or blank")
    if not 0 <= price <= MAX_PRICE_USD:  # the check of non_negative_price, inline: two prices on every row
        return non_negative_price(value, field, source=source)
    return price + 0.0


def adhoc_shape(cloud: str, name: str, accelerator: str, gpus: int, vcpus: int, memory_gib: float) -> Shape:
    """A shape the shape data does not know (from a user's catalog): single-node, quota unknown."""
    return Shape(name=name, cloud=cloud, accelerator=shape_book().canonical_accelerator(accelerator),  # type: ignore[arg-type]
                 gpus=gpus, gpu_memory_gib=0, vcpus=vcpus, memory_gib=int(memory_gib), fabric="none",
                 fabric_nics=0, quota=QuotaKeys(unit="gpu", on_demand=None, spot=None))


def _where_check(cloud: str, itype: str, region: str, zone: str, shape: Shape | None, where: str,
                 source: str) -> None:
    """Refuse a row that cannot be ``cloud``'s: a shape, region or zone of the other cloud, or a zone of another
    region (a GCP catalog given as ``--catalog aws=...`` would otherwise be placed as AWS)."""
    if shape is not None and shape.cloud != cloud:
        raise InputError(f"InstanceType ({where})", f"{shown(itype)} is a {shape.cloud} machine type in "
                         f"placement/data/shapes.yaml, not {cloud}: this looks like the {shape.cloud} catalog, given "
                         f"as --catalog {cloud}=; give it as --catalog {shape.cloud}={_flag_path(source)}",
                         source=source)
    flag = f"the file given as --catalog {cloud}= holds another cloud's rows; pass each cloud's catalog as " \
           "--catalog aws=FILE or --catalog gcp=FILE"
    if shape is None and (why := instance_type_mismatch(cloud, itype)):
        raise InputError(f"InstanceType ({where})", f"{why}: {flag}", source=source)
    if why := region_mismatch(cloud, region):
        raise InputError(f"Region ({where})", f"{why}: {flag}", source=source)
    if zone != region and not zone_in_region(cloud, zone, region):
        raise InputError(f"AvailabilityZone ({where})", f"{shown(zone)} is not a zone of {cloud} region {region} "
                         "(AWS: a zone ID like use1-az4 or a name like us-east-1a; GCP: like us-central1-a)",
                         source=source)


def _flag_path(source: str) -> str:
    """``source`` as the FILE of a ``--catalog CLOUD=FILE`` fix: the path when it is short, else ``FILE``."""
    return source if 0 < len(source) <= 80 and not any(c.isspace() for c in source) else "FILE"


def _add_offer(seen: dict[tuple[str, str, str], Offer], offer: Offer, field: str, source: str,
               warnings: list[str]) -> None:
    """Keep one offer per (instance type, region, zone), in the order first seen: a row given twice with the
    same prices is a warning and kept once; with different prices it is ambiguous and refused."""
    key = (offer.instance_type, offer.region, offer.zone)
    first = seen.get(key)
    if first is None:
        seen[key] = offer
        return
    if (first.price, first.spot_price) != (offer.price, offer.spot_price):
        raise InputError(field, f"{shown(offer.instance_type)} in {shown(offer.zone)} is listed twice with different "
                         f"prices ({_usd(first)} and {_usd(offer)}); keep one row", source=source)
    warnings.append(f"{source}: {field}: {shown(offer.instance_type)} in {shown(offer.zone)} is listed twice with "
                    "the same prices; using it once")


def _usd(o: Offer) -> str:
    return f"{o.price if o.price is not None else '-'}/{o.spot_price if o.spot_price is not None else '-'}"


def _cell_price(text: str, column: str, line: int, source: str) -> float | None:
    """A price cell of ``column`` on ``line``: blank is None (not offered that way), else what :func:`_price`
    accepts. The common case (a plain number in range) takes one ``float()``; anything else goes through the
    full check."""
    if not text:
        return None
    try:
        price = float(text)
    except ValueError:
        return _price(text, f"{column} (line {line})", source)
    if 0 <= price <= MAX_PRICE_USD:  # False for nan; inf is above the cap
        return price + 0.0  # -0.0 -> 0.0
    return _price(text, f"{column} (line {line})", source)


class _Rows:
    """The per-row checks of :func:`parse_skypilot_csv`, remembered: a catalog repeats each machine (type,
    accelerator, count, vCPUs, memory) and each (region, zone) on thousands of rows, so each distinct one is
    checked in full once and later rows look it up. A row the memo does not cover gets every check in order."""

    def __init__(self, cloud: str, source: str) -> None:
        self.cloud, self.source = cloud, source
        self.book = shape_book()
        self.adhoc: dict[str, Shape] = {}
        self.machines: dict[tuple[str, str, str, str, str], Shape] = {}
        self.places: dict[tuple[str, str], tuple[str, str]] = {}

    def check(self, line: int, cells: tuple[str, str, str, str, str], place: tuple[str, str]
              ) -> tuple[Shape, str, str]:
        """Every check of one row (``cells``: type, accelerator, count, vCPUs, memory; ``place``: region, zone)
        in the order the messages promise: names, cloud, region, zone, numbers. Its shape, region and zone."""
        cloud, source, where = self.cloud, self.source, f"line {line}"
        raw_type, accel, raw_count, raw_vcpus, raw_memory = cells
        itype = raw_type.strip()
        if not itype:
            raise InputError(f"InstanceType ({where})", "is blank", source=source)
        region = place[0].strip()
        if not region:
            raise InputError(f"Region ({where})", "is blank", source=source)
        zone = place[1].strip() or region
        known = self.book.get(itype)
        _where_check(cloud, itype, region, zone, known, where, source)
        self.places[place] = (region, zone)
        count = finite_number(raw_count, f"AcceleratorCount ({where})", source=source,
                              what="a whole number of GPUs per node")
        if 0 < count < 1:
            raise InputError(f"AcceleratorCount ({where})", f"{itype} has {count:g} of a GPU: a fractional-GPU "
                             "instance cannot host a training job; remove its rows", source=source)
        gpus = positive_int(raw_count, f"AcceleratorCount ({where})", source=source,
                            what="a whole number of GPUs per node")
        blank = [c for c, v in (("vCPUs", raw_vcpus), ("MemoryGiB", raw_memory)) if not v.strip()]
        if known is None and blank:
            raise InputError(f"{min(blank)} ({where})", "is blank; a machine type not in "
                             "placement/data/shapes.yaml needs vCPUs and MemoryGiB", source=source)
        vcpus = None if "vCPUs" in blank else positive_int(raw_vcpus, f"vCPUs ({where})", source=source)
        memory = None if "MemoryGiB" in blank else non_negative_number(raw_memory, f"MemoryGiB ({where})",
                                                                       source=source, what="GiB of memory")
        if known is not None:
            shape = known
            if gpus != known.gpus:
                raise InputError(f"AcceleratorCount ({where})", f"{itype} has {known.gpus} GPUs per node "
                                 f"(placement/data/shapes.yaml), not {gpus}", source=source)
        else:
            shape = self.adhoc.get(itype) or adhoc_shape(cloud, itype, accel.strip(), gpus, vcpus or 1,
                                                         memory or 0.0)
            if shape.gpus != gpus:
                raise InputError(f"AcceleratorCount ({where})", f"{itype} has {shape.gpus} GPUs per node on an "
                                 f"earlier line, {gpus} here", source=source)
            self.adhoc[itype] = shape
        self.machines[cells] = shape
        return shape, region, zone


def parse_skypilot_csv(text: str, cloud: str, source: str, modified: str | None = None) -> Catalog:
    """Parse a SkyPilot ``vms.csv`` (extra columns ignored; blank price = not offered that way).

    Rows without an accelerator are skipped: they are CPU machines. ``source`` is the file's path,
    ``modified`` its modification date when the caller knows it. Every number is checked (counts positive
    whole numbers, prices finite and non-negative) and every row must belong to ``cloud``.
    """
    if cloud not in CLOUDS:
        raise InputError("--catalog", f"cloud must be one of {', '.join(CLOUDS)}, got {shown(cloud)}", source=source)
    header, rows = csv_rows(text, source, SKYPILOT_COLUMNS, " (a SkyPilot catalog)")
    with paused_gc():
        seen, warnings = _skypilot_offers(rows, header, cloud, source)
    if not seen:
        raise InputError("--catalog", "has no GPU rows (no row with an AcceleratorName)", source=source)
    catalog = with_origins(tuple(seen.values()),
                           (CatalogOrigin(cloud=cloud, source="csv", path=source, modified=modified),))
    return dataclasses.replace(catalog, warnings=tuple(warnings))


def _skypilot_offers(rows: Iterable[tuple[int, list[str]]], header: list[str], cloud: str, source: str
                     ) -> tuple[dict[tuple[str, str, str], Offer], list[str]]:
    """The offers of a SkyPilot CSV's rows by (instance type, region, zone), in file order, and the warnings."""
    i_type, i_accel, i_count, i_vcpus, i_memory, i_price, i_spot, i_region, i_zone = map(header.index,
                                                                                         SKYPILOT_COLUMNS)
    checks = _Rows(cloud, source)
    machines, places = checks.machines, checks.places
    seen: dict[tuple[str, str, str], Offer] = {}
    warnings: list[str] = []
    for line, row in rows:
        accel = row[i_accel]
        if not accel or accel.isspace():
            continue  # a CPU machine
        cells = (row[i_type], accel, row[i_count], row[i_vcpus], row[i_memory])
        place = (row[i_region], row[i_zone])
        shape = machines.get(cells)
        region_zone = places.get(place)
        if shape is None or region_zone is None:
            shape, region, zone = checks.check(line, cells, place)
        else:
            region, zone = region_zone
        offer = new_offer(cloud, region, zone, shape, _cell_price(row[i_price], "Price", line, source),
                          _cell_price(row[i_spot], "SpotPrice", line, source))
        key = (shape.name, region, zone)
        if key in seen:
            _add_offer(seen, offer, f"line {line}", source, warnings)
        else:
            seen[key] = offer
    return seen, warnings


def _text(row: Mapping[str, Any], key: str, field: str, source: str) -> str:
    value = row.get(key)
    if not isinstance(value, str) or not value.strip():
        raise InputError(field, f"must be a non-empty string, got {shown(value)}", source=source)
    return value.strip()


def _optional_text(row: Mapping[str, Any], key: str, field: str, source: str) -> str | None:
    value = row.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise InputError(field, f"must be a non-empty string when given, got {shown(value)}", source=source)
    return value.strip()


def parse_catalog_json(doc: Any, source: str, path: str | None = None, *, refuse_suspect: bool | None = None
                       ) -> Catalog:
    """Parse a ``gpufleet.catalog/v1`` document (the embedded catalog's format), with the checks of a CSV.
    ``source`` names it in the provenance (``embedded``, ``refresh``), ``path`` is the file it was read from.

    Each row may name its prices' ``source`` (an id of the document's ``row_sources``), the date they held
    (``as_of``) and a documented reason they are suspect (``flag``). The price check of :func:`price_problems`
    refuses an unflagged suspect row of the embedded catalog (``refuse_suspect``, default: only ``embedded``);
    elsewhere (a refreshed catalog written before the check) such a row is flagged with the problem instead."""
    if not isinstance(doc, dict) or doc.get("schema") != CATALOG_SCHEMA:
        raise InputError("schema", f"must be {CATALOG_SCHEMA!r}", source=source)
    rows = doc.get("offers") or []
    if not isinstance(rows, list):
        raise InputError("offers", "must be a list of offers", source=source)
    refs = doc.get("row_sources") or {}
    if not isinstance(refs, Mapping):
        raise InputError("row_sources", "must be a mapping of source id -> what it is (with its date)",
                         source=source)
    book = shape_book()
    seen: dict[tuple[str, str, str], Offer] = {}
    warnings: list[str] = []
    for i, row in enumerate(rows):
        where = f"offers[{i}]"
        if not isinstance(row, Mapping):
            raise InputError(where, "must be a mapping", source=source)
        cloud = _text(row, "cloud", f"{where}.cloud", source)
        if cloud not in CLOUDS:
            raise InputError(f"{where}.cloud", f"must be one of {', '.join(CLOUDS)}, got {shown(cloud)}", source=source)
        itype = _text(row, "instance_type", f"{where}.instance_type", source)
        shape = book.get(itype)
        if shape is None or shape.cloud != cloud:
            raise InputError(f"{where}.instance_type", f"unknown {cloud} shape {shown(itype)}; add it to "
                             "placement/data/shapes.yaml first", source=source)
        region = _text(row, "region", f"{where}.region", source)
        zone = _text(row, "zone", f"{where}.zone", source)
        if why := region_mismatch(cloud, region):
            raise InputError(f"{where}.region", why, source=source)
        if zone != region and not zone_in_region(cloud, zone, region):
            raise InputError(f"{where}.zone", f"{shown(zone)} is not a zone of {region}", source=source)
        ref = _optional_text(row, "source", f"{where}.source", source)
        if ref is not None and refs and ref not in refs:
            raise InputError(f"{where}.source", f"{shown(ref)} is not an id of row_sources", source=source)
        offer = Offer(cloud=cloud, region=region, zone=zone, shape=shape,
                      price=_price(row.get("price"), f"{where}.price", source),
                      spot_price=_price(row.get("spot_price"), f"{where}.spot_price", source),
                      price_ref=ref, price_as_of=_optional_text(row, "as_of", f"{where}.as_of", source),
                      price_flag=_optional_text(row, "flag", f"{where}.flag", source))
        _add_offer(seen, offer, where, source, warnings)
    offers = tuple(seen.values())
    refuse = source == "embedded" if refuse_suspect is None else refuse_suspect
    problems = price_problems(offers)
    if problems and refuse:
        index = {id(o): i for i, o in enumerate(offers)}
        offer, problem = problems[0]
        raise InputError(f"offers[{index[id(offer)]}]", f"{offer.cloud} {offer.instance_type} in {offer.zone}: "
                         f"{problem}; correct the price from the cloud's own figures, or give the row a flag "
                         f"saying why it stands ({len(problems)} such row{'s' if len(problems) != 1 else ''})",
                         source=source)
    if problems:
        flagged = {id(o): p for o, p in problems}
        offers = tuple(dataclasses.replace(o, price_flag=f"flagged on load: {flagged[id(o)]}") if id(o) in flagged
                       else o for o in offers)
    as_of = str(doc.get("as_of", "unknown"))
    clouds = sorted({o.cloud for o in offers}) or list(CLOUDS)
    # The document's date is when the catalog was assembled and checked; each row's own date (``as_of``) says when
    # its figures held (the JSON of a plan gives the chosen one's, ``price_as_of``).
    catalog = with_origins(tuple(offers), tuple(CatalogOrigin(cloud=c, source=source, path=path, as_of=as_of)
                                                for c in clouds))
    return dataclasses.replace(catalog, warnings=tuple(warnings), row_sources={str(k): str(v) for k, v in refs.items()})


def machine_medians(offers: Iterable[Offer]) -> dict[tuple[str, str], float]:
    """(cloud, instance type) -> the median on-demand USD/h over the regions that list it (a region counts once,
    at its highest zone price: on-demand prices are per region)."""
    per_region: dict[tuple[str, str, str], float] = {}
    for o in offers:
        if o.price is not None:
            key = (o.cloud, o.instance_type, o.region)
            per_region[key] = max(per_region.get(key, o.price), o.price)
    values: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
    for (cloud, itype, _), price in per_region.items():
        values[(cloud, itype)].append(price)
    return {k: median(v) for k, v in values.items()}


def price_problem(offer: Offer, median: float | None) -> str | None:
    """What is suspect about one row's prices, or None: spot above on-demand, or on-demand outside
    [:data:`MEDIAN_LOW`, :data:`MEDIAN_HIGH`] x ``median`` (the same machine's median over regions)."""
    if offer.price is not None and offer.spot_price is not None and offer.spot_price > offer.price:
        return f"spot ${offer.spot_price:,.4g}/h is above on-demand ${offer.price:,.4g}/h"
    if offer.price is not None and median and not MEDIAN_LOW * median <= offer.price <= MEDIAN_HIGH * median:
        return (f"on-demand ${offer.price:,.4g}/h is {offer.price / median:.2f}x the median ${median:,.4g}/h of "
                f"{offer.instance_type} across the catalog's regions (outside {MEDIAN_LOW:g}-{MEDIAN_HIGH:g}x)")
    return None


def price_problems(offers: Sequence[Offer]) -> list[tuple[Offer, str]]:
    """Every unflagged row :func:`price_problem` finds suspect, with the problem, in row order."""
    medians = machine_medians(offers)
    out = []
    for o in offers:
        if o.price_flag:
            continue
        problem = price_problem(o, medians.get((o.cloud, o.instance_type)))
        if problem:
            out.append((o, problem))
    return out


def catalog_document(catalog: Catalog, as_of: str, sources: list[str],
                     row_sources: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The ``gpufleet.catalog/v1`` document for ``catalog`` (what ``placement refresh`` writes): each row with
    its prices' source id, date and flag when it has them."""
    rows = sorted(catalog.offers, key=lambda o: (o.cloud, o.instance_type, o.region, o.zone))
    doc: dict[str, Any] = {
        "schema": CATALOG_SCHEMA,
        "as_of": as_of,
        "currency": "USD",
        "price_unit": "node-hour",
        "sources": sources,
    }
    if row_sources:
        doc["row_sources"] = dict(row_sources)
    doc["offers"] = [_row(o) for o in rows]
    return doc


def _row(o: Offer) -> dict[str, Any]:
    row: dict[str, Any] = {"cloud": o.cloud, "region": o.region, "zone": o.zone, "instance_type": o.instance_type,
                           "price": o.price, "spot_price": o.spot_price}
    for key, value in (("source", o.price_ref), ("as_of", o.price_as_of), ("flag", o.price_flag)):
        if value:
            row[key] = value
    return row


def dump_catalog(doc: dict[str, Any]) -> str:
    """Serialise a catalog document with one offer per line, so refreshes diff cleanly."""
    head = {k: v for k, v in doc.items() if k != "offers"}
    lines = json.dumps(head, indent=2)[:-2]
    offers = ",\n".join("    " + json.dumps(o) for o in doc["offers"])
    return f'{lines},\n  "offers": [\n{offers}\n  ]\n}}\n'


@functools.cache
def embedded_catalog() -> Catalog:
    """The catalog shipped in ``placement/data/catalog.json``."""
    text = packaged_text("catalog.json")
    return parse_catalog_json(json.loads(text, parse_constant=reject_json_constant), source="embedded")


def reject_json_constant(name: str) -> None:
    """``json.loads`` hook: NaN, Infinity and -Infinity are not JSON, and not prices."""
    raise InputError("price", f"{name} is not a number JSON allows; prices must be finite")


def user_data_dir() -> Path:
    """Where ``placement refresh`` writes by default: ``$GPUFLEET_DATA_DIR``, else
    ``platformdirs.user_data_dir("gpufleet")`` (e.g. ``~/.local/share/gpufleet`` on Linux)."""
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_data_dir("gpufleet"))


def refreshed_catalog_path() -> Path:
    """The refreshed catalog's default path (it may not exist)."""
    return user_data_dir() / REFRESHED_NAME


@functools.lru_cache(maxsize=4)
def _refreshed(path: str, mtime_ns: int, size: int) -> Catalog:
    fix = "run `placement refresh` again or delete the file"
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh, parse_constant=reject_json_constant)
    except (OSError, ValueError, RecursionError) as exc:
        raise InputError("catalog", f"cannot read the refreshed catalog ({exc.__class__.__name__}); {fix}",
                         source=path) from None
    try:
        return parse_catalog_json(doc, source="refresh", path=path)
    except InputError as exc:
        raise InputError("catalog", f"the refreshed catalog is not valid ({exc}); {fix}", source=path) from None
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise InputError("catalog", f"the refreshed catalog is not valid ({exc.__class__.__name__}); {fix}",
                         source=path) from None


def default_catalog() -> Catalog:
    """The catalog commands use without ``--catalog``: the newer (by ``as_of``) of the embedded catalog and the
    one ``placement refresh`` wrote to :func:`refreshed_catalog_path`; the refreshed one on a tie (it was
    fetched live that day). Its provenance (``source`` ``refresh`` or ``embedded``) says which."""
    embedded = embedded_catalog()
    path = refreshed_catalog_path()
    try:
        st = path.stat()
    except OSError:
        return embedded
    refreshed = _refreshed(str(path), st.st_mtime_ns, st.st_size)
    return refreshed if refreshed.as_of >= embedded.as_of else embedded


# The per-row checks, for the parsed-catalog cache: an entry's rows are checked by the same rules as a CSV's.
RowChecks = _Rows
