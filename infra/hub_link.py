"""The path from a MultiKueue hub to a worker's Kubernetes API, on the worker's side.

By default a worker's API is reached on its public endpoint from the hub's NAT egress addresses only: the hub
stack exports them (``egressCidrs``, from ``gpufleet:hub.egressCidrs``) and a worker with
``gpufleet:cluster.hubStack`` reads them by StackReference before its cluster is built, adding them to its
``hubCidrs``. The existing allow-list mechanism then does the rest, unchanged: on EKS the public endpoint's
``publicAccessCidrs`` (public addresses) and the 443 ingress rule of the private endpoint (private ranges); on
GKE the master authorized networks. So the worker's allow-list follows the hub: `pulumi up` the worker again
after the hub's egress changes.

Read before any resource is declared, so the per-CIDR rules are plain resources (a StackReference output
cannot size a resource list). A hub stack that exports no ``egressCidrs`` yet (first bring-up: workers come
before the hub) adds nothing and warns; a public endpoint whose allow-list would be empty is kept off, since
EKS reads an empty ``publicAccessCidrs`` as the whole internet.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Sequence
from typing import Any

from infra.config import StackConfig, is_private_cidr
from infra.outputs import public_endpoint_cidrs

HUB_EGRESS_OUTPUT = "egressCidrs"
WORLD = ("0.0.0.0/0", "::/0")


def egress_cidrs(value: Any) -> tuple[str, ...] | None:
    """The hub's ``egressCidrs`` output as normalised IPv4 CIDRs (a bare address is its /32), or None when it
    is absent or not a list. Invalid entries, IPv6 and the whole internet are dropped: a hub output never opens
    an API to everyone."""
    if not isinstance(value, (list, tuple)):
        return None
    out: list[str] = []
    for item in value:
        try:
            net = ipaddress.ip_network(str(item), strict=False)
        except ValueError:
            continue
        if net.version == 4 and str(net) not in WORLD and str(net) not in out:
            out.append(str(net))
    return tuple(out)


def with_hub_egress(cfg: StackConfig, egress: Sequence[str] | None) -> tuple[StackConfig, list[str]]:
    """``cfg`` with the hub's ``egress`` CIDRs added to ``cluster.hub_cidrs`` (after those configured), and the
    warnings to print. Pure: :func:`resolve` reads ``egress`` from the hub stack."""
    warnings: list[str] = []
    cluster = cfg.cluster
    if egress is None:
        warnings.append(f"hub stack {cluster.hub_stack} exports no {HUB_EGRESS_OUTPUT} yet: its Kueue cannot reach "
                        "this cluster's API until the hub is up and this stack is updated again")
        egress = ()
    hub_cidrs = (*cluster.hub_cidrs, *(c for c in egress if c not in cluster.hub_cidrs))
    cluster = dataclasses.replace(cluster, hub_cidrs=hub_cidrs)
    linked = dataclasses.replace(cfg, cluster=cluster)
    if cluster.public_access and not public_endpoint_cidrs(linked):
        # EKS takes an empty publicAccessCidrs as 0.0.0.0/0; GKE would authorise nothing public anyway.
        warnings.append(f"the public API endpoint stays off: neither gpufleet:cluster.publicAccessCidrs nor hub stack "
                        f"{cfg.cluster.hub_stack}'s {HUB_EGRESS_OUTPUT} list a public address")
        linked = dataclasses.replace(linked, cluster=dataclasses.replace(cluster, public_access=False))
    private = [c for c in egress if is_private_cidr(c)]
    if private and not any(not is_private_cidr(c) for c in egress):
        warnings.append(f"hub stack {cluster.hub_stack} egresses from private ranges only ({', '.join(private)}): "
                        "they reach this cluster's private endpoint only over a VPN or peering between the two")
    return linked, warnings


def read_hub_egress(hub_stack: str, name: str) -> tuple[str, ...] | None:
    """The hub stack's exported egress CIDRs, read now (a StackReference resolved before the cluster is
    declared), or None when it exports none."""
    import pulumi
    from pulumi.runtime.sync_await import _sync_await

    ref = pulumi.StackReference(f"{name}-hub", stack_name=hub_stack)
    details = _sync_await(ref.get_output_details(HUB_EGRESS_OUTPUT))
    value = details.value if details.value is not None else details.secret_value
    return egress_cidrs(value)


def resolve(cfg: StackConfig) -> StackConfig:
    """A worker's config with its hub's egress authorised (``gpufleet:cluster.hubStack``); other stacks as they are."""
    if cfg.role != "worker" or cfg.cluster.hub_stack is None:
        return cfg
    import pulumi

    linked, warnings = with_hub_egress(cfg, read_hub_egress(cfg.cluster.hub_stack, cfg.cluster_name))
    for message in warnings:
        pulumi.log.warn(message)
    return linked
