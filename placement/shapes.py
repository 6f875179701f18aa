"""GPU machine shapes, loaded from ``placement/data/shapes.yaml`` (shared with ``infra/``).

Pure data access: no cloud SDK imports. Units: memory GiB, GPU memory GiB, disk GB.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal

import yaml

from placement.errors import InputError

Cloud = Literal["aws", "gcp"]
CLOUDS: tuple[Cloud, ...] = ("aws", "gcp")
FABRIC_KINDS = ("none", "efa", "tcpx", "tcpxo", "rdma")


@dataclass(frozen=True)
class QuotaKeys:
    """Quota keys one node of a shape consumes; ``unit`` is ``vcpu`` (AWS) or ``gpu`` (GCP)."""

    unit: Literal["vcpu", "gpu"]
    on_demand: str | None
    spot: str | None

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
    # AWS only
    network_cards: int = 0
    instance_store_gb: int = 0
    # GCP only
    gke_accelerator: str = ""
    gpu_vpcs: int = 0
    rdma_subnets: int = 0
    local_ssds: int = 0

    @property
    def multi_node(self) -> bool:
        """True when the shape has a GPU fabric, so a job may span several nodes."""
        return self.fabric != "none"

    def quota_per_node(self) -> int:
        """Quota units one node consumes (vCPU on AWS, GPUs on GCP)."""
        return self.vcpus if self.quota.unit == "vcpu" else self.gpus


@dataclass(frozen=True)
class ShapeBook:
    """All known shapes, indexed by name, plus the accelerator-name aliases."""

    shapes: dict[str, Shape]
    aliases: dict[str, str]

    def get(self, name: str) -> Shape | None:
        return self.shapes.get(name)

    def canonical_accelerator(self, name: str) -> str:
        """Normalise an accelerator name (case-insensitive; aliases such as H100-MEGA -> H100)."""
        upper = name.strip().upper()
        return self.aliases.get(upper, upper)

    def accelerators(self) -> set[str]:
        return {s.accelerator for s in self.shapes.values()}

    def for_cloud(self, cloud: str) -> list[Shape]:
        return [s for s in self.shapes.values() if s.cloud == cloud]


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
            quota=QuotaKeys(unit=quota["unit"], on_demand=quota.get("on_demand"), spot=quota.get("spot")),
            network_cards=int(aws.get("network_cards", 0)),
            instance_store_gb=int(aws.get("instance_store_gb", 0)),
            gke_accelerator=str(gcp.get("gke_accelerator", "")),
            gpu_vpcs=int(gcp.get("gpu_vpcs", 0)),
            rdma_subnets=int(gcp.get("rdma_subnets", 0)),
            local_ssds=int(gcp.get("local_ssds", 0)),
        )
    except KeyError as exc:
        raise InputError(f"{where}.{exc.args[0]}", "is required in the shape row") from None


def parse_shapes(doc: dict[str, Any]) -> ShapeBook:
    """Build a :class:`ShapeBook` from the parsed YAML document."""
    shapes: dict[str, Shape] = {}
    for i, row in enumerate(doc.get("shapes") or []):
        shape = _shape(row, f"shapes[{i}]")
        if shape.name in shapes:
            raise InputError(f"shapes[{i}].name", f"duplicate shape {shape.name!r}")
        shapes[shape.name] = shape
    aliases = {str(k).upper(): str(v).upper() for k, v in (doc.get("accelerator_aliases") or {}).items()}
    return ShapeBook(shapes=shapes, aliases=aliases)


@functools.cache
def shape_book() -> ShapeBook:
    """The shapes shipped with the package (cached; read once per process)."""
    text = resources.files("placement.data").joinpath("shapes.yaml").read_text(encoding="utf-8")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return parse_shapes(yaml.load(text, Loader=loader))
