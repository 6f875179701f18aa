"""The GKE control plane, its node service account and system node pool, and GKE multi-networking objects."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from infra.config.cluster import ClusterConfig, MaintenanceConfig
from infra.gcp.network import PODS_RANGE, SERVICES_RANGE, GcpNetwork
from infra.gcp.plan import service_account_id
from infra.protect import k8s_provider_args

SYSTEM_MACHINE_TYPE = "e2-standard-4"
# Least privilege for nodes: logs, metrics, image pulls. Workload access comes from Workload Identity.
NODE_ROLES = ("roles/container.defaultNodeServiceAccount", "roles/artifactregistry.reader")
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
GKE_NETWORKING_API = "networking.gke.io/v1"
# The upgrade scope that keeps GKE from upgrading (and so draining) nodes while still patching the control plane.
GPU_EXCLUSION_SCOPE = "NO_MINOR_OR_NODE_UPGRADES"
GPU_EXCLUSION_NAME = "gpufleet-no-node-upgrades"
# Daily window (UTC, HH:MM) when no recurring window is configured: the Terraform/Pulumi provider wants a
# window next to the exclusions, as the Cluster Toolkit's gke-cluster module always sets one.
DEFAULT_DAILY_WINDOW = "03:00"
# GKE metrics the Cluster Toolkit A3 Ultra / A4 blueprints enable (its gke-cluster defaults plus DCGM, the GPU
# health and utilisation metrics of NVIDIA's DCGM exporter, which GKE runs when DCGM is on).
MONITORING_COMPONENTS = ("SYSTEM_COMPONENTS", "POD", "DAEMONSET", "DEPLOYMENT", "STATEFULSET", "STORAGE", "HPA",
                         "CADVISOR", "KUBELET", "JOBSET", "DCGM")


@dataclass(frozen=True)
class ClusterArgs:
    """Inputs of :class:`GkeCluster`.

    ``system_zone`` is where the small system pool runs (the GPU zone, so system pods such as Kueue
    and the GPU nodes share a zone); ``filesystem_kind`` enables the matching CSI driver.
    """

    project: str
    region: str
    name: str
    cluster: ClusterConfig
    network: GcpNetwork
    system_zone: str
    filesystem_kind: str
    labels: Mapping[str, str]


class GkeCluster(pulumi.ComponentResource):
    """A private, regional GKE Standard cluster with Dataplane V2 and multi-networking.

    Exposes ``cluster``, ``node_service_account``, ``system_pool``, ``kubeconfig`` (secret, uses the
    ``gke-gcloud-auth-plugin`` exec), ``k8s_provider`` and ``gke_networks`` (one ``Network`` object per
    GPU subnet, by GKE network name).
    """

    def __init__(self, name: str, args: ClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:gcp:Cluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        cl = args.cluster
        labels = dict(args.labels)

        self.node_service_account = gcp.serviceaccount.Account(
            f"{name}-nodes", account_id=service_account_id(args.name, "nodes"),
            display_name=f"GKE nodes of {args.name}", opts=child)
        node_sa_member = self.node_service_account.email.apply(lambda e: f"serviceAccount:{e}")
        self.node_roles = [
            gcp.projects.IAMMember(f"{name}-nodes-{role.rsplit('/', 1)[1].replace('.', '-')}", project=args.project,
                                   role=role, member=node_sa_member, opts=child)
            for role in NODE_ROLES
        ]

        addons = gcp.container.ClusterAddonsConfigArgs(
            gcs_fuse_csi_driver_config=gcp.container.ClusterAddonsConfigGcsFuseCsiDriverConfigArgs(enabled=True),
            gce_persistent_disk_csi_driver_config=gcp.container.ClusterAddonsConfigGcePersistentDiskCsiDriverConfigArgs(
                enabled=True),
            lustre_csi_driver_config=(gcp.container.ClusterAddonsConfigLustreCsiDriverConfigArgs(enabled=True)
                                      if args.filesystem_kind == "lustre" else None),
            gcp_filestore_csi_driver_config=(
                gcp.container.ClusterAddonsConfigGcpFilestoreCsiDriverConfigArgs(enabled=True)
                if args.filesystem_kind == "filestore" else None),
        )
        if cl.public_access:
            authorized = [gcp.container.ClusterMasterAuthorizedNetworksConfigCidrBlockArgs(
                cidr_block=c, display_name=f"public-{i}") for i, c in enumerate(cl.public_access_cidrs)]
        else:
            authorized = [gcp.container.ClusterMasterAuthorizedNetworksConfigCidrBlockArgs(
                cidr_block=args.network.subnet.ip_cidr_range, display_name="cluster-subnet")]
        # A MultiKueue hub: its private ranges reach the private endpoint (global access, over VPN /
        # Interconnect), its public addresses the public endpoint; both only when authorised here.
        authorized += [gcp.container.ClusterMasterAuthorizedNetworksConfigCidrBlockArgs(
            cidr_block=c, display_name=f"hub-{i}") for i, c in enumerate(cl.hub_cidrs)
            if not (cl.public_access and c in cl.public_access_cidrs)]
        # Operators over VPN / Interconnect / peering (gpufleet:cluster.operatorCidrs), the same way.
        authorized += [gcp.container.ClusterMasterAuthorizedNetworksConfigCidrBlockArgs(
            cidr_block=c, display_name=f"operator-{i}") for i, c in enumerate(cl.operator_cidrs)
            if c not in cl.hub_cidrs and not (cl.public_access and c in cl.public_access_cidrs)]

        self.cluster = gcp.container.Cluster(
            f"{name}-gke", name=args.name, location=args.region, project=args.project,
            network=args.network.vpc.id, subnetwork=args.network.subnet.id, networking_mode="VPC_NATIVE",
            ip_allocation_policy=gcp.container.ClusterIpAllocationPolicyArgs(
                cluster_secondary_range_name=PODS_RANGE, services_secondary_range_name=SERVICES_RANGE),
            # Dataplane V2 + multi-networking is what lets pods own the extra GPU NICs.
            datapath_provider="ADVANCED_DATAPATH",
            enable_multi_networking=True,
            release_channel=gcp.container.ClusterReleaseChannelArgs(channel=cl.release_channel),
            # A release channel forbids auto_upgrade=false on node pools; this exclusion is how node upgrades
            # (each one drains a training node) wait until the operator lifts it.
            maintenance_policy=maintenance_policy(cl.maintenance),
            # GPU health: DCGM metrics (XID errors, ECC, throttling) through Managed Service for Prometheus.
            monitoring_config=gcp.container.ClusterMonitoringConfigArgs(
                enable_components=list(MONITORING_COMPONENTS),
                managed_prometheus=gcp.container.ClusterMonitoringConfigManagedPrometheusArgs(enabled=True)),
            # With a channel, a pinned version is a floor: GKE still upgrades within the channel.
            min_master_version=cl.gke_version,
            workload_identity_config=gcp.container.ClusterWorkloadIdentityConfigArgs(
                workload_pool=f"{args.project}.svc.id.goog"),
            addons_config=addons,
            private_cluster_config=gcp.container.ClusterPrivateClusterConfigArgs(
                enable_private_nodes=True, enable_private_endpoint=not cl.public_access,
                master_global_access_config=gcp.container.ClusterPrivateClusterConfigMasterGlobalAccessConfigArgs(
                    enabled=True)),
            master_authorized_networks_config=gcp.container.ClusterMasterAuthorizedNetworksConfigArgs(
                cidr_blocks=authorized, gcp_public_cidrs_access_enabled=False,
                # A hub over a private link: the list binds the private endpoint too (GKE's default leaves it
                # open to anything routed into the VPC, which the link now includes).
                private_endpoint_enforcement_enabled=True if cl.hub_private_link != "none" else None),
            # The default pool cannot be shaped per workload; it is replaced by the pools below.
            remove_default_node_pool=True, initial_node_count=1,
            node_config=gcp.container.ClusterNodeConfigArgs(
                service_account=self.node_service_account.email, oauth_scopes=[CLOUD_PLATFORM_SCOPE],
                workload_metadata_config=gcp.container.ClusterNodeConfigWorkloadMetadataConfigArgs(mode="GKE_METADATA"),
                resource_labels=labels),
            resource_labels=labels,
            # The DNS endpoint (gke-<id>.<region>.gke.goog) never changes for the life of the cluster, whether the
            # public IP endpoint is on or off: the stack's own Kubernetes provider talks to it, so turning public
            # access on (the second pass of a hub bring-up) is not a new cluster to pulumi-kubernetes. It takes
            # IAM credentials (gke-gcloud-auth-plugin) and, for the hub's service-account tokens, Kubernetes
            # tokens; external traffic follows publicAccess, an in-place change.
            control_plane_endpoints_config=gcp.container.ClusterControlPlaneEndpointsConfigArgs(
                dns_endpoint_config=gcp.container.ClusterControlPlaneEndpointsConfigDnsEndpointConfigArgs(
                    allow_external_traffic=cl.public_access, enable_k8s_tokens_via_dns=True)),
            deletion_protection=cl.deletion_protection,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[*self.node_roles, args.network.nat]))

        self.system_pool = gcp.container.NodePool(
            f"{name}-system", name="system", cluster=self.cluster.id, location=args.region,
            node_locations=[args.system_zone], initial_node_count=1,
            autoscaling=gcp.container.NodePoolAutoscalingArgs(total_min_node_count=1, total_max_node_count=3),
            management=gcp.container.NodePoolManagementArgs(auto_repair=True, auto_upgrade=True),
            node_config=gcp.container.NodePoolNodeConfigArgs(
                machine_type=SYSTEM_MACHINE_TYPE, disk_size_gb=100, disk_type="pd-balanced",
                service_account=self.node_service_account.email, oauth_scopes=[CLOUD_PLATFORM_SCOPE],
                workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(
                    mode="GKE_METADATA"),
                labels={"gpufleet.io/pool": "system"}, resource_labels=labels,
                shielded_instance_config=gcp.container.NodePoolNodeConfigShieldedInstanceConfigArgs(
                    enable_secure_boot=True, enable_integrity_monitoring=True)),
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["initialNodeCount"]))

        # How the control plane is reached privately: Private Service Connect (an endpoint in the cluster's subnet,
        # which a VPN into this VPC reaches) unless GKE reports a VPC peering (older clusters), which would need
        # its routes exported. Exported in apiAccess; the hub's `hub-reaches-workers` policy asserts it.
        self.control_plane: pulumi.Output[str] = self.cluster.private_cluster_config.apply(
            lambda p: control_plane_kind(p.peering_name if p is not None else None, cl.hub_private_link))
        self.kubeconfig: pulumi.Output[str] = pulumi.Output.secret(pulumi.Output.all(
            self.cluster.name, self.cluster.endpoint, self.cluster.master_auth.cluster_ca_certificate).apply(
                lambda a: render_kubeconfig(args.project, args.region, a[0], a[1], a[2] or "")))
        # The provider's cluster is the DNS endpoint, fixed for the cluster's life (the exported kubeconfig keeps
        # the IP endpoint and its CA, which the hub's MultiKueue Secrets carry as data).
        self.provider_kubeconfig: pulumi.Output[str] = pulumi.Output.secret(pulumi.Output.all(
            self.cluster.name, self.cluster.control_plane_endpoints_config).apply(
                lambda a: render_kubeconfig(args.project, args.region, a[0], dns_endpoint(a[1]), None)))
        self.k8s_provider = k8s.Provider(
            f"{name}-k8s", kubeconfig=self.provider_kubeconfig,
            **k8s_provider_args(f"gcp:{args.project}:{args.region}:{args.name}"),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.system_pool]))

        k8s_opts = pulumi.ResourceOptions(parent=self, provider=self.k8s_provider)
        self.gke_networks: dict[str, k8s.apiextensions.CustomResource] = {}
        for built in args.network.gpu_subnets:
            gke_name = built.plan.gke_name
            params = k8s.apiextensions.CustomResource(
                f"{name}-netparams-{gke_name}", api_version=GKE_NETWORKING_API, kind="GKENetworkParamSet",
                metadata={"name": gke_name},
                spec={"vpc": built.vpc.name, "vpcSubnet": built.subnet.name, "deviceMode": built.vpc_plan.device_mode},
                opts=k8s_opts)
            self.gke_networks[gke_name] = k8s.apiextensions.CustomResource(
                f"{name}-network-{gke_name}", api_version=GKE_NETWORKING_API, kind="Network",
                metadata={"name": gke_name},
                spec={"type": "Device",
                      "parametersRef": {"group": "networking.gke.io", "kind": "GKENetworkParamSet", "name": gke_name}},
                opts=pulumi.ResourceOptions(parent=self, provider=self.k8s_provider, depends_on=[params]))

        self.register_outputs({"cluster": self.cluster.id, "kubeconfig": self.kubeconfig,
                               "gkeNetworks": list(self.gke_networks)})


def maintenance_policy(m: MaintenanceConfig) -> gcp.container.ClusterMaintenancePolicyArgs:
    """The cluster's maintenance window and, unless turned off, the ``NO_MINOR_OR_NODE_UPGRADES`` exclusion."""
    exclusions = []
    if m.exclusion:
        exclusions.append(gcp.container.ClusterMaintenancePolicyMaintenanceExclusionArgs(
            exclusion_name=GPU_EXCLUSION_NAME, start_time=m.exclusion_start, end_time=m.exclusion_end,
            exclusion_options=gcp.container.ClusterMaintenancePolicyMaintenanceExclusionExclusionOptionsArgs(
                scope=GPU_EXCLUSION_SCOPE,
                # Exactly one of end_time and end_time_behavior.
                end_time_behavior=None if m.exclusion_end else "UNTIL_END_OF_SUPPORT")))
    if m.window_start and m.window_end and m.window_recurrence:
        return gcp.container.ClusterMaintenancePolicyArgs(
            recurring_window=gcp.container.ClusterMaintenancePolicyRecurringWindowArgs(
                start_time=m.window_start, end_time=m.window_end, recurrence=m.window_recurrence),
            maintenance_exclusions=exclusions)
    return gcp.container.ClusterMaintenancePolicyArgs(
        daily_maintenance_window=gcp.container.ClusterMaintenancePolicyDailyMaintenanceWindowArgs(
            start_time=DEFAULT_DAILY_WINDOW),
        maintenance_exclusions=exclusions)


def control_plane_kind(peering_name: str | None, hub_private_link: str) -> str:
    """``psc`` (Private Service Connect) or ``peering`` (GKE reports the control plane's VPC peering). A cluster a
    hub reaches over a private link must be ``psc``: a peered control plane does not carry the link's routes, so
    the stack stops with one line (RunError) instead of exporting a path that carries nothing."""
    kind = "peering" if peering_name else "psc"
    if kind == "peering" and hub_private_link != "none":
        raise pulumi.RunError(f"invalid stack config: gpufleet:cluster.hubPrivateLink: is {hub_private_link} but the "
                              f"GKE control plane is reached by VPC peering ({peering_name}), which does not carry the "
                              "link's routes; recreate the cluster with Private Service Connect or use the public path")
    return kind


def dns_endpoint(config: Any) -> str:
    """The cluster's DNS endpoint host from its ``control_plane_endpoints_config`` output (an output object or
    a mapping); empty until GKE reports it."""
    dns = getattr(config, "dns_endpoint_config", None)
    if dns is None and isinstance(config, Mapping):
        dns = config.get("dns_endpoint_config") or config.get("dnsEndpointConfig")
    endpoint = getattr(dns, "endpoint", None)
    if endpoint is None and isinstance(dns, Mapping):
        endpoint = dns.get("endpoint")
    return str(endpoint or "")


def render_kubeconfig(project: str, region: str, cluster_name: str, endpoint: str, ca_certificate: str | None) -> str:
    """A kubeconfig (JSON, which is valid YAML) that authenticates with ``gke-gcloud-auth-plugin``.

    ``ca_certificate`` is the base64 PEM GKE reports in ``master_auth.cluster_ca_certificate``; None for the DNS
    endpoint, which serves a publicly trusted certificate (what ``gcloud container clusters get-credentials
    --dns-endpoint`` writes).
    """
    context = f"gke_{project}_{region}_{cluster_name}"
    cluster: dict[str, Any] = {"server": f"https://{endpoint}"}
    if ca_certificate is not None:
        cluster["certificate-authority-data"] = ca_certificate
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": cluster}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
        "current-context": context,
        "users": [{"name": context, "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": "gke-gcloud-auth-plugin",
            "installHint": "Install gke-gcloud-auth-plugin: gcloud components install gke-gcloud-auth-plugin",
            "provideClusterInfo": True,
            "interactiveMode": "Never",
        }}}],
    }
    return json.dumps(doc, indent=2)
