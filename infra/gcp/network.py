"""The cluster's networks: primary VPC (nodes, pods, services, NAT) and the GPU VPCs the shapes need.

An A3/A4 node without its GPU VPCs still boots and runs NCCL, but over the primary NIC at a
fraction of the fabric bandwidth; that is why the GPU VPCs are planned from the shapes and not
left to the user.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from infra.config.network import NetworkConfig
from infra.gcp.plan import GpuNetworkPlan, GpuSubnetPlan, GpuVpcPlan

PODS_RANGE = "pods"
SERVICES_RANGE = "services"


@dataclass(frozen=True)
class NetworkArgs:
    """Inputs of :class:`GcpNetwork`. CIDRs as strings; ``labels`` are the stack's GCP labels."""

    region: str
    name: str
    network: NetworkConfig
    gpu_plan: GpuNetworkPlan
    labels: Mapping[str, str]


@dataclass(frozen=True)
class BuiltGpuSubnet:
    """A planned GPU subnet and the resources that realise it."""

    vpc_plan: GpuVpcPlan
    plan: GpuSubnetPlan
    vpc: gcp.compute.Network
    subnet: gcp.compute.Subnetwork


class GcpNetwork(pulumi.ComponentResource):
    """Primary VPC + subnet with pod/service ranges, Cloud Router + NAT, and every GPU VPC with its subnets.

    Firewall: GKE manages the rules of the primary VPC; each gVNIC GPU VPC gets one ingress rule
    allowing all protocols from its own subnet only. RoCE VPCs accept no VPC firewall rules (only
    regional policies of type RDMA_ROCE_POLICY) and their implied rules already allow traffic
    between the RDMA NICs, so none is created there.
    """

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:gcp:Network", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        net = args.network

        self.vpc = gcp.compute.Network(
            f"{name}-vpc", name=args.name, auto_create_subnetworks=False, routing_mode="REGIONAL",
            description="gpufleet primary network: nodes, pods, services", opts=child)
        self.subnet = gcp.compute.Subnetwork(
            f"{name}-subnet", name=args.name, network=self.vpc.id, region=args.region, ip_cidr_range=net.vpc_cidr,
            # Private nodes have no external IP: Google APIs (GCS, Artifact Registry) are reached privately.
            private_ip_google_access=True,
            secondary_ip_ranges=[
                gcp.compute.SubnetworkSecondaryIpRangeArgs(range_name=PODS_RANGE, ip_cidr_range=net.pods_cidr),
                gcp.compute.SubnetworkSecondaryIpRangeArgs(range_name=SERVICES_RANGE,
                                                           ip_cidr_range=net.services_cidr),
            ],
            opts=child)
        self.router = gcp.compute.Router(f"{name}-router", name=args.name, network=self.vpc.id, region=args.region,
                                         opts=child)
        # Outbound internet (image pulls from outside Google, pip) for private nodes.
        self.nat = gcp.compute.RouterNat(
            f"{name}-nat", name=args.name, router=self.router.name, region=args.region,
            nat_ip_allocate_option="AUTO_ONLY", source_subnetwork_ip_ranges_to_nat="ALL_SUBNETWORKS_ALL_IP_RANGES",
            log_config=gcp.compute.RouterNatLogConfigArgs(enable=True, filter="ERRORS_ONLY"), opts=child)

        self.gpu_vpcs: dict[str, gcp.compute.Network] = {}
        self.gpu_subnets: list[BuiltGpuSubnet] = []
        self.gpu_firewalls: list[gcp.compute.Firewall] = []
        for vpc_plan in args.gpu_plan.vpcs:
            vpc = gcp.compute.Network(
                f"{name}-{vpc_plan.key}", name=vpc_plan.vpc_name, auto_create_subnetworks=False,
                routing_mode="REGIONAL", mtu=vpc_plan.mtu, network_profile=vpc_plan.network_profile,
                description=f"gpufleet GPU network ({vpc_plan.device_mode})", opts=child)
            self.gpu_vpcs[vpc_plan.key] = vpc
            for sub_plan in vpc_plan.subnets:
                subnet = gcp.compute.Subnetwork(
                    f"{name}-{sub_plan.subnet_name.removeprefix(args.name + '-')}-subnet",
                    name=sub_plan.subnet_name, network=vpc.id, region=args.region, ip_cidr_range=sub_plan.cidr,
                    opts=child)
                self.gpu_subnets.append(BuiltGpuSubnet(vpc_plan=vpc_plan, plan=sub_plan, vpc=vpc, subnet=subnet))
            if not vpc_plan.rdma:
                self.gpu_firewalls.append(gcp.compute.Firewall(
                    f"{name}-{vpc_plan.key}-internal", name=f"{vpc_plan.vpc_name}-internal", network=vpc.id,
                    direction="INGRESS", source_ranges=[s.cidr for s in vpc_plan.subnets],
                    allows=[gcp.compute.FirewallAllowArgs(protocol="all")],
                    description="GPU-to-GPU traffic between nodes of this GPU network only", opts=child))

        self.register_outputs({
            "vpc": self.vpc.id,
            "subnet": self.subnet.id,
            "gpuNetworks": [b.vpc.name for b in self.gpu_subnets],
        })
