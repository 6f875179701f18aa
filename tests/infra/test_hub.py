"""The MultiKueue hub stack under mocks, with worker outputs fabricated from the worker stack files."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra import mockrun
from infra.config import ConfigError, StackConfig, load_stack_file
from infra.k8s import kueue_objects as ko
from infra.k8s.crd_validate import CRDValidator
from infra.outputs import node_pool_output

REPO = Path(__file__).resolve().parents[2]
HUB_STACK = str(REPO / "stacks" / "Pulumi.hub.yaml")
CRD_DIR = REPO.parent / "shared" / "kueue-crds"
KUEUE = "kubernetes:kueue.x-k8s.io/v1beta2:"
# How the mocks record a secret input: Pulumi's secret signature wrapping the plain value.
SECRET_SIG, SECRET_MARK = "4dabf18193072939515e22adb298388d", "1b47061264138c4ac30d75fd1eb44270"
MOCK_TOKEN = base64.b64decode("bW9jay1zZXJ2aWNlLWFjY291bnQtdG9rZW4=").decode()


def _exec_kubeconfig(cluster: str) -> str:
    """What a worker stack exports: server + CA and an exec plugin the Kueue controller cannot run."""
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": cluster,
        "clusters": [{"name": cluster, "cluster": {"server": f"https://{cluster}.example",
                                                   "certificate-authority-data": "Y2EtZGF0YQ=="}}],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": cluster}}],
        "users": [{"name": cluster, "user": {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1",
                                                      "command": "aws", "args": ["eks", "get-token"]}}}],
    })


@pytest.fixture(scope="module")
def hub_cfg() -> StackConfig:
    return load_stack_file(HUB_STACK)


@pytest.fixture(scope="module")
def workers(hub_cfg: StackConfig) -> dict[str, StackConfig]:
    """Worker configs parsed from stacks/Pulumi.<worker>.yaml, by fully qualified stack name."""
    out = {}
    for stack in hub_cfg.hub.workers:
        path = REPO / "stacks" / f"Pulumi.{stack.rsplit('/', 1)[-1]}.yaml"
        if not path.exists():
            pytest.skip(f"worker stack file {path.name} is not in the repository yet")
        out[stack] = load_stack_file(str(path))
    return out


@pytest.fixture(scope="module")
def fabricated_outputs(workers: dict[str, StackConfig]) -> Iterator[dict[str, dict[str, Any]]]:
    outputs = {stack: {"cloud": c.cloud, "region": c.region, "clusterName": c.cluster_name,
                       "kubeconfig": _exec_kubeconfig(c.cluster_name),
                       "nodePools": [node_pool_output(p) for p in c.node_pools]}
               for stack, c in workers.items()}
    saved = dict(mockrun.STACK_REFERENCE_OUTPUTS)
    mockrun.STACK_REFERENCE_OUTPUTS.update(outputs)
    yield outputs
    mockrun.STACK_REFERENCE_OUTPUTS.clear()
    mockrun.STACK_REFERENCE_OUTPUTS.update(saved)


@pytest.fixture(scope="module")
def run(fabricated_outputs: dict[str, dict[str, Any]]) -> mockrun.RunResult:
    return mockrun.run_stack(HUB_STACK)


@pytest.fixture(scope="module")
def validator() -> CRDValidator:
    if not CRD_DIR.is_dir():
        pytest.skip(f"Kueue CRDs not found at {CRD_DIR} (shared/kueue-crds beside the repository)")
    return CRDValidator(CRD_DIR)


def kueue_objects(run: mockrun.RunResult, kind: str) -> dict[str, dict[str, Any]]:
    """Registered Kueue objects of one kind by metadata name (namespace/name for LocalQueues)."""
    out = {}
    for r in run.of_type(KUEUE + kind):
        obj = {k: v for k, v in r.inputs.items() if v is not None}
        meta = obj["metadata"]
        out[f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]] = obj
    return out


def key_of(stack: str) -> str:
    return stack.rsplit("/", 1)[-1]


def expected_capacity(cfg: StackConfig, kind: str) -> dict[str, int]:
    """Sum over a worker's pools of one capacity kind of maxNodes x per-node allocatable."""
    total = {ko.RES_CPU: 0, ko.RES_MEMORY: 0, ko.RES_GPU: 0, ko.RES_EFA: 0}
    for pool in cfg.node_pools:
        if pool.capacity_kind == kind:
            alloc = ko.allocatable(pool.shape)
            total[ko.RES_CPU] += alloc.cpu_millis * pool.max_nodes
            total[ko.RES_MEMORY] += alloc.memory_mib * pool.max_nodes
            total[ko.RES_GPU] += pool.shape.gpus * pool.max_nodes
            total[ko.RES_EFA] += (pool.shape.fabric_nics if pool.shape.fabric == "efa" else 0) * pool.max_nodes
    return total


def quota_of(flavor: dict[str, Any]) -> dict[str, int]:
    out = {}
    for r in flavor["resources"]:
        q = r["nominalQuota"]
        out[r["name"]] = int(q[:-1]) if str(q).endswith("m") else int(q[:-2]) if str(q).endswith("Mi") else int(q)
    return out


# ------------------------------------------------------------------------------------------- per worker


def test_kubeconfig_secret_per_worker_uses_a_service_account_token(run: mockrun.RunResult,
                                                                   workers: dict[str, StackConfig]) -> None:
    secrets = {r.inputs["metadata"]["name"]: r for r in run.of_type("kubernetes:core/v1:Secret")
               if r.inputs.get("type") != "kubernetes.io/service-account-token"}
    for stack, cfg in workers.items():
        secret = secrets[ko.kubeconfig_secret_name(key_of(stack))]
        assert secret.inputs["metadata"]["namespace"] == "kueue-system"
        data = secret.inputs["stringData"]
        assert data.get(SECRET_SIG) == SECRET_MARK, "the kubeconfig must be registered as a secret"
        kubeconfig = yaml.safe_load(data["value"]["kubeconfig"])
        assert kubeconfig["clusters"][0]["cluster"]["server"] == f"https://{cfg.cluster_name}.example"
        assert kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"] == "Y2EtZGF0YQ=="
        assert kubeconfig["users"][0]["user"] == {"token": MOCK_TOKEN}  # no exec plugin left

    # The token comes from a service account the hub creates on that worker, through the worker's provider.
    for kind in ("kubernetes:core/v1:ServiceAccount", "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole",
                 "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding"):
        regs = run.of_type(kind)
        assert len(regs) == len(workers), kind
        for stack in workers:
            reg = next(r for r in regs if f"-{key_of(stack)}-" in r.name)
            assert reg.provider and f"-{key_of(stack)}-provider" in reg.provider, kind
    role = run.of_type("kubernetes:rbac.authorization.k8s.io/v1:ClusterRole")[0]
    workload_rules = [r for r in role.inputs["rules"] if r["apiGroups"] == ["kueue.x-k8s.io"]]
    assert {"workloads", "workloads/status"} <= {res for r in workload_rules for res in r["resources"]}


def test_multikueue_objects_per_worker(run: mockrun.RunResult, workers: dict[str, StackConfig],
                                       hub_cfg: StackConfig) -> None:
    clusters = kueue_objects(run, "MultiKueueCluster")
    configs = kueue_objects(run, "MultiKueueConfig")
    checks = kueue_objects(run, "AdmissionCheck")
    queues = kueue_objects(run, "ClusterQueue")
    local = kueue_objects(run, "LocalQueue")
    for stack, cfg in workers.items():
        key = key_of(stack)
        assert clusters[key]["spec"]["clusterSource"]["kubeConfig"] == {
            "locationType": "Secret", "location": ko.kubeconfig_secret_name(key)}
        assert configs[key]["spec"]["clusters"] == [key]
        assert checks[key]["spec"]["controllerName"] == "kueue.x-k8s.io/multikueue"
        assert checks[key]["spec"]["parameters"] == {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig",
                                                     "name": key}
        # The hub queue and LocalQueue carry the worker's own queue name, so the copied workload finds it there.
        queue_name = ko.cluster_queue_name(cfg)
        cq = queues[queue_name]["spec"]
        assert cq["admissionChecksStrategy"]["admissionChecks"] == [{"name": key}]
        for team in hub_cfg.kueue.teams:
            assert team in cfg.kueue.teams
            assert local[f"{team}/{ko.local_queue_name(cfg, team)}"]["spec"]["clusterQueue"] == queue_name
        flavors = {f["name"]: quota_of(f) for f in cq["resourceGroups"][0]["flavors"]}
        assert list(flavors) == [ko.hub_flavor_name(key, kind) for kind in hub_cfg.kueue.flavor_order]
        for kind in hub_cfg.kueue.flavor_order:
            expected = expected_capacity(cfg, kind)
            got = flavors[ko.hub_flavor_name(key, kind)]
            assert got == {r: expected[r] for r in got}, (key, kind)
            assert got[ko.RES_GPU] == sum(p.shape.gpus * p.max_nodes for p in cfg.node_pools
                                          if p.capacity_kind == kind)
        has_efa = any(p.shape.fabric == "efa" for p in cfg.node_pools)
        assert (ko.RES_EFA in cq["resourceGroups"][0]["coveredResources"]) is has_efa


def test_all_workers_queue_spans_every_worker(run: mockrun.RunResult, workers: dict[str, StackConfig],
                                              hub_cfg: StackConfig) -> None:
    keys = [key_of(s) for s in hub_cfg.hub.workers]
    assert kueue_objects(run, "MultiKueueConfig")[ko.ALL_WORKERS]["spec"]["clusters"] == keys
    check = kueue_objects(run, "AdmissionCheck")[ko.ALL_WORKERS]["spec"]
    assert check["controllerName"] == ko.MULTIKUEUE_CONTROLLER and check["parameters"]["name"] == ko.ALL_WORKERS
    cq = kueue_objects(run, "ClusterQueue")[ko.ALL_WORKERS]["spec"]
    assert cq["admissionChecksStrategy"]["admissionChecks"] == [{"name": ko.ALL_WORKERS}]
    flavors = {f["name"]: quota_of(f) for f in cq["resourceGroups"][0]["flavors"]}
    assert len(flavors) == len(workers) * 2
    total_gpus = sum(q[ko.RES_GPU] for q in flavors.values())
    assert total_gpus == sum(p.shape.gpus * p.max_nodes for c in workers.values() for p in c.node_pools)
    # Flavors follow the hub's flavor order: every first-kind flavor before any second-kind one.
    first = hub_cfg.kueue.flavor_order[0]
    names = list(flavors)
    assert all(n.endswith(first) for n in names[:len(workers)])
    for team in hub_cfg.kueue.teams:
        assert kueue_objects(run, "LocalQueue")[f"{team}/{ko.ALL_WORKERS}"]["spec"]["clusterQueue"] == ko.ALL_WORKERS


def test_hub_installs_kueue_with_the_dispatcher(run: mockrun.RunResult, hub_cfg: StackConfig) -> None:
    releases = run.of_type("kubernetes:helm.sh/v3:Release")
    assert [r.inputs["chart"] for r in releases] == ["oci://registry.k8s.io/kueue/charts/kueue"]
    assert releases[0].inputs["version"] == hub_cfg.kueue.version
    config = yaml.safe_load(releases[0].inputs["values"]["managerConfig"]["controllerManagerConfigYaml"])
    assert config["multiKueue"]["dispatcherName"] == ko.DISPATCHERS[hub_cfg.hub.dispatcher]
    # The hub Kueue objects use the default provider (the hub cluster), not a worker's.
    for r in run.resources:
        if r.type.startswith(KUEUE):
            assert not r.provider or "-provider::" not in r.provider, r.name
    assert set(kueue_objects(run, "WorkloadPriorityClass")) == {"production", "burst", "low"}


def test_every_hub_object_validates(run: mockrun.RunResult, validator: CRDValidator) -> None:
    count = 0
    for r in run.resources:
        if r.type.startswith(KUEUE):
            obj = {k: v for k, v in r.inputs.items() if v is not None}
            assert validator.validate(obj) == [], r.name
            count += 1
    assert count > 0
    assert validator.unevaluated_rules == set()


def test_outputs_list_queues(run: mockrun.RunResult, workers: dict[str, StackConfig]) -> None:
    queues = run.outputs["kueue"]["clusterQueues"]
    assert queues == [ko.cluster_queue_name(c) for c in workers.values()] + [ko.ALL_WORKERS]
    assert run.outputs["workers"] == {key_of(s): c.cluster_name for s, c in workers.items()}


def test_external_dispatcher(fabricated_outputs: dict[str, dict[str, Any]], hub_cfg: StackConfig) -> None:
    hub = {"workers": list(hub_cfg.hub.workers), "dispatcher": "External"}
    result = mockrun.run_stack(HUB_STACK, config_override={"hub": hub})
    release = result.of_type("kubernetes:helm.sh/v3:Release")[0]
    config = yaml.safe_load(release.inputs["values"]["managerConfig"]["controllerManagerConfigYaml"])
    assert config["multiKueue"]["dispatcherName"] == ko.DISPATCHERS["External"]


def test_bad_worker_reference_is_a_config_error(fabricated_outputs: dict[str, dict[str, Any]]) -> None:
    with pytest.raises(ConfigError, match=r"hub\.workers\[0\]"):
        mockrun.run_stack(HUB_STACK, config_override={"hub": {"workers": ["just-a-stack"]}})
