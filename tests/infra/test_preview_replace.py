"""The offline preview marks what a real `pulumi up` would replace, and the stateful-replace policy (issue 25,
item 4): a subnet change is REPLACE (and so is the file system in it), a replaced stateful resource fails the
preview unless gpufleet:allowReplace acknowledges it, and doubling maxNodes replaces nothing.

The stacks here run a small program (the AWS Network component and an FSx file system on its GPU subnet) under
mocks, so each preview takes about a second rather than the whole stack's twenty.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from infra import mockrun
from infra import preview as pv
from infra.policy import checks
from infra.replace import fingerprint, replacements

ROOT = Path(__file__).resolve().parents[2]
BASE = yaml.safe_load((ROOT / "stacks" / "Pulumi.aws-use1-p5.yaml").read_text())


def _network_and_fsx() -> None:
    import pulumi_aws as aws

    from infra.aws.layout import Zone, gpu_zones, pick_system_azs, placement_zones, plan_subnets, resource_tags
    from infra.aws.network import Network, NetworkArgs
    from infra.program import load_config
    from infra.protect import stateful

    cfg = load_config()
    azs = pick_system_azs(cfg, [Zone(n, z) for n, z in mockrun._AWS_AZS["us-east-1"]])
    net = Network(f"{cfg.cluster_name}-net", NetworkArgs(cfg=cfg, stack="w", plan=plan_subnets(cfg), azs=azs,
                                                         gpu_zones=gpu_zones(cfg),
                                                         placement_zones=placement_zones(cfg)))
    name = f"{cfg.cluster_name}-ckpt-fsx"
    aws.fsx.LustreFileSystem(name, deployment_type="PERSISTENT_2", storage_type="SSD", storage_capacity=2400,
                             per_unit_storage_throughput=250, subnet_ids=net.gpu_subnet_ids[gpu_zones(cfg)[0]],
                             tags=resource_tags(cfg, "w", name), opts=stateful(cfg, name))


def _doc(tmp_path: Path, side: str, config: dict[str, Any]) -> dict[str, Any]:
    root = tmp_path / side
    (root / "stacks").mkdir(parents=True)
    (root / "stacks" / "Pulumi.w.yaml").write_text(yaml.safe_dump({"config": config}))
    return pv.preview(pv.discover_stacks(root), program=_network_and_fsx)


def _edit(**changes: Any) -> dict[str, Any]:
    config = copy.deepcopy(BASE["config"])
    for key, value in changes.items():
        config[f"gpufleet:{key}"] = value
    return config


def test_a_subnet_change_is_replace_in_the_table_the_comment_and_the_policy(tmp_path: Path) -> None:
    base = _doc(tmp_path, "base", _edit())
    head = _doc(tmp_path, "head", _edit(network={"vpcCidr": "10.9.0.0/16", "azCount": 2}))
    (d,) = pv.diff(base, head).values()
    rows = {(r["type"].split(":")[1], r["name"]): r for r in d["replacements"]}
    subnet = rows[("ec2/subnet", "gpufleet-aws-use1-p5-net-gpu-use1-az6")]
    assert subnet["action"] == "replace" and "cidrBlock 10.0.160.0/19 → 10.9.160.0/19" in subnet["reasons"]
    fsx = rows[("fsx/lustreFileSystem", "gpufleet-aws-use1-p5-ckpt-fsx")]
    assert fsx["action"] == "replace" and "subnetIds" in fsx["reasons"][0]
    assert "REPLACE gpufleet-aws-use1-p5-ckpt-fsx" in pv.render_text(head, base)
    comment = pv.render_markdown(head, base)
    assert "| **REPLACE** | `gpufleet-aws-use1-p5-net-gpu-use1-az6` |" in comment
    found = pv.replacement_violations(base, head)["w"]
    assert [(v["rule"], v["resource"]) for v in found] == [(checks.STATEFUL_REPLACE, "gpufleet-aws-use1-p5-ckpt-fsx")]


def test_the_stack_config_acknowledges_a_replacement(tmp_path: Path) -> None:
    base = _doc(tmp_path, "base", _edit())
    head = _doc(tmp_path, "head", _edit(network={"vpcCidr": "10.9.0.0/16"},
                                        allowReplace=["gpufleet-aws-use1-p5-ckpt-fsx"]))
    assert pv.replacement_violations(base, head)["w"] == []
    assert fingerprint([]) == {}
    # Acknowledged: no longer protected (Pulumi may replace it), still retained (the old one is kept).
    fsx = "aws:fsx/lustreFileSystem:LustreFileSystem::gpufleet-aws-use1-p5-ckpt-fsx"
    assert not head["stacks"]["w"]["state"][fsx]["protect"]
    assert [v for v in head["stacks"]["w"]["violations"] if v["rule"] == checks.STATEFUL_PROTECTED] == []


def test_doubling_max_nodes_replaces_nothing(tmp_path: Path) -> None:
    base = _doc(tmp_path, "base", _edit())
    pools = copy.deepcopy(BASE["config"]["gpufleet:nodePools"])
    for p in pools:
        p["maxNodes"] *= 2
    head = _doc(tmp_path, "head", _edit(nodePools=pools))
    (d,) = pv.diff(base, head).values()
    assert d["replacements"] == [] and d["replacementsKnown"]


def test_a_baseline_without_resource_inputs_says_replacements_are_unknown(tmp_path: Path) -> None:
    head = _doc(tmp_path, "head", _edit())
    base = copy.deepcopy(head)
    del base["stacks"]["w"]["state"]
    (d,) = pv.diff(base, head).values()
    assert not d["replacementsKnown"]
    assert "replacements: not computed" in pv.render_text(head, base)


def test_a_replaced_kubernetes_provider_replaces_everything_under_it() -> None:
    def state(cluster: str) -> dict[str, Any]:
        return {"p": {"type": "pulumi:providers:kubernetes", "replaceOn": {"cluster": cluster}, "provider": None},
                "ns": {"type": checks.NAMESPACE, "replaceOn": {"metadata.name": "team-a"}, "provider": "p"}}

    rows = replacements(state("server https://10.4.0.2"), state("server https://203.0.113.10"))
    assert [(r["name"], r["action"]) for r in rows] == [("ns", "replace"), ("p", "replace")]
    found = checks.check_stateful_replacements(rows, frozenset())
    assert [v.resource for v in found] == ["ns"]
    assert checks.check_stateful_replacements(rows, frozenset({"ns"})) == []


def test_an_unprotected_stateful_resource_fails_the_policy() -> None:
    items = [("b", "aws:s3/bucket:Bucket", False), ("n", checks.NAMESPACE, True), ("ng", checks.EKS_NODE_GROUP, False)]
    assert [v.resource for v in checks.check_stateful_protected(items, frozenset())] == ["b"]
    assert checks.check_stateful_protected(items, frozenset({"b"})) == []
    from infra.policy.pack import policies

    assert checks.STATEFUL_PROTECTED in {p.name for p in policies()}


def _pools_and_templates() -> None:
    """The config's pools as outputs, and for each an EKS launch template with the pool's instance type (what a
    pool change does to its nodes is decided there: infra/aws/gpu_nodes.py)."""
    import pulumi_aws as aws

    from infra.outputs import export_cluster
    from infra.program import load_config

    cfg = load_config()
    for pool in cfg.node_pools:
        aws.ec2.LaunchTemplate(f"{cfg.cluster_name}-{pool.name}-lt", name=f"{cfg.cluster_name}-{pool.name}",
                               instance_type=pool.shape.name, update_default_version=True)
    export_cluster(cfg, cluster_name=cfg.cluster_name, kubeconfig="apiVersion: v1", checkpoint_uri="s3://b/c")


def test_an_instance_type_change_says_every_node_is_recreated(tmp_path: Path) -> None:
    """Issue 37: p5 → p5en is no replacement (a new launch template version), and every node is recreated."""
    def doc(side: str, instance_type: str) -> dict[str, Any]:
        pools = copy.deepcopy(BASE["config"]["gpufleet:nodePools"])
        pools[0]["instanceType"] = instance_type
        root = tmp_path / side
        (root / "stacks").mkdir(parents=True)
        config = _edit(nodePools=pools)
        config["gpufleet:checkpoint"] = {k: v for k, v in config["gpufleet:checkpoint"].items() if k != "filesystem"}
        (root / "stacks" / "Pulumi.w.yaml").write_text(yaml.safe_dump({"config": config}))
        return pv.preview(pv.discover_stacks(root), program=_pools_and_templates)

    base, head = doc("base", "p5.48xlarge"), doc("head", "p5en.48xlarge")
    (d,) = pv.diff(base, head).values()
    (row,) = d["replacements"]
    assert row["action"] == "recreate-nodes" and row["name"] == "gpufleet-aws-use1-p5-h100-spot-lt"
    assert "p5.48xlarge → p5en.48xlarge" in row["reasons"][0]
    (changed,) = d["poolsChanged"]
    assert changed["notes"] and "every node of the pool is recreated" in changed["notes"][0]
    text = pv.render_text(head, base)
    assert "RECREATE-NODES gpufleet-aws-use1-p5-h100-spot-lt" in text and "NOTE instance type" in text
    assert "every node of the pool is recreated" in pv.render_markdown(head, base)
    assert pv.replacement_violations(base, head)["w"] == []  # not a replacement: nothing to acknowledge
