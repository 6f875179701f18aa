"""AWS GPU cluster stacks: VPC with an EFA-ready GPU subnet, EKS, EFA-wired GPU node groups, checkpoint storage.

``build(cfg)`` is called by ``infra.program.main`` for ``gpufleet:cloud: aws`` worker stacks. Everything the
stack creates is derived from the config's shapes (``placement/data/shapes.yaml``) and zone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from infra.aws.autoscaler import ClusterAutoscaler, ClusterAutoscalerArgs, ScalableGroup, autoscaler_release
from infra.aws.checkpoint import CheckpointStore, CheckpointStoreArgs
from infra.aws.cluster import EksCluster, EksClusterArgs
from infra.aws.fsx_csi import FsxCsiDriver, FsxCsiDriverArgs
from infra.aws.gpu_nodes import GpuNodeGroup, GpuNodeGroupArgs
from infra.aws.iam import check_irsa_trust_size
from infra.aws.layout import (
    Zone,
    bucket_name,
    gpu_zones,
    needs_placement_group,
    pick_system_azs,
    placement_zones,
    plan_subnets,
    primary_gpu_zone,
    resource_tags,
    unused_pins,
)
from infra.aws.network import Network, NetworkArgs
from infra.config import ConfigError, StackConfig
from infra.outputs import BuiltCluster, export_cluster
from infra.protect import cluster_identity, k8s_provider_args, provider_migration

if TYPE_CHECKING:
    from infra.hub_link import PeerCheckpoint

__all__ = ["build"]

IRSA_ROLE_ANNOTATION = "eks.amazonaws.com/role-arn"


def _available_zones(provider: aws.Provider, region: str) -> list[Zone]:
    """The region's regular AZs (Local and Wavelength Zones need opt-in and cannot host the control plane)."""
    result = aws.get_availability_zones(
        state="available", region=region,
        filters=[aws.GetAvailabilityZonesFilterArgs(name="opt-in-status", values=["opt-in-not-required"])],
        opts=pulumi.InvokeOptions(provider=provider))
    return [Zone(name=n, zone_id=z) for n, z in zip(result.names, result.zone_ids, strict=True)]


def build(cfg: StackConfig, checkpoint_peers: Mapping[str, str] | None = None,
          federation_peers: Mapping[str, PeerCheckpoint] | None = None) -> BuiltCluster:
    """Create the AWS cluster stack for ``cfg`` and export its outputs. ``checkpoint_peers``: per worker key,
    the training role ARN of another worker of the hub granted read/write on the checkpoint bucket.

    The subnet layout is planned before the first resource, so a config that cannot be laid out raises
    :class:`pulumi.RunError` naming the key and registers nothing.
    """
    try:
        plan = plan_subnets(cfg)
        autoscaler_release(cfg.cluster.kubernetes_version)
        check_irsa_trust_size(cfg.region, [(ns, cfg.training.service_account) for ns in cfg.training_namespaces],
                              "gpufleet:kueue.teams")
    except ConfigError as exc:
        raise pulumi.RunError(f"invalid stack config: {exc}") from None
    stack = pulumi.get_stack()

    provider = aws.Provider(f"{cfg.cluster_name}-aws", region=cfg.region)
    invoke = pulumi.InvokeOptions(provider=provider)
    opts = pulumi.ResourceOptions(providers={"aws": provider})
    account_id = aws.get_caller_identity(opts=invoke).account_id
    partition = aws.get_partition(opts=invoke).partition
    try:
        azs = pick_system_azs(cfg, _available_zones(provider, cfg.region))
        for az in azs:
            plan.system_cidrs(az)  # an unpinned slot must not overlap a pinned subnet
    except ConfigError as exc:
        raise pulumi.RunError(f"invalid stack config: {exc}") from None
    for key in unused_pins(plan, azs):
        # Not an error: a smaller azCount drops its subnets on purpose. Said, because a pin that matches nothing
        # usually means the AZs moved and the old subnets are about to be replaced.
        pulumi.log.warn(f"gpufleet:network.subnetCidrs.{key} pins a subnet this stack does not build (system AZs "
                        f"{', '.join(az.zone_id for az in azs)}); that subnet is deleted. Set gpufleet:gpuZone and "
                        "network.azCount to the AZs the stack had, or drop the pin (docs/aws.md)")

    name = cfg.cluster_name
    network = Network(f"{name}-net", NetworkArgs(cfg=cfg, stack=stack, plan=plan, azs=azs, gpu_zones=gpu_zones(cfg),
                                                 placement_zones=placement_zones(cfg)), opts)
    cluster = EksCluster(f"{name}-cluster", EksClusterArgs(cfg=cfg, stack=stack, partition=partition,
                                                           vpc_id=network.vpc_id,
                                                           subnet_ids=network.private_subnet_ids), opts)

    groups: list[GpuNodeGroup] = []
    for pool in cfg.node_pools:
        groups.append(GpuNodeGroup(f"{name}-{pool.name}", GpuNodeGroupArgs(
            cfg=cfg, stack=stack, pool=pool,
            cluster_name=cluster.name,
            kubernetes_version=cluster.version,
            node_role_arn=cluster.node_role_arn,
            subnet_id=network.gpu_subnet_ids[pool.zone],
            efa_security_group_id=network.efa_security_group_id,
            cluster_security_group_id=cluster.cluster_security_group_id,
            placement_group=network.placement_groups[pool.zone] if needs_placement_group(pool) else None,
            depends_on=cluster.before_nodes,
        ), opts))

    store = CheckpointStore(f"{name}-ckpt", CheckpointStoreArgs(
        cfg=cfg, stack=stack, account_id=account_id, partition=partition, bucket=bucket_name(cfg, account_id),
        vpc_id=network.vpc_id, vpc_cidr=network.vpc_cidr,
        gpu_subnet_id=network.gpu_subnet_ids[primary_gpu_zone(cfg)],
        oidc_provider_arn=cluster.oidc_provider_arn, oidc_issuer=cluster.oidc_issuer,
        peers=dict(checkpoint_peers or {}),
    ), opts)

    federation: dict[str, Any] = {}
    gke = {k: p for k, p in sorted((federation_peers or {}).items()) if p.cloud == "gcp" and p.issuer}
    if gke:
        from infra.aws.federation import GkePeer, S3Federation, S3FederationArgs

        # GKE workers of the hub: their training service accounts assume a role here by web identity (issue 35).
        fed = S3Federation(f"{name}-federation", S3FederationArgs(
            peers={k: GkePeer(issuer=str(p.issuer), subjects=p.subjects) for k, p in gke.items()},
            bucket_arn=store.bucket_arn, key_arn=store.key_arn, prefix=cfg.checkpoint.prefix, partition=partition,
            region=cfg.region, tags=resource_tags(cfg, stack, f"{name}-federation")), opts)
        federation = dict(fed.entries)
    export_cluster(cfg, cluster_name=cluster.name, kubeconfig=cluster.kubeconfig,
                   checkpoint_uri=store.checkpoint_uri, filesystem=store.filesystem, extra={
                       **({"federation": federation} if federation else {}),
                       "vpcId": network.vpc_id,
                       "gpuSubnetIds": network.gpu_subnet_ids,
                       "efaSecurityGroupId": network.efa_security_group_id,
                       "placementGroups": {z: pg.name for z, pg in network.placement_groups.items()},
                       "systemZones": [az.zone_id for az in azs],
                       "checkpointBucket": store.bucket_name,
                       "checkpointKmsKeyArn": store.key_arn,
                       "trainingRoleArn": store.training_role_arn,
                       "oidcProviderArn": cluster.oidc_provider_arn,
                       "nodeRoleArn": cluster.node_role_arn,
                   }, cluster_identity_output=cluster.oidc_issuer.apply(lambda i: cluster_identity("eks", i)))

    # The cluster's unique identity (its OIDC issuer, new for a cluster re-created under the same name) keys the
    # provider: the EKS endpoint is fixed for the cluster's life, and a kubeconfig change (a new CA bundle, another
    # exec plugin) is not a new cluster. An existing stack with the name-based identifier takes it in two steps
    # (gpufleet:cluster.providerMigration, docs/aws.md).
    identity = cluster.oidc_issuer.apply(lambda issuer: cluster_identity("eks", issuer))
    migration = provider_migration(cfg)
    k8s_provider = k8s.Provider(f"{name}-k8s", kubeconfig=cluster.kubeconfig,
                                **k8s_provider_args(None if migration == "drop-name-identifier" else identity))
    # EKS node groups do not scale themselves; without this, pools with minNodes 0 never get a node.
    ClusterAutoscaler(f"{name}-autoscaler", ClusterAutoscalerArgs(
        cfg=cfg, stack=stack, partition=partition, account_id=account_id, cluster_name=cluster.name,
        groups=[ScalableGroup(pool=pool, node_group=g.node_group) for pool, g in zip(cfg.node_pools, groups,
                                                                                      strict=True)],
        depends_on=[cluster.system_node_group],
    ), pulumi.ResourceOptions(providers={"aws": provider, "kubernetes": k8s_provider}))
    if cfg.checkpoint.filesystem.kind == "fsx":
        # Mounts the stack's file system through the static claims ClusterAddons puts in each namespace.
        FsxCsiDriver(f"{name}-fsx-csi", FsxCsiDriverArgs(
            cfg=cfg, stack=stack, partition=partition, oidc_provider_arn=cluster.oidc_provider_arn,
            oidc_issuer=cluster.oidc_issuer, depends_on=[cluster.system_node_group],
        ), pulumi.ResourceOptions(providers={"aws": provider, "kubernetes": k8s_provider}))
    return BuiltCluster(kubeconfig=cluster.kubeconfig, k8s_provider=k8s_provider,
                        node_pools=[g.node_group for g in groups],
                        # IRSA: the add-ons put this on the training service account of every team namespace.
                        training_identity={IRSA_ROLE_ANNOTATION: store.training_role_arn},
                        checkpoint_filesystem=store.filesystem)
