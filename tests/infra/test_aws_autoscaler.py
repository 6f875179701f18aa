"""The Cluster Autoscaler on the AWS p5 stack under Pulumi mocks: Helm release pinned to the cluster's minor,
Pod Identity, a scaling policy limited to the cluster's own groups, and the ASG tags that let an empty GPU
node group scale up from zero.

One mocked run of ``stacks/Pulumi.aws-use1-p5.yaml`` (module-scoped); expectations come from its parsed config
and the shape data.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from typing import Any

import pulumi
import pytest
import yaml

from infra import mockrun
from infra.aws.autoscaler import RELEASES, autoscaler_release, node_template_tags
from infra.config import ConfigError, StackConfig, load_stack_file, parse
from infra.mockrun import Registered, RunResult, run_stack

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BASE_STACK = os.path.join(ROOT, "stacks", "Pulumi.aws-use1-p5.yaml")

RELEASE = "kubernetes:helm.sh/v3:Release"
ASSOCIATION = "aws:eks/podIdentityAssociation:PodIdentityAssociation"
ASG_TAG = "aws:autoscaling/tag:Tag"
NG = "aws:eks/nodeGroup:NodeGroup"
CA = "k8s.io/cluster-autoscaler"
SCALING_ACTIONS = {"autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"}


@pytest.fixture(scope="module")
def stack() -> tuple[StackConfig, RunResult]:
    return load_stack_file(BASE_STACK), run_stack(BASE_STACK)


def _release(run: RunResult) -> Registered:
    (release,) = [r for r in run.of_type(RELEASE) if r.inputs.get("chart") == "cluster-autoscaler"]
    return release


def _gpu_node_groups(run: RunResult) -> list[Registered]:
    return [ng for ng in run.of_type(NG) if "gpufleet.io/pool" in (ng.inputs.get("labels") or {})]


def _asg_tags(run: RunResult) -> dict[str, dict[str, Any]]:
    """ASG name -> {tag key: tag input}."""
    out: dict[str, dict[str, Any]] = defaultdict(dict)
    for t in run.of_type(ASG_TAG):
        key = t.inputs["tag"]["key"]
        assert key not in out[t.inputs["autoscalingGroupName"]], f"tag {key} set twice"
        out[t.inputs["autoscalingGroupName"]][key] = t.inputs["tag"]
    return out


def _by_id(run: RunResult, resource_id: str) -> Registered:
    return run.named(resource_id.removesuffix("-id"))


def _actions(statement: dict[str, Any]) -> list[str]:
    action = statement["Action"]
    return action if isinstance(action, list) else [action]


def test_release_is_the_upstream_chart_pinned_to_the_cluster_minor(stack: tuple[StackConfig, RunResult]) -> None:
    cfg, run = stack
    release = _release(run)
    assert release.inputs["repositoryOpts"]["repo"] == "https://kubernetes.github.io/autoscaler"
    assert release.inputs["namespace"] == "kube-system"
    chart_version, image_tag = RELEASES[cfg.cluster.kubernetes_version]
    assert release.inputs["version"] == chart_version
    values = release.inputs["values"]
    tag = values["image"]["tag"]
    assert tag == image_tag
    major, minor, _patch = tag.removeprefix("v").split(".")
    assert f"{major}.{minor}" == cfg.cluster.kubernetes_version, "autoscaler minor must match the cluster's"

    (eks,) = run.of_type("aws:eks/cluster:Cluster")
    assert values["autoDiscovery"]["clusterName"] == eks.inputs["name"] == cfg.cluster_name
    assert values["awsRegion"] == cfg.region
    assert values["rbac"]["serviceAccount"]["name"] == "cluster-autoscaler"
    args = values["extraArgs"]
    assert args["balance-similar-node-groups"] is True
    assert args["skip-nodes-with-local-storage"] is False
    assert args["expander"] in ("priority", "least-waste")
    assert args["scale-down-unneeded-time"]
    # On the system nodes, never on a GPU node (which it could then never scale down).
    assert values["nodeSelector"] == {"gpufleet.io/role": "system"}
    (system,) = [ng for ng in run.of_type(NG) if ng.inputs["nodeGroupName"] == "system"]
    assert system.inputs["labels"]["gpufleet.io/role"] == "system"
    assert not any(t.get("key") == "nvidia.com/gpu" for t in values.get("tolerations") or [])


def test_every_pinned_release_matches_its_minor() -> None:
    for minor, (_chart, image_tag) in RELEASES.items():
        assert image_tag.startswith(f"v{minor}."), minor
        assert autoscaler_release(minor)[1] == image_tag
    with pytest.raises(ConfigError, match="gpufleet:cluster.kubernetesVersion"):
        autoscaler_release("1.20")


def test_unpinned_kubernetes_minor_fails_before_any_resource(monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[RunResult] = []
    real = mockrun._mocks

    def spy(result: RunResult) -> Any:
        runs.append(result)
        return real(result)

    monkeypatch.setattr(mockrun, "_mocks", spy)
    with pytest.raises(pulumi.RunError, match="gpufleet:cluster.kubernetesVersion"):
        run_stack(BASE_STACK, config_override={"cluster": {"kubernetesVersion": "1.20"}})
    (run,) = runs
    assert run.resources == []


def test_pod_identity_binds_the_autoscaler_service_account_to_its_role(stack: tuple[StackConfig, RunResult]) -> None:
    cfg, run = stack
    (assoc,) = [a for a in run.of_type(ASSOCIATION) if a.inputs["serviceAccount"] == "cluster-autoscaler"]
    assert assoc.inputs["namespace"] == "kube-system"
    (eks,) = run.of_type("aws:eks/cluster:Cluster")
    assert assoc.inputs["clusterName"] == eks.inputs["name"]
    role = run.named(assoc.inputs["roleArn"].rsplit(":", 1)[1])
    assert role.type == "aws:iam/role:Role"
    (statement,) = json.loads(role.inputs["assumeRolePolicy"])["Statement"]
    assert statement["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert set(_actions(statement)) == {"sts:AssumeRole", "sts:TagSession"}
    for key, value in cfg.tags.items():
        assert assoc.inputs["tags"][key] == value
        assert role.inputs["tags"][key] == value
    # The add-on that hands Pod Identity credentials to pods.
    assert "eks-pod-identity-agent" in {a.inputs["addonName"] for a in run.of_type("aws:eks/addon:Addon")}


def test_scaling_actions_only_on_groups_owned_by_this_cluster(stack: tuple[StackConfig, RunResult]) -> None:
    cfg, run = stack
    (assoc,) = [a for a in run.of_type(ASSOCIATION) if a.inputs["serviceAccount"] == "cluster-autoscaler"]
    role_id = f"{assoc.inputs['roleArn'].rsplit(':', 1)[1]}-id"
    (policy,) = [p for p in run.of_type("aws:iam/rolePolicy:RolePolicy") if p.inputs["role"] == role_id]
    statements = json.loads(policy.inputs["policy"])["Statement"]
    granted = {a for st in statements for a in _actions(st)}
    assert granted >= SCALING_ACTIONS
    assert {"autoscaling:DescribeAutoScalingGroups", "autoscaling:DescribeTags", "ec2:DescribeLaunchTemplateVersions",
            "ec2:DescribeInstanceTypes", "ec2:DescribeImages", "ec2:GetInstanceTypesFromInstanceRequirements",
            "eks:DescribeNodegroup"} <= granted
    assert all("*" not in a for a in granted), "no wildcard actions"
    for st in statements:
        assert st["Effect"] == "Allow"
        if SCALING_ACTIONS & set(_actions(st)):
            assert st["Condition"] == {"StringEquals": {f"aws:ResourceTag/{CA}/{cfg.cluster_name}": "owned"}}


def test_gpu_asgs_describe_their_nodes_for_scale_from_zero(stack: tuple[StackConfig, RunResult]) -> None:
    cfg, run = stack
    tags_by_asg = _asg_tags(run)
    groups = _gpu_node_groups(run)
    assert len(groups) == len(cfg.node_pools)
    pools = {p.name: p for p in cfg.node_pools}
    for ng in groups:
        pool = pools[ng.inputs["labels"]["gpufleet.io/pool"]]
        # The mocked ASG name of this node group (infra.mockrun fakes `resources`).
        tags = tags_by_asg.pop(f"eks-{ng.name}-asg")
        values = {k: t["value"] for k, t in tags.items()}
        assert all(t["propagateAtLaunch"] is False for t in tags.values())
        assert values[f"{CA}/enabled"] == "true"
        assert values[f"{CA}/{cfg.cluster_name}"] == "owned"
        assert values[f"{CA}/node-template/resources/nvidia.com/gpu"] == str(pool.shape.gpus)
        efa = values.get(f"{CA}/node-template/resources/vpc.amazonaws.com/efa")
        pages = values.get(f"{CA}/node-template/resources/hugepages-2Mi")
        if pool.shape.fabric == "efa":
            assert efa == str(pool.shape.network_cards)
            assert int(efa) == len(_by_id(run, ng.inputs["launchTemplate"]["id"]).inputs["networkInterfaces"])
            # EFA pods request huge pages: an empty group that did not offer them would never scale up.
            assert pages == "5120Mi"
        else:
            assert efa is None and pages is None
        (taint,) = ng.inputs["taints"]
        assert taint["effect"] == "NO_SCHEDULE"
        assert values[f"{CA}/node-template/taint/{taint['key']}"] == f"{taint['value']}:NoSchedule"
        labels = ng.inputs["labels"]
        # Marks a joined node not ready until the device plugin reports its GPUs (no double scale-up).
        assert "k8s.amazonaws.com/accelerator" in labels
        for key, value in labels.items():
            assert values[f"{CA}/node-template/label/{key}"] == value, key
        template_labels = {k.removeprefix(f"{CA}/node-template/label/") for k in values
                           if k.startswith(f"{CA}/node-template/label/")}
        assert template_labels == set(labels), "template labels the nodes will not carry"
    assert tags_by_asg == {}, "ASG tags on groups that are not GPU node groups"


def test_non_efa_pool_advertises_gpus_but_no_efa() -> None:
    with open(BASE_STACK, encoding="utf-8") as fh:
        raw = {k.split(":", 1)[1]: v for k, v in yaml.safe_load(fh)["config"].items() if k.startswith("gpufleet:")}
    raw["nodePools"] = [{"name": "l40s", "instanceType": "g6e.xlarge", "minNodes": 0, "maxNodes": 1,
                         "zone": "us-east-1b"}]
    (pool,) = parse(raw).node_pools
    assert pool.shape.fabric != "efa"
    tags = node_template_tags(pool)
    assert tags[f"{CA}/node-template/resources/nvidia.com/gpu"] == str(pool.shape.gpus)
    assert not any(k.endswith("/vpc.amazonaws.com/efa") or k.endswith("/hugepages-2Mi") for k in tags)
    assert tags[f"{CA}/node-template/label/gpufleet.io/pool"] == "l40s"
