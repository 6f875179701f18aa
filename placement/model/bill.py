"""The bill's other lines: NAT gateway processing and checkpoint storage and requests (USD). Pure.

Rates come from ``placement/data/bill.yaml`` (read once by :func:`bill_book`), each with its source there.

* **NAT**: an AWS candidate reads a dataset that is not in same-region S3 (and writes its outputs back to
  it) through the stack's NAT gateway: ``(dataset + outputs) GB × nat_usd_per_gb``. GCP stacks reach GCS
  through Private Google Access (no NAT charge) and an S3 dataset through Cloud NAT.
* **Checkpoint storage**: the bucket keeps ``keep`` current checkpoints for the run's wall time, and every
  checkpoint the run writes and then replaces for the cloud's retention (versioned buckets: the stacks expire a
  replaced checkpoint under the homes after ``noncurrent_version_days``; on GCS soft delete then keeps it
  ``soft_delete_days`` more, billed; a job's ``checkpoint.retention_days`` overrides both)::

      GB-months = size × (min(keep, n) × wall_days + max(n − keep, 0) × retention_days) / days_per_month

  with ``n = ceil(run hours / interval hours)`` checkpoints written.
* **Checkpoint requests**: ``n × ceil(size / part size)`` PUTs at ``put_usd_per_1000``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

from placement.errors import InputError
from placement.model.packaged import packaged_book


@dataclass(frozen=True)
class CloudBill:
    """One cloud's rates: NAT processing (USD/GB), object storage (USD per GB-month), PUTs (USD per 1,000)."""

    nat_usd_per_gb: float
    storage_usd_per_gb_month: float
    put_usd_per_1000: float
    soft_delete_days: float = 0.0  # days a deleted object stays billed after the lifecycle rule deletes it (GCS)


@dataclass(frozen=True)
class BillBook:
    """The rates and the checkpoint-retention assumptions of ``placement/data/bill.yaml``."""

    clouds: dict[str, CloudBill]
    keep: int = 3
    noncurrent_version_days: float = 1.0
    part_mb: float = 52.4288
    days_per_month: float = 30.4375

    def retention_days(self, cloud: str) -> float:
        """Days a replaced checkpoint stays billed on ``cloud``: the stacks' noncurrent-version expiry under the
        homes plus the cloud's soft delete."""
        rates = self.clouds.get(cloud)
        return self.noncurrent_version_days + (rates.soft_delete_days if rates else 0.0)


@dataclass(frozen=True)
class Extras:
    """The extra lines of one candidate's bill, USD."""

    nat_usd: float = 0.0
    checkpoint_storage_usd: float = 0.0
    checkpoint_requests_usd: float = 0.0

    @property
    def total(self) -> float:
        return self.nat_usd + self.checkpoint_storage_usd + self.checkpoint_requests_usd


def _rate(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise InputError(where, f"must be a non-negative number, got {value!r}")
    return float(value)


def parse_bill(doc: dict[str, Any]) -> BillBook:
    """The rates of a ``gpufleet.bill/v1`` document."""
    clouds = {}
    for cloud in ("aws", "gcp"):
        row = doc.get(cloud) or {}
        clouds[cloud] = CloudBill(**{k: _rate(row.get(k), f"{cloud}.{k}") for k in
                                     ("nat_usd_per_gb", "storage_usd_per_gb_month", "put_usd_per_1000")},
                                  soft_delete_days=_rate(row.get("soft_delete_days", 0), f"{cloud}.soft_delete_days"))
    ck = doc.get("checkpoint") or {}
    keep = ck.get("keep", 3)
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise InputError("checkpoint.keep", f"must be a whole number >= 1, got {keep!r}")
    part = _rate(ck.get("part_mb", 52.4288), "checkpoint.part_mb")
    month = _rate(ck.get("days_per_month", 30.4375), "checkpoint.days_per_month")
    if part <= 0 or month <= 0:
        raise InputError("checkpoint.part_mb", "part_mb and days_per_month must be positive")
    return BillBook(clouds=clouds, keep=keep,
                    noncurrent_version_days=_rate(ck.get("noncurrent_version_days", 1),
                                                  "checkpoint.noncurrent_version_days"),
                    part_mb=part, days_per_month=month)


@functools.cache
def bill_book() -> BillBook:
    """The shipped rates (cached)."""
    return parse_bill(packaged_book("bill.yaml"))


def nat_usd(book: BillBook, cloud: str, region: str, data_cloud: str | None, data_region: str | None,
            gb: float) -> float:
    """NAT processing of ``gb`` moved between a candidate in ``cloud``/``region`` and the data's home: charged
    on AWS unless the data is in same-region S3 (the S3 gateway endpoint)."""
    if data_cloud is None or gb <= 0:
        return 0.0
    if cloud == data_cloud and (region == data_region or cloud == "gcp"):
        return 0.0  # same-region S3 (gateway endpoint) or GCS anywhere (Private Google Access)
    return gb * book.clouds[cloud].nat_usd_per_gb if cloud in book.clouds else 0.0


def checkpoints_written(run_h: float, interval_h: float) -> float:
    """Checkpoints a run of ``run_h`` hours writes at one every ``interval_h`` hours (at least one)."""
    if not (run_h > 0 and interval_h > 0) or not math.isfinite(run_h):
        return 0.0 if not run_h > 0 else math.inf
    n = run_h / interval_h
    return float(math.ceil(n)) if n < 1e15 else n


def checkpoint_usd(book: BillBook, cloud: str, size_gb: float, run_h: float, interval_h: float, wall_h: float,
                   keep: int | None = None, retention_days: float | None = None) -> tuple[float, float]:
    """(storage USD, request USD) of the checkpoints of one run (see the module docstring). 0 without a size.
    ``keep`` and ``retention_days`` are the job's (None: the book's, and the cloud's retention)."""
    if not size_gb or size_gb <= 0 or cloud not in book.clouds:
        return 0.0, 0.0
    rates = book.clouds[cloud]
    kept = book.keep if keep is None else keep
    n = checkpoints_written(run_h, interval_h)
    wall_days = wall_h / 24.0 if math.isfinite(wall_h) else math.inf
    current = min(float(kept), n) * wall_days
    days = book.retention_days(cloud) if retention_days is None else retention_days
    old = max(n - kept, 0.0) * days
    storage = size_gb * (current + old) / book.days_per_month * rates.storage_usd_per_gb_month
    requests = n * put_usd_per_checkpoint(book, cloud, size_gb)
    return storage, requests


def put_usd_per_checkpoint(book: BillBook, cloud: str, size_gb: float) -> float:
    """USD of the PUTs that write one checkpoint of ``size_gb``: one per part of the multipart upload."""
    if not size_gb or size_gb <= 0 or cloud not in book.clouds:
        return 0.0
    parts = math.ceil(size_gb * 1000.0 / book.part_mb) if size_gb < 1e12 else size_gb * 1000.0 / book.part_mb
    return parts * book.clouds[cloud].put_usd_per_1000 / 1000.0
