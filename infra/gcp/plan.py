"""Pure planning for the GCP stack: which GPU networks the node pools need, their CIDRs and names.

No Pulumi import: the plan is computed (and the config checked) before any resource is registered,
so a config that cannot be built fails with a :class:`~infra.config.ConfigError` naming the key.

Every per-machine fact comes from the :class:`~placement.model.shapes.Shape` of a pool: ``gpu_vpcs`` extra
gVNIC VPCs and ``rdma_subnets`` subnets of one RDMA (RoCE) VPC. Network-level constants (MTU,
GKE object names) live here because they belong to the GCP networking model, not to a shape.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from infra.config import ConfigError, StackConfig
from infra.config.pools import NodePoolConfig

# gVNIC GPU VPCs of A3 High / A3 Mega (GPUDirect-TCPX/TCPXO): GKE's guides and the Cluster Toolkit
# A3 Mega blueprint create them with MTU 8244.
GVNIC_MTU = 8244
# RoCE VPCs (RDMA network profile) carry RDMA traffic with the largest MTU GCP offers.
RDMA_MTU = 8896
# The gVNIC VPC of A3 Ultra / A4 (the RDMA family) uses the same 8896 as its RoCE VPC, as the Cluster
# Toolkit A3 Ultra and A4 blueprints do (their vpc module's default MTU).
RDMA_GVNIC_MTU = 8896
# Each GPU subnet holds one NIC per node; a /24 leaves room for 250 nodes on one fabric.
GPU_SUBNET_PREFIX = 24
# Private services access range (Managed Lustre / Filestore peering), carved from the top of gpuCidrBase.
PSA_PREFIX = 20
# Fixed /24 slots of gpuCidrBase (after the private services range is set aside): GPUDirect VPCs gpu1..gpu8 take
# slots 0-7, the RDMA shapes' gVNIC networks 8-15, their RDMA subnets 16-23.
GVNIC_SLOT = 8
RDMA_SLOT = 16
# GCS soft delete accepts 0 (off) or 7..90 days.
SOFT_DELETE_DAYS = (7, 90)
# Managed Lustre capacities per performance tier (MB/s per TiB): (minimum, step, largest size on that step)
# in GiB; a size is the minimum plus whole steps. Google Cloud Managed Lustre documentation, "Increase the
# capacity of a Managed Lustre instance" (tier table: min capacity, max capacity, step size) and "Quotas and
# limits" (the same minimums). Larger sizes take a coarser step; a checkpoint tier stays well below them.
LUSTRE_TIERS: Mapping[int, tuple[int, int, int]] = {
    1000: (9_000, 9_000, 954_000),
    500: (18_000, 18_000, 1_908_000),
    250: (36_000, 36_000, 3_816_000),
    125: (72_000, 72_000, 7_632_000),
}
LUSTRE_THROUGHPUTS = tuple(sorted(LUSTRE_TIERS))
FILESTORE_ZONAL_MIN_GIB = 1024
# The first GKE version with flex-start node pools (GKE's flex-start documentation).
FLEX_START_MIN_GKE = "1.32.2-gke.1652000"

DeviceMode = Literal["NetDevice", "RDMA"]
Group = Literal["gpudirect", "rdma"]


def _key(path: str) -> str:
    return f"gpufleet:{path}"


@dataclass(frozen=True)
class GpuSubnetPlan:
    """One subnet of a GPU VPC and the GKE ``Network`` object that exposes it to pods."""

    gke_name: str
    subnet_name: str
    cidr: str


@dataclass(frozen=True)
class GpuVpcPlan:
    """One extra VPC a GPU node attaches a NIC (or, for RDMA, eight NICs) to.

    ``mtu`` in bytes; ``network_profile`` is set for the RoCE VPC only (it pins the VPC to one zone).
    """

    key: str
    vpc_name: str
    group: Group
    device_mode: DeviceMode
    mtu: int
    network_profile: str | None
    subnets: tuple[GpuSubnetPlan, ...]

    @property
    def rdma(self) -> bool:
        return self.device_mode == "RDMA"


@dataclass(frozen=True)
class GpuNetworkPlan:
    """All GPU VPCs of the stack; pools of one fabric family share them."""

    vpcs: tuple[GpuVpcPlan, ...]
    psa_cidr: str | None

    def attachments(self, pool: NodePoolConfig) -> list[tuple[GpuVpcPlan, GpuSubnetPlan]]:
        """The (VPC, subnet) pairs one node of ``pool`` attaches an additional NIC to, in NIC order."""
        shape = pool.shape
        group = _group(pool)
        if group is None:
            return []
        gvnic = [v for v in self.vpcs if v.group == group and not v.rdma][: shape.gpu_vpcs]
        out = [(v, v.subnets[0]) for v in gvnic]
        for v in self.vpcs:
            if v.group == group and v.rdma:
                out.extend((v, s) for s in v.subnets[: shape.rdma_subnets])
        return out

    def gke_network_names(self) -> list[str]:
        return [s.gke_name for v in self.vpcs for s in v.subnets]


def _group(pool: NodePoolConfig) -> Group | None:
    shape = pool.shape
    if shape.rdma_subnets > 0:
        return "rdma"
    if shape.gpu_vpcs > 0:
        return "gpudirect"
    return None


def rdma_network_profile(project: str, zone: str) -> str:
    """The RoCE network profile of a zone (A3 Ultra / A4 RDMA NICs only attach to such a VPC)."""
    return f"projects/{project}/global/networkProfiles/{zone}-vpc-roce"


def plan_gpu_networks(cfg: StackConfig) -> GpuNetworkPlan:
    """Plan the GPU VPCs every pool needs and carve their subnets out of ``network.gpuCidrBase``.

    Raises :class:`ConfigError` when RDMA pools span zones (a RoCE VPC is zonal), when the base CIDR
    overlaps the primary ranges or is too small for the subnets.
    """
    assert cfg.project is not None
    name = cfg.cluster_name
    gpudirect_vpcs = max((p.shape.gpu_vpcs for p in cfg.node_pools if _group(p) == "gpudirect"), default=0)
    rdma_pools = [(i, p) for i, p in enumerate(cfg.node_pools) if _group(p) == "rdma"]
    rdma_gvnic = max((p.shape.gpu_vpcs for _, p in rdma_pools), default=0)
    rdma_subnets = max((p.shape.rdma_subnets for _, p in rdma_pools), default=0)
    rdma_zone: str | None = None
    for i, pool in rdma_pools:
        if rdma_zone is None:
            rdma_zone = pool.zone
        elif pool.zone != rdma_zone:
            raise ConfigError(_key(f"nodePools[{i}].zone"),
                              f"RDMA pools must share one zone (the RoCE VPC is zonal): {pool.zone!r} vs {rdma_zone!r}")

    base = ipaddress.ip_network(cfg.network.gpu_cidr_base)
    if not isinstance(base, ipaddress.IPv4Network):
        raise ConfigError(_key("network.gpuCidrBase"), f"must be an IPv4 CIDR (GPU subnets are IPv4 only), got {base}")
    for other_key, other in (("network.vpcCidr", cfg.network.vpc_cidr), ("network.podsCidr", cfg.network.pods_cidr),
                             ("network.servicesCidr", cfg.network.services_cidr)):
        if base.overlaps(ipaddress.ip_network(other)):
            raise ConfigError(_key("network.gpuCidrBase"), f"{base} overlaps gpufleet:{other_key} ({other}); "
                              "a node routes each of its NICs by destination, so the ranges must be disjoint")
    wanted = gpudirect_vpcs + rdma_gvnic + rdma_subnets
    if base.prefixlen > GPU_SUBNET_PREFIX:
        raise ConfigError(_key("network.gpuCidrBase"), f"must be /{GPU_SUBNET_PREFIX} or larger, got {base}")
    pool_of_subnets = list(base.subnets(new_prefix=GPU_SUBNET_PREFIX))
    psa_cidr: str | None = None
    if cfg.checkpoint.filesystem.kind != "none":
        if base.prefixlen > PSA_PREFIX - 1:
            raise ConfigError(_key("network.gpuCidrBase"), f"must be /{PSA_PREFIX - 1} or larger when a checkpoint "
                              f"filesystem is set (its private services range is the last /{PSA_PREFIX}), got {base}")
        psa = list(base.subnets(new_prefix=PSA_PREFIX))[-1]
        psa_cidr = str(psa)
        pool_of_subnets = [s for s in pool_of_subnets if not s.overlaps(psa)]
    if wanted > len(pool_of_subnets):
        raise ConfigError(_key("network.gpuCidrBase"),
                          f"{base} holds {len(pool_of_subnets)} /{GPU_SUBNET_PREFIX} GPU subnets, "
                          f"the pools need {wanted}")
    # Fixed slots per network (not the next free block): adding a pool of another shape, or removing one, never
    # moves a subnet that exists (a subnet's range change replaces it and the node pools on it).
    needed = max([GVNIC_SLOT + rdma_gvnic if rdma_gvnic else 0, RDMA_SLOT + rdma_subnets if rdma_subnets else 0,
                  gpudirect_vpcs])
    if needed > len(pool_of_subnets):
        raise ConfigError(_key("network.gpuCidrBase"),
                          f"{base} holds {len(pool_of_subnets)} /{GPU_SUBNET_PREFIX} GPU subnets, the fixed slots of "
                          f"these pools' networks reach {needed}; use a /16 such as 10.100.0.0/16")

    def slot(i: int) -> str:
        return str(pool_of_subnets[i])

    vpcs: list[GpuVpcPlan] = []
    for i in range(1, gpudirect_vpcs + 1):
        # GKE's TCPX/TCPXO manifests name these networks vpc1..vpcN; keep the names so they apply as-is.
        vpcs.append(GpuVpcPlan(
            key=f"gpu{i}", vpc_name=_gcp_name(f"{name}-gpu{i}"), group="gpudirect", device_mode="NetDevice",
            mtu=GVNIC_MTU, network_profile=None,
            subnets=(GpuSubnetPlan(gke_name=f"vpc{i}", subnet_name=_gcp_name(f"{name}-gpu{i}"), cidr=slot(i - 1)),)))
    for i in range(1, rdma_gvnic + 1):
        # A3 Ultra / A4 guides name the gVNIC network gvnic-1 and the RDMA ones rdma-0..rdma-7.
        vpcs.append(GpuVpcPlan(
            key=f"gvnic{i}", vpc_name=_gcp_name(f"{name}-gvnic{i}"), group="rdma", device_mode="NetDevice",
            mtu=RDMA_GVNIC_MTU, network_profile=None,
            subnets=(GpuSubnetPlan(gke_name=f"gvnic-{i}", subnet_name=_gcp_name(f"{name}-gvnic{i}"),
                                   cidr=slot(GVNIC_SLOT + i - 1)),)))
    if rdma_subnets and rdma_zone is not None:
        vpcs.append(GpuVpcPlan(
            key="rdma", vpc_name=_gcp_name(f"{name}-rdma"), group="rdma", device_mode="RDMA", mtu=RDMA_MTU,
            network_profile=rdma_network_profile(cfg.project, rdma_zone),
            subnets=tuple(GpuSubnetPlan(gke_name=f"rdma-{j}", subnet_name=_gcp_name(f"{name}-rdma{j}"),
                                        cidr=slot(RDMA_SLOT + j)) for j in range(rdma_subnets))))
    return GpuNetworkPlan(vpcs=tuple(vpcs), psa_cidr=psa_cidr)


def check_gcp_config(cfg: StackConfig) -> GpuNetworkPlan:
    """Every GCP-only check the shared config parser cannot make; returns the GPU network plan."""
    ck = cfg.checkpoint
    low, high = SOFT_DELETE_DAYS
    if ck.soft_delete_days and not low <= ck.soft_delete_days <= high:
        raise ConfigError(_key("checkpoint.softDeleteDays"),
                          f"GCS soft delete takes 0 (off) or {low}..{high} days, got {ck.soft_delete_days}")
    fs = ck.filesystem
    if fs.kind == "lustre":
        if fs.throughput_mbps_per_tib not in LUSTRE_THROUGHPUTS:
            raise ConfigError(_key("checkpoint.filesystem.throughputMbpsPerTib"),
                              f"Managed Lustre tiers are {', '.join(map(str, LUSTRE_THROUGHPUTS))} MB/s per TiB")
        low, step, high = LUSTRE_TIERS[fs.throughput_mbps_per_tib]
        if not (low <= fs.capacity_gb <= high and fs.capacity_gb % step == 0):
            raise ConfigError(_key("checkpoint.filesystem.capacityGb"),
                              f"Managed Lustre at {fs.throughput_mbps_per_tib} MB/s per TiB takes {low:,} to "
                              f"{high:,} GiB in steps of {step:,} ({low:,}, {low + step:,}, ...), "
                              f"got {fs.capacity_gb:,}")
    if fs.kind == "filestore" and fs.capacity_gb < FILESTORE_ZONAL_MIN_GIB:
        raise ConfigError(_key("checkpoint.filesystem.capacityGb"),
                          f"Filestore zonal starts at {FILESTORE_ZONAL_MIN_GIB} GiB, got {fs.capacity_gb}")
    if ck.kms_key is not None and not re.fullmatch(r"projects/[^/]+/locations/[^/]+/keyRings/[^/]+/cryptoKeys/[^/]+",
                                                   str(ck.kms_key)):
        raise ConfigError(_key("checkpoint.kmsKey"),
                          "must be a Cloud KMS key name projects/P/locations/L/keyRings/R/cryptoKeys/K")
    for i, pool in enumerate(cfg.node_pools):
        if pool.queued and cfg.cluster.gke_version and _gke_version(cfg.cluster.gke_version) < _gke_version(
                FLEX_START_MIN_GKE):
            raise ConfigError(_key("cluster.gkeVersion"),
                              f"{cfg.cluster.gke_version} is older than {FLEX_START_MIN_GKE}, the first GKE version "
                              f"with flex-start node pools (nodePools[{i}] {pool.name!r} is flex-start)")
    return plan_gpu_networks(cfg)


def _gke_version(version: str) -> tuple[int, ...]:
    """``1.32.2-gke.1652000`` (or a prefix such as ``1.33``) as comparable numbers; a prefix sorts first."""
    return tuple(int(n) for n in re.findall(r"\d+", version))


_LABEL_BAD = re.compile(r"[^a-z0-9_-]")


def gcp_labels(cfg: StackConfig, stack: str) -> dict[str, str]:
    """The stack's tags as GCP labels (lower-case ``[a-z0-9_-]``, at most 63 characters each).

    Tags that are already valid labels pass through unchanged; others are folded so `pulumi up`
    does not fail on a label the API rejects.
    """
    labels: dict[str, str] = {}
    for key, value in {**cfg.tags, "gpufleet-stack": stack}.items():
        k = _LABEL_BAD.sub("_", key.lower())[:63]
        if not k or not k[0].isalpha():
            k = ("t" + k)[:63]
        labels[k] = _LABEL_BAD.sub("_", value.lower())[:63]
    return labels


def _gcp_name(name: str, limit: int = 63) -> str:
    """A GCE resource name within ``limit`` characters, keeping it unique with a short hash when cut."""
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:6]
    return f"{name[: limit - 7].rstrip('-')}-{digest}"


def bucket_name(project: str, cluster_name: str) -> str:
    """A globally unique, deterministic checkpoint bucket name (3..63 characters)."""
    return _gcp_name(f"{project}-{cluster_name}-ckpt".lower())


def service_account_id(cluster_name: str, role: str) -> str:
    """A service account ID (6..30 characters, ``[a-z][a-z0-9-]*[a-z0-9]``) for ``role`` in this cluster."""
    sa = _gcp_name(f"{cluster_name}-{role}", limit=30)
    return sa if len(sa) >= 6 else f"{sa}-sa0"[:30]

