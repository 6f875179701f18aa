"""Cluster add-ons every GPU worker cluster gets: JobSet, LeaderWorkerSet, Kueue, device plugins, NCCL installers,
queues.

Wiring (``infra/program.py``)::

    ClusterAddons(f"{cfg.cluster_name}-addons",
                  ClusterAddonsArgs(cfg=cfg, platform=cfg.cloud, depends_on=built.node_pools,
                                    training_identity=built.training_identity),
                  opts=ResourceOptions(provider=built.k8s_provider))

Every Kubernetes child uses the cluster's provider from ``opts.provider``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pulumi
import pulumi_kubernetes as k8s
from pulumi import Input, Output, ResourceOptions

from infra.config import StackConfig
from infra.k8s import kueue_objects as ko
from infra.k8s.storage import CheckpointVolumes, CheckpointVolumesArgs
from infra.outputs import training_service_account_output
from infra.protect import patch_force_transform, stateful

KUEUE_CHART = "oci://registry.k8s.io/kueue/charts/kueue"
# JobSet (CRD, controller and webhooks) from its official OCI chart. Pinned to v0.12.0 because Kueue v0.19.2
# is built against exactly that JobSet API (its go.mod requires sigs.k8s.io/jobset v0.12.0, and its e2e
# tests run registry.k8s.io/jobset/jobset:v0.12.0); move it together with gpufleet:kueue.version.
JOBSET_CHART = "oci://registry.k8s.io/jobset/charts/jobset"
JOBSET_VERSION = "0.12.0"
JOBSET_IMAGE = "registry.k8s.io/jobset/jobset"
JOBSET_NAMESPACE = "jobset-system"
# Helm installs a chart's crds/ once and never upgrades them, so the JobSet CRD is a Pulumi resource of its own,
# applied from the same release tag as the chart (charts/jobset/crds/ there): a version bump updates it in place.
JOBSET_CRD_URL = ("https://raw.githubusercontent.com/kubernetes-sigs/jobset/v{version}/charts/jobset/crds/"
                  "jobset.x-k8s.io_jobsets.yaml")
# LeaderWorkerSet (multi-host inference serving): Kueue's leaderworkerset integration admits LWS groups, but
# LWS objects need their own controller. Pinned to v0.9.0, the LWS API Kueue v0.19.2 is built against (its
# go.mod requires sigs.k8s.io/lws v0.9.0); the official OCI chart, image pinned as for JobSet.
LWS_CHART = "oci://registry.k8s.io/lws/charts/lws"
LWS_VERSION = "0.9.0"
LWS_IMAGE = "registry.k8s.io/lws/lws"
LWS_NAMESPACE = "lws-system"
NVIDIA_DEVICE_PLUGIN_REPO = "https://nvidia.github.io/k8s-device-plugin"
NVIDIA_DEVICE_PLUGIN_CHART = "nvidia-device-plugin"
NVIDIA_DEVICE_PLUGIN_VERSION = "0.18.2"
EKS_CHARTS_REPO = "https://aws.github.io/eks-charts"
EFA_DEVICE_PLUGIN_CHART = "aws-efa-k8s-device-plugin"
# eks-charts stable/aws-efa-k8s-device-plugin v0.5.30 (plugin image v0.5.20). Its default
# supportedInstanceLabels (the DaemonSet's node affinity) lists every EFA shape in placement/data/shapes.yaml,
# p6-b200 and g6e included, so no override: a new EFA shape needs a chart that lists it.
EFA_DEVICE_PLUGIN_VERSION = "v0.5.30"

# Google's published GPUDirect installers (the manifests GKE's documentation applies), each pinned to a commit
# in placement/data/gpudirect.yaml together with the RxDM sidecar `placement submit` pairs with it. Each
# DaemonSet selects nodes by cloud.google.com/gke-accelerator, so it is inert on other pools.


def gke_fabric_installers(fabric_kinds: Sequence[str]) -> list[tuple[str, str]]:
    """``(name, pinned URL)`` of every installer the fabric kinds need, each once, in first-use order."""
    from placement.model.gpudirect import gpudirect_book

    out: dict[str, str] = {}
    for kind in fabric_kinds:
        row = gpudirect_book().get(kind)
        for inst in row.installers if row else ():
            out.setdefault(inst.name, inst.url)
    return list(out.items())


_GPU_TOLERATION_ANY_VALUE = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


class KueueObject(k8s.apiextensions.CustomResource):
    """A Kueue custom object from a rendered dict (or an ``Output`` of one).

    Unlike ``CustomResource(spec=...)`` this also carries top-level fields other than ``spec``
    (WorkloadPriorityClass has ``value`` and ``description``); the provider sends the props as the object.
    """

    def __init__(self, resource_name: str, api_version: str, kind: str, body: Input[Mapping[str, Any]],
                 opts: ResourceOptions | None = None) -> None:
        from pulumi_kubernetes import _utilities

        fields = ("metadata", "value", "description") if kind == "WorkloadPriorityClass" else ("metadata", "spec")
        out = Output.from_input(body)
        props: dict[str, Any] = {"apiVersion": api_version, "kind": kind}
        for name in fields:
            props[name] = _field(out, name)
        opts = ResourceOptions.merge(opts, ResourceOptions(version=_utilities.get_version()))
        pulumi.CustomResource.__init__(self, f"kubernetes:{api_version}:{kind}", resource_name, props, opts)

    @staticmethod
    def of(resource_name: str, obj: Mapping[str, Any], opts: ResourceOptions | None = None) -> KueueObject:
        """From a fully known rendered object."""
        return KueueObject(resource_name, obj["apiVersion"], obj["kind"], obj, opts)


def _field(body: Output[Mapping[str, Any]], name: str) -> Output[Any]:
    return body.apply(lambda b: b.get(name))


def resource_suffix(obj: Mapping[str, Any]) -> str:
    """A Pulumi name part unique per object: kind plus namespace/name."""
    meta = obj["metadata"]
    where = f"{meta['namespace']}-{meta['name']}" if meta.get("namespace") else meta["name"]
    return f"{obj['kind'].lower()}-{where}"


def jobset_values() -> dict[str, Any]:
    """Chart values of the JobSet release.

    The chart in the repository defaults to a staging image tagged ``main``; the published chart is
    re-stamped with the release image at packaging time. Pinning the image here keeps the controller at
    the chart's release even if that packaging step changes. The controller runs on system nodes (GPU
    nodes carry the ``nvidia.com/gpu`` taint it does not tolerate); it tolerates ``CriticalAddonsOnly``,
    the taint many clusters (the hub is any cluster) put on their system nodes.
    """
    return {
        "image": {"repository": JOBSET_IMAGE, "tag": f"v{JOBSET_VERSION}", "pullPolicy": "IfNotPresent"},
        "controller": {"tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}]},
    }


@dataclass(frozen=True)
class JobSetInstallArgs:
    """JobSet's CRD and Helm release at ``version``; ``depends_on`` what must exist first (a worker's node
    pools)."""

    version: str = JOBSET_VERSION
    depends_on: Sequence[pulumi.Resource] = ()


class JobSetInstall(pulumi.ComponentResource):
    """JobSet from its OCI Helm chart into ``jobset-system``, its CRD (``crd``) applied from the same release
    tag so that a version bump upgrades it; ``release`` is what its users wait for.

    Kueue (whose manager config integrates ``jobset.x-k8s.io/jobset``) and everything that creates a
    JobSet depend on it: Kueue v0.19.2 does start without the JobSet CRD, but then defers its JobSet
    controller and polls for the CRD with a backoff of up to 2 minutes, and a JobSet created before
    JobSet's webhook serves is rejected.
    """

    def __init__(self, name: str, args: JobSetInstallArgs, opts: ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:k8s:JobSetInstall", name, None, opts)
        provider = opts.provider if opts else None
        # Server-side apply: on a cluster where an earlier Helm install created the CRD, this takes it over, and
        # patchForce (put on the CRD the ConfigFile registers, by a transform) wins over Helm's field manager.
        self.crd = k8s.yaml.v2.ConfigFile(
            f"{name}-jobset-crd", file=JOBSET_CRD_URL.format(version=args.version),
            opts=ResourceOptions(parent=self, provider=provider, depends_on=list(args.depends_on),
                                 transforms=[patch_force_transform(("CustomResourceDefinition",))]))
        self.release = k8s.helm.v3.Release(
            f"{name}-jobset",
            name="jobset",
            chart=JOBSET_CHART,
            version=args.version,
            namespace=JOBSET_NAMESPACE,
            create_namespace=True,
            values=jobset_values(),
            # The CRD is self.crd, upgraded with the version; Helm would install its copy once and never again.
            skip_crds=True,
            # Wait for the controller and its webhook to be ready: JobSets are rejected until they serve.
            skip_await=False,
            timeout=600,
            opts=ResourceOptions(parent=self, provider=provider, depends_on=[*args.depends_on, self.crd]),
        )
        self.register_outputs({"release": self.release.name, "version": args.version,
                               "crd": JOBSET_CRD_URL.format(version=args.version)})


def lws_values() -> dict[str, Any]:
    """Chart values of the LeaderWorkerSet release: the chart's image tag defaults to ``main``, so pin the
    release image; the controller runs on system nodes (it does not tolerate the GPU taint)."""
    return {
        "image": {"manager": {"repository": LWS_IMAGE, "tag": f"v{LWS_VERSION}", "pullPolicy": "IfNotPresent"}},
        "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}],
    }


@dataclass(frozen=True)
class LeaderWorkerSetInstallArgs:
    """LeaderWorkerSet's Helm release; ``depends_on`` what must exist first (a worker's node pools)."""

    version: str = LWS_VERSION
    depends_on: Sequence[pulumi.Resource] = ()


class LeaderWorkerSetInstall(pulumi.ComponentResource):
    """LeaderWorkerSet from its OCI Helm chart into ``lws-system``, so serving LeaderWorkerSets run and Kueue's
    ``leaderworkerset.x-k8s.io/leaderworkerset`` integration has objects to admit."""

    def __init__(self, name: str, args: LeaderWorkerSetInstallArgs, opts: ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:k8s:LeaderWorkerSetInstall", name, None, opts)
        provider = opts.provider if opts else None
        self.release = k8s.helm.v3.Release(
            f"{name}-lws",
            name="lws",
            chart=LWS_CHART,
            version=args.version,
            namespace=LWS_NAMESPACE,
            create_namespace=True,
            values=lws_values(),
            skip_await=False,  # its webhook must serve before a LeaderWorkerSet is created
            timeout=600,
            opts=ResourceOptions(parent=self, provider=provider, depends_on=list(args.depends_on)),
        )
        self.register_outputs({"release": self.release.name, "version": args.version})


@dataclass(frozen=True)
class KueueInstallArgs:
    """Kueue's Helm release: ``version`` is the chart version (e.g. ``0.19.2``); ``dispatcher`` a key of
    :data:`infra.k8s.kueue_objects.DISPATCHERS` on a MultiKueue hub, None on workers; ``depends_on`` must
    include the JobSet release (:class:`JobSetInstall`), so Kueue starts with the JobSet API served;
    ``cloud`` (workers) sizes its pods-ready timeout (:func:`infra.k8s.kueue_objects.pods_ready_timeout_seconds`)."""

    version: str
    dispatcher: str | None = None
    wait_for_pods_ready: bool = True
    depends_on: Sequence[pulumi.Resource] = ()
    cloud: str | None = None  # a worker's cloud: sizes waitForPodsReady to its node boot path


class KueueInstall(pulumi.ComponentResource):
    """Kueue from its OCI Helm chart into ``kueue-system``; ``release`` is what Kueue objects wait for."""

    def __init__(self, name: str, args: KueueInstallArgs, opts: ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:k8s:KueueInstall", name, None, opts)
        provider = opts.provider if opts else None
        values = {"managerConfig": {"controllerManagerConfigYaml": ko.manager_config(
            args.dispatcher, wait_for_pods_ready=args.wait_for_pods_ready, cloud=args.cloud)}}
        self.release = k8s.helm.v3.Release(
            f"{name}-kueue",
            name="kueue",
            chart=KUEUE_CHART,
            version=args.version,
            namespace=ko.KUEUE_NAMESPACE,
            create_namespace=True,
            values=values,
            # Kueue's webhooks must be serving before any queue object is created.
            skip_await=False,
            timeout=600,
            opts=ResourceOptions(parent=self, provider=provider, depends_on=list(args.depends_on)),
        )
        self.register_outputs({"release": self.release.name, "version": args.version})


@dataclass(frozen=True)
class ClusterAddonsArgs:
    """``cfg`` the worker stack config; ``platform`` its cloud; ``depends_on`` the GPU node pools;
    ``training_identity`` the annotations binding the training ServiceAccount to the cloud's checkpoint
    identity (:attr:`infra.outputs.BuiltCluster.training_identity`)."""

    cfg: StackConfig
    platform: Literal["aws", "gcp"]
    depends_on: Sequence[pulumi.Resource] = field(default_factory=tuple)
    training_identity: Mapping[str, Input[str]] = field(default_factory=dict)
    # The stack's checkpointFilesystem output (None: no filesystem tier): mounted as a claim in each namespace.
    checkpoint_filesystem: Input[Mapping[str, Any]] | None = None


class ClusterAddons(pulumi.ComponentResource):
    """JobSet, Kueue, device plugins, the queues derived from the cluster's node pools, and the team namespaces
    with the training ServiceAccount in each.

    Attributes ``cluster_queue`` (name), ``local_queues`` (``[{namespace, name}]``) and
    ``training_service_account`` (``{name, namespaces}``) are plain values for stack outputs.
    """

    def __init__(self, name: str, args: ClusterAddonsArgs, opts: ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:k8s:ClusterAddons", name, None, opts)
        cfg = args.cfg
        provider = opts.provider if opts else None
        after_pools = list(args.depends_on)

        def child(*, depends_on: Sequence[pulumi.Resource] = ()) -> ResourceOptions:
            return ResourceOptions(parent=self, provider=provider, depends_on=list(depends_on))

        namespaces: list[k8s.core.v1.Namespace] = []
        self.service_accounts: list[k8s.core.v1.ServiceAccount] = []
        for ns in cfg.training_namespaces:
            labels = {"app.kubernetes.io/managed-by": "gpufleet"}
            if ns in cfg.kueue.teams:
                labels["gpufleet.io/team"] = ns
            # Deleting a Namespace deletes the jobs in it: protected, and kept even when a replace is acknowledged.
            namespace = k8s.core.v1.Namespace(f"{name}-ns-{ns}", metadata={"name": ns, "labels": labels},
                                              opts=stateful(cfg, f"{name}-ns-{ns}", child()))
            namespaces.append(namespace)
            # Jobs run as this account (placement submit sets it); the annotation lets them assume the
            # checkpoint identity (IRSA role / Workload Identity GSA), which trusts exactly these namespaces.
            self.service_accounts.append(k8s.core.v1.ServiceAccount(
                f"{name}-sa-{ns}",
                metadata={"name": cfg.training.service_account, "namespace": ns,
                          "labels": {"app.kubernetes.io/managed-by": "gpufleet"},
                          "annotations": dict(args.training_identity)},
                opts=child(depends_on=[namespace]),
            ))

        self.checkpoint_volumes: CheckpointVolumes | None = None
        if args.checkpoint_filesystem is not None and cfg.checkpoint.filesystem.kind != "none":
            self.checkpoint_volumes = CheckpointVolumes(
                f"{name}-ckpt", CheckpointVolumesArgs(cfg=cfg, filesystem=args.checkpoint_filesystem,
                                                      namespaces=namespaces),
                opts=ResourceOptions(parent=self, provider=provider))

        self.jobset = JobSetInstall(f"{name}-jobset", JobSetInstallArgs(depends_on=after_pools),
                                    opts=ResourceOptions(parent=self, provider=provider))
        self.lws = LeaderWorkerSetInstall(f"{name}-lws", LeaderWorkerSetInstallArgs(depends_on=after_pools),
                                          opts=ResourceOptions(parent=self, provider=provider))
        kueue = KueueInstall(f"{name}-kueue", KueueInstallArgs(
            version=cfg.kueue.version, cloud=cfg.cloud,
            depends_on=[*after_pools, self.jobset.release, self.lws.release]),
            opts=ResourceOptions(parent=self, provider=provider))

        self.device_plugins: list[pulumi.Resource] = []
        pool_names = [p.name for p in cfg.node_pools]
        if args.platform == "aws":
            # EKS AL2023 NVIDIA AMIs ship the driver and container toolkit but no device plugin.
            self.device_plugins.append(k8s.helm.v3.Release(
                f"{name}-nvidia-device-plugin",
                name="nvidia-device-plugin",
                chart=NVIDIA_DEVICE_PLUGIN_CHART,
                version=NVIDIA_DEVICE_PLUGIN_VERSION,
                repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=NVIDIA_DEVICE_PLUGIN_REPO),
                namespace="kube-system",
                values={
                    "tolerations": [_GPU_TOLERATION_ANY_VALUE, {"key": "CriticalAddonsOnly", "operator": "Exists"}],
                    # The chart's default affinity wants NFD labels; our pools are labelled by name instead.
                    "affinity": _pool_affinity(pool_names),
                    "priorityClassName": "system-node-critical",
                },
                opts=child(depends_on=after_pools),
            ))
            efa_types = sorted({p.shape.name for p in cfg.node_pools if p.shape.fabric == "efa"})
            if efa_types:
                self.device_plugins.append(k8s.helm.v3.Release(
                    f"{name}-efa-device-plugin",
                    name="aws-efa-k8s-device-plugin",
                    chart=EFA_DEVICE_PLUGIN_CHART,
                    version=EFA_DEVICE_PLUGIN_VERSION,
                    repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=EKS_CHARTS_REPO),
                    namespace="kube-system",
                    values={"tolerations": [_GPU_TOLERATION_ANY_VALUE]},
                    opts=child(depends_on=after_pools),
                ))
        else:
            # GKE installs the NVIDIA driver and device plugin itself; GPUDirect needs Google's installers.
            for part, url in gke_fabric_installers([p.shape.fabric for p in cfg.node_pools]):
                self.device_plugins.append(k8s.yaml.v2.ConfigFile(
                    f"{name}-{part}", file=url, opts=child(depends_on=after_pools)))

        self.objects: list[KueueObject] = []
        after_kueue = [kueue.release, *namespaces]
        created: dict[str, KueueObject] = {}
        for obj in ko.worker_objects(cfg):
            deps: list[pulumi.Resource] = list(after_kueue)
            # Flavors before the queue that names them, the queue before its LocalQueues.
            if obj["kind"] == "ClusterQueue":
                deps += [r for k, r in created.items()
                         if k.startswith(("resourceflavor-", "topology-", "admissioncheck-"))]
            if obj["kind"] == "AdmissionCheck":
                deps += [r for k, r in created.items() if k.startswith("provisioningrequestconfig-")]
            if obj["kind"] == "ResourceFlavor":
                deps += [r for k, r in created.items() if k.startswith("topology-")]
            if obj["kind"] == "LocalQueue":
                deps += [r for k, r in created.items() if k.startswith("clusterqueue-")]
            suffix = resource_suffix(obj)
            res = KueueObject.of(f"{name}-{suffix}", obj, opts=child(depends_on=deps))
            created[suffix] = res
            self.objects.append(res)

        self.cluster_queue = ko.cluster_queue_name(cfg)
        self.local_queues = [{"namespace": q["metadata"]["namespace"], "name": q["metadata"]["name"]}
                             for q in ko.local_queues(cfg)]
        self.training_service_account = training_service_account_output(cfg)
        self.register_outputs({"clusterQueue": self.cluster_queue, "localQueues": self.local_queues,
                               "trainingServiceAccount": self.training_service_account})


def _pool_affinity(pool_names: Sequence[str]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": ko.POOL_LABEL, "operator": "In", "values": list(pool_names)}]}]}}}
