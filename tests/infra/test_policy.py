"""gpufleet's mandatory policies: each check trips on a broken fixture and passes the fixed one; the CrossGuard
pack wires every check; the mocked resources of every real stack in stacks/ pass them all."""

from __future__ import annotations

import copy
import json
import os
import runpy
import select
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from infra.policy import checks
from infra.policy.checks import Resource, Violation
from placement.model.shapes import shape_book

ROOT = Path(__file__).resolve().parents[2]
STACKS = sorted((ROOT / "stacks").glob("Pulumi.*.yaml"))
TAGS = {"owner": "ml-platform", "cost-center": "cc-1"}


def rules(violations: list[Violation]) -> set[str]:
    return {v.rule for v in violations}


# ----------------------------------------------------------------------------------------------- IMDSv2


def launch_template(**extra: Any) -> dict[str, Any]:
    return {"metadataOptions": {"httpTokens": "required", "httpEndpoint": "enabled"}, "tags": dict(TAGS), **extra}


def test_imdsv2_required_on_launch_templates() -> None:
    assert checks.check_imdsv2(checks.LAUNCH_TEMPLATE, launch_template()) == []
    optional = launch_template(metadataOptions={"httpTokens": "optional"})
    assert "httpTokens" in checks.check_imdsv2(checks.LAUNCH_TEMPLATE, optional)[0]
    assert checks.check_imdsv2(checks.LAUNCH_TEMPLATE, {"tags": TAGS}) != []
    # Not a launch template: out of scope.
    assert checks.check_imdsv2("aws:ec2/vpc:Vpc", {}) == []


# ----------------------------------------------------------------------------------------------- S3


def s3_stack(*, sse: bool = True, versioning: str | None = "Enabled", block: Mapping[str, bool] | None = None,
             by_id: bool = True) -> list[Resource]:
    bucket = Resource("aws:s3/bucket:Bucket", "ckpt", {"bucket": "acme-ckpt", "tags": TAGS},
                      refs=frozenset({"ckpt-id"}))
    ref = "ckpt-id" if by_id else "acme-ckpt"
    out = [bucket]
    if sse:
        out.append(Resource(next(iter(sorted(checks.S3_ENCRYPTION))), "ckpt-sse", {
            "bucket": ref, "rules": [{"applyServerSideEncryptionByDefault": {"sseAlgorithm": "aws:kms"}}]}))
    if versioning:
        out.append(Resource("aws:s3/bucketVersioning:BucketVersioning", "ckpt-versioning",
                            {"bucket": ref, "versioningConfiguration": {"status": versioning}}))
    flags = dict.fromkeys(checks.PUBLIC_ACCESS_BLOCK_FLAGS, True)
    flags.update(block or {})
    out.append(Resource(checks.S3_PUBLIC_ACCESS_BLOCK, "ckpt-pab", {"bucket": ref, **flags}))
    return out


def test_s3_bucket_encrypted_versioned_and_private() -> None:
    assert checks.check_s3_buckets(s3_stack()) == []
    assert checks.check_s3_buckets(s3_stack(by_id=False)) == []  # linked through the bucket name
    no_sse = checks.check_s3_buckets(s3_stack(sse=False))
    assert [(v.rule, v.resource) for v in no_sse] == [(checks.S3_PROTECTED, "ckpt")]
    assert "ServerSideEncryption" in no_sse[0].message
    assert "BucketVersioning" in checks.check_s3_buckets(s3_stack(versioning=None))[0].message
    assert "BucketVersioning" in checks.check_s3_buckets(s3_stack(versioning="Suspended"))[0].message
    assert "PublicAccessBlock" in checks.check_s3_buckets(s3_stack(block={"restrictPublicBuckets": False}))[0].message


def test_s3_companions_of_another_bucket_do_not_count() -> None:
    stack = s3_stack()
    other = Resource("aws:s3/bucket:Bucket", "logs", {"bucket": "acme-logs", "tags": TAGS})
    found = checks.check_s3_buckets([*stack, other])
    assert {v.resource for v in found} == {"logs"} and len(found) == 3


def test_s3_companions_link_through_property_dependencies() -> None:
    """Under CrossGuard during preview the bucket id is unknown; the dependency links the companions."""
    stack = s3_stack()
    unknown = [Resource(r.type, r.name, {**r.props, "bucket": None}, key=f"urn:{r.name}",
                        deps={"bucket": frozenset({"urn:ckpt"})} if r.name != "ckpt" else {})
               for r in stack]
    assert checks.check_s3_buckets(unknown) == []


# ----------------------------------------------------------------------------------------------- GCS


def gcs_bucket(**extra: Any) -> dict[str, Any]:
    return {"publicAccessPrevention": "enforced", "uniformBucketLevelAccess": True, "versioning": {"enabled": True},
            "labels": dict(TAGS), **extra}


def test_gcs_bucket_private_uniform_and_recoverable() -> None:
    assert checks.check_gcs_bucket(checks.GCS_BUCKET, gcs_bucket()) == []
    soft_only = gcs_bucket(versioning={"enabled": False}, softDeletePolicy={"retentionDurationSeconds": 604800.0})
    assert checks.check_gcs_bucket(checks.GCS_BUCKET, soft_only) == []
    assert "publicAccessPrevention" in checks.check_gcs_bucket(
        checks.GCS_BUCKET, gcs_bucket(publicAccessPrevention="inherited"))[0]
    assert "uniformBucketLevelAccess" in checks.check_gcs_bucket(
        checks.GCS_BUCKET, gcs_bucket(uniformBucketLevelAccess=False))[0]
    neither = gcs_bucket(versioning={"enabled": False}, softDeletePolicy={"retentionDurationSeconds": 0})
    assert "soft delete" in checks.check_gcs_bucket(checks.GCS_BUCKET, neither)[0]


# ----------------------------------------------------------------------------------------------- GPU taints

TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"}


def test_eks_gpu_node_group_needs_the_gpu_taint() -> None:
    good = {"instanceTypes": ["p5.48xlarge"], "taints": [TAINT], "tags": TAGS}
    assert checks.check_gpu_taint(checks.EKS_NODE_GROUP, good) == []
    bad = {**good, "taints": [{**TAINT, "effect": "PREFER_NO_SCHEDULE"}]}
    assert "nvidia.com/gpu" in checks.check_gpu_taint(checks.EKS_NODE_GROUP, bad)[0]
    # CPU node groups need no taint.
    assert checks.check_gpu_taint(checks.EKS_NODE_GROUP, {"instanceTypes": ["m7i.xlarge"]}) == []


def test_gke_gpu_node_pool_needs_the_gpu_taint() -> None:
    good = {"nodeConfig": {"machineType": "a3-highgpu-8g", "taints": [TAINT]}}
    assert checks.check_gpu_taint(checks.GKE_NODE_POOL, good) == []
    bad = {"nodeConfig": {"machineType": "a3-highgpu-8g", "taints": []}}
    assert checks.check_gpu_taint(checks.GKE_NODE_POOL, bad) != []
    assert checks.check_gpu_taint(checks.GKE_NODE_POOL, {"nodeConfig": {"machineType": "e2-standard-4"}}) == []


def test_gpu_taint_follows_the_launch_template_instance_type() -> None:
    lt = Resource(checks.LAUNCH_TEMPLATE, "gpu-lt", launch_template(instanceType="p4d.24xlarge"))
    group = Resource(checks.EKS_NODE_GROUP, "gpu-ng", {"launchTemplate": {"id": "gpu-lt-id", "version": "1"}},
                     refs=frozenset())
    lt_linked = Resource(lt.type, lt.name, lt.props, refs=frozenset({"gpu-lt-id"}))
    found = checks.check_gpu_taints_via_launch_template([lt_linked, group])
    assert [(v.rule, v.resource) for v in found] == [(checks.GPU_TAINT, "gpu-ng")]
    tainted = Resource(group.type, group.name, {**group.props, "taints": [TAINT]})
    assert checks.check_gpu_taints_via_launch_template([lt_linked, tainted]) == []


# ----------------------------------------------------------------------------------------------- EFA


def efa_interfaces(cards: int, *, form: str = "efa-first") -> list[dict[str, Any]]:
    """The two wirings the EC2 User Guide documents for EFA on instances with several network cards."""
    if form == "efa-first":
        return [{"networkCardIndex": float(c), "deviceIndex": 0.0 if c == 0 else 1.0,
                 "interfaceType": "efa" if c == 0 else "efa-only"} for c in range(cards)]
    return ([{"networkCardIndex": 0.0, "deviceIndex": 0.0, "interfaceType": "interface"}]
            + [{"networkCardIndex": float(c), "deviceIndex": 1.0 if c == 0 else 0.0, "interfaceType": "efa-only"}
               for c in range(cards)])


def efa_stack(instance_type: str, nics: list[dict[str, Any]], *, in_template: bool = False) -> list[Resource]:
    lt_props = launch_template(networkInterfaces=nics, **({"instanceType": instance_type} if in_template else {}))
    group = {"launchTemplate": {"id": "gpu-lt-id", "version": "1"}, "taints": [TAINT], "tags": TAGS}
    if not in_template:
        group["instanceTypes"] = [instance_type]
    return [Resource(checks.LAUNCH_TEMPLATE, "gpu-lt", lt_props, refs=frozenset({"gpu-lt-id"})),
            Resource(checks.EKS_NODE_GROUP, "gpu-ng", group)]


@pytest.mark.parametrize("itype", ["p5.48xlarge", "p4d.24xlarge", "p5en.48xlarge"])
def test_efa_interfaces_cover_every_network_card(itype: str) -> None:
    cards = shape_book().get(itype).network_cards  # type: ignore[union-attr]
    assert checks.check_efa_interfaces(efa_stack(itype, efa_interfaces(cards))) == []
    assert checks.check_efa_interfaces(efa_stack(itype, efa_interfaces(cards, form="ena-primary"))) == []
    assert checks.check_efa_interfaces(efa_stack(itype, efa_interfaces(cards), in_template=True)) == []
    short = checks.check_efa_interfaces(efa_stack(itype, efa_interfaces(cards - 1)))
    assert [(v.rule, v.resource) for v in short] == [(checks.EFA_INTERFACES, "gpu-ng")]
    assert f"{cards} network cards" in short[0].message
    # Right count, but two on one card and none on the last.
    doubled = efa_interfaces(cards)
    doubled[-1]["networkCardIndex"] = 0.0
    assert checks.check_efa_interfaces(efa_stack(itype, doubled)) != []


def test_efa_node_group_without_launch_template_fails() -> None:
    group = Resource(checks.EKS_NODE_GROUP, "gpu-ng", {"instanceTypes": ["p5.48xlarge"], "taints": [TAINT]})
    assert rules(checks.check_efa_interfaces([group])) == {checks.EFA_INTERFACES}
    cpu = Resource(checks.EKS_NODE_GROUP, "sys", {"instanceTypes": ["m7i.xlarge"]})
    assert checks.check_efa_interfaces([cpu]) == []


# ----------------------------------------------------------------------------------------------- GCP GPU networks


def gke_pool(machine: str, networks: list[str]) -> dict[str, Any]:
    return {"nodeConfig": {"machineType": machine, "taints": [TAINT]},
            "networkConfig": {"additionalNodeNetworkConfigs": [{"network": n, "subnetwork": f"{n}-sub-{i}"}
                                                               for i, n in enumerate(networks)]}}


@pytest.mark.parametrize("machine", ["a3-highgpu-8g", "a3-megagpu-8g"])
def test_gcp_gpudirect_pools_attach_every_gpu_vpc(machine: str) -> None:
    shape = shape_book().get(machine)
    assert shape is not None and shape.gpu_vpcs > 0
    nets = [f"gpu{i}" for i in range(shape.gpu_vpcs)]
    assert checks.check_gcp_gpu_networks(checks.GKE_NODE_POOL, gke_pool(machine, nets)) == []
    missing = checks.check_gcp_gpu_networks(checks.GKE_NODE_POOL, gke_pool(machine, nets[:-1]))
    assert f"needs {shape.gpu_vpcs}" in missing[0]
    # All NICs on one VPC: the count is right but the fabric is not.
    same = checks.check_gcp_gpu_networks(checks.GKE_NODE_POOL, gke_pool(machine, ["gpu0"] * shape.gpu_vpcs))
    assert "distinct" in same[0]


def test_gcp_rdma_pools_attach_the_gvnic_vpc_and_every_rdma_subnet() -> None:
    shape = shape_book().get("a3-ultragpu-8g")
    assert shape is not None and shape.rdma_subnets > 0
    nets = [f"gvnic{i}" for i in range(shape.gpu_vpcs)] + ["rdma"] * shape.rdma_subnets
    assert checks.check_gcp_gpu_networks(checks.GKE_NODE_POOL, gke_pool("a3-ultragpu-8g", nets)) == []
    # One config per VPC is not enough: each RDMA subnet is a NIC of its own.
    per_vpc = [f"gvnic{i}" for i in range(shape.gpu_vpcs)] + ["rdma"]
    assert checks.check_gcp_gpu_networks(checks.GKE_NODE_POOL, gke_pool("a3-ultragpu-8g", per_vpc)) != []


def test_gcp_pools_without_gpu_fabric_need_no_extra_networks() -> None:
    assert checks.check_gcp_gpu_networks(checks.GKE_NODE_POOL, gke_pool("a2-highgpu-8g", [])) == []


# ----------------------------------------------------------------------------------------------- public ingress


def test_security_groups_never_open_ssh_to_the_world() -> None:
    ssh = {"ingress": [{"protocol": "tcp", "fromPort": 22.0, "toPort": 22.0, "cidrBlocks": ["0.0.0.0/0"]}]}
    found = checks.check_public_ingress(checks.SECURITY_GROUP, ssh, allowed_cidrs=["0.0.0.0/0"])
    assert "SSH (port 22) to 0.0.0.0/0" in found[0]
    everything = {"type": "ingress", "protocol": "-1", "fromPort": 0.0, "toPort": 0.0, "ipv6CidrBlocks": ["::/0"]}
    assert len(checks.check_public_ingress(checks.SECURITY_GROUP_RULE, everything)) == 3
    api = {"ipProtocol": "tcp", "fromPort": 443.0, "toPort": 443.0, "cidrIpv4": "0.0.0.0/0"}
    assert checks.check_public_ingress(checks.SG_INGRESS_RULE, api) != []
    assert checks.check_public_ingress(checks.SG_INGRESS_RULE, api, allowed_cidrs=["0.0.0.0/0"]) == []
    private = {**api, "cidrIpv4": "10.0.0.0/16"}
    assert checks.check_public_ingress(checks.SG_INGRESS_RULE, private) == []
    lustre = {"ipProtocol": "tcp", "fromPort": 988.0, "toPort": 988.0, "cidrIpv4": "0.0.0.0/0"}
    assert checks.check_public_ingress(checks.SG_INGRESS_RULE, lustre) == []


def test_eks_endpoint_public_only_when_the_stack_config_allows_it() -> None:
    default_public = {"vpcConfig": {"subnetIds": ["a", "b"]}}  # EKS defaults: public, 0.0.0.0/0
    assert "publicAccessCidrs" in checks.check_public_ingress(checks.EKS_CLUSTER, default_public)[0]
    private = {"vpcConfig": {"endpointPublicAccess": False, "endpointPrivateAccess": True}}
    assert checks.check_public_ingress(checks.EKS_CLUSTER, private) == []
    world = {"vpcConfig": {"endpointPublicAccess": True, "publicAccessCidrs": ["0.0.0.0/0"]}}
    allowed = checks.allowed_public_cidrs({"publicAccess": True, "publicAccessCidrs": ["0.0.0.0/0"]})
    assert checks.check_public_ingress(checks.EKS_CLUSTER, world, allowed) == []
    # Listing another CIDR does not allow the whole internet; publicAccess false allows nothing.
    office = checks.allowed_public_cidrs({"publicAccess": True, "publicAccessCidrs": ["203.0.113.0/24"]})
    assert checks.check_public_ingress(checks.EKS_CLUSTER, world, office) != []
    off = checks.allowed_public_cidrs({"publicAccess": False, "publicAccessCidrs": ["0.0.0.0/0"]})
    assert off == frozenset() and checks.check_public_ingress(checks.EKS_CLUSTER, world, off) != []


def test_gcp_firewall_and_gke_control_plane() -> None:
    ssh = {"direction": "INGRESS", "sourceRanges": ["0.0.0.0/0"], "allows": [{"protocol": "tcp", "ports": ["22"]}]}
    assert "SSH" in checks.check_public_ingress(checks.GCP_FIREWALL, ssh)[0]
    ranged = {**ssh, "allows": [{"protocol": "tcp", "ports": ["6000-7000"]}]}
    assert "port 6443" in checks.check_public_ingress(checks.GCP_FIREWALL, ranged)[0]
    internal = {**ssh, "sourceRanges": ["10.0.0.0/8"], "allows": [{"protocol": "all"}]}
    assert checks.check_public_ingress(checks.GCP_FIREWALL, internal) == []
    man_world = {"masterAuthorizedNetworksConfig": {"cidrBlocks": [{"cidrBlock": "0.0.0.0/0"}]}}
    assert checks.check_public_ingress(checks.GKE_CLUSTER, man_world) != []
    allowed = checks.allowed_public_cidrs({"publicAccess": True, "publicAccessCidrs": ["0.0.0.0/0"]})
    assert checks.check_public_ingress(checks.GKE_CLUSTER, man_world, allowed) == []
    assert checks.check_public_ingress(checks.GKE_CLUSTER, {}) != []  # public endpoint, no authorized networks
    private = {"privateClusterConfig": {"enablePrivateNodes": True, "enablePrivateEndpoint": True}}
    assert checks.check_public_ingress(checks.GKE_CLUSTER, private) == []


def test_public_ranges_reach_the_api_only_when_the_stack_config_lists_them() -> None:
    hub_config = {"publicAccess": False, "hubCidrs": ["198.51.100.0/24", "10.200.0.0/20", "0.0.0.0/0"]}
    hub = checks.allowed_hub_cidrs(hub_config)
    assert hub == {"198.51.100.0/24", "10.200.0.0/20"}  # hubCidrs never open the world
    rule = {"ipProtocol": "tcp", "fromPort": 443.0, "toPort": 443.0, "cidrIpv4": "198.51.100.0/24"}
    found = checks.check_public_ingress(checks.SG_INGRESS_RULE, rule)
    assert len(found) == 1 and "198.51.100.0/24" in found[0] and "gpufleet:cluster.hubCidrs" in found[0]
    assert checks.check_public_ingress(checks.SG_INGRESS_RULE, rule, hub_cidrs=hub) == []
    # A narrower range inside a listed one is listed; a wider one is not.
    narrow = {**rule, "cidrIpv4": "198.51.100.7/32"}
    assert checks.check_public_ingress(checks.SG_INGRESS_RULE, narrow, hub_cidrs=hub) == []
    wide = {**rule, "cidrIpv4": "198.51.0.0/16"}
    assert checks.check_public_ingress(checks.SG_INGRESS_RULE, wide, hub_cidrs=hub) != []
    # Hub CIDRs open the API ports only, never SSH or the whole internet.
    world = {**rule, "cidrIpv4": "0.0.0.0/0"}
    assert checks.check_public_ingress(checks.SG_INGRESS_RULE, world,
                                       hub_cidrs=checks.allowed_hub_cidrs({"hubCidrs": ["0.0.0.0/0"]})) != []
    # operatorCidrs are authorised the same way (and never the world either).
    api = checks.allowed_api_cidrs({"hubCidrs": ["10.200.0.0/20"], "operatorCidrs": ["203.0.113.0/24", "0.0.0.0/0"]})
    assert api == {"10.200.0.0/20", "203.0.113.0/24"}
    operator_rule = {**rule, "cidrIpv4": "203.0.113.0/24"}
    assert checks.check_public_ingress(checks.SG_INGRESS_RULE, operator_rule, hub_cidrs=hub) != []
    assert checks.check_public_ingress(checks.SG_INGRESS_RULE, operator_rule, hub_cidrs=api) == []
    ssh_world = {**world, "fromPort": 22.0, "toPort": 22.0}
    assert checks.check_public_ingress(checks.SG_INGRESS_RULE, ssh_world, hub_cidrs=hub) != []
    # Private ranges are VPC / peering traffic, not public ingress.
    assert checks.check_public_ingress(checks.SG_INGRESS_RULE, {**rule, "cidrIpv4": "10.9.0.0/16"}) == []
    # The endpoints: GKE authorized networks and the EKS public allow-list.
    man = {"masterAuthorizedNetworksConfig": {"cidrBlocks": [{"cidrBlock": "10.0.0.0/20"},
                                                             {"cidrBlock": "198.51.100.0/24"}]}}
    assert checks.check_public_ingress(checks.GKE_CLUSTER, man) != []
    assert checks.check_public_ingress(checks.GKE_CLUSTER, man, hub_cidrs=hub) == []
    eks = {"vpcConfig": {"endpointPublicAccess": True, "publicAccessCidrs": ["203.0.113.0/24", "198.51.100.0/24"]}}
    office = checks.allowed_public_cidrs({"publicAccess": True, "publicAccessCidrs": ["203.0.113.0/24"]})
    assert checks.check_public_ingress(checks.EKS_CLUSTER, eks, office) != []
    assert checks.check_public_ingress(checks.EKS_CLUSTER, eks, office, hub) == []


# ----------------------------------------------------------------------------------------------- hub reachability


def access(public: bool = False, public_cidrs: tuple[str, ...] = (), hub: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"privateEndpoint": True, "publicEndpoint": public, "publicAccessCidrs": list(public_cidrs),
            "hubCidrs": list(hub)}


def link(private: str = "external", *ranges: str) -> dict[str, Any]:
    """A worker's hubLink output: its private link to the hub and the address ranges it brings."""
    return {"hubStack": "org/gpufleet/hub", "privateLink": private,
            "addressRanges": [{"key": "gpufleet:network.vpcCidr", "cidr": c} for c in ranges]}


def reach(egress: list[str], links: dict[str, Any] | None = None, **workers: Any) -> list[Violation]:
    """The hub's check over ``workers`` (key -> apiAccess), each with a private link unless ``links`` says."""
    return checks.check_hub_reachability({"role": "hub", "reachability": {
        key: {"egressCidrs": egress, "apiAccess": acc, "hubLink": (links or {}).get(key, link())}
        for key, acc in workers.items()}})


def test_a_private_range_needs_a_route_not_only_an_allow_list() -> None:
    """Issue 20: a worker listing the hub's private range passed although nothing routed it there."""
    (v,) = reach(["10.200.0.0/20"], links={"w1": link("none")}, w1=access(hub=("10.200.0.0/20",)))
    assert "no route to worker w1" in v.message and "gpufleet:cluster.hubPrivateLink" in v.message
    (v,) = reach(["10.200.0.0/20"], links={"w1": None}, w1=access(hub=("10.200.0.0/20",)))
    assert "no route" in v.message  # an older worker without hubLink has no declared link either
    # The public path needs no link: the internet routes it, the allow-list admits it.
    nat = access(public=True, hub=("198.51.100.7/32",))
    assert reach(["198.51.100.7/32"], links={"w1": link("none")}, w1=nat) == []


def test_overlapping_ranges_of_hub_and_workers_fail_naming_both() -> None:
    """Issue 20: aws-use1-p5's 10.0.0.0/16 held gcp-usc1-a3mega's whole primary subnet 10.0.0.0/20."""
    nat = ["198.51.100.7/32"]
    public = access(public=True, hub=("198.51.100.7/32",))
    found = reach(nat, links={"aws-use1-p5": link("none", "10.0.0.0/16"),
                              "gcp-usc1-a3mega": link("none", "10.0.0.0/20")},
                  **{"aws-use1-p5": public, "gcp-usc1-a3mega": public})
    (v,) = found
    assert v.rule == checks.HUB_REACHES_WORKERS and v.resource == "gcp-usc1-a3mega"
    assert "10.0.0.0/20" in v.message and "10.0.0.0/16" in v.message
    assert "worker gcp-usc1-a3mega" in v.message and "worker aws-use1-p5" in v.message
    disjoint = {"a": link("none", "10.0.0.0/16"), "b": link("none", "10.4.0.0/20")}
    assert reach(nat, links=disjoint, a=public, b=public) == []
    # The hub's own private ranges count too.
    outputs = {"role": "hub", "reachability": {"w1": {
        "egressCidrs": ["10.200.0.0/20"],
        "hubRanges": [{"key": "gpufleet:hub.egressCidrs[0]", "cidr": "10.200.0.0/20"}],
        "apiAccess": access(hub=("10.200.0.0/20",)), "hubLink": link("external", "10.200.0.0/16")}}}
    (v,) = checks.check_hub_reachability(outputs)
    assert "10.200.0.0/16" in v.message and "of the hub" in v.message


def test_private_hub_egress_reaches_a_private_endpoint_only_through_hub_cidrs() -> None:
    assert reach(["10.200.0.0/20"], w1=access(hub=("10.200.0.0/16",))) == []
    (v,) = reach(["10.200.0.0/20"], w1=access(hub=("10.201.0.0/20",)), w2=access(hub=("10.200.0.0/20",)))
    assert (v.rule, v.resource) == (checks.HUB_REACHES_WORKERS, "w1")
    assert "gpufleet:cluster.hubCidrs of worker stack w1" in v.message and "10.200.0.0/20" in v.message
    # publicAccessCidrs are the public endpoint's: they never let a private range in.
    assert reach(["10.200.0.0/20"], w1=access(public=True, public_cidrs=("10.200.0.0/20",))) != []


def test_public_hub_egress_needs_a_public_endpoint_that_lists_it() -> None:
    nat = ["198.51.100.7/32"]
    public = {"w1": link("none")}  # the public path (issue 28: each worker is reached on one path)
    (private_only,) = reach(nat, links=public, w1=access(hub=("198.51.100.0/24",)))
    assert "private-only" in private_only.message and "gpufleet:cluster.publicAccess" in private_only.message
    assert reach(nat, links=public, w1=access(public=True, public_cidrs=("198.51.100.0/24",))) == []
    assert reach(nat, links=public, w1=access(public=True, hub=("198.51.100.7/32",))) == []
    (unlisted,) = reach(nat, links=public, w1=access(public=True, public_cidrs=("203.0.113.0/24",)))
    assert "203.0.113.0/24" in unlisted.message and "gpufleet:cluster.hubCidrs of worker stack w1" in unlisted.message


def test_every_egress_cidr_is_checked_and_a_worker_without_api_access_fails() -> None:
    # Issue 28: each egress range is checked on the path it serves. A private link carries the private range
    # (authorised here); the public NAT address is the public path's and does not apply to this worker.
    assert reach(["10.200.0.0/20", "198.51.100.7/32"], w1=access(hub=("10.200.0.0/20",))) == []
    found = reach(["10.200.0.0/20", "198.51.100.7/32"], w1=access(hub=("10.201.0.0/20",)))
    assert [v.resource for v in found] == ["w1"] and "10.200.0.0/20" in found[0].message
    # On the public path the NAT address needs the public endpoint (off here); the private range is not its.
    (v,) = reach(["10.200.0.0/20", "198.51.100.7/32"], links={"w1": link("none")}, w1=access(hub=("10.200.0.0/20",)))
    assert "198.51.100.7/32" in v.message and "(path public)" in v.message
    (missing,) = reach(["10.200.0.0/20"], w1=None)
    assert "exports no apiAccess" in missing.message
    assert checks.check_hub_reachability({"cloud": "aws", "kubeconfig": "x"}) == []  # not a hub
    # run_all checks it when handed the outputs themselves.
    outputs = {"role": "hub", "reachability": {"w1": {"egressCidrs": ["10.200.0.0/20"], "apiAccess": access()}}}
    assert rules(checks.run_all([], outputs=outputs)) == {checks.HUB_REACHES_WORKERS}


# ----------------------------------------------------------------------------------------------- kubeconfig


def test_kubeconfig_outputs_are_secret() -> None:
    assert checks.check_kubeconfig_secret(["cloud", "kubeconfig"], {"kubeconfig"}) == []
    assert "'kubeconfig'" in checks.check_kubeconfig_secret(["cloud", "kubeconfig"], set())[0]
    found = checks.run_all([], outputs=["adminKubeconfig"], secret_outputs=[], stack="s")
    assert [(v.rule, v.resource) for v in found] == [(checks.KUBECONFIG_SECRET, "s")]


# ----------------------------------------------------------------------------------------------- tags


def test_taggable_resources_carry_owner_and_cost_center() -> None:
    assert checks.check_required_tags("aws:ec2/vpc:Vpc", {"tags": TAGS}) == []
    assert "cost-center" in checks.check_required_tags("aws:ec2/vpc:Vpc", {"tags": {"owner": "x"}})[0]
    # Listed taggable type without any tags input.
    assert checks.check_required_tags("aws:ec2/vpc:Vpc", {"cidrBlock": "10.0.0.0/16"}) != []
    # Unlisted type: taggable because it carries a tags/labels input.
    assert checks.check_required_tags("aws:sqs/queue:Queue", {"tags": {"owner": "x"}}) != []
    assert checks.check_required_tags("gcp:pubsub/topic:Topic", {"labels": {"cost-center": "c"}}) != []
    assert checks.check_required_tags(checks.GKE_NODE_POOL, {"nodeConfig": {"resourceLabels": TAGS}}) == []
    assert checks.check_required_tags(checks.GKE_NODE_POOL, {"nodeConfig": {"labels": TAGS}}) != []
    assert checks.check_required_tags(checks.GKE_CLUSTER, {"resourceLabels": {"owner": "x"}}) != []


def test_untaggable_resources_are_not_flagged() -> None:
    for typ in ("aws:ec2/routeTableAssociation:RouteTableAssociation", "aws:iam/rolePolicyAttachment:"
                "RolePolicyAttachment", "aws:s3/bucketVersioning:BucketVersioning", "gcp:compute/network:Network",
                "kubernetes:core/v1:Namespace", "pulumi:providers:aws"):
        assert not checks.is_taggable(typ, {"name": "x"})
        assert checks.check_required_tags(typ, {"name": "x"}) == []


# ----------------------------------------------------------------------------------------------- CrossGuard pack


def _struct(props: Mapping[str, Any]) -> Any:
    from google.protobuf import struct_pb2

    s = struct_pb2.Struct()
    s.update(dict(props))
    return s


@pytest.fixture(scope="module")
def analyzer() -> Any:
    """The pack's policies behind pulumi_policy's own analyzer servicer (what `--policy-pack` talks to)."""
    from pulumi_policy import EnforcementLevel
    from pulumi_policy.policy import _PolicyAnalyzerServicer

    from infra.policy.pack import install_secret_marker, policies

    install_secret_marker()
    return _PolicyAnalyzerServicer("gpufleet", "0.1.0", policies(), EnforcementLevel.MANDATORY)


def test_pack_has_a_policy_per_rule() -> None:
    from infra.policy.pack import policies

    names = {p.name for p in policies()}
    assert set(checks.RESOURCE_CHECKS) | {checks.PUBLIC_INGRESS, checks.S3_PROTECTED, checks.EFA_INTERFACES,
                                          checks.KUBECONFIG_SECRET, checks.HUB_REACHES_WORKERS} <= names


def test_pack_resource_policy_reports_mandatory_violation(analyzer: Any) -> None:
    from pulumi.runtime import proto

    request = proto.AnalyzeRequest(type=checks.LAUNCH_TEMPLATE, name="lt", urn="urn:pulumi:s::p::lt",
                                   properties=_struct({"metadataOptions": {"httpTokens": "optional"}, "tags": TAGS}))
    found = analyzer.Analyze(request, None).diagnostics
    assert [(d.policyName, d.enforcementLevel) for d in found] == [(checks.IMDSV2, proto.MANDATORY)]
    request.properties.CopyFrom(_struct(launch_template()))
    assert list(analyzer.Analyze(request, None).diagnostics) == []


def test_pack_stack_policies_see_buckets_and_secret_outputs(analyzer: Any) -> None:
    from pulumi.runtime import proto

    secret = {"4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270", "value": "apiVersion: v1"}

    def stack(kubeconfig: Any) -> Any:
        return proto.AnalyzeStackRequest(resources=[
            proto.AnalyzerResource(type="pulumi:pulumi:Stack", name="p-s", urn="urn:stack",
                                   properties=_struct({"kubeconfig": kubeconfig, "cloud": "aws"})),
            proto.AnalyzerResource(type="aws:s3/bucket:Bucket", name="ckpt", urn="urn:ckpt",
                                   properties=_struct({"bucket": "acme-ckpt", "tags": TAGS})),
        ])

    found = analyzer.AnalyzeStack(stack("apiVersion: v1"), None).diagnostics
    by_policy = {d.policyName: d.urn for d in found}
    assert by_policy[checks.KUBECONFIG_SECRET] == "urn:stack"
    assert by_policy[checks.S3_PROTECTED] == "urn:ckpt"
    assert all(d.enforcementLevel == proto.MANDATORY for d in found)
    clean = analyzer.AnalyzeStack(stack(secret), None).diagnostics
    assert checks.KUBECONFIG_SECRET not in {d.policyName for d in clean}


def test_pack_checks_the_hubs_reachability_output(analyzer: Any) -> None:
    from pulumi.runtime import proto

    def hub(worker_hub_cidrs: list[str]) -> Any:
        outputs = {"role": "hub", "reachability": {"aws-use1-p5": {
            "egressCidrs": ["10.200.0.0/20"], "apiAccess": access(hub=tuple(worker_hub_cidrs)),
            "hubLink": link()}}}
        return proto.AnalyzeStackRequest(resources=[
            proto.AnalyzerResource(type="pulumi:pulumi:Stack", name="p-hub", urn="urn:hub",
                                   properties=_struct(outputs))])

    found = [d for d in analyzer.AnalyzeStack(hub(["10.9.0.0/16"]), None).diagnostics
             if d.policyName == checks.HUB_REACHES_WORKERS]
    assert [(d.urn, d.enforcementLevel) for d in found] == [("urn:hub", proto.MANDATORY)]
    assert "aws-use1-p5" in found[0].message and "gpufleet:cluster.hubCidrs" in found[0].message
    clean = analyzer.AnalyzeStack(hub(["10.200.0.0/16"]), None).diagnostics
    assert checks.HUB_REACHES_WORKERS not in {d.policyName for d in clean}


def test_pack_entry_point_builds_a_mandatory_gpufleet_pack(monkeypatch: pytest.MonkeyPatch) -> None:
    import pulumi_policy

    made: dict[str, Any] = {}

    def record(name: str, **kwargs: Any) -> None:
        made.update(name=name, **kwargs)

    monkeypatch.setattr(pulumi_policy, "PolicyPack", record)
    runpy.run_path(str(ROOT / "infra" / "policy" / "__main__.py"), run_name="__main__")
    assert made["name"] == "gpufleet"
    assert made["enforcement_level"] == pulumi_policy.EnforcementLevel.MANDATORY
    kinds = {type(p).__name__ for p in made["policies"]}
    assert kinds == {"ResourceValidationPolicy", "StackValidationPolicy"}
    doc = yaml.safe_load((ROOT / "infra" / "policy" / "PulumiPolicy.yaml").read_text())
    assert doc["runtime"]["name"] == "python"


# ----------------------------------------------------------------------------------------------- real stacks


@pytest.fixture(scope="module")
def stack_runs() -> dict[str, tuple[Any, Mapping[str, Any]]]:
    """One mocked run per stack file (with the hub's worker references), plus its raw gpufleet:cluster config."""
    from infra.preview import StackRunner, _raw_config

    runner = StackRunner()
    out = {}
    for path in STACKS:
        raw = _raw_config(path)
        cluster = raw.get("cluster")
        out[path.name] = (runner.run(path), cluster if isinstance(cluster, Mapping) else {})
    return out


def test_stacks_exist_for_both_clouds() -> None:
    clouds = {(yaml.safe_load(p.read_text())["config"] or {}).get("gpufleet:cloud") for p in STACKS}
    assert {"aws", "gcp"} <= clouds


@pytest.mark.parametrize("stack_file", [p.name for p in STACKS])
def test_real_stack_passes_every_mandatory_policy(stack_runs: Any, stack_file: str) -> None:
    run, cluster = stack_runs[stack_file]
    found = checks.run_all([checks.from_registered(r) for r in run.resources], outputs=run.outputs,
                           secret_outputs=run.secret_outputs, allowed_cidrs=checks.allowed_public_cidrs(cluster),
                           hub_cidrs=checks.allowed_hub_cidrs(cluster), hub_stack=checks.hub_stack_of(cluster),
                           stack=stack_file)
    assert found == [], "\n".join(map(str, found))
    if "reachability" in run.outputs:  # the hub: the check ran over every worker
        assert set(run.outputs["reachability"]) == {w.rsplit("/", 1)[-1] for w in
                                                    yaml.safe_load((ROOT / "stacks" / stack_file).read_text())
                                                    ["config"]["gpufleet:hub"]["workers"]}
        broken = copy.deepcopy(run.outputs)
        for entry in broken["reachability"].values():
            entry["apiAccess"]["hubCidrs"] = []
        assert len(checks.check_hub_reachability(broken)) == sum(len(e["egressCidrs"])
                                                                 for e in broken["reachability"].values())


@pytest.mark.parametrize("stack_file", [p.name for p in STACKS])
def test_checks_bite_on_real_stack_resources(stack_runs: Any, stack_file: str) -> None:
    """Breaking the real resources trips the policies, so the clean pass above is not vacuous."""
    run, _ = stack_runs[stack_file]
    broken = []
    for r in run.resources:
        props = copy.deepcopy(r.inputs)
        props.pop("tags", None)
        props.pop("labels", None)
        props.pop("resourceLabels", None)
        props.pop("taints", None)
        props.pop("metadataOptions", None)
        if isinstance(props.get("nodeConfig"), dict):
            props["nodeConfig"].pop("taints", None)
        if isinstance(props.get("networkConfig"), dict):
            props["networkConfig"]["additionalNodeNetworkConfigs"] = []
        broken.append(checks.from_registered(SimpleNamespace(type=r.type, name=r.name, inputs=props)))
    found = rules(checks.run_all(broken, outputs=list(run.outputs), secret_outputs=(), stack=stack_file))
    types = {r.type for r in run.resources}
    if types & set(checks.TAGGABLE_TYPES):
        assert checks.REQUIRED_TAGS in found
    if "kubeconfig" in run.outputs:
        assert checks.KUBECONFIG_SECRET in found
    gpu_pools = [r for r in run.resources if r.type in (checks.EKS_NODE_GROUP, checks.GKE_NODE_POOL)
                 and checks.gpu_shape((r.inputs.get("instanceTypes") or [None])[0]
                                      or (r.inputs.get("nodeConfig") or {}).get("machineType")
                                      or _template_type(run, r))]
    if gpu_pools:
        assert checks.GPU_TAINT in found
    if checks.LAUNCH_TEMPLATE in types:
        assert checks.IMDSV2 in found
    if any(r.type == checks.GKE_NODE_POOL and (r.inputs.get("networkConfig") or {}).get("additionalNodeNetworkConfigs")
           for r in run.resources):
        assert checks.GCP_GPU_NETWORKS in found


def _template_type(run: Any, group: Any) -> Any:
    lt_id = (group.inputs.get("launchTemplate") or {}).get("id")
    for r in run.of_type(checks.LAUNCH_TEMPLATE):
        if lt_id == f"{r.name}-id":
            return r.inputs.get("instanceType")
    return None


def _first_stack(cloud: str) -> Path:
    for path in STACKS:
        config = yaml.safe_load(path.read_text())["config"] or {}
        if config.get("gpufleet:cloud") == cloud and config.get("gpufleet:role", "worker") == "worker":
            return path
    raise AssertionError(f"no {cloud} worker stack in stacks/")


@pytest.mark.parametrize("cloud", ["aws", "gcp"])
def test_real_public_endpoint_passes_only_when_the_stack_config_lists_the_cidr(cloud: str) -> None:
    from infra.mockrun import run_stack

    # A /8 (the widest public set the config takes: issue 28), flagged unless the stack config lists it.
    world = {"publicAccess": True, "publicAccessCidrs": ["11.0.0.0/8"]}
    run = run_stack(str(_first_stack(cloud)), config_override={"cluster": world})
    resources = [checks.from_registered(r) for r in run.resources]
    strict = checks.run_all(resources, outputs=list(run.outputs), secret_outputs=run.secret_outputs)
    assert rules(strict) == {checks.PUBLIC_INGRESS}
    assert {v.type for v in strict} <= {checks.EKS_CLUSTER, checks.GKE_CLUSTER}
    allowed = checks.run_all(resources, outputs=list(run.outputs), secret_outputs=run.secret_outputs,
                             allowed_cidrs=checks.allowed_public_cidrs(world))
    assert allowed == []


@pytest.mark.parametrize("public", [True, False])
def test_served_pack_reads_the_stack_config_like_pulumi_runs_it(public: bool) -> None:
    """Start the pack the way the Pulumi CLI does (`python -m pulumi.policy <engine> <pack dir>`, stack config in
    PULUMI_CONFIG) and ask it over gRPC about a world-open EKS endpoint."""
    import grpc
    from google.protobuf import empty_pb2
    from pulumi.runtime.proto import analyzer_pb2, analyzer_pb2_grpc

    cluster = {"publicAccess": public, "publicAccessCidrs": ["0.0.0.0/0"]}
    # Without PYTHONUNBUFFERED: the pack must hand over its port through a pipe however it was started.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env["PULUMI_CONFIG"] = json.dumps({"gpufleet:cluster": json.dumps(cluster)})
    pack_dir = ROOT / "infra" / "policy"
    proc = subprocess.Popen([sys.executable, "-m", "pulumi.policy", "127.0.0.1:1", str(pack_dir)], cwd=pack_dir,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready, "the policy pack printed no port within 60 s"
        port = int(proc.stdout.readline())
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = analyzer_pb2_grpc.AnalyzerStub(channel)
            assert stub.GetAnalyzerInfo(empty_pb2.Empty()).name == "gpufleet"
            props = {"vpcConfig": {"endpointPublicAccess": True, "publicAccessCidrs": ["0.0.0.0/0"]}, "tags": TAGS}
            found = stub.Analyze(analyzer_pb2.AnalyzeRequest(type=checks.EKS_CLUSTER, name="eks", urn="urn:eks",
                                                             properties=_struct(props))).diagnostics
    finally:
        proc.kill()
        proc.wait()
    assert [d.policyName for d in found] == ([] if public else [checks.PUBLIC_INGRESS])
