"""The Kubernetes Cluster Autoscaler for the EKS GPU node groups, able to scale a pool up from zero nodes.

EKS managed node groups never change size by themselves: something has to raise the desired size of the
node group's Auto Scaling group when a pod is pending. The upstream Cluster Autoscaler does that. It finds
the ASGs by their ``k8s.io/cluster-autoscaler/*`` tags. For a group with no nodes it builds a template node
from the instance type and the ``node-template`` tags, so each GPU ASG is tagged with its pool's node
labels, the GPU taint and the extended resources (``nvidia.com/gpu``, ``vpc.amazonaws.com/efa``) the
device plugins will advertise. Without those tags, a pending pod that asks for EFA devices, selects a pool
label or tolerates only the GPU taint looks unschedulable on every empty group, and no node is added.

Credentials come from EKS Pod Identity (the ``eks-pod-identity-agent`` add-on installed by
:class:`infra.aws.cluster.EksCluster`). Only ASGs tagged ``k8s.io/cluster-autoscaler/<cluster>: owned``
can be resized or have instances terminated.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from infra.aws.gpu_nodes import GPU_TAINT_KEY, GPU_TAINT_VALUE, pool_labels
from infra.aws.iam import pod_identity_trust_policy
from infra.aws.layout import resource_tags, uses_efa
from infra.config import ConfigError, StackConfig
from infra.config.pools import NodePoolConfig
from placement.model.kueue import EFA_HUGEPAGES_MIB, RES_HUGEPAGES

CHART = "cluster-autoscaler"
CHART_REPO = "https://kubernetes.github.io/autoscaler"
IMAGE_REPOSITORY = "registry.k8s.io/autoscaling/cluster-autoscaler"
NAMESPACE = "kube-system"
SERVICE_ACCOUNT = "cluster-autoscaler"
# The autoscaler simulates kube-scheduler, so its minor must match the cluster's. Each entry is
# (chart version, image tag): the newest chart built for that minor, plus the latest patch image
# (chart 9.51.0 ships v1.33.0 by default; v1.33.6 carries the later fixes).
RELEASES: Mapping[str, tuple[str, str]] = {
    "1.33": ("9.51.0", "v1.33.6"),
    "1.34": ("9.53.0", "v1.34.5"),
    "1.35": ("9.59.0", "v1.35.2"),
}
TAG_PREFIX = "k8s.io/cluster-autoscaler"
# Kubernetes spells the taint effect differently from the EKS API (NO_SCHEDULE on the node group).
GPU_TAINT_EFFECT = "NoSchedule"
GPU_RESOURCE = "nvidia.com/gpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
# Where the autoscaler runs: the system node group's label (see EksCluster), never a GPU node.
SYSTEM_NODE_SELECTOR = {"gpufleet.io/role": "system"}
# An idle GPU node costs $20-100/h. After this long without pods that need it, the node is removed.
SCALE_DOWN_UNNEEDED_TIME = "10m"
# A p5 node has to attach 32 EFA interfaces and build a RAID0 over 8 NVMe disks before it registers.
# Past this deadline the autoscaler treats the scale-up as failed and backs off the group.
MAX_NODE_PROVISION_TIME = "20m"


def autoscaler_release(kubernetes_version: str) -> tuple[str, str]:
    """``(chart version, image tag)`` for a cluster minor version such as ``1.33``.

    Raises :class:`ConfigError` on ``gpufleet:cluster.kubernetesVersion`` for a minor that has no
    matching autoscaler release pinned here.
    """
    try:
        return RELEASES[kubernetes_version]
    except KeyError:
        raise ConfigError("gpufleet:cluster.kubernetesVersion",
                          f"no Cluster Autoscaler release is pinned for Kubernetes {kubernetes_version}; "
                          f"use one of {', '.join(sorted(RELEASES))}") from None


def discovery_tags(cluster_name: str) -> dict[str, str]:
    """The two tags the autoscaler's ASG auto-discovery looks for. The IAM policy conditions on the second."""
    return {f"{TAG_PREFIX}/enabled": "true", f"{TAG_PREFIX}/{cluster_name}": "owned"}


def node_template_tags(pool: NodePoolConfig) -> dict[str, str]:
    """ASG tags that describe a node of ``pool`` before one exists: node labels, the GPU taint, and extended
    resources in counts per node (GPUs, and EFA devices: one per network card, as the launch template wires,
    plus the 2 MiB huge pages EFA nodes reserve, which every EFA pod requests).
    """
    tags = {f"{TAG_PREFIX}/node-template/label/{k}": v for k, v in pool_labels(pool).items()}
    tags[f"{TAG_PREFIX}/node-template/taint/{GPU_TAINT_KEY}"] = f"{GPU_TAINT_VALUE}:{GPU_TAINT_EFFECT}"
    tags[f"{TAG_PREFIX}/node-template/resources/{GPU_RESOURCE}"] = str(pool.shape.gpus)
    if uses_efa(pool):
        tags[f"{TAG_PREFIX}/node-template/resources/{EFA_RESOURCE}"] = str(pool.shape.network_cards)
        tags[f"{TAG_PREFIX}/node-template/resources/{RES_HUGEPAGES}"] = f"{EFA_HUGEPAGES_MIB}Mi"
    return tags


def asg_tags(cluster_name: str, pool: NodePoolConfig) -> dict[str, str]:
    """Every tag the autoscaler needs on the ASG of ``pool``'s node group."""
    return {**discovery_tags(cluster_name), **node_template_tags(pool)}


def autoscaler_policy(cluster_name: str, partition: str, region: str, account_id: str) -> str:
    """The upstream Cluster Autoscaler policy for auto-discovery with launch templates.

    The describe calls take no resource-level permissions. Resizing and terminating are conditioned on the
    ``k8s.io/cluster-autoscaler/<cluster>: owned`` tag, so only this cluster's groups can change.
    ``eks:DescribeNodegroup`` (labels and taints of an empty managed node group) is limited to this
    cluster's node groups.
    """
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ScaleOwnedGroups",
                "Effect": "Allow",
                "Action": ["autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"],
                "Resource": "*",
                "Condition": {"StringEquals": {f"aws:ResourceTag/{TAG_PREFIX}/{cluster_name}": "owned"}},
            },
            {
                "Sid": "Discover",
                "Effect": "Allow",
                "Action": [
                    "autoscaling:DescribeAutoScalingGroups",
                    "autoscaling:DescribeAutoScalingInstances",
                    "autoscaling:DescribeLaunchConfigurations",
                    "autoscaling:DescribeScalingActivities",
                    "autoscaling:DescribeTags",
                    "ec2:DescribeImages",
                    "ec2:DescribeInstanceTypes",
                    "ec2:DescribeLaunchTemplateVersions",
                    "ec2:GetInstanceTypesFromInstanceRequirements",
                ],
                "Resource": "*",
            },
            {
                "Sid": "DescribeNodegroups",
                "Effect": "Allow",
                "Action": ["eks:DescribeNodegroup"],
                "Resource": f"arn:{partition}:eks:{region}:{account_id}:nodegroup/{cluster_name}/*/*",
            },
        ],
    })


def helm_values(cfg: StackConfig, cluster_name: pulumi.Input[str], image_tag: str) -> dict[str, Any]:
    """Chart values: auto-discovery by this cluster's tags, Pod Identity service account, system nodes only."""
    return {
        "cloudProvider": "aws",
        "awsRegion": cfg.region,
        "autoDiscovery": {"clusterName": cluster_name},
        "image": {"repository": IMAGE_REPOSITORY, "tag": image_tag},
        "fullnameOverride": "cluster-autoscaler",
        # Pod Identity needs no role annotation: the association binds the role to this name.
        "rbac": {"create": True, "serviceAccount": {"create": True, "name": SERVICE_ACCOUNT}},
        "nodeSelector": dict(SYSTEM_NODE_SELECTOR),
        # No GPU toleration: a GPU node hosting the autoscaler could never be scaled down.
        "tolerations": [],
        "priorityClassName": "system-cluster-critical",
        "resources": {"requests": {"cpu": "100m", "memory": "600Mi"}, "limits": {"memory": "600Mi"}},
        "extraArgs": {
            "balance-similar-node-groups": True,
            # Training pods keep scratch in emptyDir on the RAID0 instance store; that must not pin nodes.
            "skip-nodes-with-local-storage": False,
            # Kueue's flavors already pin each admitted pod to one pool; the expander only breaks ties for
            # pods outside Kueue, where the group with the least idle capacity after scale-up is cheapest.
            "expander": "least-waste",
            "scale-down-unneeded-time": SCALE_DOWN_UNNEEDED_TIME,
            "max-node-provision-time": MAX_NODE_PROVISION_TIME,
        },
    }


@dataclass(frozen=True)
class ScalableGroup:
    """A GPU pool and the managed node group that serves it."""

    pool: NodePoolConfig
    node_group: aws.eks.NodeGroup


@dataclass(frozen=True)
class ClusterAutoscalerArgs:
    """Inputs of :class:`ClusterAutoscaler`.

    ``cluster_name``: the EKS cluster's name output (so the release waits for the cluster). ``groups``: the
    GPU node groups whose ASGs get the discovery and node-template tags. ``depends_on``: what the autoscaler
    pod needs before it can start (the system node group and its add-ons).
    """

    cfg: StackConfig
    stack: str
    partition: str
    account_id: str
    cluster_name: pulumi.Input[str]
    groups: Sequence[ScalableGroup]
    depends_on: Sequence[pulumi.Resource] = ()


def _asg_name(resources: Sequence[aws.eks.outputs.NodeGroupResource]) -> str:
    """The name of the Auto Scaling group EKS created for a managed node group (one per node group)."""
    groups = resources[0].autoscaling_groups or []
    return str(groups[0].name)


def _tag_part(key: str, cluster_name: str) -> str:
    """Pulumi name part for an ASG tag key (``.../node-template/label/gpufleet.io/pool``: ``label-gpufleet.io-pool``).
    """
    if key == f"{TAG_PREFIX}/{cluster_name}":
        return "owned"
    return key.removeprefix(f"{TAG_PREFIX}/").removeprefix("node-template/").replace("/", "-")


class ClusterAutoscaler(pulumi.ComponentResource):
    """IAM role (EKS Pod Identity), ASG tags for scale-from-zero, and the upstream Cluster Autoscaler chart.

    ``opts`` must carry both the stack's AWS provider and the cluster's Kubernetes provider
    (``providers={"aws": ..., "kubernetes": ...}``).
    """

    role: aws.iam.Role
    release: k8s.helm.v3.Release
    asg_tags: list[aws.autoscaling.Tag]

    def __init__(self, name: str, args: ClusterAutoscalerArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:aws:ClusterAutoscaler", name, None, opts)
        cfg = args.cfg
        child = pulumi.ResourceOptions(parent=self)
        chart_version, image_tag = autoscaler_release(cfg.cluster.kubernetes_version)

        def tags(part: str) -> dict[str, str]:
            return resource_tags(cfg, args.stack, f"{name}-{part}")

        self.role = aws.iam.Role(f"{name}-role", assume_role_policy=pod_identity_trust_policy(),
                                 description=f"Cluster Autoscaler of {cfg.cluster_name} (EKS Pod Identity)",
                                 tags=tags("role"), opts=child)
        policy = aws.iam.RolePolicy(f"{name}-policy", role=self.role.id,
                                    policy=autoscaler_policy(cfg.cluster_name, args.partition, cfg.region,
                                                             args.account_id),
                                    opts=child)
        association = aws.eks.PodIdentityAssociation(
            f"{name}-pod-identity", cluster_name=args.cluster_name, namespace=NAMESPACE,
            service_account=SERVICE_ACCOUNT, role_arn=self.role.arn, tags=tags("pod-identity"), opts=child)

        # EKS already puts the two discovery tags on managed node group ASGs; setting them here too keeps
        # discovery and the IAM condition independent of that behaviour. Not propagated: instances need
        # none of these, and the node group's own tags reach them through the launch template.
        self.asg_tags = []
        for group in args.groups:
            asg = group.node_group.resources.apply(_asg_name)
            for key, value in asg_tags(cfg.cluster_name, group.pool).items():
                self.asg_tags.append(aws.autoscaling.Tag(
                    f"{name}-{group.pool.name}-{_tag_part(key, cfg.cluster_name)}",
                    autoscaling_group_name=asg,
                    tag=aws.autoscaling.TagTagArgs(key=key, value=value, propagate_at_launch=False),
                    opts=child))

        self.release = k8s.helm.v3.Release(
            f"{name}-release",
            name="cluster-autoscaler",
            chart=CHART,
            version=chart_version,
            repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=CHART_REPO),
            namespace=NAMESPACE,
            values=helm_values(cfg, args.cluster_name, image_tag),
            skip_await=False,
            # Pod Identity credentials are injected when the pod is created: the association must exist first.
            opts=pulumi.ResourceOptions(parent=self, depends_on=[association, policy, *args.depends_on]),
        )

        self.register_outputs({
            "roleArn": self.role.arn,
            "release": self.release.name,
            "chartVersion": chart_version,
            "imageTag": image_tag,
        })
