"""Zone and region naming rules of each cloud, and the known regions. Pure functions over shipped data."""

from __future__ import annotations

import functools
import re
from importlib import resources
from typing import Literal

_DIRECTIONS = {"northeast": "ne", "southeast": "se", "northwest": "nw", "southwest": "sw"}
_AWS_REGION = re.compile(r"^([a-z]{2})-([a-z]+)-(\d+)$")
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
    area, direction, number = m.groups()
    return f"{area}{_DIRECTIONS.get(direction, direction[0])}{number}"


def zone_in_region(cloud: str, zone: str, region: str) -> bool:
    """True when ``zone`` (AWS zone name or zone ID, incl. Local Zones; GCP zone) lies in ``region``."""
    if cloud == "aws":
        if re.fullmatch(re.escape(region) + r"[a-z]", zone):
            return True
        prefix = aws_zone_id_prefix(region)
        return prefix is not None and re.fullmatch(re.escape(prefix) + r"(-[a-z]+\d+)?-az\d+", zone) is not None
    if cloud == "gcp":
        return re.fullmatch(re.escape(region) + r"-[a-z]", zone) is not None
    return False


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
    import yaml

    text = resources.files("placement.data").joinpath("regions.yaml").read_text(encoding="utf-8")
    doc = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return {cloud: frozenset(str(r) for r in doc.get(cloud) or []) for cloud in ("aws", "gcp")}


def region_cloud(region: str) -> str | None:
    """The cloud whose region ``region`` is, or None when neither knows it."""
    for cloud, regions in known_regions().items():
        if region in regions:
            return cloud
    return None
