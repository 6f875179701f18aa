"""Stack configuration: parsed once, typed and validated, before any resource is registered.

Every key lives in the ``gpufleet`` namespace (``gpufleet:nodePools`` in ``stacks/Pulumi.<stack>.yaml``)
and is declared with its type and description in ``Pulumi.yaml``. Machine shapes come from
``placement/data/shapes.yaml``, the same data the placement CLI reads.

This module imports no Pulumi SDK at import time so it can be unit-tested and reused by
``scripts/preview`` and ``placement submit``; :func:`from_pulumi` reads the live stack config.
"""

from __future__ import annotations

import contextlib
import datetime
import difflib
import functools
import ipaddress
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from placement.errors import InputError, shown
from placement.model.shapes import Shape, shape_book
from placement.model.zones import is_aws_zone_id, known_regions, zone_in_region

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
    "allowReplace",
)

# FLEX_START (GCP, `capacity: flex-start`): a GKE flex-start node pool with queued provisioning (Dynamic
# Workload Scheduler). It scales from zero when a Kueue ProvisioningRequest admission check obtains all the
# nodes of a job at once; no reservation. Priced and placed as on-demand (the catalog has no flex-start price).
Capacity = Literal["ON_DEMAND", "SPOT", "CAPACITY_BLOCK", "RESERVATION", "FLEX_START"]
_CAPACITIES: dict[str, tuple[str, ...]] = {
    "aws": ("ON_DEMAND", "SPOT", "CAPACITY_BLOCK"),
    "gcp": ("ON_DEMAND", "SPOT", "RESERVATION", "FLEX_START"),
}
_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")
# A Kubernetes DNS-1123 subdomain (the Kueue CRDs' name pattern), without its 253-character bound.
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# network.azCount: no AWS region has more Availability Zones than this.
MAX_AZ_COUNT = 6
# A Google Cloud project ID (at most 30 characters, a letter first); legacy ones carry an "example.com:" prefix.
_GCP_PROJECT = re.compile(r"([a-z0-9][-a-z0-9.]{0,62}:)?[a-z][-a-z0-9]{0,29}")
# A Compute Engine resource name (RFC 1035: 1-63 characters, a lower-case letter first, no trailing '-'), as a
# reservation's name; a shared reservation is named by path, optionally down to one of its blocks.
_GCE_NAME = r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?"
_GCP_RESERVATION = re.compile(rf"{_GCE_NAME}|projects/[a-z][-a-z0-9]{{4,28}}[a-z0-9]/reservations/{_GCE_NAME}"
                              rf"(/reservationBlocks/{_GCE_NAME})?")
# Nodes in one pool: GKE's limit per node pool and zone, far above any GPU pool this toolkit sizes.
MAX_POOL_NODES = 1000


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


@dataclass(frozen=True)
class NetworkConfig:
    """CIDRs. AWS: ``vpc_cidr`` split into subnets. GCP: primary subnet plus pod/service ranges."""

    vpc_cidr: str = "10.0.0.0/16"
    az_count: int = 2
    pods_cidr: str = "10.64.0.0/14"
    services_cidr: str = "10.68.0.0/20"
    gpu_cidr_base: str = "10.100.0.0/16"


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


@dataclass(frozen=True)
class DispatchConfig:
    """The ``placement dispatch`` Deployment a hub runs when its dispatcher is External.

    ``image`` is an image built from ``placement/dispatch/Dockerfile`` (best by digest); None: the hub stack
    builds that Dockerfile for ``platform`` (``linux/amd64`` or ``linux/arm64``, the hub nodes'), pushes it to a
    registry it creates and runs it by digest (:mod:`infra.k8s.dispatch_image`); ``admission_deadline_seconds``
    is how long a nominated worker may take to admit before the next-best one is tried (seconds);
    ``wait_usd_per_gpu_hour`` prices the expected wait for admission (USD per GPU-hour);
    ``resources`` is the container's Kubernetes ``resources`` (requests/limits) or None; ``live`` runs it
    with ``--live`` (live spot prices and offerings, read with the pod's cloud identity);
    ``service_account_annotations`` go on its ServiceAccount, to bind that identity (IRSA role ARN, GKE
    Workload Identity).
    """

    image: str | None = None
    platform: str = "linux/amd64"
    replicas: int = 2
    admission_deadline_seconds: int = 300
    wait_usd_per_gpu_hour: float = 2.0
    resources: Mapping[str, Mapping[str, str]] | None = None
    live: bool = False
    service_account_annotations: Mapping[str, str] = field(default_factory=dict)
    # A kubernetes.io/dockerconfigjson Secret in kueue-system the pods pull the image with (a hub that is not
    # EKS/GKE in the registry's account/project, whose nodes cannot pull with their own identity); None: node
    # identity. The operator keeps it valid (ECR tokens last 12 hours): docs/kueue-hub.md.
    image_pull_secret: str | None = None
    # A Prometheus server of the user's that scrapes the dispatcher (its observations for `placement calibrate`);
    # None: the hub installs one (infra.k8s.prometheus).
    prometheus_url: str | None = None


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
    vpn: HubVpnConfig | None = None


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
    # Stateful resources (by Pulumi resource name) a `pulumi up` may replace (gpufleet:allowReplace).
    allow_replace: tuple[str, ...] = ()

    @property
    def training_namespaces(self) -> tuple[str, ...]:
        """Namespaces that get the training service account: the team namespaces, then
        ``training.namespace`` unless it is one of them (see :class:`TrainingConfig`)."""
        teams = self.kueue.teams
        return teams if self.training.namespace in teams else (*teams, self.training.namespace)


def _key(path: str) -> str:
    # A key path holds the user's own mapping keys: escaped and cut, like values, so an error stays one
    # readable line.
    path = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", path)
    return f"{NAMESPACE}:{path if len(path) <= 200 else path[:197] + '...'}"


def _require(raw: Mapping[str, Any], key: str) -> Any:
    value = raw.get(key)
    if value is None or value == "":
        raise ConfigError(_key(key), "is required; set it with `pulumi config set " + _key(key) + " <value>`")
    return value


# The typed accessors below are the only way a config value is read: each refuses every other YAML/JSON type
# (a list or mapping where a string belongs, a boolean where a number belongs, .inf/.nan, numbers beyond
# what the clouds' and Kubernetes' 32-bit fields take) with one line naming the key, never a traceback.
INT32_MAX = 2**31 - 1
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _str(value: Any, path: str, *, numbers: bool = False) -> str:
    """A non-empty single-line string. ``numbers``: also take a finite YAML number (``1.33``) as its text."""
    if numbers and ((isinstance(value, int) and not isinstance(value, bool) and abs(value) < 10**18)
                    or (isinstance(value, float) and math.isfinite(value))):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(_key(path), f"must be a non-empty string (quote it in YAML), got {shown(value)}")
    if _CONTROL.search(value):
        raise ConfigError(_key(path), f"must be one line without control characters, got {shown(value)}")
    return value


def _opt_str(value: Any, path: str) -> str | None:
    """An optional string key: unset (None) stays None, anything else must be a non-empty string."""
    return None if value is None else _str(value, path)


def _int(value: Any, path: str, *, minimum: int = 0, maximum: int = INT32_MAX) -> int:
    """A whole number in ``minimum..maximum``: an int, an integral finite float (2.0) or such a string."""
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        number = int(value)
    elif isinstance(value, str):
        try:
            number = int(value.strip())
        except ValueError:  # also digit strings longer than Python converts
            try:
                parsed = float(value)
            except ValueError:
                parsed = math.nan
            number = int(parsed) if math.isfinite(parsed) and parsed.is_integer() else None
    if number is None or not minimum <= number <= maximum:
        raise ConfigError(_key(path), f"must be a whole number from {minimum} to {maximum}, got {shown(value)}")
    return number


def _bool(value: Any, path: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ConfigError(_key(path), f"must be true or false, got {shown(value)}")


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(_key(path), f"must be a mapping of keys to values, got {shown(value)}")
    for k in value:
        if not isinstance(k, str):
            raise ConfigError(_key(f"{path}.{shown(k)}"), "keys must be strings (quote the key in YAML)")
    return value


def _strings(value: Any, path: str) -> tuple[str, ...]:
    """A list of non-empty strings; an entry of another type is named by its index."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ConfigError(_key(path), f"must be a list of strings, got {shown(value)}")
    return tuple(_str(v, f"{path}[{i}]") for i, v in enumerate(value))


def _cidr(value: Any, path: str) -> str:
    try:
        return str(ipaddress.ip_network(_str(value, path)))
    except ValueError:
        raise ConfigError(_key(path), f"must be a CIDR block such as 10.0.0.0/16, got {shown(value)}") from None


# Tags the stacks set themselves on every resource (infra/aws/layout.py resource_tags, infra/gcp/plan.py
# gcp_labels, the GPU node groups' gpufleet.io/ tags): a user tag of that key would be overwritten silently.
_OWN_TAGS = {"aws": ("Name", "gpufleet-stack", "gpufleet-cluster", "gpufleet.io/"), "gcp": ("gpufleet-stack",)}
# Per-resource tag limits less the tags the stacks add: AWS 50 tags (5 ours), GCP 64 labels (1 ours).
_MAX_TAGS = {"aws": 45, "gcp": 63}
# AWS tag keys (1..128) and values (..256): letters, digits, spaces and _ . : / = + - @; no "aws:" prefix.
_AWS_TAG = re.compile(r"[\w .:/=+\-@]*")
# GCP labels: keys 1..63 starting with a lower-case letter, values ..63; lower-case letters, digits, _ and -.
_GCP_LABEL_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}")
_GCP_LABEL_VALUE = re.compile(r"[a-z0-9_-]{1,63}")


def _tags(value: Any, cloud: str) -> dict[str, str]:
    """``gpufleet:tags``: non-empty string values (numbers taken as their text) within the cloud's tag or label
    rules (GCP stacks put them on resources as labels, unchanged), owner and cost-center required."""
    tags: dict[str, str] = {}
    for k, v in _mapping(value, "tags").items():
        path = f"tags.{k}"
        if v is None or v == "":
            raise ConfigError(_key(path), "has an empty value; give it a value or remove the tag")
        text = _str(v, path, numbers=True)
        if any(k == own or (own.endswith("/") and k.startswith(own)) for own in _OWN_TAGS[cloud]):
            raise ConfigError(_key(path), "is set by the stack itself on every resource; remove it or rename it")
        if cloud == "aws":
            if not 1 <= len(k) <= 128 or not _AWS_TAG.fullmatch(k) or k.lower().startswith("aws:"):
                raise ConfigError(_key(path), "is not an AWS tag key: 1-128 letters, digits, spaces and "
                                              "_ . : / = + - @, not starting with aws:")
            if len(text) > 256 or not _AWS_TAG.fullmatch(text):
                raise ConfigError(_key(path), f"value {shown(text)} is not an AWS tag value: at most 256 letters, "
                                              "digits, spaces and _ . : / = + - @")
        else:
            if not _GCP_LABEL_KEY.fullmatch(k):
                raise ConfigError(_key(path), "is not a GCP label key (tags are labels on GCP): at most 63 lower-case "
                                              "letters, digits, '_' and '-', starting with a letter")
            if not _GCP_LABEL_VALUE.fullmatch(text):
                raise ConfigError(_key(path), f"value {shown(text)} is not a GCP label value (tags are labels on "
                                              "GCP): at most 63 lower-case letters, digits, '_' and '-'")
        tags[k] = text
    if len(tags) > _MAX_TAGS[cloud]:
        raise ConfigError(_key("tags"), f"has {len(tags)} tags; {cloud} resources take at most {_MAX_TAGS[cloud]} "
                                        "besides the ones the stack sets")
    for required in ("owner", "cost-center"):
        if not tags.get(required):
            raise ConfigError(
                _key(f"tags.{required}"), "is required: every taggable resource carries owner and cost-center"
            )
    return tags


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


def _check_api_rules(cluster: ClusterConfig) -> None:
    """EKS: every hub and operator CIDR is one 443 rule on the control-plane security group, which takes
    :data:`EKS_API_SG_INBOUND_RULES` inbound rules."""
    rules = len(set(cluster.hub_cidrs) | set(cluster.operator_cidrs))
    if rules > EKS_API_SG_INBOUND_RULES:
        key = "cluster.hubCidrs" if cluster.hub_cidrs else "cluster.operatorCidrs"
        raise ConfigError(_key(key), f"hubCidrs and operatorCidrs make {rules} inbound rules on the EKS "
                                     f"control-plane security group, which takes {EKS_API_SG_INBOUND_RULES}; "
                                     "merge them into fewer, wider CIDRs")


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


def _float(value: Any, path: str, *, minimum: float = 0.0, maximum: float = 1e6) -> float:
    """A finite number in ``minimum..maximum`` (a YAML/JSON number or its string); never inf, nan or a bool."""
    number = math.nan
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        with contextlib.suppress(ValueError, OverflowError):  # OverflowError: an int beyond a float's range
            number = float(value)
    if not minimum <= number <= maximum:  # also false for nan
        raise ConfigError(_key(path), f"must be a number from {minimum:g} to {maximum:g}, got {shown(value)}")
    return number


# A fully qualified Pulumi stack org/project/stack: each part letters, digits, '-', '_', '.'.
_PULUMI_NAME = re.compile(r"[A-Za-z0-9][-A-Za-z0-9_.]{0,99}")
# MultiKueueConfig.spec.clusters in the Kueue v1beta2 CRD (the hub's all-workers config lists every worker).
MAX_HUB_WORKERS = 20


# AWS quota "Site-to-Site VPN connections per virtual private gateway" (default 10), two per linked GCP worker
# (infra/link.py says why one gateway serves them all).
MAX_VGW_CONNECTIONS = 10
# Private 16- and 32-bit ASNs (RFC 6996), what both a virtual private gateway and a Cloud Router take.
_PRIVATE_ASNS = ((64512, 65534), (4200000000, 4294967294))


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


def _choice(value: Any, path: str, choices: tuple[str, ...]) -> str:
    text = _str(value, path)
    if text not in choices:
        raise ConfigError(_key(path), f"must be {' or '.join(choices)}, got {shown(text)}")
    return text


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


def linked_ranges(cfg: StackConfig) -> list[tuple[str, str]]:
    """``(config key, CIDR)`` of the address ranges a stack brings into a hub's network of links: a worker's
    VPC (AWS: nodes, pods and the EKS control-plane ENIs; GCP: the primary subnet, which also holds the GKE
    private endpoint) and, on GCP, its pods range (alias IPs, routed in the VPC); a hub's private egress ranges.
    Service ranges (virtual, never routed off the cluster) and GPU networks (VPCs of their own) are not in it."""
    if cfg.role == "hub":
        return [(f"hub.egressCidrs[{i}]", c) for i, c in enumerate(cfg.hub.egress_cidrs) if is_private_cidr(c)]
    ranges = [("network.vpcCidr", cfg.network.vpc_cidr)]
    if cfg.cloud == "gcp":
        ranges.append(("network.podsCidr", cfg.network.pods_cidr))
    return ranges


def range_overlaps(stacks: Mapping[str, StackConfig]) -> list[str]:
    """Every pair of overlapping :func:`linked_ranges` among ``stacks`` (stack name -> config), each as one line
    naming both stacks, keys and ranges, in ``stacks`` order. Routes (VPN/BGP, peering, the hub's kubeconfig
    servers) pick one destination per address: an overlap makes one of the two unreachable from the hub."""
    seen: list[tuple[str, str, ipaddress.IPv4Network | ipaddress.IPv6Network, str]] = []
    out = []
    for stack, cfg in stacks.items():
        for key, cidr in linked_ranges(cfg):
            net = ipaddress.ip_network(cidr, strict=False)
            for other_stack, other_key, other_net, other_cidr in seen:
                if other_stack != stack and net.version == other_net.version and net.overlaps(other_net):
                    out.append(f"{cidr} (gpufleet:{key} of stack {stack}) overlaps {other_cidr} (gpufleet:{other_key} "
                               f"of stack {other_stack})")
            seen.append((stack, key, net, cidr))
    return out


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


_QUANTITY = re.compile(r"[0-9]+(\.[0-9]+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?")


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
            text = _str(amount, f"{path}.{part}.{name}", numbers=True)
            if not _QUANTITY.fullmatch(text):
                raise ConfigError(_key(f"{path}.{part}.{name}"),
                                  f"must be a Kubernetes quantity such as 500m or 256Mi, got {shown(amount)}")
            out.setdefault(part, {})[name] = text
    return out


DOCKER_BUILD = "docker build -f placement/dispatch/Dockerfile -t <image> ."
# Platforms the hub builds the dispatcher image for (python:3.11-slim has both).
DISPATCH_PLATFORMS = ("linux/amd64", "linux/arm64")
# An annotation key: an optional DNS-subdomain prefix and "/", then a name of at most 63 characters.
_ANNOTATION_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_ANNOTATION_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def _annotations(value: Any, path: str) -> Mapping[str, str]:
    """Kubernetes annotations: ``prefix/name`` keys (the prefix optional, a DNS subdomain) to string values."""
    out: dict[str, str] = {}
    for k, v in _mapping(value, path).items():
        key = str(k)
        prefix, _, name = key.rpartition("/")
        if not _ANNOTATION_NAME.fullmatch(name) or (prefix and (len(prefix) > 253
                                                              or not _ANNOTATION_PREFIX.fullmatch(prefix))):
            raise ConfigError(_key(f"{path}.{key}"), "is not an annotation key: [prefix/]name, the prefix a DNS "
                                                     "subdomain, the name at most 63 letters, digits, '-', '_', '.'")
        if not isinstance(v, str):
            raise ConfigError(_key(f"{path}.{key}"), f"must be a string (quote it), got {shown(v)}")
        out[key] = v
    return out


def _dispatch(value: Any, dispatcher: str) -> DispatchConfig:
    path = "hub.dispatch"
    raw = _mapping(value, path)
    _unknown_keys(raw, {"image", "platform", "replicas", "admissionDeadlineSeconds", "waitUsdPerGpuHour",
                        "resources", "live", "serviceAccountAnnotations", "imagePullSecret",
                        "prometheusUrl"}, path)
    pull_secret = _opt_str(raw.get("imagePullSecret"), f"{path}.imagePullSecret")
    if pull_secret is not None and (len(pull_secret) > 253 or not _DNS_SUBDOMAIN.fullmatch(pull_secret)):
        raise ConfigError(_key(f"{path}.imagePullSecret"), f"{shown(pull_secret)} is not a Secret name (a DNS-1123 "
                                                           "subdomain: lower-case letters, digits, '-' and '.')")
    image = raw.get("image")
    if image is not None:
        image = _str(image, f"{path}.image")
        if any(ch.isspace() for ch in image):
            raise ConfigError(_key(f"{path}.image"), f"{shown(image)} is not an image reference; unset it to have "
                                                     f"the stack build and push one (or `{DOCKER_BUILD}`)")
    platform = _str(raw.get("platform", DispatchConfig.platform), f"{path}.platform")
    if platform not in DISPATCH_PLATFORMS:
        raise ConfigError(_key(f"{path}.platform"), f"must be {' or '.join(DISPATCH_PLATFORMS)} (the hub nodes' "
                                                    f"architecture), got {shown(platform)}")
    if image is not None and "platform" in raw:
        raise ConfigError(_key(f"{path}.platform"), "only applies to the image the stack builds; remove it or unset "
                                                    "gpufleet:hub.dispatch.image")
    return DispatchConfig(
        image=image,
        platform=platform,
        replicas=_int(raw.get("replicas", 2), f"{path}.replicas", minimum=1),
        admission_deadline_seconds=_int(raw.get("admissionDeadlineSeconds", 300),
                                        f"{path}.admissionDeadlineSeconds", minimum=1),
        wait_usd_per_gpu_hour=_float(raw.get("waitUsdPerGpuHour", 2.0), f"{path}.waitUsdPerGpuHour"),
        resources=_resources(raw.get("resources"), f"{path}.resources"),
        live=_bool(raw.get("live", False), f"{path}.live"),
        service_account_annotations=_annotations(raw.get("serviceAccountAnnotations"),
                                                 f"{path}.serviceAccountAnnotations"),
        image_pull_secret=pull_secret,
        prometheus_url=_prometheus_url(raw.get("prometheusUrl"), f"{path}.prometheusUrl"),
    )


def _prometheus_url(value: Any, path: str) -> str | None:
    """The user's own Prometheus server: an http(s) URL with a host and nothing else (no credentials in it)."""
    if value is None:
        return None
    from urllib.parse import urlsplit

    text = _str(value, path)
    try:
        parts = urlsplit(text)
        host = parts.hostname
    except ValueError:
        host = None
    if any(ch.isspace() for ch in text) or parts.scheme not in ("http", "https") or not host or "@" in parts.netloc:
        raise ConfigError(_key(path), "must be the http(s):// URL of a Prometheus server that scrapes the "
                                      "dispatcher, such as http://prometheus.monitoring.svc:9090 (no credentials "
                                      "in it); unset it to have the hub install one")
    return text


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


def parse(raw: Mapping[str, Any], *, stack: str = "dev") -> StackConfig:
    """Validate raw config values (keys without the ``gpufleet:`` prefix) into a :class:`StackConfig`.

    Raises :class:`ConfigError` naming the first invalid key.
    """
    allowed = set(KEYS)
    _unknown_keys(raw, allowed, "")
    role = _str(raw.get("role", "worker"), "role")
    if role not in ("worker", "hub"):
        raise ConfigError(_key("role"), "must be worker or hub")
    cloud = _str(_require(raw, "cloud"), "cloud")
    if cloud not in _CAPACITIES:
        raise ConfigError(_key("cloud"), "must be aws or gcp")
    region = _str(_require(raw, "region"), "region")
    if region not in known_regions()[cloud]:
        near = difflib.get_close_matches(region, sorted(known_regions()[cloud]), n=1)
        raise ConfigError(_key("region"), f"{shown(region)} is not a known {cloud} region"
                          + (f"; did you mean {near[0]}?" if near else "")
                          + " (regions: placement/data/regions.yaml; a new region is a line there)")
    project = _opt_str(raw.get("project"), "project")
    if cloud == "gcp" and not project:
        raise ConfigError(_key("project"), "is required on GCP stacks (the Google Cloud project ID)")
    if project is not None and not _GCP_PROJECT.fullmatch(project):
        raise ConfigError(_key("project"), f"{shown(project)} is not a Google Cloud project ID: lower-case letters, "
                                           "digits and '-', starting with a letter, at most 30 characters")
    cluster_name = _str(raw.get("clusterName", f"gpufleet-{stack}"), "clusterName")
    if not _NAME.fullmatch(cluster_name):
        raise ConfigError(_key("clusterName"), "must be lower-case letters, digits and '-', at most 40 characters")
    gpu_zone = _opt_str(raw.get("gpuZone"), "gpuZone")
    if gpu_zone is not None and not zone_in_region(cloud, gpu_zone, region):
        raise ConfigError(_key("gpuZone"), f"zone {shown(gpu_zone)} is not in region {region!r}")

    pools_raw = raw.get("nodePools") or []
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

    net = _mapping(raw.get("network"), "network")
    _unknown_keys(net, {"vpcCidr", "azCount", "podsCidr", "servicesCidr", "gpuCidrBase"}, "network")
    network = NetworkConfig(
        vpc_cidr=_cidr(net.get("vpcCidr", NetworkConfig.vpc_cidr), "network.vpcCidr"),
        az_count=_int(net.get("azCount", 2), "network.azCount", minimum=2, maximum=MAX_AZ_COUNT),
        pods_cidr=_cidr(net.get("podsCidr", NetworkConfig.pods_cidr), "network.podsCidr"),
        services_cidr=_cidr(net.get("servicesCidr", NetworkConfig.services_cidr), "network.servicesCidr"),
        gpu_cidr_base=_cidr(net.get("gpuCidrBase", NetworkConfig.gpu_cidr_base), "network.gpuCidrBase"),
    )
    _check_ranges(network, cloud)

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

    ck = _mapping(raw.get("checkpoint"), "checkpoint")
    _unknown_keys(ck, {"prefix", "noncurrentVersionDays", "softDeleteDays", "kmsKey", "filesystem"}, "checkpoint")
    fs = _mapping(ck.get("filesystem"), "checkpoint.filesystem")
    _unknown_keys(fs, {"kind", "capacityGb", "throughputMbpsPerTib"}, "checkpoint.filesystem")
    fs_kind = _str(fs.get("kind", "none"), "checkpoint.filesystem.kind")
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
    prefix = _str(ck.get("prefix", "checkpoints"), "checkpoint.prefix").strip("/")
    # Object keys are at most 1024 bytes (S3, GCS); the prefix leaves room for the run and step names.
    if not prefix or len(prefix.encode()) > 256 or prefix != prefix.strip():
        raise ConfigError(_key("checkpoint.prefix"), "must be a key prefix such as checkpoints: at most 256 bytes, "
                                                     f"no leading or trailing spaces, got {shown(prefix)}")
    checkpoint = CheckpointConfig(
        prefix=prefix,
        noncurrent_version_days=_int(
            ck.get("noncurrentVersionDays", 30), "checkpoint.noncurrentVersionDays", minimum=1
        ),
        soft_delete_days=_int(ck.get("softDeleteDays", 7), "checkpoint.softDeleteDays", minimum=0),
        kms_key=_opt_str(ck.get("kmsKey"), "checkpoint.kmsKey"),
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
    if not _NAME.fullmatch(training.namespace):
        raise ConfigError(_key("training.namespace"), f"{shown(training.namespace)} is not a valid namespace name")
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", training.service_account):
        raise ConfigError(
            _key("training.serviceAccount"),
            f"{shown(training.service_account)} is not a valid service account name (a DNS-1123 label)",
        )

    kq = _mapping(raw.get("kueue"), "kueue")
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

    hb = _mapping(raw.get("hub"), "hub")
    _unknown_keys(hb, {"workers", "dispatcher", "egressCidrs", "dispatch", "vpn"}, "hub")
    workers = _worker_refs(hb.get("workers"), "hub.workers")
    dispatcher = _str(hb.get("dispatcher", "AllAtOnce"), "hub.dispatcher")
    if dispatcher not in ("AllAtOnce", "Incremental", "External"):
        raise ConfigError(_key("hub.dispatcher"), "must be AllAtOnce, Incremental or External")
    egress = _ipv4_cidrs(hb.get("egressCidrs"), "hub.egressCidrs")
    check_public_span(egress, "hub.egressCidrs")
    hub = HubConfig(workers=workers, dispatcher=dispatcher,  # type: ignore[arg-type]
                    egress_cidrs=egress, dispatch=_dispatch(hb.get("dispatch"), dispatcher),
                    vpn=_hub_vpn(hb.get("vpn"), cloud, workers))
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

    tags = _tags(raw.get("tags"), cloud)

    return StackConfig(
        cloud=cloud,  # type: ignore[arg-type]
        role=role,  # type: ignore[arg-type]
        region=region,
        cluster_name=cluster_name,
        gpu_zone=gpu_zone,
        project=project,
        node_pools=pools,
        network=network,
        cluster=cluster,
        checkpoint=checkpoint,
        training=training,
        kueue=kueue,
        hub=hub,
        tags=tags,
        allow_replace=parse_allow_replace(raw.get("allowReplace")),
    )


# A Pulumi resource name as gpufleet names them (f"{cluster}-<part>"): what gpufleet:allowReplace lists.
_RESOURCE_NAME = re.compile(r"[A-Za-z0-9][-A-Za-z0-9_.]{0,199}")


def parse_allow_replace(value: Any) -> tuple[str, ...]:
    """``gpufleet:allowReplace``: the stateful resources (file systems, buckets, node groups, Namespaces, by Pulumi
    resource name, as the preview's REPLACE rows name them) this stack's next `pulumi up` may replace. Their
    ``protect`` is lifted and the ``stateful-replace-acknowledged`` policy lets their replacement pass; they stay
    ``retainOnDelete``, so the old one is kept. Remove the entry once the update is done."""
    names = _strings(value, "allowReplace")
    for i, name in enumerate(names):
        if not _RESOURCE_NAME.fullmatch(name):
            raise ConfigError(_key(f"allowReplace[{i}]"), f"{shown(name)} is not a resource name; list the names "
                              "the preview marks REPLACE, such as gpufleet-aws-use1-p5-ckpt-fsx")
        if name in names[:i]:
            raise ConfigError(_key(f"allowReplace[{i}]"), f"{name!r} is listed twice; list each resource once")
    return names


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
    parsed = parse(raw, stack=pulumi.get_stack())
    project = _this_project()
    if project is not None:
        check_worker_stacks(parsed, *project, stack_name=pulumi.get_stack())
        check_hub_stack(parsed, *project)
    return parsed


def _this_project() -> tuple[Path, str] | None:
    """(stack config directory, project name) of the Pulumi project this package belongs to, from its
    ``Pulumi.yaml``; None when the package runs outside a checkout of it."""
    import yaml

    root = Path(__file__).resolve().parents[1]
    try:
        doc = yaml.safe_load((root / "Pulumi.yaml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("name"), str):
        return None
    return root / str(doc.get("stackConfigDir") or "."), doc["name"]


def check_worker_stacks(cfg: StackConfig, stacks_dir: Path, project: str, *, stack_name: str = "hub") -> None:
    """On a hub (stack ``stack_name``), every worker of this project (``org/<project>/<stack>``) must be a worker
    stack of it: its ``Pulumi.<stack>.yaml`` is in ``stacks_dir``, does not say ``role: hub``, is a valid config,
    and its :func:`linked_ranges` overlap neither the hub's nor an earlier worker's (:func:`range_overlaps`).
    Stacks of other projects are not known here. Raises :class:`ConfigError` naming ``gpufleet:hub.workers[i]``."""
    import yaml

    linked: dict[str, StackConfig] = {stack_name: cfg}
    for i, ref in enumerate(cfg.hub.workers):
        _, ref_project, stack = ref.split("/")
        if ref_project != project:
            continue
        path = stacks_dir / f"Pulumi.{stack}.yaml"
        where = _key(f"hub.workers[{i}]")
        try:
            doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(where, f"project {project} has no stack {stack!r} ({path.name} is not in "
                                     f"{stacks_dir.name}/): fix the name or create and bring up that worker "
                                     "stack first") from None
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise ConfigError(where, f"cannot read {path.name} ({type(exc).__name__}); fix that stack file") from None
        config = doc.get("config") if isinstance(doc, dict) else None
        role = config.get(_key("role"), "worker") if isinstance(config, dict) else "worker"
        if role != "worker":
            raise ConfigError(where, f"stack {stack!r} is a {shown(role)} stack, not a worker; list worker stacks only")
        raw = {k.split(":", 1)[1]: v for k, v in (config if isinstance(config, dict) else {}).items()
               if isinstance(k, str) and k.startswith(NAMESPACE + ":")}
        try:
            linked[stack] = parse(raw, stack=stack)
        except ConfigError as exc:
            raise ConfigError(where, f"worker stack {stack!r} has an invalid config ({exc})") from None
        if cfg.hub.vpn is not None and ref in cfg.hub.vpn.workers and linked[stack].cloud != "gcp":
            raise ConfigError(where, f"worker stack {stack!r} is on {linked[stack].cloud}; gpufleet:hub.vpn links an "
                                     "AWS hub to GCP workers only (peer same-cloud VPCs outside the stacks)")
        path_error = worker_path_error(cfg, ref, linked[stack])
        if path_error:
            raise ConfigError(where, path_error)
        overlaps = range_overlaps(linked)
        if overlaps:
            raise ConfigError(where, f"{overlaps[0]}: a hub and its workers need disjoint address ranges (the hub "
                                     "routes to each by address); change one of them")


def hub_path(hub: StackConfig, ref: str, worker: StackConfig) -> str:
    """How hub ``hub`` reaches worker stack ``ref``: ``vpn`` (the hub's HA VPN), ``external`` (a private link
    built outside the stacks) or ``public`` (the worker's public endpoint, from the hub's NAT addresses)."""
    if hub.hub.vpn is not None and ref in hub.hub.vpn.workers:
        return "vpn"
    return "external" if worker.cluster.hub_private_link == "external" else "public"


def worker_path_error(hub: StackConfig, ref: str, worker: StackConfig) -> str | None:
    """Why hub ``hub`` and its worker stack ``ref`` (config ``worker``) disagree on the path between them, or
    None: the hub's VPN and the worker's ``hubPrivateLink: vpn`` go together, and the hub egresses from a range
    of the kind the path carries (a private range over a private link, a public address to a public endpoint)."""
    stack = ref.rsplit("/", 1)[-1]
    path = hub_path(hub, ref, worker)
    if path == "vpn" and worker.cluster.hub_private_link != "vpn":
        return (f"gpufleet:hub.vpn links worker stack {stack!r}, whose gpufleet:cluster.hubPrivateLink is "
                f"{worker.cluster.hub_private_link}; set it to vpn (and publicAccess false) on that stack")
    if path != "vpn" and worker.cluster.hub_private_link == "vpn":
        return (f"worker stack {stack!r} says gpufleet:cluster.hubPrivateLink: vpn but gpufleet:hub.vpn.workers does "
                "not list it; add it there or change the worker's hubPrivateLink")
    private = [c for c in hub.hub.egress_cidrs if is_private_cidr(c)]
    if path != "public" and not private:
        return (f"worker stack {stack!r} is reached over a private link ({path}) but gpufleet:hub.egressCidrs lists no "
                "private range; add the hub VPC's range the hub's clients egress from")
    if path == "public" and len(private) == len(hub.hub.egress_cidrs):
        return (f"worker stack {stack!r} is reached on its public endpoint but gpufleet:hub.egressCidrs lists no "
                "public address; add the hub's NAT addresses, or link the worker privately")
    return None


def check_hub_stack(cfg: StackConfig, stacks_dir: Path, project: str) -> None:
    """A worker's ``cluster.hubStack`` in this project (``org/<project>/<stack>``) must name a hub stack: its
    ``Pulumi.<stack>.yaml`` in ``stacks_dir``, when there, says ``role: hub``. (Other projects' stacks are
    checked when the worker reads the hub's exported ``role``: :mod:`infra.hub_link`.)"""
    import yaml

    ref = cfg.cluster.hub_stack
    if cfg.role != "worker" or ref is None or ref.split("/")[1] != project:
        return
    stack = ref.rsplit("/", 1)[-1]
    try:
        doc = yaml.safe_load((stacks_dir / f"Pulumi.{stack}.yaml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return
    config = doc.get("config") if isinstance(doc, dict) else None
    role = config.get(_key("role"), "worker") if isinstance(config, dict) else "worker"
    if role != "hub":
        raise ConfigError(_key("cluster.hubStack"), f"names stack {stack!r}, a {shown(role)} stack, not a hub; name "
                                                    "the hub stack this worker serves (role: hub)")


def load_stack_file(path: str) -> StackConfig:
    """Parse ``stacks/Pulumi.<stack>.yaml`` directly (for scripts and tests; no Pulumi needed)."""
    import os

    import yaml

    with open(path, encoding="utf-8") as fh:
        doc = yaml.safe_load(fh) or {}
    config = doc.get("config") or {}
    raw = {k.split(":", 1)[1]: v for k, v in config.items() if k.startswith(NAMESPACE + ":")}
    stack = os.path.basename(path).removeprefix("Pulumi.").removesuffix(".yaml")
    parsed = parse(raw, stack=stack)
    project = _this_project()
    if project is not None:
        check_worker_stacks(parsed, Path(path).resolve().parent, project[1], stack_name=stack)
        check_hub_stack(parsed, Path(path).resolve().parent, project[1])
    return parsed
