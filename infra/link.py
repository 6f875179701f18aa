"""An opt-in private link between an AWS VPC and a GCP VPC: HA VPN with BGP, four tunnels.

Google's reference setup for AWS (HA VPN to a virtual private gateway), built in one stack with both
providers:

* GCP: an HA VPN gateway (two interfaces, 99.99 % SLA when all four tunnels are up) and a Cloud Router
  (ASN ``google_asn``) in the GCP network's region;
* AWS: one virtual private gateway per hub VPC (:class:`AwsVpnGateway`: created and attached with ASN
  ``amazon_asn``, or an existing one named by ID), whose routes propagate into ``route_table_ids``, shared
  by every linked GCP network: AWS attaches one virtual private gateway to a VPC at a time. Per GCP network
  two customer gateways (the HA VPN interfaces' public addresses, BGP ASN ``google_asn``: ``bgp_asn`` up
  to 2,147,483,647, ``bgp_asn_extended`` above, as ``CreateCustomerGateway`` takes them) and two VPN
  connections (dynamic routing), each with two tunnels;
* GCP: an external VPN gateway with the four AWS tunnel addresses (``FOUR_IPS_REDUNDANCY``), four VPN tunnels
  (the pre-shared keys AWS generated), and per tunnel a Cloud Router interface on the tunnel's inside
  /30 (AWS's link-local ``169.254.x.x`` pair) and a BGP peer at the AWS side of it.

Both sides of every tunnel offer exactly one IKEv2 algorithm set (:data:`PHASE1`, :data:`PHASE2`): Google's
known issue for AWS peers is tunnels that fail to rekey when AWS is left on its default transform sets
(several of each), since either side may pick another proposal at each rekey.

Why a virtual private gateway and not a Transit Gateway (Google's Terraform module for AWS uses one, for
ECMP across the four tunnels): the hub's traffic to worker APIs is control-plane traffic (Kueue watches,
the dispatcher's reads), far below one tunnel's 1.25 Gbit/s, so ECMP buys nothing here, while a virtual
private gateway propagates the learned routes into the hub's route tables with no TGW attachment, TGW
route table or static VPC routes to keep. Failover across the four tunnels is BGP's. The cost of that
choice: AWS's quota of VPN connections per virtual private gateway (:data:`MAX_VGW_CONNECTIONS`) allows
five linked GCP workers (two connections each); the config refuses more.

Each side advertises its own networks over BGP (Cloud Router: the region's subnets, secondary ranges
included; the virtual private gateway: the VPC's CIDRs), so the address ranges of the two ends must be
disjoint (:func:`infra.config.stack.range_overlaps`). Tunnel ``k`` (0..3) uses AWS connection ``k // 2``, its tunnel
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
# CreateCustomerGateway: BgpAsn takes 1..2,147,483,647; a larger (4-byte) ASN goes in BgpAsnExtended.
CGW_BGP_ASN_MAX = 2**31 - 1


@dataclass(frozen=True)
class IkeAlgorithms:
    """One IKE phase's algorithm set, in both clouds' spellings (AWS VpnConnection tunnel options; GCP
    VPNTunnel ``cipher_suite``, values as in Cloud VPN's supported IKE ciphers). ``dh_group`` is the
    Diffie-Hellman group number (Phase 2: the PFS group)."""

    aws_encryption: str
    aws_integrity: str
    gcp_encryption: str
    gcp_integrity: str
    dh_group: int


# AES-256-CBC, SHA2-256 (HMAC-SHA2-256-128; PRF-HMAC-SHA2-256 in Phase 1), DH group 14 (2048-bit MODP):
# supported by both AWS Site-to-Site VPN and Cloud VPN for IKEv2, and one of each per phase.
PHASE1 = IkeAlgorithms("AES256", "SHA2-256", "AES-CBC-256", "HMAC-SHA2-256-128", 14)
PHASE2 = IkeAlgorithms("AES256", "SHA2-256", "AES-CBC-256", "HMAC-SHA2-256-128", 14)
GCP_PHASE1_PRF = "PRF-HMAC-SHA2-256"


def aws_tunnel_options(tunnel: int) -> dict[str, Any]:
    """``aws.ec2.VpnConnection`` keyword arguments that pin AWS tunnel ``tunnel`` (1 or 2) to IKEv2 and one
    Phase 1 and one Phase 2 algorithm set (:data:`PHASE1`, :data:`PHASE2`)."""
    t = f"tunnel{tunnel}"
    return {
        f"{t}_ike_versions": [f"ikev{IKE_VERSION}"],
        f"{t}_phase1_encryption_algorithms": [PHASE1.aws_encryption],
        f"{t}_phase1_integrity_algorithms": [PHASE1.aws_integrity],
        f"{t}_phase1_dh_group_numbers": [PHASE1.dh_group],
        f"{t}_phase2_encryption_algorithms": [PHASE2.aws_encryption],
        f"{t}_phase2_integrity_algorithms": [PHASE2.aws_integrity],
        f"{t}_phase2_dh_group_numbers": [PHASE2.dh_group],
    }


def gcp_cipher_suite() -> Any:
    """The GCP ``VPNTunnelCipherSuiteArgs`` offering the same single set as :func:`aws_tunnel_options`."""
    import pulumi_gcp as gcp

    return gcp.compute.VPNTunnelCipherSuiteArgs(
        phase1=gcp.compute.VPNTunnelCipherSuitePhase1Args(
            encryptions=[PHASE1.gcp_encryption], integrities=[PHASE1.gcp_integrity], prves=[GCP_PHASE1_PRF],
            dhs=[f"Group-{PHASE1.dh_group}"]),
        phase2=gcp.compute.VPNTunnelCipherSuitePhase2Args(
            encryptions=[PHASE2.gcp_encryption], integrities=[PHASE2.gcp_integrity],
            pfs=[f"Group-{PHASE2.dh_group}"]))


def customer_gateway_asn(asn: int) -> dict[str, str]:
    """``aws.ec2.CustomerGateway`` keyword for BGP ASN ``asn``: ``bgp_asn`` up to :data:`CGW_BGP_ASN_MAX`,
    ``bgp_asn_extended`` above (the provider and CreateCustomerGateway refuse the other field)."""
    return {"bgp_asn": str(asn)} if asn <= CGW_BGP_ASN_MAX else {"bgp_asn_extended": str(asn)}


@dataclass(frozen=True)
class AwsGatewayArgs:
    """The hub VPC's side: ``vpc_id`` in ``region``, the route tables that learn the GCP routes
    (propagation enabled by the stack), the gateway's ASN; ``existing_gateway_id`` a virtual private gateway
    already attached to the VPC (then none is created and its own ASN is used). ``provider`` an
    ``aws.Provider`` for that account and region."""

    vpc_id: Input[str]
    region: str
    route_table_ids: tuple[str, ...]
    provider: Any
    asn: int = AMAZON_ASN
    existing_gateway_id: str | None = None
    tags: dict[str, str] = field(default_factory=dict)


class AwsVpnGateway(pulumi.ComponentResource):
    """One virtual private gateway for the hub VPC, shared by every GCP network's VPN connections. ``id`` its
    ID, ``asn`` its Amazon-side ASN (an Output: an existing gateway's is read from EC2)."""

    def __init__(self, name: str, args: AwsGatewayArgs, opts: ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:link:AwsVpnGateway", name, None, opts)
        import pulumi_aws as aws

        on_aws = ResourceOptions(parent=self, provider=args.provider)
        self.gateway: Any = None
        if args.existing_gateway_id is None:
            self.gateway = aws.ec2.VpnGateway(
                f"{name}-vgw", vpc_id=args.vpc_id, amazon_side_asn=str(args.asn),
                tags={**args.tags, "Name": f"{name}-vgw"}, opts=on_aws)
            self.id: Output[str] = self.gateway.id
            self.asn: Output[int] = Output.from_input(args.asn)
        else:
            # Fails the update unless the gateway exists and is attached to the hub VPC.
            found = aws.ec2.get_vpn_gateway_output(
                id=args.existing_gateway_id, attached_vpc_id=args.vpc_id,
                opts=pulumi.InvokeOptions(parent=self, provider=args.provider))
            self.id = found.id
            self.asn = found.amazon_side_asn.apply(int)
        self.propagations = [
            aws.ec2.VpnGatewayRoutePropagation(f"{name}-propagate-{i}", vpn_gateway_id=self.id,
                                               route_table_id=rt, opts=on_aws)
            for i, rt in enumerate(args.route_table_ids)]
        self.register_outputs({"vpnGatewayId": self.id})


@dataclass(frozen=True)
class AwsEnd:
    """The AWS end of one GCP network's VPN: the shared :class:`AwsVpnGateway` (its ID and ASN, an Output when
    read from an existing gateway). ``provider`` an ``aws.Provider`` for its account and region."""

    gateway_id: Input[str]
    provider: Any
    asn: Input[int] = AMAZON_ASN
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
    """The four-tunnel HA VPN of the module docstring from one GCP network to the shared AWS gateway.
    ``tunnels`` are the GCP VPN tunnels, ``peers`` the BGP peers; ``connections`` the two AWS VPN connections."""

    def __init__(self, name: str, args: HaVpnArgs, opts: ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:link:HaVpn", name, None, opts)
        import pulumi_aws as aws
        import pulumi_gcp as gcp

        if isinstance(args.aws.asn, int) and args.aws.asn == args.gcp.asn:
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

        interfaces = self.gateway.vpn_interfaces

        def interface_ip(i: int) -> Output[str]:
            return interfaces.apply(lambda ifs: str(ifs[i].ip_address))

        self.customer_gateways = [
            aws.ec2.CustomerGateway(
                f"{name}-aws-cgw-{i}", type="ipsec.1", **customer_gateway_asn(g.asn), ip_address=interface_ip(i),
                tags=aws_tags(f"cgw-{i}"), opts=on_aws)
            for i in range(2)]
        self.connections = [
            aws.ec2.VpnConnection(
                f"{name}-aws-vpn-{i}", type="ipsec.1", customer_gateway_id=cgw.id, vpn_gateway_id=args.aws.gateway_id,
                static_routes_only=False, **aws_tunnel_options(1), **aws_tunnel_options(2),
                tags=aws_tags(f"vpn-{i}"), opts=on_aws)
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
                router=self.router.id, ike_version=IKE_VERSION, cipher_suite=gcp_cipher_suite(), opts=on_gcp)
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
        self.register_outputs({"vpnGatewayId": args.aws.gateway_id, "haVpnGateway": self.gateway.id,
                               "tunnels": [t.name for t in self.tunnels]})
