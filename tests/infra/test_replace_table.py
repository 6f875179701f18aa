"""The preview's REPLACE table is the upstream ForceNew/immutable markers of the locked providers (issue 37, item 4):
one data file lists, per resource type the program registers, every input that forces replacement with the
upstream file and line it was read from; a type the program constructs that the file does not list fails here.

The registered types are found two ways: statically (every SDK resource class constructed anywhere in infra/,
resolved to its type token), and on real mocked runs (``infra.replace.uncovered`` on the runs of the tests that
build a stack variant, and on every example stack in test_preview).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

from infra import replace
from infra.replace import Rule, fingerprint, replacements, table, uncovered

ROOT = Path(__file__).resolve().parents[2]
SDKS = {"pulumi_aws", "pulumi_gcp", "pulumi_kubernetes", "pulumi_docker_build", "pulumi"}


def _constructed_types() -> dict[str, str]:
    """``{type token: where}`` of every Pulumi resource class infra/ constructs, by its SDK class."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / "infra").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        aliases: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] in SDKS:
                        aliases[a.asname or a.name] = a.name
        aliases.setdefault("docker_build", "pulumi_docker_build")  # bound from _docker_build() in dispatch_image
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            chain: list[str] = []
            func: Any = node.func
            while isinstance(func, ast.Attribute):
                chain.insert(0, func.attr)
                func = func.value
            if not isinstance(func, ast.Name) or func.id not in aliases or not chain or not chain[-1][:1].isupper():
                continue
            obj: Any = importlib.import_module(aliases[func.id])
            for part in chain:
                obj = getattr(obj, part, None)
            if not inspect.isclass(obj):
                continue
            import pulumi

            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            if issubclass(obj, pulumi.ProviderResource):
                pkg = getattr(obj, "package", None) or aliases[func.id].removeprefix("pulumi_").replace("_", "-")
                found.setdefault(f"pulumi:providers:{pkg}", where)
            elif obj is pulumi.StackReference:
                found.setdefault("pulumi:pulumi:StackReference", where)
            elif issubclass(obj, pulumi.Resource) and hasattr(obj, "_internal_init"):  # remote components too
                m = re.search(r"__init__\(\s*'([^']+)'", inspect.getsource(obj._internal_init))
                if m:
                    found.setdefault(m.group(1), where)
    return found


def test_every_resource_class_infra_constructs_is_in_the_table() -> None:
    constructed = _constructed_types()
    # The scan sees the clouds, Kubernetes and the providers (a sanity check on the scanner itself).
    for expected in ("aws:eks/cluster:Cluster", "gcp:container/nodePool:NodePool", "kubernetes:core/v1:Namespace",
                     "pulumi:providers:kubernetes", "gcp:lustre/instance:Instance", "gcp:compute/vPNTunnel:VPNTunnel",
                     "docker-build:index:Image", "kubernetes:yaml/v2:ConfigFile"):
        assert expected in constructed, expected
    missing = uncovered(constructed)
    assert not missing, {t: constructed[t] for t in missing}


def test_a_type_the_table_does_not_list_is_reported() -> None:
    assert uncovered(["aws:ec2/vpc:Vpc", "aws:rds/instance:Instance", "gpufleet:aws:Network"]) == \
        ["aws:rds/instance:Instance"]


def test_every_entry_names_its_upstream_file_and_line() -> None:
    doc = replace.sources()
    srcs = doc["sources"]
    assert {"google-beta", "aws", "kubernetes"} <= set(srcs)
    for name, src in srcs.items():
        assert re.fullmatch(r"[0-9a-f]{40}", src["commit"]), name
    for typ, entry in doc["types"].items():
        for item in entry["inputs"]:
            source = item.get("source") or entry.get("source")
            assert source in srcs, (typ, item)
            assert isinstance(item.get("line"), int) and item["line"] > 0, (typ, item)
            assert str(item.get("file", "")).endswith(".go"), (typ, item)
        if not entry["inputs"]:
            assert entry.get("note"), f"{typ}: an empty list says why"


ISSUE_37 = {
    "aws:eks/cluster:Cluster": ["bootstrapSelfManagedAddons", "accessConfig.bootstrapClusterCreatorAdminPermissions",
                                "kubernetesNetworkConfig.ipFamily"],
    "aws:eks/nodeGroup:NodeGroup": ["launchTemplate.id", "launchTemplate.name", "remoteAccess", "nodeGroupNamePrefix"],
    "aws:fsx/lustreFileSystem:LustreFileSystem": ["storageCapacity", "copyTagsToBackups", "driveCacheType"],
    "gcp:container/nodePool:NodePool": ["nodeConfig.serviceAccount", "nodeConfig.oauthScopes",
                                        "nodeConfig.shieldedInstanceConfig", "nodeConfig.flexStart",
                                        "nodeConfig.ephemeralStorageLocalSsdConfig", "maxPodsPerNode"],
    "gcp:container/cluster:Cluster": ["ipAllocationPolicy", "networkingMode", "datapathProvider", "initialNodeCount",
                                      "nodeConfig.serviceAccount", "nodeConfig.oauthScopes"],
    "gcp:storage/bucket:Bucket": ["hierarchicalNamespace"],
    "gcp:filestore/instance:Instance": ["fileShares.name", "kmsKeyName", "protocol"],
    "gcp:compute/vPNTunnel:VPNTunnel": ["sharedSecret", "peerExternalGateway", "vpnGateway", "router", "ikeVersion",
                                        "cipherSuite.phase1.encryptions", "vpnGatewayInterface"],
    "kubernetes:core/v1:PersistentVolumeClaim": ["spec.volumeName", "spec.storageClassName", "spec.accessModes"],
}


@pytest.mark.parametrize("typ", sorted(ISSUE_37))
def test_the_inputs_the_review_found_missing_are_listed(typ: str) -> None:
    paths = {r.path for r in table()[typ]}
    assert set(ISSUE_37[typ]) <= paths, set(ISSUE_37[typ]) - paths


def test_a_node_pools_machine_type_is_an_update() -> None:
    assert "nodeConfig.machineType" not in {r.path for r in table()["gcp:container/nodePool:NodePool"]}
    assert "nodeConfig.machineType" in replace.NODE_RECREATE["gcp:container/nodePool:NodePool"]


class _R:
    def __init__(self, typ: str, name: str, inputs: dict[str, Any], provider: str | None = None,
                 urn: str = "") -> None:
        self.type, self.name, self.inputs, self.provider, self.urn = typ, name, inputs, provider, urn
        self.protect = False


def _diff(typ: str, before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    return replacements(fingerprint([_R(typ, "r", before)]), fingerprint([_R(typ, "r", after)]))


POOL = "gcp:container/nodePool:NodePool"


def test_changing_a_pools_service_account_or_flex_start_is_replace_machine_type_recreates_nodes() -> None:
    base = {"name": "a4", "nodeConfig": {"serviceAccount": "a@p", "machineType": "a3-highgpu-8g", "flexStart": False,
                                          "guestAccelerators": [{"type": "nvidia-h100-80gb", "count": 8}]}}
    sa = {**base, "nodeConfig": {**base["nodeConfig"], "serviceAccount": "b@p"}}
    (row,) = _diff(POOL, base, sa)
    assert row["action"] == "replace" and row["reasons"] == ["nodeConfig.serviceAccount a@p → b@p"]
    mt = {**base, "nodeConfig": {**base["nodeConfig"], "machineType": "a3-megagpu-8g"}}
    (row,) = _diff(POOL, base, mt)
    assert row["action"] == "recreate-nodes" and "every node" in row["reasons"][0]
    gpu = {**base, "nodeConfig": {**base["nodeConfig"], "guestAccelerators": [{"type": "nvidia-h200", "count": 8}]}}
    (row,) = _diff(POOL, base, gpu)
    assert row["reasons"] == ["nodeConfig.guestAccelerators[].type ['nvidia-h100-80gb'] → ['nvidia-h200']"]


def test_conditional_markers() -> None:
    fsx = "aws:fsx/lustreFileSystem:LustreFileSystem"
    assert _diff(fsx, {"storageCapacity": 2400}, {"storageCapacity": 4800}) == []
    (row,) = _diff(fsx, {"storageCapacity": 4800}, {"storageCapacity": 2400})
    assert row["action"] == "replace"
    net = "gcp:compute/subnetwork:Subnetwork"
    assert _diff(net, {"ipCidrRange": "10.0.0.0/20"}, {"ipCidrRange": "10.0.0.0/16"}) == []
    assert _diff(net, {"ipCidrRange": "10.0.0.0/16"}, {"ipCidrRange": "10.0.0.0/20"})[0]["action"] == "replace"
    ng = "aws:eks/nodeGroup:NodeGroup"
    (row,) = _diff(ng, {"remoteAccess": None}, {"remoteAccess": {"ec2SshKey": "k"}})
    assert {r.split(" ")[0] for r in row["reasons"]} == {"remoteAccess", "remoteAccess.ec2SshKey"}
    eks = "aws:eks/cluster:Cluster"
    assert _diff(eks, {"bootstrapSelfManagedAddons": True}, {"bootstrapSelfManagedAddons": False})[0]["action"] \
        == "replace"
    lt = "aws:ec2/launchTemplate:LaunchTemplate"
    (row,) = _diff(lt, {"name": "x", "instanceType": "p5.48xlarge"}, {"name": "x", "instanceType": "p5en.48xlarge"})
    assert row["action"] == "recreate-nodes" and "p5.48xlarge → p5en.48xlarge" in row["reasons"][0]


def _provider(ident: str | None, server: str) -> dict[str, Any]:
    kubeconfig = {"clusters": [{"name": "c", "cluster": {"server": server}}], "contexts": [
        {"name": "c", "context": {"cluster": "c"}}], "current-context": "c"}
    return {"kubeconfig": __import__("json").dumps(kubeconfig), **({"clusterIdentifier": ident} if ident else {})}


@pytest.mark.parametrize("old, new, replaced", [
    ((None, "https://1.2.3.4"), (None, "https://gke-x.gke.goog"), True),        # server moves, no identifier
    ((None, "https://1.2.3.4"), ("gke:x", "https://gke-x.gke.goog"), True),     # identifier added with the move
    ((None, "https://1.2.3.4"), ("gke:x", "https://1.2.3.4"), False),           # identifier added alone
    (("gcp:p:r:c", "https://a"), ("gke:x", "https://a"), True),                 # identifier changed
    (("gcp:p:r:c", "https://a"), (None, "https://a"), False),                   # identifier removed alone
    (("gke:x", "https://1.2.3.4"), ("gke:x", "https://gke-x.gke.goog"), False),  # same identifier: server moves
])
def test_provider_replacement_follows_pulumi_kubernetes_diffconfig(old: tuple[Any, str], new: tuple[Any, str],
                                                                     replaced: bool) -> None:
    rows = _diff(replace.K8S_PROVIDER, _provider(*old), _provider(*new))
    assert bool(rows) is replaced, rows


def test_moving_objects_from_the_default_provider_to_one_with_the_same_cluster_replaces_nothing() -> None:
    ns = "kubernetes:core/v1:Namespace"
    base = fingerprint([_R(ns, "n", {"metadata": {"name": "team-a"}})])
    head = fingerprint([_R(replace.K8S_PROVIDER, "p", {}, urn="urn:p"),
                        _R(ns, "n", {"metadata": {"name": "team-a"}}, provider="urn:p::p-id")])
    assert [r for r in replacements(base, head) if r["name"] == "n"] == []
    moved = fingerprint([_R(replace.K8S_PROVIDER, "p", _provider(None, "https://elsewhere"), urn="urn:p"),
                         _R(ns, "n", {"metadata": {"name": "team-a"}}, provider="urn:p::p-id")])
    assert [r["action"] for r in replacements(base, moved) if r["name"] == "n"] == ["replace"]


def test_rules_key_conditional_inputs_apart() -> None:
    assert Rule("storageCapacity", "decrease").key == "storageCapacity@decrease"
    assert Rule("name").key == "name"
