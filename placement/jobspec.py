"""Job spec: the YAML a user writes, validated into a frozen :class:`JobSpec`.

Pure: takes parsed YAML (dicts and lists) and returns data, raising :class:`InputError` with the
dotted field name and the fix on the first problem.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from placement.errors import InputError
from placement.shapes import CLOUDS, shape_book

CapacityChoice = Literal["spot", "on-demand", "any"]
PRIORITIES = ("production", "burst", "low")
_SCHEMES = {"s3": "aws", "gs": "gcp"}
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass(frozen=True)
class Dataset:
    """The training data: where it lives (``cloud``/``region``) and its size in GB."""

    uri: str
    size_gb: float
    region: str
    cloud: str


@dataclass(frozen=True)
class JobSpec:
    """A training job to place. Times in hours unless named otherwise; sizes in GB; money in USD."""

    name: str
    accelerators: tuple[str, ...]
    gpus: int
    hours: float
    capacity: CapacityChoice = "any"
    dataset: Dataset | None = None
    outputs_gb: float = 0.0
    checkpoint_interval_minutes: float = 30.0
    interruptions_per_hour: float = 0.05
    restart_minutes: float = 15.0
    allow_clouds: tuple[str, ...] = ()
    deny_clouds: tuple[str, ...] = ()
    allow_regions: tuple[str, ...] = ()
    deny_regions: tuple[str, ...] = ()
    max_usd_per_hour: float | None = None
    priority: str = "production"
    team: str | None = None
    image: str = "nvcr.io/nvidia/pytorch:25.10-py3"
    command: tuple[str, ...] = ()

    def capacities(self) -> tuple[str, ...]:
        """The capacity kinds this job accepts."""
        return ("on-demand", "spot") if self.capacity == "any" else (self.capacity,)

    def allows(self, cloud: str, region: str) -> str | None:
        """``None`` when the job may run in ``cloud``/``region``, else the reason it may not."""
        if self.allow_clouds and cloud not in self.allow_clouds:
            return f"cloud {cloud} not in clouds.allow"
        if cloud in self.deny_clouds:
            return f"cloud {cloud} in clouds.deny"
        if self.allow_regions and region not in self.allow_regions:
            return f"region {region} not in regions.allow"
        if region in self.deny_regions:
            return f"region {region} in regions.deny"
        return None


def _number(value: Any, field: str, *, minimum: float = 0.0, strict: bool = False, integer: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or math.isinf(value):
        kind = "a whole number" if integer else "a number"
        raise InputError(field, f"must be {kind}, got {value!r}")
    if integer and value != int(value):
        raise InputError(field, f"must be a whole number, got {value!r}")
    if value < minimum or (strict and value == minimum):
        op = ">" if strict else ">="
        raise InputError(field, f"must be {op} {minimum:g}, got {value!r}")
    return float(value)


def _strings(value: Any, field: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise InputError(field, "must be a name or a list of names")
    return tuple(v.strip() for v in value)


def _section(doc: Mapping[str, Any], key: str, allowed: set[str], prefix: str = "") -> Mapping[str, Any]:
    value = doc.get(key)
    path = f"{prefix}{key}"
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InputError(path, "must be a mapping")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise InputError(f"{path}.{unknown[0]}", f"is not a known field; expected one of {', '.join(sorted(allowed))}")
    return value


def _clouds(value: Any, field: str) -> tuple[str, ...]:
    clouds = tuple(c.lower() for c in _strings(value, field))
    for c in clouds:
        if c not in CLOUDS:
            raise InputError(field, f"unknown cloud {c!r}; use {' or '.join(CLOUDS)}")
    return clouds


def parse_job(doc: Any, *, where: str = "") -> JobSpec:
    """Validate one job mapping. ``where`` prefixes field names (``jobs[3].``) for batch files."""
    if not isinstance(doc, Mapping):
        raise InputError(where.rstrip(".") or "job", "must be a mapping of job fields (name, accelerator, gpus, hours)")
    allowed = {"name", "accelerator", "gpus", "hours", "capacity", "data", "checkpoint", "spot", "clouds", "regions",
               "max_usd_per_hour", "priority", "team", "image", "command"}
    unknown = sorted(set(doc) - allowed)
    if unknown:
        raise InputError(f"{where}{unknown[0]}", f"is not a known field; expected one of {', '.join(sorted(allowed))}")

    name = doc.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise InputError(f"{where}name", "is required: lower-case letters, digits and '-' (a Kubernetes name)")

    if doc.get("accelerator") is None:
        raise InputError(f"{where}accelerator", "is required: a GPU name such as H100, or a list like [H100, H200]")
    book = shape_book()
    accels = tuple(dict.fromkeys(book.canonical_accelerator(a)
                                 for a in _strings(doc["accelerator"], f"{where}accelerator")))
    known = book.accelerators()
    for a in accels:
        if a not in known:
            raise InputError(f"{where}accelerator", f"unknown accelerator {a!r}; known: {', '.join(sorted(known))}")

    if doc.get("gpus") is None:
        raise InputError(f"{where}gpus", "is required: the total number of GPUs, e.g. 16")
    gpus = int(_number(doc["gpus"], f"{where}gpus", minimum=1, integer=True))
    if doc.get("hours") is None:
        raise InputError(f"{where}hours", "is required: expected run time in hours without interruptions")
    hours = _number(doc["hours"], f"{where}hours", minimum=0, strict=True)

    capacity = doc.get("capacity", "any")
    if capacity not in ("spot", "on-demand", "any"):
        raise InputError(f"{where}capacity", f"must be spot, on-demand or any, got {capacity!r}")

    data = _section(doc, "data", {"dataset", "outputs_gb"}, where)
    dataset = None
    ds = _section(data, "dataset", {"uri", "size_gb", "region"}, f"{where}data.")
    if ds:
        uri = ds.get("uri")
        if not isinstance(uri, str) or "://" not in uri:
            raise InputError(f"{where}data.dataset.uri", "must be an s3:// or gs:// URI")
        scheme = uri.split("://", 1)[0].lower()
        if scheme not in _SCHEMES:
            raise InputError(f"{where}data.dataset.uri", f"scheme {scheme!r} is not supported; use s3:// or gs://")
        region = ds.get("region")
        if not isinstance(region, str) or not region:
            raise InputError(f"{where}data.dataset.region",
                             "is required: the region the dataset lives in, e.g. us-east-1")
        if ds.get("size_gb") is None:
            raise InputError(f"{where}data.dataset.size_gb", "is required: the dataset size in GB")
        dataset = Dataset(uri=uri, size_gb=_number(ds["size_gb"], f"{where}data.dataset.size_gb"),
                          region=region, cloud=_SCHEMES[scheme])
    outputs_gb = _number(data.get("outputs_gb", 0), f"{where}data.outputs_gb")
    if outputs_gb and dataset is None:
        raise InputError(f"{where}data.outputs_gb",
                         "needs data.dataset: outputs are copied to the dataset's home region")

    ck = _section(doc, "checkpoint", {"interval_minutes"}, where)
    interval = _number(ck.get("interval_minutes", 30), f"{where}checkpoint.interval_minutes", minimum=0, strict=True)
    spot = _section(doc, "spot", {"interruptions_per_hour", "restart_minutes"}, where)
    rate = _number(spot.get("interruptions_per_hour", 0.05), f"{where}spot.interruptions_per_hour")
    restart = _number(spot.get("restart_minutes", 15), f"{where}spot.restart_minutes")

    clouds = _section(doc, "clouds", {"allow", "deny"}, where)
    regions = _section(doc, "regions", {"allow", "deny"}, where)
    max_usd = doc.get("max_usd_per_hour")
    priority = doc.get("priority", "production")
    if priority not in PRIORITIES:
        raise InputError(f"{where}priority", f"must be one of {', '.join(PRIORITIES)}")
    team = doc.get("team")
    if team is not None and (not isinstance(team, str) or not _NAME.match(team)):
        raise InputError(f"{where}team", "must be a namespace name (lower-case letters, digits, '-')")
    image = doc.get("image", JobSpec.image)
    if not isinstance(image, str) or not image:
        raise InputError(f"{where}image", "must be a container image reference")
    command = doc.get("command", [])
    if isinstance(command, str):
        command = ["/bin/sh", "-c", command]
    if not isinstance(command, list) or not all(isinstance(c, str) for c in command):
        raise InputError(f"{where}command", "must be a string or a list of strings")

    return JobSpec(
        name=name, accelerators=accels, gpus=gpus, hours=hours, capacity=capacity, dataset=dataset,
        outputs_gb=outputs_gb, checkpoint_interval_minutes=interval, interruptions_per_hour=rate,
        restart_minutes=restart,
        allow_clouds=_clouds(clouds.get("allow"), f"{where}clouds.allow"),
        deny_clouds=_clouds(clouds.get("deny"), f"{where}clouds.deny"),
        allow_regions=_strings(regions.get("allow"), f"{where}regions.allow"),
        deny_regions=_strings(regions.get("deny"), f"{where}regions.deny"),
        max_usd_per_hour=None if max_usd is None else _number(max_usd, f"{where}max_usd_per_hour", strict=True),
        priority=priority, team=team, image=image, command=tuple(command),
    )


def parse_batch(doc: Any) -> tuple[JobSpec, ...]:
    """A batch file: a mapping with a ``jobs:`` list of job specs; job names must be unique."""
    if not isinstance(doc, Mapping) or not isinstance(doc.get("jobs"), list) or not doc["jobs"]:
        raise InputError("jobs", "must be a non-empty list of job specs (the file is a mapping with a jobs: key)")
    jobs = tuple(parse_job(j, where=f"jobs[{i}].") for i, j in enumerate(doc["jobs"]))
    seen: set[str] = set()
    for i, job in enumerate(jobs):
        if job.name in seen:
            raise InputError(f"jobs[{i}].name", f"duplicate job name {job.name!r}; names must be unique")
        seen.add(job.name)
    return jobs
