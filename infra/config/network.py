"""``gpufleet:network``: the address ranges one cluster routes, and the CIDR rules every API allow-list follows.

Owns :class:`NetworkConfig` (the VPC, pods, services and GPU ranges, pairwise disjoint), which addresses are
private (:func:`is_private_cidr`), the IPv4-only allow-list CIDRs (``_ipv4_cidrs``) and the widest public span
one allow-list may open (:func:`check_public_span`), used by the cluster and hub sections.

May import: the standard library, :mod:`placement.errors` and :mod:`infra.config.fields`; no Pulumi SDK.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from infra.config.fields import ConfigError, _cidr, _int, _key, _mapping, _strings, _unknown_keys
from placement.errors import shown

# network.azCount: no AWS region has more Availability Zones than this.
MAX_AZ_COUNT = 6


# Address space a VPC, a peering or a VPN carries (RFC 1918, the RFC 6598 shared range clouds also use inside
# VPCs, IPv6 unique-local). Anything else is an internet address, reachable only on a public endpoint.
PRIVATE_RANGES = tuple(ipaddress.ip_network(c) for c in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",
                                                         "100.64.0.0/10", "fc00::/7"))


def is_private_cidr(cidr: str) -> bool:
    """True when all of ``cidr`` lies in :data:`PRIVATE_RANGES` (reached over private links, not the internet)."""
    net = ipaddress.ip_network(cidr, strict=False)
    return any(net.version == p.version and net.subnet_of(p) for p in PRIVATE_RANGES)  # type: ignore[arg-type]


@dataclass(frozen=True)
class NetworkConfig:
    """CIDRs. AWS: ``vpc_cidr`` split into subnets. GCP: primary subnet plus pod/service ranges."""

    vpc_cidr: str = "10.0.0.0/16"
    az_count: int = 2
    pods_cidr: str = "10.64.0.0/14"
    services_cidr: str = "10.68.0.0/20"
    gpu_cidr_base: str = "10.100.0.0/16"


def _check_ranges(network: NetworkConfig, cloud: str) -> None:
    """The address ranges one cluster routes are IPv4 and pairwise disjoint: a node sends each packet to the
    first range that holds its destination, so an overlap silently blackholes pods, services or GPU traffic.

    AWS uses the VPC and the EKS service range (pods take VPC addresses); GKE also the pods range and the GPU
    networks, whose gVNIC and RDMA subnets are all carved from ``gpuCidrBase`` (disjoint by construction).
    """
    ranges = [("network.vpcCidr", network.vpc_cidr)]
    if cloud == "gcp":
        ranges.append(("network.podsCidr", network.pods_cidr))
    ranges.append(("network.servicesCidr", network.services_cidr))
    if cloud == "gcp":
        ranges.append(("network.gpuCidrBase", network.gpu_cidr_base))
    for j, (key, cidr) in enumerate(ranges):
        net = ipaddress.ip_network(cidr)
        if net.version != 4:
            raise ConfigError(_key(key), f"must be an IPv4 CIDR block such as 10.0.0.0/16, got {cidr}")
        for other_key, other in ranges[:j]:
            if net.overlaps(ipaddress.ip_network(other)):
                raise ConfigError(_key(key), f"{cidr} overlaps gpufleet:{other_key} ({other}); the ranges a "
                                             "cluster routes must be disjoint: pick a block outside it")


def _ipv4_cidrs(value: Any, path: str) -> tuple[str, ...]:
    """A list of IPv4 CIDRs, none of them the whole internet (EKS and GKE API allow-lists take IPv4 only)."""
    out = []
    for c in _strings(value, path):
        cidr = _cidr(c, path)
        net = ipaddress.ip_network(cidr)
        if net.version != 4:
            raise ConfigError(_key(path), f"{shown(c)} is not IPv4; EKS public access CIDRs and GKE authorized "
                                          "networks take IPv4 CIDRs only")
        if net.prefixlen == 0:
            raise ConfigError(_key(path), f"{shown(c)} is the whole internet; list the hub's or operators' own ranges")
        if cidr not in out:
            out.append(cidr)
    return tuple(out)


# The most internet address space one API allow-list may open: a /8 (16,777,216 addresses). Larger sets are
# the internet in pieces (0.0.0.0/1 + 128.0.0.0/1 is 0.0.0.0/0), which no hub or operator egresses from.
MAX_PUBLIC_SPAN = ipaddress.ip_network("10.0.0.0/8").num_addresses


def public_span(cidrs: Any) -> tuple[int, list[str]]:
    """``(addresses, collapsed CIDRs)`` of the public (non-:data:`PRIVATE_RANGES`) IPv4 parts of ``cidrs``,
    overlaps counted once."""
    nets = [ipaddress.ip_network(c, strict=False) for c in cidrs]
    public = [n for n in nets if n.version == 4 and not is_private_cidr(str(n))]
    collapsed = list(ipaddress.collapse_addresses(public))  # type: ignore[arg-type]
    return sum(n.num_addresses for n in collapsed), [str(n) for n in collapsed]


def public_span_error(cidrs: Any) -> str | None:
    """Why the public CIDRs among ``cidrs`` are too wide together (more than a /8), naming what they cover;
    None when they are not."""
    total, covered = public_span(cidrs)
    if total <= MAX_PUBLIC_SPAN:
        return None
    shown_cover = ", ".join(covered[:4]) + (f" and {len(covered) - 4} more" if len(covered) > 4 else "")
    return (f"together cover {total:,} public addresses ({shown_cover}), more than a /8 "
            f"({MAX_PUBLIC_SPAN:,}); list the hub's and operators' own addresses")


def check_public_span(cidrs: Any, path: str) -> None:
    """Refuse public CIDRs that together open more than a /8 (:func:`public_span_error`) at key ``path``."""
    error = public_span_error(cidrs)
    if error:
        raise ConfigError(_key(path), error)


def parse_network(value: Any, cloud: str) -> NetworkConfig:
    """``gpufleet:network`` of a ``cloud`` stack: its CIDRs, checked to be IPv4 and pairwise disjoint."""
    net = _mapping(value, "network")
    _unknown_keys(net, {"vpcCidr", "azCount", "podsCidr", "servicesCidr", "gpuCidrBase"}, "network")
    network = NetworkConfig(
        vpc_cidr=_cidr(net.get("vpcCidr", NetworkConfig.vpc_cidr), "network.vpcCidr"),
        az_count=_int(net.get("azCount", 2), "network.azCount", minimum=2, maximum=MAX_AZ_COUNT),
        pods_cidr=_cidr(net.get("podsCidr", NetworkConfig.pods_cidr), "network.podsCidr"),
        services_cidr=_cidr(net.get("servicesCidr", NetworkConfig.services_cidr), "network.servicesCidr"),
        gpu_cidr_base=_cidr(net.get("gpuCidrBase", NetworkConfig.gpu_cidr_base), "network.gpuCidrBase"),
    )
    _check_ranges(network, cloud)
    return network
