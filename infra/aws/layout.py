"""Pure planning for the AWS stacks: which zones, which CIDRs, which tags. No Pulumi, no AWS calls.

Everything here runs before the first resource is registered, so a config that cannot be laid out
fails with a :class:`ConfigError` naming the key and leaves nothing half-created.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from infra.config import ConfigError, StackConfig
from infra.config.pools import NodePoolConfig
from placement.model.zones import is_aws_zone_id

# The VPC is carved into fixed slots that depend only on its CIDR and on each zone's own identity, never on
# node counts or on the pool list: raising a pool's maxNodes, adding or removing a pool must leave every subnet
# where it is (a subnet's CIDR forces its replacement, and with it the NAT gateway, the node groups and the FSx
# file system in it). For a VPC of prefix P:
#   [0, 6/8)   six GPU subnets of prefix P+3 (a /19 in a /16), slot = the zone's AZ number (use1-az6 -> 5,
#              us-east-1b -> 1);
#   [6/8, 7/8) eight private (system) subnets of prefix P+6 (/22), slot = the system AZ's zone-ID number;
#   [7/8, 1)   eight public subnets of prefix P+8 (/24), the same slots.
GPU_SLOTS = 6
SYSTEM_SLOTS = 8
GPU_SUBNET_EXTRA_BITS = 3
PRIVATE_SUBNET_EXTRA_BITS = 6
PUBLIC_SUBNET_EXTRA_BITS = 8
# The VPC CNI hands pods IPs from ENIs on the primary network card; with the default WARM_ENI_TARGET a
# big GPU node holds about two ENIs' worth (50 IPs each on 48xlarge sizes). EFA-only interfaces take no IP.
IPS_PER_GPU_NODE = 128
# AWS reserves 5 addresses per subnet; FSx for Lustre file servers and spare headroom take the rest.
GPU_SUBNET_RESERVED_IPS = 5 + 64
# AWS's smallest subnet.
MIN_SUBNET_PREFIX = 28
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

    ``public``/``private``: one per system slot (:func:`system_slot` of an AZ picks its pair). ``gpu``: one per
    GPU zone string, keyed as written in the config (zone ID such as ``use1-az6`` or name such as ``us-east-1a``),
    pinned ones included. ``pinned``: ``network.subnetCidrs`` (``public-<zone ID>``, ``private-<zone ID>``,
    ``gpu-<zone>`` → CIDR), which win over the slots: an existing stack's subnets stay where they are.
    """

    public: tuple[str, ...]
    private: tuple[str, ...]
    gpu: Mapping[str, str]
    pinned: Mapping[str, str] = field(default_factory=dict)

    def system_cidrs(self, az: Zone) -> tuple[str, str]:
        """``(public, private)`` CIDR of system AZ ``az``: pinned, else its slot's. Raises :class:`ConfigError`
        when a slot's block overlaps a pinned subnet (pin that AZ's subnets too)."""
        slot = system_slot(az)
        out = []
        for kind, block in (("public", self.public[slot]), ("private", self.private[slot])):
            key = f"{kind}-{az.zone_id}"
            if key not in self.pinned:
                _refuse_overlap(key, block, self.pinned)
            out.append(self.pinned.get(key, block))
        return out[0], out[1]


def unused_pins(plan: SubnetPlan, azs: Sequence[Zone]) -> tuple[str, ...]:
    """The ``network.subnetCidrs`` keys naming no subnet this stack builds (system AZs ``azs``, the GPU zones of
    ``plan``): an existing stack whose AZs are not the ones it had (``gpuZone`` unset and the first pool's zone not
    the lowest, another ``azCount``) would delete those subnets and build new ones."""
    built = {f"{kind}-{az.zone_id}" for az in azs for kind in ("public", "private")} | {f"gpu-{z}" for z in plan.gpu}
    return tuple(k for k in plan.pinned if k not in built)


def _refuse_overlap(key: str, block: str, pinned: Mapping[str, str]) -> None:
    """A subnet not pinned takes its fixed slot, which must not overlap a pinned (older layout's) subnet."""
    for other, cidr in pinned.items():
        if ipaddress.ip_network(block).overlaps(ipaddress.ip_network(cidr)):
            raise ConfigError("gpufleet:network.subnetCidrs",
                              f"subnet {key} is not pinned and would take {block}, which overlaps the pinned {other} "
                              f"({cidr}); pin {key} too, to a free block of the VPC")


def _zone_order(zone: str) -> tuple[int, str]:
    """Zones by their fixed slot (the AZ number), then as written: the same order whatever the pool list's."""
    slot = zone_slot(zone)
    return (slot if slot is not None else GPU_SLOTS + SYSTEM_SLOTS, zone)


def gpu_zones(cfg: StackConfig) -> tuple[str, ...]:
    """The zones that get a dedicated GPU subnet: the primary GPU zone first, then the other pools' zones in slot
    order (never the pool list's order)."""
    primary = primary_gpu_zone(cfg)
    others = sorted({p.zone for p in cfg.node_pools} - {primary}, key=_zone_order)
    return (primary, *others)


def primary_gpu_zone(cfg: StackConfig) -> str:
    """The zone of the checkpoint filesystem, the NAT gateway and the first system AZ: ``gpuZone``, else the pools'
    zone in the lowest slot (the lowest AZ number), so that reordering ``nodePools`` moves none of them. Set
    ``gpuZone`` to pin it (an existing stack keeps its NAT gateway by setting it to its first pool's zone)."""
    return cfg.gpu_zone or min((p.zone for p in cfg.node_pools), key=_zone_order)


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


def zone_slot(zone: str) -> int | None:
    """The fixed slot of a regular Availability Zone: its zone-ID number less one (``use1-az6`` -> 5) or its
    name's letter (``us-east-1b`` -> 1); None for Local and Wavelength Zones, which have neither."""
    m = re.fullmatch(r"[a-z]+\d+-az(\d+)", zone)
    if m:
        return int(m.group(1)) - 1
    m = re.fullmatch(r"[a-z]{2}(?:-[a-z]+)+-\d+([a-z])", zone)
    return ord(m.group(1)) - ord("a") if m else None


def gpu_subnet_nodes(vpc_prefix: int) -> int:
    """GPU nodes (with their pods and FSx) one GPU subnet of a ``/vpc_prefix`` VPC holds."""
    size = 2 ** (32 - vpc_prefix - GPU_SUBNET_EXTRA_BITS)
    return max(0, (size - GPU_SUBNET_RESERVED_IPS) // IPS_PER_GPU_NODE)


def _zone_key(cfg: StackConfig, zone: str) -> str:
    """The config key that names ``zone``: ``gpuZone`` or the first pool in it."""
    if cfg.gpu_zone == zone:
        return "gpufleet:gpuZone"
    i = next(i for i, p in enumerate(cfg.node_pools) if p.zone == zone)
    return f"gpufleet:nodePools[{i}].zone"


def plan_subnets(cfg: StackConfig) -> SubnetPlan:
    """The fixed subnet slots of ``network.vpcCidr`` (see the layout above) and the GPU subnet of each GPU zone.

    Nothing but the VPC CIDR and the zones' identities moves a block, so scaling or adding pools is an in-place
    update. Raises :class:`ConfigError` naming the key when a zone has no slot, two zones share one, a zone's
    pools could grow past what its subnet holds, or the VPC is too small.
    """
    vpc = ipaddress.ip_network(cfg.network.vpc_cidr)
    if vpc.version != 4:
        raise ConfigError("gpufleet:network.vpcCidr", "must be an IPv4 CIDR block")
    if ipaddress.ip_network(cfg.network.services_cidr).overlaps(vpc):
        raise ConfigError("gpufleet:network.servicesCidr",
                          f"{cfg.network.services_cidr} overlaps the VPC {vpc}; EKS needs a separate service range")
    if vpc.prefixlen + PUBLIC_SUBNET_EXTRA_BITS > MIN_SUBNET_PREFIX or gpu_subnet_nodes(vpc.prefixlen) < 1:
        raise ConfigError("gpufleet:network.vpcCidr",
                          f"{vpc} is too small for the fixed subnet layout; use a /16 such as 10.0.0.0/16")
    base = int(vpc.network_address)
    total = vpc.num_addresses

    def block(offset: int, extra_bits: int) -> str:
        return str(ipaddress.ip_network((base + offset, vpc.prefixlen + extra_bits)))

    gpu_size = total >> GPU_SUBNET_EXTRA_BITS
    private_size = total >> PRIVATE_SUBNET_EXTRA_BITS
    public_size = total >> PUBLIC_SUBNET_EXTRA_BITS
    private = tuple(block(6 * (total >> 3) + i * private_size, PRIVATE_SUBNET_EXTRA_BITS) for i in range(SYSTEM_SLOTS))
    public = tuple(block(7 * (total >> 3) + i * public_size, PUBLIC_SUBNET_EXTRA_BITS) for i in range(SYSTEM_SLOTS))
    capacity = gpu_subnet_nodes(vpc.prefixlen)
    pinned = dict(cfg.network.subnet_cidrs)
    gpu: dict[str, str] = {}
    taken: dict[int, str] = {}
    for zone in gpu_zones(cfg):
        if f"gpu-{zone}" in pinned:
            # An existing stack's subnet, sized as it was: its pools must fit what it holds.
            block_ = ipaddress.ip_network(pinned[f"gpu-{zone}"])
            held = max(0, (block_.num_addresses - GPU_SUBNET_RESERVED_IPS) // IPS_PER_GPU_NODE)
            _refuse_overgrowth(cfg, zone, held, f"its pinned GPU subnet {block_} holds; lower maxNodes or drop the pin "
                                                "(its subnet then moves)")
            gpu[zone] = str(block_)
            continue
        slot = zone_slot(zone)
        if slot is None or slot >= GPU_SLOTS:
            raise ConfigError(_zone_key(cfg, zone),
                              f"{zone} has no GPU subnet slot: GPU pools go in a regular Availability Zone "
                              f"(zone IDs az1-az{GPU_SLOTS}, or names ending a-{chr(ord('a') + GPU_SLOTS - 1)})")
        if slot in taken:
            raise ConfigError(_zone_key(cfg, zone),
                              f"{zone} and {taken[slot]} share GPU subnet slot {slot + 1}; write every zone the same "
                              "way, as zone IDs such as use1-az6")
        taken[slot] = zone
        _refuse_overgrowth(cfg, zone, capacity, f"its GPU subnet in {vpc} holds; lower maxNodes or use a larger "
                                                "network.vpcCidr")
        gpu[zone] = block(slot * gpu_size, GPU_SUBNET_EXTRA_BITS)
        _refuse_overlap(f"gpu-{zone}", gpu[zone], pinned)
    return SubnetPlan(public=public, private=private, gpu=gpu, pinned=pinned)


def _refuse_overgrowth(cfg: StackConfig, zone: str, held: int, why: str) -> None:
    """ConfigError on the last pool of ``zone`` when its pools may grow past the ``held`` nodes its GPU subnet holds
    (``why``: which subnet, and the way out)."""
    nodes = sum(p.max_nodes for p in cfg.node_pools if p.zone == zone)
    if nodes > held:
        i = max(i for i, p in enumerate(cfg.node_pools) if p.zone == zone)
        raise ConfigError(f"gpufleet:nodePools[{i}].maxNodes",
                          f"the pools in {zone} may grow to {nodes} nodes, more than the {held} {why}")


def system_slot(az: Zone) -> int:
    """The private/public subnet slot of a system AZ (its zone-ID number); :class:`ConfigError` beyond
    :data:`SYSTEM_SLOTS`."""
    slot = zone_slot(az.zone_id)
    if slot is None or slot >= SYSTEM_SLOTS:
        raise ConfigError("gpufleet:network.azCount", f"{az.zone_id} has no system subnet slot (az1-az{SYSTEM_SLOTS})")
    return slot


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
    for az in chosen:
        system_slot(az)
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
