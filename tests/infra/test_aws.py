"""The AWS stacks under Pulumi mocks: EFA wiring, placement, storage, IAM scope, outputs and config errors.

Each ``stacks/Pulumi.aws-*.yaml`` runs once (module-scoped fixture); expectations come from the stack's own
parsed config and the shape data, so a new AWS stack file is covered without touching this file.
"""

from __future__ import annotations

import base64
import email
import glob
import ipaddress
import json
import os
from collections.abc import Iterator
from typing import Any

import pulumi
import pytest
import yaml

from infra import mockrun
from infra.aws.layout import Zone, pick_system_azs
from infra.config import ConfigError, StackConfig, load_stack_file, parse
from infra.mockrun import Registered, RunResult, run_stack

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AWS_STACKS = sorted(glob.glob(os.path.join(ROOT, "stacks", "Pulumi.aws-*.yaml")))
BASE_STACK = os.path.join(ROOT, "stacks", "Pulumi.aws-use1-p5.yaml")

LT = "aws:ec2/launchTemplate:LaunchTemplate"
NG = "aws:eks/nodeGroup:NodeGroup"
PG = "aws:ec2/placementGroup:PlacementGroup"
SUBNET = "aws:ec2/subnet:Subnet"
# Types that take tags in pulumi-aws; the tag policy reads them from the inputs.
TAGGABLE = {
    "aws:ec2/vpc:Vpc", SUBNET, "aws:ec2/internetGateway:InternetGateway", "aws:ec2/eip:Eip",
    "aws:ec2/natGateway:NatGateway", "aws:ec2/routeTable:RouteTable", "aws:ec2/securityGroup:SecurityGroup",
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule", "aws:ec2/vpcEndpoint:VpcEndpoint", PG, LT, NG,
    "aws:eks/cluster:Cluster", "aws:eks/addon:Addon", "aws:eks/accessEntry:AccessEntry", "aws:iam/role:Role",
    "aws:iam/openIdConnectProvider:OpenIdConnectProvider", "aws:kms/key:Key", "aws:s3/bucket:Bucket",
    "aws:fsx/lustreFileSystem:LustreFileSystem", "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation",
    "aws:cloudwatch/logGroup:LogGroup",
}


def _stack_id(path: str) -> str:
    return os.path.basename(path).removeprefix("Pulumi.").removesuffix(".yaml")


@pytest.fixture(scope="module", params=AWS_STACKS, ids=[_stack_id(p) for p in AWS_STACKS])
def stack(request: pytest.FixtureRequest) -> tuple[StackConfig, RunResult]:
    """One mocked run per AWS stack file, with its parsed config."""
    return load_stack_file(request.param), run_stack(request.param)


def by_id(run: RunResult, resource_id: str) -> Registered:
    """The resource a mocked ID (``<name>-id``) points at."""
    return run.named(resource_id.removesuffix("-id"))


def pool_node_group(run: RunResult, pool_name: str) -> Registered:
    groups = [r for r in run.of_type(NG) if (r.inputs.get("labels") or {}).get("gpufleet.io/pool") == pool_name]
    assert len(groups) == 1, f"expected one node group labelled gpufleet.io/pool={pool_name}"
    return groups[0]


def launch_template_of(run: RunResult, node_group: Registered) -> Registered:
    return by_id(run, node_group.inputs["launchTemplate"]["id"])


def subnet_zone(subnet: Registered) -> str:
    return str(subnet.inputs.get("availabilityZoneId") or subnet.inputs.get("availabilityZone"))


def test_aws_stacks_exist() -> None:
    names = {_stack_id(p) for p in AWS_STACKS}
    assert {"aws-use1-p5", "aws-usw2-p4d"} <= names


# ------------------------------------------------------------------ EFA fabric


def test_launch_template_has_one_efa_interface_per_network_card(stack: tuple[StackConfig, RunResult]) -> None:
    cfg, run = stack
    efa_sg = run.outputs["efaSecurityGroupId"]
    assert efa_sg
    for pool in cfg.node_pools:
        assert pool.shape.fabric == "efa", "the shipped AWS stacks use EFA shapes"
        lt = launch_template_of(run, pool_node_group(run, pool.name))
        nics = lt.inputs["networkInterfaces"]
        assert len(nics) == pool.shape.network_cards
        assert [int(n["networkCardIndex"]) for n in nics] == list(range(pool.shape.network_cards))
        assert nics[0]["interfaceType"] == "efa" and int(nics[0]["deviceIndex"]) == 0
        for nic in nics[1:]:
            assert nic["interfaceType"] == "efa-only"
            assert int(nic["deviceIndex"]) == 1
        for nic in nics:
            groups = nic["securityGroups"]
            assert efa_sg in groups
            assert len(groups) == 2 and all(groups), "EFA SG plus the EKS cluster SG"
            assert "subnetId" not in nic, "managed node groups reject subnets in launch templates"


def test_placement_group_is_cluster_and_node_groups_stay_in_its_zone(stack: tuple[StackConfig, RunResult]) -> None:
    cfg, run = stack
    exported = run.outputs["placementGroups"]
    for pool in cfg.node_pools:
        ng = pool_node_group(run, pool.name)
        lt = launch_template_of(run, ng)
        if pool.reservation:
            # Reserved capacity (Capacity Block, ODCR) is placed by the reservation, never by our group.
            assert "placement" not in lt.inputs
            assert [subnet_zone(by_id(run, s)) for s in ng.inputs["subnetIds"]] == [pool.zone]
            continue
        pg = run.named(lt.inputs["placement"]["groupName"])
        assert pg.type == PG
        assert pg.inputs["strategy"] == "cluster"
        pg_zone = pg.inputs["tags"]["gpufleet.io/zone"]
        assert pg_zone == pool.zone
        assert exported[pool.zone] == pg.name
        subnets = [by_id(run, s) for s in ng.inputs["subnetIds"]]
        assert len(subnets) == 1
        assert all(subnet_zone(s) == pg_zone for s in subnets)
    # One placement group per zone, shared by that zone's pools.
    assert len(run.of_type(PG)) == len({p.zone for p in cfg.node_pools if not p.reservation})


def test_efa_security_group_allows_all_traffic_from_and_to_itself(stack: tuple[StackConfig, RunResult]) -> None:
    _, run = stack
    sg = run.outputs["efaSecurityGroupId"]
    for kind in ("Ingress", "Egress"):
        rules = [r for r in run.of_type(f"aws:vpc/securityGroup{kind}Rule:SecurityGroup{kind}Rule")
                 if r.inputs.get("securityGroupId") == sg]
        assert any(r.inputs.get("ipProtocol") == "-1" and r.inputs.get("referencedSecurityGroupId") == sg
                   for r in rules), f"no all-traffic self {kind.lower()} rule on the EFA security group"


def test_every_launch_template_requires_imdsv2(stack: tuple[StackConfig, RunResult]) -> None:
    _, run = stack
    lts = run.of_type(LT)
    assert len(lts) == len(run.of_type(NG))
    for lt in lts:
        meta = lt.inputs["metadataOptions"]
        assert meta["httpTokens"] == "required"
        # 1: pods in their own network namespace cannot reach IMDS and take the node role.
        assert int(meta["httpPutResponseHopLimit"]) == 1


ADDON = "aws:eks/addon:Addon"
ATTACH = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
ROLE = "aws:iam/role:Role"


def role_of(run: RunResult, arn: str) -> Registered:
    """The role a mocked ARN (``arn:mock:<type>:<name>``) points at."""
    role = run.named(arn.rsplit(":", 1)[-1])
    assert role.type == ROLE
    return role


def attached_policies(run: RunResult, role: Registered) -> set[str]:
    """Names of the managed policies attached to ``role`` (the mocks name a role after its resource)."""
    return {a.inputs["policyArn"].rsplit("/", 1)[-1] for a in run.of_type(ATTACH) if a.inputs["role"] == role.name}


def test_vpc_cni_has_its_own_pod_identity_role_and_the_node_role_no_cni_rights(
        stack: tuple[StackConfig, RunResult]) -> None:
    _, run = stack
    (cni,) = [a for a in run.of_type(ADDON) if a.inputs["addonName"] == "vpc-cni"]
    (assoc,) = cni.inputs["podIdentityAssociations"]
    assert assoc["serviceAccount"] == "aws-node"
    cni_role = role_of(run, assoc["roleArn"])
    trust = json.loads(cni_role.inputs["assumeRolePolicy"])
    assert trust["Statement"][0]["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert attached_policies(run, cni_role) == {"AmazonEKS_CNI_Policy"}
    # Pod Identity needs its agent on every node.
    assert "eks-pod-identity-agent" in {a.inputs["addonName"] for a in run.of_type(ADDON)}
    node_roles = {ng.inputs["nodeRoleArn"] for ng in run.of_type(NG)}
    assert len(node_roles) == 1
    (node_role_ref,) = node_roles
    node_policies = attached_policies(run, role_of(run, node_role_ref))
    assert "AmazonEKSWorkerNodePolicy" in node_policies
    assert "AmazonEKS_CNI_Policy" not in node_policies


def test_node_monitoring_agent_is_pinned_where_node_repair_is_on(stack: tuple[StackConfig, RunResult]) -> None:
    cfg, run = stack
    repaired = [pool_node_group(run, p.name) for p in cfg.node_pools]
    assert all(ng.inputs["nodeRepairConfig"]["enabled"] is True for ng in repaired)
    (agent,) = [a for a in run.of_type(ADDON) if a.inputs["addonName"] == "eks-node-monitoring-agent"]
    assert agent.inputs.get("addonVersion", "").startswith("v"), "the agent is pinned to an add-on version"


def test_gpu_node_groups_capacity_labels_taint_and_local_nvme(stack: tuple[StackConfig, RunResult]) -> None:
    cfg, run = stack
    for pool in cfg.node_pools:
        ng = pool_node_group(run, pool.name)
        assert ng.inputs["capacityType"] == pool.capacity
        assert ng.inputs["amiType"] == "AL2023_x86_64_NVIDIA"
        assert ng.inputs["version"] == cfg.cluster.kubernetes_version
        scaling = {k: int(v) for k, v in ng.inputs["scalingConfig"].items()}
        assert scaling == {"minSize": pool.min_nodes, "desiredSize": pool.desired_nodes, "maxSize": pool.max_nodes}
        labels = ng.inputs["labels"]
        assert labels["gpufleet.io/gpu"] == pool.shape.accelerator
        assert labels["gpufleet.io/capacity"] == pool.capacity_kind
        assert labels["nvidia.com/gpu.present"] == "true"
        assert ng.inputs["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"}]
        lt = launch_template_of(run, ng)
        assert lt.inputs["instanceType"] == pool.shape.name
        if pool.shape.instance_store_gb > 0:
            mime = email.message_from_string(base64.b64decode(lt.inputs["userData"]).decode())
            assert mime.is_multipart()
            (part,) = [p for p in mime.walk() if p.get_content_type() == "application/node.eks.aws"]
            node_config = yaml.safe_load(str(part.get_payload()))
            assert node_config["apiVersion"] == "node.eks.aws/v1alpha1"
            assert node_config["kind"] == "NodeConfig"
            assert node_config["spec"]["instance"]["localStorage"]["strategy"] == "RAID0"


def test_efa_nodes_reserve_the_huge_pages_efa_pods_request(stack: tuple[StackConfig, RunResult]) -> None:
    cfg, run = stack
    for pool in cfg.node_pools:
        lt = launch_template_of(run, pool_node_group(run, pool.name))
        data = lt.inputs.get("userData")
        mime = email.message_from_string(base64.b64decode(data).decode()) if data else None
        scripts = [str(p.get_payload()) for p in mime.walk()
                   if p.get_content_type() == "text/x-shellscript"] if mime else []
        if pool.shape.fabric != "efa":
            assert scripts == []
            continue
        (script,) = scripts
        assert script.startswith("#!/bin/bash")
        # 2560 pages x 2 MiB = the 5120Mi of hugepages-2Mi every EFA pod requests, set now and on reboot.
        assert "sysctl -w vm.nr_hugepages=2560" in script
        assert "vm.nr_hugepages = 2560" in script and "/etc/sysctl.d/" in script


# ------------------------------------------------------------------ network and cluster


def test_subnets_fit_the_vpc_and_span_two_azs(stack: tuple[StackConfig, RunResult]) -> None:
    cfg, run = stack
    vpc = ipaddress.ip_network(cfg.network.vpc_cidr)
    nets = [ipaddress.ip_network(s.inputs["cidrBlock"]) for s in run.of_type(SUBNET)]
    assert all(n.subnet_of(vpc) for n in nets)  # type: ignore[arg-type]
    assert not any(a.overlaps(b) for i, a in enumerate(nets) for b in nets[i + 1:])
    system = [s for s in run.of_type(SUBNET) if "-private-" in s.name]
    assert len({subnet_zone(s) for s in system}) == cfg.network.az_count >= 2
    gpu_zone = cfg.gpu_zone or cfg.node_pools[0].zone
    assert gpu_zone in {subnet_zone(s) for s in system}
    assert run.outputs["systemZones"][0] == gpu_zone
    (nat,) = run.of_type("aws:ec2/natGateway:NatGateway")
    assert subnet_zone(by_id(run, nat.inputs["subnetId"])) == gpu_zone, "NAT next to the GPUs: no cross-AZ pulls"


def test_eks_cluster_is_private_pinned_and_api_authenticated(stack: tuple[StackConfig, RunResult]) -> None:
    cfg, run = stack
    (eks,) = run.of_type("aws:eks/cluster:Cluster")
    assert eks.inputs["version"] == cfg.cluster.kubernetes_version
    assert eks.inputs["accessConfig"]["authenticationMode"] == "API"
    assert eks.inputs["vpcConfig"]["endpointPrivateAccess"] is True
    assert eks.inputs["vpcConfig"]["endpointPublicAccess"] is cfg.cluster.public_access
    addons = {a.inputs["addonName"] for a in run.of_type("aws:eks/addon:Addon")}
    assert {"vpc-cni", "kube-proxy", "coredns", "eks-pod-identity-agent", "eks-node-monitoring-agent"} <= addons
    assert len(run.of_type("aws:iam/openIdConnectProvider:OpenIdConnectProvider")) == 1


def test_ami_release_is_pinned_on_every_node_group_when_configured() -> None:
    pinned = run_stack(BASE_STACK, config_override={"cluster": {"amiReleaseVersion": "1.35.0-20260512"}})
    groups = pinned.of_type(NG)
    assert len(groups) >= 2 and all(g.inputs["releaseVersion"] == "1.35.0-20260512" for g in groups)
    for g in groups:
        # Rolling updates replace one node at a time; nothing else moves a GPU node group.
        assert int(g.inputs["updateConfig"]["maxUnavailable"]) == 1
    unpinned = run_stack(BASE_STACK)
    assert all("releaseVersion" not in g.inputs for g in unpinned.of_type(NG))


def test_fsx_csi_driver_is_pinned_with_its_own_role_where_fsx_is(stack: tuple[StackConfig, RunResult]) -> None:
    cfg, run = stack
    releases = [r for r in run.of_type("kubernetes:helm.sh/v3:Release")
                if r.inputs.get("chart") == "aws-fsx-csi-driver"]
    if cfg.checkpoint.filesystem.kind != "fsx":
        assert releases == []
        return
    (release,) = releases
    assert release.inputs["version"] == "1.17.0"
    assert release.inputs["repositoryOpts"]["repo"] == "https://kubernetes-sigs.github.io/aws-fsx-csi-driver"
    values = release.inputs["values"]
    assert values["image"]["tag"] == "v1.9.0"
    assert values["node"]["tolerateAllTaints"] is True, "the node plugin must run on the tainted GPU nodes"
    assert values["controller"]["region"] == cfg.region  # no IMDS for pods: the region is given
    sa = values["controller"]["serviceAccount"]
    role = role_of(run, sa["annotations"]["eks.amazonaws.com/role-arn"])
    trust = json.loads(role.inputs["assumeRolePolicy"])
    (subject,) = [v for k, v in trust["Statement"][0]["Condition"]["StringEquals"].items() if k.endswith(":sub")]
    assert subject == f"system:serviceaccount:kube-system:{sa['name']}"
    # Static volumes only: the controller may describe file systems and nothing else (no AmazonFSxFullAccess,
    # which could delete the checkpoint file system).
    assert [a for a in run.of_type(ATTACH) if a.inputs["role"] == role.name] == []
    (policy,) = [p for p in run.of_type("aws:iam/rolePolicy:RolePolicy") if p.inputs["role"] == f"{role.name}-id"]
    statements = json.loads(policy.inputs["policy"])["Statement"]
    assert [(st["Effect"], st["Action"]) for st in statements] == [("Allow", ["fsx:DescribeFileSystems"])]
    assert not any("FSxFullAccess" in str(a.inputs.get("policyArn")) for a in run.of_type(ATTACH))


SG_RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"


def hub_sg(run: RunResult) -> str:
    """The control plane's own security group (EKS puts it on the endpoint's interfaces only)."""
    (eks,) = run.of_type("aws:eks/cluster:Cluster")
    (sg_id,) = eks.inputs["vpcConfig"]["securityGroupIds"]
    return str(sg_id)


def cluster_sg(run: RunResult) -> str:
    """The cluster security group EKS creates and puts on every node (the mocks name it after the cluster)."""
    (eks,) = run.of_type("aws:eks/cluster:Cluster")
    return f"sg-{eks.name}-cluster"


def test_api_rules_sit_on_a_control_plane_group_no_node_carries(stack: tuple[StackConfig, RunResult]) -> None:
    cfg, run = stack
    api = by_id(run, hub_sg(run))
    assert api.type == "aws:ec2/securityGroup:SecurityGroup" and api.name.endswith("-api")
    # Nothing on the cluster security group (every node interface carries it) opens 443.
    assert [r for r in run.of_type(SG_RULE) if r.inputs.get("securityGroupId") == cluster_sg(run)] == []
    for lt in run.of_type(LT):
        groups = {g for ni in lt.inputs.get("networkInterfaces") or [] for g in ni.get("securityGroups") or []}
        groups |= set(lt.inputs.get("vpcSecurityGroupIds") or [])
        assert hub_sg(run) not in groups, lt.name
    api_rules = [r for r in run.of_type(SG_RULE) if r.inputs.get("securityGroupId") == hub_sg(run)]
    # One rule per distinct CIDR: those configured plus the hub's egress read by StackReference (hubStack).
    cidrs = {r.inputs["cidrIpv4"] for r in api_rules}
    assert len(api_rules) == len(cidrs) and set(cfg.cluster.hub_cidrs) | set(cfg.cluster.operator_cidrs) <= cidrs


def hub_rules(run: RunResult) -> dict[str, Registered]:
    """Ingress rules on the control plane's security group, by CIDR."""
    return {r.inputs["cidrIpv4"]: r for r in run.of_type(SG_RULE) if r.inputs.get("securityGroupId") == hub_sg(run)}


def test_example_worker_opens_its_public_endpoint_to_the_hubs_egress_only(stack: tuple[StackConfig, RunResult]) -> None:
    cfg, run = stack
    # The example hub's NAT addresses, read from the hub stack (gpufleet:cluster.hubStack) by StackReference.
    egress = list(load_stack_file(os.path.join(ROOT, "stacks", "Pulumi.hub.yaml")).hub.egress_cidrs)
    assert cfg.cluster.hub_stack and egress, "every example worker authorises the example hub"
    (eks,) = run.of_type("aws:eks/cluster:Cluster")
    assert eks.inputs["vpcConfig"]["endpointPublicAccess"] is True
    assert eks.inputs["vpcConfig"]["publicAccessCidrs"] == egress
    for rule in hub_rules(run).values():
        assert (rule.inputs["ipProtocol"], rule.inputs["fromPort"], rule.inputs["toPort"]) == ("tcp", 443, 443)
    assert run.outputs["apiAccess"] == {"privateEndpoint": True, "publicEndpoint": True, "publicAccessCidrs": [],
                                        "hubCidrs": egress, "operatorCidrs": list(cfg.cluster.operator_cidrs),
                                        "privateEndpointEnforced": True}  # the endpoint's security group


def test_operator_cidrs_reach_the_private_endpoint_on_443_once() -> None:
    cluster = {"hubCidrs": ["10.200.0.0/20"], "operatorCidrs": ["172.20.0.0/16", "10.200.0.0/20"]}
    run = run_stack(BASE_STACK, config_override={"cluster": cluster})
    rules = [r for r in run.of_type(SG_RULE) if r.inputs.get("securityGroupId") == hub_sg(run)]
    # One rule per CIDR: EKS refuses a duplicate rule, and the hub's range is already open.
    assert sorted(r.inputs["cidrIpv4"] for r in rules) == ["10.200.0.0/20", "172.20.0.0/16"]
    for rule in rules:
        assert (rule.inputs["ipProtocol"], rule.inputs["fromPort"], rule.inputs["toPort"]) == ("tcp", 443, 443)
    assert run.outputs["apiAccess"]["operatorCidrs"] == ["172.20.0.0/16", "10.200.0.0/20"]
    # A public operator range on a public endpoint also lands on its allow-list.
    public = run_stack(BASE_STACK, config_override={"cluster": {
        "publicAccess": True, "publicAccessCidrs": ["203.0.113.0/24"], "operatorCidrs": ["198.51.100.9/32"]}})
    (eks,) = public.of_type("aws:eks/cluster:Cluster")
    assert eks.inputs["vpcConfig"]["publicAccessCidrs"] == ["203.0.113.0/24", "198.51.100.9/32"]


def test_public_endpoint_allows_public_hub_cidrs_too() -> None:
    cluster = {"publicAccess": True, "publicAccessCidrs": ["203.0.113.0/24"],
               "hubCidrs": ["198.51.100.7/32", "10.200.0.0/20", "203.0.113.0/24"]}
    run = run_stack(BASE_STACK, config_override={"cluster": cluster})
    (eks,) = run.of_type("aws:eks/cluster:Cluster")
    # Private ranges reach the private endpoint only (EKS refuses them on the public allow-list).
    assert eks.inputs["vpcConfig"]["publicAccessCidrs"] == ["203.0.113.0/24", "198.51.100.7/32"]
    assert set(hub_rules(run)) == {"198.51.100.7/32", "10.200.0.0/20", "203.0.113.0/24"}
    assert run.outputs["apiAccess"]["publicEndpoint"] is True
    assert run.outputs["apiAccess"]["publicAccessCidrs"] == ["203.0.113.0/24"]
    no_hub = run_stack(BASE_STACK, config_override={"cluster": {"publicAccess": False}})
    assert hub_rules(no_hub) == {} and no_hub.outputs["apiAccess"]["hubCidrs"] == []


def test_every_aws_resource_uses_the_stack_provider_and_carries_tags(stack: tuple[StackConfig, RunResult]) -> None:
    cfg, run = stack
    (provider,) = run.of_type("pulumi:providers:aws")
    assert provider.inputs["region"] == cfg.region
    for r in run.resources:
        if r.type.startswith("aws:"):
            assert r.provider and f"::{provider.name}::" in r.provider, f"{r.name} not on the stack's provider"
        if r.type in TAGGABLE:
            tags = r.inputs.get("tags") or {}
            for key, value in cfg.tags.items():
                assert tags.get(key) == value, f"{r.type} {r.name} lacks tag {key}"
        if r.type == LT:
            for spec in r.inputs["tagSpecifications"]:
                assert spec["tags"]["owner"] == cfg.tags["owner"]


def test_kubeconfig_output_is_secret_and_uses_aws_eks_get_token(stack: tuple[StackConfig, RunResult]) -> None:
    cfg, run = stack
    assert "kubeconfig" in run.secret_outputs
    kc = yaml.safe_load(run.outputs["kubeconfig"])
    (user,) = kc["users"]
    exec_ = user["user"]["exec"]
    assert exec_["command"] == "aws"
    args = exec_["args"]
    assert args[:2] == ["eks", "get-token"]
    assert args[args.index("--cluster-name") + 1] == cfg.cluster_name
    assert args[args.index("--region") + 1] == cfg.region
    assert kc["clusters"][0]["cluster"]["server"].startswith("https://")


# ------------------------------------------------------------------ checkpoint storage


def _bucket(run: RunResult) -> Registered:
    (bucket,) = run.of_type("aws:s3/bucket:Bucket")
    return bucket


def _for_bucket(run: RunResult, type_token: str) -> Registered:
    bucket_id = f"{_bucket(run).name}-id"
    found = [r for r in run.of_type(type_token) if r.inputs.get("bucket") == bucket_id]
    assert len(found) == 1, f"expected one {type_token} for the bucket"
    return found[0]


def test_bucket_is_kms_encrypted_versioned_private_and_tls_only(stack: tuple[StackConfig, RunResult]) -> None:
    cfg, run = stack
    keys = [k for k in run.of_type("aws:kms/key:Key") if k.name.endswith("-ckpt-key")]
    assert len(keys) == 1
    key = keys[0]
    assert key.inputs["enableKeyRotation"] is True
    key_arn = run.outputs["checkpointKmsKeyArn"]
    assert key_arn == f"arn:mock:aws:kms/key:Key:{key.name}"

    (rule,) = _for_bucket(run, "aws:s3/bucketServerSideEncryptionConfiguration:"
                               "BucketServerSideEncryptionConfiguration").inputs["rules"]
    assert rule["applyServerSideEncryptionByDefault"] == {"sseAlgorithm": "aws:kms", "kmsMasterKeyId": key_arn}
    assert rule["bucketKeyEnabled"] is True

    versioning = _for_bucket(run, "aws:s3/bucketVersioning:BucketVersioning")
    assert versioning.inputs["versioningConfiguration"]["status"] == "Enabled"

    pab = _for_bucket(run, "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock")
    for flag in ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets"):
        assert pab.inputs[flag] is True, flag

    policy = json.loads(_for_bucket(run, "aws:s3/bucketPolicy:BucketPolicy").inputs["policy"])
    (deny,) = policy["Statement"]
    assert deny["Effect"] == "Deny"
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}

    lifecycle = _for_bucket(run, "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration")
    days = {r["filter"]["prefix"]: int(r["noncurrentVersionExpiration"]["noncurrentDays"])
            for r in lifecycle.inputs["rules"] if r.get("noncurrentVersionExpiration")}
    # The bucket keeps checkpoint.noncurrentVersionDays; the homes under the prefix the short time the plans
    # bill (placement/data/bill.yaml: the stacks set what the bill charges, issue 36).
    from placement.model.bill import bill_book

    assert bill_book().noncurrent_version_days == 1
    assert days == {"": cfg.checkpoint.noncurrent_version_days, f"{cfg.checkpoint.prefix}/": 1}

    bucket_name = _bucket(run).inputs["bucket"]
    assert run.outputs["checkpointUri"] == f"s3://{bucket_name}/{cfg.checkpoint.prefix}"


def test_training_role_reaches_only_the_stack_bucket_and_prefix(stack: tuple[StackConfig, RunResult]) -> None:
    cfg, run = stack
    bucket = _bucket(run)
    bucket_arn = f"arn:mock:aws:s3/bucket:Bucket:{bucket.name}"
    role = run.named(run.outputs["trainingRoleArn"].rsplit(":", 1)[1])
    trust = json.loads(role.inputs["assumeRolePolicy"])
    (statement,) = trust["Statement"]
    assert statement["Action"] == "sts:AssumeRoleWithWebIdentity"
    (subs,) = [v for k, v in statement["Condition"]["StringEquals"].items() if k.endswith(":sub")]
    subs = subs if isinstance(subs, list) else [subs]
    sa = cfg.training.service_account
    # Exactly the namespaces that get the service account: every team namespace, plus training.namespace.
    assert sorted(subs) == sorted(f"system:serviceaccount:{ns}:{sa}" for ns in cfg.training_namespaces)
    assert {f"system:serviceaccount:{team}:{sa}" for team in cfg.kueue.teams} <= set(subs)
    assert len(subs) == len(set(subs)) == len(cfg.kueue.teams) + (cfg.training.namespace not in cfg.kueue.teams)

    (policy_res,) = [p for p in run.of_type("aws:iam/rolePolicy:RolePolicy") if p.inputs["role"] == f"{role.name}-id"]
    statements = json.loads(policy_res.inputs["policy"])["Statement"]
    s3_resources: set[str] = set()
    for st in statements:
        assert st["Effect"] == "Allow"
        actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
        assert all("*" not in a for a in actions), "no wildcard actions"
        if any(a.startswith("s3:") for a in actions):
            s3_resources.update(st["Resource"])
        if "s3:ListBucket" in actions:
            assert st["Resource"] == [bucket_arn]
            assert st["Condition"]["StringLike"]["s3:prefix"] == [cfg.checkpoint.prefix, f"{cfg.checkpoint.prefix}/*"]
        if "s3:PutObject" in actions:
            assert st["Resource"] == [f"{bucket_arn}/{cfg.checkpoint.prefix}/*"]
            assert {"s3:GetObject", "s3:DeleteObject"} <= set(actions)
        if any(a.startswith("kms:") for a in actions):
            assert st["Resource"] == [run.outputs["checkpointKmsKeyArn"]]
    assert s3_resources == {bucket_arn, f"{bucket_arn}/{cfg.checkpoint.prefix}/*"}


def test_training_service_account_in_every_team_namespace_carries_the_role(
        stack: tuple[StackConfig, RunResult]) -> None:
    cfg, run = stack
    accounts = {r.inputs["metadata"]["namespace"]: r for r in run.of_type("kubernetes:core/v1:ServiceAccount")
                if r.inputs["metadata"]["name"] == cfg.training.service_account}
    assert set(accounts) == set(cfg.training_namespaces) and set(cfg.kueue.teams) <= set(accounts)
    namespaces = {r.inputs["metadata"]["name"] for r in run.of_type("kubernetes:core/v1:Namespace")}
    for ns, sa in accounts.items():
        assert sa.inputs["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": run.outputs["trainingRoleArn"]}
        assert ns in namespaces
        assert sa.provider and f"{cfg.cluster_name}-k8s" in sa.provider, "created on the cluster's provider"
    assert run.outputs["trainingServiceAccount"] == {"name": cfg.training.service_account,
                                                     "namespaces": list(cfg.training_namespaces)}


def test_fsx_lustre_tier_when_configured(stack: tuple[StackConfig, RunResult]) -> None:
    cfg, run = stack
    filesystems = run.of_type("aws:fsx/lustreFileSystem:LustreFileSystem")
    if cfg.checkpoint.filesystem.kind != "fsx":
        assert filesystems == []
        assert run.outputs["checkpointFilesystem"] is None
        assert run.of_type("kubernetes:core/v1:PersistentVolumeClaim") == []
        return
    (fs,) = filesystems
    assert fs.inputs["deploymentType"] == "PERSISTENT_2"
    assert int(fs.inputs["storageCapacity"]) == cfg.checkpoint.filesystem.capacity_gb
    assert int(fs.inputs["perUnitStorageThroughput"]) == cfg.checkpoint.filesystem.throughput_mbps_per_tib
    assert subnet_zone(by_id(run, fs.inputs["subnetIds"])) == cfg.gpu_zone
    (sg_id,) = fs.inputs["securityGroupIds"]
    ports = {(int(r.inputs["fromPort"]), int(r.inputs["toPort"]))
             for r in run.of_type("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
             if r.inputs["securityGroupId"] == sg_id and r.inputs.get("cidrIpv4") == cfg.network.vpc_cidr}
    assert ports == {(988, 988), (1018, 1023)}
    (dra,) = run.of_type("aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation")
    assert dra.inputs["fileSystemId"] == f"{fs.name}-id"
    assert dra.inputs["dataRepositoryPath"].rstrip("/") == run.outputs["checkpointUri"]
    for policy in ("autoImportPolicy", "autoExportPolicy"):
        assert sorted(dra.inputs["s3"][policy]["events"]) == ["CHANGED", "DELETED", "NEW"]
    assert run.outputs["checkpointFilesystem"]["kind"] == "fsx"
    # Every training namespace has the claim, bound to a static PV on this file system.
    assert run.outputs["checkpointFilesystem"]["claimName"] == "gpufleet-checkpoints"
    pvs = {p.inputs["spec"]["claimRef"]["namespace"]: p for p in run.of_type("kubernetes:core/v1:PersistentVolume")}
    pvcs = {c.inputs["metadata"]["namespace"]: c for c in run.of_type("kubernetes:core/v1:PersistentVolumeClaim")}
    assert set(pvs) == set(pvcs) == set(cfg.training_namespaces)
    for ns, pv in pvs.items():
        csi = pv.inputs["spec"]["csi"]
        assert csi["driver"] == "fsx.csi.aws.com" and csi["volumeHandle"] == f"{fs.name}-id"
        assert csi["volumeAttributes"]["dnsname"] == run.outputs["checkpointFilesystem"]["dnsName"]
        assert csi["volumeAttributes"]["mountname"] == run.outputs["checkpointFilesystem"]["mountName"]
        assert pvcs[ns].inputs["metadata"]["name"] == "gpufleet-checkpoints"
        assert pvcs[ns].inputs["spec"]["volumeName"] == pv.inputs["metadata"]["name"]


# ------------------------------------------------------------------ other shapes and capacity kinds


@pytest.fixture(scope="module")
def mixed_run() -> RunResult:
    """A single-node non-EFA pool in a zone given by name, plus a Capacity Block pool, on the p5 stack."""
    return run_stack(BASE_STACK, config_override={"nodePools": [
        {"name": "l40s", "instanceType": "g6e.xlarge", "minNodes": 0, "maxNodes": 1, "zone": "us-east-1b"},
        {"name": "h200-block", "instanceType": "p5en.48xlarge", "capacity": "CAPACITY_BLOCK",
         "reservation": "cr-0123456789abcdef0", "minNodes": 0, "maxNodes": 2},
        {"name": "h100-odcr", "instanceType": "p5.48xlarge", "capacity": "ON_DEMAND",
         "reservation": "cr-0fedcba9876543210", "minNodes": 2, "maxNodes": 2},
    ]})


def test_non_efa_shape_gets_a_plain_node_group(mixed_run: RunResult) -> None:
    ng = pool_node_group(mixed_run, "l40s")
    lt = launch_template_of(mixed_run, ng)
    assert "networkInterfaces" not in lt.inputs
    assert "placement" not in lt.inputs
    assert lt.inputs["metadataOptions"]["httpTokens"] == "required"
    (subnet_id,) = ng.inputs["subnetIds"]
    assert by_id(mixed_run, subnet_id).inputs["availabilityZone"] == "us-east-1b"


def test_capacity_block_pool_targets_its_reservation(mixed_run: RunResult) -> None:
    ng = pool_node_group(mixed_run, "h200-block")
    assert ng.inputs["capacityType"] == "CAPACITY_BLOCK"
    lt = launch_template_of(mixed_run, ng)
    assert lt.inputs["instanceMarketOptions"]["marketType"] == "capacity-block"
    target = lt.inputs["capacityReservationSpecification"]["capacityReservationTarget"]
    assert target["capacityReservationId"] == "cr-0123456789abcdef0"
    assert len(lt.inputs["networkInterfaces"]) == 16  # p5en.48xlarge: 16 network cards
    # The block is delivered co-located; no placement group of ours may constrain it.
    assert "placement" not in lt.inputs
    assert mixed_run.of_type(PG) == []


def test_on_demand_pool_targets_its_capacity_reservation(mixed_run: RunResult) -> None:
    ng = pool_node_group(mixed_run, "h100-odcr")
    assert ng.inputs["capacityType"] == "ON_DEMAND"
    lt = launch_template_of(mixed_run, ng)
    target = lt.inputs["capacityReservationSpecification"]["capacityReservationTarget"]
    assert target["capacityReservationId"] == "cr-0fedcba9876543210"
    assert "instanceMarketOptions" not in lt.inputs, "an ODCR is plain on-demand, not the capacity-block market"
    assert len(lt.inputs["networkInterfaces"]) == 32
    # The reservation decides where the instances go; our placement group would make the launch fail.
    assert "placement" not in lt.inputs


def test_pools_without_a_reservation_target_none(stack: tuple[StackConfig, RunResult]) -> None:
    cfg, run = stack
    for pool in cfg.node_pools:
        lt = launch_template_of(run, pool_node_group(run, pool.name))
        spec = lt.inputs.get("capacityReservationSpecification")
        if pool.reservation:
            assert spec["capacityReservationTarget"]["capacityReservationId"] == pool.reservation
        else:
            assert spec is None


# ------------------------------------------------------------------ invalid configs


def _pool(**overrides: Any) -> list[dict[str, Any]]:
    pool = {"name": "bad", "instanceType": "p5.48xlarge", "capacity": "ON_DEMAND", "minNodes": 0, "maxNodes": 2}
    pool.update(overrides)
    return [pool]


INVALID = [
    ("unknown-instance-type", {"nodePools": _pool(instanceType="p9.96xlarge")}, "gpufleet:nodePools[0].instanceType"),
    ("zone-not-in-region", {"gpuZone": "usw2-az1"}, "gpufleet:gpuZone"),
    ("pool-zone-not-in-region", {"nodePools": _pool(zone="us-west-2a")}, "gpufleet:nodePools[0].zone"),
    ("min-above-max", {"nodePools": _pool(minNodes=3, maxNodes=2)}, "gpufleet:nodePools[0].minNodes"),
    ("multi-node-without-efa", {"nodePools": _pool(instanceType="g6e.xlarge", maxNodes=2)},
     "gpufleet:nodePools[0].maxNodes"),
    ("fsx-without-gpu-zone", {"gpuZone": None, "nodePools": _pool(zone="use1-az6")}, "gpufleet:gpuZone"),
    ("capacity-block-bad-reservation", {"nodePools": _pool(capacity="CAPACITY_BLOCK", reservation="block-1")},
     "gpufleet:nodePools[0].reservation"),
    ("spot-pool-with-reservation", {"nodePools": _pool(capacity="SPOT", reservation="cr-0123456789abcdef0")},
     "gpufleet:nodePools[0].reservation"),
    ("admin-not-an-iam-arn", {"cluster": {"adminPrincipals": ["alice@example.com"]}},
     "gpufleet:cluster.adminPrincipals"),
    ("vpc-too-small", {"network": {"vpcCidr": "10.0.0.0/22"}}, "gpufleet:network.vpcCidr"),
    ("services-overlap-vpc", {"network": {"servicesCidr": "10.0.16.0/20"}}, "gpufleet:network.servicesCidr"),
    ("training-namespace-not-a-name", {"training": {"namespace": "Training_NS"}}, "gpufleet:training.namespace"),
    # One IRSA subject per team namespace: 40 teams overflow IAM's 2048-character trust policy quota.
    ("irsa-trust-too-long", {"kueue": {"teams": [f"team-{i:02d}" for i in range(40)]}}, "gpufleet:kueue.teams"),
]


@pytest.fixture
def spy_runs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[RunResult]]:
    """Every RunResult ``run_stack`` creates, so a failed run's registrations can be inspected."""
    results: list[RunResult] = []
    real = mockrun._mocks

    def spy(result: RunResult) -> Any:
        results.append(result)
        return real(result)

    monkeypatch.setattr(mockrun, "_mocks", spy)
    yield results


@pytest.mark.parametrize(("override", "key"), [(o, k) for _, o, k in INVALID], ids=[i for i, _, _ in INVALID])
def test_invalid_config_fails_naming_the_key_before_any_resource(
        override: dict[str, Any], key: str, spy_runs: list[RunResult]) -> None:
    with pytest.raises((pulumi.RunError, ConfigError)) as info:
        run_stack(BASE_STACK, config_override=override)
    assert key in str(info.value)
    assert len(spy_runs) == 1
    # A read of the hub stack's outputs (gpufleet:cluster.hubStack) writes nothing.
    assert [r for r in spy_runs[0].resources if r.type != "pulumi:pulumi:StackReference"] == [], \
        "resources were registered before the config error"


# ------------------------------------------------------------------ pure layout


def _raw(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        doc = yaml.safe_load(fh)
    return {k.split(":", 1)[1]: v for k, v in doc["config"].items() if k.startswith("gpufleet:")}


def test_system_azs_start_with_the_gpu_zone_and_are_deterministic() -> None:
    cfg = parse({**_raw(BASE_STACK), "network": {"azCount": 3}})
    zones = [Zone("us-east-1a", "use1-az4"), Zone("us-east-1b", "use1-az6"), Zone("us-east-1c", "use1-az1"),
             Zone("us-east-1d", "use1-az2")]
    picked = pick_system_azs(cfg, zones)
    assert [z.zone_id for z in picked] == ["use1-az6", "use1-az1", "use1-az2"]
    assert pick_system_azs(cfg, list(reversed(zones))) == picked
    with pytest.raises(ConfigError, match="gpufleet:network.azCount"):
        pick_system_azs(cfg, zones[:2])


def test_four_layer_shapes_get_a_topology_with_layer_4_of_their_own() -> None:
    """p6-b200 nodes carry topology.k8s.aws/network-node-layer-4, p5 nodes do not; Kueue leaves out nodes missing
    a level label, so each level set is its own Topology and each TAS flavor names the one of its shape."""
    from pathlib import Path

    from infra.k8s import kueue_objects as ko
    from infra.k8s.crd_validate import CRDValidator

    raw = {"cloud": "aws", "region": "us-east-1", "gpuZone": "use1-az6", "tags": {"owner": "o", "cost-center": "c"},
           "nodePools": [
               {"name": "p5-od", "instanceType": "p5.48xlarge", "minNodes": 2, "maxNodes": 2},
               {"name": "p6-od", "instanceType": "p6-b200.48xlarge", "minNodes": 2, "maxNodes": 2}]}
    objs = ko.worker_objects(parse(raw, stack="t"))
    topologies = {o["metadata"]["name"]: [lv["nodeLabel"] for lv in o["spec"]["levels"]]
                  for o in objs if o["kind"] == "Topology"}
    flavors = {o["metadata"]["name"]: o["spec"]["topologyName"] for o in objs if o["kind"] == "ResourceFlavor"}
    layer4 = "topology.k8s.aws/network-node-layer-4"
    assert len(topologies) == 2 and sorted(layer4 in levels for levels in topologies.values()) == [False, True]
    for flavor, name in flavors.items():
        assert (layer4 in topologies[name]) is ("p6" in flavor), flavor
    validator = CRDValidator(Path(ROOT) / "tests" / "data" / "kueue-crds")
    for obj in objs:
        assert validator.validate(obj) == [], (obj["kind"], obj["metadata"]["name"])
