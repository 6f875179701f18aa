"""Data-transfer cost between regions and clouds, priced by the source cloud (USD per GB).

Rates live in ``placement/data/egress.yaml``; this module only applies them.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

# (upper bound of the tier in GB or None for "no bound", USD per GB)
Tier = tuple[float | None, float]


@dataclass(frozen=True)
class AwsEgress:
    inter_region_default: float
    inter_region_by_source: Mapping[str, float]
    inter_region_pairs: Mapping[frozenset[str], float]
    internet_tiers: tuple[Tier, ...]
    internet_first_tier_by_source: Mapping[str, float]


@dataclass(frozen=True)
class GcpEgress:
    continents: Mapping[str, str]
    within_continent: Mapping[str, float]
    intercontinental: float
    oceania: float
    internet_tiers: tuple[Tier, ...]


@dataclass(frozen=True)
class EgressBook:
    """Both clouds' egress rates."""

    aws: AwsEgress
    gcp: GcpEgress


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
                 gb: float) -> float:
    """USD to move ``gb`` GB from (src_cloud, src_region) to (dst_cloud, dst_region)."""
    if gb <= 0:
        return 0.0
    rate = transfer_rate(book, src_cloud, src_region, dst_cloud, dst_region)
    if rate is not None:
        return gb * rate
    tiers = _aws_internet_tiers(book.aws, src_region) if src_cloud == "aws" else book.gcp.internet_tiers
    return tiered_usd(gb, tiers)


def _tiers(rows: list[list[Any]]) -> tuple[Tier, ...]:
    return tuple((None if upper is None else float(upper), float(rate)) for upper, rate in rows)


def parse_egress(doc: Mapping[str, Any]) -> EgressBook:
    aws, gcp = doc["aws"], doc["gcp"]
    return EgressBook(
        aws=AwsEgress(
            inter_region_default=float(aws["inter_region_default"]),
            inter_region_by_source={k: float(v) for k, v in (aws.get("inter_region_by_source") or {}).items()},
            inter_region_pairs={frozenset((a, b)): float(r) for a, b, r in aws.get("inter_region_pairs") or []},
            internet_tiers=_tiers(aws["internet_tiers"]),
            internet_first_tier_by_source={k: float(v) for k, v in
                                           (aws.get("internet_first_tier_by_source") or {}).items()},
        ),
        gcp=GcpEgress(
            continents=dict(gcp["continents"]),
            within_continent={k: float(v) for k, v in gcp["within_continent"].items()},
            intercontinental=float(gcp["intercontinental"]),
            oceania=float(gcp["oceania"]),
            internet_tiers=_tiers(gcp["internet_tiers"]),
        ),
    )


@functools.cache
def egress_book() -> EgressBook:
    """The egress rates shipped with the package."""
    text = resources.files("placement.data").joinpath("egress.yaml").read_text(encoding="utf-8")
    return parse_egress(yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))
