"""One EKS managed node group of GPU nodes, with a launch template that wires the shape's full EFA fabric."""

from __future__ import annotations

import base64
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from infra.aws.cluster import imdsv2_metadata, launch_template_version
from infra.aws.layout import LAUNCHED_RESOURCE_TYPES, resource_tags, uses_efa
from infra.config import StackConfig
from infra.config.pools import NodePoolConfig
from placement.model.kueue import EFA_HUGEPAGES_MIB

GPU_AMI_TYPE = "AL2023_x86_64_NVIDIA"
GPU_TAINT_KEY = "nvidia.com/gpu"
GPU_TAINT_VALUE = "present"
AUTOSCALER_GPU_LABEL = "k8s.amazonaws.com/accelerator"
# Root volume in GiB. With local NVMe, nodeadm moves containerd and kubelet onto the RAID0 array, so the root
# volume only holds the OS; without it, multi-GB CUDA images land on the root volume.
ROOT_VOLUME_GIB_WITH_INSTANCE_STORE = 100
ROOT_VOLUME_GIB_WITHOUT_INSTANCE_STORE = 500
_BOUNDARY = "==GPUFLEET-NODEADM=="


HUGEPAGE_SIZE_MIB = 2
HUGEPAGES_SYSCTL_FILE = "/etc/sysctl.d/90-gpufleet-hugepages.conf"


def hugepages_script(hugepages_mib: int) -> str:
    """Shell script reserving ``hugepages_mib`` MiB of 2 MiB huge pages, now and on every boot.

    cloud-init runs it before ``nodeadm-run`` starts the kubelet (that unit is ordered after cloud-final), so
    the kubelet reports them as allocatable ``hugepages-2Mi``. Neither the EKS AL2023 NVIDIA AMI nor its
    minimal EFA install reserves any.
    """
    pages = hugepages_mib // HUGEPAGE_SIZE_MIB
    return "\n".join([
        "#!/bin/bash",
        "set -euo pipefail",
        f"echo 'vm.nr_hugepages = {pages}' > {HUGEPAGES_SYSCTL_FILE}",
        f"sysctl -w vm.nr_hugepages={pages}",
        "",
    ])


def nodeadm_user_data(raid0_instance_store: bool, hugepages_mib: int = 0) -> str | None:
    """Base64 MIME multipart user data, or ``None`` when there is nothing to add.

    A nodeadm ``NodeConfig`` part when ``raid0_instance_store``: EKS merges it with its own ``NodeConfig``
    (cluster name, endpoint, CA) for managed node groups that do not set a custom AMI. ``RAID0`` stripes all
    instance-store NVMe disks and mounts containerd/kubelet state there (the fast local tier for scratch,
    datasets and checkpoint staging). A shell script part reserving ``hugepages_mib`` MiB of 2 MiB huge pages
    (:func:`hugepages_script`) when it is above 0.
    """
    parts: list[list[str]] = []
    if raid0_instance_store:
        parts.append(["Content-Type: application/node.eks.aws", "", "---", "apiVersion: node.eks.aws/v1alpha1",
                      "kind: NodeConfig", "spec:", "  instance:", "    localStorage:", "      strategy: RAID0", ""])
    if hugepages_mib > 0:
        parts.append(['Content-Type: text/x-shellscript; charset="us-ascii"', "", hugepages_script(hugepages_mib)])
    if not parts:
        return None
    lines = ["MIME-Version: 1.0", f'Content-Type: multipart/mixed; boundary="{_BOUNDARY}"', ""]
    for part in parts:
        lines += [f"--{_BOUNDARY}", *part]
    lines += [f"--{_BOUNDARY}--", ""]
    return base64.b64encode("\n".join(lines).encode()).decode()


def reservation_target(reservation: str | None
                       ) -> aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs | None:
    """Launch into exactly this capacity reservation (``cr-...``): a Capacity Block, or an On-Demand Capacity
    Reservation on an ON_DEMAND pool (without the target, instances would only use an ``open`` ODCR by chance
    and never a ``targeted`` one). ``None`` when the pool has no reservation."""
    if not reservation:
        return None
    return aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs(
        capacity_reservation_target=aws.ec2.LaunchTemplateCapacityReservationSpecificationCapacityReservationTargetArgs(
            capacity_reservation_id=reservation))


def efa_interfaces(network_cards: int, security_group_ids: list[pulumi.Input[str]]
                   ) -> list[aws.ec2.LaunchTemplateNetworkInterfaceArgs]:
    """One interface per network card: card 0 / device 0 ``efa`` (EFA with ENA, the node's IP), every other card
    ``efa-only`` at device 1 (the form the public EKS modules use; EFA-only interfaces carry no IP traffic).
    """
    return [
        aws.ec2.LaunchTemplateNetworkInterfaceArgs(
            network_card_index=card,
            device_index=0 if card == 0 else 1,
            interface_type="efa" if card == 0 else "efa-only",
            security_groups=security_group_ids,
            delete_on_termination="true",
        )
        for card in range(network_cards)
    ]


def pool_labels(pool: NodePoolConfig) -> dict[str, str]:
    """Kubernetes node labels of a GPU pool (Kueue flavors and the placement CLI select on these)."""
    return {
        "gpufleet.io/pool": pool.name,
        "gpufleet.io/gpu": pool.shape.accelerator,
        "gpufleet.io/capacity": pool.capacity_kind,
        "gpufleet.io/fabric": pool.shape.fabric,
        "nvidia.com/gpu.present": "true",
        # The Cluster Autoscaler's AWS GPU label: until the device plugin reports the GPUs, a node carrying
        # it counts as not ready yet, so one pending pod does not buy a second $50/h node.
        AUTOSCALER_GPU_LABEL: f"nvidia-{pool.shape.accelerator.lower()}",
    }


@dataclass(frozen=True)
class GpuNodeGroupArgs:
    """Inputs of :class:`GpuNodeGroup`.

    ``subnet_id``: the pool zone's GPU subnet. ``efa_security_group_id``/``cluster_security_group_id``: attached
    to every EFA interface (EFA pools only). ``placement_group``: the zone's cluster placement group, ``None``
    for non-EFA shapes and Capacity Blocks. ``depends_on``: add-ons the nodes need to become Ready.
    """

    cfg: StackConfig
    stack: str
    pool: NodePoolConfig
    cluster_name: pulumi.Input[str]
    kubernetes_version: str
    node_role_arn: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    efa_security_group_id: pulumi.Input[str]
    cluster_security_group_id: pulumi.Input[str]
    placement_group: aws.ec2.PlacementGroup | None
    depends_on: list[pulumi.Resource]


class GpuNodeGroup(pulumi.ComponentResource):
    """A managed node group for one pool: single GPU subnet (one zone), NVIDIA AL2023 AMI, GPU taint and labels,
    and a launch template with the EFA interfaces, the cluster placement group, IMDSv2, RAID0 instance store and
    reservation targeting (Capacity Block or On-Demand Capacity Reservation) where the pool asks for it.
    """

    launch_template: aws.ec2.LaunchTemplate
    node_group: aws.eks.NodeGroup

    def __init__(self, name: str, args: GpuNodeGroupArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:aws:GpuNodeGroup", name, None, opts)
        cfg, pool, shape = args.cfg, args.pool, args.pool.shape
        child = pulumi.ResourceOptions(parent=self)
        pool_tags = {"gpufleet.io/pool": pool.name, "gpufleet.io/zone": pool.zone}

        def tags(part: str) -> dict[str, str]:
            return resource_tags(cfg, args.stack, f"{name}-{part}", pool_tags)

        efa = uses_efa(pool)
        block = pool.capacity == "CAPACITY_BLOCK"
        root_gib = ROOT_VOLUME_GIB_WITH_INSTANCE_STORE if shape.instance_store_gb > 0 \
            else ROOT_VOLUME_GIB_WITHOUT_INSTANCE_STORE

        self.launch_template = aws.ec2.LaunchTemplate(
            f"{name}-lt",
            description=f"{shape.name} nodes of pool {pool.name} ({cfg.cluster_name})",
            # Kept in the template (not the node group) because Capacity Block templates must name the type.
            instance_type=shape.name,
            network_interfaces=efa_interfaces(shape.network_cards,
                                              [args.efa_security_group_id, args.cluster_security_group_id])
            if efa else None,
            placement=aws.ec2.LaunchTemplatePlacementArgs(group_name=args.placement_group.name)
            if args.placement_group is not None else None,
            instance_market_options=aws.ec2.LaunchTemplateInstanceMarketOptionsArgs(market_type="capacity-block")
            if block else None,
            capacity_reservation_specification=reservation_target(pool.reservation),
            metadata_options=imdsv2_metadata(),
            block_device_mappings=[aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                device_name="/dev/xvda",
                ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(volume_size=root_gib, volume_type="gp3",
                                                                    encrypted="true", delete_on_termination="true"))],
            user_data=nodeadm_user_data(shape.instance_store_gb > 0, hugepages_mib=EFA_HUGEPAGES_MIB if efa else 0),
            tag_specifications=[aws.ec2.LaunchTemplateTagSpecificationArgs(resource_type=kind, tags=tags("node"))
                                for kind in LAUNCHED_RESOURCE_TYPES],
            update_default_version=True,
            tags=tags("lt"),
            opts=child,
        )

        self.node_group = aws.eks.NodeGroup(
            f"{name}-ng",
            cluster_name=args.cluster_name,
            node_group_name=pool.name,
            version=args.kubernetes_version,
            node_role_arn=args.node_role_arn,
            # One subnet: every node of the pool in one AZ, the AZ of its placement group and filesystem.
            subnet_ids=[args.subnet_id],
            ami_type=GPU_AMI_TYPE,
            # Pinned (gpufleet:cluster.amiReleaseVersion): nodes change AMI only when this value does.
            release_version=cfg.cluster.ami_release_version,
            capacity_type=pool.capacity,
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(min_size=pool.min_nodes,
                                                              desired_size=pool.desired_nodes,
                                                              max_size=pool.max_nodes),
            update_config=aws.eks.NodeGroupUpdateConfigArgs(max_unavailable=1),
            # Replace nodes whose GPUs or kubelet fail health checks instead of leaving them to stall jobs.
            node_repair_config=aws.eks.NodeGroupNodeRepairConfigArgs(enabled=True),
            launch_template=aws.eks.NodeGroupLaunchTemplateArgs(
                id=self.launch_template.id, version=self.launch_template.latest_version.apply(launch_template_version)),
            labels=pool_labels(pool),
            taints=[aws.eks.NodeGroupTaintArgs(key=GPU_TAINT_KEY, value=GPU_TAINT_VALUE, effect="NO_SCHEDULE")],
            tags=tags("ng"),
            # The autoscaler (or Kueue's provisioning) moves desired size; `pulumi up` must not reset it.
            opts=pulumi.ResourceOptions(parent=self, depends_on=args.depends_on,
                                        ignore_changes=["scalingConfig.desiredSize"]),
        )

        self.register_outputs({"launchTemplateId": self.launch_template.id,
                               "nodeGroupName": self.node_group.node_group_name})
