"""Clusters and the MultiKueue hub as their Pulumi stack outputs describe them. Pure: mappings in, frozen
dataclasses out, with :class:`~placement.errors.InputError` naming the output and the fix.

A worker stack exports ``cloud``, ``region``, ``clusterName``, ``kubeconfig`` (secret), ``nodePools``,
``checkpointUri``, ``checkpointFilesystem``, ``trainingServiceAccount``, ``kueue``, ``federation`` (when
the hub has workers of the other cloud) and, on GCP, ``gpuNetworks`` (``infra.outputs.export_cluster``). The
hub exports ``role: hub``, ``dispatcher``, ``workers`` and ``kueue``. The dispatcher's fleet file (ConfigMap
``gpufleet-fleet``, key ``fleet.json``) is the same document keyed by worker key, without kubeconfigs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from placement.errors import InputError, shown
from placement.model import kueue as ko
from placement.model.numbers import finite_number
from placement.model.shapes import Shape, shape_book


@dataclass(frozen=True)
class Pool:
    """One node pool as a cluster stack exports it (``nodePools[i]``). ``min_nodes`` is 0 for stacks
    that export none (older outputs): the pool is then treated as scaling from zero."""

    name: str
    instance_type: str
    capacity: str  # spot | on-demand
    zone: str
    max_nodes: int
    min_nodes: int = 0

    @property
    def shape(self) -> Shape | None:
        return shape_book().get(self.instance_type)


@dataclass(frozen=True)
class TrainingAccount:
    """The training service account (``trainingServiceAccount``): its name and the namespaces the stack
    created it in, bound to the cloud's checkpoint identity (IRSA / Workload Identity)."""

    name: str
    namespaces: tuple[str, ...]


@dataclass(frozen=True)
class Federation:
    """What a worker's stack made so that one peer worker of the OTHER cloud reaches this worker's checkpoint home
    (its ``federation`` output: peer worker key -> entry; issue 35, docs/kueue-hub.md#checkpoints-across-clouds).

    ``cloud`` is the home's. An AWS home (``cloud`` aws): the peer's training Kubernetes service account assumes
    ``role_arn`` with its projected token, whose audience is ``audience`` (the IAM OIDC provider's client ID). A GCP
    home: the peer's training role signs its way into the Workload Identity pool provider ``audience``
    (``//iam.googleapis.com/projects/NUMBER/locations/global/workloadIdentityPools/POOL/providers/PROVIDER``) and
    impersonates ``service_account`` (None: the federated principal is granted the home directly)."""

    cloud: str
    audience: str
    role_arn: str | None = None
    service_account: str | None = None


@dataclass(frozen=True)
class Queue:
    namespace: str
    name: str


@dataclass(frozen=True)
class ClusterStack:
    """A worker cluster from its stack outputs. ``local_queues`` is ``None`` when the stack exports no
    ``kueue`` output (then the queue name follows :func:`placement.model.kueue.local_queue_name`)."""

    stack: str
    cloud: str
    region: str
    cluster_name: str
    pools: tuple[Pool, ...]
    kubeconfig: Any
    checkpoint_uri: str | None
    filesystem: Mapping[str, Any] | None
    service_account: TrainingAccount | None
    local_queues: tuple[Queue, ...] | None
    gpu_networks: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # Peer worker key -> how that worker (of the other cloud) reaches this worker's checkpoint home.
    federation: Mapping[str, Federation] = field(default_factory=dict)

    def default_namespace(self) -> str | None:
        return self.local_queues[0].namespace if self.local_queues else None

    def queue_for(self, namespace: str) -> str | None:
        """This cluster's own LocalQueue in ``namespace`` (``<clusterName>-gpu``), or None."""
        name = ko.cluster_queue_name(self.cluster_name)
        if self.local_queues is None:
            return name
        return name if Queue(namespace, name) in self.local_queues else None

    def has_queue(self, namespace: str, name: str) -> bool:
        """Whether the cluster has LocalQueue ``name`` in ``namespace`` (unknown without a kueue output: yes)."""
        return self.local_queues is None or Queue(namespace, name) in self.local_queues


@dataclass(frozen=True)
class HubStack:
    """The MultiKueue hub from its stack outputs: ``workers`` maps the MultiKueueCluster name (the worker's
    stack name) to the worker's clusterName."""

    stack: str
    workers: Mapping[str, str]
    dispatcher: str
    local_queues: tuple[Queue, ...]
    kubeconfig: Any = None

    def worker_key(self, cluster_name: str) -> str | None:
        return next((k for k, v in self.workers.items() if v == cluster_name), None)


@dataclass(frozen=True)
class Stacks:
    clusters: tuple[ClusterStack, ...]
    hubs: tuple[HubStack, ...]


def _get(outputs: Mapping[str, Any], key: str, stack: str, source: str, kind: type | tuple[type, ...] = str) -> Any:
    value = outputs.get(key)
    if value is None or not isinstance(value, kind):
        what = "a string" if kind is str else "a mapping" if kind is dict else "a list"
        raise InputError(f"{stack}.{key}", f"must be {what} (re-export with `pulumi stack output --json "
                         "--show-secrets`)", source=source)
    return value


def whole(value: Any, where: str, source: str) -> int:
    """A non-negative whole number; Pulumi prints numbers as JSON numbers, mocks and YAML may give 4.0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(where, f"must be a whole number, got {shown(value)}", source=source)
    number = finite_number(value, where, source=source, what="a whole number")  # .inf, nan, 10**400
    if number != int(number) or number < 0:
        raise InputError(where, f"must be a whole number, got {shown(value)}", source=source)
    return int(number)


def _queues(raw: Any, where: str, source: str) -> tuple[Queue, ...]:
    if not isinstance(raw, list) or not all(isinstance(q, Mapping) and isinstance(q.get("namespace"), str)
                                            and isinstance(q.get("name"), str) for q in raw):
        raise InputError(where, "must be a list of {namespace, name}", source=source)
    return tuple(Queue(q["namespace"], q["name"]) for q in raw)


def _training_account(raw: Any, stack: str, source: str) -> TrainingAccount | None:
    """``{name, namespaces: [...]}``; the older ``{namespace, name}`` (one namespace) is read too."""
    if raw is None:
        return None
    where = f"{stack}.trainingServiceAccount"
    if not isinstance(raw, Mapping) or not isinstance(raw.get("name"), str) or not raw["name"]:
        raise InputError(where, "must be a mapping with name and namespaces", source=source)
    namespaces = raw.get("namespaces")
    if namespaces is None and isinstance(raw.get("namespace"), str):
        namespaces = [raw["namespace"]]
    if not isinstance(namespaces, list) or not all(isinstance(n, str) and n for n in namespaces):
        raise InputError(f"{where}.namespaces", "must be a list of namespace names", source=source)
    return TrainingAccount(name=raw["name"], namespaces=tuple(namespaces))


def _federation(raw: Any, stack: str, cloud: str, source: str) -> dict[str, Federation]:
    """The ``federation`` output: peer worker key -> ``{audience, roleArn}`` (an AWS home) or ``{audience,
    serviceAccount?}`` (a GCP home); absent (no peer of the other cloud, or an older stack): none."""
    if raw is None:
        return {}
    where = f"{stack}.federation"
    if not isinstance(raw, Mapping):
        raise InputError(where, "must map peer worker keys to {audience, roleArn | serviceAccount}", source=source)
    out: dict[str, Federation] = {}
    for key, entry in raw.items():
        at = f"{where}.{key}"
        if not isinstance(key, str) or not ko.DNS_LABEL.fullmatch(key) or not isinstance(entry, Mapping):
            raise InputError(at, "must be a peer worker key mapped to {audience, roleArn | serviceAccount}",
                             source=source)
        audience, role, account = entry.get("audience"), entry.get("roleArn"), entry.get("serviceAccount")
        if not isinstance(audience, str) or not audience:
            raise InputError(f"{at}.audience", "is required (a string)", source=source)
        if cloud == "aws" and (not isinstance(role, str) or not role.startswith("arn:")):
            raise InputError(f"{at}.roleArn", f"must be an IAM role ARN, got {shown(role)}", source=source)
        if account is not None and (not isinstance(account, str) or "@" not in account):
            raise InputError(f"{at}.serviceAccount", f"must be a service account email, got {shown(account)}",
                             source=source)
        out[key] = Federation(cloud=cloud, audience=audience, role_arn=role if cloud == "aws" else None,
                              service_account=account if cloud == "gcp" else None)
    return out


def parse_cluster(stack: str, outputs: Mapping[str, Any], source: str) -> ClusterStack:
    """One worker stack's outputs (the names ``infra.outputs.export_cluster`` exports)."""
    cloud = _get(outputs, "cloud", stack, source)
    if cloud not in ("aws", "gcp"):
        raise InputError(f"{stack}.cloud", f"must be aws or gcp, got {shown(cloud)}", source=source)
    pools = []
    for i, raw in enumerate(_get(outputs, "nodePools", stack, source, list)):
        where = f"{stack}.nodePools[{i}]"
        if not isinstance(raw, Mapping):
            raise InputError(where, "must be a mapping", source=source)
        for key in ("name", "instanceType", "capacity", "zone"):
            if not isinstance(raw.get(key), str) or not raw[key]:
                raise InputError(f"{where}.{key}", "is required (a string)", source=source)
        if raw["capacity"] not in ("spot", "on-demand"):
            raise InputError(f"{where}.capacity", f"must be spot or on-demand, got {shown(raw['capacity'])}",
                             source=source)
        min_nodes = whole(raw["minNodes"], f"{where}.minNodes", source) if "minNodes" in raw else 0
        pools.append(Pool(name=raw["name"], instance_type=raw["instanceType"], capacity=raw["capacity"],
                          zone=raw["zone"], max_nodes=whole(raw.get("maxNodes"), f"{where}.maxNodes", source),
                          min_nodes=min_nodes))
    service_account = _training_account(outputs.get("trainingServiceAccount"), stack, source)
    kueue = outputs.get("kueue")
    local_queues = None
    if kueue is not None:
        if not isinstance(kueue, Mapping):
            raise InputError(f"{stack}.kueue", "must be a mapping with clusterQueue and localQueues", source=source)
        local_queues = _queues(kueue.get("localQueues"), f"{stack}.kueue.localQueues", source)
    fs = outputs.get("checkpointFilesystem")
    if fs is not None and not isinstance(fs, Mapping):
        raise InputError(f"{stack}.checkpointFilesystem", "must be a mapping or null", source=source)
    nets_raw = outputs.get("gpuNetworks") or {}
    if not isinstance(nets_raw, Mapping) or not all(isinstance(v, list) for v in nets_raw.values()):
        raise InputError(f"{stack}.gpuNetworks", "must map pool names to lists of GKE network names", source=source)
    uri = outputs.get("checkpointUri")
    return ClusterStack(
        stack=stack, cloud=cloud, region=_get(outputs, "region", stack, source),
        cluster_name=_get(outputs, "clusterName", stack, source), pools=tuple(pools),
        kubeconfig=outputs.get("kubeconfig"), checkpoint_uri=uri if isinstance(uri, str) and uri else None,
        filesystem=fs, service_account=service_account, local_queues=local_queues,
        gpu_networks={str(k): tuple(str(n) for n in v) for k, v in nets_raw.items()},
        federation=_federation(outputs.get("federation"), stack, cloud, source))


def _dispatcher(value: Any, where: str, source: str) -> str:
    """The hub's ``dispatcher`` output: one of Kueue's MultiKueue dispatcher names the hub stack configures
    (``placement.model.kueue.DISPATCHERS``); absent (an older hub stack) is Kueue's default, AllAtOnce. Anything else
    (a list, a number, a name the hub never exports) is refused naming the output, never guessed."""
    if value is None:
        return "AllAtOnce"
    if not isinstance(value, str) or value not in ko.DISPATCHERS:
        raise InputError(where, f"must be one of {', '.join(ko.DISPATCHERS)} (gpufleet:hub.dispatcher), got "
                         f"{shown(value)}; re-export the hub's outputs with `pulumi stack output --json "
                         "--show-secrets`", source=source)
    return value


def parse_hub(stack: str, outputs: Mapping[str, Any], source: str) -> HubStack:
    """The hub stack's outputs (``infra.k8s.hub.build_hub``)."""
    workers = _get(outputs, "workers", stack, source, dict)
    for k, v in workers.items():  # worker key -> its clusterName: both strings, else the output is named
        if not isinstance(k, str) or not isinstance(v, str) or not v:
            raise InputError(f"{stack}.workers.{shown(k)[1:-1] if isinstance(k, str) else k}",
                             f"must be the worker's clusterName (a string), got {shown(v)}", source=source)
    kueue = _get(outputs, "kueue", stack, source, dict)
    return HubStack(stack=stack, workers={str(k): str(v) for k, v in workers.items()},
                    dispatcher=_dispatcher(outputs.get("dispatcher"), f"{stack}.dispatcher", source),
                    local_queues=_queues(kueue.get("localQueues"), f"{stack}.kueue.localQueues", source),
                    kubeconfig=outputs.get("kubeconfig"))


def parse_stacks(doc: Any, source: str) -> Stacks:
    """A mapping of stack name -> that stack's outputs; one stack's bare outputs are accepted too."""
    if isinstance(doc, Mapping) and ("clusterName" in doc or doc.get("role") == "hub"):
        stem = os.path.basename(source).split(".")[0] or "stack"
        doc = {stem: doc}
    if not isinstance(doc, Mapping) or not doc:
        raise InputError("--stacks", "must map stack names to `pulumi stack output --json --show-secrets` "
                         "documents (see docs/kueue-hub.md#placement-submit)", source=source)
    clusters, hubs = [], []
    for name, outputs in doc.items():
        if not isinstance(outputs, Mapping):
            raise InputError(str(name), "must be a stack's outputs (a mapping)", source=source)
        if outputs.get("role") == "hub":
            hubs.append(parse_hub(str(name), outputs, source))
        else:
            clusters.append(parse_cluster(str(name), outputs, source))
    return Stacks(clusters=tuple(clusters), hubs=tuple(hubs))


def parse_fleet(doc: Any, source: str) -> tuple[ClusterStack, ...]:
    """The dispatcher's fleet file: worker key (the MultiKueueCluster name) -> that worker's stack outputs,
    without ``kubeconfig``. Keys must be DNS labels; a hub entry is refused."""
    if not isinstance(doc, Mapping) or not doc:
        raise InputError("fleet", "must be a JSON object mapping each worker key to its stack outputs "
                         "(ConfigMap gpufleet-fleet, key fleet.json; see docs/kueue-hub.md#placement-dispatch)",
                         source=source)
    workers = []
    for key, outputs in doc.items():
        if not isinstance(key, str) or not ko.DNS_LABEL.fullmatch(key):
            raise InputError(str(key), "is not a worker key (a DNS label: the MultiKueueCluster name)", source=source)
        if not isinstance(outputs, Mapping):
            raise InputError(key, "must be the worker stack's outputs (a mapping)", source=source)
        if outputs.get("role") == "hub":
            raise InputError(key, "is a hub stack; the fleet file lists worker stacks only", source=source)
        workers.append(parse_cluster(key, outputs, source))
    return tuple(workers)
