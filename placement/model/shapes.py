"""GPU machine shapes, loaded from ``placement/data/shapes.yaml`` (shared with ``infra/``).

Pure data access: no cloud SDK imports. Units: memory GiB, GPU memory GiB, disk GB.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any, Literal

from placement.errors import InputError
from placement.model.packaged import packaged_book

Cloud = Literal["aws", "gcp"]
CLOUDS: tuple[Cloud, ...] = ("aws", "gcp")
FABRIC_KINDS = ("none", "efa", "tcpx", "tcpxo", "rdma")
# GKE node boot disk types a GCP shape may name (Compute Engine disk types GKE accepts for node boot disks).
GCP_BOOT_DISKS = ("pd-balanced", "pd-ssd", "pd-standard", "hyperdisk-balanced")


@dataclass(frozen=True)
class QuotaKeys:
    """Quota keys one node of a shape consumes; ``unit`` is ``vcpu`` (AWS) or ``gpu`` (GCP)."""

    unit: Literal["vcpu", "gpu"]
    on_demand: str | None
    spot: str | None
    unverified: frozenset[str] = frozenset()  # capacities ("spot", "on-demand") whose key is not verified

    def key(self, capacity: str) -> str | None:
        return self.spot if capacity == "spot" else self.on_demand


@dataclass(frozen=True)
class Shape:
    """One machine type.

    ``fabric`` is the multi-node GPU interconnect (``none`` means single-node only) and
    ``fabric_nics`` its interface count: EFA interfaces on AWS, GPU NICs on GCP.
    """

    name: str
    cloud: Cloud
    accelerator: str
    gpus: int
    gpu_memory_gib: int
    vcpus: int
    memory_gib: int
    fabric: str
    fabric_nics: int
    quota: QuotaKeys
    # One node's GPU fabric line rate in Gbps (its VPC network without a fabric): the scaling model's bandwidth.
    fabric_gbps: float = 0.0
    # AWS only
    network_cards: int = 0
    instance_store_gb: int = 0
    # EFA with RDMA read (the shapes.yaml efa_rdma_read list): FI_EFA_USE_DEVICE_RDMA=1 is safe only there.
    efa_rdma_read: bool = False
    # Layers of the EC2 network topology above the instance (shapes.yaml aws_four_network_layers: 4).
    network_layers: int = 3
    # GCP only
    gke_accelerator: str = ""
    gpu_vpcs: int = 0
    rdma_subnets: int = 0
    local_ssds: int = 0
    # The GKE node boot disk type: some series attach Hyperdisk only (A3 Ultra, A4).
    boot_disk: str = "pd-balanced"

    @property
    def multi_node(self) -> bool:
        """True when the shape has a GPU fabric, so a job may span several nodes."""
        return self.fabric != "none"

    def quota_per_node(self) -> int:
        """Quota units one node consumes (vCPU on AWS, GPUs on GCP)."""
        return self.vcpus if self.quota.unit == "vcpu" else self.gpus


REFERENCE_ACCELERATOR = "H100"  # speed 1.0: every other accelerator's speed is relative to it


@dataclass(frozen=True)
class ShapeBook:
    """All known shapes, indexed by name, plus the accelerator-name aliases, each accelerator's relative
    training speed (H100 = 1.0) with its source, and the quota keys each cloud is known to have."""

    shapes: dict[str, Shape]
    aliases: dict[str, str]
    speeds: dict[str, float] = field(default_factory=dict)
    speed_sources: dict[str, str] = field(default_factory=dict)
    quota_keys: dict[str, frozenset[str]] = field(default_factory=dict)

    def get(self, name: str) -> Shape | None:
        return self.shapes.get(name)

    def canonical_accelerator(self, name: str) -> str:
        """Normalise an accelerator name (case-insensitive; aliases such as H100-MEGA -> H100)."""
        upper = name.strip().upper()
        return self.aliases.get(upper, upper)

    def accelerators(self) -> set[str]:
        return set(self._accelerators)

    @functools.cached_property
    def _accelerators(self) -> frozenset[str]:
        # Read on every job spec parsed (the dispatcher parses one per Workload shape of a pass): made once.
        return frozenset(s.accelerator for s in self.shapes.values())

    def for_cloud(self, cloud: str) -> list[Shape]:
        return [s for s in self.shapes.values() if s.cloud == cloud]

    def speed(self, accelerator: str) -> float:
        """Relative training throughput per GPU (H100 = 1.0); 1.0 for an accelerator the data does not know."""
        return self.speeds.get(accelerator, 1.0)

    def largest_node(self, cloud: str, accelerator: str) -> int:
        """The most GPUs one node of ``accelerator`` holds on ``cloud`` (0 when no shape has it)."""
        return self._largest.get((cloud, accelerator), 0)

    @functools.cached_property
    def _largest(self) -> dict[tuple[str, str], int]:
        out: dict[tuple[str, str], int] = {}
        for s in self.shapes.values():
            out[(s.cloud, s.accelerator)] = max(out.get((s.cloud, s.accelerator), 0), s.gpus)
        return out

    def node_sizes(self, accelerator: str) -> list[int]:
        """Every GPUs-per-node count a shape of ``accelerator`` has, on any cloud, ascending."""
        return list(self._node_sizes.get(accelerator, ()))

    @functools.cached_property
    def _node_sizes(self) -> dict[str, tuple[int, ...]]:
        # Read several times on every job spec parsed (the dispatcher parses one per Workload shape of a pass).
        sizes: dict[str, set[int]] = {}
        for s in self.shapes.values():
            sizes.setdefault(s.accelerator, set()).add(s.gpus)
        return {a: tuple(sorted(g)) for a, g in sizes.items()}

    def known_quota_key(self, cloud: str, key: str) -> bool:
        """True for a quota code / metric the shape data lists for ``cloud`` (GCP: also its PREEMPTIBLE_ and
        COMMITTED_ forms)."""
        known = self.quota_keys.get(cloud, frozenset())
        if cloud == "gcp":
            key = key.removeprefix("PREEMPTIBLE_").removeprefix("COMMITTED_")
        return key in known


def node_plan(gpus: int, shape: Shape, gpus_per_node: int | None = None) -> tuple[int, str | None]:
    """(nodes, why ``shape`` cannot run a ``gpus``-GPU job or None): as few nodes as possible.

    A job of at least the largest node of its accelerator on that cloud runs on full-size nodes only; a
    smaller job on one node that holds all its GPUs. ``gpus_per_node`` overrides both: only shapes of that
    size, on as many nodes as it takes."""
    n = shape.gpus
    nodes = -(-gpus // n)
    if gpus_per_node is not None:
        if n != gpus_per_node:
            return nodes, f"gpus_per_node is {gpus_per_node}; {shape.name} has {n} GPUs per node"
        return nodes, None
    largest = max(shape_book().largest_node(shape.cloud, shape.accelerator), n)
    if gpus >= largest:
        if n != largest:
            return nodes, (f"{gpus} GPUs run on full {largest}-GPU {shape.accelerator} nodes; {shape.name} has "
                           f"{n} (gpus_per_node: {n} allows it)")
        return nodes, None
    if n < gpus:
        return nodes, (f"{gpus} GPUs fit on one {shape.accelerator} node; {shape.name} would need {nodes} "
                       f"(gpus_per_node: {n} allows it)")
    return 1, None


def _shape(row: dict[str, Any], where: str) -> Shape:
    try:
        fabric = row["fabric"]
        quota = row["quota"]
        aws = row.get("aws") or {}
        gcp = row.get("gcp") or {}
        if row["cloud"] not in CLOUDS:
            raise InputError(f"{where}.cloud", f"must be one of {', '.join(CLOUDS)}")
        if fabric["kind"] not in FABRIC_KINDS:
            raise InputError(f"{where}.fabric.kind", f"must be one of {', '.join(FABRIC_KINDS)}")
        boot_disk = str(gcp.get("boot_disk", "pd-balanced"))
        if boot_disk not in GCP_BOOT_DISKS:
            raise InputError(f"{where}.gcp.boot_disk", f"must be one of {', '.join(GCP_BOOT_DISKS)}, got {boot_disk!r}")
        return Shape(
            name=str(row["name"]),
            cloud=row["cloud"],
            accelerator=str(row["accelerator"]).upper(),
            gpus=int(row["gpus"]),
            gpu_memory_gib=int(row["gpu_memory_gib"]),
            vcpus=int(row["vcpus"]),
            memory_gib=int(row["memory_gib"]),
            fabric=str(fabric["kind"]),
            fabric_nics=int(fabric["nics"]),
            fabric_gbps=float(fabric["gbps"]),
            quota=QuotaKeys(unit=quota["unit"], on_demand=quota.get("on_demand"), spot=quota.get("spot"),
                            unverified=frozenset(str(c) for c in quota.get("unverified") or ())),
            network_cards=int(aws.get("network_cards", 0)),
            instance_store_gb=int(aws.get("instance_store_gb", 0)),
            gke_accelerator=str(gcp.get("gke_accelerator", "")),
            gpu_vpcs=int(gcp.get("gpu_vpcs", 0)),
            rdma_subnets=int(gcp.get("rdma_subnets", 0)),
            local_ssds=int(gcp.get("local_ssds", 0)),
            boot_disk=boot_disk,
        )
    except KeyError as exc:
        raise InputError(f"{where}.{exc.args[0]}", "is required in the shape row") from None


def _speeds(doc: dict[str, Any], accelerators: set[str]) -> tuple[dict[str, float], dict[str, str]]:
    """The ``accelerators:`` section: a speed (> 0, H100 = 1.0) and a non-empty source for every accelerator."""
    rows = doc.get("accelerators") or {}
    if not isinstance(rows, dict):
        raise InputError("accelerators", "must be a mapping of accelerator -> {speed, source}")
    speeds: dict[str, float] = {}
    sources: dict[str, str] = {}
    for name, row in rows.items():
        where = f"accelerators.{name}"
        if not isinstance(row, dict):
            raise InputError(where, "must be a mapping with speed and source")
        speed = row.get("speed")
        if isinstance(speed, bool) or not isinstance(speed, (int, float)) or not speed > 0:
            raise InputError(f"{where}.speed", f"must be a number > 0 (training throughput per GPU, H100 = 1.0), "
                             f"got {speed!r}")
        source = row.get("source")
        if not isinstance(source, str) or not source.strip():
            raise InputError(f"{where}.source", "is required: where the figure comes from")
        speeds[str(name).upper()] = float(speed)
        sources[str(name).upper()] = source.strip()
    missing = sorted(accelerators - set(speeds))
    if missing:
        raise InputError(f"accelerators.{missing[0]}", "is missing: every accelerator of the shapes needs a speed "
                         "and its source")
    if speeds.get(REFERENCE_ACCELERATOR) != 1.0:
        raise InputError(f"accelerators.{REFERENCE_ACCELERATOR}.speed", "must be 1.0: speeds are relative to it")
    return speeds, sources


def parse_shapes(doc: dict[str, Any]) -> ShapeBook:
    """Build a :class:`ShapeBook` from the parsed YAML document."""
    shapes: dict[str, Shape] = {}
    for i, row in enumerate(doc.get("shapes") or []):
        shape = _shape(row, f"shapes[{i}]")
        if shape.name in shapes:
            raise InputError(f"shapes[{i}].name", f"duplicate shape {shape.name!r}")
        shapes[shape.name] = shape
    for i, name in enumerate(doc.get("efa_rdma_read") or []):
        found = shapes.get(str(name))
        if found is None or found.fabric != "efa":
            raise InputError(f"efa_rdma_read[{i}]", f"{name!r} is not an EFA shape of this file")
        shapes[found.name] = dataclasses.replace(found, efa_rdma_read=True)
    for i, name in enumerate(doc.get("aws_four_network_layers") or []):
        found = shapes.get(str(name))
        if found is None or found.cloud != "aws":
            raise InputError(f"aws_four_network_layers[{i}]", f"{name!r} is not an AWS shape of this file")
        shapes[found.name] = dataclasses.replace(found, network_layers=4)
    aliases = {str(k).upper(): str(v).upper() for k, v in (doc.get("accelerator_aliases") or {}).items()}
    speeds, sources = _speeds(doc, {s.accelerator for s in shapes.values()})
    keys: dict[str, set[str]] = {c: set() for c in CLOUDS}
    for cloud, rows in (doc.get("quota_keys") or {}).items():
        if cloud not in CLOUDS:
            raise InputError(f"quota_keys.{cloud}", f"must be one of {', '.join(CLOUDS)}")
        keys[cloud].update(str(k) for k in rows or {})
    for shape in shapes.values():
        keys[shape.cloud].update(k for k in (shape.quota.on_demand, shape.quota.spot) if k)
    return ShapeBook(shapes=shapes, aliases=aliases, speeds=speeds, speed_sources=sources,
                     quota_keys={c: frozenset(k) for c, k in keys.items()})


@functools.cache
def shape_book() -> ShapeBook:
    """The shapes shipped with the package (cached; read once per process)."""
    return parse_shapes(packaged_book("shapes.yaml"))
