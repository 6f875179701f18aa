"""The MultiKueue hub stack: one Kueue manager that dispatches jobs to the worker clusters.

The hub cluster is any small Kubernetes cluster (no GPUs) that the default Kubernetes provider
reaches: set ``kubernetes:kubeconfig`` in ``stacks/Pulumi.hub.yaml`` (or leave it unset to use
``$KUBECONFIG`` / ``~/.kube/config``). The workers are read through ``pulumi.StackReference`` from
their stack outputs (``clusterName``, ``cloud``, ``kubeconfig``, ``nodePools``), so every worker stack
(with its :class:`~infra.k8s.addons.ClusterAddons`) must be up before the hub.

Per worker the hub creates, on the worker (through a provider built from its kubeconfig output), a
``multikueue-hub`` ServiceAccount with the RBAC MultiKueue needs and a long-lived token Secret; and on
the hub a kubeconfig Secret holding that token, a MultiKueueCluster, a MultiKueueConfig, a MultiKueue
AdmissionCheck, a ClusterQueue whose quota mirrors the worker's pools, and a LocalQueue per team.
The ``all-workers`` MultiKueueConfig / AdmissionCheck / ClusterQueue / LocalQueues span every worker.
See the README.md (Kueue on every cluster, the MultiKueue hub) for the path a job takes.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from pulumi import Output, ResourceOptions

from infra.config import ConfigError, StackConfig
from infra.k8s import kueue_objects as ko
from infra.k8s.addons import KueueInstall, KueueInstallArgs, KueueObject

HUB_SERVICE_ACCOUNT = "multikueue-hub"

# What the hub's Kueue does on a worker (Kueue's create-multikueue-kubeconfig.sh, widened to the job
# kinds our Kueue config integrates).
_JOB_KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("batch", ("jobs",)),
    ("jobset.x-k8s.io", ("jobsets",)),
    ("kubeflow.org", ("pytorchjobs", "mpijobs")),
    ("trainer.kubeflow.org", ("trainjobs",)),
    ("ray.io", ("rayjobs", "rayclusters")),
    ("kueue.x-k8s.io", ("workloads",)),
)


def multikueue_rbac_rules() -> list[k8s.rbac.v1.PolicyRuleArgs]:
    """ClusterRole rules for the hub's service account on a worker."""
    rules = []
    for group, resources in _JOB_KINDS:
        rules.append(k8s.rbac.v1.PolicyRuleArgs(api_groups=[group], resources=list(resources),
                                                verbs=["create", "delete", "get", "list", "watch"]))
        status_verbs = ["get", "patch", "update"] if group == "kueue.x-k8s.io" else ["get"]
        rules.append(k8s.rbac.v1.PolicyRuleArgs(api_groups=[group], resources=[f"{r}/status" for r in resources],
                                                verbs=status_verbs))
    rules.append(k8s.rbac.v1.PolicyRuleArgs(api_groups=[""], resources=["pods"], verbs=["get", "list", "watch"]))
    return rules


def _meta(name: str, namespace: str | None = None,
          annotations: dict[str, str] | None = None) -> k8s.meta.v1.ObjectMetaArgs:
    return k8s.meta.v1.ObjectMetaArgs(name=name, namespace=namespace, annotations=annotations,
                                      labels={"app.kubernetes.io/managed-by": "gpufleet"})


def _pick(rendered: Output[dict[str, dict[str, Any]]], key: str) -> Output[dict[str, Any]]:
    return rendered.apply(lambda r: r[key])


def _kubeconfig_text(value: Any) -> str:
    """Stack outputs may hold a kubeconfig as YAML/JSON text or as a mapping."""
    return value if isinstance(value, str) else json.dumps(value)


@dataclass(frozen=True)
class MultiKueueWorkerArgs:
    """``stack``: the worker's fully qualified stack (``org/project/stack``); ``hub_cfg`` the hub config;
    ``depends_on`` the hub's Kueue release and team namespaces."""

    stack: str
    hub_cfg: StackConfig
    depends_on: Sequence[pulumi.Resource] = field(default_factory=tuple)


class MultiKueueWorker(pulumi.ComponentResource):
    """One worker cluster joined to the hub. ``worker`` is an ``Output[Worker]`` read from its outputs."""

    def __init__(self, name: str, args: MultiKueueWorkerArgs, opts: ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:k8s:MultiKueueWorker", name, None, opts)
        cfg = args.hub_cfg
        self.key = ko.worker_key(args.stack)
        ref = pulumi.StackReference(f"{name}-ref", stack_name=args.stack, opts=ResourceOptions(parent=self))
        self.worker: Output[ko.Worker] = Output.all(
            clusterName=ref.require_output("clusterName"),
            cloud=ref.require_output("cloud"),
            nodePools=ref.require_output("nodePools"),
        ).apply(lambda o: ko.worker_from_outputs(args.stack, o))
        worker_kubeconfig = Output.secret(ref.require_output("kubeconfig")).apply(_kubeconfig_text)

        # --- on the worker: an identity for the hub's Kueue controller
        worker_provider = k8s.Provider(f"{name}-provider", kubeconfig=worker_kubeconfig,
                                       opts=ResourceOptions(parent=self))
        on_worker = ResourceOptions(parent=self, provider=worker_provider)
        sa = k8s.core.v1.ServiceAccount(f"{name}-sa", metadata=_meta(HUB_SERVICE_ACCOUNT, ko.KUEUE_NAMESPACE),
                                        opts=on_worker)
        role = k8s.rbac.v1.ClusterRole(
            f"{name}-role", metadata=_meta(f"gpufleet-{HUB_SERVICE_ACCOUNT}"),
            rules=multikueue_rbac_rules(), opts=on_worker)
        binding = k8s.rbac.v1.ClusterRoleBinding(
            f"{name}-binding",
            metadata=_meta(f"gpufleet-{HUB_SERVICE_ACCOUNT}"),
            role_ref=k8s.rbac.v1.RoleRefArgs(api_group="rbac.authorization.k8s.io", kind="ClusterRole",
                                             name=role.metadata.name),
            subjects=[k8s.rbac.v1.SubjectArgs(kind="ServiceAccount", name=sa.metadata.name,
                                              namespace=ko.KUEUE_NAMESPACE)],
            opts=on_worker,
        )
        # A token Secret the control plane fills in; it lives as long as the Secret (no expiry to renew).
        token_secret = k8s.core.v1.Secret(
            f"{name}-token",
            metadata=_meta(f"{HUB_SERVICE_ACCOUNT}-token", ko.KUEUE_NAMESPACE,
                           annotations={"kubernetes.io/service-account.name": HUB_SERVICE_ACCOUNT}),
            type="kubernetes.io/service-account-token",
            opts=ResourceOptions(parent=self, provider=worker_provider, depends_on=[sa, binding]),
        )
        token: Output[str] = token_secret.data.apply(lambda d: base64.b64decode((d or {})["token"]).decode())

        # --- on the hub: the kubeconfig Secret and the Kueue objects
        user = f"{self.key}-{HUB_SERVICE_ACCOUNT}"
        kubeconfig: Output[str] = Output.all(worker_kubeconfig, token).apply(
            lambda kt: ko.multikueue_kubeconfig(kt[0], kt[1], user=user))
        self.secret = k8s.core.v1.Secret(
            f"{name}-kubeconfig",
            metadata=_meta(ko.kubeconfig_secret_name(self.key), ko.KUEUE_NAMESPACE),
            string_data={ko.MULTIKUEUE_KUBECONFIG_KEY: kubeconfig},
            opts=ResourceOptions(parent=self, depends_on=list(args.depends_on)),
        )

        rendered = self.worker.apply(lambda w: ko.hub_worker_objects(w, cfg))
        previous: list[pulumi.Resource] = [self.secret, *args.depends_on]
        self.objects: dict[str, KueueObject] = {}
        for key, kind in ko.hub_worker_layout(cfg):
            res = KueueObject(f"{name}-{key}", ko.API_VERSION, kind, _pick(rendered, key),
                              opts=ResourceOptions(parent=self, depends_on=list(previous)))
            self.objects[key] = res
            previous.append(res)

        self.cluster_queue = self.worker.apply(lambda w: ko.cluster_queue_name(w.cluster_name))
        self.register_outputs({"worker": self.key, "clusterQueue": self.cluster_queue,
                               "kubeconfigSecret": self.secret.metadata.name})


@dataclass(frozen=True)
class MultiKueueHubArgs:
    """The hub stack config (``role: hub``; ``hub.workers``, ``hub.dispatcher``, ``kueue.*``)."""

    cfg: StackConfig


class MultiKueueHub(pulumi.ComponentResource):
    """Kueue in manager mode plus one :class:`MultiKueueWorker` per worker and the all-workers queue."""

    def __init__(self, name: str, args: MultiKueueHubArgs, opts: ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:k8s:MultiKueueHub", name, None, opts)
        cfg = args.cfg
        kueue = KueueInstall(f"{name}-kueue",
                             KueueInstallArgs(version=cfg.kueue.version, dispatcher=cfg.hub.dispatcher,
                                              wait_for_pods_ready=False),
                             opts=ResourceOptions(parent=self))
        namespaces = [
            k8s.core.v1.Namespace(f"{name}-ns-{team}",
                                  metadata={"name": team, "labels": {"app.kubernetes.io/managed-by": "gpufleet",
                                                                     "gpufleet.io/team": team}},
                                  opts=ResourceOptions(parent=self))
            for team in cfg.kueue.teams
        ]
        base: list[pulumi.Resource] = [kueue.release, *namespaces]
        # Workloads keep their priority class name when copied, so the hub and every worker define them.
        priorities = [KueueObject.of(f"{name}-wpc-{o['metadata']['name']}", o,
                                     opts=ResourceOptions(parent=self, depends_on=base))
                      for o in ko.priority_classes()]

        self.workers: list[MultiKueueWorker] = []
        for stack in cfg.hub.workers:
            key = ko.worker_key(stack)
            self.workers.append(MultiKueueWorker(
                f"{name}-{key}", MultiKueueWorkerArgs(stack=stack, hub_cfg=cfg, depends_on=[*base, *priorities]),
                opts=ResourceOptions(parent=self)))

        rendered = Output.all(*[w.worker for w in self.workers]).apply(
            lambda ws: ko.hub_all_workers_objects(list(ws), cfg))
        previous: list[pulumi.Resource] = [*base, *priorities, *self.workers]
        self.all_workers: dict[str, KueueObject] = {}
        for key, kind in ko.hub_all_workers_layout(cfg):
            res = KueueObject(f"{name}-{ko.ALL_WORKERS}-{key}", ko.API_VERSION, kind,
                              _pick(rendered, key),
                              opts=ResourceOptions(parent=self, depends_on=list(previous)))
            self.all_workers[key] = res
            previous.append(res)

        self.cluster_queues = Output.all(*[w.cluster_queue for w in self.workers]).apply(
            lambda names: [*names, ko.ALL_WORKERS])
        self.local_queues = Output.all(*[w.worker for w in self.workers]).apply(
            lambda ws: [{"namespace": team, "name": ko.local_queue_name(w.cluster_name, team)}
                        for w in ws for team in cfg.kueue.teams]
            + [{"namespace": team, "name": ko.ALL_WORKERS} for team in cfg.kueue.teams])
        self.register_outputs({"clusterQueues": self.cluster_queues, "localQueues": self.local_queues})


def _check_workers(cfg: StackConfig) -> None:
    keys: list[str] = []
    for i, stack in enumerate(cfg.hub.workers):
        if stack.count("/") != 2:
            raise ConfigError(f"gpufleet:hub.workers[{i}]", f"{stack!r} must be a fully qualified org/project/stack")
        try:
            key = ko.worker_key(stack)
        except ValueError as exc:
            raise ConfigError(f"gpufleet:hub.workers[{i}]", str(exc)) from None
        if key in keys:
            raise ConfigError(f"gpufleet:hub.workers[{i}]", f"two workers share the stack name {key!r}")
        keys.append(key)
    if len(keys) > 20:
        raise ConfigError("gpufleet:hub.workers", "MultiKueueConfig takes at most 20 clusters")


def build_hub(cfg: StackConfig) -> None:
    """Build the hub stack and export its queues."""
    _check_workers(cfg)
    hub = MultiKueueHub(cfg.cluster_name, MultiKueueHubArgs(cfg=cfg))
    pulumi.export("role", "hub")
    pulumi.export("cloud", cfg.cloud)
    pulumi.export("region", cfg.region)
    pulumi.export("dispatcher", cfg.hub.dispatcher)
    pulumi.export("workers", {w.key: w.worker.apply(lambda wk: wk.cluster_name) for w in hub.workers})
    pulumi.export("kueue", {"clusterQueues": hub.cluster_queues, "localQueues": hub.local_queues})

