"""How a hub and its workers are linked, as each stack's config says it: the keys that name other stacks and
the private paths between them.

Owns the worker references of a hub (``hub.workers``, ``_worker_refs``) and a worker's hub (``cluster.hubStack``,
``_stack_ref``), the private path a worker is reached on (``cluster.hubPrivateLink``, ``_hub_private_link``) and
an AWS hub's HA VPN to GCP workers (``hub.vpn``, :class:`HubVpnConfig`). Checks that need both stacks' configs
(overlapping ranges, the two ends of a path agreeing) are the entry point's:
:func:`infra.config.stack.check_worker_stacks`.

May import: the standard library, :mod:`placement.errors` and :mod:`infra.config.fields`; no Pulumi SDK.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from infra.config.fields import (
    _DNS_SUBDOMAIN,
    ConfigError,
    _choice,
    _int,
    _key,
    _mapping,
    _opt_str,
    _str,
    _strings,
    _unknown_keys,
)
from placement.errors import shown

# A fully qualified Pulumi stack org/project/stack: each part letters, digits, '-', '_', '.'.
_PULUMI_NAME = re.compile(r"[A-Za-z0-9][-A-Za-z0-9_.]{0,99}")
# MultiKueueConfig.spec.clusters in the Kueue v1beta2 CRD (the hub's all-workers config lists every worker).
MAX_HUB_WORKERS = 20
# AWS quota "Site-to-Site VPN connections per virtual private gateway" (default 10), two per linked GCP worker
# (infra/link.py says why one gateway serves them all).
MAX_VGW_CONNECTIONS = 10
# Private 16- and 32-bit ASNs (RFC 6996), what both a virtual private gateway and a Cloud Router take.
_PRIVATE_ASNS = ((64512, 65534), (4200000000, 4294967294))


@dataclass(frozen=True)
class HubVpnConfig:
    """An AWS hub's opt-in HA VPN (BGP, four tunnels, :mod:`infra.link`) to each of ``workers`` (GCP worker
    stacks of ``hub.workers``): the hub cluster's VPC ``vpc_id``, the route tables that learn the workers'
    routes, and the two BGP ASNs (AWS virtual private gateway, Cloud Router). One virtual private gateway
    serves every worker: the stack's own, or ``vpn_gateway_id`` (already attached to ``vpc_id``; its ASN is
    read from EC2, so ``amazon_asn`` is unused)."""

    vpc_id: str
    route_table_ids: tuple[str, ...]
    workers: tuple[str, ...]
    amazon_asn: int = 64512
    google_asn: int = 65534
    vpn_gateway_id: str | None = None


def _worker_refs(value: Any, path: str) -> tuple[str, ...]:
    """A hub's worker stacks: fully qualified ``org/project/stack``, each stack name a DNS-1123 label (it names
    the hub's objects for that worker), no stack name twice, at most :data:`MAX_HUB_WORKERS`."""
    refs = _strings(value, path)
    keys: list[str] = []
    for i, ref in enumerate(refs):
        parts = ref.split("/")
        if len(parts) != 3 or not all(_PULUMI_NAME.fullmatch(p) for p in parts):
            raise ConfigError(_key(f"{path}[{i}]"), f"{shown(ref)} must be a fully qualified stack org/project/stack "
                                                    "such as acme/gpufleet/aws-use1-p5")
        key = parts[2]
        if len(key) > 63 or not _DNS_SUBDOMAIN.fullmatch(key) or "." in key:
            raise ConfigError(_key(f"{path}[{i}]"), f"stack name {shown(key)} names the hub's objects for this worker, "
                                                    "so it must be a DNS-1123 label (lower-case letters, digits, '-')")
        if key in keys:
            raise ConfigError(_key(f"{path}[{i}]"), f"two workers share the stack name {key!r}; list each worker once")
        keys.append(key)
    if len(refs) > MAX_HUB_WORKERS:
        raise ConfigError(_key(path), f"lists {len(refs)} workers; a MultiKueueConfig takes at most {MAX_HUB_WORKERS}")
    return refs


def _stack_ref(value: Any, path: str) -> str | None:
    """An optional fully qualified stack ``org/project/stack`` (a StackReference name)."""
    if value is None:
        return None
    ref = _str(value, path)
    parts = ref.split("/")
    if len(parts) != 3 or not all(_PULUMI_NAME.fullmatch(p) for p in parts):
        raise ConfigError(_key(path), f"{shown(ref)} must be a fully qualified stack org/project/stack such as "
                                      "acme/gpufleet/hub")
    return ref


def _hub_private_link(value: Any, cloud: str, public: bool, hub_stack: str | None) -> str:
    """``cluster.hubPrivateLink``: none, external, or vpn (a GCP worker of the hub's HA VPN). A private path
    needs the public endpoint off: the worker's kubeconfig (what the hub dials) names the public endpoint
    while it is on, and the hub's traffic would take the NAT path, leaving the link idle."""
    path = "cluster.hubPrivateLink"
    link = _choice(value, path, ("none", "external", "vpn"))
    if link == "vpn" and cloud != "gcp":
        raise ConfigError(_key(path), "vpn is the hub stack's HA VPN to GCP workers (gpufleet:hub.vpn); on AWS "
                                      "build the link outside the stacks and set external")
    if link == "vpn" and hub_stack is None:
        raise ConfigError(_key(path), "vpn needs gpufleet:cluster.hubStack: the hub stack that builds the VPN")
    if link != "none" and public:
        raise ConfigError(_key("cluster.publicAccess"), f"must be false with hubPrivateLink {link}: while the public "
                                                        "endpoint is on, the kubeconfig the hub dials names it and "
                                                        "hub traffic goes over NAT, not the private link")
    return link


def _asn(value: Any, path: str, default: int) -> int:
    asn = _int(value if value is not None else default, path, minimum=0, maximum=2**32 - 1)
    if not any(lo <= asn <= hi for lo, hi in _PRIVATE_ASNS):
        raise ConfigError(_key(path), f"must be a private ASN (64512-65534 or 4200000000-4294967294), got {asn}")
    return asn


def _hub_vpn(value: Any, cloud: str, workers: tuple[str, ...]) -> HubVpnConfig | None:
    """``hub.vpn`` (opt-in): vpcId, routeTableIds, workers (GCP worker stacks of hub.workers), amazonAsn,
    googleAsn."""
    if value is None:
        return None
    path = "hub.vpn"
    raw = _mapping(value, path)
    _unknown_keys(raw, {"vpcId", "routeTableIds", "workers", "amazonAsn", "googleAsn", "vpnGatewayId"}, path)
    if cloud != "aws":
        raise ConfigError(_key(path), "is an AWS hub's VPN to GCP workers; on a GCP hub build the link outside the "
                                      "stacks and set gpufleet:cluster.hubPrivateLink: external on each worker")
    if raw.get("vpcId") is None:
        raise ConfigError(_key(f"{path}.vpcId"), "is required: the hub cluster's VPC (vpc-0123456789abcdef0)")
    vpc_id = _str(raw["vpcId"], f"{path}.vpcId")
    if not re.fullmatch(r"vpc-[0-9a-f]{8,17}", vpc_id):
        raise ConfigError(_key(f"{path}.vpcId"), f"{shown(vpc_id)} is not a VPC ID (vpc-0123456789abcdef0)")
    tables = _strings(raw.get("routeTableIds"), f"{path}.routeTableIds")
    for i, table in enumerate(tables):
        if not re.fullmatch(r"rtb-[0-9a-f]{8,17}", table):
            raise ConfigError(_key(f"{path}.routeTableIds[{i}]"), f"{shown(table)} is not a route table ID (rtb-...)")
    gateway = _opt_str(raw.get("vpnGatewayId"), f"{path}.vpnGatewayId")
    if gateway is not None and not re.fullmatch(r"vgw-[0-9a-f]{8,17}", gateway):
        raise ConfigError(_key(f"{path}.vpnGatewayId"), f"{shown(gateway)} is not a virtual private gateway ID "
                                                        "(vgw-0123456789abcdef0)")
    if gateway is not None and raw.get("amazonAsn") is not None:
        raise ConfigError(_key(f"{path}.amazonAsn"), "is the ASN of the gateway the stack creates; with vpnGatewayId "
                                                     "the existing gateway's own ASN is used: remove amazonAsn")
    if not tables and gateway is None:
        raise ConfigError(_key(f"{path}.routeTableIds"), "list the hub VPC's route tables that must learn the "
                                                         "workers' routes (those of the hub nodes' subnets)")
    linked = _strings(raw.get("workers"), f"{path}.workers")
    for i, ref in enumerate(linked):
        if ref not in workers:
            raise ConfigError(_key(f"{path}.workers[{i}]"), f"{shown(ref)} is not in gpufleet:hub.workers; list "
                                                            "the fully qualified GCP worker stacks to link")
    if not linked:
        raise ConfigError(_key(f"{path}.workers"), "list the GCP worker stacks to link (org/project/stack)")
    if 2 * len(linked) > MAX_VGW_CONNECTIONS:
        raise ConfigError(_key(f"{path}.workers"), f"lists {len(linked)} workers: each takes two VPN connections on "
                                                   "the hub's one virtual private gateway, which takes "
                                                   f"{MAX_VGW_CONNECTIONS} (AWS quota); link at most "
                                                   f"{MAX_VGW_CONNECTIONS // 2}")
    amazon = _asn(raw.get("amazonAsn"), f"{path}.amazonAsn", HubVpnConfig.amazon_asn)
    google = _asn(raw.get("googleAsn"), f"{path}.googleAsn", HubVpnConfig.google_asn)
    if amazon == google:
        raise ConfigError(_key(f"{path}.googleAsn"), "must differ from amazonAsn (two ends of one BGP session)")
    return HubVpnConfig(vpc_id=vpc_id, route_table_ids=tables, workers=linked, amazon_asn=amazon, google_asn=google,
                        vpn_gateway_id=gateway)
