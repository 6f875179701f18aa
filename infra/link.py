"""An opt-in private link between an AWS VPC and a GCP VPC: HA VPN with BGP, four tunnels.

Google's reference setup for AWS (HA VPN to a virtual private gateway), built in one stack with both
providers:

* GCP: an HA VPN gateway (two interfaces, 99.99 % SLA when all four tunnels are up) and a Cloud Router
  (ASN ``google_asn``) in the GCP network's region;
* AWS: a virtual private gateway attached to the VPC (ASN ``amazon_asn``) whose routes propagate into
  ``route_table_ids``; two customer gateways (the HA VPN interfaces' public addresses, BGP ASN
  ``google_asn``); two VPN connections (dynamic routing, IKEv2), each with two tunnels;
* GCP: an external VPN gateway with the four AWS tunnel addresses (``FOUR_IPS_REDUNDANCY``), four VPN tunnels
  (IKEv2, the pre-shared keys AWS generated), and per tunnel a Cloud Router interface on the tunnel's inside
  /30 (AWS's link-local ``169.254.x.x`` pair) and a BGP peer at the AWS side of it.

Each side advertises its own networks over BGP (Cloud Router: the region's subnets, secondary ranges
included; the virtual private gateway: the VPC's CIDRs), so the address ranges of the two ends must be
disjoint (:func:`infra.config.range_overlaps`). Tunnel ``k`` (0..3) uses AWS connection ``k // 2``, its tunnel
``k % 2 + 1``, HA VPN interface ``k // 2`` and external gateway interface ``k``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi
from pulumi import Input, Output, ResourceOptions

TUNNELS = 4
# Private ASNs (RFC 6996). AWS's default virtual private gateway ASN; Cloud Router's documented example ASN.
AMAZON_ASN = 64512
GOOGLE_ASN = 65534
IKE_VERSION = 2


@dataclass(frozen=True)
class AwsEnd:
    """The AWS network: ``vpc_id`` in ``region``, the route tables that learn the GCP routes, the gateway's ASN.
    ``provider`` an ``aws.Provider`` for that account and region."""

    vpc_id: Input[str]
    region: str
    route_table_ids: tuple[str, ...]
    provider: Any
    asn: int = AMAZON_ASN
    tags: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class GcpEnd:
    """The GCP network (``projects/<project>/global/networks/<name>``) in ``region``, the Cloud Router's ASN.
    ``provider`` a ``gcp.Provider`` for that project."""

    project: Input[str]
    region: Input[str]
    network: Input[str]
    provider: Any
    asn: int = GOOGLE_ASN


@dataclass(frozen=True)
class HaVpnArgs:
    aws: AwsEnd
    gcp: GcpEnd


def tunnel_plan() -> list[tuple[int, int, int, int]]:
    """Per tunnel ``k``: (AWS connection, its tunnel 1 or 2, HA VPN interface, external gateway interface)."""
    return [(k // 2, k % 2 + 1, k // 2, k) for k in range(TUNNELS)]


class HaVpn(pulumi.ComponentResource):
    """The four-tunnel HA VPN of the module docstring. ``tunnels`` are the GCP VPN tunnels, ``peers`` the BGP
    peers; ``connections`` the two AWS VPN connections."""

    def __init__(self, name: str, args: HaVpnArgs, opts: ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:link:HaVpn", name, None, opts)
        import pulumi_aws as aws
        import pulumi_gcp as gcp

        if args.aws.asn == args.gcp.asn:
            raise ValueError("the two ends of a BGP session need different ASNs")
        on_aws = ResourceOptions(parent=self, provider=args.aws.provider)
        on_gcp = ResourceOptions(parent=self, provider=args.gcp.provider)
        g = args.gcp

        self.gateway = gcp.compute.HaVpnGateway(f"{name}-gcp-gw", project=g.project, region=g.region,
                                                network=g.network, opts=on_gcp)
        self.router = gcp.compute.Router(f"{name}-gcp-router", project=g.project, region=g.region, network=g.network,
                                         bgp=gcp.compute.RouterBgpArgs(asn=g.asn), opts=on_gcp)

        def aws_tags(part: str) -> dict[str, str]:
            return {**args.aws.tags, "Name": f"{name}-{part}"}

        self.vgw = aws.ec2.VpnGateway(f"{name}-aws-vgw", vpc_id=args.aws.vpc_id, amazon_side_asn=str(args.aws.asn),
                                      tags=aws_tags("vgw"), opts=on_aws)
        self.propagations = [
            aws.ec2.VpnGatewayRoutePropagation(f"{name}-aws-propagate-{i}", vpn_gateway_id=self.vgw.id,
                                               route_table_id=rt, opts=on_aws)
            for i, rt in enumerate(args.aws.route_table_ids)]
        interfaces = self.gateway.vpn_interfaces

        def interface_ip(i: int) -> Output[str]:
            return interfaces.apply(lambda ifs: str(ifs[i].ip_address))

        self.customer_gateways = [
            aws.ec2.CustomerGateway(
                f"{name}-aws-cgw-{i}", type="ipsec.1", bgp_asn=str(g.asn), ip_address=interface_ip(i),
                tags=aws_tags(f"cgw-{i}"), opts=on_aws)
            for i in range(2)]
        self.connections = [
            aws.ec2.VpnConnection(
                f"{name}-aws-vpn-{i}", type="ipsec.1", customer_gateway_id=cgw.id, vpn_gateway_id=self.vgw.id,
                static_routes_only=False, tunnel1_ike_versions=[f"ikev{IKE_VERSION}"],
                tunnel2_ike_versions=[f"ikev{IKE_VERSION}"], tags=aws_tags(f"vpn-{i}"), opts=on_aws)
            for i, cgw in enumerate(self.customer_gateways)]

        def tunnel_out(conn: Any, tunnel: int, attr: str) -> Output[str]:
            return getattr(conn, f"tunnel{tunnel}_{attr}")

        self.peer_gateway = gcp.compute.ExternalVpnGateway(
            f"{name}-gcp-peer-gw", project=g.project, redundancy_type="FOUR_IPS_REDUNDANCY",
            description="the four AWS VPN tunnel endpoints",
            interfaces=[gcp.compute.ExternalVpnGatewayInterfaceArgs(
                id=ext, ip_address=tunnel_out(self.connections[conn], tunnel, "address"))
                for conn, tunnel, _, ext in tunnel_plan()],
            opts=on_gcp)
        self.tunnels = []
        self.peers = []
        for k, (conn, tunnel, ha_if, ext) in enumerate(tunnel_plan()):
            connection = self.connections[conn]
            vpn_tunnel = gcp.compute.VPNTunnel(
                f"{name}-gcp-tunnel-{k}", project=g.project, region=g.region, vpn_gateway=self.gateway.id,
                vpn_gateway_interface=ha_if, peer_external_gateway=self.peer_gateway.id,
                peer_external_gateway_interface=ext,
                shared_secret=Output.secret(tunnel_out(connection, tunnel, "preshared_key")),  # type: ignore[arg-type]
                router=self.router.id, ike_version=IKE_VERSION, opts=on_gcp)
            interface = gcp.compute.RouterInterface(
                f"{name}-gcp-if-{k}", project=g.project, region=g.region, router=self.router.name,
                ip_range=tunnel_out(connection, tunnel, "cgw_inside_address").apply(lambda ip: f"{ip}/30"),
                vpn_tunnel=vpn_tunnel.name, opts=on_gcp)
            self.peers.append(gcp.compute.RouterPeer(
                f"{name}-gcp-peer-{k}", project=g.project, region=g.region, router=self.router.name,
                interface=interface.name, peer_asn=args.aws.asn,
                peer_ip_address=tunnel_out(connection, tunnel, "vgw_inside_address"),
                advertised_route_priority=100, opts=on_gcp))
            self.tunnels.append(vpn_tunnel)
        self.register_outputs({"vpnGatewayId": self.vgw.id, "haVpnGateway": self.gateway.id,
                               "tunnels": [t.name for t in self.tunnels]})
