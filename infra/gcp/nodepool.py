"""One GKE GPU node pool per ``gpufleet:nodePools`` entry, wired to the GPU networks its shape needs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from infra.config.pools import NodePoolConfig
from infra.gcp.network import BuiltGpuSubnet

GPU_TAINT_KEY = "nvidia.com/gpu"
RESERVATION_KEY = "compute.googleapis.com/reservation-name"
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"


@dataclass(frozen=True)
class GpuNodePoolArgs:
    """Inputs of :class:`GpuNodePool`.

    ``cluster_id``/``location`` identify the GKE cluster; ``attachments`` are the GPU subnets one node
    gets a NIC in, in NIC order (from :meth:`infra.gcp.plan.GpuNetworkPlan.attachments`).
    """

    pool: NodePoolConfig
    cluster_id: pulumi.Input[str]
    location: pulumi.Input[str]
    service_account: pulumi.Input[str]
    attachments: Sequence[BuiltGpuSubnet]
    labels: Mapping[str, str]


FABRIC_LABEL = "gpufleet.io/fabric"


def node_labels(pool: NodePoolConfig) -> dict[str, str]:
    """Kubernetes labels Kueue flavors and placement select on. ``gpufleet.io/fabric`` is the shape's fabric
    kind (none | tcpx | tcpxo | rdma), the same key and convention as EKS nodes (infra/aws/gpu_nodes.py)."""
    return {"gpufleet.io/pool": pool.name, "gpufleet.io/gpu": pool.shape.accelerator,
            "gpufleet.io/capacity": pool.capacity_kind, FABRIC_LABEL: pool.shape.fabric}


def compact_placement(pool: NodePoolConfig) -> bool:
    """Whether the pool gets a COMPACT placement policy: multi-node pools on spot or on-demand capacity only.

    GKE refuses COMPACT with queued provisioning (the Cluster Toolkit checks the same); DWS provisions a job's
    nodes together instead. A reservation pool takes its nodes where the reservation's capacity was placed,
    and Compute Engine refuses compact policies with reservations shared across projects: the Cluster
    Toolkit's gke-a4 and gke-a3-ultragpu examples set no placement policy on their reservation pools.
    """
    return pool.multi_node and pool.capacity in ("SPOT", "ON_DEMAND")


class GpuNodePool(pulumi.ComponentResource):
    """A zonal GPU node pool: accelerators with the GKE-managed driver, capacity (spot, on-demand or a
    specific reservation), autoscaling bounds, compact placement for multi-node pools, one extra NIC per
    GPU subnet, local SSD ephemeral storage, the GPU taint and Workload Identity metadata."""

    def __init__(self, name: str, args: GpuNodePoolArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:gcp:GpuNodePool", name, None, opts)
        pool = args.pool
        shape = pool.shape
        labels = dict(args.labels)

        reservation = None
        if pool.capacity == "RESERVATION":
            reservation = gcp.container.NodePoolNodeConfigReservationAffinityArgs(
                consume_reservation_type="SPECIFIC_RESERVATION", key=RESERVATION_KEY, values=[str(pool.reservation)])
        elif pool.queued:
            # Flex-start nodes come from Dynamic Workload Scheduler, never from a reservation (GKE rejects any other).
            reservation = gcp.container.NodePoolNodeConfigReservationAffinityArgs(
                consume_reservation_type="NO_RESERVATION")

        network_config = None
        if args.attachments:
            network_config = gcp.container.NodePoolNetworkConfigArgs(additional_node_network_configs=[
                gcp.container.NodePoolNetworkConfigAdditionalNodeNetworkConfigArgs(
                    network=a.vpc.name, subnetwork=a.subnet.name)
                for a in args.attachments])

        node_config = gcp.container.NodePoolNodeConfigArgs(
            machine_type=shape.name,
            image_type="COS_CONTAINERD",
            guest_accelerators=[gcp.container.NodePoolNodeConfigGuestAcceleratorArgs(
                type=shape.gke_accelerator, count=shape.gpus,
                gpu_driver_installation_config=(
                    gcp.container.NodePoolNodeConfigGuestAcceleratorGpuDriverInstallationConfigArgs(
                        gpu_driver_version="DEFAULT")))],
            spot=pool.capacity == "SPOT",
            # Flex-start with queued provisioning: nodes only through a ProvisioningRequest, all of a job's at once;
            # GKE taints them cloud.google.com/gke-queued=true:NoSchedule (the pool's Kueue flavor tolerates it).
            flex_start=True if pool.queued else None,
            reservation_affinity=reservation,
            # The GPU NICs are gVNIC devices; without gVNIC on the node they do not come up.
            gvnic=gcp.container.NodePoolNodeConfigGvnicArgs(enabled=True) if args.attachments else None,
            ephemeral_storage_local_ssd_config=(
                gcp.container.NodePoolNodeConfigEphemeralStorageLocalSsdConfigArgs(local_ssd_count=shape.local_ssds)
                if shape.local_ssds > 0 else None),
            disk_type=shape.boot_disk, disk_size_gb=200,
            service_account=args.service_account, oauth_scopes=[CLOUD_PLATFORM_SCOPE],
            workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(mode="GKE_METADATA"),
            labels=node_labels(pool),
            taints=[gcp.container.NodePoolNodeConfigTaintArgs(key=GPU_TAINT_KEY, value="present",
                                                              effect="NO_SCHEDULE")],
            resource_labels=labels,
            shielded_instance_config=gcp.container.NodePoolNodeConfigShieldedInstanceConfigArgs(
                enable_secure_boot=True, enable_integrity_monitoring=True),
        )

        self.node_pool = gcp.container.NodePool(
            f"{name}-pool", name=pool.name, cluster=args.cluster_id, location=args.location,
            node_locations=[pool.zone],
            initial_node_count=pool.desired_nodes,
            autoscaling=gcp.container.NodePoolAutoscalingArgs(
                total_min_node_count=pool.min_nodes, total_max_node_count=pool.max_nodes,
                # Spot and flex-start capacity come and go; let the autoscaler take whatever is free in the zone.
                location_policy="ANY" if pool.capacity in ("SPOT", "FLEX_START") else "BALANCED"),
            placement_policy=(gcp.container.NodePoolPlacementPolicyArgs(type="COMPACT")
                              if compact_placement(pool) else None),
            queued_provisioning=gcp.container.NodePoolQueuedProvisioningArgs(enabled=True) if pool.queued else None,
            # Auto-repair replaces a node whose GPU health checks fail; flex-start pools must run without it (GKE
            # and the Cluster Toolkit require auto_repair false there). auto_upgrade stays on: a release channel
            # forbids turning it off, and the cluster's maintenance exclusion holds node upgrades.
            management=gcp.container.NodePoolManagementArgs(auto_repair=not pool.queued, auto_upgrade=True),
            # No spare GPUs to surge into: upgrade one node at a time in place.
            upgrade_settings=gcp.container.NodePoolUpgradeSettingsArgs(max_surge=0, max_unavailable=1),
            network_config=network_config,
            node_config=node_config,
            # initialNodeCount forces a new pool when changed; after creation the autoscaler owns the size.
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["initialNodeCount"]))

        self.register_outputs({"nodePool": self.node_pool.id,
                               "gpuNetworks": [a.plan.gke_name for a in args.attachments]})
