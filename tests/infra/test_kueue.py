"""Kueue objects rendered from node pools, their CRD validity, and the ClusterAddons component."""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.config import StackConfig, parse
from infra.config.pools import NodePoolConfig
from infra.k8s import kueue_objects as ko
from infra.k8s.crd_validate import CRDValidator
from placement.model import kueue as pk
from placement.model.shapes import shape_book

REPO = Path(__file__).resolve().parents[2]
CRD_DIR = REPO / "tests" / "data" / "kueue-crds"  # pinned Kueue v0.19.2 CRDs (tests/data/README.md)
TAGS = {"owner": "ml-platform", "cost-center": "cc-1"}

AWS_RAW: dict[str, Any] = {
    "cloud": "aws", "region": "us-east-1", "gpuZone": "us-east-1a", "clusterName": "test-aws",
    "nodePools": [
        # Fixed size (all nodes standing): the only kind of multi-node pool whose flavor gets the Topology.
        {"name": "p5-od", "instanceType": "p5.48xlarge", "capacity": "ON_DEMAND", "minNodes": 2, "maxNodes": 2},
        # One standing node, scales to 4: TAS would never admit a job larger than one node, so no Topology.
        {"name": "p5-spot", "instanceType": "p5.48xlarge", "capacity": "SPOT", "minNodes": 1, "maxNodes": 4},
        {"name": "l40s-one", "instanceType": "g6e.xlarge", "capacity": "SPOT", "maxNodes": 1},
    ],
    # A quarter of each pool's nodes (rounded down) for the serving queue: p5-spot lends 1 of its 4 nodes.
    "kueue": {"teams": ["team-a", "team-b"], "flavorOrder": ["on-demand", "spot"], "cohort": "fleet",
              "inferenceShare": 0.25},
    "tags": TAGS,
}
GCP_RAW: dict[str, Any] = {
    "cloud": "gcp", "region": "us-central1", "project": "proj", "gpuZone": "us-central1-a",
    "clusterName": "test-gcp",
    "nodePools": [
        {"name": "mega-spot", "instanceType": "a3-megagpu-8g", "capacity": "SPOT", "maxNodes": 3},  # from zero
        {"name": "mega-od", "instanceType": "a3-megagpu-8g", "capacity": "ON_DEMAND", "minNodes": 2, "maxNodes": 2},
        # GKE flex-start with queued provisioning: admitted through the ProvisioningRequest admission check.
        {"name": "mega-flex", "instanceType": "a3-megagpu-8g", "capacity": "flex-start", "maxNodes": 4},
    ],
    "kueue": {"teams": ["team-a"], "flavorOrder": ["spot", "on-demand"]},
    "tags": TAGS,
}


@pytest.fixture(scope="module")
def aws_cfg() -> StackConfig:
    return parse(AWS_RAW, stack="test-aws")


@pytest.fixture(scope="module")
def gcp_cfg() -> StackConfig:
    return parse(GCP_RAW, stack="test-gcp")


@pytest.fixture(scope="module")
def validator() -> CRDValidator:
    return CRDValidator(CRD_DIR)


# ------------------------------------------------------------------------------------------- helpers


def _tiered(amount: float, tiers: list[tuple[float, float]]) -> float:
    out = 0.0
    for size, rate in tiers:
        take = min(amount, size)
        out += take * rate
        amount -= take
    return out


def expected_allocatable(pool: NodePoolConfig) -> dict[str, int]:
    """The documented reserve formula, re-derived here from the Shape (cpu millicores, memory MiB)."""
    shape = pool.shape
    cpu_reserve = math.ceil(_tiered(shape.vcpus * 1000, [(1000, 0.06), (1000, 0.01), (2000, 0.005),
                                                         (math.inf, 0.0025)]))
    mem_reserve = math.ceil(_tiered(shape.memory_gib * 1024, [(4096, 0.25), (4096, 0.20), (8192, 0.10),
                                                              (112 * 1024, 0.06), (math.inf, 0.02)]))
    efa = shape.fabric == "efa"
    # EFA nodes reserve 5120 MiB of 2 MiB huge pages at boot; the kubelet takes them out of memory.
    hugepages = 5120 if efa else 0
    return {
        "cpu": shape.vcpus * 1000 - cpu_reserve - 500,
        "memory": shape.memory_gib * 1024 - mem_reserve - 100 - 1024 - hugepages,
        "nvidia.com/gpu": shape.gpus,
        "vpc.amazonaws.com/efa": shape.fabric_nics if efa else 0,
        "hugepages-2Mi": hugepages,
    }


def quantity(value: Any) -> int:
    """Parse the quantities we render: ``123m`` (millicores), ``456Mi`` (MiB) or a plain integer."""
    if isinstance(value, str) and value.endswith("m"):
        return int(value[:-1])
    if isinstance(value, str) and value.endswith("Mi"):
        return int(value[:-2])
    return int(value)


def training_nodes(cfg: StackConfig, pool: NodePoolConfig) -> int:
    """Nodes of ``pool`` in the training queue's quota: those the inference queue does not own."""
    return pool.max_nodes - ko.inference_nodes(pool, cfg.kueue.inference_share)


def cq_flavors(cfg: StackConfig) -> list[dict[str, Any]]:
    groups = ko.cluster_queue(cfg)["spec"]["resourceGroups"]
    assert len(groups) == 1
    return list(groups[0]["flavors"])


# ------------------------------------------------------------------------------------------- quotas


@pytest.mark.parametrize("which", ["aws", "gcp"])
def test_cluster_queue_quota_is_pool_max_times_shape_allocatable(which: str, aws_cfg: StackConfig,
                                                                  gcp_cfg: StackConfig) -> None:
    """The training and inference queues together hold exactly each pool at its maximum size."""
    cfg = aws_cfg if which == "aws" else gcp_cfg
    pools = {p.name: p for p in cfg.node_pools}
    flavors = cq_flavors(cfg)
    assert sorted(f["name"] for f in flavors) == sorted(pools)
    inference = ko.inference_cluster_queue(cfg)
    serving = {f["name"]: f for f in inference["spec"]["resourceGroups"][0]["flavors"]} if inference else {}
    for flavor in flavors:
        pool = pools[flavor["name"]]
        per_node = expected_allocatable(pool)
        got = {r["name"]: quantity(r["nominalQuota"]) for r in flavor["resources"]}
        lent = {r["name"]: quantity(r["nominalQuota"]) for r in serving.get(pool.name, {}).get("resources", [])}
        for resource, value in got.items():
            assert value + lent.get(resource, 0) == per_node[resource] * pool.max_nodes, (flavor["name"], resource)


def test_reserve_formula_matches_published_examples() -> None:
    # GKE/EKS CPU reserve: 60m for 1 core, 70m for 2, 80m for 4, +2.5m per core above 4.
    assert [pk.kube_reserved_cpu_millis(n) for n in (1, 2, 4, 64)] == [60, 70, 80, 230]
    # GKE memory reserve: 1 GiB of 4, 1.8 GiB of 8, 2.6 GiB of 16, 9.32 GiB of 128 GiB.
    assert [pk.kube_reserved_memory_mib(g) for g in (4, 8, 16, 128)] == [1024, math.ceil(1.8 * 1024),
                                                                         math.ceil(2.6 * 1024),
                                                                         math.ceil(9.32 * 1024)]


def test_allocatable_never_exceeds_the_shape(aws_cfg: StackConfig, gcp_cfg: StackConfig) -> None:
    for pool in (*aws_cfg.node_pools, *gcp_cfg.node_pools):
        alloc = ko.allocatable(pool.shape)
        assert 0 < alloc.cpu_millis < pool.shape.vcpus * 1000
        assert 0 < alloc.memory_mib < pool.shape.memory_gib * 1024
        assert alloc.gpus == pool.shape.gpus


def test_efa_resource_only_on_aws_efa_shapes(aws_cfg: StackConfig, gcp_cfg: StackConfig) -> None:
    aws_cq = ko.cluster_queue(aws_cfg)["spec"]["resourceGroups"][0]
    assert ko.RES_EFA in aws_cq["coveredResources"]
    pools = {p.name: p for p in aws_cfg.node_pools}
    for flavor in aws_cq["flavors"]:
        efa = next(quantity(r["nominalQuota"]) for r in flavor["resources"] if r["name"] == ko.RES_EFA)
        shape = pools[flavor["name"]].shape
        nodes = training_nodes(aws_cfg, pools[flavor["name"]])
        assert efa == (shape.fabric_nics * nodes if shape.fabric == "efa" else 0)
    assert any(pools[f["name"]].shape.fabric == "none" for f in aws_cq["flavors"])  # the 0-EFA case was seen

    gcp_cq = ko.cluster_queue(gcp_cfg)["spec"]["resourceGroups"][0]
    assert ko.RES_EFA not in gcp_cq["coveredResources"]
    assert gcp_cq["coveredResources"] == [ko.RES_CPU, ko.RES_MEMORY, ko.RES_GPU]

    no_efa = parse({**AWS_RAW, "nodePools": [{"name": "l4", "instanceType": "g6.xlarge", "maxNodes": 1}]})
    assert ko.RES_EFA not in ko.cluster_queue(no_efa)["spec"]["resourceGroups"][0]["coveredResources"]


def test_efa_flavors_cover_the_huge_pages_efa_pods_request(aws_cfg: StackConfig, gcp_cfg: StackConfig) -> None:
    aws_cq = ko.cluster_queue(aws_cfg)["spec"]["resourceGroups"][0]
    assert "hugepages-2Mi" in aws_cq["coveredResources"]
    pools = {p.name: p for p in aws_cfg.node_pools}
    for flavor in aws_cq["flavors"]:
        pool = pools[flavor["name"]]
        pages = next(quantity(r["nominalQuota"]) for r in flavor["resources"] if r["name"] == "hugepages-2Mi")
        assert pages == (5120 * training_nodes(aws_cfg, pool) if pool.shape.fabric == "efa" else 0)
    gcp_cq = ko.cluster_queue(gcp_cfg)["spec"]["resourceGroups"][0]
    assert "hugepages-2Mi" not in gcp_cq["coveredResources"]


# ------------------------------------------------------------------------------------------- flavors


def test_one_flavor_per_pool_with_pool_label_and_gpu_toleration(aws_cfg: StackConfig, gcp_cfg: StackConfig) -> None:
    for cfg in (aws_cfg, gcp_cfg):
        flavors = [o for o in ko.worker_objects(cfg) if o["kind"] == "ResourceFlavor"]
        assert [f["metadata"]["name"] for f in flavors] == [p.name for p in cfg.node_pools]
        for flavor, pool in zip(flavors, cfg.node_pools, strict=True):
            # The instance type and fabric too: pool names repeat across clouds (issue 20).
            assert flavor["spec"]["nodeLabels"] == {"gpufleet.io/pool": pool.name,
                                                    "node.kubernetes.io/instance-type": pool.shape.name,
                                                    "gpufleet.io/fabric": pool.shape.fabric}
            tol = flavor["spec"]["tolerations"]
            assert {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present",
                    "effect": "NoSchedule"} in tol
            assert ko.pool_scheduling(pool) == {"nodeSelector": flavor["spec"]["nodeLabels"], "tolerations": tol}


@pytest.mark.parametrize("order", [["on-demand", "spot"], ["spot", "on-demand"]])
def test_flavor_order_follows_config(order: list[str]) -> None:
    cfg = parse({**AWS_RAW, "kueue": {"flavorOrder": order}})
    kinds = {p.name: p.capacity_kind for p in cfg.node_pools}
    got = [kinds[f["name"]] for f in cq_flavors(cfg)]
    assert got == sorted(got, key=order.index)
    assert got[0] == order[0] and got[-1] == order[-1]


def test_topology_only_for_fixed_size_multi_node_fabric_pools(aws_cfg: StackConfig, gcp_cfg: StackConfig) -> None:
    seen: set[str] = set()
    for cfg, levels in ((aws_cfg, ["topology.k8s.aws/network-node-layer-1", "topology.k8s.aws/network-node-layer-2",
                                   "topology.k8s.aws/network-node-layer-3", "kubernetes.io/hostname"]),
                        (gcp_cfg, ["cloud.google.com/gce-topology-block", "cloud.google.com/gce-topology-subblock",
                                   "cloud.google.com/gce-topology-host", "kubernetes.io/hostname"])):
        objs = ko.worker_objects(cfg)
        topologies = [o for o in objs if o["kind"] == "Topology"]
        assert len(topologies) == 1
        assert [lv["nodeLabel"] for lv in topologies[0]["spec"]["levels"]] == levels
        name = topologies[0]["metadata"]["name"]
        for flavor, pool in zip([o for o in objs if o["kind"] == "ResourceFlavor"], cfg.node_pools, strict=True):
            # Kueue's TAS only places pods on nodes that exist: a pool that must scale up never gets a TAS flavor.
            fabric = pool.max_nodes > 1 and pool.shape.fabric != "none"
            wants = fabric and pool.min_nodes == pool.max_nodes
            assert (flavor["spec"].get("topologyName") == name) is wants, pool.name
            seen.add("tas" if wants else "from-zero" if fabric and pool.min_nodes == 0
                     else "partly-standing" if fabric else "single-node")
    assert seen == {"tas", "from-zero", "partly-standing", "single-node"}  # every case was exercised


def test_tas_rule_takes_plain_values_and_no_topology_when_every_pool_scales() -> None:
    p5, l40s = shape_book().get("p5.48xlarge"), shape_book().get("g6e.xlarge")
    assert p5 is not None and l40s is not None
    assert ko.tas_enabled(4, 4, p5)
    assert not ko.tas_enabled(0, 4, p5) and not ko.tas_enabled(3, 4, p5)
    assert not ko.tas_enabled(1, 1, p5) and not ko.tas_enabled(1, 1, l40s)
    scaling = parse({**AWS_RAW, "nodePools": [{"name": "p5", "instanceType": "p5.48xlarge", "maxNodes": 4}]})
    objs = ko.worker_objects(scaling)
    assert not [o for o in objs if o["kind"] == "Topology"]
    assert all("topologyName" not in o["spec"] for o in objs if o["kind"] == "ResourceFlavor")


def test_cluster_queue_policy(aws_cfg: StackConfig) -> None:
    spec = ko.cluster_queue(aws_cfg)["spec"]
    assert ko.cluster_queue(aws_cfg)["metadata"]["name"] == "test-aws-gpu"
    assert spec["cohortName"] == "fleet"
    assert spec["preemption"]["withinClusterQueue"] == "LowerPriority"
    assert spec["preemption"]["reclaimWithinCohort"] in ("Any", "LowerPriority")
    assert spec["flavorFungibility"]["whenCanBorrow"] in ("MayStopSearch", "TryNextFlavor")
    assert spec["namespaceSelector"]["matchExpressions"][0]["values"] == ["team-a", "team-b"]


def test_local_queue_per_team_and_priority_classes(aws_cfg: StackConfig) -> None:
    objs = ko.worker_objects(aws_cfg)
    lqs = {(o["metadata"]["namespace"], o["metadata"]["name"]): o["spec"]["clusterQueue"]
           for o in objs if o["kind"] == "LocalQueue"}
    expected = {}
    for team in aws_cfg.kueue.teams:
        expected[(team, ko.local_queue_name(aws_cfg, team))] = "test-aws-gpu"
        expected[(team, ko.ALL_WORKERS)] = "test-aws-gpu"
        expected[(team, "test-aws-inference")] = "test-aws-inference"
    assert lqs == expected
    assert ko.local_queue_name("test-aws", "team-a") == ko.local_queue_name(aws_cfg, "team-a")
    with pytest.raises(ValueError):
        ko.local_queue_name(aws_cfg, "Not_A_Namespace")
    wpcs = {o["metadata"]["name"]: o["value"] for o in objs if o["kind"] == "WorkloadPriorityClass"}
    assert wpcs["serving"] > wpcs["production"] > wpcs["burst"] > wpcs["low"]


def test_manager_config_dispatcher() -> None:
    worker = yaml.safe_load(ko.manager_config())
    assert "multiKueue" not in worker and worker["waitForPodsReady"]["timeout"] == \
        f"{max(ko.pods_ready_timeout_seconds(c) for c in ('aws', 'gcp'))}s"
    assert yaml.safe_load(ko.manager_config("AllAtOnce"))["multiKueue"]["dispatcherName"] == \
        "kueue.x-k8s.io/multikueue-dispatcher-all-at-once"
    external = yaml.safe_load(ko.manager_config("External"))["multiKueue"]["dispatcherName"]
    assert external not in (ko.DISPATCHERS["AllAtOnce"], ko.DISPATCHERS["Incremental"])
    with pytest.raises(ValueError):
        ko.manager_config("Sometimes")


# ------------------------------------------------------------------------------------------- CRD schema


def test_every_rendered_object_validates(validator: CRDValidator, aws_cfg: StackConfig, gcp_cfg: StackConfig) -> None:
    for cfg in (aws_cfg, gcp_cfg):
        objs = ko.worker_objects(cfg)
        flex = {"ProvisioningRequestConfig", "AdmissionCheck"} if any(p.queued for p in cfg.node_pools) else set()
        assert {o["kind"] for o in objs} == {"WorkloadPriorityClass", "Topology", "ResourceFlavor", "ClusterQueue",
                                             "LocalQueue", *flex}
        for obj in objs:
            assert validator.validate(obj) == [], (obj["kind"], obj["metadata"]["name"])
    # Every CEL rule these objects reached was evaluated, not skipped.
    assert validator.unevaluated_rules == set()


def _break(obj: dict[str, Any], path: list[Any], value: Any = None, *, delete: bool = False) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    target = out
    for p in path[:-1]:
        target = target[p]
    if delete:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return out


def test_validator_rejects_broken_objects(validator: CRDValidator, aws_cfg: StackConfig) -> None:
    cq = ko.cluster_queue(aws_cfg)
    flavor = ko.resource_flavor(aws_cfg.node_pools[0], "aws")
    lq = ko.local_queues(aws_cfg)[0]
    topo = ko.topology("aws")
    mkc = ko.multikueue_cluster("w1", "multikueue-w1")
    check = ko.admission_check("w1", "w1")
    broken = {
        "quota of the wrong type": _break(cq, ["spec", "resourceGroups", 0, "flavors", 0, "resources", 0,
                                               "nominalQuota"], [8]),
        "quota not a quantity": _break(cq, ["spec", "resourceGroups", 0, "flavors", 0, "resources", 0,
                                            "nominalQuota"], "eight"),
        "misspelt field": _break(cq, ["spec", "cohort"], "fleet"),
        "bad enum": _break(cq, ["spec", "preemption", "withinClusterQueue"], "Sometimes"),
        "flavor without every covered resource (CEL)": _break(
            cq, ["spec", "resourceGroups", 0, "flavors", 0, "resources"],
            cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][:-1]),
        "duplicate flavor (list-map keys)": _break(
            cq, ["spec", "resourceGroups", 0, "flavors"],
            [cq["spec"]["resourceGroups"][0]["flavors"][0]] * 2),
        "preference without TryNextFlavor (CEL)": _break(cq, ["spec", "flavorFungibility", "whenCanBorrow"],
                                                         "MayStopSearch"),
        "Exists toleration with a value (CEL)": _break(flavor, ["spec", "tolerations", 0, "operator"], "Exists"),
        "topology without node labels (CEL)": _break(flavor, ["spec", "nodeLabels"], delete=True),
        "hostname not last (CEL)": _break(topo, ["spec", "levels"], list(reversed(topo["spec"]["levels"]))),
        "namespaced kind without namespace": _break(lq, ["metadata", "namespace"], delete=True),
        "bad name": _break(lq, ["metadata", "name"], "Team_Queue"),
        "wrong apiVersion": _break(lq, ["apiVersion"], "kueue.x-k8s.io/v9"),
        "two cluster sources (CEL)": _break(mkc, ["spec", "clusterSource", "clusterProfileRef"], {"name": "x"}),
        "parameters kind not a kind name": _break(check, ["spec", "parameters", "kind"], "Multi Kueue Config"),
        "duplicate MultiKueue clusters (CEL)": ko.multikueue_config("all", ["a", "a"]),
    }
    assert validator.validate(check) == [] and validator.validate(mkc) == []
    for why, obj in broken.items():
        assert validator.validate(obj), f"validator accepted: {why}"


# ------------------------------------------------------------------------------------------- ClusterAddons


def _write_stack(tmp: Path, stack: str, raw: dict[str, Any]) -> str:
    path = tmp / f"Pulumi.{stack}.yaml"
    path.write_text(yaml.safe_dump({"config": {f"gpufleet:{k}": v for k, v in raw.items()}}), encoding="utf-8")
    return str(path)


def _addons_program() -> None:
    import pulumi
    import pulumi_kubernetes as k8s

    from infra.config import from_pulumi
    from infra.k8s.addons import ClusterAddons, ClusterAddonsArgs

    cfg = from_pulumi()
    provider = k8s.Provider("cluster-k8s", kubeconfig="apiVersion: v1\nkind: Config\n")
    addons = ClusterAddons(f"{cfg.cluster_name}-addons",
                           ClusterAddonsArgs(cfg=cfg, platform=cfg.cloud, depends_on=[]),
                           opts=pulumi.ResourceOptions(provider=provider))
    pulumi.export("kueue", {"clusterQueue": addons.cluster_queue, "localQueues": addons.local_queues})


@pytest.fixture(scope="module")
def addon_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from infra.mockrun import run_stack

    tmp = tmp_path_factory.mktemp("stacks")
    return {"aws": run_stack(_write_stack(tmp, "test-aws", AWS_RAW), program=_addons_program),
            "gcp": run_stack(_write_stack(tmp, "test-gcp", GCP_RAW), program=_addons_program)}


def _releases(run: Any) -> dict[str, dict[str, Any]]:
    return {r.inputs["chart"]: r.inputs for r in run.of_type("kubernetes:helm.sh/v3:Release")}


@pytest.mark.parametrize("which", ["aws", "gcp"])
def test_addons_install_kueue_chart_at_config_version(which: str, addon_runs: dict[str, Any]) -> None:
    raw = AWS_RAW if which == "aws" else GCP_RAW
    kueue = _releases(addon_runs[which])["oci://registry.k8s.io/kueue/charts/kueue"]
    assert kueue["version"] == parse(raw).kueue.version == "0.19.2"
    assert kueue["namespace"] == "kueue-system"
    config = yaml.safe_load(kueue["values"]["managerConfig"]["controllerManagerConfigYaml"])
    assert config["kind"] == "Configuration" and "batch/job" in config["integrations"]["frameworks"]


def test_addons_device_plugins_per_platform(addon_runs: dict[str, Any]) -> None:
    from infra.k8s import addons

    aws = _releases(addon_runs["aws"])
    assert aws["nvidia-device-plugin"]["repositoryOpts"]["repo"] == "https://nvidia.github.io/k8s-device-plugin"
    efa = aws["aws-efa-k8s-device-plugin"]
    assert efa["repositoryOpts"]["repo"] == "https://aws.github.io/eks-charts"
    assert "supportedInstanceLabels" not in efa["values"]  # chart v0.5.30's own list has every EFA shape
    for values in (aws["nvidia-device-plugin"]["values"], efa["values"]):
        assert any(t["key"] == "nvidia.com/gpu" and t["effect"] == "NoSchedule" for t in values["tolerations"])

    gcp = _releases(addon_runs["gcp"])
    # No NVIDIA/EFA plugin on GKE: only JobSet, LeaderWorkerSet and Kueue.
    assert set(gcp) == {"oci://registry.k8s.io/jobset/charts/jobset", "oci://registry.k8s.io/lws/charts/lws",
                        "oci://registry.k8s.io/kueue/charts/kueue"}
    files = [r.inputs["file"] for r in addon_runs["gcp"].of_type("kubernetes:yaml/v2:ConfigFile")]
    assert any(f.endswith("gpudirect-tcpxo/nccl-tcpxo-installer.yaml") for f in files)
    assert any(f.endswith("nri_device_injector/nri-device-injector.yaml") for f in files)
    jobset_crd = addons.JOBSET_CRD_URL.format(version=addons.JOBSET_VERSION)
    assert [r.inputs["file"] for r in addon_runs["aws"].of_type("kubernetes:yaml/v2:ConfigFile")] == [jobset_crd]


def test_gpudirect_installers_are_pinned_to_a_commit(addon_runs: dict[str, Any]) -> None:
    from infra.k8s import addons
    from placement.model.gpudirect import fabric

    files = [r.inputs["file"] for r in addon_runs["gcp"].of_type("kubernetes:yaml/v2:ConfigFile")
             if r.inputs["file"] != addons.JOBSET_CRD_URL.format(version=addons.JOBSET_VERSION)]
    assert files
    for url in files:
        # .../container-engine-accelerators/<40-hex commit>/<path>: a branch such as master moves under a cluster.
        commit = url.split("container-engine-accelerators/", 1)[1].split("/", 1)[0]
        assert re.fullmatch(r"[0-9a-f]{40}", commit), url
    assert set(files) == {i.url for i in fabric("tcpxo").installers}


def test_a_stack_of_every_gpudirect_fabric_applies_each_installer_once() -> None:
    from infra.k8s.addons import gke_fabric_installers

    got = gke_fabric_installers(["tcpx", "tcpxo", "rdma", "none", "tcpxo"])
    names = [n for n, _ in got]
    assert names == ["nccl-tcpx-installer", "nri-device-injector", "nccl-tcpxo-installer", "nccl-rdma-installer"]
    assert len({u for _, u in got}) == len(got)


@pytest.mark.parametrize("which", ["aws", "gcp"])
def test_addons_create_every_kueue_object_on_the_cluster_provider(which: str, addon_runs: dict[str, Any],
                                                                 validator: CRDValidator) -> None:
    run = addon_runs[which]
    cfg = parse(AWS_RAW if which == "aws" else GCP_RAW)
    expected = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in ko.worker_objects(cfg)}
    created = {}
    for r in run.resources:
        if r.type.startswith("kubernetes:kueue.x-k8s.io/v1beta2:"):
            obj = {k: v for k, v in r.inputs.items() if v is not None}
            created[(obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"])] = (obj, r.provider)
    assert set(created) == set(expected)
    for key, (obj, provider) in created.items():
        assert obj == expected[key], key
        assert provider and "cluster-k8s" in provider, key
        assert validator.validate(obj) == [], key
    namespaces = {r.inputs["metadata"]["name"] for r in run.of_type("kubernetes:core/v1:Namespace")}
    assert namespaces == set(cfg.training_namespaces) and set(cfg.kueue.teams) <= namespaces
    assert run.outputs["kueue"]["clusterQueue"] == ko.cluster_queue_name(cfg)
    # The training LocalQueues (what placement submit targets); the serving ones are not training queues.
    assert {(q["namespace"], q["name"]) for q in run.outputs["kueue"]["localQueues"]} == \
        {(k[1], k[2]) for k in expected if k[0] == "LocalQueue" and k[2] != ko.inference_queue_name(cfg.cluster_name)}


@pytest.mark.parametrize("which", ["aws", "gcp"])
def test_addons_install_jobset_before_kueue_and_the_queues(which: str, addon_runs: dict[str, Any]) -> None:
    from infra.k8s import addons

    run = addon_runs[which]
    releases = {r.inputs["chart"]: r for r in run.of_type("kubernetes:helm.sh/v3:Release")}
    jobset, kueue = releases[addons.JOBSET_CHART], releases[addons.KUEUE_CHART]
    assert jobset.inputs["version"] == addons.JOBSET_VERSION
    assert jobset.inputs["namespace"] == "jobset-system"
    assert jobset.inputs["values"]["image"]["tag"] == f"v{addons.JOBSET_VERSION}"
    assert jobset.provider and "cluster-k8s" in jobset.provider
    # Kueue's JobSet integration is on, and Kueue starts only once the JobSet API is served.
    config = yaml.safe_load(kueue.inputs["values"]["managerConfig"]["controllerManagerConfigYaml"])
    assert "jobset.x-k8s.io/jobset" in config["integrations"]["frameworks"]
    assert run.depends_on(kueue, jobset) and not run.depends_on(jobset, kueue)
    # Helm never upgrades CRDs: the JobSet CRD is applied from the pinned tag before the chart, which skips its own.
    (crd,) = [r for r in run.of_type("kubernetes:yaml/v2:ConfigFile") if "kubernetes-sigs/jobset" in r.inputs["file"]]
    assert crd.inputs["file"] == addons.JOBSET_CRD_URL.format(version=addons.JOBSET_VERSION)
    assert f"/v{addons.JOBSET_VERSION}/charts/jobset/crds/" in crd.inputs["file"]
    assert jobset.inputs["skipCrds"] is True and run.depends_on(jobset, crd)
    # The queues (which MultiKueue and `placement submit` send JobSets to) come after JobSet too.
    queues = [r for r in run.resources if r.type.startswith("kubernetes:kueue.x-k8s.io/v1beta2:")]
    assert queues and all(run.depends_on(q, jobset) for q in queues)


# ------------------------------------------------------------------------------------------- flex-start


def test_flex_start_flavor_goes_through_the_provisioning_request_check(gcp_cfg: StackConfig,
                                                                       validator: CRDValidator) -> None:
    objs = {(o["kind"], o["metadata"]["name"]): o for o in ko.worker_objects(gcp_cfg)}
    flex = [p.name for p in gcp_cfg.node_pools if p.queued]
    assert flex == ["mega-flex"]
    prc = objs[("ProvisioningRequestConfig", ko.FLEX_START_CHECK)]
    assert prc["spec"]["provisioningClassName"] == "queued-provisioning.gke.io"
    assert prc["spec"]["managedResources"] == ["nvidia.com/gpu"]
    check = objs[("AdmissionCheck", ko.FLEX_START_CHECK)]
    assert check["spec"]["controllerName"] == "kueue.x-k8s.io/provisioning-request"
    assert check["spec"]["parameters"] == {"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig",
                                           "name": prc["metadata"]["name"]}
    cq = objs[("ClusterQueue", ko.cluster_queue_name(gcp_cfg))]
    # Only the flex-start flavor waits for a ProvisioningRequest; spot and on-demand admit without one.
    assert cq["spec"]["admissionChecksStrategy"] == {
        "admissionChecks": [{"name": check["metadata"]["name"], "onFlavors": flex}]}
    assert "admissionChecks" not in cq["spec"]
    flavor = objs[("ResourceFlavor", "mega-flex")]
    assert ko.QUEUED_TAINT_TOLERATION in flavor["spec"]["tolerations"]
    assert ko.QUEUED_TAINT_TOLERATION not in objs[("ResourceFlavor", "mega-od")]["spec"]["tolerations"]
    for obj in (prc, check, cq, flavor):
        assert validator.validate(obj) == [], obj["kind"]
    # The schema would catch a class name that is not a DNS subdomain.
    assert validator.validate(_break(prc, ["spec", "provisioningClassName"], "Queued Provisioning"))


def test_no_flex_start_pool_no_provisioning_objects(aws_cfg: StackConfig) -> None:
    objs = ko.worker_objects(aws_cfg)
    assert not [o for o in objs if o["kind"] in ("ProvisioningRequestConfig", "AdmissionCheck")]
    cq = next(o for o in objs if o["kind"] == "ClusterQueue")
    assert "admissionChecksStrategy" not in cq["spec"]


def test_addons_create_the_provisioning_config_then_check_then_queue(addon_runs: dict[str, Any]) -> None:
    run = addon_runs["gcp"]
    by_kind = {r.type.rsplit(":", 1)[1]: r for r in run.resources if r.type.startswith("kubernetes:kueue.x-k8s.io")}
    prc, check, cq = by_kind["ProvisioningRequestConfig"], by_kind["AdmissionCheck"], by_kind["ClusterQueue"]
    assert run.depends_on(check, prc) and run.depends_on(cq, check)



# ------------------------------------------------------------------------------------------- pods ready (issue 20)


def _seconds(duration: str) -> int:
    """A Go duration as we render it (``1234s``) or the autoscaler writes it (``20m``)."""
    m = re.fullmatch(r"(\d+)([smh])", duration)
    assert m, duration
    return int(m.group(1)) * {"s": 1, "m": 60, "h": 3600}[m.group(2)]


@pytest.mark.parametrize("which", ["aws", "gcp"])
def test_pods_ready_timeout_outlasts_the_slowest_node_path(which: str, aws_cfg: StackConfig,
                                                           addon_runs: dict[str, Any]) -> None:
    """Kueue's waitForPodsReady timeout on a worker is at least the autoscaler's node-provisioning limit
    plus the image pull allowance: a p5 gang scaling from zero is never evicted while its nodes boot."""
    kueue = _releases(addon_runs[which])["oci://registry.k8s.io/kueue/charts/kueue"]
    wfpr = yaml.safe_load(kueue["values"]["managerConfig"]["controllerManagerConfigYaml"])["waitForPodsReady"]
    if which == "aws":
        from infra.aws.autoscaler import MAX_NODE_PROVISION_TIME, helm_values

        # The number the autoscaler is really started with, read from its Helm values.
        provision = _seconds(helm_values(aws_cfg, "test-aws", "v1.33.6")["extraArgs"]["max-node-provision-time"])
        assert provision == _seconds(MAX_NODE_PROVISION_TIME) == ko.NODE_PROVISION_SECONDS["aws"]
    else:
        provision = ko.NODE_PROVISION_SECONDS["gcp"]  # GKE's managed autoscaler: upstream's 15 min default
    assert _seconds(wfpr["timeout"]) >= provision + ko.IMAGE_PULL_ALLOWANCE_SECONDS > provision
    # A workload that lost a pod (a JobSet restarting after a reclaim) waits the same boot path.
    assert _seconds(wfpr["recoveryTimeout"]) == _seconds(wfpr["timeout"])


def test_spot_churn_never_deactivates_a_workload() -> None:
    """Kueue's triggerDeactivation: a workload is deactivated once requeueState.count + 1 exceeds
    backoffLimitCount; unset, it is re-queued forever. Backoff delays stay within backoffMaxSeconds."""
    strategy = yaml.safe_load(ko.manager_config(cloud="aws"))["waitForPodsReady"]["requeuingStrategy"]
    limit = strategy.get("backoffLimitCount")
    deactivated = any(limit is not None and count + 1 > limit for count in range(1000))
    assert not deactivated
    base, cap = strategy["backoffBaseSeconds"], strategy["backoffMaxSeconds"]
    delays = [min(base * 2 ** (n - 1), cap) for n in range(1, 30)]
    assert delays[0] == 60 and max(delays) == cap <= 3600


def test_hub_pods_ready_timeout_never_fires_before_a_workers() -> None:
    """Kueue v0.19 runs waitForPodsReady even when the block is left out (30 min), so the hub states one that
    outlasts every worker's."""
    hub = yaml.safe_load(ko.manager_config("External", wait_for_pods_ready=False))["waitForPodsReady"]
    assert all(_seconds(hub["timeout"]) > ko.pods_ready_timeout_seconds(c) for c in ko.NODE_PROVISION_SECONDS)


# ------------------------------------------------------------------------------------------- inference (issue 20)


def test_serving_integrations_are_enabled_and_lws_is_installed_pinned(addon_runs: dict[str, Any]) -> None:
    frameworks = yaml.safe_load(ko.manager_config(cloud="gcp"))["integrations"]["frameworks"]
    # Kueue v0.19.2 framework names (pkg/controller/jobs/{deployment,statefulset,leaderworkerset}).
    assert {"deployment", "statefulset", "leaderworkerset.x-k8s.io/leaderworkerset"} <= set(frameworks)
    assert "jobset.x-k8s.io/jobset" in frameworks
    for which in ("aws", "gcp"):
        lws = _releases(addon_runs[which])["oci://registry.k8s.io/lws/charts/lws"]
        assert lws["version"] == "0.9.0"  # Kueue v0.19.2's go.mod: sigs.k8s.io/lws v0.9.0
        assert lws["values"]["image"]["manager"] == {"repository": "registry.k8s.io/lws/lws", "tag": "v0.9.0",
                                                     "pullPolicy": "IfNotPresent"}


def _reclaim_victims(cqs: dict[str, dict[str, Any]], usage: dict[str, int], pending_cq: str, need: int
                     ) -> list[str] | None:
    """Kueue's classical preemption across a cohort, on GPUs of one flavor: a pending workload that fits its
    queue's nominal quota (less its own usage) may, with reclaimWithinCohort != Never, preempt workloads of
    other queues that use more than their nominal quota; a pending workload that would have to borrow may
    only when borrowingLimit allows it and borrowWithinCohort is not Never. Returns the queues preempted
    from (None: cannot be admitted)."""
    def gpus(cq: dict[str, Any], field: str) -> int | None:
        res = cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
        value = next(r.get(field) for r in res if r["name"] == ko.RES_GPU)
        return None if value is None else int(value)
    nominal = {name: gpus(cq, "nominalQuota") or 0 for name, cq in cqs.items()}
    total = sum(nominal.values())
    free = total - sum(usage.values())
    if free >= need:
        borrow = usage[pending_cq] + need - nominal[pending_cq]
        limit = gpus(cqs[pending_cq], "borrowingLimit")
        return [] if borrow <= 0 or limit is None or borrow <= limit else None
    preemption = cqs[pending_cq]["spec"]["preemption"]
    if usage[pending_cq] + need <= nominal[pending_cq] and preemption["reclaimWithinCohort"] != "Never":
        victims = [n for n in cqs if n != pending_cq and usage[n] > nominal[n]]
        return victims or None
    return None


def test_a_serving_burst_reclaims_lent_quota_from_training_never_the_reverse(aws_cfg: StackConfig) -> None:
    pool = next(p for p in aws_cfg.node_pools if p.name == "p5-spot")  # 4 nodes of 8 GPUs
    only = {**AWS_RAW, "nodePools": [{"name": pool.name, "instanceType": "p5.48xlarge", "capacity": "SPOT",
                                      "maxNodes": 4}], "kueue": {**AWS_RAW["kueue"], "inferenceShare": 0.25}}
    cfg = parse(only, stack="test-aws")
    train, serve = ko.cluster_queue(cfg), ko.inference_cluster_queue(cfg)
    assert serve is not None and serve["spec"]["cohortName"] == train["spec"]["cohortName"]
    assert serve["metadata"]["name"] == "test-aws-inference"
    cqs = {"train": train, "serve": serve}
    # Idle serving quota is lent: training runs a 4-node job (borrowing the inference queue's node).
    assert _reclaim_victims(cqs, {"train": 0, "serve": 0}, "train", 32) == []
    # A serving burst of one node reclaims it from the borrowing training job.
    assert _reclaim_victims(cqs, {"train": 32, "serve": 0}, "serve", 8) == ["train"]
    # The reverse never happens: serving never borrows, so training has nothing to reclaim from it...
    assert _reclaim_victims(cqs, {"train": 24, "serve": 8}, "train", 8) is None
    # ...and serving cannot grow past what it owns by borrowing training's idle quota.
    assert _reclaim_victims(cqs, {"train": 0, "serve": 8}, "serve", 8) is None
    assert all(r["borrowingLimit"] == 0 for f in serve["spec"]["resourceGroups"][0]["flavors"]
               for r in f["resources"])
    assert serve["spec"]["preemption"]["reclaimWithinCohort"] == "Any"
    assert serve["spec"]["preemption"]["borrowWithinCohort"]["policy"] == "Never"
    assert train["spec"]["preemption"]["borrowWithinCohort"]["policy"] == "Never"
    # Serving outranks every training priority; training jobs cannot ask for it.
    from placement.model.jobspec import PRIORITIES

    values = {n: v for n, v, _ in (ko.SERVING_PRIORITY_CLASS, *ko.PRIORITY_CLASSES)}
    assert all(values["serving"] > values[p] for p in PRIORITIES) and "serving" not in PRIORITIES


def test_flex_start_pools_lend_nothing_and_every_other_worker_has_an_inference_queue(gcp_cfg: StackConfig) -> None:
    serve = ko.inference_cluster_queue(gcp_cfg)
    assert serve is not None
    assert "mega-flex" not in {f["name"] for f in serve["spec"]["resourceGroups"][0]["flavors"]}
    # Pools too small for the share to round to a node: the queue exists with zero quota and lends nothing.
    tiny = parse({**AWS_RAW, "nodePools": [{"name": "one", "instanceType": "g6e.xlarge", "maxNodes": 1}]})
    (flavor,) = ko.inference_cluster_queue(tiny)["spec"]["resourceGroups"][0]["flavors"]
    assert {r["nominalQuota"] for r in flavor["resources"]} <= {0, "0m", "0Mi"}
    flex_only = parse({**GCP_RAW, "nodePools": [GCP_RAW["nodePools"][2]]})
    assert ko.inference_cluster_queue(flex_only) is None
    assert not [o for o in ko.worker_objects(flex_only) if o["metadata"]["name"].endswith("-inference")]
    with pytest.raises(Exception, match="inferenceShare"):
        parse({**AWS_RAW, "kueue": {**AWS_RAW["kueue"], "inferenceShare": 1.5}})


def test_by_default_serving_owns_a_quarter_of_each_pool_and_zero_is_allowed() -> None:
    """Item 8 holds without opting in: a stack that sets no share still gets an inference queue owning a node
    of a 4-node pool (which training borrows while it idles); 0 keeps every node in the training queue."""
    kueue = {k: v for k, v in AWS_RAW["kueue"].items() if k != "inferenceShare"}
    cfg = parse({**AWS_RAW, "kueue": kueue})
    spot = next(p for p in cfg.node_pools if p.name == "p5-spot")
    assert cfg.kueue.inference_share == 0.25 and ko.inference_nodes(spot, cfg.kueue.inference_share) == 1
    none = parse({**AWS_RAW, "kueue": {**kueue, "inferenceShare": 0}})
    assert none.kueue.inference_share == 0 and ko.training_quota(spot, 0).gpus == 32


@pytest.mark.parametrize("which", ["aws", "gcp"])
def test_every_label_a_flavor_injects_is_on_its_pools_nodes(which: str, aws_cfg: StackConfig,
                                                            gcp_cfg: StackConfig) -> None:
    """A flavor's nodeLabels become the admitted pods' node selector: the pool's nodes (and, for scale from
    zero, the autoscaler's template node) must carry every one. The kubelet sets the instance type on both
    clouds; the rest are the node pool's own labels."""
    cfg = aws_cfg if which == "aws" else gcp_cfg
    if which == "aws":
        from infra.aws.gpu_nodes import pool_labels as labels_of
    else:
        from infra.gcp.nodepool import node_labels as labels_of
    for pool in cfg.node_pools:
        labels = {**labels_of(pool), ko.INSTANCE_TYPE_LABEL: pool.shape.name}
        if ko.FABRIC_LABEL not in labels:
            pytest.skip("GKE node pools get gpufleet.io/fabric from the stacks22 branch (issue 22)")
        flavor = ko.resource_flavor(pool, cfg.cloud)
        assert flavor["spec"]["nodeLabels"].items() <= labels.items(), pool.name
