"""Offer catalogs: the embedded default, the one ``placement refresh`` writes, and SkyPilot-format CSVs.

Parsing takes text and returns data; reading files is left to the caller (the CLI) except for the
embedded catalog, which ships inside the package, and the refreshed one in the user's data directory
(:func:`default_catalog` picks the newer of the two).
"""

from __future__ import annotations

import collections
import csv
import functools
import io
import json
import operator
import os
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from placement.errors import InputError, non_negative
from placement.shapes import CLOUDS, QuotaKeys, Shape, shape_book

CATALOG_SCHEMA = "gpufleet.catalog/v1"
DATA_DIR_ENV = "GPUFLEET_DATA_DIR"  # overrides platformdirs.user_data_dir("gpufleet")
REFRESHED_NAME = "catalog.json"
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

    @property
    def instance_type(self) -> str:
        return self.shape.name


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
        return with_origins(keep + other.offers, tuple(sorted(origins, key=lambda o: o.cloud)))


def with_origins(offers: tuple[Offer, ...], origins: tuple[CatalogOrigin, ...]) -> Catalog:
    """A catalog whose ``source`` / ``as_of`` summarise ``origins`` (only clouds that have offers count)."""
    present = {o.cloud for o in offers}
    used = tuple(o for o in origins if o.cloud in present) or origins
    dates = sorted(o.as_of for o in used if o.as_of)
    source = "+".join(dict.fromkeys(o.label() for o in used))
    if any(o.live for o in used):
        source += "+live"
    return Catalog(offers=offers, as_of=dates[0] if dates else "unknown", source=source, origins=used)


def _price(value: Any, field: str, source: str) -> float | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return non_negative(value, field, source, what="a price in USD per hour or blank")


def adhoc_shape(cloud: str, name: str, accelerator: str, gpus: int, vcpus: int, memory_gib: float) -> Shape:
    """A shape the shape data does not know (from a user's catalog): single-node, quota unknown."""
    return Shape(name=name, cloud=cloud, accelerator=shape_book().canonical_accelerator(accelerator),  # type: ignore[arg-type]
                 gpus=gpus, gpu_memory_gib=0, vcpus=vcpus, memory_gib=int(memory_gib), fabric="none",
                 fabric_nics=0, quota=QuotaKeys(unit="gpu", on_demand=None, spot=None))


def parse_skypilot_csv(text: str, cloud: str, source: str, modified: str | None = None) -> Catalog:
    """Parse a SkyPilot ``vms.csv`` (extra columns ignored; blank price = not offered that way).

    Rows without an accelerator are skipped: they are CPU machines. ``source`` is the file's path,
    ``modified`` its modification date when the caller knows it.
    """
    if cloud not in CLOUDS:
        raise InputError("--catalog", f"cloud must be one of {', '.join(CLOUDS)}, got {cloud!r}", source=source)
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in SKYPILOT_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise InputError(missing[0], "column is missing; a SkyPilot catalog needs " + ",".join(SKYPILOT_COLUMNS),
                         source=source)
    book = shape_book()
    offers: list[Offer] = []
    adhoc: dict[str, Shape] = {}
    for line, row in enumerate(reader, start=2):
        accel = (row.get("AcceleratorName") or "").strip()
        if not accel:
            continue
        where = f"line {line}"
        itype = (row["InstanceType"] or "").strip()
        if not itype:
            raise InputError("InstanceType", f"is blank on {where}", source=source)
        shape = book.get(itype)
        if shape is None or shape.cloud != cloud:
            shape = adhoc.get(itype)
            if shape is None:
                try:
                    shape = adhoc_shape(cloud, itype, accel, int(float(row["AcceleratorCount"])),
                                        int(float(row["vCPUs"])), float(row["MemoryGiB"]))
                except (TypeError, ValueError):
                    raise InputError("AcceleratorCount",
                                     f"AcceleratorCount, vCPUs and MemoryGiB must be numbers on {where}",
                                     source=source) from None
                adhoc[itype] = shape
        region = (row["Region"] or "").strip()
        if not region:
            raise InputError("Region", f"is blank on {where}", source=source)
        offers.append(Offer(cloud=cloud, region=region, zone=(row["AvailabilityZone"] or "").strip() or region,
                            shape=shape, price=_price(row["Price"], f"Price ({where})", source),
                            spot_price=_price(row["SpotPrice"], f"SpotPrice ({where})", source)))
    if not offers:
        raise InputError("--catalog", "has no GPU rows (no row with an AcceleratorName)", source=source)
    return with_origins(tuple(offers), (CatalogOrigin(cloud=cloud, source="csv", path=source, modified=modified),))


def parse_catalog_json(doc: Any, source: str, path: str | None = None) -> Catalog:
    """Parse a ``gpufleet.catalog/v1`` document (the embedded catalog's format). ``source`` names it in the
    provenance (``embedded``, ``refresh``), ``path`` is the file it was read from when that matters."""
    if not isinstance(doc, dict) or doc.get("schema") != CATALOG_SCHEMA:
        raise InputError("schema", f"must be {CATALOG_SCHEMA!r}", source=source)
    book = shape_book()
    offers = []
    for i, row in enumerate(doc.get("offers") or []):
        shape = book.get(row.get("instance_type", ""))
        if shape is None or shape.cloud != row.get("cloud"):
            raise InputError(f"offers[{i}].instance_type", f"unknown shape {row.get('instance_type')!r}; add it to "
                             "placement/data/shapes.yaml first", source=source)
        offers.append(Offer(cloud=row["cloud"], region=row["region"], zone=row["zone"], shape=shape,
                            price=_price(row.get("price"), f"offers[{i}].price", source),
                            spot_price=_price(row.get("spot_price"), f"offers[{i}].spot_price", source)))
    as_of = str(doc.get("as_of", "unknown"))
    clouds = sorted({o.cloud for o in offers}) or list(CLOUDS)
    return with_origins(tuple(offers), tuple(CatalogOrigin(cloud=c, source=source, path=path, as_of=as_of)
                                             for c in clouds))


def catalog_document(catalog: Catalog, as_of: str, sources: list[str]) -> dict[str, Any]:
    """The ``gpufleet.catalog/v1`` document for ``catalog`` (what ``placement refresh`` writes)."""
    rows = sorted(catalog.offers, key=lambda o: (o.cloud, o.instance_type, o.region, o.zone))
    return {
        "schema": CATALOG_SCHEMA,
        "as_of": as_of,
        "currency": "USD",
        "price_unit": "node-hour",
        "sources": sources,
        "offers": [{"cloud": o.cloud, "region": o.region, "zone": o.zone, "instance_type": o.instance_type,
                    "price": o.price, "spot_price": o.spot_price} for o in rows],
    }


def dump_catalog(doc: dict[str, Any]) -> str:
    """Serialise a catalog document with one offer per line, so refreshes diff cleanly."""
    head = {k: v for k, v in doc.items() if k != "offers"}
    lines = json.dumps(head, indent=2)[:-2]
    offers = ",\n".join("    " + json.dumps(o) for o in doc["offers"])
    return f'{lines},\n  "offers": [\n{offers}\n  ]\n}}\n'


@functools.cache
def embedded_catalog() -> Catalog:
    """The catalog shipped in ``placement/data/catalog.json``."""
    text = resources.files("placement.data").joinpath("catalog.json").read_text(encoding="utf-8")
    return parse_catalog_json(json.loads(text), source="embedded")


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


def _not_json(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


@functools.lru_cache(maxsize=4)
def _refreshed(path: str, mtime_ns: int, size: int) -> Catalog:
    fix = "run `placement refresh` again or delete the file"
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh, parse_constant=_not_json)
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
