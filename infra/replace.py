"""Which changes a real `pulumi up` carries out as a replacement, offline: the inputs that force one, per type.

A provider replaces a resource when an input its schema marks as forcing a new resource changes (Terraform's
``ForceNew``, which the bridged pulumi-aws and pulumi-gcp providers keep), when its provider is replaced
(pulumi-kubernetes replaces a provider whose cluster changes, and every object under it), and when its name
changes (a new Pulumi name is a new resource; the old one is deleted). ``scripts/preview`` records these inputs
per resource (:func:`fingerprint`) on both sides and :func:`replacements` compares them.

Pure: no Pulumi import; fed ``infra.mockrun.Registered``-like objects (``type``, ``name``, ``inputs``,
``provider``, ``urn``, ``protect``).
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
from collections.abc import Iterable, Mapping
from typing import Any

K8S_PROVIDER = "pulumi:providers:kubernetes"

# Inputs (camelCase paths) whose change replaces the resource, from the providers' schemas (ForceNew).
FORCE_NEW: Mapping[str, tuple[str, ...]] = {
    "aws:ec2/vpc:Vpc": ("cidrBlock",),
    "aws:ec2/subnet:Subnet": ("cidrBlock", "availabilityZone", "availabilityZoneId", "vpcId"),
    "aws:ec2/natGateway:NatGateway": ("subnetId", "allocationId", "connectivityType"),
    "aws:ec2/routeTableAssociation:RouteTableAssociation": ("subnetId",),
    "aws:ec2/placementGroup:PlacementGroup": ("name", "strategy"),
    "aws:ec2/securityGroup:SecurityGroup": ("name", "vpcId", "description"),
    "aws:eks/cluster:Cluster": ("name", "roleArn", "kubernetesNetworkConfig.serviceIpv4Cidr"),
    "aws:eks/nodeGroup:NodeGroup": ("nodeGroupName", "clusterName", "nodeRoleArn", "subnetIds", "instanceTypes",
                                    "amiType", "capacityType", "diskSize"),
    "aws:fsx/lustreFileSystem:LustreFileSystem": ("subnetIds", "deploymentType", "storageType", "securityGroupIds",
                                                  "kmsKeyId", "fileSystemTypeVersion"),
    "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation": ("fileSystemId", "fileSystemPath",
                                                                    "dataRepositoryPath"),
    "aws:s3/bucket:Bucket": ("bucket", "bucketPrefix", "objectLockEnabled"),
    "aws:s3/bucketV2:BucketV2": ("bucket", "bucketPrefix", "objectLockEnabled"),
    "gcp:compute/network:Network": ("name", "autoCreateSubnetworks"),
    "gcp:compute/subnetwork:Subnetwork": ("name", "network", "region", "ipCidrRange"),
    "gcp:container/cluster:Cluster": ("name", "location", "network", "subnetwork"),
    "gcp:container/nodePool:NodePool": ("name", "cluster", "location", "nodeConfig.machineType",
                                        "nodeConfig.guestAccelerators", "nodeConfig.spot",
                                        "nodeConfig.reservationAffinity", "placementPolicy",
                                        "networkConfig.additionalNodeNetworkConfigs", "queuedProvisioning"),
    "gcp:storage/bucket:Bucket": ("name", "location", "project"),
    "gcp:lustre/instance:Instance": ("instanceId", "location", "network", "filesystem", "perUnitStorageThroughput"),
    "gcp:filestore/instance:Instance": ("name", "location", "tier", "networks"),
    "kubernetes:core/v1:PersistentVolume": ("metadata.name", "spec.csi"),
}
# Every Kubernetes object is replaced when its name or namespace changes.
K8S_IDENTITY = ("metadata.name", "metadata.namespace")


def _get(props: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(props, Mapping):
            return None
        props = props.get(part)
    return props


def _plain(value: Any) -> Any:
    """A secret as the mock monitor hands it over is its value."""
    if isinstance(value, Mapping) and "4dabf18193072939515e22adb298388d" in value:
        return value.get("value")
    return value


def provider_cluster(inputs: Mapping[str, Any]) -> str:
    """What identifies a Kubernetes provider's cluster: ``clusterIdentifier`` when set (pulumi-kubernetes then
    replaces the provider only when it changes), else the kubeconfig's server. Never the kubeconfig itself."""
    ident = _plain(inputs.get("clusterIdentifier"))
    if isinstance(ident, str) and ident:
        return f"clusterIdentifier {ident}"
    text = _plain(inputs.get("kubeconfig"))
    try:
        doc = json.loads(text) if isinstance(text, str) else text
    except ValueError:
        import yaml

        doc = yaml.safe_load(text) if isinstance(text, str) else None
    clusters = doc.get("clusters") if isinstance(doc, Mapping) else None
    server = (clusters[0].get("cluster") or {}).get("server") if isinstance(clusters, list) and clusters else None
    return f"server {server}" if server else "server (unknown)"


def _short(value: Any) -> Any:
    """Small values as they are (CIDRs, zones, names); anything else as a digest, so no secret is recorded."""
    value = _plain(value)
    if value is None or isinstance(value, (bool, int, float)) or (isinstance(value, str) and len(value) <= 120):
        return value
    text = json.dumps(value, sort_keys=True, default=str)
    if len(text) <= 120 and not isinstance(value, str):
        return value
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]


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


def key(type_token: str, name: str) -> str:
    """A resource's key in a fingerprint: its type and name (two resources of different types may share a name)."""
    return f"{type_token}::{name}"


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
    (``replaceOn``), the resources those inputs point at (``refersTo``), the key of its Kubernetes provider
    (``provider``), and whether it is protected (``protect``)."""
    resources = list(resources)
    by_urn = {getattr(r, "urn", ""): key(r.type, r.name) for r in resources if r.type.startswith("pulumi:providers:")}
    names: dict[str, list[str]] = {}
    for r in resources:
        names.setdefault(r.name, []).append(r.type)
    out: dict[str, dict[str, Any]] = {}
    for r in resources:
        paths = FORCE_NEW.get(r.type, ())
        if r.type.startswith("kubernetes:"):
            paths = tuple(dict.fromkeys((*paths, *K8S_IDENTITY)))
        on = {p: _short(_get(r.inputs, p)) for p in paths}
        if r.type == K8S_PROVIDER:
            on = {"cluster": provider_cluster(r.inputs)}
        provider = None
        if isinstance(r.provider, str) and "::" in r.provider:
            provider = by_urn.get(r.provider.rsplit("::", 1)[0])
        refs = {p: _refers_to(_get(r.inputs, p), names) for p in paths}
        out[key(r.type, r.name)] = {"name": r.name, "type": r.type, "replaceOn": on, "provider": provider,
                       "refersTo": {p: v for p, v in refs.items() if v},
                       "protect": bool(getattr(r, "protect", False))}
    return out


def _forced(path: str, before: Any, after: Any) -> bool:
    """Whether changing ``path`` from ``before`` to ``after`` forces a replacement (a GCP subnet's range may grow
    in place: a new range that contains the old one is an update)."""
    if before == after:
        return False
    if path == "ipCidrRange" and isinstance(before, str) and isinstance(after, str):
        try:
            return not ipaddress.ip_network(before).subnet_of(ipaddress.ip_network(after))  # type: ignore[arg-type]
        except (ValueError, TypeError):
            return True
    return True


def replacements(base: Mapping[str, Mapping[str, Any]], head: Mapping[str, Mapping[str, Any]]
                 ) -> list[dict[str, Any]]:
    """What `pulumi up` of ``head`` over ``base`` replaces or deletes: rows ``{name, type, action, reasons}``,
    ``action`` ``replace`` (a forcing input changed, or its provider is replaced) or ``delete`` (the name is gone:
    renamed or removed), sorted by name."""
    rows: dict[str, dict[str, Any]] = {}
    for name, new in head.items():
        old = base.get(name)
        if old is None or old.get("type") != new.get("type"):
            continue
        reasons = [f"{p} {old['replaceOn'].get(p)} → {v}" for p, v in new["replaceOn"].items()
                   if p in old.get("replaceOn", {}) and _forced(p, old["replaceOn"].get(p), v)]
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
            why = [f"{p} refers to {rows[r]['name']}, which is replaced" for p, found in refs
                   for r in found if r in rows and rows[r]["action"] == "replace"]
            if new.get("provider") in rows and rows[new["provider"]]["type"] == K8S_PROVIDER:
                why.append(f"its provider {rows[new['provider']]['name']} is replaced (its cluster changed)")
            if why:
                rows[name] = {"name": new.get("name", name), "type": new["type"], "action": "replace",
                              "reasons": why}
                changed = True
    for name, old in base.items():
        if name not in head:
            rows[name] = {"name": old.get("name", name), "type": old["type"], "action": "delete",
                          "reasons": ["no longer declared (renamed or removed): `pulumi up` deletes it"]}
    return sorted(rows.values(), key=lambda r: (r["name"], r["type"]))
