"""``gpufleet:nodePools``: the GPU node pools of a worker (AWS managed node groups, GKE node pools).

Owns :class:`NodePoolConfig` and the rules each pool is checked with: the machine shape (``placement`` shape
data, the same the placement CLI reads), the capacity kind a cloud offers (on-demand, spot, capacity block,
reservation, flex-start) and its reservation, node counts, and the zone, which the embedded catalog must
offer the shape in.

May import: the standard library, :mod:`infra.config.fields`, :mod:`placement.errors` and ``placement``'s
shape, zone and catalog data (the catalog lazily); no Pulumi SDK.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from infra.config.fields import _NAME, ConfigError, _int, _key, _mapping, _opt_str, _str, _unknown_keys
from placement.errors import shown
from placement.model.shapes import Shape, shape_book
from placement.model.zones import is_aws_zone_id, zone_in_region

# FLEX_START (GCP, `capacity: flex-start`): a GKE flex-start node pool with queued provisioning (Dynamic
# Workload Scheduler). It scales from zero when a Kueue ProvisioningRequest admission check obtains all the
# nodes of a job at once; no reservation. Priced and placed as on-demand (the catalog has no flex-start price).
Capacity = Literal["ON_DEMAND", "SPOT", "CAPACITY_BLOCK", "RESERVATION", "FLEX_START"]
_CAPACITIES: dict[str, tuple[str, ...]] = {
    "aws": ("ON_DEMAND", "SPOT", "CAPACITY_BLOCK"),
    "gcp": ("ON_DEMAND", "SPOT", "RESERVATION", "FLEX_START"),
}
# A Compute Engine resource name (RFC 1035: 1-63 characters, a lower-case letter first, no trailing '-'), as a
# reservation's name; a shared reservation is named by path, optionally down to one of its blocks.
_GCE_NAME = r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?"
_GCP_RESERVATION = re.compile(rf"{_GCE_NAME}|projects/[a-z][-a-z0-9]{{4,28}}[a-z0-9]/reservations/{_GCE_NAME}"
                              rf"(/reservationBlocks/{_GCE_NAME})?")
# Nodes in one pool: GKE's limit per node pool and zone, far above any GPU pool this toolkit sizes.
MAX_POOL_NODES = 1000


@dataclass(frozen=True)
class NodePoolConfig:
    """One GPU node pool (AWS managed node group / GKE node pool) in one zone."""

    name: str
    shape: Shape
    capacity: Capacity
    min_nodes: int
    desired_nodes: int
    max_nodes: int
    zone: str
    reservation: str | None = None

    @property
    def capacity_kind(self) -> Literal["spot", "on-demand"]:
        """The placement engine's capacity name: reservations, capacity blocks and flex-start are on-demand
        priced."""
        return "spot" if self.capacity == "SPOT" else "on-demand"

    @property
    def queued(self) -> bool:
        """True for a GKE flex-start pool: nodes come only through a ProvisioningRequest (Kueue's admission check)."""
        return self.capacity == "FLEX_START"

    @property
    def multi_node(self) -> bool:
        return self.max_nodes > 1


def _node_pool(raw: Any, i: int, cloud: str, region: str, gpu_zone: str | None) -> NodePoolConfig:
    path = f"nodePools[{i}]"
    pool = _mapping(raw, path)
    _unknown_keys(
        pool, {"name", "instanceType", "capacity", "minNodes", "desiredNodes", "maxNodes", "zone", "reservation"}, path
    )
    name = _str(pool.get("name"), f"{path}.name")
    if not _NAME.fullmatch(name):
        raise ConfigError(_key(f"{path}.name"), "must be lower-case letters, digits and '-', at most 40 characters")
    itype = _str(pool.get("instanceType"), f"{path}.instanceType")
    shape = shape_book().get(itype)
    if shape is None or shape.cloud != cloud:
        known = ", ".join(s.name for s in shape_book().for_cloud(cloud))
        raise ConfigError(_key(f"{path}.instanceType"), f"unknown {cloud} GPU shape {shown(itype)}; known: {known}")
    capacity = _str(pool.get("capacity", "ON_DEMAND"), f"{path}.capacity").upper().replace("-", "_")
    if capacity not in _CAPACITIES[cloud]:
        raise ConfigError(_key(f"{path}.capacity"), f"must be one of {', '.join(_CAPACITIES[cloud])}")
    reservation = _opt_str(pool.get("reservation"), f"{path}.reservation")
    if capacity in ("CAPACITY_BLOCK", "RESERVATION") and not reservation:
        raise ConfigError(_key(f"{path}.reservation"), f"is required when capacity is {capacity}")
    # AWS: the launch template targets the Capacity Block or On-Demand Capacity Reservation by its ID;
    # spot instances never run in a capacity reservation.
    if cloud == "aws" and reservation and capacity == "SPOT":
        raise ConfigError(_key(f"{path}.reservation"), "spot instances cannot use a capacity reservation; remove it "
                                                       "or set capacity to ON_DEMAND (an ODCR) or CAPACITY_BLOCK")
    # GKE: the pool consumes a specific reservation only with capacity RESERVATION (on-demand VMs in it); on an
    # on-demand pool the stack would drop it silently (infra/gcp/nodepool.py), and Spot VMs cannot consume a
    # reservation at all (Compute Engine, "Consume reservations": limitations).
    if cloud == "gcp" and reservation and capacity in ("SPOT", "ON_DEMAND"):
        why = "Spot VMs cannot consume a reservation" if capacity == "SPOT" else "an ON_DEMAND pool ignores it"
        raise ConfigError(_key(f"{path}.reservation"), f"is only used with capacity RESERVATION ({why}); set "
                                                       "capacity to RESERVATION to consume it, or remove it")
    if cloud == "gcp" and reservation and not _GCP_RESERVATION.fullmatch(reservation):
        raise ConfigError(
            _key(f"{path}.reservation"),
            f"{shown(reservation)} is not a Compute Engine reservation name (1-63 lower-case letters, digits and '-', "
            "a letter first, not ending in '-'), nor projects/<project>/reservations/<name>[/reservationBlocks/"
            "<block>] for a shared reservation",
        )
    if cloud == "aws" and reservation and not re.fullmatch(r"cr-[0-9a-f]+", reservation):
        raise ConfigError(
            _key(f"{path}.reservation"),
            f"must be a capacity reservation ID such as cr-0123456789abcdef0, got {shown(reservation)}",
        )
    min_nodes = _int(pool.get("minNodes", 0), f"{path}.minNodes", maximum=MAX_POOL_NODES)
    max_nodes = _int(pool.get("maxNodes", 1), f"{path}.maxNodes", minimum=1, maximum=MAX_POOL_NODES)
    desired = _int(pool.get("desiredNodes", min_nodes), f"{path}.desiredNodes", maximum=MAX_POOL_NODES)
    if capacity == "FLEX_START":
        _check_flex_start(pool, path, min_nodes, desired)
    if min_nodes > max_nodes:
        raise ConfigError(_key(f"{path}.minNodes"), f"({min_nodes}) must not exceed maxNodes ({max_nodes})")
    if not min_nodes <= desired <= max_nodes:
        raise ConfigError(_key(f"{path}.desiredNodes"), f"({desired}) must lie between minNodes and maxNodes")
    zone = _opt_str(pool.get("zone"), f"{path}.zone") or gpu_zone
    if not zone:
        raise ConfigError(_key(f"{path}.zone"), "is required when gpufleet:gpuZone is not set")
    if not zone_in_region(cloud, zone, region):
        raise ConfigError(
            _key(f"{path}.zone" if pool.get("zone") else "gpuZone"), f"zone {shown(zone)} is not in region {region!r}"
        )
    if max_nodes > 1 and not shape.multi_node:
        raise ConfigError(
            _key(f"{path}.maxNodes"),
            f"{itype} has no multi-node GPU fabric; set maxNodes to 1 or pick an EFA/GPUDirect shape",
        )
    _check_offer(cloud, itype, region, zone, f"{path}.instanceType")
    return NodePoolConfig(
        name=name,
        shape=shape,
        capacity=capacity,  # type: ignore[arg-type]
        min_nodes=min_nodes,
        desired_nodes=desired,
        max_nodes=max_nodes,
        zone=zone,
        reservation=reservation,
    )


def _check_flex_start(pool: Mapping[str, Any], path: str, min_nodes: int, desired: int) -> None:
    """GKE's rules for a queued-provisioning flex-start pool: no reservation, scale from zero."""
    if pool.get("reservation"):
        raise ConfigError(_key(f"{path}.reservation"), "must not be set when capacity is flex-start: Dynamic Workload "
                          "Scheduler obtains the nodes without a reservation (use capacity RESERVATION for one)")
    if min_nodes or desired:
        raise ConfigError(_key(f"{path}.minNodes" if min_nodes else f"{path}.desiredNodes"),
                          "must be 0 when capacity is flex-start: the pool scales from zero as Kueue's "
                          "ProvisioningRequests are granted")


def _check_offer(cloud: str, itype: str, region: str, zone: str, path: str) -> None:
    """Machine types exist only in some zones; the embedded catalog (read through ``placement``) says which.

    AWS zone names (us-east-1a) point at a different physical zone in each account, so for them only the
    region is checked; zone IDs (use1-az6) and GCP zones are checked exactly. A catalog row without a zone
    (its zone is its region) vouches for the whole region.
    """
    from placement.model.catalog import embedded_catalog

    zones = {o.zone for o in embedded_catalog().offers
             if o.cloud == cloud and o.instance_type == itype and o.region == region}
    if region in zones or (zones and cloud == "aws" and not is_aws_zone_id(zone)):
        return
    if zone not in zones:
        where = ", ".join(sorted(zones)) or "no zone of this region"
        raise ConfigError(
            _key(path), f"{itype} is not offered in {zone} per the embedded catalog (offered in: {where}); "
                        "pick one of those zones (gpufleet:gpuZone / the pool's zone) or another instance type"
        )


def parse_node_pools(value: Any, role: str, cloud: str, region: str,
                     gpu_zone: str | None) -> tuple[NodePoolConfig, ...]:
    """``gpufleet:nodePools`` of a ``role`` stack on ``cloud`` in ``region``: each pool checked, names distinct,
    multi-node pools in one zone (``gpu_zone``, the stack's ``gpufleet:gpuZone``, the default zone)."""
    pools_raw = value or []
    if not isinstance(pools_raw, list):
        raise ConfigError(_key("nodePools"), "must be a list of node pools")
    if role == "worker" and not pools_raw:
        raise ConfigError(_key("nodePools"), "a worker stack needs at least one GPU node pool")
    pools = tuple(_node_pool(p, i, cloud, region, gpu_zone) for i, p in enumerate(pools_raw))
    names = [p.name for p in pools]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise ConfigError(_key(f"nodePools[{i}].name"), f"duplicate pool name {name!r}; pool names must differ")
    multi_zones = {p.zone for p in pools if p.multi_node}
    if gpu_zone is None and len(multi_zones) > 1:
        raise ConfigError(
            _key("gpuZone"), "set one GPU zone: multi-node pools in different zones cannot share a fabric"
        )
    return pools
