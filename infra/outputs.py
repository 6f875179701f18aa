"""Stack outputs shared by every cluster stack, the same shape on AWS and GCP.

Consumers (``placement submit``, the hub stack, ``scripts/preview``) read these names only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infra.config import StackConfig
from infra.config.network import is_private_cidr
from infra.config.pools import NodePoolConfig
from placement.model.checkpoint_volumes import CLAIM_NAME


def node_pool_output(pool: NodePoolConfig) -> dict[str, Any]:
    """One node pool as exported: shape, GPUs per node, capacity, zone and scale bounds."""
    return {
        "name": pool.name,
        "instanceType": pool.shape.name,
        "accelerator": pool.shape.accelerator,
        "gpusPerNode": pool.shape.gpus,
        "capacity": pool.capacity_kind,
        "capacityType": pool.capacity,
        "zone": pool.zone,
        "minNodes": pool.min_nodes,
        "maxNodes": pool.max_nodes,
    }


def training_service_account_output(cfg: StackConfig) -> dict[str, Any]:
    """The training ServiceAccount's name and every namespace the stack creates it in (with the cloud
    identity annotation): ``placement submit`` runs jobs as it in those namespaces only."""
    return {"name": cfg.training.service_account, "namespaces": list(cfg.training_namespaces)}


def api_access_output(cfg: StackConfig) -> dict[str, Any]:
    """Who may reach the cluster's Kubernetes API, as a MultiKueue hub needs to know it.

    Both clouds always keep a private endpoint (EKS ``endpoint_private_access``, a GKE private cluster);
    ``publicEndpoint`` says whether the public one is on. ``hubCidrs`` (``gpufleet:cluster.hubCidrs``) are
    authorised on the private endpoint (EKS cluster security group on 443, GKE master authorized networks)
    and, with a public endpoint, on its allow-list next to ``publicAccessCidrs``.
    """
    public = cfg.cluster.public_access
    return {
        "privateEndpoint": True,
        "publicEndpoint": public,
        "publicAccessCidrs": list(cfg.cluster.public_access_cidrs) if public else [],
        "hubCidrs": list(cfg.cluster.hub_cidrs),
        "operatorCidrs": list(cfg.cluster.operator_cidrs),
        # Whether the allow-list binds the private endpoint: always on EKS (the endpoint's security group); on GKE
        # when a hub comes over a private link (privateEndpointEnforcementEnabled, infra/gcp/cluster.py).
        "privateEndpointEnforced": cfg.cloud == "aws" or cfg.cluster.hub_private_link != "none",
    }


def hub_link_output(cfg: StackConfig) -> dict[str, Any]:
    """How a MultiKueue hub's traffic reaches this cluster, for the hub's ``hub-reaches-workers`` check:
    ``hubStack`` (``gpufleet:cluster.hubStack``, whose egress this stack authorises, or None),
    ``privateLink`` (``gpufleet:cluster.hubPrivateLink``: ``none`` or ``external``, a link built outside the
    stacks) and ``addressRanges``, the ranges the cluster brings into the hub's network
    (:func:`infra.config.stack.linked_ranges`, each ``{"key", "cidr"}``), which must not overlap the hub's or another
    worker's."""
    from infra.config.stack import linked_ranges

    return {"hubStack": cfg.cluster.hub_stack, "privateLink": cfg.cluster.hub_private_link,
            "addressRanges": [{"key": f"gpufleet:{key}", "cidr": cidr} for key, cidr in linked_ranges(cfg)]}


def endpoint_cidrs(cfg: StackConfig) -> list[str]:
    """Every CIDR authorised on the private endpoint (EKS cluster security group on 443, GKE master authorized
    networks): ``hubCidrs``, then the ``operatorCidrs`` not already listed."""
    cidrs = list(cfg.cluster.hub_cidrs)
    return cidrs + [c for c in cfg.cluster.operator_cidrs if c not in cidrs]


def public_endpoint_cidrs(cfg: StackConfig) -> list[str]:
    """The public endpoint's allow-list: ``publicAccessCidrs`` then the public hub and operator CIDRs not already
    in it (a private range never reaches a public endpoint, and EKS refuses one in its allow-list)."""
    cidrs = list(cfg.cluster.public_access_cidrs)
    return cidrs + [c for c in endpoint_cidrs(cfg) if c not in cidrs and not is_private_cidr(c)]


def export_cluster(cfg: StackConfig, *, cluster_name: Any, kubeconfig: Any, checkpoint_uri: Any,
                   filesystem: Any = None, extra: dict[str, Any] | None = None, control_plane: Any = None) -> None:
    """Export the common outputs. ``kubeconfig`` is always exported as a secret. ``control_plane`` (GKE: ``psc``
    or ``peering``, an Output) goes into ``apiAccess.controlPlane``."""
    import pulumi

    pulumi.export("cloud", cfg.cloud)
    pulumi.export("region", cfg.region)
    pulumi.export("clusterName", cluster_name)
    pulumi.export("kubeconfig", pulumi.Output.secret(kubeconfig))
    pulumi.export("nodePools", [node_pool_output(p) for p in cfg.node_pools])
    pulumi.export("checkpointUri", checkpoint_uri)
    # The claim every training namespace has on it (infra/k8s/storage.py); placement submit mounts it by name.
    pulumi.export("checkpointFilesystem", None if filesystem is None else pulumi.Output.from_input(filesystem).apply(
        lambda fs: {**fs, "claimName": CLAIM_NAME} if fs else fs))
    pulumi.export("trainingServiceAccount", training_service_account_output(cfg))
    access = api_access_output(cfg)
    pulumi.export("apiAccess", access if control_plane is None else pulumi.Output.from_input(control_plane).apply(
        lambda plane: {**access, "controlPlane": plane}))
    pulumi.export("hubLink", hub_link_output(cfg))
    for key, value in (extra or {}).items():
        pulumi.export(key, value)


class BuiltCluster:
    """What a cloud's ``build(cfg)`` hands back so shared add-ons (Kueue, device plugins) can follow.

    ``kubeconfig`` is a secret ``Output[str]``; ``k8s_provider`` a ``pulumi_kubernetes.Provider`` for
    that cluster; ``node_pools`` the node pool resources add-ons must wait for; ``training_identity`` the
    annotations that bind the training ServiceAccount to the cloud's checkpoint identity
    (``{"eks.amazonaws.com/role-arn": <role ARN>}`` on AWS, ``{"iam.gke.io/gcp-service-account": <GSA
    email>}`` on GCP), put on that ServiceAccount in every ``cfg.training_namespaces`` namespace.
    """

    def __init__(self, kubeconfig: Any, k8s_provider: Any, node_pools: list[Any],
                 training_identity: Mapping[str, Any] | None = None, checkpoint_filesystem: Any = None) -> None:
        self.kubeconfig = kubeconfig
        self.k8s_provider = k8s_provider
        self.node_pools = node_pools
        self.training_identity: Mapping[str, Any] = dict(training_identity or {})
        # The checkpointFilesystem output (``Output[dict]``), None without a filesystem tier.
        self.checkpoint_filesystem = checkpoint_filesystem
