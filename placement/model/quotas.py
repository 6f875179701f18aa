"""Quota headroom: which (cloud, region, quota key) has how much room, and what a candidate needs.

Pure parsing of already-loaded rows (CSV text or YAML list); no I/O.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from placement.errors import InputError, shown
from placement.model.numbers import non_negative_number
from placement.model.shapes import CLOUDS, shape_book
from placement.model.text import csv_table

QUOTA_COLUMNS = ("cloud", "region", "quota", "limit", "usage")
QuotaKey = tuple[str, str, str]  # (cloud, region, quota code or metric)


def over_limit(cloud: str, region: str, key: str, limit: float, usage: float) -> str:
    """The warning for a quota whose usage is above its limit: real after a quota is lowered below what runs."""
    return (f"quota {shown(key)[1:-1]} in {cloud} {shown(region)[1:-1]}: usage {usage:g} is above its limit "
            f"{limit:g} (lowered below what is running): headroom 0")


@dataclass(frozen=True)
class Quota:
    """One quota: ``limit`` and current ``usage`` in its unit (vCPU on AWS, GPUs on GCP). Usage above the
    limit (a quota lowered below what runs) is allowed: the headroom is 0."""

    limit: float
    usage: float

    @property
    def headroom(self) -> float:
        return max(self.limit - self.usage, 0.0)


@dataclass(frozen=True)
class QuotaTable:
    """Known quotas by (cloud, region, key). A key not in the table is *unknown*, never assumed free."""

    quotas: Mapping[QuotaKey, Quota] = field(default_factory=dict)
    # One line per row whose key the shape data does not know (loaded anyway: a new quota is data).
    warnings: tuple[str, ...] = field(default=(), compare=False)

    @functools.cached_property
    def headrooms(self) -> dict[QuotaKey, float]:
        """Headroom by (cloud, region, key), worked out once (placing a burst looks it up per candidate)."""
        return {k: q.headroom for k, q in self.quotas.items()}

    def get(self, cloud: str, region: str, key: str | None) -> Quota | None:
        if key is None:
            return None
        return self.quotas.get((cloud, region, key))

    def merged(self, other: QuotaTable) -> QuotaTable:
        """This table with ``other``'s entries taking precedence (live data over a file)."""
        return QuotaTable({**self.quotas, **other.quotas}, warnings=self.warnings + other.warnings)


def parse_quota_rows(rows: list[Any], source: str) -> QuotaTable:
    """Rows of mappings with cloud, region, quota, limit, usage (from CSV or YAML)."""
    quotas: dict[QuotaKey, Quota] = {}
    warnings: list[str] = []
    book = shape_book()
    for i, row in enumerate(rows):
        where = f"row {i + 1}"
        if not isinstance(row, Mapping):
            raise InputError(where, "must be a mapping with " + ", ".join(QUOTA_COLUMNS), source=source)
        for col in QUOTA_COLUMNS:
            if row.get(col) is None or str(row.get(col)).strip() == "":
                raise InputError(f"{col} ({where})", "is missing; every row needs " + ",".join(QUOTA_COLUMNS),
                                 source=source)
        cloud = str(row["cloud"]).strip().lower()
        if cloud not in CLOUDS:
            raise InputError(f"cloud ({where})", f"must be aws or gcp, got {shown(row['cloud'])}", source=source)
        for col in ("region", "quota"):
            if not isinstance(row[col], str):
                raise InputError(f"{col} ({where})", f"must be a name, got {shown(row[col])}", source=source)
        key = str(row["quota"]).strip()
        limit = non_negative_number(row["limit"], f"limit ({where})", source=source)
        usage = non_negative_number(row["usage"], f"usage ({where})", source=source)
        if usage > limit:
            warnings.append(f"{source}: usage ({where}): " + over_limit(cloud, str(row["region"]).strip(), key, limit,
                                                                       usage))
        if not book.known_quota_key(cloud, key):
            unit = "an EC2 Service Quotas code such as L-417A185B" if cloud == "aws" else \
                "a Compute Engine metric such as NVIDIA_H100_GPUS"
            warnings.append(f"{source}: quota ({where}): {shown(key)} is not a known {cloud} GPU quota (expected "
                            f"{unit}); no candidate will use this row")
        qkey = (cloud, str(row["region"]).strip(), key)
        quota = Quota(limit=limit, usage=usage)
        named = f"{shown(key)[1:-1]} in {shown(qkey[1])[1:-1]}"  # escaped: a message stays one line
        if qkey in quotas:
            # The same quota twice: which row holds is a guess unless both say the same.
            if quotas[qkey] != quota:
                first = quotas[qkey]
                raise InputError(f"quota ({where})", f"{named} is given twice with "
                                 f"different values (limit {first.limit:g} usage {first.usage:g}, then limit "
                                 f"{limit:g} usage {usage:g}); keep one row", source=source)
            warnings.append(f"{source}: quota ({where}): {named} is given twice with the "
                            "same values; using it once")
        quotas[qkey] = quota
    return QuotaTable(quotas, warnings=tuple(warnings))


def parse_quota_csv(text: str, source: str) -> QuotaTable:
    _, reader = csv_table(text, source, QUOTA_COLUMNS)
    return parse_quota_rows(list(reader), source)
