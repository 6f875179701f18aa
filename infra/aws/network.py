"""The VPC of an AWS GPU cluster: subnets, routing, the EFA security group and cluster placement groups."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from infra.aws.layout import SubnetPlan, Zone, resource_tags, zone_fields
from infra.config import StackConfig


@dataclass(frozen=True)
class NetworkArgs:
    """Inputs of :class:`Network`.

    ``azs``: the system AZs (public + private subnet each), the primary GPU zone first when it is a regular AZ.
    ``gpu_zones``: zones (as written in the config) that get a dedicated private GPU subnet.
    ``placement_zones``: zones that get a cluster placement group for their EFA pools.
    """

    cfg: StackConfig
    stack: str
    plan: SubnetPlan
    azs: tuple[Zone, ...]
    gpu_zones: tuple[str, ...]
    placement_zones: tuple[str, ...]


class Network(pulumi.ComponentResource):
    """VPC, public/private subnets across ``azs``, one GPU subnet per GPU zone, IGW, NAT, an S3 gateway endpoint,
    the EFA security group (all traffic to and from itself) and one ``cluster`` placement group per EFA zone.
    """

    vpc_id: pulumi.Output[str]
    vpc_cidr: str
    public_subnet_ids: list[pulumi.Output[str]]
    private_subnet_ids: list[pulumi.Output[str]]
    gpu_subnet_ids: dict[str, pulumi.Output[str]]
    efa_security_group_id: pulumi.Output[str]
    placement_groups: dict[str, aws.ec2.PlacementGroup]

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:aws:Network", name, None, opts)
        cfg = args.cfg
        child = pulumi.ResourceOptions(parent=self)

        def tags(part: str, extra: dict[str, str] | None = None) -> dict[str, str]:
            return resource_tags(cfg, args.stack, f"{name}-{part}", extra)

        # Subnets EKS may place load balancers in / discover for the cluster.
        cluster_tag = {f"kubernetes.io/cluster/{cfg.cluster_name}": "shared"}

        vpc = aws.ec2.Vpc(f"{name}-vpc", cidr_block=cfg.network.vpc_cidr, enable_dns_support=True,
                          enable_dns_hostnames=True, tags=tags("vpc"), opts=child)
        self.vpc_id = vpc.id
        self.vpc_cidr = cfg.network.vpc_cidr

        igw = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=vpc.id, tags=tags("igw"), opts=child)

        public_rt = aws.ec2.RouteTable(f"{name}-public-rt", vpc_id=vpc.id, tags=tags("public-rt"), opts=child)
        aws.ec2.Route(f"{name}-public-default", route_table_id=public_rt.id, destination_cidr_block="0.0.0.0/0",
                      gateway_id=igw.id, opts=child)

        public: list[aws.ec2.Subnet] = []
        private: list[aws.ec2.Subnet] = []
        for i, az in enumerate(args.azs):
            # Each AZ's pair sits in its own fixed slot (or where network.subnetCidrs pins it), so another azCount or
            # GPU zone moves no subnet.
            pub_cidr, priv_cidr = args.plan.system_cidrs(az)
            sn = aws.ec2.Subnet(f"{name}-public-{az.zone_id}", vpc_id=vpc.id, cidr_block=pub_cidr,
                                availability_zone_id=az.zone_id, map_public_ip_on_launch=False,
                                tags=tags(f"public-{az.zone_id}", {**cluster_tag, "kubernetes.io/role/elb": "1"}),
                                opts=child)
            # Named by zone, like the subnet it associates: another AZ set adds or removes its own association
            # only (named by position, one AZ more or less re-pointed every association after it). The alias is
            # the name it had at this position, so an existing stack keeps each association in place.
            aws.ec2.RouteTableAssociation(f"{name}-public-{az.zone_id}-rt", subnet_id=sn.id,
                                          route_table_id=public_rt.id,
                                          opts=pulumi.ResourceOptions(parent=self,
                                                                      aliases=[pulumi.Alias(name=f"{name}-public-{i}")]))
            public.append(sn)
            private.append(aws.ec2.Subnet(
                f"{name}-private-{az.zone_id}", vpc_id=vpc.id, cidr_block=priv_cidr, availability_zone_id=az.zone_id,
                tags=tags(f"private-{az.zone_id}", {**cluster_tag, "kubernetes.io/role/internal-elb": "1"}),
                opts=child))
        self.public_subnet_ids = [s.id for s in public]
        self.private_subnet_ids = [s.id for s in private]

        # One NAT gateway, in the primary GPU zone's public subnet (args.azs[0], layout.primary_gpu_zone: gpuZone or
        # the pools' lowest zone, never the first pool's): GPU nodes pull multi-GB images through it and a NAT in
        # another AZ would add cross-AZ transfer charges on top of NAT processing.
        eip = aws.ec2.Eip(f"{name}-nat-eip", domain="vpc", tags=tags("nat-eip"),
                          opts=pulumi.ResourceOptions(parent=self, depends_on=[igw]))
        nat = aws.ec2.NatGateway(f"{name}-nat", allocation_id=eip.id, subnet_id=public[0].id, tags=tags("nat"),
                                 opts=child)
        private_rt = aws.ec2.RouteTable(f"{name}-private-rt", vpc_id=vpc.id, tags=tags("private-rt"), opts=child)
        aws.ec2.Route(f"{name}-private-default", route_table_id=private_rt.id, destination_cidr_block="0.0.0.0/0",
                      nat_gateway_id=nat.id, opts=child)
        for i, (az, sn) in enumerate(zip(args.azs, private, strict=True)):
            aws.ec2.RouteTableAssociation(f"{name}-private-{az.zone_id}-rt", subnet_id=sn.id,
                                          route_table_id=private_rt.id,
                                          opts=pulumi.ResourceOptions(parent=self,
                                                                      aliases=[pulumi.Alias(name=f"{name}-private-{i}")]))

        self.gpu_subnet_ids = {}
        for zone in args.gpu_zones:
            az_name, az_id = zone_fields(zone)
            sn = aws.ec2.Subnet(f"{name}-gpu-{zone}", vpc_id=vpc.id, cidr_block=args.plan.gpu[zone],
                                availability_zone=az_name, availability_zone_id=az_id,
                                tags=tags(f"gpu-{zone}", {**cluster_tag, "gpufleet.io/zone": zone}), opts=child)
            aws.ec2.RouteTableAssociation(f"{name}-gpu-{zone}", subnet_id=sn.id, route_table_id=private_rt.id,
                                          opts=child)
            self.gpu_subnet_ids[zone] = sn.id

        # Checkpoint traffic to S3 must not go through the NAT gateway (charged per GB processed).
        aws.ec2.VpcEndpoint(f"{name}-s3", vpc_id=vpc.id, service_name=f"com.amazonaws.{cfg.region}.s3",
                            vpc_endpoint_type="Gateway", route_table_ids=[private_rt.id], tags=tags("s3"),
                            opts=child)

        efa_sg = aws.ec2.SecurityGroup(
            f"{name}-efa", vpc_id=vpc.id,
            description="EFA: all traffic between GPU nodes (EFA requires an all-traffic self rule both ways)",
            tags=tags("efa"), opts=child)
        aws.vpc.SecurityGroupIngressRule(f"{name}-efa-in", security_group_id=efa_sg.id, ip_protocol="-1",
                                         referenced_security_group_id=efa_sg.id,
                                         description="all traffic from EFA peers", tags=tags("efa-in"), opts=child)
        aws.vpc.SecurityGroupEgressRule(f"{name}-efa-out", security_group_id=efa_sg.id, ip_protocol="-1",
                                        referenced_security_group_id=efa_sg.id,
                                        description="all traffic to EFA peers", tags=tags("efa-out"), opts=child)
        self.efa_security_group_id = efa_sg.id

        self.placement_groups = {
            zone: aws.ec2.PlacementGroup(f"{name}-pg-{zone}", strategy="cluster",
                                         tags=tags(f"pg-{zone}", {"gpufleet.io/zone": zone}), opts=child)
            for zone in args.placement_zones
        }

        self.register_outputs({
            "vpcId": self.vpc_id,
            "publicSubnetIds": self.public_subnet_ids,
            "privateSubnetIds": self.private_subnet_ids,
            "gpuSubnetIds": self.gpu_subnet_ids,
            "efaSecurityGroupId": self.efa_security_group_id,
            "placementGroups": {z: pg.name for z, pg in self.placement_groups.items()},
        })
