"""What a real `pulumi up` does to stacks that already exist (issue 37, items 2, 3 and 6), checked on what the program
registers under mocks and on the preview's REPLACE marks:

* the Kubernetes providers are keyed to the cluster's unique identity (GKE DNS endpoint, EKS OIDC issuer, a worker's
  exported identity on the hub), and the steps that bring an existing stack there each replace nothing;
* exactly the objects the stacks take over (the checkpoint PV/PVC, the JobSet CRD) carry pulumi.com/patchForce, on
  the workers and on the hub, whose own provider gets the same options;
* the NAT gateway, the system AZs and the route-table associations follow the zones, never the pool list's order.

Whole-stack runs are slow (20 s each on a loaded machine): the network checks run the Network component alone.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra import mockrun
from infra import preview as pv
from infra.aws.layout import Zone, gpu_zones, pick_system_azs, primary_gpu_zone
from infra.config import parse
from infra.replace import K8S_PROVIDER, fingerprint, replacements

ROOT = Path(__file__).resolve().parents[2]
# pulumi-kubernetes' annotation that forces server-side apply conflicts (provider/pkg/metadata/annotations.go).
PATCH_FORCE_ANNOTATION = "pulumi.com/patchForce"
STACKS = ROOT / "stacks"
BASE = yaml.safe_load((STACKS / "Pulumi.aws-use1-p5.yaml").read_text())["config"]
US_EAST_1 = [Zone(n, z) for n, z in mockrun._AWS_AZS["us-east-1"]]


def _raw(**changes: Any) -> dict[str, Any]:
    """The example AWS stack's config with ``changes`` (None drops a key); no file system tier when gpuZone goes
    (a file system needs one)."""
    raw = {k.split(":", 1)[1]: copy.deepcopy(v) for k, v in BASE.items()}
    raw.update(changes)
    if raw.get("gpuZone") is None:
        raw["checkpoint"] = {k: v for k, v in raw["checkpoint"].items() if k != "filesystem"}
    return {k: v for k, v in raw.items() if v is not None}


def _two_zone_pools() -> list[dict[str, Any]]:
    """Single-node pools in two zones (multi-node pools in two zones need gpuZone: one fabric)."""
    return [{"name": "h100-b", "instanceType": "p5.48xlarge", "capacity": "SPOT", "minNodes": 0, "maxNodes": 1,
             "zone": "use1-az6"},
            {"name": "h100-a", "instanceType": "p5.48xlarge", "capacity": "SPOT", "minNodes": 0, "maxNodes": 1,
             "zone": "use1-az4"}]


# ------------------------------------------------------------------ NAT, system AZs, route-table associations


def test_the_primary_zone_and_system_azs_do_not_follow_the_pool_order() -> None:
    pools = _two_zone_pools()
    one = parse(_raw(gpuZone=None, nodePools=pools), stack="w")
    other = parse(_raw(gpuZone=None, nodePools=pools[::-1]), stack="w")
    assert primary_gpu_zone(one) == primary_gpu_zone(other) == "use1-az4"  # the lower AZ number
    assert gpu_zones(one) == gpu_zones(other)
    assert pick_system_azs(one, US_EAST_1) == pick_system_azs(other, US_EAST_1)
    pinned = parse(_raw(gpuZone="use1-az6", nodePools=pools[::-1]), stack="w")
    assert primary_gpu_zone(pinned) == "use1-az6"  # gpuZone pins it


def _network() -> None:
    from infra.aws.layout import placement_zones, plan_subnets
    from infra.aws.network import Network, NetworkArgs
    from infra.program import load_config

    cfg = load_config()
    Network(f"{cfg.cluster_name}-net", NetworkArgs(cfg=cfg, stack="w", plan=plan_subnets(cfg),
                                                    azs=pick_system_azs(cfg, US_EAST_1), gpu_zones=gpu_zones(cfg),
                                                    placement_zones=placement_zones(cfg)))


def _doc(tmp_path: Path, side: str, raw: dict[str, Any]) -> dict[str, Any]:
    root = tmp_path / side
    (root / "stacks").mkdir(parents=True)
    (root / "stacks" / "Pulumi.w.yaml").write_text(yaml.safe_dump({"config": {f"gpufleet:{k}": v
                                                                               for k, v in raw.items()}}))
    return pv.preview(pv.discover_stacks(root), program=_network)


def test_reordering_pools_replaces_nothing_and_a_new_az_only_adds_its_own(tmp_path: Path) -> None:
    pools = _two_zone_pools()
    base = _doc(tmp_path, "base", _raw(gpuZone=None, nodePools=pools))
    (d,) = pv.diff(base, _doc(tmp_path, "reordered", _raw(gpuZone=None, nodePools=pools[::-1]))).values()
    assert d["replacements"] == [] and d["replacementsKnown"]
    state = base["stacks"]["w"]["state"]
    rtas = sorted(v["name"] for v in state.values() if "routeTableAssociation" in v["type"])
    assert "gpufleet-aws-use1-p5-net-public-use1-az4-rt" in rtas and not any(n.endswith(("-0", "-1")) for n in rtas)
    (nat,) = [v for v in state.values() if v["type"] == "aws:ec2/natGateway:NatGateway"]
    assert nat["replaceOn"]["subnetId"] == "gpufleet-aws-use1-p5-net-public-use1-az4-id"
    # One AZ more: its subnets and associations are added; nothing that exists is replaced or re-pointed.
    (d,) = pv.diff(base, _doc(tmp_path, "az3", _raw(gpuZone=None, nodePools=pools,
                                                    network={**BASE["gpufleet:network"], "azCount": 3}))).values()
    assert d["replacements"] == []
    assert d["resources"]["aws:ec2/routeTableAssociation:RouteTableAssociation"]["change"] == 2


def test_existing_route_table_associations_keep_their_state_through_an_alias() -> None:
    run = mockrun.run_stack(str(STACKS / "Pulumi.aws-use1-p5.yaml"), program=_network)
    rtas = {r.name for r in run.of_type("aws:ec2/routeTableAssociation:RouteTableAssociation")}
    assert {"gpufleet-aws-use1-p5-net-public-use1-az6-rt", "gpufleet-aws-use1-p5-net-private-use1-az6-rt"} <= rtas
    # The alias (the name at the AZ's position) is in the registration the engine got.
    network_py = (ROOT / "infra" / "aws" / "network.py").read_text()
    assert 'aliases=[pulumi.Alias(name=f"{name}-public-{i}")]' in network_py
    assert 'aliases=[pulumi.Alias(name=f"{name}-private-{i}")]' in network_py


# ------------------------------------------------------------------ provider identity


def _kubeconfig(server: str) -> str:
    return json.dumps({"clusters": [{"name": "c", "cluster": {"server": server}}],
                       "contexts": [{"name": "c", "context": {"cluster": "c"}}], "current-context": "c"})


class _R:
    def __init__(self, typ: str, name: str, inputs: dict[str, Any], provider: str | None = None) -> None:
        self.type, self.name, self.inputs, self.provider, self.protect = typ, name, inputs, provider, True
        self.urn = f"urn:{name}"


def _state(ident: str | None, server: str) -> dict[str, Any]:
    provider = _R(K8S_PROVIDER, "w-k8s", {"kubeconfig": _kubeconfig(server),
                                          **({"clusterIdentifier": ident} if ident else {})})
    ns = _R("kubernetes:core/v1:Namespace", "w-ns-team-a", {"metadata": {"name": "team-a"}}, "urn:w-k8s::w-k8s-id")
    return fingerprint([provider, ns])


DNS, IP = "https://gke-0123.us-central1.gke.goog", "https://10.4.0.2"
UNIQUE = "gke:gke-0123.us-central1.gke.goog"


@pytest.mark.parametrize("path", [
    # Stacks last updated before round 4: no identifier, the IP endpoint.
    [(None, IP), (UNIQUE, IP), (UNIQUE, DNS)],
    # Stacks last updated by round 4: the name-based identifier, the DNS endpoint.
    [("gcp:p:us-central1:c", DNS), (None, DNS), (UNIQUE, DNS)],
])
def test_each_documented_step_replaces_nothing(path: list[tuple[str | None, str]]) -> None:
    for before, after in zip(path, path[1:], strict=False):
        assert replacements(_state(*before), _state(*after)) == [], (before, after)


def test_taking_the_identity_in_one_update_replaces_the_provider_and_every_protected_object() -> None:
    for before, after in [((None, IP), (UNIQUE, DNS)), (("gcp:p:us-central1:c", DNS), (UNIQUE, DNS))]:
        rows = replacements(_state(*before), _state(*after))
        assert {r["name"] for r in rows} == {"w-k8s", "w-ns-team-a"}, rows
    # A cluster re-created under the same name has another identity: everything under the provider goes with it.
    rows = replacements(_state(UNIQUE, DNS), _state("gke:gke-9999.us-central1.gke.goog", DNS))
    assert {r["name"] for r in rows} == {"w-k8s", "w-ns-team-a"}


@pytest.fixture(scope="module")
def aws_run() -> mockrun.RunResult:
    return mockrun.run_stack(str(STACKS / "Pulumi.aws-use1-p5.yaml"))


def test_the_eks_provider_is_keyed_to_the_oidc_issuer_and_exported(aws_run: mockrun.RunResult) -> None:
    (provider,) = aws_run.of_type(K8S_PROVIDER)
    (eks,) = aws_run.of_type("aws:eks/cluster:Cluster")
    issuer = f"https://oidc.eks.mock/id/{eks.name}"  # the mock's OIDC issuer of that cluster
    assert provider.inputs["clusterIdentifier"] == f"eks:{issuer}" == aws_run.outputs["clusterIdentity"]
    assert provider.inputs.get("upsertExistingObjects") in (True, "true")


# ------------------------------------------------------------------ takeovers


def test_patch_force_is_on_exactly_the_objects_taken_over(aws_run: mockrun.RunResult) -> None:
    forced = {r.name for r in aws_run.resources if r.type.startswith("kubernetes:")
              and PATCH_FORCE_ANNOTATION in ((r.inputs.get("metadata") or {}).get("annotations") or {})}
    volumes = {r.name for r in aws_run.resources
               if r.type in ("kubernetes:core/v1:PersistentVolume", "kubernetes:core/v1:PersistentVolumeClaim")}
    assert volumes and forced == volumes
    # The JobSet CRD is registered by the ConfigFile's provider: a transform puts the annotation on it, and only on
    # a CustomResourceDefinition.
    import pulumi

    (crd_file,) = [r for r in aws_run.of_type("kubernetes:yaml/v2:ConfigFile") if "jobset-crd" in r.name]
    (transform,) = crd_file.transforms

    def apply(typ: str) -> Any:
        return transform(pulumi.ResourceTransformArgs(custom=True, type_=typ, name=f"{crd_file.name}:x",
                                                      props={"metadata": {"name": "x"}},
                                                      opts=pulumi.ResourceOptions()))

    done = apply("kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition")
    assert done.props["metadata"]["annotations"] == {PATCH_FORCE_ANNOTATION: "true"}
    assert apply("kubernetes:core/v1:ConfigMap") is None


# ------------------------------------------------------------------ pinned subnets (stacks before the fixed layout)

# The subnets the layout before the fixed slots gave stacks/Pulumi.aws-use1-p5.yaml (subnets sized from maxNodes,
# largest first: infra/aws/layout.py at commit e5acd7d, the parent of the fixed-slot change d1f49c7, run on this
# stack file), keyed as network.subnetCidrs keys them.
OLD_LAYOUT = {"gpu-use1-az6": "10.0.32.0/22", "private-use1-az1": "10.0.16.0/20",
              "private-use1-az6": "10.0.0.0/20", "public-use1-az1": "10.0.37.0/24",
              "public-use1-az6": "10.0.36.0/24"}


def _export(layout: dict[str, str]) -> dict[str, Any]:
    """A `pulumi stack export` document holding the old stack's subnets (and something else)."""
    urn = "urn:pulumi:aws-use1-p5::gpufleet::gpufleet:aws:Network$aws:ec2/subnet:Subnet::"
    return {"version": 3, "deployment": {"resources": [
        *({"urn": f"{urn}gpufleet-aws-use1-p5-net-{k}", "type": "aws:ec2/subnet:Subnet",
           "inputs": {"cidrBlock": c}, "outputs": {"cidrBlock": c, "id": f"subnet-{i}"}}
          for i, (k, c) in enumerate(layout.items())),
        {"urn": "urn:pulumi:aws-use1-p5::gpufleet::aws:ec2/vpc:Vpc::gpufleet-aws-use1-p5-net-vpc",
         "type": "aws:ec2/vpc:Vpc", "inputs": {"cidrBlock": "10.0.0.0/16"}}]}}


def test_the_pins_read_from_the_state_reproduce_the_old_subnets(tmp_path: Path) -> None:
    from infra.aws import pin_subnets

    state = tmp_path / "state.json"
    state.write_text(json.dumps(_export(OLD_LAYOUT)))
    assert pin_subnets.subnet_pins(json.loads(state.read_text())) == OLD_LAYOUT
    network = {**BASE["gpufleet:network"], "subnetCidrs": OLD_LAYOUT}
    run = mockrun.run_stack(str(STACKS / "Pulumi.aws-use1-p5.yaml"), program=_network,
                            config_override={"network": network})
    got = {r.name.removeprefix("gpufleet-aws-use1-p5-net-"): r.inputs["cidrBlock"]
           for r in run.of_type("aws:ec2/subnet:Subnet")}
    assert got == OLD_LAYOUT


def test_pinned_subnets_stay_put_and_unpinned_ones_would_move(tmp_path: Path) -> None:
    pinned = _raw(network={**BASE["gpufleet:network"], "subnetCidrs": OLD_LAYOUT})
    base = _doc(tmp_path, "pinned", pinned)
    doubled = copy.deepcopy(pinned)
    for pool in doubled["nodePools"]:
        pool["maxNodes"] = min(2 * pool["maxNodes"], 7)  # what the old /22 holds (7 nodes at 128 IPs each)
    (d,) = pv.diff(base, _doc(tmp_path, "scaled", doubled)).values()
    assert d["replacements"] == []
    # Without the pin, the fixed layout moves every subnet (what the pin is for).
    (d,) = pv.diff(base, _doc(tmp_path, "unpinned", _raw())).values()
    moved = {r["name"] for r in d["replacements"] if r["type"] == "aws:ec2/subnet:Subnet"}
    assert moved == {f"gpufleet-aws-use1-p5-net-{k}" for k in OLD_LAYOUT}


@pytest.mark.parametrize("pins, message", [
    ({"gpu-use1-az6": "10.1.0.0/22"}, "inside gpufleet:network.vpcCidr"),
    ({"private-use1-az6": "10.0.0.0/20", "public-use1-az6": "10.0.8.0/24"}, "overlaps"),
    ({"nat-use1-az6": "10.0.0.0/24"}, "public-<zone ID>"),
    ({"gpu-use1-az6": "not-a-cidr"}, "gpufleet:network.subnetCidrs.gpu-use1-az6"),
])
def test_bad_pins_are_refused_naming_the_key(pins: dict[str, str], message: str) -> None:
    from infra.config import ConfigError

    with pytest.raises(ConfigError) as err:
        parse(_raw(network={**BASE["gpufleet:network"], "subnetCidrs": pins}), stack="w")
    assert str(err.value).startswith("gpufleet:network.subnetCidrs") and message in str(err.value)
    assert "\n" not in str(err.value)


def test_an_unpinned_slot_over_a_pinned_subnet_is_refused() -> None:
    from infra.aws.layout import plan_subnets
    from infra.config import ConfigError

    # An old private subnet at 10.0.0.0/20 sits in GPU slot 1 (use1-az1: 10.0.0.0/19): a new GPU zone there cannot
    # take its slot.
    pools = [*BASE["gpufleet:nodePools"], {"name": "az1", "instanceType": "p5.48xlarge", "capacity": "SPOT",
                                           "minNodes": 0, "maxNodes": 1, "zone": "use1-az1"}]
    cfg = parse(_raw(nodePools=pools, network={**BASE["gpufleet:network"], "subnetCidrs": OLD_LAYOUT}), stack="w")
    with pytest.raises(ConfigError, match=r"^gpufleet:network\.subnetCidrs: subnet gpu-use1-az1 is not pinned"):
        plan_subnets(cfg)


def test_a_pin_for_a_subnet_no_longer_built_is_named() -> None:
    from infra.aws.layout import plan_subnets, unused_pins

    cfg = parse(_raw(network={**BASE["gpufleet:network"], "subnetCidrs": OLD_LAYOUT}), stack="w")
    plan = plan_subnets(cfg)
    assert unused_pins(plan, pick_system_azs(cfg, US_EAST_1)) == ()
    # The system AZs moved (az2 instead of az1): az1's pins match nothing, and the build warns about them.
    moved = [z for z in US_EAST_1 if z.zone_id in ("use1-az6", "use1-az2")]
    assert unused_pins(plan, moved) == ("private-use1-az1", "public-use1-az1")


def test_pin_subnets_cli_prints_the_mapping_and_refuses_a_non_export(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from infra.aws import pin_subnets

    state = tmp_path / "state.json"
    state.write_text(json.dumps(_export(OLD_LAYOUT)))
    assert pin_subnets.main([str(state)]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == {"subnetCidrs": OLD_LAYOUT}
    state.write_text("{}")
    assert pin_subnets.main([str(state)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pin_subnets: ") and err.count("\n") == 1


# ------------------------------------------------------------------ the provider's migration steps, as configured


def _gcp_worker() -> Any:
    async def program() -> None:
        from infra.gcp import build
        from infra.hub_link import resolve
        from infra.program import load_config

        build(await resolve(load_config()))

    return program


@pytest.mark.parametrize("step, identified, server_kind", [
    ("drop-name-identifier", False, "dns"),
    ("keep-ip-endpoint", True, "ip"),
])
def test_each_gke_migration_step_changes_one_thing(step: str, identified: bool, server_kind: str) -> None:
    path = STACKS / "Pulumi.gcp-usc1-a3mega.yaml"
    cluster = yaml.safe_load(path.read_text())["config"]["gpufleet:cluster"]
    saved = dict(mockrun.STACK_REFERENCE_OUTPUTS)
    mockrun.STACK_REFERENCE_OUTPUTS["org/gpufleet/hub"] = {"role": "hub"}
    try:
        run = mockrun.run_stack(str(path), program=_gcp_worker(),
                                config_override={"cluster": {**cluster, "providerMigration": step}})
    finally:
        mockrun.STACK_REFERENCE_OUTPUTS.clear()
        mockrun.STACK_REFERENCE_OUTPUTS.update(saved)
    (provider,) = run.of_type(K8S_PROVIDER)
    assert bool(provider.inputs.get("clusterIdentifier")) is identified
    kubeconfig = provider.inputs["kubeconfig"]
    server = json.loads(kubeconfig["value"] if isinstance(kubeconfig, dict) else kubeconfig)["clusters"][0]
    host = server["cluster"]["server"]
    assert host.endswith(".gke.goog") is (server_kind == "dns")
    # The cluster's identity is exported either way: the hub reads it.
    assert run.outputs["clusterIdentity"].startswith("gke:gke-")


def test_the_migration_keys_are_validated() -> None:
    from infra.config import ConfigError

    aws_cluster = BASE["gpufleet:cluster"]
    assert parse(_raw(cluster={**aws_cluster, "providerMigration": "drop-name-identifier"}),
                 stack="w").cluster.provider_migration == "drop-name-identifier"
    with pytest.raises(ConfigError, match=r"^gpufleet:cluster\.providerMigration: "):
        parse(_raw(cluster={**aws_cluster, "providerMigration": "keep-ip-endpoint"}), stack="w")  # GKE only
    with pytest.raises(ConfigError, match=r"^gpufleet:cluster\.providerMigration: "):
        parse(_raw(cluster={**aws_cluster, "providerMigration": "later"}), stack="w")
    hub = yaml.safe_load((STACKS / "Pulumi.hub.yaml").read_text())["config"]
    raw_hub = {k.split(":", 1)[1]: v for k, v in hub.items()}
    cfg = parse({**raw_hub, "hub": {**raw_hub["hub"], "providerMigration": "drop-name-identifier"}}, stack="hub")
    assert cfg.hub.provider_migration == "drop-name-identifier"
    with pytest.raises(ConfigError, match=r"^gpufleet:hub\.providerMigration: "):
        parse({**raw_hub, "hub": {**raw_hub["hub"], "providerMigration": "keep-ip-endpoint"}}, stack="hub")
