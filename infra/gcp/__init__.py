"""GCP GPU cluster stack: networks shaped by the machine type, private GKE, GPU node pools, checkpoints.

``build(cfg)`` is called by :func:`infra.program.main` for ``gpufleet:cloud: gcp`` worker stacks.
Every check that could fail runs before the first resource is registered.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from infra.config import ConfigError, StackConfig

if TYPE_CHECKING:
    from infra.hub_link import PeerCheckpoint
    from infra.outputs import BuiltCluster


def service_account_issuer(project: str, location: str, cluster: str) -> str:
    """The issuer of a GKE cluster's service-account tokens (the ``iss`` of a projected token)."""
    return f"https://container.googleapis.com/v1/projects/{project}/locations/{location}/clusters/{cluster}"


def build(cfg: StackConfig, checkpoint_peers: Mapping[str, str] | None = None,
          federation_peers: Mapping[str, PeerCheckpoint] | None = None) -> BuiltCluster:
    """Build the whole GCP cluster stack for ``cfg`` and export the common cluster outputs.
    ``checkpoint_peers``: per worker key, the training Google service account email of another worker of the
    hub granted object access on the checkpoint bucket."""
    import pulumi
    import pulumi_gcp as gcp

    from infra.gcp.checkpoint import CheckpointArgs, CheckpointStore
    from infra.gcp.cluster import ClusterArgs, GkeCluster
    from infra.gcp.network import GcpNetwork, NetworkArgs
    from infra.gcp.nodepool import GpuNodePool, GpuNodePoolArgs
    from infra.gcp.plan import check_gcp_config, gcp_labels, primary_zone
    from infra.outputs import BuiltCluster, export_cluster
    from infra.protect import provider_migration

    try:
        plan = check_gcp_config(cfg)
    except ConfigError as exc:
        raise pulumi.RunError(f"invalid stack config: {exc}") from None
    assert cfg.project is not None  # config.parse requires it on GCP stacks

    name = cfg.cluster_name
    labels = gcp_labels(cfg, pulumi.get_stack())
    provider = gcp.Provider(f"{name}-gcp", project=cfg.project, region=cfg.region, default_labels=labels)
    opts = pulumi.ResourceOptions(providers=[provider])

    network = GcpNetwork(f"{name}-network", NetworkArgs(
        region=cfg.region, name=name, network=cfg.network, gpu_plan=plan, labels=labels), opts=opts)

    gpu_zone = primary_zone(cfg)
    cluster = GkeCluster(f"{name}-cluster", ClusterArgs(
        project=cfg.project, region=cfg.region, name=name, cluster=cfg.cluster, network=network,
        system_zone=gpu_zone, filesystem_kind=cfg.checkpoint.filesystem.kind, labels=labels,
        provider_migration=provider_migration(cfg)), opts=opts)

    by_subnet = {b.plan.subnet_name: b for b in network.gpu_subnets}
    pools = [
        GpuNodePool(f"{name}-{pool.name}", GpuNodePoolArgs(
            pool=pool, cluster_id=cluster.cluster.id, location=cluster.cluster.location,
            service_account=cluster.node_service_account.email,
            attachments=[by_subnet[s.subnet_name] for _, s in plan.attachments(pool)], labels=labels), opts=opts)
        for pool in cfg.node_pools
    ]

    store = CheckpointStore(f"{name}-checkpoints", CheckpointArgs(
        project=cfg.project, region=cfg.region, zone=cfg.gpu_zone, cluster_name=name, checkpoint=cfg.checkpoint,
        training=cfg.training, vpc_id=network.vpc.id, vpc_name=network.vpc.name, psa_cidr=plan.psa_cidr,
        workload_pool_ready=[cluster.cluster], labels=labels, namespaces=cfg.training_namespaces,
        allow_replace=cfg.allow_replace, peers=dict(checkpoint_peers or {})), opts=opts)

    if cfg.checkpoint.filesystem.kind == "lustre":
        from infra.gcp.lustre_sync import LustreSync, LustreSyncArgs

        assert store.filesystem is not None  # a lustre kind always has one

        # Managed Lustre is a cache of the bucket only if something exports it: a CronJob on the cluster does.
        LustreSync(f"{name}-lustre-sync", LustreSyncArgs(
            project=cfg.project, cluster_name=name,
            instance=pulumi.Output.concat("projects/", cfg.project, "/locations/", gpu_zone, "/instances/",
                                          store.lustre.instance_id),
            bucket=store.bucket.name, prefix=cfg.checkpoint.prefix, workload_pool_ready=[cluster.cluster],
            labels=labels, filesystem=store.filesystem, allow_replace=cfg.allow_replace),
            gcp_provider=provider, opts=pulumi.ResourceOptions(provider=cluster.k8s_provider))

    federation: dict[str, Any] = {}
    eks = {k: p for k, p in sorted((federation_peers or {}).items()) if p.cloud == "aws"}
    if eks:
        from infra.gcp.federation import EksPeer, GcsFederation, GcsFederationArgs

        # EKS workers of the hub: their training roles reach the homes through Workload Identity Federation.
        fed = GcsFederation(f"{name}-federation", GcsFederationArgs(
            project=cfg.project, cluster_name=name, bucket=store.bucket.name, prefix=cfg.checkpoint.prefix,
            peers={k: EksPeer(account_id=p.training_identity.split(":")[4], role_arn=p.training_identity)
                   for k, p in eks.items()}, labels=labels), opts=opts)
        federation = dict(fed.entries)
    export_cluster(
        cfg, cluster_name=cluster.cluster.name, kubeconfig=cluster.kubeconfig, checkpoint_uri=store.uri,
        filesystem=store.filesystem, control_plane=cluster.control_plane, cluster_identity_output=cluster.identity,
        extra={
            **({"federation": federation} if federation else {}),
            # What AWS workers of the hub federate (issue 35): the issuer of this cluster's service-account tokens.
            "serviceAccountIssuer": service_account_issuer(cfg.project, cfg.region, name),
            "project": cfg.project,
            "gpuZone": gpu_zone,
            "checkpointBucket": store.bucket.name,
            "trainingGoogleServiceAccount": store.service_account_email,
            # Pods opt into the GPU NICs by naming these networks in networking.gke.io/interfaces.
            "gpuNetworks": {p.name: [s.gke_name for _, s in plan.attachments(p)] for p in cfg.node_pools},
        })
    return BuiltCluster(kubeconfig=cluster.kubeconfig, k8s_provider=cluster.k8s_provider,
                        node_pools=[p.node_pool for p in pools],
                        # Workload Identity: the add-ons put this on the training KSA of every team namespace.
                        training_identity={"iam.gke.io/gcp-service-account": store.service_account_email},
                        checkpoint_filesystem=store.filesystem)
