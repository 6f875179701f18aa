"""gpufleet's mandatory policies as plain functions over resource arguments.

Each check reads what Pulumi hands a policy: a type token and the camelCase inputs (``infra.mockrun.Registered``
under mocks, ``ResourceValidationArgs.props`` / ``PolicyResource.props`` under CrossGuard). Resource checks take
``(type_token, props)`` and return violation messages; checks that need several resources (an S3 bucket and its
companion resources, a node group and its launch template) or the stack outputs take the whole resource list and
return :class:`Violation` rows naming the offending resource.

No Pulumi import here: the same functions run in ``scripts/preview`` (mocked resources), in the CrossGuard pack
(``infra/policy/__main__.py``) and in unit tests on hand-written fixtures.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from infra.config.network import is_private_cidr
from placement.model.shapes import Shape, shape_book

# Rule names, also the CrossGuard policy names.
IMDSV2 = "imdsv2-required"
S3_PROTECTED = "s3-bucket-protected"
GCS_PROTECTED = "gcs-bucket-protected"
GPU_TAINT = "gpu-node-taint"
EFA_INTERFACES = "efa-interfaces"
GCP_GPU_NETWORKS = "gcp-gpu-networks"
PUBLIC_INGRESS = "no-public-admin-ingress"
KUBECONFIG_SECRET = "kubeconfig-secret"
REQUIRED_TAGS = "owner-cost-center-tags"
HUB_REACHES_WORKERS = "hub-reaches-workers"
STATEFUL_REPLACE = "stateful-replace-acknowledged"
STATEFUL_PROTECTED = "stateful-protected"

REQUIRED_TAG_KEYS = ("owner", "cost-center")
GPU_TAINT_KEY = "nvidia.com/gpu"
SSH_PORT = 22
KUBE_API_PORTS = (443, 6443)
WORLD_CIDRS = frozenset({"0.0.0.0/0", "::/0"})

LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
EC2_INSTANCE = "aws:ec2/instance:Instance"
EKS_NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
EKS_CLUSTER = "aws:eks/cluster:Cluster"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
SECURITY_GROUP_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
SG_INGRESS_RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
GKE_NODE_POOL = "gcp:container/nodePool:NodePool"
GKE_CLUSTER = "gcp:container/cluster:Cluster"
GCP_FIREWALL = "gcp:compute/firewall:Firewall"
GCS_BUCKET = "gcp:storage/bucket:Bucket"
STACK_REFERENCE = "pulumi:pulumi:StackReference"
S3_BUCKETS = frozenset({"aws:s3/bucket:Bucket", "aws:s3/bucketV2:BucketV2"})
S3_ENCRYPTION = frozenset({
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
    "aws:s3/bucketServerSideEncryptionConfigurationV2:BucketServerSideEncryptionConfigurationV2",
})
S3_VERSIONING = frozenset({"aws:s3/bucketVersioning:BucketVersioning", "aws:s3/bucketVersioningV2:BucketVersioningV2"})
S3_PUBLIC_ACCESS_BLOCK = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
PUBLIC_ACCESS_BLOCK_FLAGS = ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")

# Where a taggable resource keeps its tags/labels. A resource is taggable when its inputs carry one of these keys,
# or when its type is listed in TAGGABLE_TYPES (so a resource that forgot its tags altogether is still caught).
_AWS_TAG_KEYS = ("tags",)
_GCP_LABEL_KEYS = ("labels", "resourceLabels")
TAGGABLE_TYPES: Mapping[str, tuple[str, ...]] = {
    # AWS: the resources gpufleet stacks create that accept `tags`.
    "aws:s3/bucket:Bucket": ("tags",),
    "aws:s3/bucketV2:BucketV2": ("tags",),
    "aws:ec2/vpc:Vpc": ("tags",),
    "aws:ec2/subnet:Subnet": ("tags",),
    "aws:ec2/internetGateway:InternetGateway": ("tags",),
    "aws:ec2/natGateway:NatGateway": ("tags",),
    "aws:ec2/eip:Eip": ("tags",),
    "aws:ec2/routeTable:RouteTable": ("tags",),
    "aws:ec2/vpcEndpoint:VpcEndpoint": ("tags",),
    "aws:ec2/placementGroup:PlacementGroup": ("tags",),
    SECURITY_GROUP: ("tags",),
    SG_INGRESS_RULE: ("tags",),
    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule": ("tags",),
    LAUNCH_TEMPLATE: ("tags",),
    EC2_INSTANCE: ("tags",),
    EKS_CLUSTER: ("tags",),
    EKS_NODE_GROUP: ("tags",),
    "aws:eks/addon:Addon": ("tags",),
    "aws:eks/accessEntry:AccessEntry": ("tags",),
    "aws:eks/podIdentityAssociation:PodIdentityAssociation": ("tags",),
    "aws:iam/role:Role": ("tags",),
    "aws:iam/policy:Policy": ("tags",),
    "aws:iam/openIdConnectProvider:OpenIdConnectProvider": ("tags",),
    "aws:iam/instanceProfile:InstanceProfile": ("tags",),
    "aws:kms/key:Key": ("tags",),
    "aws:fsx/lustreFileSystem:LustreFileSystem": ("tags",),
    "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation": ("tags",),
    "aws:cloudwatch/logGroup:LogGroup": ("tags",),
    # GCP: labels live under different keys per resource (and GKE node pools nest them under nodeConfig).
    GCS_BUCKET: ("labels",),
    GKE_CLUSTER: ("resourceLabels",),
    GKE_NODE_POOL: ("nodeConfig.resourceLabels",),
    "gcp:compute/instance:Instance": ("labels",),
    "gcp:compute/disk:Disk": ("labels",),
    "gcp:compute/address:Address": ("labels",),
    "gcp:compute/globalAddress:GlobalAddress": ("labels",),
    "gcp:filestore/instance:Instance": ("labels",),
    "gcp:lustre/instance:Instance": ("labels",),
    "gcp:kms/cryptoKey:CryptoKey": ("labels",),
}


class Violation(NamedTuple):
    """One broken rule: which rule, which resource (its name, or URN under CrossGuard), and why."""

    rule: str
    resource: str
    type: str
    message: str

    def __str__(self) -> str:
        return f"[{self.rule}] {self.resource} ({self.type}): {self.message}"


@dataclass(frozen=True)
class Resource:
    """A resource as the stack-level checks see it.

    ``key`` identifies it (mock name or URN). ``refs`` holds every value another resource may use to point at it
    (id, name, ARN, bucket name, URN). ``deps`` maps an input key to the keys of the resources that input was
    computed from (CrossGuard's property dependencies; empty under mocks, where values are resolved instead).
    """

    type: str
    name: str
    props: Mapping[str, Any]
    key: str = ""
    refs: frozenset[str] = frozenset()
    deps: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.key:
            object.__setattr__(self, "key", self.name)
        refs = set(self.refs) | {self.key}
        for attr in ("id", "name", "arn", "bucket"):
            value = self.props.get(attr)
            if isinstance(value, str) and value:
                refs.add(value)
        object.__setattr__(self, "refs", frozenset(refs))

    def points_to(self, input_key: str, value: Any, target: Resource) -> bool:
        """True when this resource's ``input_key`` (whose value is ``value``) refers to ``target``."""
        if target.key in self.deps.get(input_key, frozenset()):
            return True
        return isinstance(value, str) and value in target.refs


def from_registered(registered: Any) -> Resource:
    """A :class:`Resource` from an ``infra.mockrun.Registered``.

    Under ``infra.mockrun`` a resource's id is ``"<name>-id"``, its ARN ``"arn:mock:<type>:<name>"`` and its
    ``name`` output the ``name`` input or the resource name, so references resolve to one of those.
    """
    name, typ = registered.name, registered.type
    refs = {f"{name}-id", f"arn:mock:{typ}:{name}", name}
    return Resource(type=typ, name=name, props=registered.inputs, refs=frozenset(refs))


# --------------------------------------------------------------------------------------------- helpers


def _get(props: Any, path: str) -> Any:
    """``props["a"]["b"]`` for ``path="a.b"``; None when any step is missing."""
    value = props
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def _list(value: Any) -> list[Any]:
    if value is None or isinstance(value, (str, bytes, Mapping)):
        return []
    return list(value) if isinstance(value, Iterable) else []


def _int(value: Any, default: int | None = None) -> int | None:
    """Mocks give numbers as floats and ports sometimes arrive as strings."""
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return default


def gpu_shape(instance_type: Any) -> Shape | None:
    """The GPU shape of an instance/machine type, or None when it is not a GPU shape of ``shape_book()``."""
    return shape_book().get(instance_type) if isinstance(instance_type, str) else None


def _node_group_instance_type(props: Mapping[str, Any]) -> str | None:
    types = [t for t in _list(props.get("instanceTypes")) if isinstance(t, str)]
    return types[0] if types else None


# --------------------------------------------------------------------------------------------- resource checks


def check_imdsv2(type_token: str, props: Mapping[str, Any]) -> list[str]:
    """Launch templates (and plain instances) must require IMDSv2 session tokens."""
    if type_token not in (LAUNCH_TEMPLATE, EC2_INSTANCE):
        return []
    tokens = _get(props, "metadataOptions.httpTokens")
    if tokens != "required":
        return [f"metadataOptions.httpTokens is {tokens!r}; set it to 'required' (IMDSv2 only), "
                "or pods can read node credentials through IMDSv1"]
    return []


def check_gcs_bucket(type_token: str, props: Mapping[str, Any]) -> list[str]:
    """GCS buckets: public access prevention enforced, uniform bucket-level access, versioning or soft delete."""
    if type_token != GCS_BUCKET:
        return []
    out = []
    if props.get("publicAccessPrevention") != "enforced":
        out.append(f"publicAccessPrevention is {props.get('publicAccessPrevention')!r}; set it to 'enforced'")
    if props.get("uniformBucketLevelAccess") is not True:
        out.append("uniformBucketLevelAccess must be true (no per-object ACLs)")
    versioned = _get(props, "versioning.enabled") is True
    soft_delete = (_int(_get(props, "softDeletePolicy.retentionDurationSeconds"), 0) or 0) > 0
    if not (versioned or soft_delete):
        out.append("enable versioning or a soft delete policy (softDeletePolicy.retentionDurationSeconds > 0) "
                   "so an overwritten or deleted checkpoint can be recovered")
    return out


def _has_gpu_taint(taints: Any, effect: str) -> bool:
    return any(isinstance(t, Mapping) and t.get("key") == GPU_TAINT_KEY and t.get("effect") == effect
               for t in _list(taints))


def check_gpu_taint(type_token: str, props: Mapping[str, Any], instance_type: str | None = None) -> list[str]:
    """GPU node pools carry the ``nvidia.com/gpu`` NoSchedule taint, so only pods asking for GPUs land there.

    ``instance_type`` overrides the one in ``props`` (an EKS node group whose type is set in its launch template).
    """
    if type_token == EKS_NODE_GROUP:
        itype = instance_type or _node_group_instance_type(props)
        if gpu_shape(itype) is None:
            return []
        if not _has_gpu_taint(props.get("taints"), "NO_SCHEDULE"):
            return [f"GPU node group ({itype}) lacks the taint {{key: {GPU_TAINT_KEY}, effect: NO_SCHEDULE}}"]
        return []
    if type_token == GKE_NODE_POOL:
        itype = instance_type or _get(props, "nodeConfig.machineType")
        if gpu_shape(itype) is None:
            return []
        if not _has_gpu_taint(_get(props, "nodeConfig.taints"), "NO_SCHEDULE"):
            return [f"GPU node pool ({itype}) lacks nodeConfig.taints {{key: {GPU_TAINT_KEY}, effect: NO_SCHEDULE}}"]
        return []
    return []


def check_gcp_gpu_networks(type_token: str, props: Mapping[str, Any]) -> list[str]:
    """GKE GPU pools attach every GPU NIC the machine has.

    One additional node network per gVNIC GPU VPC plus one per RDMA subnet (A3 Ultra / A4 put 8 RoCE NICs on
    8 subnets of ONE RDMA VPC), i.e. ``gpu_vpcs + rdma_subnets`` configs spanning
    ``gpu_vpcs + (1 if rdma_subnets else 0)`` distinct VPCs. Without them NCCL falls back to TCP.
    """
    if type_token != GKE_NODE_POOL:
        return []
    itype = _get(props, "nodeConfig.machineType")
    shape = gpu_shape(itype)
    if shape is None or shape.cloud != "gcp":
        return []
    configs = [c for c in _list(_get(props, "networkConfig.additionalNodeNetworkConfigs")) if isinstance(c, Mapping)]
    want_vpcs = shape.gpu_vpcs + (1 if shape.rdma_subnets else 0)
    want_configs = shape.gpu_vpcs + shape.rdma_subnets
    out = []
    if len(configs) != want_configs:
        out.append(f"{itype} needs {want_configs} networkConfig.additionalNodeNetworkConfigs "
                   f"({shape.gpu_vpcs} gVNIC GPU VPCs + {shape.rdma_subnets} RDMA subnets), found {len(configs)}")
    networks = [c.get("network") for c in configs]
    if configs and all(isinstance(n, str) and n for n in networks):
        distinct = len(set(networks))
        if distinct != want_vpcs:
            out.append(f"{itype} needs additional node networks on {want_vpcs} distinct GPU VPCs, found {distinct}")
    return out


def _cidr(value: Any) -> str | None:
    try:
        return str(ipaddress.ip_network(str(value), strict=False))
    except ValueError:
        return None


def _sources(cidrs: Iterable[Any]) -> list[str]:
    """The distinct, normalised CIDRs among ``cidrs`` (invalid values dropped)."""
    return sorted({c for c in (_cidr(v) for v in cidrs) if c})


def _is_public(cidr: str) -> bool:
    """A range of internet addresses (the whole internet included), not a private/VPC one."""
    return not is_private_cidr(cidr)


def _within(cidr: str, configured: Collection[str]) -> bool:
    net = ipaddress.ip_network(cidr)
    for c in configured:
        other = ipaddress.ip_network(c)
        if net.version == other.version and net.subnet_of(other):  # type: ignore[arg-type]
            return True
    return False


def _config_cidrs(cluster_config: Mapping[str, Any] | None, key: str) -> frozenset[str]:
    return frozenset(c for c in (_cidr(v) for v in _list((cluster_config or {}).get(key))) if c)


def allowed_public_cidrs(cluster_config: Mapping[str, Any] | None) -> frozenset[str]:
    """CIDRs the stack config opens to the Kubernetes API: ``cluster.publicAccessCidrs`` when ``publicAccess`` is true.

    ``cluster_config`` is the raw ``gpufleet:cluster`` mapping (camelCase keys).
    """
    public = (cluster_config or {}).get("publicAccess")
    if not (public is True or (isinstance(public, str) and public.lower() == "true")):
        return frozenset()
    return _config_cidrs(cluster_config, "publicAccessCidrs")


def allowed_hub_cidrs(cluster_config: Mapping[str, Any] | None) -> frozenset[str]:
    """``cluster.hubCidrs``: the MultiKueue hub's ranges, allowed to the Kubernetes API (never the whole internet)."""
    return frozenset(c for c in _config_cidrs(cluster_config, "hubCidrs") if c not in WORLD_CIDRS)


def allowed_api_cidrs(cluster_config: Mapping[str, Any] | None) -> frozenset[str]:
    """``cluster.hubCidrs`` and ``cluster.operatorCidrs``: the ranges the stack config authorises on the
    Kubernetes API endpoints besides ``publicAccessCidrs`` (never the whole internet)."""
    operators = frozenset(c for c in _config_cidrs(cluster_config, "operatorCidrs") if c not in WORLD_CIDRS)
    return allowed_hub_cidrs(cluster_config) | operators


def hub_stack_of(cluster_config: Mapping[str, Any] | None) -> str | None:
    """``cluster.hubStack`` of the raw ``gpufleet:cluster`` mapping: the hub whose exported egress is allowed."""
    value = (cluster_config or {}).get("hubStack")
    return value if isinstance(value, str) and value else None


def _aws_rule_ports(protocol: Any, from_port: Any, to_port: Any) -> list[int]:
    """The admin ports an AWS rule opens (protocol -1/all opens every port)."""
    proto = str(protocol).lower() if protocol is not None else ""
    if proto in ("-1", "all"):
        return [SSH_PORT, *KUBE_API_PORTS]
    if proto not in ("tcp", "6"):
        return []
    lo, hi = _int(from_port), _int(to_port)
    if lo is None or hi is None:
        return []
    return [p for p in (SSH_PORT, *KUBE_API_PORTS) if lo <= p <= hi]


def _gcp_allow_ports(allows: Any) -> list[int]:
    ports: set[int] = set()
    for allow in _list(allows):
        if not isinstance(allow, Mapping):
            continue
        proto = str(allow.get("protocol", "")).lower()
        if proto not in ("tcp", "all", "6"):
            continue
        spec = [str(p) for p in _list(allow.get("ports"))]
        if not spec:
            ports.update((SSH_PORT, *KUBE_API_PORTS))
        for item in spec:
            lo_s, _, hi_s = item.partition("-")
            lo, hi = _int(lo_s), _int(hi_s or lo_s)
            if lo is not None and hi is not None:
                ports.update(p for p in (SSH_PORT, *KUBE_API_PORTS) if lo <= p <= hi)
    return sorted(ports)


def _judge(ports: Iterable[int], sources: list[str], allowed: Collection[str], hub: Collection[str],
           where: str) -> list[str]:
    """SSH from the world is never allowed. The Kubernetes API: from the world only for CIDRs the stack config
    lists in ``publicAccessCidrs`` (``allowed``); from any other public range only when it lies in those or in
    ``hubCidrs`` (``hub``); private (VPC, peered) ranges are not public ingress."""
    out = []
    for port in sorted(set(ports)):
        for cidr in sources:
            if port == SSH_PORT:
                if cidr in WORLD_CIDRS:
                    out.append(f"{where} opens SSH (port {port}) to {cidr}")
                continue
            if not _is_public(cidr) or cidr in allowed:
                continue
            if cidr in WORLD_CIDRS:
                out.append(f"{where} opens the Kubernetes API (port {port}) to {cidr} (allowed only with "
                           "gpufleet:cluster.publicAccess true and the CIDR in cluster.publicAccessCidrs)")
            elif not _within(cidr, [*allowed, *hub]):
                out.append(f"{where} opens the Kubernetes API (port {port}) to {cidr}, a public range the stack "
                           "config does not list (allowed in gpufleet:cluster.hubCidrs or operatorCidrs, or in "
                           "cluster.publicAccessCidrs with publicAccess true)")
    return out


def check_public_ingress(type_token: str, props: Mapping[str, Any], allowed_cidrs: Collection[str] = (),
                         hub_cidrs: Collection[str] = ()) -> list[str]:
    """No ingress from 0.0.0.0/0 (or ::/0) to SSH (22), and none from a public range to the Kubernetes API
    (443/6443: security groups and firewalls, the EKS/GKE endpoints) that the stack config does not list.

    ``allowed_cidrs`` is :func:`allowed_public_cidrs` of the stack config (it may open the world, never SSH);
    ``hub_cidrs`` is :func:`allowed_hub_cidrs` (public ranges of a MultiKueue hub, on the API ports only).
    """
    allowed = {c for c in (_cidr(a) for a in allowed_cidrs) if c}
    hub = {c for c in (_cidr(a) for a in hub_cidrs) if c and c not in WORLD_CIDRS}

    def judge(ports: Iterable[int], cidrs: Iterable[Any], where: str) -> list[str]:
        return _judge(ports, _sources(cidrs), allowed, hub, where)

    if type_token == EKS_CLUSTER:
        vpc = props.get("vpcConfig") or {}
        # EKS defaults: public endpoint on, reachable from 0.0.0.0/0.
        if vpc.get("endpointPublicAccess", True) is False:
            return []
        cidrs = _list(vpc.get("publicAccessCidrs")) or ["0.0.0.0/0"]
        return judge(KUBE_API_PORTS[:1], cidrs, "vpcConfig.publicAccessCidrs")
    if type_token == SECURITY_GROUP:
        out = []
        for i, rule in enumerate(_list(props.get("ingress"))):
            if not isinstance(rule, Mapping):
                continue
            cidrs = [*_list(rule.get("cidrBlocks")), *_list(rule.get("ipv6CidrBlocks"))]
            out += judge(_aws_rule_ports(rule.get("protocol"), rule.get("fromPort"), rule.get("toPort")), cidrs,
                         f"ingress[{i}]")
        return out
    if type_token == SECURITY_GROUP_RULE:
        if props.get("type") != "ingress":
            return []
        cidrs = [*_list(props.get("cidrBlocks")), *_list(props.get("ipv6CidrBlocks"))]
        return judge(_aws_rule_ports(props.get("protocol"), props.get("fromPort"), props.get("toPort")), cidrs,
                     "the ingress rule")
    if type_token == SG_INGRESS_RULE:
        cidrs = [c for c in (props.get("cidrIpv4"), props.get("cidrIpv6")) if c]
        return judge(_aws_rule_ports(props.get("ipProtocol"), props.get("fromPort"), props.get("toPort")), cidrs,
                     "the ingress rule")
    if type_token == GCP_FIREWALL:
        if str(props.get("direction", "INGRESS")).upper() != "INGRESS":
            return []
        return judge(_gcp_allow_ports(props.get("allows")), _list(props.get("sourceRanges")), "sourceRanges")
    if type_token == GKE_CLUSTER:
        if _get(props, "privateClusterConfig.enablePrivateEndpoint") is True:
            return []
        ip = _get(props, "controlPlaneEndpointsConfig.ipEndpointsConfig") or {}
        if ip.get("enabled") is False or ip.get("enablePublicEndpoint") is False:
            return []
        man = props.get("masterAuthorizedNetworksConfig")
        if not isinstance(man, Mapping):
            # A public endpoint without authorized networks answers every address.
            return judge(KUBE_API_PORTS[:1], ["0.0.0.0/0"],
                         "the public control plane endpoint (no masterAuthorizedNetworksConfig)")
        cidrs = [b.get("cidrBlock") for b in _list(man.get("cidrBlocks")) if isinstance(b, Mapping)]
        return judge(KUBE_API_PORTS[:1], cidrs, "masterAuthorizedNetworksConfig")
    return []


def _tag_locations(type_token: str, props: Mapping[str, Any]) -> tuple[str, ...]:
    if type_token in TAGGABLE_TYPES:
        return TAGGABLE_TYPES[type_token]
    if type_token.startswith("aws:"):
        return tuple(k for k in _AWS_TAG_KEYS if k in props)
    if type_token.startswith("gcp:"):
        return tuple(k for k in _GCP_LABEL_KEYS if k in props)
    return ()


def is_taggable(type_token: str, props: Mapping[str, Any]) -> bool:
    """True when the resource accepts cloud tags/labels: listed in TAGGABLE_TYPES or carrying a tags/labels input."""
    return bool(_tag_locations(type_token, props))


def check_required_tags(type_token: str, props: Mapping[str, Any]) -> list[str]:
    """Every taggable AWS/GCP resource carries non-empty ``owner`` and ``cost-center`` tags (labels on GCP)."""
    out = []
    for location in _tag_locations(type_token, props):
        tags = _get(props, location)
        if isinstance(tags, Sequence) and not isinstance(tags, str):
            # Auto Scaling groups spell tags as [{key, value, propagateAtLaunch}].
            tags = {t.get("key"): t.get("value") for t in tags if isinstance(t, Mapping)}
        tags = tags if isinstance(tags, Mapping) else {}
        missing = [k for k in REQUIRED_TAG_KEYS if not tags.get(k)]
        if missing:
            out.append(f"{location} lacks {', '.join(missing)} (every taggable resource carries the stack's "
                       "owner and cost-center)")
    return out


# Resource checks that need nothing but one resource; the public ingress check also takes the allowed CIDRs.
RESOURCE_CHECKS: Mapping[str, Callable[[str, Mapping[str, Any]], list[str]]] = {
    IMDSV2: check_imdsv2,
    GCS_PROTECTED: check_gcs_bucket,
    GPU_TAINT: check_gpu_taint,
    GCP_GPU_NETWORKS: check_gcp_gpu_networks,
    REQUIRED_TAGS: check_required_tags,
}


# --------------------------------------------------------------------------------------------- stack checks


def _companions(bucket: Resource, resources: Sequence[Resource], types: Collection[str]) -> list[Resource]:
    return [r for r in resources if r.type in types and r.points_to("bucket", r.props.get("bucket"), bucket)]


def check_s3_buckets(resources: Sequence[Resource]) -> list[Violation]:
    """Every S3 bucket has SSE, versioning Enabled and a public access block with all four flags on."""
    out = []
    for bucket in (r for r in resources if r.type in S3_BUCKETS):
        def bad(message: str, bucket: Resource = bucket) -> Violation:
            return Violation(S3_PROTECTED, bucket.key, bucket.type, message)

        sse = _companions(bucket, resources, S3_ENCRYPTION)
        if not any(_list(r.props.get("rules")) for r in sse):
            out.append(bad("no BucketServerSideEncryptionConfiguration with a rule (encryption at rest)"))
        versioning = _companions(bucket, resources, S3_VERSIONING)
        if not any(_get(r.props, "versioningConfiguration.status") == "Enabled" for r in versioning):
            out.append(bad("no BucketVersioning with versioningConfiguration.status Enabled"))
        blocks = _companions(bucket, resources, {S3_PUBLIC_ACCESS_BLOCK})
        if not any(all(r.props.get(f) is True for f in PUBLIC_ACCESS_BLOCK_FLAGS) for r in blocks):
            out.append(bad("no BucketPublicAccessBlock with " + ", ".join(PUBLIC_ACCESS_BLOCK_FLAGS) + " all true"))
    return out


def _launch_template_of(group: Resource, resources: Sequence[Resource]) -> Resource | None:
    spec = group.props.get("launchTemplate")
    if not isinstance(spec, Mapping):
        return None
    for lt in (r for r in resources if r.type == LAUNCH_TEMPLATE):
        if any(group.points_to("launchTemplate", spec.get(k), lt) for k in ("id", "name")):
            return lt
    return None


def check_efa_interfaces(resources: Sequence[Resource]) -> list[Violation]:
    """EKS node groups of EFA shapes launch with one EFA interface on every network card.

    The node group is linked to its launch template by the ``launchTemplate.id``/``name`` inputs. Both wirings
    AWS documents pass: an ``interface`` (ENA) on card 0 plus an ``efa-only`` on each card, or ``efa`` on card 0
    and ``efa-only`` on the others; what counts is EFA devices (efa or efa-only) == ``Shape.network_cards``,
    one per card.
    """
    out = []
    for group in (r for r in resources if r.type == EKS_NODE_GROUP):
        lt = _launch_template_of(group, resources)
        itype = _node_group_instance_type(group.props) or (lt.props.get("instanceType") if lt else None)
        shape = gpu_shape(itype)
        if shape is None or shape.fabric != "efa":
            continue
        if lt is None:
            out.append(Violation(EFA_INTERFACES, group.key, group.type,
                                 f"{itype} is an EFA shape but the node group has no launch template with EFA "
                                 "network interfaces"))
            continue
        nics = [n for n in _list(lt.props.get("networkInterfaces")) if isinstance(n, Mapping)]
        efa = [n for n in nics if n.get("interfaceType") in ("efa", "efa-only")]
        cards = sorted({_int(n.get("networkCardIndex"), 0) or 0 for n in efa})
        want = shape.network_cards
        if len(efa) != want or cards != list(range(want)):
            out.append(Violation(EFA_INTERFACES, group.key, group.type,
                                 f"{itype} has {want} network cards and needs one EFA interface on each; launch "
                                 f"template {lt.name} has {len(efa)} EFA interfaces on cards {cards}"))
    return out


def check_gpu_taints_via_launch_template(resources: Sequence[Resource]) -> list[Violation]:
    """GPU taint for EKS node groups whose instance type is set only in their launch template."""
    out = []
    for group in (r for r in resources if r.type == EKS_NODE_GROUP and not _node_group_instance_type(r.props)):
        lt = _launch_template_of(group, resources)
        itype = lt.props.get("instanceType") if lt else None
        if isinstance(itype, str):
            out += [Violation(GPU_TAINT, group.key, group.type, m) for m in check_gpu_taint(group.type, group.props,
                                                                                           itype)]
    return out


def check_kubeconfig_secret(outputs: Collection[str], secret_outputs: Collection[str]) -> list[str]:
    """Every stack output whose name mentions kubeconfig is a secret (it grants cluster access)."""
    return [f"stack output {name!r} is not a secret; export it with pulumi.Output.secret(...)"
            for name in sorted(outputs) if "kubeconfig" in name.lower() and name not in secret_outputs]


def worker_path(link: Mapping[str, Any] | None, vpn: bool = False) -> str:
    """How the hub reaches a worker: ``vpn`` (the hub builds an HA VPN to it), ``external`` (its ``hubLink``
    names a private link built outside the stacks) or ``public`` (its public endpoint, from NAT addresses)."""
    if vpn:
        return "vpn"
    private_link = str((link or {}).get("privateLink") or "none")
    return "public" if private_link == "none" else private_link


def unreachable_reason(egress: str, access: Mapping[str, Any], worker: str,
                       link: Mapping[str, Any] | None = None, vpn: bool = False) -> str | None:
    """Why hub egress CIDR ``egress`` has no route to the API of worker ``worker`` on the worker's path
    (:func:`worker_path`), whose ``apiAccess`` output is ``access`` (:func:`infra.outputs.api_access_output`) and
    ``hubLink`` output ``link`` (:func:`infra.outputs.hub_link_output`), or None when it has one or is not on
    that path (a public address is the public path's, a private range a private path's).

    A public address reaches only a public endpoint, when it lies in ``publicAccessCidrs`` or ``hubCidrs`` (both
    are on its allow-list): the internet is the route. A private range needs a private link between the two
    networks (the hub's VPN, or ``hubLink.privateLink`` ``external``) and must lie in the worker's ``hubCidrs``
    (the private endpoint's allow-list); an allow-list entry alone routes nothing.
    """
    net = _cidr(egress)
    if net is None:
        return f"hub egress {egress!r} is not a CIDR; fix gpufleet:hub.egressCidrs"
    path = worker_path(link, vpn)
    hub = [c for c in (_cidr(v) for v in _list(access.get("hubCidrs"))) if c]
    public_cidrs = [c for c in (_cidr(v) for v in _list(access.get("publicAccessCidrs"))) if c]
    where = f"gpufleet:cluster.hubCidrs of worker stack {worker}"
    if not _is_public(net):
        if path == "public":
            return None  # a private range is not this worker's path; path_reasons says when nothing else is
        if access.get("privateEndpoint") is not False and _within(net, hub):
            return None
        return (f"worker {worker} (path {path}): hub egress {net} (private) is not authorised on its private API "
                f"endpoint (hubCidrs: {', '.join(hub) or 'none'}); set gpufleet:cluster.hubStack to the hub on "
                f"worker stack {worker} and `pulumi up` it, or add it to {where}")
    if path != "public":
        return None
    if access.get("publicEndpoint") is not True:
        return (f"worker {worker} (path public): hub egress {net} is a public address and the worker's API endpoint "
                f"is private-only; set gpufleet:cluster.publicAccess true and gpufleet:cluster.hubStack to the hub "
                f"on worker stack {worker} (or link it privately: gpufleet:cluster.hubPrivateLink)")
    if _within(net, [*public_cidrs, *hub]):
        return None
    return (f"worker {worker} (path public): hub egress {net} is not on its public endpoint allow-list "
            f"({', '.join([*public_cidrs, *hub]) or 'none'}); set gpufleet:cluster.hubStack to the hub on worker "
            f"stack {worker} and `pulumi up` it, or add it to {where}")


def path_reasons(egress: Sequence[Any], access: Mapping[str, Any], worker: str,
                 link: Mapping[str, Any] | None = None, vpn: bool = False) -> list[str]:
    """What the path to ``worker`` (:func:`worker_path`) needs besides each egress range's route
    (:func:`unreachable_reason`): a range of the path's kind among the hub's ``egress``; on a private path the
    public endpoint off (the kubeconfig the hub dials names the public endpoint while it is on, so the link
    would idle), authorised networks enforced on the private endpoint (GKE
    ``privateEndpointEnforcementEnabled``; otherwise anything routed from the hub's network reaches it), and a
    control plane the link reaches (GKE: Private Service Connect, or VPC peering with the routes exported)."""
    path = worker_path(link, vpn)
    nets = [n for n in (_cidr(e) for e in egress) if n]
    out: list[str] = []
    if path == "public":
        if not any(_is_public(n) for n in nets):
            private = ", ".join(str(n) for n in nets) or "none"
            out.append(f"worker {worker} (path public): no route to worker {worker} from the hub: "
                       f"gpufleet:hub.egressCidrs lists no public address for its public endpoint, and the private "
                       f"ranges ({private}) reach it only over a private link (gpufleet:cluster.hubPrivateLink is "
                       f"none); add the hub's NAT addresses, or build the link and set hubPrivateLink on worker "
                       f"stack {worker}")
        return out
    if path == "vpn" and not vpn:
        out.append(f"worker {worker} (path vpn): its gpufleet:cluster.hubPrivateLink is vpn but this hub builds no VPN "
                   "to it; add it to gpufleet:hub.vpn.workers")
    if not any(not _is_public(n) for n in nets):
        out.append(f"worker {worker} (path {path}): gpufleet:hub.egressCidrs lists no private range to reach its "
                   "private endpoint from; add the hub VPC's range")
    if access.get("publicEndpoint") is not False:
        out.append(f"worker {worker} (path {path}): its public API endpoint is on, so the kubeconfig the hub dials "
                   f"names it and hub traffic goes over NAT, not the {path} link; set gpufleet:cluster.publicAccess "
                   f"false on worker stack {worker}")
    if access.get("privateEndpointEnforced") is False:
        out.append(f"worker {worker} (path {path}): authorised networks are not enforced on its private endpoint, so "
                   "anything routed from the hub's network reaches it; `pulumi up` worker stack "
                   f"{worker} with this version (GKE privateEndpointEnforcementEnabled)")
    plane = access.get("controlPlane")
    if plane is not None and plane != "psc" and access.get("peeringRoutesExported") is not True:
        out.append(f"worker {worker} (path {path}): its control plane is reached by VPC peering ({plane}), which does "
                   "not carry the link's routes unless the peering exports them; use a Private Service Connect "
                   "cluster or export custom routes on its peering")
    return out


def _ranges(value: Any) -> list[tuple[str, str]]:
    """``(key, cidr)`` of an ``addressRanges`` / ``hubRanges`` list (invalid entries dropped)."""
    out = []
    for item in _list(value):
        if isinstance(item, Mapping) and _cidr(item.get("cidr")):
            out.append((str(item.get("key") or "?"), str(_cidr(item.get("cidr")))))
    return out


def range_overlap_reasons(reach: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(worker, reason)`` for every overlap among the hub's private ranges (``hubRanges``) and the workers'
    ``hubLink.addressRanges``, naming both stacks and ranges: the hub routes to each worker by address, so an
    overlap leaves one of the two unreachable."""
    seen: list[tuple[str, str, str]] = []
    first = next((e for e in reach.values() if isinstance(e, Mapping)), {})
    for key, cidr in _ranges(first.get("hubRanges")):
        seen.append(("the hub", key, cidr))
    out = []
    for worker, entry in sorted(reach.items()):
        link = entry.get("hubLink") if isinstance(entry, Mapping) else None
        for key, cidr in _ranges(link.get("addressRanges") if isinstance(link, Mapping) else None):
            net = ipaddress.ip_network(cidr)
            for other, other_key, other_cidr in seen:
                other_net = ipaddress.ip_network(other_cidr)
                if other != str(worker) and net.version == other_net.version and net.overlaps(other_net):
                    where = "the hub" if other == "the hub" else f"worker {other}"
                    out.append((str(worker), f"{cidr} ({key} of worker {worker}) overlaps {other_cidr} ({other_key} of "
                                             f"{where}): a hub and its workers need disjoint address ranges; change "
                                             "one of them"))
            seen.append((str(worker), key, cidr))
    return out


def check_hub_reachability(outputs: Mapping[str, Any]) -> list[Violation]:
    """A hub stack has a route to every worker API on the worker's path (public, or a private link) from every
    egress CIDR of that path, with what the path needs (:func:`path_reasons`), over address ranges that do not
    overlap (its ``reachability`` output: per worker key, the hub's ``egressCidrs`` and ``hubRanges`` and the
    worker's ``apiAccess`` and ``hubLink``). Other stacks have no such output and pass."""
    reach = outputs.get("reachability")
    if not isinstance(reach, Mapping):
        return []
    out = []
    for worker, entry in sorted(reach.items()):
        entry = entry if isinstance(entry, Mapping) else {}
        access = entry.get("apiAccess")
        if not isinstance(access, Mapping):
            out.append(Violation(HUB_REACHES_WORKERS, str(worker), STACK_REFERENCE,
                                 f"worker {worker} exports no apiAccess; `pulumi up` the worker stack with this "
                                 f"version and gpufleet:cluster.hubStack naming this hub first"))
            continue
        link = entry.get("hubLink") if isinstance(entry.get("hubLink"), Mapping) else None
        vpn = entry.get("vpn") is True
        for egress in _list(entry.get("egressCidrs")):
            reason = unreachable_reason(str(egress), access, str(worker), link, vpn=vpn)
            if reason:
                out.append(Violation(HUB_REACHES_WORKERS, str(worker), STACK_REFERENCE, reason))
        for reason in path_reasons(_list(entry.get("egressCidrs")), access, str(worker), link, vpn=vpn):
            out.append(Violation(HUB_REACHES_WORKERS, str(worker), STACK_REFERENCE, reason))
    for worker, reason in range_overlap_reasons(reach):
        out.append(Violation(HUB_REACHES_WORKERS, worker, STACK_REFERENCE, reason))
    return out


STACK_CHECKS: Mapping[str, Callable[[Sequence[Resource]], list[Violation]]] = {
    S3_PROTECTED: check_s3_buckets,
    EFA_INTERFACES: check_efa_interfaces,
    GPU_TAINT: check_gpu_taints_via_launch_template,
}


# --------------------------------------------------------------------------------------------- stateful resources

# What holds data or running work: replacing one loses checkpoints (file systems, buckets), running jobs (node
# groups, Namespaces and the Jobs in them). A replacement of one must be acknowledged (gpufleet:allowReplace).
FILE_SYSTEM_TYPES = frozenset({"aws:fsx/lustreFileSystem:LustreFileSystem", "gcp:lustre/instance:Instance",
                               "gcp:filestore/instance:Instance"})
NAMESPACE = "kubernetes:core/v1:Namespace"
PERSISTENT_VOLUME = "kubernetes:core/v1:PersistentVolume"
# Protected (and retained on delete) by the stacks: infra.protect applies it.
PROTECTED_TYPES = frozenset({*FILE_SYSTEM_TYPES, *S3_BUCKETS, GCS_BUCKET, NAMESPACE, PERSISTENT_VOLUME})
STATEFUL_TYPES = frozenset({*FILE_SYSTEM_TYPES, *S3_BUCKETS, GCS_BUCKET, NAMESPACE, EKS_NODE_GROUP, GKE_NODE_POOL})


def check_stateful_replacements(rows: Iterable[Mapping[str, Any]], allow_replace: Collection[str]
                                ) -> list[Violation]:
    """``stateful-replace-acknowledged``: a change (rows of :func:`infra.replace.replacements`) that replaces a
    stateful resource, or deletes one that holds data, unless ``gpufleet:allowReplace`` lists it."""
    out = []
    for row in rows:
        name, typ, action = str(row.get("name")), str(row.get("type")), row.get("action")
        if typ not in STATEFUL_TYPES or name in allow_replace:
            continue
        if action == "replace" or (action == "delete" and typ in PROTECTED_TYPES):
            why = "; ".join(str(r) for r in row.get("reasons") or [])
            out.append(Violation(STATEFUL_REPLACE, name, typ,
                                 f"`pulumi up` would {action} it ({why}); keep the inputs that force it as they were, "
                                 f"or acknowledge it by listing {name} in gpufleet:allowReplace"))
    return out


def check_stateful_protected(items: Iterable[tuple[str, str, bool]], allow_replace: Collection[str]
                             ) -> list[Violation]:
    """``stateful-protected``: every file system, bucket, Namespace and PersistentVolume (``(name, type,
    protect)``) is protected, unless ``gpufleet:allowReplace`` lists it; so Pulumi refuses a replacement nobody
    acknowledged."""
    return [Violation(STATEFUL_PROTECTED, name, typ, "holds checkpoints or running work but is not protected; "
                      "declare it with infra.protect.stateful (protect and retainOnDelete)")
            for name, typ, protect in items if typ in PROTECTED_TYPES and not protect and name not in allow_replace]


def allow_replace_of(config: Mapping[str, Any] | None) -> frozenset[str]:
    """``gpufleet:allowReplace`` from a stack's raw config (the ``gpufleet:`` keys without prefix); empty when
    absent or malformed (then nothing is acknowledged)."""
    value = (config or {}).get("allowReplace")
    return frozenset(v for v in value if isinstance(v, str)) if isinstance(value, list) else frozenset()


def hub_egress_cidrs(resources: Sequence[Resource], hub_stack: str | None) -> frozenset[str]:
    """The egress CIDRs hub stack ``hub_stack`` exports, as the worker's StackReference to it read them (its
    ``outputs`` property): what ``gpufleet:cluster.hubStack`` authorises on the worker's API besides its stack
    config. Empty without a hub stack or reference; never the whole internet."""
    if not hub_stack:
        return frozenset()
    found: set[str] = set()
    for r in resources:
        if r.type == STACK_REFERENCE and r.props.get("name") == hub_stack:
            outputs = r.props.get("outputs")
            egress = outputs.get("egressCidrs") if isinstance(outputs, Mapping) else None
            found |= {c for c in (_cidr(v) for v in _list(egress)) if c and c not in WORLD_CIDRS}
    return frozenset(found)


def run_all(resources: Sequence[Resource], *, outputs: Collection[str] | Mapping[str, Any] = (),
            secret_outputs: Collection[str] = (), allowed_cidrs: Collection[str] = (),
            hub_cidrs: Collection[str] = (), hub_stack: str | None = None, stack: str = "stack") -> list[Violation]:
    """Every mandatory policy over one stack's resources and outputs, in a stable order.

    ``outputs`` are the stack output names, or the outputs themselves (then the hub's reachability is checked).
    ``hub_stack`` (``gpufleet:cluster.hubStack``): the egress that hub exports is allowed like ``hub_cidrs``.
    """
    hub_cidrs = frozenset(hub_cidrs) | hub_egress_cidrs(resources, hub_stack)
    out: list[Violation] = []
    for r in resources:
        for rule, check in RESOURCE_CHECKS.items():
            out += [Violation(rule, r.key, r.type, m) for m in check(r.type, r.props)]
        out += [Violation(PUBLIC_INGRESS, r.key, r.type, m)
                for m in check_public_ingress(r.type, r.props, allowed_cidrs, hub_cidrs)]
    for check_stack in STACK_CHECKS.values():
        out += check_stack(resources)
    out += [Violation(KUBECONFIG_SECRET, stack, "pulumi:pulumi:Stack", m)
            for m in check_kubeconfig_secret(list(outputs), secret_outputs)]
    if isinstance(outputs, Mapping):
        out += check_hub_reachability(outputs)
    return out
