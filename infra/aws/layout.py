"""Pure planning for the AWS stacks: which zones, which CIDRs, which tags. No Pulumi, no AWS calls.

Everything here runs before the first resource is registered, so a config that cannot be laid out
fails with a :class:`ConfigError` naming the key and leaves nothing half-created.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from infra.config import ConfigError, NodePoolConfig, StackConfig
from placement.zones import is_aws_zone_id

# Public subnets hold only the NAT gateway and internet-facing load balancers.
PUBLIC_SUBNET_PREFIX = 24
# Private subnets hold the system nodes, their pods and the EKS control-plane ENIs.
PRIVATE_SUBNET_PREFIX = 20
# The VPC CNI hands pods IPs from ENIs on the primary network card; with the default WARM_ENI_TARGET a
# big GPU node holds about two ENIs' worth (50 IPs each on 48xlarge sizes). EFA-only interfaces take no IP.
IPS_PER_GPU_NODE = 128
# AWS reserves 5 addresses per subnet; FSx for Lustre file servers and spare headroom take the rest.
GPU_SUBNET_RESERVED_IPS = 5 + 64
# Never smaller than a /24 (so a later maxNodes bump rarely forces a subnet replacement), never larger than /18.
GPU_SUBNET_MAX_PREFIX = 24
GPU_SUBNET_MIN_PREFIX = 18
# What a launch template's tag specifications tag at launch.
LAUNCHED_RESOURCE_TYPES = ("instance", "volume", "network-interface")


@dataclass(frozen=True)
class Zone:
    """An availability zone by both its account-specific name and its stable zone ID."""

    name: str
    zone_id: str


@dataclass(frozen=True)
class SubnetPlan:
    """CIDR blocks carved from the VPC CIDR.

    ``public``/``private``: one per system AZ, in AZ order. ``gpu``: one per GPU zone string, keyed
    as written in the config (zone ID such as ``use1-az6`` or name such as ``us-east-1a``).
    """

    public: tuple[str, ...]
    private: tuple[str, ...]
    gpu: Mapping[str, str]


def gpu_zones(cfg: StackConfig) -> tuple[str, ...]:
    """The zones that get a dedicated GPU subnet: ``gpuZone`` first, then each pool's zone, deduplicated."""
    zones: list[str] = []
    for zone in ([cfg.gpu_zone] if cfg.gpu_zone else []) + [p.zone for p in cfg.node_pools]:
        if zone not in zones:
            zones.append(zone)
    return tuple(zones)


def primary_gpu_zone(cfg: StackConfig) -> str:
    """The zone of the checkpoint filesystem and the NAT gateway: ``gpuZone``, else the first pool's zone."""
    return gpu_zones(cfg)[0]


def uses_efa(pool: NodePoolConfig) -> bool:
    """True when the pool's shape has EFA: its launch template carries one EFA interface per network card."""
    return pool.shape.fabric == "efa"


def needs_placement_group(pool: NodePoolConfig) -> bool:
    """EFA pools go into a cluster placement group, except pools on a reservation (Capacity Blocks and
    On-Demand Capacity Reservations).

    A Capacity Block is already delivered co-located in one UltraCluster, and an instance that targets a
    reservation cannot also be forced into a placement group the reservation was not created in (an ODCR
    meant for multi-node EFA is created in its own cluster placement group).
    """
    return uses_efa(pool) and pool.capacity != "CAPACITY_BLOCK" and not pool.reservation


def placement_zones(cfg: StackConfig) -> tuple[str, ...]:
    """Zones that get a cluster placement group (one per zone, shared by that zone's EFA pools)."""
    zones: list[str] = []
    for pool in cfg.node_pools:
        if needs_placement_group(pool) and pool.zone not in zones:
            zones.append(pool.zone)
    return tuple(zones)


def gpu_subnet_prefix(max_nodes: int) -> int:
    """Prefix length of a GPU subnet that holds ``max_nodes`` GPU nodes plus their pods and FSx."""
    needed = max_nodes * IPS_PER_GPU_NODE + GPU_SUBNET_RESERVED_IPS
    prefix = 32 - math.ceil(math.log2(needed))
    return max(GPU_SUBNET_MIN_PREFIX, min(GPU_SUBNET_MAX_PREFIX, prefix))


def plan_subnets(cfg: StackConfig) -> SubnetPlan:
    """Carve public, private and GPU subnets out of ``network.vpcCidr``, largest blocks first.

    Allocating in descending size keeps every block aligned with no gaps. Raises :class:`ConfigError`
    on ``gpufleet:network.vpcCidr`` when the blocks do not fit.
    """
    vpc = ipaddress.ip_network(cfg.network.vpc_cidr)
    if vpc.version != 4:
        raise ConfigError("gpufleet:network.vpcCidr", "must be an IPv4 CIDR block")
    if ipaddress.ip_network(cfg.network.services_cidr).overlaps(vpc):
        raise ConfigError("gpufleet:network.servicesCidr",
                          f"{cfg.network.services_cidr} overlaps the VPC {vpc}; EKS needs a separate service range")
    zones = gpu_zones(cfg)
    nodes = {z: sum(p.max_nodes for p in cfg.node_pools if p.zone == z) for z in zones}
    requests: list[tuple[str, int]] = [(f"gpu:{z}", gpu_subnet_prefix(nodes[z])) for z in zones]
    requests += [(f"private:{i}", PRIVATE_SUBNET_PREFIX) for i in range(cfg.network.az_count)]
    requests += [(f"public:{i}", PUBLIC_SUBNET_PREFIX) for i in range(cfg.network.az_count)]
    # Stable sort: equal sizes keep their request order, so the layout never shuffles between runs.
    ordered = sorted(requests, key=lambda r: r[1])
    blocks: dict[str, str] = {}
    cursor = int(vpc.network_address)
    end = int(vpc.broadcast_address) + 1
    for key, prefix in ordered:
        if prefix < vpc.prefixlen:
            raise ConfigError("gpufleet:network.vpcCidr",
                              f"{vpc} is too small for a /{prefix} subnet; use a /16 such as 10.0.0.0/16")
        size = 2 ** (32 - prefix)
        cursor = -(-cursor // size) * size
        if cursor + size > end:
            total = sum(2 ** (32 - p) for _, p in requests)
            raise ConfigError("gpufleet:network.vpcCidr",
                              f"{vpc} cannot hold the {len(requests)} subnets this stack needs ({total} addresses); "
                              "use a larger block such as a /16")
        blocks[key] = str(ipaddress.ip_network((cursor, prefix)))
        cursor += size
    return SubnetPlan(
        public=tuple(blocks[f"public:{i}"] for i in range(cfg.network.az_count)),
        private=tuple(blocks[f"private:{i}"] for i in range(cfg.network.az_count)),
        gpu={z: blocks[f"gpu:{z}"] for z in zones},
    )


def resolve_zone(zone: str, available: Sequence[Zone]) -> Zone | None:
    """The available AZ a config zone (name or ID) refers to; ``None`` for zones outside the list (Local Zones)."""
    for az in available:
        if zone in (az.name, az.zone_id):
            return az
    return None


def pick_system_azs(cfg: StackConfig, available: Sequence[Zone]) -> tuple[Zone, ...]:
    """``network.azCount`` AZs for the control plane and system nodes, the primary GPU zone first.

    The GPU zone leads so its NAT gateway and system nodes sit next to the GPUs (no cross-AZ charges on
    image pulls); the rest are the lowest zone IDs, which are the same in every account. Raises
    :class:`ConfigError` when the region has too few AZs.
    """
    chosen: list[Zone] = []
    first = resolve_zone(primary_gpu_zone(cfg), available)
    if first is not None:
        chosen.append(first)
    for az in sorted(available, key=lambda z: (len(z.zone_id), z.zone_id)):
        if len(chosen) == cfg.network.az_count:
            break
        if az not in chosen:
            chosen.append(az)
    if len(chosen) < cfg.network.az_count:
        raise ConfigError("gpufleet:network.azCount",
                          f"{cfg.region} has {len(available)} available zones, fewer than {cfg.network.az_count}")
    return tuple(chosen)


def zone_fields(zone: str) -> tuple[str | None, str | None]:
    """``(availability_zone, availability_zone_id)`` for a subnet in ``zone``: IDs are stable across accounts,
    names are not, so a zone ID is passed as such."""
    return (None, zone) if is_aws_zone_id(zone) else (zone, None)


def resource_tags(cfg: StackConfig, stack: str, name: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The stack's tags (always owner and cost-center) plus stack, cluster and ``Name`` tags."""
    return {**cfg.tags, "gpufleet-stack": stack, "gpufleet-cluster": cfg.cluster_name, "Name": name, **(extra or {})}


def bucket_name(cfg: StackConfig, account_id: str) -> str:
    """A globally unique, stable checkpoint bucket name: ``<cluster>-ckpt-<account>`` (at most 63 characters)."""
    suffix = f"-ckpt-{account_id}"
    return f"{cfg.cluster_name[: 63 - len(suffix)].rstrip('-')}{suffix}"
