"""The FSx for Lustre CSI driver, pinned: the upstream Helm chart, its controller on an IRSA role of its own.

The node plugin (a DaemonSet that tolerates every taint, so it runs on the GPU nodes) mounts the stack's file
system through the static volumes of :mod:`infra.k8s.storage`; it calls no AWS API for that. The controller
only validates those volumes (it describes the file system), with its own role and nothing more. Neither runs
on the host network: with IMDS closed to pods (hop limit 1) the driver reads region and zone from its node's
labels (its Kubernetes API fallback), and the chart's ``controller.region`` sets the region explicitly.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from infra.aws.iam import irsa_trust_policy
from infra.aws.layout import resource_tags
from infra.config import StackConfig

CHART = "aws-fsx-csi-driver"
CHART_REPO = "https://kubernetes-sigs.github.io/aws-fsx-csi-driver"
# Chart 1.17.0 ships driver v1.9.0 (charts/aws-fsx-csi-driver/Chart.yaml at tag v1.9.0).
CHART_VERSION = "1.17.0"
DRIVER_VERSION = "v1.9.0"
NAMESPACE = "kube-system"
CONTROLLER_SERVICE_ACCOUNT = "fsx-csi-controller-sa"
SYSTEM_NODE_SELECTOR = {"gpufleet.io/role": "system"}


def fsx_csi_values(region: str, role_arn: str) -> dict[str, Any]:
    """Chart values: the controller on the system nodes with the IRSA role; the node plugin everywhere."""
    return {
        "image": {"tag": DRIVER_VERSION},
        "controller": {
            "region": region,
            "nodeSelector": dict(SYSTEM_NODE_SELECTOR),
            "serviceAccount": {"create": True, "name": CONTROLLER_SERVICE_ACCOUNT,
                               "annotations": {"eks.amazonaws.com/role-arn": role_arn}},
        },
        "node": {"tolerateAllTaints": True},
    }


# What the controller calls for a static volume (a PV naming an existing file system): ValidateVolumeCapabilities
# describes the file system (pkg/driver/controller.go at v1.9.0). Creating, deleting and resizing file systems
# (the driver's install guide grants AmazonFSxFullAccess for dynamic provisioning) are never needed: the stack
# has no StorageClass, so no claim reaches CreateVolume, DeleteVolume or ControllerExpandVolume, and the
# checkpoint file system cannot be deleted through the driver. Describe calls are read-only and not scoped.
STATIC_MOUNT_ACTIONS = ("fsx:DescribeFileSystems",)


def static_mount_policy() -> str:
    """The controller's only rights: describe file systems (see :data:`STATIC_MOUNT_ACTIONS`)."""
    return json.dumps({"Version": "2012-10-17", "Statement": [{
        "Sid": "DescribeForStaticVolumes", "Effect": "Allow", "Action": list(STATIC_MOUNT_ACTIONS), "Resource": "*"}]})


@dataclass(frozen=True)
class FsxCsiDriverArgs:
    """``oidc_provider_arn``/``oidc_issuer``: the cluster's IRSA identity provider; ``depends_on``: the system
    node group (the controller runs there)."""

    cfg: StackConfig
    stack: str
    partition: str
    oidc_provider_arn: pulumi.Input[str]
    oidc_issuer: pulumi.Input[str]
    depends_on: Sequence[pulumi.Resource] = field(default_factory=tuple)


class FsxCsiDriver(pulumi.ComponentResource):
    """The controller's IRSA role and the pinned Helm release (``release``)."""

    def __init__(self, name: str, args: FsxCsiDriverArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:aws:FsxCsiDriver", name, None, opts)
        cfg = args.cfg
        child = pulumi.ResourceOptions(parent=self)
        role = aws.iam.Role(
            f"{name}-role",
            assume_role_policy=irsa_trust_policy(args.oidc_provider_arn, args.oidc_issuer,
                                                 [(NAMESPACE, CONTROLLER_SERVICE_ACCOUNT)]),
            description="FSx CSI controller (IRSA): validates the stack's static FSx for Lustre volumes",
            tags=resource_tags(cfg, args.stack, f"{name}-role"), opts=child)
        attach = aws.iam.RolePolicy(f"{name}-static-mounts", role=role.id, policy=static_mount_policy(), opts=child)
        self.role_arn = role.arn
        self.release = k8s.helm.v3.Release(
            f"{name}-release",
            name=CHART,
            chart=CHART,
            version=CHART_VERSION,
            repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=CHART_REPO),
            namespace=NAMESPACE,
            values=role.arn.apply(lambda arn: fsx_csi_values(cfg.region, arn)),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[*args.depends_on, attach]),
        )
        self.register_outputs({"roleArn": self.role_arn, "chartVersion": CHART_VERSION})
