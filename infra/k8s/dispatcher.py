"""The ``placement dispatch`` Deployment on a MultiKueue hub whose dispatcher is External.

Kueue leaves the choice of worker to a controller when ``multiKueue.dispatcherName`` is not one of its
own (``placement.model.kueue.DISPATCHERS["External"]``): that controller writes
``.status.nominatedClusterNames`` on the hub Workloads. The hub stack runs it as Deployment
``gpufleet-dispatch`` in ``kueue-system`` (two replicas, one leading through a Lease), with:

* ServiceAccount ``gpufleet-dispatch`` and the least RBAC it needs on the hub (:func:`hub_cluster_rules`,
  :func:`hub_namespace_rules`), verb for verb what the controller calls: list and watch Workloads,
  ClusterQueues, AdmissionChecks, MultiKueue objects and the jobs that own Workloads, patch
  ``workloads/status``, create and list Events; in ``kueue-system`` get each worker's two kubeconfig
  Secrets by name, and get/update the Lease by name (create cannot be limited by name);
* ConfigMap ``gpufleet-fleet`` (key ``fleet.json``, mounted read-only at ``/etc/gpufleet``): every
  worker's stack outputs without secrets (:func:`fleet_entry`), the document ``placement submit --stacks``
  reads;
* ClusterIP Service ``gpufleet-dispatch-metrics`` on port 9090 (``/metrics``; ``/healthz`` backs the probes).

Per worker, :class:`infra.k8s.hub.MultiKueueWorker` adds a read-only identity on the worker
(:func:`worker_reader_rules`) and its token kubeconfig on the hub, Secret ``gpufleet-dispatch-<key>``.

The renderers here are pure (plain dicts in Kubernetes' own field names); :class:`Dispatcher` turns them
into resources on the hub's (default) Kubernetes provider.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from pulumi import Input, Output, ResourceOptions

from infra.config.dispatch import DispatchConfig
from placement.model.kueue import API_GROUP, DISPATCH_NAME, KUEUE_NAMESPACE
from placement.model.kueue import dispatch_secret_name as kubeconfig_secret_name

NAME = DISPATCH_NAME
NAMESPACE = KUEUE_NAMESPACE
CONTAINER = "dispatch"
LEASE = NAME
FLEET_CONFIGMAP = "gpufleet-fleet"
FLEET_KEY = "fleet.json"
FLEET_DIR = "/etc/gpufleet"
METRICS_PORT = 9090
METRICS_PORT_NAME = "metrics"
METRICS_SERVICE = "gpufleet-dispatch-metrics"
HEALTH_PATH = "/healthz"
WORKER_READER_ROLE = "gpufleet-dispatch-reader"
WORKER_TOKEN_SECRET = f"{NAME}-token"
KUBECONFIG_KEY = "kubeconfig"
LABELS = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/component": "dispatcher",
          "app.kubernetes.io/managed-by": "gpufleet"}
SELECTOR = {"app.kubernetes.io/name": NAME}

# Worker stack outputs the fleet file carries (never ``kubeconfig``); ``gpuNetworks`` only when exported.
FLEET_OUTPUTS = ("cloud", "region", "clusterName", "nodePools", "kueue", "checkpointUri", "checkpointFilesystem",
                 "trainingServiceAccount")
OPTIONAL_FLEET_OUTPUTS = ("gpuNetworks", "federation")

# The controller's caches are list + watch (placement.fleet.kube.Informer): it never gets one object of these.
_LIST_WATCH = ["list", "watch"]


def container_args(cfg: DispatchConfig) -> list[str]:
    """``placement dispatch`` arguments: in-cluster, leader election on Lease ``gpufleet-dispatch`` in
    kueue-system, the mounted fleet file, metrics on 9090, the configured deadline (seconds) and price
    of waiting (USD per GPU-hour), and ``--live`` when ``hub.dispatch.live`` asks for live prices."""
    args = ["dispatch", "--in-cluster", "--namespace", NAMESPACE, "--lease", LEASE,
            "--fleet", f"{FLEET_DIR}/{FLEET_KEY}", "--metrics-port", str(METRICS_PORT),
            "--admission-deadline-seconds", str(cfg.admission_deadline_seconds),
            "--wait-usd-per-gpu-hour", str(float(cfg.wait_usd_per_gpu_hour))]
    return [*args, "--live"] if cfg.live else args


def service_account_metadata(cfg: DispatchConfig) -> dict[str, Any]:
    """ServiceAccount ``gpufleet-dispatch``'s metadata: with ``hub.dispatch.serviceAccountAnnotations`` (the
    cloud identity ``--live`` reads prices with: ``eks.amazonaws.com/role-arn``,
    ``iam.gke.io/gcp-service-account``)."""
    meta = _meta(NAME, NAMESPACE)
    if cfg.service_account_annotations:
        meta["annotations"] = dict(cfg.service_account_annotations)
    return meta


def _rule(group: str, resources: Sequence[str], verbs: Sequence[str],
          names: Sequence[str] = ()) -> dict[str, Any]:
    rule: dict[str, Any] = {"apiGroups": [group], "resources": list(resources), "verbs": list(verbs)}
    if names:
        rule["resourceNames"] = list(names)
    return rule


def hub_cluster_rules() -> list[dict[str, Any]]:
    """ClusterRole ``gpufleet-dispatch`` on the hub: exactly the calls ``placement dispatch`` makes.

    Its caches list and watch (all namespaces) the Workloads, ClusterQueues, AdmissionChecks,
    MultiKueueClusters and MultiKueueConfigs, and the Jobs/JobSets that own Workloads (for the annotations
    ``placement submit`` writes). Nominating is a server-side apply of ``workloads/status`` (field manager
    ``kueue-admission``): ``patch`` there is its only write to a Kueue object. Events (core/v1) are created
    on the Workloads they explain and listed (field selectors ``source``, ``involvedObject.uid``) to recall
    the memory they carry.
    """
    return [
        _rule(API_GROUP, ["workloads", "clusterqueues", "admissionchecks", "multikueueclusters",
                          "multikueueconfigs"], _LIST_WATCH),
        _rule(API_GROUP, ["workloads/status"], ["patch"]),
        _rule("batch", ["jobs"], _LIST_WATCH),
        _rule("jobset.x-k8s.io", ["jobsets"], _LIST_WATCH),
        _rule("", ["events"], ["create", "list"]),
    ]


def secret_names(worker_keys: Sequence[str]) -> list[str]:
    """The hub Secrets the dispatcher may read: per worker its own read-only kubeconfig
    (``gpufleet-dispatch-<key>``), which this stack always creates before the Deployment.

    MultiKueue's ``multikueue-<key>`` (the dispatcher's fallback on hubs built otherwise) holds a token that
    can create and delete on the worker; granting it would make the dispatcher a writer on every worker."""
    return [kubeconfig_secret_name(key) for key in sorted(worker_keys)]


def hub_namespace_rules(worker_keys: Sequence[str]) -> list[dict[str, Any]]:
    """Role ``gpufleet-dispatch`` in kueue-system: get the kubeconfig Secrets of ``worker_keys`` by name, and
    the Lease through which one replica leads, as the ``kubernetes`` client's ``LeaseLock`` uses it
    (``read_namespaced_lease``, ``replace_namespaced_lease`` on the Lease by name; ``create_namespaced_lease``,
    which RBAC cannot limit to a name). The fleet file is read from its mount, never through the API."""
    # No worker, no Secret rule: a rule without resourceNames would grant every Secret of the namespace.
    secrets = [_rule("", ["secrets"], ["get"], secret_names(worker_keys))] if worker_keys else []
    return [
        *secrets,
        _rule("coordination.k8s.io", ["leases"], ["get", "update"], [LEASE]),
        _rule("coordination.k8s.io", ["leases"], ["create"]),
    ]


def worker_reader_rules() -> list[dict[str, Any]]:
    """ClusterRole ``gpufleet-dispatch-reader`` on each worker: list and watch its queues, Workloads and
    ResourceFlavors (their status comes with them), and its Nodes (read only: the spot node-hours and reclaims
    the dispatcher observes, placement/dispatch/observe.py), nothing else."""
    return [_rule(API_GROUP, ["clusterqueues", "localqueues", "workloads", "resourceflavors"], _LIST_WATCH),
            _rule("", ["nodes"], _LIST_WATCH)]


def fleet_entry(outputs: Mapping[str, Any]) -> dict[str, Any]:
    """One worker's entry of the fleet file: its stack outputs named in :data:`FLEET_OUTPUTS` (as exported,
    None when absent) plus ``gpuNetworks`` when it exports one. Nothing else, so never a kubeconfig."""
    entry = {k: outputs.get(k) for k in FLEET_OUTPUTS}
    entry.update({k: outputs[k] for k in OPTIONAL_FLEET_OUTPUTS if outputs.get(k) is not None})
    return entry


def fleet_document(entries: Mapping[str, Mapping[str, Any]]) -> str:
    """``fleet.json``: worker key (the MultiKueueCluster name) -> :func:`fleet_entry`, as JSON."""
    return json.dumps({key: fleet_entry(outputs) for key, outputs in sorted(entries.items())}, indent=2,
                      sort_keys=True)


def _field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def pod_template(cfg: DispatchConfig, image: str | None = None) -> dict[str, Any]:
    """The Deployment's pod template: container ``dispatch`` running ``image`` (default ``cfg.image``) with the
    contract's args, the downward-API identity (``POD_NAME`` is the Lease holder), probes on ``/healthz`` and
    the fleet file mounted read-only."""
    probe = {"httpGet": {"path": HEALTH_PATH, "port": METRICS_PORT}, "periodSeconds": 10, "failureThreshold": 3}
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": image or cfg.image,
        "args": container_args(cfg),
        "env": [_field_env("POD_NAME", "metadata.name"), _field_env("POD_NAMESPACE", "metadata.namespace")],
        "ports": [{"name": METRICS_PORT_NAME, "containerPort": METRICS_PORT, "protocol": "TCP"}],
        "livenessProbe": {**probe, "initialDelaySeconds": 10},
        "readinessProbe": {**probe, "initialDelaySeconds": 2},
        "volumeMounts": [{"name": "fleet", "mountPath": FLEET_DIR, "readOnly": True}],
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    if cfg.resources:
        container["resources"] = {part: dict(amounts) for part, amounts in cfg.resources.items()}
    return {
        "metadata": {
            "labels": dict(LABELS),
            "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": str(METRICS_PORT)},
        },
        "spec": {
            "serviceAccountName": NAME,
            # A hub that is neither EKS nor GKE pulls the image with a registry credential Secret
            # (gpufleet:hub.dispatch.imagePullSecret); EKS and GKE nodes pull with their own identity.
            **({"imagePullSecrets": [{"name": cfg.image_pull_secret}]} if cfg.image_pull_secret else {}),
            "containers": [container],
            "volumes": [{"name": "fleet", "configMap": {"name": FLEET_CONFIGMAP,
                                                        "items": [{"key": FLEET_KEY, "path": FLEET_KEY}]}}],
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            # The standby replica only helps if a node loss does not take both.
            "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                "weight": 100,
                "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                    "labelSelector": {"matchLabels": dict(SELECTOR)}}}]}},
        },
    }


def deployment_spec(cfg: DispatchConfig, image: str | None = None) -> dict[str, Any]:
    """``spec`` of Deployment ``gpufleet-dispatch``: ``cfg.replicas`` pods (one leads, the others wait) of
    ``image`` (default ``cfg.image``)."""
    return {
        "replicas": cfg.replicas,
        "selector": {"matchLabels": dict(SELECTOR)},
        # Replace one pod at a time, so a replica keeps holding (or stands by to take) the Lease during a rollout.
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 1}},
        "template": pod_template(cfg, image),
    }


def metrics_service_spec() -> dict[str, Any]:
    """``spec`` of the ClusterIP Service ``gpufleet-dispatch-metrics`` (port 9090 named ``metrics``)."""
    return {"type": "ClusterIP", "selector": dict(SELECTOR),
            "ports": [{"name": METRICS_PORT_NAME, "port": METRICS_PORT, "targetPort": METRICS_PORT_NAME,
                       "protocol": "TCP"}]}


def manifest(value: Any) -> Any:
    """A rendered dict handed to a typed ``pulumi_kubernetes`` input. Its keys are Kubernetes' own field names:
    the SDK maps the snake_case names it knows to those and passes every other key unchanged, so the
    provider receives the manifest as written (the mocks record the same serialisation)."""
    return value


def _meta(name: str, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": dict(LABELS)}
    if namespace:
        meta["namespace"] = namespace
    return meta


@dataclass(frozen=True)
class DispatcherArgs:
    """``cfg`` the hub's ``hub.dispatch`` config; ``fleet`` the ``fleet.json`` text (:func:`fleet_document` of
    the workers' outputs); ``worker_keys`` the MultiKueueCluster names (whose kubeconfig Secrets it may read);
    ``image`` the image the stack built (``repository@sha256:...``), else ``cfg.image``; ``depends_on`` the
    hub's Kueue release and workers."""

    cfg: DispatchConfig
    fleet: Input[str]
    worker_keys: Sequence[str]
    image: Input[str] | None = None
    depends_on: Sequence[pulumi.Resource] = field(default_factory=tuple)


class Dispatcher(pulumi.ComponentResource):
    """``placement dispatch`` on the hub: ServiceAccount, RBAC (with the Lease), fleet ConfigMap,
    Deployment and metrics Service, all in ``kueue-system`` on the provider from ``opts``."""

    def __init__(self, name: str, args: DispatcherArgs, opts: ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:k8s:Dispatcher", name, None, opts)
        if args.image is None and not args.cfg.image:
            raise ValueError("Dispatcher needs an image: hub.dispatch.image or the one the hub stack builds")
        image: Output[str] = Output.from_input(args.image if args.image is not None else str(args.cfg.image))
        provider = opts.provider if opts else None

        def child(*deps: pulumi.Resource) -> ResourceOptions:
            return ResourceOptions(parent=self, provider=provider, depends_on=[*args.depends_on, *deps])

        meta = {n: manifest(_meta(n, NAMESPACE)) for n in (NAME, FLEET_CONFIGMAP, METRICS_SERVICE)}
        account = k8s.core.v1.ServiceAccount(f"{name}-sa", metadata=manifest(service_account_metadata(args.cfg)),
                                             opts=child())
        subject = manifest([{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}])
        cluster_role = k8s.rbac.v1.ClusterRole(f"{name}-clusterrole", metadata=manifest(_meta(NAME)),
                                               rules=manifest(hub_cluster_rules()), opts=child())
        cluster_binding = k8s.rbac.v1.ClusterRoleBinding(
            f"{name}-clusterrolebinding", metadata=manifest(_meta(NAME)),
            role_ref=manifest({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME}),
            subjects=subject, opts=child(account, cluster_role))
        role = k8s.rbac.v1.Role(f"{name}-role", metadata=meta[NAME],
                                rules=manifest(hub_namespace_rules(args.worker_keys)), opts=child())
        binding = k8s.rbac.v1.RoleBinding(
            f"{name}-rolebinding", metadata=meta[NAME],
            role_ref=manifest({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME}),
            subjects=subject, opts=child(account, role))
        self.fleet = k8s.core.v1.ConfigMap(f"{name}-fleet", metadata=meta[FLEET_CONFIGMAP],
                                           data=Output.from_input(args.fleet).apply(lambda t: {FLEET_KEY: t}),
                                           opts=child())
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment", metadata=meta[NAME],
            spec=image.apply(lambda ref: manifest(deployment_spec(args.cfg, ref))),
            opts=child(cluster_binding, binding, self.fleet))
        self.service = k8s.core.v1.Service(f"{name}-metrics", metadata=meta[METRICS_SERVICE],
                                           spec=manifest(metrics_service_spec()), opts=child())
        self.register_outputs({"deployment": NAME, "namespace": NAMESPACE, "metricsService": METRICS_SERVICE,
                               "replicas": args.cfg.replicas})
