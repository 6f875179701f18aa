"""Zone and region naming rules of each cloud, and the known regions. Pure functions over shipped data."""

from __future__ import annotations

import functools
import re
from typing import Literal

from placement.errors import shown
from placement.model.packaged import packaged_book

_DIRECTIONS = {"northeast": "ne", "southeast": "se", "northwest": "nw", "southwest": "sw"}
_AWS_REGION = re.compile(r"^([a-z]{2})-(gov-)?([a-z]+)-(\d+)$")
# Regular Availability Zones: names like us-east-1a, IDs like use1-az1.
_AWS_AZ_NAME = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+[a-z]$")
_AWS_AZ_ID = re.compile(r"^[a-z]+\d+-az\d+$")
# Wavelength Zones: names like us-east-1-wl1-bos-wlz-1, IDs like use1-wl1-bos-wlz1.
_AWS_WAVELENGTH = re.compile(r"(^|-)wl\d+-[a-z]+-wlz-?\d+$")

ZoneKind = Literal["availability-zone", "local-zone", "wavelength-zone"]


def aws_zone_id_prefix(region: str) -> str | None:
    """AWS zone-ID prefix of a region: us-east-1 -> use1, ap-northeast-1 -> apne1."""
    m = _AWS_REGION.match(region)
    if not m:
        return None
    area, gov, direction, number = m.groups()
    # GovCloud: us-gov-west-1 -> usgw1
    return f"{area}{'g' if gov else ''}{_DIRECTIONS.get(direction, direction[0])}{number}"


def zone_in_region(cloud: str, zone: str, region: str) -> bool:
    """True when ``zone`` lies in ``region``: an AWS zone name (us-east-1a) or zone ID (use1-az4), Local Zones
    (us-east-1-atl-2a, use1-atl2-az1) and Wavelength Zones (us-east-1-wl1-bos-wlz-1, use1-wl1-bos-wlz1)
    included; a GCP zone (us-central1-a). False for anything but strings (a list from a config, say)."""
    if not (isinstance(cloud, str) and isinstance(zone, str) and isinstance(region, str)):
        return False
    return _zone_in_region(cloud, zone, region)


# What may follow a region's name in a zone's name or ID. Matched after the region (or its zone-ID prefix) as a
# literal prefix, not compiled per region: a pattern per region cost a compile (~0.1 ms) for each of the ~40
# known regions that zone_region tries, in every process.
_AWS_ZONE_SUFFIX = re.compile(r"(?:[a-z]|-[a-z]+-\d+[a-z]|-wl\d+-[a-z]+-wlz-\d+)")
_AWS_ZONE_ID_SUFFIX = re.compile(r"(?:(-[a-z]+\d+)?-az\d+|-wl\d+-[a-z]+-wlz\d+)")
_GCP_ZONE_SUFFIX = re.compile(r"-[a-z]")


def _follows(prefix: str, suffix: re.Pattern[str], zone: str) -> bool:
    """``zone`` is ``prefix`` then a whole match of ``suffix``: ``re.fullmatch(re.escape(prefix) + suffix, zone)``."""
    return zone.startswith(prefix) and suffix.fullmatch(zone, len(prefix)) is not None


@functools.lru_cache(maxsize=65536)  # catalogs repeat the same (zone, region) on thousands of rows
def _zone_in_region(cloud: str, zone: str, region: str) -> bool:
    if cloud == "aws":
        if _follows(region, _AWS_ZONE_SUFFIX, zone):
            return True
        prefix = aws_zone_id_prefix(region)
        return prefix is not None and _follows(prefix, _AWS_ZONE_ID_SUFFIX, zone)
    if cloud == "gcp":
        return _follows(region, _GCP_ZONE_SUFFIX, zone)
    return False


# Naming of regions and instance types, to tell one cloud's catalog rows from the other's when a region or
# shape is not in the shipped data: AWS us-east-1 / us-gov-west-1 and p5.48xlarge; GCP us-central1 and
# a3-highgpu-8g (GCP machine types have no dot, AWS instance types always have one).
_REGION_FORM = {"aws": re.compile(r"[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d+"), "gcp": re.compile(r"[a-z]+-[a-z]+\d+")}
_TYPE_FORM = {"aws": re.compile(r"[a-z][a-z0-9-]*\.[a-z0-9-]+"), "gcp": re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)+")}


@functools.lru_cache(maxsize=4096)
def region_mismatch(cloud: str, region: str) -> str | None:
    """Why ``region`` cannot be a region of ``cloud`` (None when it can): a known region of the other cloud, or a
    name not formed like ``cloud``'s regions. A well-formed region not yet in regions.yaml is accepted."""
    if region in known_regions().get(cloud, frozenset()):
        return None
    other = region_cloud(region)
    if other is not None and other != cloud:
        return f"{region} is a region of {other.upper()}, not of {cloud.upper()}"
    if cloud in _REGION_FORM and not _REGION_FORM[cloud].fullmatch(region):
        example = "us-east-1" if cloud == "aws" else "us-central1"
        return f"{shown(region)} is not named like a region of {cloud.upper()} (e.g. {example})"
    return None


@functools.lru_cache(maxsize=65536)
def instance_type_mismatch(cloud: str, name: str) -> str | None:
    """Why ``name`` cannot be an instance/machine type of ``cloud`` (None when it can), by its form."""
    form = _TYPE_FORM.get(cloud)
    if form is None or form.fullmatch(name):
        return None
    other = next((c for c, f in _TYPE_FORM.items() if c != cloud and f.fullmatch(name)), None)
    if other:
        return f"{shown(name)} is named like a machine type of {other.upper()}, not of {cloud.upper()}"
    example = "p5.48xlarge" if cloud == "aws" else "a3-highgpu-8g"
    return f"{shown(name)} is not named like a machine type of {cloud.upper()} (e.g. {example})"


def is_aws_zone_id(zone: str) -> bool:
    """AWS zone IDs (use1-az6) are stable across accounts; zone names (us-east-1a) are not."""
    return re.fullmatch(r"[a-z]+\d+(-[a-z]+\d+)?-az\d+", zone) is not None


@functools.lru_cache(maxsize=8192)
def zone_kind(cloud: str, zone: str) -> ZoneKind:
    """What kind of zone ``zone`` is. AWS Local Zones (use1-atl2-az1, us-east-1-atl-2a) and Wavelength
    Zones (use1-wl1-bos-wlz1, us-east-1-wl1-bos-wlz-1) sit in a metro or a carrier's network, away from
    the region: other hardware, other prices, an account-level opt-in. Everything else is a regular zone
    (every GCP zone; a zone not named like either AWS form, e.g. a catalog's region-only row)."""
    if cloud != "aws" or _AWS_AZ_NAME.match(zone) or _AWS_AZ_ID.match(zone):
        return "availability-zone"
    if _AWS_WAVELENGTH.search(zone):
        return "wavelength-zone"
    if is_aws_zone_id(zone) or re.fullmatch(r"[a-z]{2}(-[a-z]+)+-\d+-[a-z]+-\d+[a-z]", zone):
        return "local-zone"
    return "availability-zone"


def needs_opt_in(cloud: str, zone: str) -> bool:
    """True for zones a job must name to be placed there (Local and Wavelength Zones)."""
    return zone_kind(cloud, zone) != "availability-zone"


@functools.cache
def known_regions() -> dict[str, frozenset[str]]:
    """Cloud -> its region names, from ``placement/data/regions.yaml``."""
    doc = packaged_book("regions.yaml")
    return {cloud: frozenset(str(r) for r in doc.get(cloud) or []) for cloud in ("aws", "gcp")}


@functools.lru_cache(maxsize=4096)
def zone_region(zone: str) -> tuple[str, str] | None:
    """(cloud, region) of a zone named like a zone of a known region (AWS zone name or ID, Local and Wavelength
    Zones included; GCP zone), or None when no known region has it."""
    for cloud, regions in sorted(known_regions().items()):
        for region in sorted(regions):
            if _zone_in_region(cloud, zone, region):
                return cloud, region
    return None


def region_cloud(region: str) -> str | None:
    """The cloud whose region ``region`` is, or None when neither knows it."""
    for cloud, regions in known_regions().items():
        if region in regions:
            return cloud
    return None
