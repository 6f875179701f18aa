"""Quota headroom: which (cloud, region, quota key) has how much room, and what a candidate needs.

Pure parsing of already-loaded rows (CSV text or YAML list); no I/O.
"""

from __future__ import annotations

import csv
import functools
import io
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from placement.errors import InputError, non_negative
from placement.shapes import CLOUDS, shape_book

QUOTA_COLUMNS = ("cloud", "region", "quota", "limit", "usage")
QuotaKey = tuple[str, str, str]  # (cloud, region, quota code or metric)


@dataclass(frozen=True)
class Quota:
    """One quota: ``limit`` and current ``usage`` in its unit (vCPU on AWS, GPUs on GCP)."""

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
            raise InputError(f"cloud ({where})", f"must be aws or gcp, got {row['cloud']!r}", source=source)
        key = str(row["quota"]).strip()
        limit = non_negative(row["limit"], f"limit ({where})", source)
        usage = non_negative(row["usage"], f"usage ({where})", source)
        if usage > limit:
            raise InputError(f"usage ({where})", f"{usage:g} exceeds limit {limit:g} for {key}; a quota's usage "
                             "cannot be above its limit: re-export the row (limit = the applied quota value)",
                             source=source)
        if not book.known_quota_key(cloud, key):
            unit = "an EC2 Service Quotas code such as L-417A185B" if cloud == "aws" else \
                "a Compute Engine metric such as NVIDIA_H100_GPUS"
            warnings.append(f"{source}: quota ({where}): {key!r} is not a known {cloud} GPU quota (expected "
                            f"{unit}); no candidate will use this row")
        quotas[(cloud, str(row["region"]).strip(), key)] = Quota(limit=limit, usage=usage)
    return QuotaTable(quotas, warnings=tuple(warnings))


def parse_quota_csv(text: str, source: str) -> QuotaTable:
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in QUOTA_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise InputError(missing[0], "column is missing; the header must be " + ",".join(QUOTA_COLUMNS), source=source)
    return parse_quota_rows(list(reader), source)
