"""``gpufleet:hub``: a MultiKueue hub stack's own settings.

Owns :class:`HubConfig`: the worker stacks it dispatches to, the MultiKueue dispatcher (AllAtOnce, Incremental,
or External: ``placement dispatch``), the CIDRs its clients reach worker APIs from, and the two subsections it
hands on: ``hub.dispatch`` (:mod:`infra.config.dispatch`) and ``hub.vpn`` (:mod:`infra.config.link`).

May import: the standard library, :mod:`infra.config.fields`, :mod:`infra.config.network` (the CIDR rules),
:mod:`infra.config.dispatch` and :mod:`infra.config.link`; no Pulumi SDK.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from infra.config.dispatch import DispatchConfig, parse_dispatch
from infra.config.fields import ConfigError, _key, _mapping, _str, _unknown_keys
from infra.config.link import HubVpnConfig, _hub_vpn, _worker_refs
from infra.config.network import _ipv4_cidrs, check_public_span


@dataclass(frozen=True)
class HubConfig:
    """A MultiKueue hub: the worker stacks it dispatches to (fully qualified stack names)."""

    workers: tuple[str, ...] = ()
    # MultiKueue dispatcher on the hub: AllAtOnce copies a workload to every worker and keeps the first
    # admission; Incremental widens the set 3 clusters at a time; External leaves the choice to a
    # controller writing .status.nominatedClusterNames (``placement dispatch``, the hub's Deployment).
    dispatcher: Literal["AllAtOnce", "Incremental", "External"] = "AllAtOnce"
    # Where the hub's API clients (Kueue's MultiKueue controller, the dispatcher) reach worker APIs from, as
    # the workers see it: private ranges over peering/VPN, or public NAT addresses. IPv4 CIDRs.
    egress_cidrs: tuple[str, ...] = ()
    dispatch: DispatchConfig = field(default_factory=DispatchConfig)
    vpn: HubVpnConfig | None = None


def parse_hub(value: Any, role: str, cloud: str) -> HubConfig:
    """``gpufleet:hub`` of a ``role`` stack on ``cloud``; a hub (``role`` hub) must list workers and egress CIDRs."""
    hb = _mapping(value, "hub")
    _unknown_keys(hb, {"workers", "dispatcher", "egressCidrs", "dispatch", "vpn"}, "hub")
    workers = _worker_refs(hb.get("workers"), "hub.workers")
    dispatcher = _str(hb.get("dispatcher", "AllAtOnce"), "hub.dispatcher")
    if dispatcher not in ("AllAtOnce", "Incremental", "External"):
        raise ConfigError(_key("hub.dispatcher"), "must be AllAtOnce, Incremental or External")
    egress = _ipv4_cidrs(hb.get("egressCidrs"), "hub.egressCidrs")
    check_public_span(egress, "hub.egressCidrs")
    hub = HubConfig(workers=workers, dispatcher=dispatcher,  # type: ignore[arg-type]
                    egress_cidrs=egress, dispatch=parse_dispatch(hb.get("dispatch"), dispatcher),
                    vpn=_hub_vpn(hb.get("vpn"), cloud, workers))
    if role == "hub" and not workers:
        raise ConfigError(
            _key("hub.workers"), "a hub stack needs the worker stacks it dispatches to (org/project/stack)"
        )
    if role == "hub" and not egress:
        raise ConfigError(
            _key("hub.egressCidrs"),
            "is required on a hub: list the CIDRs its Kueue and dispatcher reach worker APIs from (private ranges "
            "over peering/VPN, or NAT addresses) and authorise them on every worker in gpufleet:cluster.hubCidrs",
        )
    return hub
