"""Zone naming rules: which zone belongs to which region, on each cloud. Pure functions."""

from __future__ import annotations

import re

_DIRECTIONS = {"northeast": "ne", "southeast": "se", "northwest": "nw", "southwest": "sw"}
_AWS_REGION = re.compile(r"^([a-z]{2})-([a-z]+)-(\d+)$")


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
