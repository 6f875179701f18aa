"""Which changes a real `pulumi up` carries out as a replacement, offline: the inputs that force one, per type.

A provider replaces a resource when an input its schema marks as forcing a new resource changes (Terraform's
``ForceNew`` and CustomizeDiff ``ForceNew``, which the bridged pulumi-aws and pulumi-gcp providers keep;
pulumi-kubernetes' own list of immutable fields), when its provider is replaced (pulumi-kubernetes replaces a
provider whose cluster changes, and every object under it), and when its name changes (a new Pulumi name is a new
resource; the old one is deleted). Those inputs, per type, each with the upstream file and line it was read from,
are the data file ``infra/data/force_new.yaml``; this module is the only reader. ``scripts/preview`` records them
per resource (:func:`fingerprint`) on both sides and :func:`replacements` compares them.

Some changes are updates that still recreate every node of a pool (an EKS node group rolling to a new launch
template version, a GKE node pool's machine type): :data:`NODE_RECREATE` marks them, as rows of their own.

Pure: no Pulumi import; fed ``infra.mockrun.Registered``-like objects (``type``, ``name``, ``inputs``,
``provider``, ``urn``, ``protect``).
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

K8S_PROVIDER = "pulumi:providers:kubernetes"
DATA_FILE = Path(__file__).resolve().parent / "data" / "force_new.yaml"
# The ``when`` values infra/data/force_new.yaml may use (its header says what each means).
WHENS = frozenset({"always", "presence", "count", "decrease", "shrink", "disable", "removed", "removed-item",
                   "changed-from-set", "tenancy", "autopilot", "identifier", "active-cluster"})
# A resource with no explicit provider is served by the stack's default provider, configured from the stack config
# (``kubernetes:kubeconfig``) or the environment: what an explicit provider without a kubeconfig also reads.
AMBIENT = "ambient (stack config or $KUBECONFIG)"

# Updates that recreate every node of a pool: per type, the inputs and what carries the change out.
NODE_RECREATE: Mapping[str, Mapping[str, str]] = {
    "aws:ec2/launchTemplate:LaunchTemplate": {
        "instanceType": "a new launch template version: the node group rolls to it, replacing every node",
        "imageId": "a new launch template version: the node group rolls to it, replacing every node",
    },
    "gcp:container/nodePool:NodePool": {
        "nodeConfig.machineType": "updated in place: GKE recreates every node of the pool (surge upgrade)",
    },
}


@dataclass(frozen=True)
class Rule:
    """One input that forces replacement: ``path`` (``a.b``, ``a[].b`` for every element of list ``a``) and
    ``when`` it fires (``always`` unless the upstream marker is conditional)."""

    path: str
    when: str = "always"

    @property
    def key(self) -> str:
        """Its key in a fingerprint's ``replaceOn``: the path, plus ``@when`` for a conditional one."""
        return self.path if self.when == "always" else f"{self.path}@{self.when}"


@functools.cache
def table(path: Path = DATA_FILE) -> Mapping[str, tuple[Rule, ...]]:
    """The REPLACE table: per resource type, its replacement-forcing inputs, from ``infra/data/force_new.yaml``."""
    doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    out: dict[str, tuple[Rule, ...]] = {}
    for typ, entry in (doc.get("types") or {}).items():
        rules = []
        for item in entry.get("inputs") or []:
            when = str(item.get("when") or "always")
            if when not in WHENS:
                raise ValueError(f"{path.name}: {typ} {item.get('input')}: unknown when {when!r}")
            rules.append(Rule(str(item["input"]), when))
        out[str(typ)] = tuple(dict.fromkeys(rules))
    return out


# Component resources (no provider diffs them; their children are checked one by one) and the stack itself.
COMPONENT_PREFIXES = ("gpufleet:", "pulumi:pulumi:Stack")


def uncovered(types: Iterable[str]) -> list[str]:
    """The custom resource types among ``types`` that ``infra/data/force_new.yaml`` does not list: their
    replacements cannot be predicted (the preview says so)."""
    known = table()
    return sorted({t for t in types if not t.startswith(COMPONENT_PREFIXES) and t not in known})


def sources(path: Path = DATA_FILE) -> Mapping[str, Any]:
    """The whole data file (``sources`` and ``types`` with each input's upstream file and line)."""
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def _walk(props: Any, parts: list[str]) -> Any:
    """The value at ``parts``; a ``name[]`` part maps the rest over every element of list ``name``."""
    for i, part in enumerate(parts):
        each = part.endswith("[]")
        name = part[:-2] if each else part
        if not isinstance(props, Mapping):
            return None
        props = _plain(props.get(name))
        if each:
            if not isinstance(props, (list, tuple)):
                return None
            return [_walk(item, parts[i + 1:]) for item in props]
    return props


def _get(props: Any, path: str) -> Any:
    return _walk(props, path.split("."))


def _plain(value: Any) -> Any:
    """A secret as the mock monitor hands it over is its value."""
    if isinstance(value, Mapping) and "4dabf18193072939515e22adb298388d" in value:
        return value.get("value")
    return value


def _kubeconfig_server(value: Any) -> str | None:
    """The active cluster's server of a kubeconfig (JSON or YAML text, or a parsed one); None for none or a path."""
    value = _plain(value)
    doc = value
    if isinstance(value, str):
        try:
            doc = json.loads(value)
        except ValueError:
            try:
                doc = yaml.safe_load(value)
            except yaml.YAMLError:
                return None
    if not isinstance(doc, Mapping):
        return None
    clusters = [c for c in doc.get("clusters") or [] if isinstance(c, Mapping)]
    current = None
    for ctx in doc.get("contexts") or []:
        if isinstance(ctx, Mapping) and ctx.get("name") == doc.get("current-context"):
            current = (ctx.get("context") or {}).get("cluster")
    chosen = next((c for c in clusters if c.get("name") == current), clusters[0] if clusters else None)
    server = ((chosen or {}).get("cluster") or {}).get("server")
    return str(server) if server else None


def provider_identity(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """What pulumi-kubernetes' DiffConfig compares for a provider: ``clusterIdentifier`` (None when unset) and the
    active cluster's ``server`` (:data:`AMBIENT` when no kubeconfig text is given). Never the kubeconfig itself."""
    ident = _plain(inputs.get("clusterIdentifier"))
    server = _kubeconfig_server(inputs.get("kubeconfig"))
    return {"clusterIdentifier": ident if isinstance(ident, str) and ident else None,
            "server": server or AMBIENT}


def _legacy_provider(on: Mapping[str, Any]) -> dict[str, Any]:
    """A provider fingerprint of an older preview (``{"cluster": "clusterIdentifier X" | "server Y"}``)."""
    if "server" in on or "clusterIdentifier" in on:
        return {"clusterIdentifier": on.get("clusterIdentifier"), "server": on.get("server")}
    text = str(on.get("cluster") or "")
    if text.startswith("clusterIdentifier "):
        return {"clusterIdentifier": text.removeprefix("clusterIdentifier "), "server": None}
    server = text.removeprefix("server ")
    return {"clusterIdentifier": None, "server": None if server in ("", "(unknown)") else server}


def provider_replaced(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Why pulumi-kubernetes' DiffConfig replaces a provider going from ``old`` to ``new`` (fingerprints of
    :func:`provider_identity`), or ``[]``: a changed clusterIdentifier replaces it; an unchanged one that is set
    suppresses every replacement; adding or removing one does neither, so a changed active cluster (server) does.
    A server unknown on either side (an older preview) is not called a change."""
    old, new = _legacy_provider(old), _legacy_provider(new)
    old_id, new_id = old.get("clusterIdentifier"), new.get("clusterIdentifier")
    if old_id and new_id and old_id != new_id:
        return [f"clusterIdentifier {old_id} → {new_id}"]
    if old_id and old_id == new_id:
        return []
    old_server, new_server = old.get("server"), new.get("server")
    if old_server and new_server and old_server != new_server:
        added = " (a clusterIdentifier added in the same update does not stop it)" if new_id else ""
        return [f"its cluster's server {old_server} → {new_server}{added}"]
    return []


def _short(value: Any) -> Any:
    """Small values as they are (CIDRs, zones, names); anything else as a digest, so no secret is recorded."""
    value = _plain(value)
    if value is None or isinstance(value, (bool, int, float)) or (isinstance(value, str) and len(value) <= 120):
        return value
    text = json.dumps(value, sort_keys=True, default=str)
    if len(text) <= 120 and not isinstance(value, str):
        return value
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]


def _record(rule: Rule, inputs: Mapping[str, Any]) -> Any:
    """What a fingerprint keeps of ``rule``'s input: enough for :func:`_forced` to decide, never a secret."""
    value = _get(inputs, rule.path)
    if rule.when == "presence":
        return "set" if value not in (None, [], {}) else "unset"
    if rule.when == "count":
        return len(value) if isinstance(value, (list, tuple)) else 0
    if rule.when == "autopilot":
        return _short(value) if _plain(inputs.get("enableAutopilot")) else None
    if rule.when == "removed-item":
        return sorted(str(v) for v in value) if isinstance(value, (list, tuple)) else value
    return _short(value)


def _forced(key: str, before: Any, after: Any) -> bool:
    """Whether ``key``'s input going from ``before`` to ``after`` forces a replacement."""
    if before == after:
        return False
    when = key.rsplit("@", 1)[1] if "@" in key else "always"
    if key == "ipCidrRange" or when == "shrink":
        # A GCP subnet's range may grow in place: a new range that contains the old one is an update.
        if isinstance(before, str) and isinstance(after, str):
            try:
                return not ipaddress.ip_network(before).subnet_of(ipaddress.ip_network(after))  # type: ignore[arg-type]
            except (ValueError, TypeError):
                return True
        return True
    if when == "decrease":
        try:
            return float(after) < float(before)
        except (TypeError, ValueError):
            return False
    if when == "disable":
        return bool(before) and not bool(after)
    if when == "removed":
        return before not in (None, [], {}) and after in (None, [], {})
    if when == "removed-item":
        return isinstance(before, list) and any(v not in (after or []) for v in before)
    if when == "changed-from-set":
        return before not in (None, "")
    if when == "tenancy":
        return not (before == "dedicated" and after == "default")
    if when == "autopilot":
        return before is not None and after is not None
    return True


def key(type_token: str, name: str) -> str:
    """A resource's key in a fingerprint: its type and name (two resources of different types may share a name)."""
    return f"{type_token}::{name}"


def _strings(value: Any) -> Iterable[str]:
    value = _plain(value)
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


def _refers_to(value: Any, names: Mapping[str, list[str]]) -> list[str]:
    """The resources whose ID or ARN (as ``infra.mockrun`` computes them: ``<name>-id``, ``arn:mock:<type>:<name>``)
    ``value`` holds: a replaced one gets a new ID, so an input forcing replacement that holds it changes too."""
    found = []
    for text in _strings(value):
        name = text[:-3] if text.endswith("-id") else text.rsplit(":", 1)[-1] if text.startswith("arn:mock:") else None
        # A mock ID names the resource, not its type: every resource of that name is a candidate.
        for typ in names.get(name or "", []):
            if key(typ, name or "") not in found:
                found.append(key(typ, name or ""))
    return found


def fingerprint(resources: Iterable[Any]) -> dict[str, dict[str, Any]]:
    """Per resource (by :func:`key`): its ``name`` and ``type``, the values of its replacement-forcing inputs
    (``replaceOn``, keyed by :attr:`Rule.key`), the inputs whose change recreates a pool's nodes (``recreates``),
    the resources those inputs point at (``refersTo``), the key of its Kubernetes provider (``provider``; None for
    the default provider) and whether it is protected (``protect``)."""
    resources = list(resources)
    rules_of = table()
    by_urn = {getattr(r, "urn", ""): key(r.type, r.name) for r in resources if r.type.startswith("pulumi:providers:")}
    names: dict[str, list[str]] = {}
    for r in resources:
        names.setdefault(r.name, []).append(r.type)
    out: dict[str, dict[str, Any]] = {}
    for r in resources:
        rules = rules_of.get(r.type, ())
        if r.type == K8S_PROVIDER:
            on: dict[str, Any] = provider_identity(r.inputs)
        else:
            on = {rule.key: _record(rule, r.inputs) for rule in rules}
        provider = None
        if isinstance(r.provider, str) and "::" in r.provider:
            provider = by_urn.get(r.provider.rsplit("::", 1)[0])
        refs = {rule.key: _refers_to(_get(r.inputs, rule.path), names) for rule in rules
                if r.type != K8S_PROVIDER}
        recreates = {p: _short(_get(r.inputs, p)) for p in NODE_RECREATE.get(r.type, {})}
        row: dict[str, Any] = {"name": r.name, "type": r.type, "replaceOn": on, "provider": provider,
                               "refersTo": {p: v for p, v in refs.items() if v},
                               "protect": bool(getattr(r, "protect", False))}
        if recreates:
            row["recreates"] = recreates
        out[key(r.type, r.name)] = row
    return out


def _provider_state(state: Mapping[str, Mapping[str, Any]], provider: str | None) -> Mapping[str, Any]:
    """The provider fingerprint a resource is served by (the default provider's when it names none)."""
    if provider is None:
        return {"clusterIdentifier": None, "server": AMBIENT}
    found = state.get(provider)
    return (found or {}).get("replaceOn") or {"clusterIdentifier": None, "server": None}


def replacements(base: Mapping[str, Mapping[str, Any]], head: Mapping[str, Mapping[str, Any]]
                 ) -> list[dict[str, Any]]:
    """What `pulumi up` of ``head`` over ``base`` replaces, deletes or rolls: rows ``{name, type, action,
    reasons}``, ``action`` ``replace`` (a forcing input changed, or its provider is replaced or changed to one
    that DiffConfig calls another cluster), ``delete`` (the name is gone: renamed or removed) or
    ``recreate-nodes`` (an update that replaces every node of a pool, :data:`NODE_RECREATE`), sorted by name."""
    rows: dict[str, dict[str, Any]] = {}
    for name, new in head.items():
        old = base.get(name)
        if old is None or old.get("type") != new.get("type"):
            continue
        if new["type"] == K8S_PROVIDER:
            reasons = provider_replaced(old.get("replaceOn") or {}, new.get("replaceOn") or {})
        else:
            reasons = [f"{p.split('@', 1)[0]} {old['replaceOn'].get(p)} → {v}" for p, v in new["replaceOn"].items()
                       if p in old.get("replaceOn", {}) and _forced(p, old["replaceOn"].get(p), v)]
        if not reasons and old.get("provider") != new.get("provider") and new["type"].startswith("kubernetes:"):
            # The engine asks the new provider's DiffConfig whether the old provider's cluster is another one.
            why = provider_replaced(_provider_state(base, old.get("provider")),
                                    _provider_state(head, new.get("provider")))
            reasons = [f"its provider changes and {w}" for w in why]
        if reasons:
            rows[name] = {"name": new.get("name", name), "type": new["type"], "action": "replace",
                          "reasons": reasons}
    # A replacement gets a new ID: what holds it in an input that forces replacement is replaced too, and a
    # replaced Kubernetes provider replaces everything under it. Until nothing more changes.
    changed = True
    while changed:
        changed = False
        for name, new in head.items():
            if name in rows or name not in base:
                continue
            refs = (new.get("refersTo") or {}).items()
            why = [f"{p.split('@', 1)[0]} refers to {rows[r]['name']}, which is replaced" for p, found in refs
                   for r in found if r in rows and rows[r]["action"] == "replace"]
            if new.get("provider") in rows and rows[new["provider"]]["type"] == K8S_PROVIDER:
                why.append(f"its provider {rows[new['provider']]['name']} is replaced (its cluster changed)")
            if why:
                rows[name] = {"name": new.get("name", name), "type": new["type"], "action": "replace",
                              "reasons": why}
                changed = True
    for name, new in head.items():
        old = base.get(name)
        if name in rows or old is None or old.get("type") != new.get("type"):
            continue
        before, after = old.get("recreates") or {}, new.get("recreates") or {}
        why = [f"{p} {before[p]} → {after[p]}: {NODE_RECREATE[new['type']][p]}" for p in after
               if p in before and before[p] != after[p] and p in NODE_RECREATE.get(new["type"], {})]
        if why:
            rows[name] = {"name": new.get("name", name), "type": new["type"], "action": "recreate-nodes",
                          "reasons": why}
    for name, old in base.items():
        if name not in head:
            rows[name] = {"name": old.get("name", name), "type": old["type"], "action": "delete",
                          "reasons": ["no longer declared (renamed or removed): `pulumi up` deletes it"]}
    return sorted(rows.values(), key=lambda r: (r["name"], r["type"]))
