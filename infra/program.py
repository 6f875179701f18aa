"""The Pulumi program: read the stack config once, build the stack's cloud, then the shared add-ons."""

from __future__ import annotations

from infra.config import ConfigError, StackConfig, from_pulumi


def load_config() -> StackConfig:
    """Validated stack config; a bad value stops the program before any resource is registered."""
    import pulumi

    try:
        return from_pulumi()
    except ConfigError as exc:
        # RunError prints one line without a Python traceback in `pulumi up`.
        raise pulumi.RunError(f"invalid stack config: {exc}") from None


def main() -> None:
    cfg = load_config()
    if cfg.role == "hub":
        from infra.k8s.hub import build_hub

        build_hub(cfg)
        return

    import pulumi

    from infra.hub_link import resolve
    from infra.k8s.addons import ClusterAddons, ClusterAddonsArgs

    # A worker serving a hub (gpufleet:cluster.hubStack) authorises the egress that hub exports.
    cfg = resolve(cfg)

    if cfg.cloud == "aws":
        from infra.aws import build
    else:
        from infra.gcp import build  # type: ignore[assignment]
    built = build(cfg)
    # Kueue, device plugins, NCCL installers and the training service accounts: the same component on both
    # clouds, fed from the pools and the cloud's checkpoint identity.
    addons = ClusterAddons(f"{cfg.cluster_name}-addons",
                           ClusterAddonsArgs(cfg=cfg, platform=cfg.cloud, depends_on=built.node_pools,
                                             training_identity=built.training_identity,
                                             checkpoint_filesystem=built.checkpoint_filesystem),
                           opts=pulumi.ResourceOptions(provider=built.k8s_provider))
    pulumi.export("kueue", {"clusterQueue": addons.cluster_queue, "localQueues": addons.local_queues})
