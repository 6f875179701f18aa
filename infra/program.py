"""The Pulumi program: read the stack config once, build the stack's cloud, then the shared add-ons.

``infra/__main__.py`` hands :func:`program` to ``pulumi.run`` (Pulumi's async entry point), so a worker can
await its hub's outputs (:mod:`infra.hub_link`) and validate them with the rest of its config before it declares
anything; under mocks :func:`main` returns the same coroutine for ``infra.mockrun`` to await.
"""

from __future__ import annotations

from collections.abc import Awaitable

from infra.config import ConfigError, StackConfig, from_pulumi


def load_config() -> StackConfig:
    """Validated stack config; a bad value stops the program before any resource is registered."""
    import pulumi

    try:
        cfg = from_pulumi()
        precheck(cfg)
        return cfg
    except ConfigError as exc:
        # RunError prints one line without a Python traceback in `pulumi up`.
        raise pulumi.RunError(f"invalid stack config: {exc}") from None


def precheck(cfg: StackConfig) -> None:
    """The cloud builds' own config checks that need nothing from the cloud (subnet plan, GPU networks, IRSA
    trust size), run here too so that they fail before anything is declared, the hub's StackReference
    included (each build runs them again). Raises :class:`ConfigError`."""
    if cfg.role != "worker":
        return
    if cfg.cloud == "gcp":
        from infra.gcp.plan import check_gcp_config

        check_gcp_config(cfg)
        return
    from infra.aws.autoscaler import autoscaler_release
    from infra.aws.iam import check_irsa_trust_size
    from infra.aws.layout import plan_subnets

    plan_subnets(cfg)
    autoscaler_release(cfg.cluster.kubernetes_version)
    check_irsa_trust_size(cfg.region, [(ns, cfg.training.service_account) for ns in cfg.training_namespaces],
                          "gpufleet:kueue.teams")


def main() -> Awaitable[None]:
    """The program as an awaitable (``infra.mockrun`` and ``pulumi.run`` await it)."""
    return program()


async def program() -> None:
    cfg = load_config()
    if cfg.role == "hub":
        from infra.k8s.hub import build_hub

        build_hub(cfg)
        return

    import pulumi

    from infra.hub_link import checkpoint_peers, cross_cloud_peers, resolve_with_hub
    from infra.k8s.addons import ClusterAddons, ClusterAddonsArgs

    # A worker serving a hub (gpufleet:cluster.hubStack) authorises the egress that hub exports, once the hub's
    # values pass the checks that need them.
    cfg, hub = await resolve_with_hub(cfg)
    # The other same-cloud workers of the hub get read/write on this worker's checkpoint bucket, so a job the
    # hub re-routes here from them (or there from here) resumes from its home.
    peers = checkpoint_peers(hub, pulumi.get_stack(), cfg.cloud)
    # The workers of the other cloud reach it through identity federation (issue 35), when the hub has any.
    federated = cross_cloud_peers(hub, pulumi.get_stack(), cfg.cloud)

    if cfg.cloud == "aws":
        from infra.aws import build
    else:
        from infra.gcp import build  # type: ignore[assignment]
    built = build(cfg, checkpoint_peers=peers, federation_peers=federated)
    # Kueue, device plugins, NCCL installers and the training service accounts: the same component on both
    # clouds, fed from the pools and the cloud's checkpoint identity.
    addons = ClusterAddons(f"{cfg.cluster_name}-addons",
                           ClusterAddonsArgs(cfg=cfg, platform=cfg.cloud, depends_on=built.node_pools,
                                             training_identity=built.training_identity,
                                             checkpoint_filesystem=built.checkpoint_filesystem),
                           opts=pulumi.ResourceOptions(provider=built.k8s_provider))
    pulumi.export("kueue", {"clusterQueue": addons.cluster_queue, "localQueues": addons.local_queues})
