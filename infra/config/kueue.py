"""``gpufleet:kueue``: the Kueue release a stack installs and the shape of its queues.

Owns :class:`KueueConfig`: the Kueue version (v0.19.x), the cohort its ClusterQueues share, the team
namespaces that get LocalQueues, the order capacity flavors are tried in, and the share of each pool the
inference queue owns. The queues themselves are derived from the node pools in :mod:`infra.k8s.kueue_objects`.

May import: the standard library, :mod:`placement.errors` and :mod:`infra.config.fields`; no Pulumi SDK.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from infra.config.fields import (
    _DNS_SUBDOMAIN,
    _NAME,
    ConfigError,
    _float,
    _key,
    _mapping,
    _str,
    _strings,
    _unknown_keys,
)
from placement.errors import shown

INFERENCE_SHARE = 0.25  # default kueue.inferenceShare (KueueConfig.inference_share says why)


@dataclass(frozen=True)
class KueueConfig:
    """Kueue install and queue shape. ``flavor_order`` picks which capacity Kueue tries first."""

    version: str = "0.19.2"
    cohort: str = "gpufleet"
    teams: tuple[str, ...] = ("team-a",)
    flavor_order: tuple[str, ...] = ("on-demand", "spot")
    # Share of each pool's nodes the inference ClusterQueue owns (floor per pool) and lends to training while
    # idle: a quarter, so a serving burst reclaims one node of a 4-node pool and training keeps at least 3/4 as
    # its own; idle, training borrows it all back (the dispatcher counts it: placement.dispatch.decide).
    # 0 keeps every node in the training queue's own quota; serving then waits.
    inference_share: float = INFERENCE_SHARE


def parse_kueue(value: Any) -> KueueConfig:
    """``gpufleet:kueue``: the Kueue version, cohort, teams, flavor order and inference share."""
    kq = _mapping(value, "kueue")
    _unknown_keys(kq, {"version", "cohort", "teams", "flavorOrder", "inferenceShare"}, "kueue")
    kversion = _str(kq.get("version", "0.19.2"), "kueue.version")
    if not re.fullmatch(r"0\.19\.\d+", kversion):
        raise ConfigError(_key("kueue.version"),
                          f"must be a Kueue v0.19.x release such as 0.19.2, got {shown(kversion)}")
    order = _strings(kq.get("flavorOrder"), "kueue.flavorOrder") or ("on-demand", "spot")
    if sorted(order) != ["on-demand", "spot"]:
        raise ConfigError(_key("kueue.flavorOrder"), "must list on-demand and spot once each, in the order to try")
    teams = _strings(kq.get("teams"), "kueue.teams") or ("team-a",)
    for i, t in enumerate(teams):
        # A team is a namespace (holding its LocalQueues) and a label value on it: a DNS-1123 label.
        if not _NAME.fullmatch(t):
            raise ConfigError(_key(f"kueue.teams[{i}]"), f"{shown(t)} is not a valid namespace name: lower-case "
                                                         "letters, digits and '-', at most 40 characters")
        if t in teams[:i]:
            raise ConfigError(_key(f"kueue.teams[{i}]"), f"team {t!r} is listed twice; list each team once")
    cohort = _str(kq.get("cohort", "gpufleet"), "kueue.cohort")
    # ClusterQueue.spec.cohortName in the Kueue v1beta2 CRD: a DNS-1123 subdomain of at most 253 characters.
    if len(cohort) > 253 or not _DNS_SUBDOMAIN.fullmatch(cohort):
        raise ConfigError(_key("kueue.cohort"), f"{shown(cohort)} is not a cohort name: lower-case letters, "
                                                "digits, '-' and '.', starting and ending with a letter or digit")
    share = _float(kq.get("inferenceShare", INFERENCE_SHARE), "kueue.inferenceShare", maximum=0.9)
    kueue = KueueConfig(version=kversion, cohort=cohort, teams=teams, flavor_order=order, inference_share=share)
    return kueue
