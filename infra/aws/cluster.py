"""The EKS control plane: IAM, secrets encryption, OIDC for IRSA, managed add-ons, access entries, system nodes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from infra.aws.iam import pod_identity_trust_policy, service_trust_policy
from infra.aws.layout import LAUNCHED_RESOURCE_TYPES, resource_tags
from infra.config import StackConfig
from infra.config.cluster import EKS_SUPPORT_TYPE
from infra.outputs import endpoint_cidrs, public_endpoint_cidrs

# Controllers (Kueue, the FSx CSI controller, CoreDNS) run here, never on GPU nodes.
SYSTEM_INSTANCE_TYPE = "m7i.xlarge"
SYSTEM_NODES = 2
SYSTEM_ROOT_VOLUME_GIB = 50
CONTROL_PLANE_LOG_TYPES = ["api", "audit", "authenticator"]
CONTROL_PLANE_LOG_RETENTION_DAYS = 90
# Needed before any node can become Ready (bootstrap_self_managed_addons is off, so EKS installs nothing itself).
BEFORE_NODES_ADDONS = ("vpc-cni", "kube-proxy", "eks-pod-identity-agent")
# Their pods need a node to run on; EKS waits for them to become ACTIVE.
AFTER_NODES_ADDONS = ("coredns",)
# No AmazonEKS_CNI_Policy: with IMDS closed to pods (hop limit 1) the node role is what a node's own
# processes use, and the VPC CNI gets its network rights from its own Pod Identity role (VPC_CNI_POLICY).
NODE_POLICIES = ("AmazonEKSWorkerNodePolicy", "AmazonEC2ContainerRegistryReadOnly", "AmazonSSMManagedInstanceCore")
VPC_CNI_ADDON = "vpc-cni"
VPC_CNI_SERVICE_ACCOUNT = "aws-node"  # kube-system/aws-node, the add-on's DaemonSet
VPC_CNI_POLICY = "AmazonEKS_CNI_Policy"
# The EKS node monitoring agent: turns GPU XID errors, kernel, network and storage faults into node conditions
# that node auto-repair acts on. Pinned (EKS add-on versions: `aws eks describe-addon-versions --addon-name
# eks-node-monitoring-agent --kubernetes-version <minor>`); its DaemonSet tolerates every taint.
NODE_MONITORING_ADDON = "eks-node-monitoring-agent"
NODE_MONITORING_ADDON_VERSION = "v1.4.0-eksbuild.2"


@dataclass(frozen=True)
class EksClusterArgs:
    """Inputs of :class:`EksCluster`. ``subnet_ids``: the private subnets (one per system AZ)."""

    cfg: StackConfig
    stack: str
    partition: str
    vpc_id: pulumi.Input[str]
    subnet_ids: list[pulumi.Output[str]]


def imdsv2_metadata() -> aws.ec2.LaunchTemplateMetadataOptionsArgs:
    """IMDSv2 only, hop limit 1: the node and its host-network pods (VPC CNI, kube-proxy, Pod Identity agent,
    node monitoring agent) reach IMDS, pods in their own network namespace do not, so no pod can take the
    node role's credentials. Pods that call AWS get their own role (Pod Identity or IRSA)."""
    return aws.ec2.LaunchTemplateMetadataOptionsArgs(http_endpoint="enabled", http_tokens="required",
                                                     http_put_response_hop_limit=1)


def kubeconfig_json(cluster_name: str, endpoint: str, ca_data: str, region: str) -> str:
    """A kubeconfig that authenticates with ``aws eks get-token`` (the AWS CLI and its credentials)."""
    return json.dumps({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster_name, "cluster": {"server": endpoint, "certificate-authority-data": ca_data}}],
        "contexts": [{"name": cluster_name, "context": {"cluster": cluster_name, "user": cluster_name}}],
        "current-context": cluster_name,
        "preferences": {},
        "users": [{"name": cluster_name, "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": "aws",
            "args": ["eks", "get-token", "--cluster-name", cluster_name, "--region", region, "--output", "json"],
            "interactiveMode": "Never",
        }}}],
    })


class EksCluster(pulumi.ComponentResource):
    """An EKS cluster with a pinned version, private endpoint by default, API authentication mode, KMS-encrypted
    secrets, an IAM OIDC provider, the core managed add-ons plus the node monitoring agent, cluster-admin access
    entries and a small system node group.
    """

    cluster: aws.eks.Cluster
    name: pulumi.Output[str]
    version: str
    cluster_security_group_id: pulumi.Output[str]
    api_security_group: aws.ec2.SecurityGroup
    oidc_provider_arn: pulumi.Output[str]
    oidc_issuer: pulumi.Output[str]
    node_role_arn: pulumi.Output[str]
    before_nodes: list[pulumi.Resource]
    system_node_group: aws.eks.NodeGroup
    kubeconfig: pulumi.Output[str]

    def __init__(self, name: str, args: EksClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:aws:EksCluster", name, None, opts)
        cfg = args.cfg
        child = pulumi.ResourceOptions(parent=self)
        arn_prefix = f"arn:{args.partition}"

        def tags(part: str) -> dict[str, str]:
            return resource_tags(cfg, args.stack, f"{name}-{part}")

        role = aws.iam.Role(f"{name}-role", assume_role_policy=service_trust_policy("eks.amazonaws.com"),
                            description=f"EKS control plane of {cfg.cluster_name}", tags=tags("role"), opts=child)
        attachments: list[pulumi.Resource] = [aws.iam.RolePolicyAttachment(
            f"{name}-role-cluster-policy", role=role.name,
            policy_arn=f"{arn_prefix}:iam::aws:policy/AmazonEKSClusterPolicy", opts=child)]

        secrets_key = aws.kms.Key(f"{name}-secrets", description=f"Kubernetes secrets of {cfg.cluster_name}",
                                  enable_key_rotation=True, deletion_window_in_days=30, tags=tags("secrets"),
                                  opts=child)
        # AmazonEKSClusterPolicy has no KMS rights; envelope encryption of secrets needs these on the key.
        attachments.append(aws.iam.RolePolicy(
            f"{name}-role-secrets-kms", role=role.id,
            policy=secrets_key.arn.apply(lambda arn: json.dumps({"Version": "2012-10-17", "Statement": [{
                "Effect": "Allow", "Action": ["kms:Encrypt", "kms:Decrypt", "kms:ListGrants", "kms:DescribeKey"],
                "Resource": arn}]})),
            opts=child))

        # EKS creates /aws/eks/<name>/cluster with no expiry unless it already exists.
        log_group = aws.cloudwatch.LogGroup(f"{name}-logs", name=f"/aws/eks/{cfg.cluster_name}/cluster",
                                            retention_in_days=CONTROL_PLANE_LOG_RETENTION_DAYS, tags=tags("logs"),
                                            opts=child)

        # The endpoint's own security group, for the hub and operator 443 rules: EKS puts it on the control
        # plane's network interfaces only (as terraform-aws-eks v21 does with its cluster security group),
        # while the cluster security group EKS creates is on every node interface too, so a rule there would
        # open 443 on every GPU node. No egress rules: the control plane's interfaces also carry the cluster
        # security group, whose egress reaches the nodes.
        self.api_security_group = aws.ec2.SecurityGroup(
            f"{name}-api", vpc_id=args.vpc_id,
            description=f"EKS API endpoint of {cfg.cluster_name}: 443 from hub and operator CIDRs",
            tags=tags("api"), opts=child)

        public = cfg.cluster.public_access
        self.version = cfg.cluster.kubernetes_version
        self.cluster = aws.eks.Cluster(
            f"{name}-eks",
            name=cfg.cluster_name,
            version=cfg.cluster.kubernetes_version,
            role_arn=role.arn,
            vpc_config=aws.eks.ClusterVpcConfigArgs(
                subnet_ids=args.subnet_ids,
                security_group_ids=[self.api_security_group.id],
                endpoint_private_access=True,
                endpoint_public_access=public,
                # The hub's CIDRs too: with the public endpoint on, a hub outside the VPC resolves the
                # endpoint name to its public addresses.
                public_access_cidrs=public_endpoint_cidrs(cfg) if public else None,
            ),
            access_config=aws.eks.ClusterAccessConfigArgs(
                authentication_mode="API",
                # The identity running `pulumi up` must reach the API to install Kueue and the device plugins.
                bootstrap_cluster_creator_admin_permissions=True,
            ),
            # Managed add-ons below replace the self-managed ones EKS would otherwise install and leave unmanaged.
            bootstrap_self_managed_addons=False,
            encryption_config=aws.eks.ClusterEncryptionConfigArgs(
                resources=["secrets"], provider=aws.eks.ClusterEncryptionConfigProviderArgs(key_arn=secrets_key.arn)),
            kubernetes_network_config=aws.eks.ClusterKubernetesNetworkConfigArgs(
                service_ipv4_cidr=cfg.network.services_cidr, ip_family="ipv4"),
            enabled_cluster_log_types=CONTROL_PLANE_LOG_TYPES,
            # STANDARD: the cluster is upgraded at end of standard support instead of silently billing
            # extended support (6x the control-plane price); infra/config/cluster.py refuses a version past that date
            # (placement/data/eks_versions.yaml), so EKS never upgrades under the stack.
            upgrade_policy=aws.eks.ClusterUpgradePolicyArgs(support_type=EKS_SUPPORT_TYPE),
            tags=tags("eks"),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[*attachments, log_group]),
        )
        eks = self.cluster
        self.name = eks.name
        self.cluster_security_group_id = eks.vpc_config.apply(_cluster_security_group)
        self.oidc_issuer = eks.identities.apply(_oidc_issuer)

        def api_ingress(part: str, cidrs: list[str], who: str) -> list[aws.vpc.SecurityGroupIngressRule]:
            return [aws.vpc.SecurityGroupIngressRule(
                f"{name}-{part}-{cidr.replace('/', '-')}", security_group_id=self.api_security_group.id,
                cidr_ipv4=cidr, ip_protocol="tcp", from_port=443, to_port=443,
                description=f"Kubernetes API for {who}", tags=tags(f"{part}-{cidr.replace('/', '-')}"), opts=child)
                for cidr in cidrs]

        # The private endpoint answers only what its security groups let in; a MultiKueue hub reaches it over
        # peering / Transit Gateway / VPN from gpufleet:cluster.hubCidrs (rules on the endpoint's own group).
        self.hub_ingress = api_ingress("hub", list(cfg.cluster.hub_cidrs),
                                       "the MultiKueue hub (gpufleet:cluster.hubCidrs)")
        # Operators (kubectl, CI, `pulumi up`) over VPN / peering / a bastion subnet: the cluster security group
        # lets in nothing but itself, so without these the private endpoint is unreachable from the rest of the VPC.
        self.operator_ingress = api_ingress(
            "operator", [c for c in endpoint_cidrs(cfg) if c not in cfg.cluster.hub_cidrs],
            "operators (gpufleet:cluster.operatorCidrs)")

        oidc = aws.iam.OpenIdConnectProvider(f"{name}-oidc", url=self.oidc_issuer,
                                             client_id_lists=["sts.amazonaws.com"], tags=tags("oidc"), opts=child)
        self.oidc_provider_arn = oidc.arn

        for i, principal in enumerate(cfg.cluster.admin_principals):
            entry = aws.eks.AccessEntry(f"{name}-admin-{i}", cluster_name=eks.name, principal_arn=principal,
                                        type="STANDARD", tags=tags(f"admin-{i}"), opts=child)
            aws.eks.AccessPolicyAssociation(
                f"{name}-admin-{i}", cluster_name=eks.name, principal_arn=principal,
                policy_arn=f"{arn_prefix}:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy",
                access_scope=aws.eks.AccessPolicyAssociationAccessScopeArgs(type="cluster"),
                opts=pulumi.ResourceOptions(parent=self, depends_on=[entry]))

        node_role = aws.iam.Role(f"{name}-node-role", assume_role_policy=service_trust_policy("ec2.amazonaws.com"),
                                 description=f"EKS nodes of {cfg.cluster_name}", tags=tags("node-role"), opts=child)
        node_attachments = [
            aws.iam.RolePolicyAttachment(f"{name}-node-{policy}", role=node_role.name,
                                         policy_arn=f"{arn_prefix}:iam::aws:policy/{policy}", opts=child)
            for policy in NODE_POLICIES
        ]
        self.node_role_arn = node_role.arn

        # The VPC CNI's own role, bound to kube-system/aws-node through EKS Pod Identity (the agent add-on is
        # installed next to it): assigning ENIs and IPs is no longer a right of every process on the node.
        cni_role = aws.iam.Role(f"{name}-vpc-cni", assume_role_policy=pod_identity_trust_policy(),
                                description=f"VPC CNI (kube-system/{VPC_CNI_SERVICE_ACCOUNT}) of {cfg.cluster_name}",
                                tags=tags("vpc-cni"), opts=child)
        cni_attach = aws.iam.RolePolicyAttachment(f"{name}-vpc-cni", role=cni_role.name,
                                                  policy_arn=f"{arn_prefix}:iam::aws:policy/{VPC_CNI_POLICY}",
                                                  opts=child)
        self.vpc_cni_role_arn = cni_role.arn

        self.before_nodes = [*node_attachments]
        for addon in BEFORE_NODES_ADDONS:
            if addon == VPC_CNI_ADDON:
                self.before_nodes.append(self._addon(
                    name, cfg, args.stack, addon,
                    pod_identity=[aws.eks.AddonPodIdentityAssociationArgs(
                        role_arn=cni_role.arn, service_account=VPC_CNI_SERVICE_ACCOUNT)],
                    opts=pulumi.ResourceOptions(parent=self, depends_on=[cni_attach])))
            else:
                self.before_nodes.append(self._addon(name, cfg, args.stack, addon))

        system_lt = aws.ec2.LaunchTemplate(
            f"{name}-system-lt",
            description=f"system nodes of {cfg.cluster_name}",
            metadata_options=imdsv2_metadata(),
            block_device_mappings=[aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                device_name="/dev/xvda",
                ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(volume_size=SYSTEM_ROOT_VOLUME_GIB,
                                                                    volume_type="gp3", encrypted="true",
                                                                    delete_on_termination="true"))],
            tag_specifications=[aws.ec2.LaunchTemplateTagSpecificationArgs(resource_type=kind, tags=tags("system"))
                                for kind in LAUNCHED_RESOURCE_TYPES],
            update_default_version=True,
            tags=tags("system-lt"),
            opts=child,
        )
        self.system_node_group = aws.eks.NodeGroup(
            f"{name}-system",
            cluster_name=eks.name,
            node_group_name="system",
            version=cfg.cluster.kubernetes_version,
            node_role_arn=node_role.arn,
            subnet_ids=args.subnet_ids,
            ami_type="AL2023_x86_64_STANDARD",
            release_version=cfg.cluster.ami_release_version,
            capacity_type="ON_DEMAND",
            instance_types=[SYSTEM_INSTANCE_TYPE],
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(min_size=SYSTEM_NODES, desired_size=SYSTEM_NODES,
                                                              max_size=SYSTEM_NODES + 1),
            update_config=aws.eks.NodeGroupUpdateConfigArgs(max_unavailable=1),
            launch_template=aws.eks.NodeGroupLaunchTemplateArgs(id=system_lt.id,
                                                                version=system_lt.latest_version.apply(launch_template_version)),
            labels={"gpufleet.io/role": "system"},
            tags=tags("system"),
            opts=pulumi.ResourceOptions(parent=self, depends_on=self.before_nodes),
        )

        after = pulumi.ResourceOptions(parent=self, depends_on=[self.system_node_group])
        for addon in AFTER_NODES_ADDONS:
            self._addon(name, cfg, args.stack, addon, opts=after)
        # GPU node groups run with node auto-repair (GpuNodeGroup), which acts on the conditions this agent sets.
        self._addon(name, cfg, args.stack, NODE_MONITORING_ADDON, version=NODE_MONITORING_ADDON_VERSION, opts=after)

        self.kubeconfig = pulumi.Output.secret(pulumi.Output.all(eks.name, eks.endpoint, eks.certificate_authority)
                                               .apply(lambda a: kubeconfig_json(a[0], a[1], _ca_data(a[2]),
                                                                                cfg.region)))

        self.register_outputs({
            "clusterName": self.name,
            "endpoint": eks.endpoint,
            "clusterSecurityGroupId": self.cluster_security_group_id,
            "apiSecurityGroupId": self.api_security_group.id,
            "oidcProviderArn": self.oidc_provider_arn,
            "nodeRoleArn": self.node_role_arn,
            "kubeconfig": self.kubeconfig,
        })

    def _addon(self, name: str, cfg: StackConfig, stack: str, addon: str,
               service_account_role_arn: pulumi.Input[str] | None = None, version: str | None = None,
               pod_identity: list[aws.eks.AddonPodIdentityAssociationArgs] | None = None,
               opts: pulumi.ResourceOptions | None = None) -> aws.eks.Addon:
        """A managed add-on at ``version``, or at the default version for the cluster's Kubernetes version."""
        return aws.eks.Addon(
            f"{name}-{addon}",
            cluster_name=self.cluster.name,
            addon_name=addon,
            addon_version=version,
            service_account_role_arn=service_account_role_arn,
            pod_identity_associations=pod_identity,
            resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="OVERWRITE",
            tags=resource_tags(cfg, stack, f"{name}-{addon}"),
            opts=opts or pulumi.ResourceOptions(parent=self),
        )


def launch_template_version(v: int | None) -> str:
    """Launch template version for a node group: the number (``$Latest`` would show a diff on every run).

    ``None`` only happens under mocks, which do not compute ``latest_version``.
    """
    return "$Default" if v is None else str(int(v))


def _cluster_security_group(vpc: Any) -> str:
    """The security group EKS creates for the control plane and managed nodes (computed by EKS)."""
    return str(vpc.cluster_security_group_id)


def _oidc_issuer(identities: Any) -> str:
    """The cluster's OIDC issuer URL (``https://oidc.eks.<region>.amazonaws.com/id/...``)."""
    return str(identities[0].oidcs[0].issuer)


def _ca_data(ca: Any) -> str:
    """The base64 CA bundle of ``Cluster.certificate_authority`` (typed object or plain dict)."""
    data = ca.get("data") if isinstance(ca, dict) else getattr(ca, "data", None)
    return str(data or "")
