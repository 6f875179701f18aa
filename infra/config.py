"""Stack configuration: parsed once, typed and validated, before any resource is registered.

Every key lives in the ``gpufleet`` namespace (``gpufleet:nodePools`` in ``stacks/Pulumi.<stack>.yaml``)
and is declared with its type and description in ``Pulumi.yaml``. Machine shapes come from
``placement/data/shapes.yaml``, the same data the placement CLI reads.

This module imports no Pulumi SDK at import time so it can be unit-tested and reused by
``scripts/preview`` and ``placement submit``; :func:`from_pulumi` reads the live stack config.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from placement.errors import InputError
from placement.shapes import Shape, shape_book
from placement.zones import zone_in_region

NAMESPACE = "gpufleet"
# Every top-level stack config key, all declared in Pulumi.yaml.
KEYS = (
    "cloud",
    "role",
    "region",
    "project",
    "clusterName",
    "gpuZone",
    "nodePools",
    "network",
    "cluster",
    "checkpoint",
    "training",
    "kueue",
    "hub",
    "tags",
)

Capacity = Literal["ON_DEMAND", "SPOT", "CAPACITY_BLOCK", "RESERVATION"]
_CAPACITIES: dict[str, tuple[str, ...]] = {
    "aws": ("ON_DEMAND", "SPOT", "CAPACITY_BLOCK"),
    "gcp": ("ON_DEMAND", "SPOT", "RESERVATION"),
}
_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")


# Address space a VPC, a peering or a VPN carries (RFC 1918, the RFC 6598 shared range clouds also use inside
# VPCs, IPv6 unique-local). Anything else is an internet address, reachable only on a public endpoint.
PRIVATE_RANGES = tuple(ipaddress.ip_network(c) for c in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",
                                                         "100.64.0.0/10", "fc00::/7"))


def is_private_cidr(cidr: str) -> bool:
    """True when all of ``cidr`` lies in :data:`PRIVATE_RANGES` (reached over private links, not the internet)."""
    net = ipaddress.ip_network(cidr, strict=False)
    return any(net.version == p.version and net.subnet_of(p) for p in PRIVATE_RANGES)  # type: ignore[arg-type]


# The FSx for Lustre deployment type the stack creates (infra/aws/checkpoint.py), SSD storage.
FSX_DEPLOYMENT_TYPE = "PERSISTENT_2"
# Storage capacities FSx for Lustre accepts at create, per SSD deployment type (CreateFileSystem
# StorageCapacity, FSx API reference): the listed first sizes, then multiples of the step, in GB (GiB).
FSX_SSD_CAPACITY: Mapping[str, tuple[tuple[int, ...], int]] = {
    "PERSISTENT_2": ((1200, 2400), 2400),
    "PERSISTENT_1": ((1200, 2400), 2400),
    "SCRATCH_2": ((1200, 2400), 2400),
    "SCRATCH_1": ((1200, 2400), 3600),
}


def fsx_capacity_valid(deployment_type: str, capacity_gb: int) -> bool:
    """Whether FSx for Lustre creates an SSD file system of ``deployment_type`` with ``capacity_gb`` GB."""
    first, step = FSX_SSD_CAPACITY[deployment_type]
    return capacity_gb in first or (capacity_gb > 0 and capacity_gb % step == 0)


def fsx_valid_sizes(deployment_type: str) -> str:
    """The sizes of :func:`fsx_capacity_valid` in words, for error messages."""
    first, step = FSX_SSD_CAPACITY[deployment_type]
    after = [n * step for n in range(1, 4) if n * step > max(first)][:2]
    return f"{', '.join(map(str, first))}, then multiples of {step} GB ({', '.join(map(str, after))}, ...)"


class ConfigError(InputError):
    """An invalid stack config value; ``field`` is the full key, e.g. ``gpufleet:nodePools[0].maxNodes``."""


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
        """The placement engine's capacity name: reservations and capacity blocks are on-demand priced."""
        return "spot" if self.capacity == "SPOT" else "on-demand"

    @property
    def multi_node(self) -> bool:
        return self.max_nodes > 1


@dataclass(frozen=True)
class NetworkConfig:
    """CIDRs. AWS: ``vpc_cidr`` split into subnets. GCP: primary subnet plus pod/service ranges."""

    vpc_cidr: str = "10.0.0.0/16"
    az_count: int = 2
    pods_cidr: str = "10.64.0.0/14"
    services_cidr: str = "10.68.0.0/20"
    gpu_cidr_base: str = "10.100.0.0/16"


@dataclass(frozen=True)
class ClusterConfig:
    """Control plane settings. ``kubernetes_version`` pins EKS; ``release_channel``/``gke_version`` GKE."""

    kubernetes_version: str = "1.33"
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
    # EKS: the AMI release every managed node group runs (e.g. 1.33.5-20251120). None: EKS picks the newest at
    # create and keeps it until this is set or the launch template changes.
    ami_release_version: str | None = None
    # GKE: refuse `pulumi destroy` of the control plane until this is set to false and applied.
    deletion_protection: bool = True


@dataclass(frozen=True)
class FilesystemConfig:
    """Fast checkpoint tier next to the GPUs: AWS ``fsx`` (Lustre), GCP ``lustre`` or ``filestore``."""

    kind: Literal["none", "fsx", "lustre", "filestore"] = "none"
    capacity_gb: int = 1200
    throughput_mbps_per_tib: int = 250


@dataclass(frozen=True)
class CheckpointConfig:
    """Durable checkpoint bucket plus the optional filesystem tier."""

    prefix: str = "checkpoints"
    noncurrent_version_days: int = 30
    soft_delete_days: int = 7
    kms_key: str | None = None
    filesystem: FilesystemConfig = field(default_factory=FilesystemConfig)


@dataclass(frozen=True)
class TrainingConfig:
    """The Kubernetes service account training pods run as, bound to the stack's checkpoint identity
    (AWS IRSA role, GCP Workload Identity service account).

    The stack creates ServiceAccount ``service_account`` in every namespace of
    :attr:`StackConfig.training_namespaces`: each Kueue team namespace (``kueue.teams``, where the
    LocalQueues are and ``placement submit`` puts jobs) plus ``namespace``. ``namespace`` has no
    LocalQueue, so GPU jobs are not admitted there; it is for tools that need the checkpoints without
    going through Kueue (conversion, evaluation, notebooks). The cloud identity trusts exactly these
    ``<namespace>/<service_account>`` pairs and nothing else.
    """

    namespace: str = "training"
    service_account: str = "trainer"


@dataclass(frozen=True)
class KueueConfig:
    """Kueue install and queue shape. ``flavor_order`` picks which capacity Kueue tries first."""

    version: str = "0.19.2"
    cohort: str = "gpufleet"
    teams: tuple[str, ...] = ("team-a",)
    flavor_order: tuple[str, ...] = ("on-demand", "spot")


@dataclass(frozen=True)
class DispatchConfig:
    """The ``placement dispatch`` Deployment a hub runs when its dispatcher is External.

    ``image`` is built from ``placement/dispatch/Dockerfile``; ``admission_deadline_seconds`` is how long a
    nominated worker may take to admit before the next-best one is tried (seconds);
    ``wait_usd_per_gpu_hour`` prices the expected wait for admission (USD per GPU-hour);
    ``resources`` is the container's Kubernetes ``resources`` (requests/limits) or None; ``live`` runs it
    with ``--live`` (live spot prices and offerings, read with the pod's cloud identity);
    ``service_account_annotations`` go on its ServiceAccount, to bind that identity (IRSA role ARN, GKE
    Workload Identity).
    """

    image: str | None = None
    replicas: int = 2
    admission_deadline_seconds: int = 300
    wait_usd_per_gpu_hour: float = 2.0
    resources: Mapping[str, Mapping[str, str]] | None = None
    live: bool = False
    service_account_annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class HubConfig:
    """A MultiKueue hub: the worker stacks it dispatches to (fully qualified stack names)."""

    workers: tuple[str, ...] = ()
    # MultiKueue dispatcher on the hub: AllAtOnce copies a workload to every worker and keeps the first
    # admission; Incremental widens the set 3 clusters at a time; External leaves the choice to a
    # controller writing .status.nominatedClusterNames (``placement dispatch``, the hub's Deployment).
    dispatcher: Literal["AllAtOnce", "Incremental", "External"] = "AllAtOnce"
    # Where the hub's API clients (Kueue's MultiKueue controller, the dispatcher) reach worker APIs from, as
    # the workers see it: private ranges over peering/VPN, or public NAT addresses. IPv4 CIDRs.
    egress_cidrs: tuple[str, ...] = ()
    dispatch: DispatchConfig = field(default_factory=DispatchConfig)


@dataclass(frozen=True)
class StackConfig:
    """Everything one stack needs, validated."""

    cloud: Literal["aws", "gcp"]
    role: Literal["worker", "hub"]
    region: str
    cluster_name: str
    gpu_zone: str | None
    project: str | None
    node_pools: tuple[NodePoolConfig, ...]
    network: NetworkConfig
    cluster: ClusterConfig
    checkpoint: CheckpointConfig
    training: TrainingConfig
    kueue: KueueConfig
    hub: HubConfig
    tags: Mapping[str, str]

    @property
    def training_namespaces(self) -> tuple[str, ...]:
        """Namespaces that get the training service account: the team namespaces, then
        ``training.namespace`` unless it is one of them (see :class:`TrainingConfig`)."""
        teams = self.kueue.teams
        return teams if self.training.namespace in teams else (*teams, self.training.namespace)


def _key(path: str) -> str:
    return f"{NAMESPACE}:{path}"


def _require(raw: Mapping[str, Any], key: str) -> Any:
    value = raw.get(key)
    if value is None or value == "":
        raise ConfigError(_key(key), "is required; set it with `pulumi config set " + _key(key) + " <value>`")
    return value


def _str(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(_key(path), "must be a non-empty string")
    return value


def _int(value: Any, path: str, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ConfigError(_key(path), f"must be a whole number >= {minimum}")
    try:
        number = int(value)
    except ValueError:
        raise ConfigError(_key(path), f"must be a whole number >= {minimum}, got {value!r}") from None
    if number != float(value) or number < minimum:
        raise ConfigError(_key(path), f"must be a whole number >= {minimum}, got {value!r}")
    return number


def _bool(value: Any, path: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ConfigError(_key(path), "must be true or false")


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(_key(path), "must be a mapping of keys to values")
    return value


def _strings(value: Any, path: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(_key(path), "must be a list of strings")
    return tuple(value)


def _cidr(value: Any, path: str) -> str:
    try:
        return str(ipaddress.ip_network(_str(value, path)))
    except ValueError:
        raise ConfigError(_key(path), f"must be a CIDR block such as 10.0.0.0/16, got {value!r}") from None


def _ipv4_cidrs(value: Any, path: str) -> tuple[str, ...]:
    """A list of IPv4 CIDRs, none of them the whole internet (EKS and GKE API allow-lists take IPv4 only)."""
    out = []
    for c in _strings(value, path):
        cidr = _cidr(c, path)
        net = ipaddress.ip_network(cidr)
        if net.version != 4:
            raise ConfigError(_key(path), f"{c!r} is not IPv4; EKS public access CIDRs and GKE authorized "
                                          "networks take IPv4 CIDRs only")
        if net.prefixlen == 0:
            raise ConfigError(_key(path), f"{c!r} is the whole internet; list the hub's or operators' own ranges")
        if cidr not in out:
            out.append(cidr)
    return tuple(out)


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


def _float(value: Any, path: str, *, minimum: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ConfigError(_key(path), f"must be a number >= {minimum:g}")
    try:
        number = float(value)
    except ValueError:
        raise ConfigError(_key(path), f"must be a number >= {minimum:g}, got {value!r}") from None
    if not number >= minimum or number == float("inf"):
        raise ConfigError(_key(path), f"must be a number >= {minimum:g}, got {value!r}")
    return number


_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")


def _resources(value: Any, path: str) -> Mapping[str, Mapping[str, str]] | None:
    """A container's ``resources``: ``requests``/``limits``, each ``cpu``/``memory`` quantities."""
    if value is None:
        return None
    res = _mapping(value, path)
    _unknown_keys(res, {"requests", "limits"}, path)
    out: dict[str, dict[str, str]] = {}
    for part, amounts in res.items():
        amounts = _mapping(amounts, f"{path}.{part}")
        _unknown_keys(amounts, {"cpu", "memory"}, f"{path}.{part}")
        for name, amount in amounts.items():
            if isinstance(amount, bool) or not _QUANTITY.match(str(amount)):
                raise ConfigError(_key(f"{path}.{part}.{name}"),
                                  f"must be a Kubernetes quantity such as 500m or 256Mi, got {amount!r}")
            out.setdefault(part, {})[name] = str(amount)
    return out


DOCKER_BUILD = "docker build -f placement/dispatch/Dockerfile -t <image> ."
# An annotation key: an optional DNS-subdomain prefix and "/", then a name of at most 63 characters.
_ANNOTATION_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_ANNOTATION_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def _annotations(value: Any, path: str) -> Mapping[str, str]:
    """Kubernetes annotations: ``prefix/name`` keys (the prefix optional, a DNS subdomain) to string values."""
    out: dict[str, str] = {}
    for k, v in _mapping(value, path).items():
        key = str(k)
        prefix, _, name = key.rpartition("/")
        if not _ANNOTATION_NAME.match(name) or (prefix and (len(prefix) > 253 or not _ANNOTATION_PREFIX.match(prefix))):
            raise ConfigError(_key(f"{path}.{key}"), "is not an annotation key: [prefix/]name, the prefix a DNS "
                                                     "subdomain, the name at most 63 letters, digits, '-', '_', '.'")
        if not isinstance(v, str):
            raise ConfigError(_key(f"{path}.{key}"), f"must be a string (quote it), got {v!r}")
        out[key] = v
    return out


def _dispatch(value: Any, dispatcher: str) -> DispatchConfig:
    path = "hub.dispatch"
    raw = _mapping(value, path)
    _unknown_keys(raw, {"image", "replicas", "admissionDeadlineSeconds", "waitUsdPerGpuHour", "resources", "live",
                        "serviceAccountAnnotations"}, path)
    image = raw.get("image")
    if image is not None:
        image = _str(image, f"{path}.image")
        if any(ch.isspace() for ch in image):
            raise ConfigError(_key(f"{path}.image"), f"{image!r} is not an image reference")
    if dispatcher == "External" and not image:
        raise ConfigError(
            _key(f"{path}.image"),
            f"is required when gpufleet:hub.dispatcher is External: build it with `{DOCKER_BUILD}` from the "
            "repository root, push it, and set its reference here",
        )
    return DispatchConfig(
        image=image,
        replicas=_int(raw.get("replicas", 2), f"{path}.replicas", minimum=1),
        admission_deadline_seconds=_int(raw.get("admissionDeadlineSeconds", 300),
                                        f"{path}.admissionDeadlineSeconds", minimum=1),
        wait_usd_per_gpu_hour=_float(raw.get("waitUsdPerGpuHour", 2.0), f"{path}.waitUsdPerGpuHour"),
        resources=_resources(raw.get("resources"), f"{path}.resources"),
        live=_bool(raw.get("live", False), f"{path}.live"),
        service_account_annotations=_annotations(raw.get("serviceAccountAnnotations"),
                                                 f"{path}.serviceAccountAnnotations"),
    )


def _unknown_keys(section: Mapping[str, Any], allowed: set[str], path: str) -> None:
    extra = sorted(set(section) - allowed)
    if extra:
        raise ConfigError(
            _key(f"{path}.{extra[0]}" if path else extra[0]),
            f"is not a known key; expected one of {', '.join(sorted(allowed))}",
        )


def _node_pool(raw: Any, i: int, cloud: str, region: str, gpu_zone: str | None) -> NodePoolConfig:
    path = f"nodePools[{i}]"
    pool = _mapping(raw, path)
    _unknown_keys(
        pool, {"name", "instanceType", "capacity", "minNodes", "desiredNodes", "maxNodes", "zone", "reservation"}, path
    )
    name = _str(pool.get("name"), f"{path}.name")
    if not _NAME.match(name):
        raise ConfigError(_key(f"{path}.name"), "must be lower-case letters, digits and '-', at most 40 characters")
    itype = _str(pool.get("instanceType"), f"{path}.instanceType")
    shape = shape_book().get(itype)
    if shape is None or shape.cloud != cloud:
        known = ", ".join(s.name for s in shape_book().for_cloud(cloud))
        raise ConfigError(_key(f"{path}.instanceType"), f"unknown {cloud} GPU shape {itype!r}; known: {known}")
    capacity = str(pool.get("capacity", "ON_DEMAND")).upper().replace("-", "_")
    if capacity not in _CAPACITIES[cloud]:
        raise ConfigError(_key(f"{path}.capacity"), f"must be one of {', '.join(_CAPACITIES[cloud])}")
    reservation = pool.get("reservation")
    if capacity in ("CAPACITY_BLOCK", "RESERVATION") and not reservation:
        raise ConfigError(_key(f"{path}.reservation"), f"is required when capacity is {capacity}")
    # AWS: the launch template targets the Capacity Block or On-Demand Capacity Reservation by its ID;
    # spot instances never run in a capacity reservation.
    if cloud == "aws" and reservation and capacity == "SPOT":
        raise ConfigError(_key(f"{path}.reservation"), "spot instances cannot use a capacity reservation; remove it "
                                                       "or set capacity to ON_DEMAND (an ODCR) or CAPACITY_BLOCK")
    if cloud == "aws" and reservation and not re.fullmatch(r"cr-[0-9a-f]+", str(reservation)):
        raise ConfigError(
            _key(f"{path}.reservation"),
            f"must be a capacity reservation ID such as cr-0123456789abcdef0, got {reservation!r}",
        )
    min_nodes = _int(pool.get("minNodes", 0), f"{path}.minNodes")
    max_nodes = _int(pool.get("maxNodes", 1), f"{path}.maxNodes", minimum=1)
    desired = _int(pool.get("desiredNodes", min_nodes), f"{path}.desiredNodes")
    if min_nodes > max_nodes:
        raise ConfigError(_key(f"{path}.minNodes"), f"({min_nodes}) must not exceed maxNodes ({max_nodes})")
    if not min_nodes <= desired <= max_nodes:
        raise ConfigError(_key(f"{path}.desiredNodes"), f"({desired}) must lie between minNodes and maxNodes")
    zone = pool.get("zone") or gpu_zone
    if not zone:
        raise ConfigError(_key(f"{path}.zone"), "is required when gpufleet:gpuZone is not set")
    if not zone_in_region(cloud, zone, region):
        raise ConfigError(
            _key(f"{path}.zone" if pool.get("zone") else "gpuZone"), f"zone {zone!r} is not in region {region!r}"
        )
    if max_nodes > 1 and not shape.multi_node:
        raise ConfigError(
            _key(f"{path}.maxNodes"),
            f"{itype} has no multi-node GPU fabric; set maxNodes to 1 or pick an EFA/GPUDirect shape",
        )
    if cloud == "gcp":
        _check_gcp_offer(itype, region, zone, f"{path}.instanceType")
    return NodePoolConfig(
        name=name,
        shape=shape,
        capacity=capacity,  # type: ignore[arg-type]
        min_nodes=min_nodes,
        desired_nodes=desired,
        max_nodes=max_nodes,
        zone=zone,
        reservation=str(reservation) if reservation else None,
    )


def _check_gcp_offer(itype: str, region: str, zone: str, path: str) -> None:
    """GCP machine types exist only in some zones; the embedded catalog says which."""
    from placement.catalog import embedded_catalog

    zones = {o.zone for o in embedded_catalog().offers if o.instance_type == itype and o.region == region}
    if zone not in zones:
        where = ", ".join(sorted(zones)) or "no zone of this region"
        raise ConfigError(
            _key(path), f"{itype} is not offered in {zone} per the embedded catalog (offered in: {where})"
        )


def parse(raw: Mapping[str, Any], *, stack: str = "dev") -> StackConfig:
    """Validate raw config values (keys without the ``gpufleet:`` prefix) into a :class:`StackConfig`.

    Raises :class:`ConfigError` naming the first invalid key.
    """
    allowed = set(KEYS)
    _unknown_keys(raw, allowed, "")
    role = str(raw.get("role", "worker"))
    if role not in ("worker", "hub"):
        raise ConfigError(_key("role"), "must be worker or hub")
    cloud = str(_require(raw, "cloud"))
    if cloud not in _CAPACITIES:
        raise ConfigError(_key("cloud"), "must be aws or gcp")
    region = _str(_require(raw, "region"), "region")
    project = raw.get("project")
    if cloud == "gcp" and not project:
        raise ConfigError(_key("project"), "is required on GCP stacks (the Google Cloud project ID)")
    cluster_name = _str(raw.get("clusterName", f"gpufleet-{stack}"), "clusterName")
    if not _NAME.match(cluster_name):
        raise ConfigError(_key("clusterName"), "must be lower-case letters, digits and '-', at most 40 characters")
    gpu_zone = raw.get("gpuZone")
    if gpu_zone is not None and not zone_in_region(cloud, str(gpu_zone), region):
        raise ConfigError(_key("gpuZone"), f"zone {gpu_zone!r} is not in region {region!r}")

    pools_raw = raw.get("nodePools") or []
    if not isinstance(pools_raw, list):
        raise ConfigError(_key("nodePools"), "must be a list of node pools")
    if role == "worker" and not pools_raw:
        raise ConfigError(_key("nodePools"), "a worker stack needs at least one GPU node pool")
    pools = tuple(_node_pool(p, i, cloud, region, gpu_zone) for i, p in enumerate(pools_raw))
    names = [p.name for p in pools]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise ConfigError(_key(f"nodePools[{i}].name"), f"duplicate pool name {name!r}")
    multi_zones = {p.zone for p in pools if p.multi_node}
    if gpu_zone is None and len(multi_zones) > 1:
        raise ConfigError(
            _key("gpuZone"), "set one GPU zone: multi-node pools in different zones cannot share a fabric"
        )

    net = _mapping(raw.get("network"), "network")
    _unknown_keys(net, {"vpcCidr", "azCount", "podsCidr", "servicesCidr", "gpuCidrBase"}, "network")
    network = NetworkConfig(
        vpc_cidr=_cidr(net.get("vpcCidr", NetworkConfig.vpc_cidr), "network.vpcCidr"),
        az_count=_int(net.get("azCount", 2), "network.azCount", minimum=2),
        pods_cidr=_cidr(net.get("podsCidr", NetworkConfig.pods_cidr), "network.podsCidr"),
        services_cidr=_cidr(net.get("servicesCidr", NetworkConfig.services_cidr), "network.servicesCidr"),
        gpu_cidr_base=_cidr(net.get("gpuCidrBase", NetworkConfig.gpu_cidr_base), "network.gpuCidrBase"),
    )

    cl = _mapping(raw.get("cluster"), "cluster")
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
            "operatorCidrs",
            "amiReleaseVersion",
        },
        "cluster",
    )
    public = _bool(cl.get("publicAccess", False), "cluster.publicAccess")
    cidrs = tuple(
        _cidr(c, "cluster.publicAccessCidrs")
        for c in _strings(cl.get("publicAccessCidrs"), "cluster.publicAccessCidrs")
    )
    if public and not cidrs:
        raise ConfigError(
            _key("cluster.publicAccessCidrs"),
            "list the CIDRs allowed to reach the public API endpoint (publicAccess is true)",
        )
    channel = str(cl.get("releaseChannel", "REGULAR")).upper()
    if channel not in ("RAPID", "REGULAR", "STABLE", "EXTENDED"):
        raise ConfigError(_key("cluster.releaseChannel"), "must be RAPID, REGULAR, STABLE or EXTENDED")
    version = str(cl.get("kubernetesVersion", "1.33"))
    if not re.fullmatch(r"1\.\d{2}", version):
        raise ConfigError(_key("cluster.kubernetesVersion"), f"must be a minor version such as 1.33, got {version!r}")
    cluster = ClusterConfig(
        kubernetes_version=version,
        release_channel=channel,
        gke_version=cl.get("gkeVersion"),
        public_access=public,
        public_access_cidrs=cidrs,
        admin_principals=_strings(cl.get("adminPrincipals"), "cluster.adminPrincipals"),
        hub_cidrs=_ipv4_cidrs(cl.get("hubCidrs"), "cluster.hubCidrs"),
        operator_cidrs=_ipv4_cidrs(cl.get("operatorCidrs"), "cluster.operatorCidrs"),
        ami_release_version=_ami_release(cl.get("amiReleaseVersion"), version),
        deletion_protection=_bool(cl.get("deletionProtection", True), "cluster.deletionProtection"),
    )

    # AWS: EKS access entries take IAM role or user ARNs (not assumed-role session ARNs).
    for principal in cluster.admin_principals if cloud == "aws" else ():
        if not re.fullmatch(r"arn:aws[-a-z]*:iam::\d{12}:(role|user)/[\w+=,.@/-]+", principal):
            raise ConfigError(
                _key("cluster.adminPrincipals"),
                f"{principal!r} is not an IAM role or user ARN (arn:aws:iam::<account>:role/<name>)",
            )

    ck = _mapping(raw.get("checkpoint"), "checkpoint")
    _unknown_keys(ck, {"prefix", "noncurrentVersionDays", "softDeleteDays", "kmsKey", "filesystem"}, "checkpoint")
    fs = _mapping(ck.get("filesystem"), "checkpoint.filesystem")
    _unknown_keys(fs, {"kind", "capacityGb", "throughputMbpsPerTib"}, "checkpoint.filesystem")
    fs_kind = str(fs.get("kind", "none"))
    fs_allowed = ("none", "fsx") if cloud == "aws" else ("none", "lustre", "filestore")
    if fs_kind not in fs_allowed:
        raise ConfigError(_key("checkpoint.filesystem.kind"), f"must be one of {', '.join(fs_allowed)} on {cloud}")
    if fs_kind != "none" and not gpu_zone:
        raise ConfigError(
            _key("gpuZone"),
            f"is required when checkpoint.filesystem.kind is {fs_kind} (the filesystem lives in the GPU zone)",
        )
    capacity_gb = _int(fs.get("capacityGb", 1200), "checkpoint.filesystem.capacityGb", minimum=1)
    if fs_kind == "fsx" and not fsx_capacity_valid(FSX_DEPLOYMENT_TYPE, capacity_gb):
        raise ConfigError(_key("checkpoint.filesystem.capacityGb"),
                          f"{capacity_gb} is not a size FSx for Lustre {FSX_DEPLOYMENT_TYPE} SSD accepts: "
                          f"{fsx_valid_sizes(FSX_DEPLOYMENT_TYPE)}")
    throughput = _int(fs.get("throughputMbpsPerTib", 250), "checkpoint.filesystem.throughputMbpsPerTib", minimum=1)
    if fs_kind == "fsx" and throughput not in (125, 250, 500, 1000):
        raise ConfigError(_key("checkpoint.filesystem.throughputMbpsPerTib"), "must be 125, 250, 500 or 1000")
    prefix = str(ck.get("prefix", "checkpoints")).strip("/")
    if not prefix:
        raise ConfigError(_key("checkpoint.prefix"), "must be a non-empty key prefix such as checkpoints")
    checkpoint = CheckpointConfig(
        prefix=prefix,
        noncurrent_version_days=_int(
            ck.get("noncurrentVersionDays", 30), "checkpoint.noncurrentVersionDays", minimum=1
        ),
        soft_delete_days=_int(ck.get("softDeleteDays", 7), "checkpoint.softDeleteDays", minimum=0),
        kms_key=ck.get("kmsKey"),
        filesystem=FilesystemConfig(
            kind=fs_kind,  # type: ignore[arg-type]
            capacity_gb=capacity_gb,
            throughput_mbps_per_tib=throughput,
        ),
    )

    tr = _mapping(raw.get("training"), "training")
    _unknown_keys(tr, {"namespace", "serviceAccount"}, "training")
    training = TrainingConfig(
        namespace=_str(tr.get("namespace", "training"), "training.namespace"),
        service_account=_str(tr.get("serviceAccount", "trainer"), "training.serviceAccount"),
    )
    # Both name Kubernetes objects (a Namespace, a ServiceAccount) and appear in IAM subjects.
    if not _NAME.match(training.namespace):
        raise ConfigError(_key("training.namespace"), f"{training.namespace!r} is not a valid namespace name")
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", training.service_account):
        raise ConfigError(
            _key("training.serviceAccount"),
            f"{training.service_account!r} is not a valid service account name (a DNS-1123 label)",
        )

    kq = _mapping(raw.get("kueue"), "kueue")
    _unknown_keys(kq, {"version", "cohort", "teams", "flavorOrder"}, "kueue")
    kversion = str(kq.get("version", "0.19.2"))
    if not re.fullmatch(r"0\.19\.\d+", kversion):
        raise ConfigError(_key("kueue.version"), f"must be a Kueue v0.19.x release such as 0.19.2, got {kversion!r}")
    order = _strings(kq.get("flavorOrder"), "kueue.flavorOrder") or ("on-demand", "spot")
    if sorted(order) != ["on-demand", "spot"]:
        raise ConfigError(_key("kueue.flavorOrder"), "must list on-demand and spot once each, in the order to try")
    teams = _strings(kq.get("teams"), "kueue.teams") or ("team-a",)
    for t in teams:
        if not _NAME.match(t):
            raise ConfigError(_key("kueue.teams"), f"{t!r} is not a valid namespace name")
    kueue = KueueConfig(
        version=kversion, cohort=_str(kq.get("cohort", "gpufleet"), "kueue.cohort"), teams=teams, flavor_order=order
    )

    hb = _mapping(raw.get("hub"), "hub")
    _unknown_keys(hb, {"workers", "dispatcher", "egressCidrs", "dispatch"}, "hub")
    workers = _strings(hb.get("workers"), "hub.workers")
    dispatcher = str(hb.get("dispatcher", "AllAtOnce"))
    if dispatcher not in ("AllAtOnce", "Incremental", "External"):
        raise ConfigError(_key("hub.dispatcher"), "must be AllAtOnce, Incremental or External")
    egress = _ipv4_cidrs(hb.get("egressCidrs"), "hub.egressCidrs")
    hub = HubConfig(workers=workers, dispatcher=dispatcher,  # type: ignore[arg-type]
                    egress_cidrs=egress, dispatch=_dispatch(hb.get("dispatch"), dispatcher))
    if role == "hub" and not workers:
        raise ConfigError(
            _key("hub.workers"), "a hub stack needs the worker stacks it dispatches to (org/project/stack)"
        )
    if role == "hub" and not egress:
        raise ConfigError(
            _key("hub.egressCidrs"),
            "is required on a hub: list the CIDRs its Kueue and dispatcher reach worker APIs from (private ranges "
            "over peering/VPN, or NAT addresses) and authorise them on every worker in gpufleet:cluster.hubCidrs",
        )

    tags_raw = _mapping(raw.get("tags"), "tags")
    tags = {str(k): str(v) for k, v in tags_raw.items()}
    for required in ("owner", "cost-center"):
        if not tags.get(required):
            raise ConfigError(
                _key(f"tags.{required}"), "is required: every taggable resource carries owner and cost-center"
            )

    return StackConfig(
        cloud=cloud,  # type: ignore[arg-type]
        role=role,  # type: ignore[arg-type]
        region=region,
        cluster_name=cluster_name,
        gpu_zone=gpu_zone,
        project=str(project) if project else None,
        node_pools=pools,
        network=network,
        cluster=cluster,
        checkpoint=checkpoint,
        training=training,
        kueue=kueue,
        hub=hub,
        tags=tags,
    )


def from_pulumi() -> StackConfig:
    """Read and validate the current stack's config (inside a Pulumi program)."""
    import pulumi

    cfg = pulumi.Config(NAMESPACE)
    raw: dict[str, Any] = {}
    for key in KEYS:
        try:
            value = cfg.get_object(key)
        except pulumi.config.ConfigTypeError:  # a plain string such as `gcp` is not JSON
            value = None
        if value is None:
            value = cfg.get(key)
        if value is not None:
            raw[key] = value
    return parse(raw, stack=pulumi.get_stack())


def load_stack_file(path: str) -> StackConfig:
    """Parse ``stacks/Pulumi.<stack>.yaml`` directly (for scripts and tests; no Pulumi needed)."""
    import os

    import yaml

    with open(path, encoding="utf-8") as fh:
        doc = yaml.safe_load(fh) or {}
    config = doc.get("config") or {}
    raw = {k.split(":", 1)[1]: v for k, v in config.items() if k.startswith(NAMESPACE + ":")}
    stack = os.path.basename(path).removeprefix("Pulumi.").removesuffix(".yaml")
    return parse(raw, stack=stack)
