"""Data-transfer cost and time between regions and clouds, priced by the source cloud (USD per GB).

Rates and throughputs live in ``placement/data/egress.yaml``; this module only applies them. Every
amount of data here is in GB (10^9 bytes): GCP's per-GiB rates and TiB tier bounds are converted on load.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from placement.model.packaged import packaged_book

# (upper bound of the tier in GB or None for "no bound", USD per GB)
Tier = tuple[float | None, float]
Path = Literal["same_region", "inter_region", "cross_cloud"]
PATHS: tuple[Path, ...] = ("same_region", "inter_region", "cross_cloud")
GB_PER_GIB = 2**30 / 1e9
GB_PER_TIB = 2**40 / 1e9
# Used only when egress.yaml has no transfer_gbps section (see it for the basis of each figure).
DEFAULT_GBPS: Mapping[str, float] = {"same_region": 25.0, "inter_region": 10.0, "cross_cloud": 5.0}


@dataclass(frozen=True)
class AwsEgress:
    inter_region_default: float
    inter_region_by_source: Mapping[str, float]
    inter_region_pairs: Mapping[frozenset[str], float]
    internet_tiers: tuple[Tier, ...]
    internet_first_tier_by_source: Mapping[str, float]
    internet_free_gb_per_month: float = 0.0  # account-wide, never subtracted per job unless asked


@dataclass(frozen=True)
class GcpEgress:
    continents: Mapping[str, str]
    within_continent: Mapping[str, float]
    intercontinental: float
    oceania: float
    internet_tiers: tuple[Tier, ...]


@dataclass(frozen=True)
class EgressBook:
    """Both clouds' egress rates (USD per GB) and the transfer throughput per path (Gbps)."""

    aws: AwsEgress
    gcp: GcpEgress
    throughput_gbps: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_GBPS))


def tiered_usd(gb: float, tiers: tuple[Tier, ...]) -> float:
    """Price ``gb`` through volume tiers, each GB at the rate of the tier it falls in."""
    total, lower = 0.0, 0.0
    for upper, rate in tiers:
        if gb <= lower:
            break
        top = gb if upper is None else min(gb, upper)
        total += (top - lower) * rate
        if upper is None:
            break
        lower = upper
    return total


def _aws_internet_tiers(book: AwsEgress, region: str) -> tuple[Tier, ...]:
    first = book.internet_first_tier_by_source.get(region)
    if first is None:
        return book.internet_tiers
    tiers = list(book.internet_tiers)
    for i, (upper, rate) in enumerate(tiers):
        if rate > 0:
            tiers[i] = (upper, first)
            break
    return tuple(tiers)


def gcp_continent(book: GcpEgress, region: str) -> str:
    for prefix, continent in book.continents.items():
        if region.startswith(prefix):
            return continent
    return "unknown"


def transfer_rate(book: EgressBook, src_cloud: str, src_region: str, dst_cloud: str, dst_region: str) -> float | None:
    """USD per GB within one cloud; ``None`` across clouds (internet egress, priced by volume tiers)."""
    if src_cloud != dst_cloud:
        return None
    if src_region == dst_region:
        return 0.0
    if src_cloud == "aws":
        pair = book.aws.inter_region_pairs.get(frozenset((src_region, dst_region)))
        if pair is not None:
            return pair
        return book.aws.inter_region_by_source.get(src_region, book.aws.inter_region_default)
    g = book.gcp
    a, b = gcp_continent(g, src_region), gcp_continent(g, dst_region)
    if "oceania" in (a, b) and a != b:
        return g.oceania
    if a == b and a != "unknown":
        return g.within_continent.get(a, g.intercontinental)
    return g.intercontinental


def transfer_usd(book: EgressBook, src_cloud: str, src_region: str, dst_cloud: str, dst_region: str,
                 gb: float, *, allowance_gb: float = 0.0) -> float:
    """USD to move ``gb`` GB from (src_cloud, src_region) to (dst_cloud, dst_region).

    ``allowance_gb``: AWS internet egress still free this month (the account-wide monthly allowance); it is
    only applied when the caller opts in, because one month's allowance cannot be spent by every job.
    """
    if gb <= 0:
        return 0.0
    rate = transfer_rate(book, src_cloud, src_region, dst_cloud, dst_region)
    if rate is not None:
        return gb * rate
    if src_cloud == "aws":
        return tiered_usd(max(gb - allowance_gb, 0.0), _aws_internet_tiers(book.aws, src_region))
    return tiered_usd(gb, book.gcp.internet_tiers)


def transfer_path(src_cloud: str, src_region: str, dst_cloud: str, dst_region: str) -> Path:
    """Which throughput applies to a move: within a region, between regions of one cloud, or across clouds."""
    if src_cloud != dst_cloud:
        return "cross_cloud"
    return "same_region" if src_region == dst_region else "inter_region"


def transfer_hours(gb: float, gbps: float) -> float:
    """Hours to move ``gb`` GB (10^9 bytes) at ``gbps`` Gbps (10^9 bits per second)."""
    return 0.0 if gb <= 0 else gb * 8.0 / gbps / 3600.0


def _tiers(rows: list[list[Any]], bound_gb: float = 1.0, rate_per_gb: float = 1.0) -> tuple[Tier, ...]:
    """Volume tiers with bounds scaled to GB (``bound_gb`` GB per unit of the bound) and rates to USD/GB."""
    return tuple((None if upper is None else float(upper) * bound_gb, float(rate) * rate_per_gb)
                 for upper, rate in rows)


def parse_egress(doc: Mapping[str, Any]) -> EgressBook:
    aws, gcp = doc["aws"], doc["gcp"]
    unit = str(gcp.get("unit", "GB"))
    if unit not in ("GB", "GiB"):
        raise ValueError(f"egress.yaml gcp.unit must be GB or GiB, got {unit!r}")
    # A rate per GiB buys 1.0737 GB; so per GB it is the rate / 1.0737.
    per_gb = 1.0 / GB_PER_GIB if unit == "GiB" else 1.0
    if "internet_tiers_tib" in gcp:
        gcp_tiers = _tiers(gcp["internet_tiers_tib"], GB_PER_TIB, per_gb)
    else:
        gcp_tiers = _tiers(gcp["internet_tiers"], 1.0, per_gb)
    throughput = {**DEFAULT_GBPS, **{k: float(v) for k, v in (doc.get("transfer_gbps") or {}).items()}}
    for path, gbps in throughput.items():
        if path not in PATHS or not gbps > 0:
            raise ValueError(f"egress.yaml transfer_gbps.{path}: must be one of {', '.join(PATHS)} and > 0")
    return EgressBook(
        aws=AwsEgress(
            inter_region_default=float(aws["inter_region_default"]),
            inter_region_by_source={k: float(v) for k, v in (aws.get("inter_region_by_source") or {}).items()},
            inter_region_pairs={frozenset((a, b)): float(r) for a, b, r in aws.get("inter_region_pairs") or []},
            internet_tiers=_tiers(aws["internet_tiers"]),
            internet_first_tier_by_source={k: float(v) for k, v in
                                           (aws.get("internet_first_tier_by_source") or {}).items()},
            internet_free_gb_per_month=float(aws.get("internet_free_gb_per_month", 0.0)),
        ),
        gcp=GcpEgress(
            continents=dict(gcp["continents"]),
            within_continent={k: float(v) * per_gb for k, v in gcp["within_continent"].items()},
            intercontinental=float(gcp["intercontinental"]) * per_gb,
            oceania=float(gcp["oceania"]) * per_gb,
            internet_tiers=gcp_tiers,
        ),
        throughput_gbps=throughput,
    )


@functools.cache
def egress_book() -> EgressBook:
    """The egress rates shipped with the package."""
    return parse_egress(packaged_book("egress.yaml"))
