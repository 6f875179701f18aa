"""The path from a MultiKueue hub to a worker's Kubernetes API, on the worker's side.

A worker with ``gpufleet:cluster.hubStack`` reads its hub's outputs by StackReference before it declares
anything else, and is reached one of two ways (``gpufleet:cluster.hubPrivateLink``):

* **public** (``none``, the default): on its public endpoint, from the hub's public NAT addresses (the public
  entries of the hub's ``egressCidrs``), which go on the public endpoint's allow-list;
* **private** (``vpn``: the hub stack's HA VPN; ``external``: a link built outside the stacks): on its private
  endpoint, from the hub's private ranges (the private entries of ``egressCidrs``), authorised there; the
  public endpoint is off (the config requires it), so the kubeconfig the hub dials names the private one.

The chosen ranges are added to the worker's ``hubCidrs`` and the existing allow-list mechanism does the rest
(EKS ``publicAccessCidrs`` and the 443 rules of the endpoint's security group; GKE master authorized
networks). `pulumi up` the worker again after the hub's egress changes.

The hub's values are checked like the worker's own config, before any resource is declared: the hub stack
must be a hub (its ``role`` output), list this worker in ``vpnWorkers`` when the worker says ``vpn``; the
worker's ranges must not overlap another worker's (the hub's ``workerRanges``) or the hub's private ranges;
and on EKS the hub's ranges count into the security group's inbound-rule limit. A hub that exports nothing
yet (first bring-up: workers come before the hub) adds nothing and warns; a public endpoint whose
allow-list would be empty is kept off, since EKS reads an empty ``publicAccessCidrs`` as the whole internet.

The outputs are read with ``await`` inside the program's async entry point (``pulumi.run``,
:func:`infra.program.program`), Pulumi's supported way for a program to wait for a value before it declares
resources; no private SDK helper.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from infra.config import ConfigError, StackConfig
from infra.config.cluster import EKS_API_SG_INBOUND_RULES
from infra.config.network import is_private_cidr, public_span_error
from infra.config.stack import linked_ranges
from infra.outputs import public_endpoint_cidrs

HUB_EGRESS_OUTPUT = "egressCidrs"
# What a worker reads from its hub: its role, its egress, the workers its VPN links, every worker's ranges and
# every worker's checkpoint bucket and training identity.
HUB_OUTPUTS = ("role", HUB_EGRESS_OUTPUT, "vpnWorkers", "workerRanges", "workerCheckpoints")
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


@dataclass(frozen=True)
class PeerCheckpoint:
    """One worker's checkpoint home as its hub exports it (``workerCheckpoints``): ``cloud`` (aws|gcp),
    ``bucket`` (the bucket name) and ``training_identity`` (AWS: the training IRSA role ARN; GCP: the training
    Google service account's email)."""

    cloud: str
    bucket: str
    training_identity: str
    # GCP: the cluster's service-account issuer URL and its training Kubernetes service accounts' subjects
    # (``system:serviceaccount:<namespace>:<name>``): what an AWS worker's OIDC provider and role trust.
    issuer: str | None = None
    subjects: tuple[str, ...] = ()

    @classmethod
    def of(cls, value: Any) -> PeerCheckpoint | None:
        """From one exported entry; None when malformed or incomplete (a worker not yet up)."""
        if not isinstance(value, Mapping):
            return None
        cloud, bucket, identity = (value.get(k) for k in ("cloud", "bucket", "trainingIdentity"))
        if cloud not in ("aws", "gcp") or not isinstance(bucket, str) or not bucket \
                or not isinstance(identity, str) or not identity:
            return None
        issuer, subjects = value.get("issuer"), value.get("subjects")
        good = isinstance(issuer, str) and issuer.startswith("https://") and isinstance(subjects, (list, tuple)) \
            and bool(subjects) and all(isinstance(x, str) and x.startswith("system:serviceaccount:") for x in subjects)
        return cls(cloud=cloud, bucket=bucket, training_identity=identity, issuer=issuer if good else None,
                   subjects=tuple(str(x) for x in subjects) if good and subjects else ())


@dataclass(frozen=True)
class HubView:
    """What a worker read from its hub stack's outputs (None: not exported). ``worker_ranges``: per worker
    key, ``(config key, CIDR)`` of the ranges it brings into the hub's network."""

    role: str | None = None
    egress: tuple[str, ...] | None = None
    vpn_workers: tuple[str, ...] | None = None
    worker_ranges: Mapping[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    worker_checkpoints: Mapping[str, PeerCheckpoint] = field(default_factory=dict)

    @classmethod
    def of(cls, outputs: Mapping[str, Any]) -> HubView:
        """From the hub's raw outputs (malformed entries dropped)."""
        vpn = outputs.get("vpnWorkers")
        ranges: dict[str, tuple[tuple[str, str], ...]] = {}
        raw_ranges = outputs.get("workerRanges")
        for worker, items in (raw_ranges.items() if isinstance(raw_ranges, Mapping) else ()):
            good = []
            for item in items if isinstance(items, (list, tuple)) else ():
                if isinstance(item, Mapping):
                    try:
                        good.append((str(item.get("key")), str(ipaddress.ip_network(str(item.get("cidr"))))))
                    except ValueError:
                        continue
            ranges[str(worker)] = tuple(good)
        checkpoints: dict[str, PeerCheckpoint] = {}
        raw_checkpoints = outputs.get("workerCheckpoints")
        for worker, entry in (raw_checkpoints.items() if isinstance(raw_checkpoints, Mapping) else ()):
            peer = PeerCheckpoint.of(entry)
            if peer is not None:
                checkpoints[str(worker)] = peer
        role = outputs.get("role")
        return cls(role=role if isinstance(role, str) else None, egress=egress_cidrs(outputs.get(HUB_EGRESS_OUTPUT)),
                   vpn_workers=tuple(str(w) for w in vpn) if isinstance(vpn, (list, tuple)) else None,
                   worker_ranges=ranges, worker_checkpoints=checkpoints)


def checkpoint_peers(hub: HubView | None, stack: str, cloud: str) -> dict[str, str]:
    """The training identities to grant on this worker's checkpoint bucket: per worker key, the identity of
    every OTHER worker of the same ``cloud`` joined to the hub (a job the hub re-routes there must read and
    write its checkpoint home here). Keyed by the worker's key, sorted, so the grants' resource names stay put
    when workers join or leave. Other clouds are left out: an AWS role cannot be granted on a GCS bucket nor a
    Google service account on S3 (docs/kueue-hub.md)."""
    if hub is None:
        return {}
    own = stack.rsplit("/", 1)[-1]
    return {key: peer.training_identity for key, peer in sorted(hub.worker_checkpoints.items())
            if key != own and peer.cloud == cloud}


def cross_cloud_peers(hub: HubView | None, stack: str, cloud: str) -> dict[str, PeerCheckpoint]:
    """The workers of the OTHER cloud joined to the hub that this worker federates its checkpoint home for (issue
    35): per worker key, sorted (resource names stay put as workers join or leave). An AWS worker takes the GKE
    workers that export their issuer and training subjects; a GCP worker the EKS workers (their training role ARN
    names the account). Empty without a hub, or when the hub has workers of one cloud only."""
    if hub is None:
        return {}
    own = stack.rsplit("/", 1)[-1]
    out: dict[str, PeerCheckpoint] = {}
    for key, peer in sorted(hub.worker_checkpoints.items()):
        if key == own or peer.cloud == cloud:
            continue
        if peer.cloud == "gcp" and peer.issuer is None:
            continue  # an older GKE worker: not federated until it exports its issuer (pulumi up it again)
        if peer.cloud == "aws" and not peer.training_identity.startswith("arn:"):
            continue
        out[key] = peer
    return out


def with_hub_egress(cfg: StackConfig, egress: Sequence[str] | None) -> tuple[StackConfig, list[str]]:
    """``cfg`` with the hub's ``egress`` CIDRs of its path added to ``cluster.hub_cidrs`` (after those
    configured): the public ones on the public path, the private ones on a private path (module docstring);
    and the warnings to print. Pure: :func:`resolve` reads ``egress`` from the hub stack."""
    warnings: list[str] = []
    cluster = cfg.cluster
    private_path = cluster.hub_private_link != "none"
    if egress is None:
        warnings.append(f"hub stack {cluster.hub_stack} exports no {HUB_EGRESS_OUTPUT} yet: its Kueue cannot reach "
                        "this cluster's API until the hub is up and this stack is updated again")
        egress = ()
    private = [c for c in egress if is_private_cidr(c)]
    chosen = private if private_path else [c for c in egress if not is_private_cidr(c)]
    hub_cidrs = (*cluster.hub_cidrs, *(c for c in chosen if c not in cluster.hub_cidrs))
    cluster = dataclasses.replace(cluster, hub_cidrs=hub_cidrs)
    linked = dataclasses.replace(cfg, cluster=cluster)
    if cluster.public_access and not public_endpoint_cidrs(linked):
        # EKS takes an empty publicAccessCidrs as 0.0.0.0/0; GKE would authorise nothing public anyway.
        warnings.append(f"the public API endpoint stays off: neither gpufleet:cluster.publicAccessCidrs nor hub stack "
                        f"{cfg.cluster.hub_stack}'s {HUB_EGRESS_OUTPUT} list a public address")
        linked = dataclasses.replace(linked, cluster=dataclasses.replace(cluster, public_access=False))
    if not private_path and private and len(private) == len(egress):
        warnings.append(f"hub stack {cluster.hub_stack} egresses from private ranges only ({', '.join(private)}): "
                        "they reach this cluster's private endpoint only over a VPN or peering between the two "
                        "(gpufleet:cluster.hubPrivateLink)")
    if private_path and egress and not private:
        warnings.append(f"hub stack {cluster.hub_stack} exports no private egress range: nothing is authorised for "
                        f"its traffic over the private link ({cluster.hub_private_link})")
    return linked, warnings


def link(cfg: StackConfig, hub: HubView, stack: str) -> tuple[StackConfig, list[str]]:
    """Worker stack ``stack`` (config ``cfg``) linked to the hub it read (``hub``): :func:`with_hub_egress`
    after the checks that need the hub's values (module docstring). Raises :class:`ConfigError` naming
    ``gpufleet:cluster.hubStack`` or the worker's own key."""
    ref = cfg.cluster.hub_stack
    where = "gpufleet:cluster.hubStack"
    if hub.role is not None and hub.role != "hub":
        raise ConfigError(where, f"names stack {ref}, whose role output is {hub.role!r}, not a hub; name the hub "
                                 "stack this worker serves (role: hub)")
    if cfg.cluster.hub_private_link == "vpn" and hub.vpn_workers is not None and stack not in hub.vpn_workers:
        raise ConfigError("gpufleet:cluster.hubPrivateLink", f"is vpn but hub stack {ref} builds no VPN to {stack} "
                                                             "(its gpufleet:hub.vpn.workers); add this stack there "
                                                             "and `pulumi up` the hub, or use another path")
    linked, warnings = with_hub_egress(cfg, hub.egress)
    cluster = linked.cluster
    added = [c for c in cluster.hub_cidrs if c not in cfg.cluster.hub_cidrs]
    if cfg.cloud == "aws":
        rules = len(set(cluster.hub_cidrs) | set(cluster.operator_cidrs))
        if rules > EKS_API_SG_INBOUND_RULES:
            raise ConfigError(where, f"hub stack {ref}'s {len(added)} egress ranges with this stack's hubCidrs and "
                                     f"operatorCidrs make {rules} inbound rules on the EKS control-plane security "
                                     f"group, which takes {EKS_API_SG_INBOUND_RULES}; merge ranges into fewer, wider "
                                     "CIDRs")
    if cluster.public_access:
        span = public_span_error(public_endpoint_cidrs(linked))
        if span:
            raise ConfigError(where, f"the public endpoint's allow-list with hub stack {ref}'s egress {span}")
    own = linked_ranges(cfg)
    others: list[tuple[str, str, str]] = [
        (f"hub stack {ref}", "hub.egressCidrs", c) for c in (hub.egress or ()) if is_private_cidr(c)]
    others += [(f"worker stack {w}", key.removeprefix("gpufleet:"), c)
               for w, items in sorted(hub.worker_ranges.items()) if w != stack for key, c in items]
    for key, cidr in own:
        net = ipaddress.ip_network(cidr)
        for who, other_key, other in others:
            if net.overlaps(ipaddress.ip_network(other)):
                raise ConfigError(f"gpufleet:{key}", f"{cidr} overlaps {other} (gpufleet:{other_key} of {who}, read "
                                                     f"from hub stack {ref}): a hub and its workers need disjoint "
                                                     "address ranges (the hub routes to each by address); pick "
                                                     "another block")
    return linked, warnings


async def read_hub(hub_stack: str, name: str) -> HubView:
    """The hub stack's outputs a worker needs (:data:`HUB_OUTPUTS`), awaited: call from the program's async
    entry point, before any other resource is declared. Registers the StackReference ``<name>-hub``."""
    import pulumi

    ref = pulumi.StackReference(f"{name}-hub", stack_name=hub_stack)
    outputs: dict[str, Any] = {}
    for key in HUB_OUTPUTS:
        details = await ref.get_output_details(key)
        outputs[key] = details.value if details.value is not None else details.secret_value
    return HubView.of(outputs)


async def resolve(cfg: StackConfig) -> StackConfig:
    """A worker's config linked to its hub (``gpufleet:cluster.hubStack``); other stacks as they are. A check
    that fails on the hub's values stops the program with one line (RunError) before anything else is
    declared."""
    return (await resolve_with_hub(cfg))[0]


async def resolve_with_hub(cfg: StackConfig) -> tuple[StackConfig, HubView | None]:
    """:func:`resolve`, and what the worker read from its hub (None without ``hubStack``)."""
    if cfg.role != "worker" or cfg.cluster.hub_stack is None:
        return cfg, None
    import pulumi

    hub = await read_hub(cfg.cluster.hub_stack, cfg.cluster_name)
    try:
        linked, warnings = link(cfg, hub, pulumi.get_stack())
    except ConfigError as exc:
        raise pulumi.RunError(f"invalid stack config: {exc}") from None
    for message in warnings:
        pulumi.log.warn(message)
    return linked, hub
