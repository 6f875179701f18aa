"""The hub's Prometheus server: where the dispatcher's observations of the fleet (spot node-hours and reclaims,
provisioning failures, admission waits: :mod:`placement.dispatch.observe`) are kept across the dispatcher's
restarts, and where ``placement calibrate --prometheus URL`` reads them back.

Installed on a hub whose dispatcher is External unless the user names a server of their own
(``gpufleet:hub.dispatch.prometheusUrl``, which must then scrape the dispatcher's pods). The chart is the
prometheus-community ``prometheus`` chart, pinned (:data:`CHART_VERSION`, Prometheus :data:`APP_VERSION`), with
only its server: no Alertmanager, Pushgateway, node exporter or kube-state-metrics (the dispatcher's own metrics
are what the plans need). Of the chart's default scrape jobs (``scrapeConfigs``, values.yaml at 29.27.0) only
``kubernetes-pods`` stays, narrowed to the dispatcher's namespace: it scrapes each pod annotated
``prometheus.io/scrape: "true"`` on its ``prometheus.io/port``, which the dispatcher's pod template carries
(:func:`infra.k8s.dispatcher.pod_template`): each replica on its own (the Service in front of them would
alternate between replicas), and only the leader's counters move. Those pods export every series read from this
server (``placement calibrate``: ``gpufleet_spot_node_seconds_total``, ``gpufleet_spot_reclaims_total``; the
dispatcher's other observations and its own ``gpufleet_dispatch_*``; the trainer's series, which
``placement report`` reads, come from the workers' Prometheus); the other jobs (API servers, nodes, cAdvisor,
every annotated Service and pod of the cluster, Prometheus itself) would fill the volume with series nothing
reads. The data sit on a PersistentVolume (the server's Deployment with a claim) of a named StorageClass
(``hub.dispatch.prometheusStorageClass``, else :data:`DEFAULT_STORAGE_CLASS` of the hub's cloud), kept
:data:`RETENTION` (calibration reads 90 days) or until they reach ``hub.dispatch.prometheusRetentionSize``
(:data:`DEFAULT_RETENTION_SIZE`), whichever comes first, so a counter's history survives both the dispatcher's and
Prometheus's restarts and the volume never fills.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from pulumi import ResourceOptions

from infra.config.dispatch import PROMETHEUS_VOLUME_GIB, DispatchConfig

CHART = "prometheus"
REPOSITORY = "https://prometheus-community.github.io/helm-charts"
# prometheus-community/helm-charts charts/prometheus/Chart.yaml: version 29.27.0, appVersion v3.14.0.
CHART_VERSION = "29.27.0"
APP_VERSION = "v3.14.0"
NAMESPACE = "gpufleet-monitoring"
RELEASE = "gpufleet-prometheus"
RETENTION = "180d"
VOLUME_SIZE = f"{PROMETHEUS_VOLUME_GIB}Gi"
# Prometheus deletes the oldest blocks past this much data (--storage.tsdb.retention.size, the chart's
# server.retentionSize), so the volume never fills: 80 % of VOLUME_SIZE, the rest for compaction (the figure and
# its source: infra.config.dispatch). gpufleet:hub.dispatch.prometheusRetentionSize sets another, below VOLUME_SIZE.
DEFAULT_RETENTION_SIZE = DispatchConfig.prometheus_retention_size
# The StorageClass of the data volume when gpufleet:hub.dispatch.prometheusStorageClass is unset, by the hub's
# cloud: the class EKS creates in every cluster (gp2, kubernetes.io/aws-ebs, provisioned through the Amazon EBS
# CSI driver since in-tree EBS migrated to CSI: the hub cluster must run that driver) and GKE's Persistent Disk
# CSI class (standard-rwo). Named, not left to the cluster's default StorageClass: a cluster without a default
# (EKS clusters created at 1.30 or later have none) leaves the claim Pending and the release timing out.
DEFAULT_STORAGE_CLASS = {"aws": "gp2", "gcp": "standard-rwo"}
SERVER_PORT = 80  # the chart's server Service port (server.service.servicePort)


def server_url() -> str:
    """The in-cluster URL of the installed server (the chart's ``<release>-server`` Service)."""
    return f"http://{RELEASE}-server.{NAMESPACE}.svc:{SERVER_PORT}"


# The chart's default scrape jobs (charts/prometheus/values.yaml `scrapeConfigs` at 29.27.0, commit
# ca06aaef8a20ca639f06523f467cb0ef8a114feb): all off but kubernetes-pods (see the module docstring).
DEFAULT_SCRAPE_JOBS = ("prometheus", "kubernetes-api-servers", "kubernetes-nodes", "kubernetes-nodes-cadvisor",
                       "kubernetes-service-endpoints", "kubernetes-service-endpoints-slow", "prometheus-pushgateway",
                       "kubernetes-services", "kubernetes-pods", "kubernetes-pods-slow")
KEPT_SCRAPE_JOB = "kubernetes-pods"


def scrape_configs() -> dict[str, Any]:
    """The chart's ``scrapeConfigs``: every default job disabled but :data:`KEPT_SCRAPE_JOB`, whose pod discovery
    is narrowed to the dispatcher's namespace (its relabelling, from the chart, is kept: Helm merges maps)."""
    from infra.k8s.dispatcher import NAMESPACE as DISPATCH_NAMESPACE

    jobs: dict[str, Any] = {job: {"enabled": False} for job in DEFAULT_SCRAPE_JOBS if job != KEPT_SCRAPE_JOB}
    jobs[KEPT_SCRAPE_JOB] = {"enabled": True, "kubernetes_sd_configs": [
        {"role": "pod", "namespaces": {"names": [DISPATCH_NAMESPACE]}}]}
    return jobs


def prometheus_values(storage_class: str = DEFAULT_STORAGE_CLASS["aws"],
                      retention_size: str = DEFAULT_RETENTION_SIZE) -> dict[str, Any]:
    """The chart's values: the server alone, its data on a ``storage_class`` volume for :data:`RETENTION` or
    ``retention_size`` bytes, whichever comes first, scraping the dispatcher only (:func:`scrape_configs`)."""
    return {
        "alertmanager": {"enabled": False},
        "kube-state-metrics": {"enabled": False},
        "prometheus-node-exporter": {"enabled": False},
        "prometheus-pushgateway": {"enabled": False},
        "server": {"retention": RETENTION, "retentionSize": retention_size,
                   "persistentVolume": {"enabled": True, "size": VOLUME_SIZE, "storageClass": storage_class}},
        "scrapeConfigs": scrape_configs(),
    }


@dataclass(frozen=True)
class PrometheusServerArgs:
    """``version`` of the chart; ``depends_on`` what must exist first; ``storage_class`` and ``retention_size``
    of the data volume (:data:`DEFAULT_STORAGE_CLASS`, :data:`DEFAULT_RETENTION_SIZE`)."""

    version: str = CHART_VERSION
    depends_on: tuple[pulumi.Resource, ...] = ()
    storage_class: str = DEFAULT_STORAGE_CLASS["aws"]
    retention_size: str = DEFAULT_RETENTION_SIZE


class PrometheusServer(pulumi.ComponentResource):
    """The prometheus-community ``prometheus`` chart, pinned, into :data:`NAMESPACE`."""

    def __init__(self, name: str, args: PrometheusServerArgs, opts: ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:k8s:PrometheusServer", name, None, opts)
        provider = opts.provider if opts else None
        self.release = k8s.helm.v3.Release(
            f"{name}-prometheus",
            name=RELEASE,
            chart=CHART,
            version=args.version,
            repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=REPOSITORY),
            namespace=NAMESPACE,
            create_namespace=True,
            values=prometheus_values(args.storage_class, args.retention_size),
            timeout=600,
            opts=ResourceOptions(parent=self, provider=provider, depends_on=list(args.depends_on)),
        )
        self.url = server_url()
        self.register_outputs({"release": self.release.name, "version": args.version, "url": self.url})


def hub_prometheus(name: str, dispatch: DispatchConfig, cloud: str, depends_on: tuple[pulumi.Resource, ...],
                   parent: pulumi.Resource) -> PrometheusServer | None:
    """The hub's hook: a :class:`PrometheusServer` unless the user named a server (``dispatch.prometheus_url``),
    its volume's class and retention size from ``gpufleet:hub.dispatch`` or the defaults for the hub's ``cloud``."""
    if dispatch.prometheus_url is not None:
        return None
    storage_class = dispatch.prometheus_storage_class or DEFAULT_STORAGE_CLASS[cloud]
    return PrometheusServer(f"{name}-monitoring", PrometheusServerArgs(
        depends_on=depends_on, storage_class=storage_class, retention_size=dispatch.prometheus_retention_size),
        opts=ResourceOptions(parent=parent))
