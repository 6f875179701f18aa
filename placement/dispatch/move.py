"""The price of moving a job's progress to another worker: its checkpoint home and the cost of reading it from
elsewhere. Pure: annotations in, frozen dataclasses out.

``placement submit`` gives every job one durable checkpoint home (issue 25), named on the submitted Job/JobSet:

==================================  ==================================================================
``gpufleet.io/checkpoint-home``     the home's URI (``s3://…``, ``gs://…``) where every worker resumes from
``gpufleet.io/checkpoint-region``   the home's cloud and region, ``aws:us-east-1`` / ``gcp:us-central1``
``gpufleet.io/checkpoint-gb``       the size of one checkpoint, GB (10^9 bytes)
==================================  ==================================================================

A job that has run (the dispatcher saw it admitted on a worker, or the Workload was evicted since) has progress
in that home. Re-routed to a worker that did not run it, the job first reads its newest checkpoint from the home:
``gb`` × the egress rate of the path (``placement/data/egress.yaml``, priced by the source cloud) added to that
worker's cost, and ``gb`` at the path's throughput added to its ready time (:func:`move`). A worker it ran on
resumes from its own synced copy (the fast filesystem is a cache of the home): no move. A tenant writes these
annotations: :func:`checkpoint_home` refuses anything but the three well-formed values, naming the annotation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from placement.dispatch.model import CheckpointHome
from placement.model.egress import EgressBook, transfer_hours, transfer_path, transfer_usd
from placement.model.jobspec import JobSpec
from placement.model.zones import known_regions

CHECKPOINT_HOME = "gpufleet.io/checkpoint-home"
CHECKPOINT_REGION = "gpufleet.io/checkpoint-region"
CHECKPOINT_GB = "gpufleet.io/checkpoint-gb"
MAX_CHECKPOINT_GB = 1e6  # a petabyte: far above any checkpoint, low enough that every price stays finite
MAX_URI = 1024


@dataclass(frozen=True)
class Move:
    """Reading the newest checkpoint on a worker in ``cloud``/``region`` from its home: ``usd`` (egress) and
    ``hours`` (transfer), over ``path`` (same_region, inter_region, cross_cloud)."""

    usd: float
    hours: float
    path: str

    @property
    def restarts(self) -> bool:
        """Across clouds no stack grants the worker the home: the job restarts from step 0 there unless its user
        granted access (docs/kueue-hub.md)."""
        return self.path == "cross_cloud"


NO_MOVE = Move(0.0, 0.0, "")


def checkpoint_home(annotations: Mapping[str, Any]) -> tuple[CheckpointHome | None, str | None]:
    """``(home, None)`` from a Job's annotations, ``(None, None)`` when it names no home, or ``(None, why)``
    naming the annotation that is missing or not well formed (hostile data: never raises)."""
    names = (CHECKPOINT_HOME, CHECKPOINT_REGION, CHECKPOINT_GB)
    given = [n for n in names if n in annotations]
    if not given:
        return None, None
    missing = [n for n in names if n not in annotations]
    if missing:
        return None, f"{missing[0]}: missing beside {given[0]} (placement submit sets all three)"
    uri, region, gb = (annotations[n] for n in names)
    if not isinstance(uri, str) or not uri or len(uri) > MAX_URI or any(c.isspace() for c in uri):
        return None, f"{CHECKPOINT_HOME}: must be a URI such as s3://bucket/path (one line, at most {MAX_URI} chars)"
    if not isinstance(region, str) or region.count(":") != 1:
        return None, f"{CHECKPOINT_REGION}: must be CLOUD:REGION, such as aws:us-east-1 or gcp:us-central1"
    cloud, name = region.split(":")
    regions = known_regions()
    if cloud not in regions:
        return None, f"{CHECKPOINT_REGION}: cloud must be one of {', '.join(sorted(regions))}"
    if name not in regions[cloud]:
        return None, f"{CHECKPOINT_REGION}: {name[:40]!r} is not a known {cloud} region (placement/data/regions.yaml)"
    try:
        size = float(gb) if isinstance(gb, str) and len(gb) <= 32 else math.nan
    except ValueError:
        size = math.nan
    if not math.isfinite(size) or not 0 <= size <= MAX_CHECKPOINT_GB:
        return None, f"{CHECKPOINT_GB}: must be a number of GB from 0 to {MAX_CHECKPOINT_GB:g}, such as 140.5"
    return CheckpointHome(uri=uri, cloud=cloud, region=name, gb=size), None


def move(home: CheckpointHome, cloud: str, region: str, job: JobSpec, book: EgressBook) -> Move:
    """Reading one checkpoint from ``home`` on a worker in ``cloud``/``region``: egress USD (the source cloud's
    rate for the path, ``placement.model.egress.transfer_usd``) and hours at the path's throughput (the job's
    ``throughput_gbps`` for that path, else the data's)."""
    path = transfer_path(home.cloud, home.region, cloud, region)
    usd = transfer_usd(book, home.cloud, home.region, cloud, region, home.gb)
    hours = transfer_hours(home.gb, job.gbps(path, book.throughput_gbps[path]))
    return Move(usd, hours, path)
