"""The entry point: one stack's whole config parsed, typed and validated before any resource is registered.

Owns :class:`StackConfig` and :func:`parse` (the stack's own keys: cloud, role, region, project, clusterName,
gpuZone, allowReplace; then each section, in :data:`KEYS` order, by its module), the readers that feed it
(:func:`from_pulumi` inside a Pulumi program, :func:`load_stack_file` for scripts and tests), and the checks
that need the other stacks of the project: a hub's workers (:func:`check_worker_stacks`: each a valid worker
stack, reached on a path both ends agree on, address ranges disjoint) and a worker's hub
(:func:`check_hub_stack`).

May import: the standard library, PyYAML (lazily), every module of ``infra/config/``, :mod:`placement.errors`,
``placement``'s region and zone data, and the Pulumi SDK only inside :func:`from_pulumi`.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from infra.config.cluster import ClusterConfig, parse_cluster
from infra.config.fields import _NAME, NAMESPACE, ConfigError, _key, _opt_str, _require, _str, _strings, _unknown_keys
from infra.config.hub import HubConfig, parse_hub
from infra.config.kueue import KueueConfig, parse_kueue
from infra.config.network import NetworkConfig, is_private_cidr, parse_network
from infra.config.pools import _CAPACITIES, NodePoolConfig, parse_node_pools
from infra.config.storage import CheckpointConfig, TrainingConfig, parse_checkpoint, parse_training
from infra.config.tags import parse_tags
from placement.errors import shown
from placement.model.zones import known_regions, zone_in_region

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

# A Google Cloud project ID (at most 30 characters, a letter first); legacy ones carry an "example.com:" prefix.
_GCP_PROJECT = re.compile(r"([a-z0-9][-a-z0-9.]{0,62}:)?[a-z][-a-z0-9]{0,29}")


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

    # The sections, in KEYS order: the order their errors are found in.
    pools = parse_node_pools(raw.get("nodePools"), role, cloud, region, gpu_zone)
    network = parse_network(raw.get("network"), cloud)
    cluster = parse_cluster(raw.get("cluster"), cloud)
    checkpoint = parse_checkpoint(raw.get("checkpoint"), cloud, gpu_zone)
    training = parse_training(raw.get("training"))
    kueue = parse_kueue(raw.get("kueue"))
    hub = parse_hub(raw.get("hub"), role, cloud)
    tags = parse_tags(raw.get("tags"), cloud)

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

    root = Path(__file__).resolve().parents[2]
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
