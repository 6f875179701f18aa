"""Small hand-made data for placement tests (offers, jobs, quotas)."""

from __future__ import annotations

from typing import Any

from placement.catalog import Offer
from placement.jobspec import JobSpec, parse_job
from placement.quotas import Quota, QuotaTable
from placement.shapes import shape_book


def offer(itype: str, region: str, zone: str | None = None, price: float | None = 10.0,
          spot: float | None = 4.0, **kw: Any) -> Offer:
    shape = shape_book().get(itype)
    assert shape is not None, itype
    return Offer(cloud=shape.cloud, region=region, zone=zone or f"{region}-z", shape=shape, price=price,
                 spot_price=spot, **kw)


def job(**fields: Any) -> JobSpec:
    doc: dict[str, Any] = {"name": "j", "accelerator": "H100", "gpus": 8, "hours": 10}
    doc.update(fields)
    return parse_job(doc)


def quotas(*rows: tuple[str, str, str, float, float]) -> QuotaTable:
    return QuotaTable({(c, r, k): Quota(limit=lim, usage=use) for c, r, k, lim, use in rows})
