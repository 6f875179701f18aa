"""Capacity already reserved: AWS On-Demand Capacity Reservations and Capacity Blocks, GCP reservations.

A reservation is a third capacity kind, ``reserved``: ``count`` nodes of one instance type in one zone,
usable until ``ends`` (None: open-ended), at a marginal ``usd_per_hour`` per node-hour (0 when the
capacity is paid for whether used or not). It needs no quota and is bounded by ``count``.

Pure parsing of already-read text (the CLI reads the file); the live readers are in ``placement.live``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from placement.errors import InputError, shown
from placement.model.numbers import non_negative_price, positive_int
from placement.model.shapes import CLOUDS, Shape, shape_book
from placement.model.text import csv_table
from placement.model.zones import zone_in_region

RESERVATION_COLUMNS = ("cloud", "region", "zone", "instance_type", "count", "usd_per_hour", "ends")


@dataclass(frozen=True)
class Reservation:
    """``count`` free nodes of ``shape`` in ``zone``; ``usd_per_hour`` is the marginal price of one node-hour
    (USD; 0 = sunk cost); ``ends`` the UTC time it ends (None = open-ended). ``id`` names it (the cloud's
    reservation ID, or the file's ``id`` column / row); ``source`` says where it was read (a path, ``aws``,
    ``gcp``) and ``kind`` what it is (``file``, ``odcr``, ``capacity-block``, ``gcp-reservation``)."""

    id: str
    cloud: str
    region: str
    zone: str
    shape: Shape
    count: int
    usd_per_hour: float
    ends: dt.datetime | None
    source: str
    kind: str = "file"
    # UTC start of its window (None: already started): Capacity Blocks and future reservations start later.
    starts: dt.datetime | None = None

    @property
    def window(self) -> tuple[dt.datetime | None, dt.datetime | None]:
        """(starts, ends): the nodes are free only inside it (None: unbounded on that side)."""
        return self.starts, self.ends

    @property
    def instance_type(self) -> str:
        return self.shape.name

    @property
    def quota_key(self) -> str:
        """The key under which plan-batch shares this reservation's ``count`` across a burst, like a quota."""
        return f"reservation:{self.id}"

    def hours_left(self, now: dt.datetime) -> float | None:
        """Hours from ``now`` until it ends (None: open-ended)."""
        return None if self.ends is None else (self.ends - now).total_seconds() / 3600.0


def parse_time(value: str, field: str, source: str, *, blank: str = ", or blank for open-ended") -> dt.datetime:
    """An ISO-8601 timestamp (``Z`` or an offset; a date alone is midnight UTC; no offset means UTC). ``blank``
    ends the message's first clause: what a blank value means where it is allowed."""
    text = value.strip()
    try:
        if len(text) == 10:
            stamp = dt.datetime.combine(dt.date.fromisoformat(text), dt.time(), dt.UTC)
        else:
            stamp = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        stamp = stamp.astimezone(dt.UTC) if stamp.tzinfo else stamp.replace(tzinfo=dt.UTC)
    except (ValueError, OverflowError):
        raise InputError(field, f"must be an ISO-8601 time such as 2026-12-01T00:00:00Z{blank}; "
                         f"got {shown(value)}", source=source) from None
    return stamp


def parse_reservation_rows(rows: list[Mapping[str, Any]], source: str) -> tuple[Reservation, ...]:
    """Rows with the columns of :data:`RESERVATION_COLUMNS` (and an optional ``id``), validated."""
    book = shape_book()
    out: list[Reservation] = []
    seen: set[str] = set()
    for i, row in enumerate(rows):
        where = f"row {i + 1}"
        if not isinstance(row, Mapping):
            raise InputError(where, "must be a mapping with " + ", ".join(RESERVATION_COLUMNS), source=source)
        for col in RESERVATION_COLUMNS[:-1]:
            if row.get(col) is None or str(row.get(col)).strip() == "":
                raise InputError(f"{col} ({where})", "is missing; every row needs " + ",".join(RESERVATION_COLUMNS) +
                                 " (ends may be blank)", source=source)
        cloud = str(row["cloud"]).strip().lower()
        if cloud not in CLOUDS:
            raise InputError(f"cloud ({where})", f"must be aws or gcp, got {shown(row['cloud'])}", source=source)
        itype = str(row["instance_type"]).strip()
        shape = book.get(itype)
        if shape is None or shape.cloud != cloud:
            known = ", ".join(sorted(s.name for s in book.for_cloud(cloud)))
            raise InputError(f"instance_type ({where})", f"{shown(itype)} is not a {cloud} GPU shape; known: {known}",
                             source=source)
        region, zone = str(row["region"]).strip(), str(row["zone"]).strip()
        if not zone_in_region(cloud, zone, region):
            raise InputError(f"zone ({where})", f"{shown(zone)} is not a zone of {shown(region)[1:-1]} (AWS: a zone ID "
                             "like use1-az4 or a name like us-east-1a; GCP: like us-central1-a)", source=source)
        # count is nodes of the shape, never GPUs: a fraction is a GPU count divided wrong, or a typo.
        per_node = f"{shape.name} nodes ({shape.gpus} GPUs each: if you counted GPUs, divide by {shape.gpus})"
        count = positive_int(row["count"], f"count ({where})", source=source, what=f"a whole number of free {per_node}")
        price = non_negative_price(row["usd_per_hour"], f"usd_per_hour ({where})", source=source,
                                   what="the marginal USD per node-hour (0 for capacity already paid for)")
        ends_raw = row.get("ends")
        ends = None if ends_raw is None or not str(ends_raw).strip() else \
            parse_time(str(ends_raw), f"ends ({where})", source)
        starts_raw = row.get("starts")
        starts = None if starts_raw is None or not str(starts_raw).strip() else \
            parse_time(str(starts_raw), f"starts ({where})", source, blank=", or blank when it has started")
        if starts is not None and ends is not None and ends <= starts:
            raise InputError(f"ends ({where})", f"{ends:%Y-%m-%dT%H:%M}Z is not after starts {starts:%Y-%m-%dT%H:%M}Z; "
                             "a window ends after it starts", source=source)
        rid = str(row.get("id") or "").strip() or f"{source.rsplit('/', 1)[-1]}:{i + 1}"
        if rid in seen:
            raise InputError(f"id ({where})", f"duplicate reservation id {shown(rid)}", source=source)
        seen.add(rid)
        out.append(Reservation(id=rid, cloud=cloud, region=region, zone=zone, shape=shape, count=int(count),
                               usd_per_hour=price, ends=ends, source=source, starts=starts))
    return tuple(out)


def parse_reservations_csv(text: str, source: str) -> tuple[Reservation, ...]:
    """A ``--reservations`` CSV: header ``cloud,region,zone,instance_type,count,usd_per_hour,ends`` (+ ``id``,
    ``starts``: the window's start, for Capacity Blocks and future reservations)."""
    _, reader = csv_table(text, source, RESERVATION_COLUMNS, " (plus an optional id and starts)")
    return parse_reservation_rows(list(reader), source)
