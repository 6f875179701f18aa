"""Small hand-made data for placement tests (offers, jobs, quotas)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
import yaml

from placement.commands.main import main
from placement.model.catalog import Offer
from placement.model.jobspec import JobSpec, parse_job
from placement.model.quotas import Quota, QuotaTable
from placement.model.reservations import Reservation
from placement.model.shapes import shape_book


def offer(itype: str, region: str, zone: str | None = None, price: float | None = 10.0,
          spot: float | None = 4.0, **kw: Any) -> Offer:
    shape = shape_book().get(itype)
    assert shape is not None, itype
    return Offer(cloud=shape.cloud, region=region, zone=zone or f"{region}-z", shape=shape, price=price,
                 spot_price=spot, **kw)


def job(**fields: Any) -> JobSpec:
    """A small job. Hardware faults are off (``faults.per_gpu_hour: 0``) so on-demand costs are exact products;
    tests of the interruption model set their own rate."""
    doc: dict[str, Any] = {"name": "j", "accelerator": "H100", "gpus": 8, "hours": 10, "faults": {"per_gpu_hour": 0}}
    doc.update(fields)
    return parse_job(doc)


def quotas(*rows: tuple[str, str, str, float, float]) -> QuotaTable:
    return QuotaTable({(c, r, k): Quota(limit=lim, usage=use) for c, r, k, lim, use in rows})


def reservation(itype: str = "p5.48xlarge", region: str = "us-east-1", zone: str = "use1-az1", count: int = 4,
                usd_per_hour: float = 0.0, ends: dt.datetime | None = None, rid: str = "r1") -> Reservation:
    shape = shape_book().get(itype)
    assert shape is not None, itype
    return Reservation(id=rid, cloud=shape.cloud, region=region, zone=zone, shape=shape, count=count,
                       usd_per_hour=usd_per_hour, ends=ends, source="test")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``placement ARGV`` in-process: (exit code, stdout, stderr)."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def write(tmp_path: Path, name: str, doc: object) -> str:
    """``doc`` (text as it is, else YAML) written to ``tmp_path/name``; its path."""
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    return str(path)
