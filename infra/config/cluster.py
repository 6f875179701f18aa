"""``gpufleet:cluster``: the control plane (EKS / GKE), who may reach its API, and how it is upgraded.

Owns :class:`ClusterConfig`, GKE's maintenance window and no-upgrade exclusion (:class:`MaintenanceConfig`),
and the EKS version table with its support calendar (``placement/data/eks_versions.yaml``,
:func:`check_eks_version`): a cluster past EKS standard support would be upgraded by EKS itself.

May import: the standard library, PyYAML (lazily, for the version table), :mod:`placement.errors`,
:mod:`infra.config.fields`, :mod:`infra.config.network` (the allow-list CIDR rules) and :mod:`infra.config.link`
(``hubStack``, ``hubPrivateLink``); no Pulumi SDK.
"""

from __future__ import annotations

import datetime
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from infra.config.fields import ConfigError, _bool, _key, _mapping, _opt_str, _str, _strings, _unknown_keys
from infra.config.link import _hub_private_link, _stack_ref
from infra.config.network import _ipv4_cidrs, check_public_span
from placement.errors import shown

# The EKS control plane's upgrade policy (infra/aws/cluster.py): at the end of standard support EKS upgrades
# the cluster itself instead of billing extended support, so a version past that date cannot be kept.
EKS_SUPPORT_TYPE = "STANDARD"
DEFAULT_KUBERNETES_VERSION = "1.35"
# Inbound rules one VPC security group takes by default ("Inbound or outbound rules per security group",
# Amazon VPC quotas; raising it lowers the security groups per interface). The stack's control-plane
# security group holds one 443 rule per hub and operator CIDR and nothing else.
EKS_API_SG_INBOUND_RULES = 60


@dataclass(frozen=True)
class EksVersion:
    """One EKS Kubernetes minor and its support calendar (UTC dates; each end is the last day of support)."""

    minor: str
    released: datetime.date
    standard_end: datetime.date
    extended_end: datetime.date


@functools.cache
def eks_versions() -> Mapping[str, EksVersion]:
    """The EKS version table, ``placement/data/eks_versions.yaml``, by minor (``"1.35"``)."""
    from importlib import resources

    import yaml

    doc = yaml.safe_load(resources.files("placement.data").joinpath("eks_versions.yaml").read_text("utf-8"))
    return {str(minor): EksVersion(minor=str(minor), released=row["released"], standard_end=row["standard_end"],
                                   extended_end=row["extended_end"])
            for minor, row in doc["versions"].items()}


def today() -> datetime.date:
    """Today's UTC date: the day support windows are judged on (tests replace it)."""
    return datetime.datetime.now(datetime.UTC).date()


def check_eks_version(version: str, on: datetime.date) -> None:
    """Refuse an EKS minor that is not in the version table or is past its end of standard support on ``on``
    (the clusters run with support type :data:`EKS_SUPPORT_TYPE`)."""
    table = eks_versions()
    supported = ", ".join(m for m, v in sorted(table.items(), key=lambda kv: kv[1].released) if v.standard_end >= on)
    row = table.get(version)
    if row is None:
        raise ConfigError(_key("cluster.kubernetesVersion"),
                          f"{shown(version)} is not in the EKS version table (placement/data/eks_versions.yaml); "
                          f"use one in standard support: {supported}")
    if row.standard_end < on:
        raise ConfigError(_key("cluster.kubernetesVersion"),
                          f"{version} left EKS standard support on {row.standard_end.isoformat()} and the cluster "
                          f"runs with support type {EKS_SUPPORT_TYPE} (EKS would upgrade it itself); use one of "
                          f"{supported}")


@dataclass(frozen=True)
class MaintenanceConfig:
    """GKE maintenance policy: when GKE may upgrade, and the exclusion that keeps GPU nodes from draining.

    ``exclusion`` (default on) adds a ``NO_MINOR_OR_NODE_UPGRADES`` maintenance exclusion from
    ``exclusion_start``: GKE then neither upgrades node versions (no drain of a training node) nor the
    control plane's minor version; control plane patches still apply. ``exclusion_end`` is an RFC 3339 UTC
    time at most :data:`MAX_EXCLUSION_DAYS` after the start, or ``None``: until the end of support of the
    cluster's minor version (GKE's ``UNTIL_END_OF_SUPPORT``). ``window_*`` is the recurring maintenance window
    (RFC 3339 start/end of the first occurrence, RFC 5545 RRULE) in which allowed upgrades run, or ``None``.
    """

    exclusion: bool = True
    exclusion_start: str = "2026-01-01T00:00:00Z"
    exclusion_end: str | None = None
    window_start: str | None = None
    window_end: str | None = None
    window_recurrence: str | None = None


# GKE limits: an exclusion with an end time spans at most 180 days; a window lasts at least 4 hours.
MAX_EXCLUSION_DAYS = 180
MIN_WINDOW_HOURS = 4


@dataclass(frozen=True)
class ClusterConfig:
    """Control plane settings. ``kubernetes_version`` pins EKS; ``release_channel``/``gke_version`` GKE."""

    kubernetes_version: str = DEFAULT_KUBERNETES_VERSION
    release_channel: str = "REGULAR"
    gke_version: str | None = None
    public_access: bool = False
    public_access_cidrs: tuple[str, ...] = ()
    admin_principals: tuple[str, ...] = ()
    # CIDRs allowed to reach the API for a MultiKueue hub (its Kueue and dispatcher): an ingress rule on 443 of
    # the EKS cluster security group / GKE master authorized networks, and on the public allow-list when
    # public_access is true. IPv4 only (what both endpoints take).
    hub_cidrs: tuple[str, ...] = ()
    # CIDRs operators (kubectl, CI runners, `pulumi up`) reach the private API endpoint from, over VPN / peering
    # / a bastion subnet: the same 443 rule (EKS cluster security group) / GKE master authorized network as
    # hub_cidrs, and the public ones on the public allow-list too. IPv4 only; empty by default.
    operator_cidrs: tuple[str, ...] = ()
    # The MultiKueue hub stack (org/project/stack) this worker serves: its exported egressCidrs (the hub's NAT
    # addresses) are read by StackReference and authorised like hub_cidrs, so the allow-list follows the hub.
    hub_stack: str | None = None
    # How the hub's private egress ranges reach this cluster's private endpoint: "none" (only the public endpoint
    # carries hub traffic, from the hub's public NAT addresses), "external" (a VPN, peering, Transit Gateway or
    # Interconnect between the hub's and this cluster's networks, built outside these stacks, that the operator
    # vouches for) or "vpn" (GCP: the hub stack's HA VPN, gpufleet:hub.vpn). With either private path the
    # public endpoint is off (public_access false), so the kubeconfig the hub uses names the private one.
    hub_private_link: Literal["none", "external", "vpn"] = "none"
    # EKS: the AMI release every managed node group runs (<minor>.<patch>-<YYYYMMDD> of kubernetes_version).
    # None: EKS picks the newest at create and keeps it until this is set or the launch template changes.
    ami_release_version: str | None = None
    # GKE: refuse `pulumi destroy` of the control plane until this is set to false and applied.
    deletion_protection: bool = True
    # GKE: maintenance window and the no-upgrade exclusion that protects running training.
    maintenance: MaintenanceConfig = field(default_factory=MaintenanceConfig)


def _check_api_rules(cluster: ClusterConfig) -> None:
    """EKS: every hub and operator CIDR is one 443 rule on the control-plane security group, which takes
    :data:`EKS_API_SG_INBOUND_RULES` inbound rules."""
    rules = len(set(cluster.hub_cidrs) | set(cluster.operator_cidrs))
    if rules > EKS_API_SG_INBOUND_RULES:
        key = "cluster.hubCidrs" if cluster.hub_cidrs else "cluster.operatorCidrs"
        raise ConfigError(_key(key), f"hubCidrs and operatorCidrs make {rules} inbound rules on the EKS "
                                     f"control-plane security group, which takes {EKS_API_SG_INBOUND_RULES}; "
                                     "merge them into fewer, wider CIDRs")


def _ami_release(value: Any, kubernetes_version: str) -> str | None:
    """An EKS AMI release version (``<minor>.<patch>-<YYYYMMDD>``) of the cluster's Kubernetes minor, or None."""
    if value is None:
        return None
    path = "cluster.amiReleaseVersion"
    release = _str(value, path)
    if not re.fullmatch(r"\d+\.\d+\.\d+-\d{8}", release) or not release.startswith(kubernetes_version + "."):
        raise ConfigError(_key(path), f"must be an EKS AMI release of Kubernetes {kubernetes_version} such as "
                                      f"{kubernetes_version}.5-20251120 (`aws ssm get-parameter --name /aws/service/"
                                      f"eks/optimized-ami/{kubernetes_version}/amazon-linux-2023/x86_64/nvidia/"
                                      f"recommended/release_version`), got {release!r}")
    return release


def _rfc3339(value: Any, path: str) -> str:
    """An RFC 3339 UTC time such as 2026-01-01T00:00:00Z (what GKE returns, so no permanent diff)."""
    text = _str(value, path)
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z", text):
        raise ConfigError(_key(path), f"must be an RFC 3339 UTC time such as 2026-01-01T00:00:00Z, got {shown(value)}")
    try:
        datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        raise ConfigError(_key(path), f"is not a valid date and time: {shown(value)}") from None
    return text


def _hours_between(start: str, end: str) -> float:
    fmt = "%Y-%m-%dT%H:%M:%SZ"
    delta = datetime.datetime.strptime(end, fmt) - datetime.datetime.strptime(start, fmt)
    return delta.total_seconds() / 3600


def _maintenance(value: Any) -> MaintenanceConfig:
    path = "cluster.maintenance"
    raw = _mapping(value, path)
    _unknown_keys(raw, {"exclusion", "exclusionStart", "exclusionEnd", "window"}, path)
    start = _rfc3339(raw.get("exclusionStart", MaintenanceConfig.exclusion_start), f"{path}.exclusionStart")
    end_raw = raw.get("exclusionEnd", "untilEndOfSupport")
    end: str | None = None
    if end_raw != "untilEndOfSupport":
        end = _rfc3339(end_raw, f"{path}.exclusionEnd")
        hours = _hours_between(start, end)
        if not 0 < hours <= MAX_EXCLUSION_DAYS * 24:
            raise ConfigError(_key(f"{path}.exclusionEnd"),
                              f"must lie after exclusionStart and at most {MAX_EXCLUSION_DAYS} days later (GKE's limit "
                              "for a NO_MINOR_OR_NODE_UPGRADES exclusion with an end time); or set untilEndOfSupport")
    win = _mapping(raw.get("window"), f"{path}.window")
    _unknown_keys(win, {"start", "end", "recurrence"}, f"{path}.window")
    w_start = w_end = recurrence = None
    if win:
        w_start = _rfc3339(win.get("start"), f"{path}.window.start")
        w_end = _rfc3339(win.get("end"), f"{path}.window.end")
        if _hours_between(w_start, w_end) < MIN_WINDOW_HOURS:
            raise ConfigError(_key(f"{path}.window.end"),
                              f"must be at least {MIN_WINDOW_HOURS} hours after window.start (GKE's shortest window)")
        recurrence = _recurrence(win.get("recurrence"), f"{path}.window.recurrence")
    return MaintenanceConfig(exclusion=_bool(raw.get("exclusion", True), f"{path}.exclusion"), exclusion_start=start,
                             exclusion_end=end, window_start=w_start, window_end=w_end, window_recurrence=recurrence)


# What GKE takes in a maintenance window's RRULE (RecurringTimeWindow.recurrence, GKE API): FREQ DAILY, WEEKLY
# or MONTHLY (HOURLY, MINUTELY and SECONDLY are refused), weekdays in BYDAY (an ordinal such as 1SA or -1SU
# only with MONTHLY), BYSETPOS with MONTHLY. WEEKLY and MONTHLY need BYDAY and INTERVAL stays 1: otherwise
# GKE needs a delayUntil date, which the stack does not set.
_RRULE_FREQS = ("DAILY", "WEEKLY", "MONTHLY")
_RRULE_DAYS = ("MO", "TU", "WE", "TH", "FR", "SA", "SU")
_RRULE_EXAMPLE = "FREQ=WEEKLY;BYDAY=SA,SU"


def _recurrence(value: Any, path: str) -> str:
    """A GKE maintenance-window RRULE (see :data:`_RRULE_FREQS`), refused with one line naming the part."""
    text = _str(value, path)
    parts: dict[str, str] = {}
    for part in text.split(";"):
        name, sep, val = part.partition("=")
        if not sep or not val or name not in ("FREQ", "BYDAY", "BYSETPOS", "INTERVAL") or name in parts:
            raise ConfigError(_key(path), f"must be an RFC 5545 RRULE of FREQ, BYDAY, BYSETPOS (each once) such as "
                                          f"{_RRULE_EXAMPLE}, got {shown(text)}")
        parts[name] = val
    freq = parts.get("FREQ")
    if freq not in _RRULE_FREQS:
        raise ConfigError(_key(path), f"FREQ must be one of {', '.join(_RRULE_FREQS)} (GKE's maintenance windows), "
                                      f"got {shown(text)}")
    if parts.get("INTERVAL", "1") != "1":
        raise ConfigError(_key(path), f"INTERVAL must be 1 (GKE needs a start date otherwise), got {shown(text)}")
    day = r"(MO|TU|WE|TH|FR|SA|SU)" if freq != "MONTHLY" else r"([+-]?[1-5])?(MO|TU|WE|TH|FR|SA|SU)"
    days = parts.get("BYDAY")
    if days is not None and not all(re.fullmatch(day, d) for d in days.split(",")):
        raise ConfigError(_key(path), f"BYDAY must list weekdays {','.join(_RRULE_DAYS)}"
                                      f"{' (with an ordinal such as 1SA for MONTHLY)' if freq == 'MONTHLY' else ''}, "
                                      f"got {shown(text)}")
    if days is None and freq != "DAILY":
        raise ConfigError(_key(path), f"FREQ={freq} needs BYDAY (GKE needs a start date otherwise), such as "
                                      f"{_RRULE_EXAMPLE}, got {shown(text)}")
    pos = parts.get("BYSETPOS")
    if pos is not None and (freq != "MONTHLY" or not re.fullmatch(r"[+-]?[1-5]", pos)):
        raise ConfigError(_key(path), f"BYSETPOS must be -5..5 (not 0) and only with FREQ=MONTHLY, got {shown(text)}")
    return text


def parse_cluster(value: Any, cloud: str) -> ClusterConfig:
    """``gpufleet:cluster`` of a ``cloud`` stack: the control plane, its API allow-lists and its upgrades (an EKS
    version is judged against the support calendar on :func:`today`)."""
    cl = _mapping(value, "cluster")
    _unknown_keys(
        cl,
        {
            "kubernetesVersion",
            "releaseChannel",
            "gkeVersion",
            "publicAccess",
            "publicAccessCidrs",
            "adminPrincipals",
            "deletionProtection",
            "hubCidrs",
            "maintenance",
            "operatorCidrs",
            "amiReleaseVersion",
            "hubStack",
            "hubPrivateLink",
        },
        "cluster",
    )
    public = _bool(cl.get("publicAccess", False), "cluster.publicAccess")
    # The public allow-list takes the same IPv4-only, never-the-whole-internet CIDRs as hubCidrs/operatorCidrs.
    cidrs = _ipv4_cidrs(cl.get("publicAccessCidrs"), "cluster.publicAccessCidrs")
    check_public_span(cidrs, "cluster.publicAccessCidrs")
    hub_stack = _stack_ref(cl.get("hubStack"), "cluster.hubStack")
    if public and not cidrs and hub_stack is None:
        raise ConfigError(
            _key("cluster.publicAccessCidrs"),
            "list the CIDRs allowed to reach the public API endpoint (publicAccess is true), or set "
            "gpufleet:cluster.hubStack to open it to the hub's egress addresses only",
        )
    channel = _str(cl.get("releaseChannel", "REGULAR"), "cluster.releaseChannel").upper()
    if channel not in ("RAPID", "REGULAR", "STABLE", "EXTENDED"):
        raise ConfigError(_key("cluster.releaseChannel"), "must be RAPID, REGULAR, STABLE or EXTENDED")
    version = _str(cl.get("kubernetesVersion", DEFAULT_KUBERNETES_VERSION), "cluster.kubernetesVersion",
                   numbers=True)
    if not re.fullmatch(r"1\.\d{2}", version):
        raise ConfigError(_key("cluster.kubernetesVersion"),
                          f"must be a minor version such as \"{DEFAULT_KUBERNETES_VERSION}\" (quoted), "
                          f"got {shown(version)}")
    if cloud == "aws":
        check_eks_version(version, today())
    gke_version = _opt_str(cl.get("gkeVersion"), "cluster.gkeVersion")
    if gke_version is not None and not re.fullmatch(r"latest|1\.\d+(\.\d+(-gke\.\d+)?)?", gke_version):
        raise ConfigError(_key("cluster.gkeVersion"), "must be a GKE version such as 1.33, 1.33.5-gke.1080000 or "
                                                      f"latest, got {shown(gke_version)}")
    cluster = ClusterConfig(
        kubernetes_version=version,
        release_channel=channel,
        gke_version=gke_version,
        public_access=public,
        public_access_cidrs=cidrs,
        admin_principals=_strings(cl.get("adminPrincipals"), "cluster.adminPrincipals"),
        hub_cidrs=_ipv4_cidrs(cl.get("hubCidrs"), "cluster.hubCidrs"),
        operator_cidrs=_ipv4_cidrs(cl.get("operatorCidrs"), "cluster.operatorCidrs"),
        hub_stack=hub_stack,
        hub_private_link=_hub_private_link(cl.get("hubPrivateLink", "none"), cloud, public, hub_stack),  # type: ignore[arg-type]
        ami_release_version=_ami_release(cl.get("amiReleaseVersion"), version),
        deletion_protection=_bool(cl.get("deletionProtection", True), "cluster.deletionProtection"),
        maintenance=_maintenance(cl.get("maintenance")),
    )
    if cloud == "aws":
        _check_api_rules(cluster)
    if cloud == "aws" and cl.get("maintenance") is not None:
        raise ConfigError(_key("cluster.maintenance"), "is GKE only (EKS managed node groups are upgraded only "
                          "when the stack changes their version); remove it from this AWS stack")

    # AWS: EKS access entries take IAM role or user ARNs (not assumed-role session ARNs).
    for principal in cluster.admin_principals if cloud == "aws" else ():
        if not re.fullmatch(r"arn:aws[-a-z]*:iam::\d{12}:(role|user)/[\w+=,.@/-]+", principal):
            raise ConfigError(
                _key("cluster.adminPrincipals"),
                f"{shown(principal)} is not an IAM role or user ARN (arn:aws:iam::<account>:role/<name>)",
            )
    return cluster
