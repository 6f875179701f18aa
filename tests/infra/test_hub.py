"""The MultiKueue hub stack under mocks, with worker outputs fabricated from the worker stack files."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from infra import mockrun
from infra.config import StackConfig, load_stack_file
from infra.config.network import is_private_cidr
from infra.config.stack import linked_ranges
from infra.hub_link import with_hub_egress
from infra.k8s import addons, dispatcher
from infra.k8s import kueue_objects as ko
from infra.k8s.crd_validate import CRDValidator
from infra.outputs import api_access_output, hub_link_output, node_pool_output, training_service_account_output

REPO = Path(__file__).resolve().parents[2]
HUB_STACK = str(REPO / "stacks" / "Pulumi.hub.yaml")
CRD_DIR = REPO / "tests" / "data" / "kueue-crds"  # pinned Kueue v0.19.2 CRDs (tests/data/README.md)
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


def fabricate(cfg: StackConfig) -> dict[str, Any]:
    """The outputs a worker stack of ``cfg`` exports (what the hub reads through StackReference), with the
    egress of its hub (gpufleet:cluster.hubStack, the example hub) authorised as the worker program does."""
    if cfg.cluster.hub_stack is not None:
        cfg, _ = with_hub_egress(cfg, load_stack_file(HUB_STACK).hub.egress_cidrs)
    out: dict[str, Any] = {
        "cloud": cfg.cloud, "region": cfg.region, "clusterName": cfg.cluster_name,
        "kubeconfig": _exec_kubeconfig(cfg.cluster_name),
        "nodePools": [node_pool_output(p) for p in cfg.node_pools],
        "kueue": {"clusterQueue": ko.cluster_queue_name(cfg),
                  "localQueues": [{"namespace": q["metadata"]["namespace"], "name": q["metadata"]["name"]}
                                  for q in ko.local_queues(cfg)]},
        "checkpointUri": f"s3://{cfg.cluster_name}-ckpt/checkpoints" if cfg.cloud == "aws"
        else f"gs://{cfg.cluster_name}-ckpt/checkpoints",
        "checkpointFilesystem": None,
        "trainingServiceAccount": training_service_account_output(cfg),
        "apiAccess": api_access_output(cfg),
        "hubLink": hub_link_output(cfg),
        "vpcId": "vpc-1234",  # a cloud-specific output the fleet file leaves out
    }
    if cfg.cloud == "gcp":
        out["project"] = cfg.project
        out["gpuNetworks"] = {p.name: [f"vpc{i + 1}" for i in range(p.shape.gpu_vpcs)] for p in cfg.node_pools}
    return out


@pytest.fixture(scope="module")
def fabricated_outputs(workers: dict[str, StackConfig]) -> Iterator[dict[str, dict[str, Any]]]:
    outputs = {stack: fabricate(c) for stack, c in workers.items()}
    saved = dict(mockrun.STACK_REFERENCE_OUTPUTS)
    mockrun.STACK_REFERENCE_OUTPUTS.update(outputs)
    yield outputs
    mockrun.STACK_REFERENCE_OUTPUTS.clear()
    mockrun.STACK_REFERENCE_OUTPUTS.update(saved)


def hub_section(**changes: Any) -> dict[str, Any]:
    """The example hub's ``gpufleet:hub`` mapping as written in its stack file, with ``changes``."""
    doc = yaml.safe_load(Path(HUB_STACK).read_text(encoding="utf-8"))
    section = dict(doc["config"]["gpufleet:hub"])
    section.update(changes)
    return {k: v for k, v in section.items() if v is not None}


@pytest.fixture(scope="module")
def run(fabricated_outputs: dict[str, dict[str, Any]]) -> mockrun.RunResult:
    """The example hub with the AllAtOnce dispatcher (no dispatcher Deployment, no image)."""
    return mockrun.run_stack(HUB_STACK, config_override={"hub": hub_section(dispatcher="AllAtOnce", dispatch=None)})


@pytest.fixture(scope="module")
def example(fabricated_outputs: dict[str, dict[str, Any]]) -> mockrun.RunResult:
    """The example hub as written: the External dispatcher, its image built and pushed by the stack."""
    return mockrun.run_stack(HUB_STACK)


@pytest.fixture(scope="module")
def validator() -> CRDValidator:
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
    total = {ko.RES_CPU: 0, ko.RES_MEMORY: 0, ko.RES_GPU: 0, ko.RES_EFA: 0, ko.RES_HUGEPAGES: 0}
    for pool in cfg.node_pools:
        if pool.capacity_kind == kind:
            alloc = ko.allocatable(pool.shape)
            total[ko.RES_CPU] += alloc.cpu_millis * pool.max_nodes
            total[ko.RES_MEMORY] += alloc.memory_mib * pool.max_nodes
            total[ko.RES_GPU] += pool.shape.gpus * pool.max_nodes
            total[ko.RES_EFA] += (pool.shape.fabric_nics if pool.shape.fabric == "efa" else 0) * pool.max_nodes
            total[ko.RES_HUGEPAGES] += (5120 if pool.shape.fabric == "efa" else 0) * pool.max_nodes
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
    role = run.of_type("kubernetes:rbac.authorization.k8s.io/v1:Role")[0]
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
        # The queue holds no quota of its own: it borrows the worker's capacity from the hub Cohort.
        assert cq["cohortName"] == hub_cfg.kueue.cohort
        assert all(set(q.values()) == {0} for q in flavors.values())
        pool = {f["name"]: quota_of(f) for f in
                kueue_objects(run, "Cohort")[hub_cfg.kueue.cohort]["spec"]["resourceGroups"][0]["flavors"]}
        for kind in hub_cfg.kueue.flavor_order:
            expected = expected_capacity(cfg, kind)
            got = pool[ko.hub_flavor_name(key, kind)]
            assert got == {r: expected[r] for r in got}, (key, kind)
            assert got[ko.RES_GPU] == sum(p.shape.gpus * p.max_nodes for p in cfg.node_pools
                                          if p.capacity_kind == kind)
        has_efa = any(p.shape.fabric == "efa" for p in cfg.node_pools)
        assert (ko.RES_EFA in cq["resourceGroups"][0]["coveredResources"]) is has_efa
        assert (ko.RES_HUGEPAGES in cq["resourceGroups"][0]["coveredResources"]) is has_efa


def test_all_workers_queue_spans_every_worker(run: mockrun.RunResult, workers: dict[str, StackConfig],
                                              hub_cfg: StackConfig) -> None:
    keys = [key_of(s) for s in hub_cfg.hub.workers]
    assert kueue_objects(run, "MultiKueueConfig")[ko.ALL_WORKERS]["spec"]["clusters"] == keys
    check = kueue_objects(run, "AdmissionCheck")[ko.ALL_WORKERS]["spec"]
    assert check["controllerName"] == ko.MULTIKUEUE_CONTROLLER and check["parameters"]["name"] == ko.ALL_WORKERS
    cq = kueue_objects(run, "ClusterQueue")[ko.ALL_WORKERS]["spec"]
    assert cq["admissionChecksStrategy"]["admissionChecks"] == [{"name": ko.ALL_WORKERS}]
    assert cq["cohortName"] == hub_cfg.kueue.cohort
    assert [f["name"] for f in cq["resourceGroups"][0]["flavors"]] == [
        f["name"] for f in kueue_objects(run, "Cohort")[hub_cfg.kueue.cohort]["spec"]["resourceGroups"][0]["flavors"]]
    assert all(set(quota_of(f).values()) == {0} for f in cq["resourceGroups"][0]["flavors"])
    flavors = {f["name"]: quota_of(f) for f in
               kueue_objects(run, "Cohort")[hub_cfg.kueue.cohort]["spec"]["resourceGroups"][0]["flavors"]}
    assert len(flavors) == len(workers) * 2
    total_gpus = sum(q[ko.RES_GPU] for q in flavors.values())
    assert total_gpus == sum(p.shape.gpus * p.max_nodes for c in workers.values() for p in c.node_pools)
    # Flavors follow the hub's flavor order: every first-kind flavor before any second-kind one.
    first = hub_cfg.kueue.flavor_order[0]
    names = list(flavors)
    assert all(n.endswith(first) for n in names[:len(workers)])
    for team in hub_cfg.kueue.teams:
        assert kueue_objects(run, "LocalQueue")[f"{team}/{ko.ALL_WORKERS}"]["spec"]["clusterQueue"] == ko.ALL_WORKERS


def test_hub_counts_each_workers_capacity_once(run: mockrun.RunResult, workers: dict[str, StackConfig],
                                                hub_cfg: StackConfig) -> None:
    """All the quota the hub can admit on a worker's flavor (the nominal quota of every ClusterQueue and Cohort
    that names it, all in one cohort) is that worker's capacity, once: its own queue and all-workers share it."""
    queues = kueue_objects(run, "ClusterQueue")
    holders = [*(q["spec"] for q in queues.values()), *(c["spec"] for c in kueue_objects(run, "Cohort").values())]
    assert {q["spec"].get("cohortName") for q in queues.values()} == {hub_cfg.kueue.cohort}
    for stack, cfg in workers.items():
        for kind in hub_cfg.kueue.flavor_order:
            name = ko.hub_flavor_name(key_of(stack), kind)
            gpus = sum(quota_of(f).get(ko.RES_GPU, 0) for h in holders for g in h["resourceGroups"]
                       for f in g["flavors"] if f["name"] == name)
            assert gpus == expected_capacity(cfg, kind)[ko.RES_GPU], (stack, kind)


def releases_of(run: mockrun.RunResult) -> dict[str, mockrun.Registered]:
    return {r.inputs["chart"]: r for r in run.of_type("kubernetes:helm.sh/v3:Release")}


def test_hub_installs_kueue_with_the_dispatcher(run: mockrun.RunResult, hub_cfg: StackConfig) -> None:
    releases = releases_of(run)
    assert set(releases) == {addons.KUEUE_CHART, addons.JOBSET_CHART}
    kueue = releases[addons.KUEUE_CHART]
    assert kueue.inputs["version"] == hub_cfg.kueue.version
    config = yaml.safe_load(kueue.inputs["values"]["managerConfig"]["controllerManagerConfigYaml"])
    assert config["multiKueue"]["dispatcherName"] == ko.DISPATCHERS["AllAtOnce"]
    assert "jobset.x-k8s.io/jobset" in config["integrations"]["frameworks"]
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


def test_bad_worker_reference_is_a_config_error(fabricated_outputs: dict[str, dict[str, Any]],
                                                hub_cfg: StackConfig) -> None:
    hub = {"workers": ["just-a-stack"], "egressCidrs": list(hub_cfg.hub.egress_cidrs)}
    with pytest.raises(pulumi.RunError, match=r"^invalid stack config: gpufleet:hub\.workers\[0\]: "):
        mockrun.run_stack(HUB_STACK, config_override={"hub": hub})


# ------------------------------------------------------------------------------------------- JobSet


def test_jobset_is_installed_before_kueue_and_everything_that_creates_a_jobset(run: mockrun.RunResult) -> None:
    releases = releases_of(run)
    jobset = releases[addons.JOBSET_CHART]
    assert jobset.inputs["version"] == addons.JOBSET_VERSION == "0.12.0"
    assert jobset.inputs["namespace"] == "jobset-system" and jobset.inputs["createNamespace"] is True
    assert jobset.inputs["values"]["image"] == {"repository": "registry.k8s.io/jobset/jobset", "tag": "v0.12.0",
                                                "pullPolicy": "IfNotPresent"}
    assert not jobset.provider or "-provider::" not in jobset.provider  # on the hub, not on a worker
    assert run.depends_on(releases[addons.KUEUE_CHART], jobset)
    # MultiKueue creates JobSets (suspended on the hub, running on the workers): its objects come after JobSet.
    users = [r for r in run.resources if r.type.startswith(KUEUE)]
    assert users and all(run.depends_on(r, jobset) for r in users)
    assert not run.depends_on(jobset, releases[addons.KUEUE_CHART])


# ------------------------------------------------------------------------------------------- worker RBAC


def _verbs(rule_lists: list[list[dict[str, Any]]]) -> dict[tuple[str, str], set[str]]:
    verbs: dict[tuple[str, str], set[str]] = {}
    for rules in rule_lists:
        for rule in rules:
            for group in rule["apiGroups"]:
                for res in rule["resources"]:
                    verbs.setdefault((group, res), set()).update(rule["verbs"])
    return verbs


HUB_ROLE = "gpufleet-multikueue-hub"
FRAMEWORK_KINDS = {"batch/job": ("batch", "jobs"), "jobset.x-k8s.io/jobset": ("jobset.x-k8s.io", "jobsets"),
                   "kubeflow.org/pytorchjob": ("kubeflow.org", "pytorchjobs"),
                   "kubeflow.org/mpijob": ("kubeflow.org", "mpijobs"),
                   "trainer.kubeflow.org/trainjob": ("trainer.kubeflow.org", "trainjobs"),
                   "ray.io/rayjob": ("ray.io", "rayjobs"), "ray.io/raycluster": ("ray.io", "rayclusters"),
                   "leaderworkerset.x-k8s.io/leaderworkerset": ("leaderworkerset.x-k8s.io", "leaderworkersets"),
                   "statefulset": ("apps", "statefulsets"), "pod": ("", "pods"), "deployment": ("", "pods")}


def test_worker_rbac_covers_what_multikueue_does_there(run: mockrun.RunResult, workers: dict[str, StackConfig],
                                                      hub_cfg: StackConfig) -> None:
    config = yaml.safe_load(ko.manager_config(hub_cfg.hub.dispatcher, wait_for_pods_ready=False))
    for stack in workers:
        key = key_of(stack)
        mine = [r for r in run.resources if f"-{key}-provider" in str(r.provider)
                and isinstance(r.inputs.get("metadata"), dict) and r.inputs["metadata"].get("name") == HUB_ROLE]
        (cluster_role,) = [r for r in mine if r.type == RBAC + "ClusterRole"]
        roles = {r.inputs["metadata"]["namespace"]: r for r in mine if r.type == RBAC + "Role"}
        bindings = {r.inputs["metadata"]["namespace"]: r for r in mine if r.type == RBAC + "RoleBinding"}
        # One Role per hub team, in that team's namespace on the worker, bound to the hub's account.
        assert set(roles) == set(bindings) == set(hub_cfg.kueue.teams)
        for team, binding in bindings.items():
            assert binding.inputs["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                                 "name": HUB_ROLE}, team
            assert binding.inputs["subjects"] == [{"kind": "ServiceAccount", "name": "multikueue-hub",
                                                   "namespace": "kueue-system"}]
        for team in hub_cfg.kueue.teams:
            verbs = _verbs([cluster_role.inputs["rules"], roles[team].inputs["rules"]])
            # MultiKueue drops the finalizers of remote Workloads (update/patch) and writes their status.
            assert verbs[("kueue.x-k8s.io", "workloads")] == {"create", "delete", "get", "list", "watch", "update",
                                                              "patch"}
            assert verbs[("kueue.x-k8s.io", "workloads/status")] == {"get", "patch", "update"}
            # Every job kind the hub's Kueue integrates can be created in the team namespace and its status read.
            for framework in config["integrations"]["frameworks"]:
                group, res = FRAMEWORK_KINDS[framework]
                assert {"create", "delete", "get", "list", "watch"} <= verbs[(group, res)], framework
                assert "get" in verbs[(group, f"{res}/status")], framework


def test_no_cluster_role_lets_the_hub_write_on_a_worker(run: mockrun.RunResult) -> None:
    """A stolen hub token must not be root on the GPU nodes: cluster-wide it only reads (list, watch; get on the
    queues); creating pods or jobs is bound to the team namespaces."""
    worker_roles = [r for r in run.of_type(RBAC + "ClusterRole") if not on_hub(r)]
    assert worker_roles
    for role in worker_roles:
        for rule in role.inputs["rules"]:
            assert set(rule["verbs"]) <= {"get", "list", "watch"}, (role.name, rule)
            if "get" in rule["verbs"]:
                assert rule["resources"] == ["clusterqueues", "localqueues"], (role.name, rule)
        assert ("", "pods") not in {k for k, v in _verbs([role.inputs["rules"]]).items() if "create" in v}
    for binding in run.of_type(RBAC + "ClusterRoleBinding"):
        if not on_hub(binding):
            assert binding.inputs["roleRef"]["kind"] == "ClusterRole"
            assert binding.inputs["roleRef"]["name"] in (HUB_ROLE, "gpufleet-dispatch-reader")


def test_pods_integration_is_granted_in_the_team_namespaces_only() -> None:
    from infra.k8s.hub import multikueue_worker_rules

    cluster, namespaced = multikueue_worker_rules(["pod", "jobset.x-k8s.io/jobset"])
    assert _verbs([cluster])[("", "pods")] == {"list", "watch"}
    assert _verbs([namespaced])[("", "pods")] == {"create", "delete", "get"}
    # Deployments are dispatched as their Pods (the pod adapter): the same namespaced grant, nothing wider.
    cluster, namespaced = multikueue_worker_rules(["deployment"])
    assert _verbs([namespaced])[("", "pods")] == {"create", "delete", "get"}
    with pytest.raises(ValueError, match="example.com/widget"):
        multikueue_worker_rules(["example.com/widget"])


def _upstream_script() -> str:
    """Kueue v0.19.2's create-multikueue-kubeconfig.sh, pinned in tests/data (source in tests/data/README.md)."""
    return (REPO / "tests" / "data" / "kueue-examples" / "create-multikueue-kubeconfig.sh").read_text()


def test_worker_rbac_is_upstreams_rule_for_rule_plus_our_extra_kinds() -> None:
    from infra.k8s.hub import EXTRA_WORKER_RULES, hub_frameworks, multikueue_rbac_rules, multikueue_worker_rules

    script = _upstream_script()
    manifest = script.split("kubectl apply -f - <<EOF\n", 1)[1].split("\nEOF", 1)[0]
    role = next(d for d in yaml.safe_load_all(manifest) if d and d["kind"] == "ClusterRole")
    ours = multikueue_rbac_rules()
    assert ours[:len(role["rules"])] == role["rules"]
    assert len(ours) == len(role["rules"]) + len(EXTRA_WORKER_RULES)
    upstream_kinds = {(g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert all((rule["apiGroups"][0], rule["resources"][0]) not in upstream_kinds for rule in ours[len(role["rules"]):])

    # Split and narrowed, the hub's rules are upstream's verb for verb on every kind they keep, and keep
    # exactly Workloads, the queues and the kinds the hub integrates.
    reference = _verbs([ours])
    reference[("batch", "jobs")] |= {"patch"}  # UPSTREAM_DRIFT_RULES: test_elastic_jobs_can_be_patched_on_workers
    for dispatcher_name in ("AllAtOnce", "External"):
        cluster, namespaced = multikueue_worker_rules(hub_frameworks(dispatcher_name))
        granted = _verbs([cluster, namespaced])
        assert all(granted[k] == reference[k] for k in granted), dispatcher_name
        kinds = {FRAMEWORK_KINDS[f] for f in hub_frameworks(dispatcher_name)}
        expected = {("kueue.x-k8s.io", r) for r in ("workloads", "workloads/status", "clusterqueues", "localqueues")}
        expected |= {(g, r) for g, r in kinds} | {(g, f"{r}/status") for g, r in kinds}
        assert set(granted) == expected


def test_elastic_jobs_can_be_patched_on_workers(run: mockrun.RunResult, hub_cfg: StackConfig) -> None:
    """Issue 28: Kueue v0.19.2's batch/job MultiKueue adapter patches the remote Job of an elastic job
    (syncElasticJob); the hub's identity may do so in the team namespaces, and nowhere cluster-wide."""
    for team_role in (r for r in run.of_type(RBAC + "Role") if not on_hub(r)
                      and r.inputs["metadata"]["name"] == HUB_ROLE):
        assert "patch" in _verbs([team_role.inputs["rules"]])[("batch", "jobs")]
    for role in (r for r in run.of_type(RBAC + "ClusterRole") if not on_hub(r)):
        assert "patch" not in _verbs([role.inputs["rules"]]).get(("batch", "jobs"), set())


# ------------------------------------------------------------------------------------------- reachability


def test_hub_exports_what_it_needs_next_to_what_each_worker_authorises(
        run: mockrun.RunResult, hub_cfg: StackConfig, workers: dict[str, StackConfig],
        fabricated_outputs: dict[str, dict[str, Any]]) -> None:
    reach = run.outputs["reachability"]
    assert set(reach) == {key_of(s) for s in workers}
    for stack in workers:
        entry = reach[key_of(stack)]
        assert entry["egressCidrs"] == list(hub_cfg.hub.egress_cidrs)
        assert entry["apiAccess"] == fabricated_outputs[stack]["apiAccess"]
        assert entry["hubLink"] == fabricated_outputs[stack]["hubLink"]
    assert run.outputs["egressCidrs"] == list(hub_cfg.hub.egress_cidrs)


def test_hub_without_egress_cidrs_is_a_config_error(fabricated_outputs: dict[str, dict[str, Any]],
                                                    hub_cfg: StackConfig) -> None:
    with pytest.raises(pulumi.RunError, match=r"^invalid stack config: gpufleet:hub\.egressCidrs: is required"):
        mockrun.run_stack(HUB_STACK, config_override={"hub": {"workers": list(hub_cfg.hub.workers)}})


# ------------------------------------------------------------------------------------------- the dispatcher

IMAGE = "registry.example.com/gpufleet/placement:1.2.3"
APPS, CORE, RBAC = "kubernetes:apps/v1:", "kubernetes:core/v1:", "kubernetes:rbac.authorization.k8s.io/v1:"


@pytest.fixture(scope="module")
def external(fabricated_outputs: dict[str, dict[str, Any]], hub_cfg: StackConfig) -> mockrun.RunResult:
    hub = {"workers": list(hub_cfg.hub.workers), "dispatcher": "External",
           "egressCidrs": list(hub_cfg.hub.egress_cidrs),
           "dispatch": {"image": IMAGE, "admissionDeadlineSeconds": 240, "waitUsdPerGpuHour": 1.5,
                        "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}}}}
    return mockrun.run_stack(HUB_STACK, config_override={"hub": hub})


def on_hub(r: mockrun.Registered) -> bool:
    return not r.provider or "-provider::" not in r.provider


def named(run: mockrun.RunResult, kind: str, name: str, *, hub: bool = True) -> list[mockrun.Registered]:
    return [r for r in run.of_type(kind) if r.inputs["metadata"]["name"] == name and on_hub(r) is hub]


def test_external_dispatcher(external: mockrun.RunResult) -> None:
    kueue = releases_of(external)[addons.KUEUE_CHART]
    config = yaml.safe_load(kueue.inputs["values"]["managerConfig"]["controllerManagerConfigYaml"])
    assert config["multiKueue"]["dispatcherName"] == ko.DISPATCHERS["External"] == "gpufleet.io/placement"


def test_dispatcher_deployment_follows_the_contract(external: mockrun.RunResult) -> None:
    (deploy,) = named(external, APPS + "Deployment", "gpufleet-dispatch")
    assert deploy.inputs["metadata"]["namespace"] == "kueue-system"
    spec = deploy.inputs["spec"]
    assert spec["replicas"] == 2
    pod = spec["template"]
    assert spec["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert pod["metadata"]["annotations"] == {"prometheus.io/scrape": "true", "prometheus.io/port": "9090"}
    assert pod["spec"]["serviceAccountName"] == "gpufleet-dispatch"
    (container,) = pod["spec"]["containers"]
    assert container["name"] == "dispatch" and container["image"] == IMAGE
    assert container["args"] == ["dispatch", "--in-cluster", "--namespace", "kueue-system", "--lease",
                                 "gpufleet-dispatch", "--fleet", "/etc/gpufleet/fleet.json", "--metrics-port", "9090",
                                 "--admission-deadline-seconds", "240", "--wait-usd-per-gpu-hour", "1.5"]
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert env == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": 9090}, probe
    assert {"name": "metrics", "containerPort": 9090, "protocol": "TCP"} in container["ports"]
    assert container["resources"] == {"requests": {"cpu": "250m", "memory": "256Mi"}}
    (mount,) = container["volumeMounts"]
    assert (mount["mountPath"], mount["readOnly"]) == ("/etc/gpufleet", True)
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"]["name"] == "gpufleet-fleet"
    assert {"key": "fleet.json", "path": "fleet.json"} in volume["configMap"]["items"]

    (service,) = named(external, CORE + "Service", "gpufleet-dispatch-metrics")
    assert service.inputs["metadata"]["namespace"] == "kueue-system"
    assert service.inputs["spec"]["type"] == "ClusterIP"
    assert service.inputs["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert [(p["name"], p["port"]) for p in service.inputs["spec"]["ports"]] == [("metrics", 9090)]


def test_live_prices_add_the_flag_and_the_cloud_identity_goes_on_the_service_account(
        fabricated_outputs: dict[str, dict[str, Any]], hub_cfg: StackConfig, external: mockrun.RunResult) -> None:
    role = "arn:aws:iam::123456789012:role/gpufleet-dispatch"
    hub = {"workers": list(hub_cfg.hub.workers), "dispatcher": "External",
           "egressCidrs": list(hub_cfg.hub.egress_cidrs),
           "dispatch": {"image": IMAGE, "live": True,
                        "serviceAccountAnnotations": {"eks.amazonaws.com/role-arn": role}}}
    live = mockrun.run_stack(HUB_STACK, config_override={"hub": hub})
    (deploy,) = named(live, APPS + "Deployment", "gpufleet-dispatch")
    (container,) = deploy.inputs["spec"]["template"]["spec"]["containers"]
    assert container["args"][-1] == "--live" and container["args"].count("--live") == 1
    (account,) = named(live, CORE + "ServiceAccount", "gpufleet-dispatch")
    assert account.inputs["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": role}
    assert account.inputs["metadata"]["namespace"] == "kueue-system"
    # Off by default: catalog prices, and no annotation on the account.
    (plain,) = named(external, APPS + "Deployment", "gpufleet-dispatch")
    assert "--live" not in plain.inputs["spec"]["template"]["spec"]["containers"][0]["args"]
    (plain_account,) = named(external, CORE + "ServiceAccount", "gpufleet-dispatch")
    assert not plain_account.inputs["metadata"].get("annotations")


def test_dispatcher_waits_for_kueue_jobset_and_the_worker_secrets(external: mockrun.RunResult) -> None:
    (deploy,) = named(external, APPS + "Deployment", "gpufleet-dispatch")
    releases = releases_of(external)
    assert external.depends_on(deploy, releases[addons.KUEUE_CHART])
    assert external.depends_on(deploy, releases[addons.JOBSET_CHART])
    (fleet,) = named(external, CORE + "ConfigMap", "gpufleet-fleet")
    assert external.depends_on(deploy, fleet)
    for secret in external.of_type(CORE + "Secret"):
        if on_hub(secret) and secret.inputs["metadata"]["name"].startswith("gpufleet-dispatch-"):
            assert external.depends_on(deploy, secret)


def rules_of(run: mockrun.RunResult, kind: str, name: str, *, hub: bool = True) -> list[list[dict[str, Any]]]:
    return [r.inputs["rules"] for r in named(run, RBAC + kind, name, hub=hub)]


def _rule(group: str, resources: list[str], verbs: list[str], names: list[str] | None = None) -> dict[str, Any]:
    rule: dict[str, Any] = {"apiGroups": [group], "resources": resources, "verbs": verbs}
    if names:
        rule["resourceNames"] = names
    return rule


def test_dispatcher_hub_rbac_is_least_privilege_with_the_lease(external: mockrun.RunResult,
                                                               workers: dict[str, StackConfig]) -> None:
    # What the controller calls (tests/placement/dispatch checks these rules against its requests).
    assert rules_of(external, "ClusterRole", "gpufleet-dispatch") == [[
        _rule("kueue.x-k8s.io", ["workloads", "clusterqueues", "admissionchecks", "multikueueclusters",
                                 "multikueueconfigs"], ["list", "watch"]),
        _rule("kueue.x-k8s.io", ["workloads/status"], ["patch"]),
        _rule("batch", ["jobs"], ["list", "watch"]),
        _rule("jobset.x-k8s.io", ["jobsets"], ["list", "watch"]),
        _rule("", ["events"], ["create", "list"]),
    ]]
    (role,) = named(external, RBAC + "Role", "gpufleet-dispatch")
    assert role.inputs["metadata"]["namespace"] == "kueue-system"
    keys = sorted(key_of(s) for s in workers)
    # Each worker's two kubeconfig Secrets by name: never Kueue's webhook certificate or another Secret.
    assert role.inputs["rules"] == [
        _rule("", ["secrets"], ["get"], [f"gpufleet-dispatch-{k}" for k in keys]),
        _rule("coordination.k8s.io", ["leases"], ["get", "update"], ["gpufleet-dispatch"]),
        _rule("coordination.k8s.io", ["leases"], ["create"]),
    ]
    hub_secrets = {r.inputs["metadata"]["name"] for r in external.of_type(CORE + "Secret") if on_hub(r)}
    # Exactly the dispatcher's own read-only kubeconfigs the stack makes; never MultiKueue's, whose tokens write.
    own = {n for n in hub_secrets if n.startswith("gpufleet-dispatch-")}
    assert len(own) == len(keys) and set(role.inputs["rules"][0]["resourceNames"]) == own
    # Never a Secret rule without names, which would grant every Secret in kueue-system.
    assert not [r for r in dispatcher.hub_namespace_rules([]) if "secrets" in r["resources"]]
    subject = [{"kind": "ServiceAccount", "name": "gpufleet-dispatch", "namespace": "kueue-system"}]
    (cluster_binding,) = named(external, RBAC + "ClusterRoleBinding", "gpufleet-dispatch")
    assert cluster_binding.inputs["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                                 "name": "gpufleet-dispatch"}
    assert cluster_binding.inputs["subjects"] == subject
    (binding,) = named(external, RBAC + "RoleBinding", "gpufleet-dispatch")
    assert binding.inputs["metadata"]["namespace"] == "kueue-system"
    assert binding.inputs["roleRef"]["kind"] == "Role" and binding.inputs["subjects"] == subject
    (account,) = named(external, CORE + "ServiceAccount", "gpufleet-dispatch")
    assert account.inputs["metadata"]["namespace"] == "kueue-system"


def test_fleet_file_is_every_workers_outputs_without_secrets(external: mockrun.RunResult,
                                                             fabricated_outputs: dict[str, dict[str, Any]]) -> None:
    (fleet,) = named(external, CORE + "ConfigMap", "gpufleet-fleet")
    assert fleet.inputs["metadata"]["namespace"] == "kueue-system"
    text = fleet.inputs["data"]["fleet.json"]
    assert "kubeconfig" not in text and "get-token" not in text
    doc = json.loads(text)
    assert set(doc) == {key_of(s) for s in fabricated_outputs}
    for stack, outputs in fabricated_outputs.items():
        entry = doc[key_of(stack)]
        expected = {k: outputs[k] for k in dispatcher.FLEET_OUTPUTS}
        if "gpuNetworks" in outputs:
            expected["gpuNetworks"] = outputs["gpuNetworks"]
        assert entry == expected, stack
    assert any("gpuNetworks" in e for e in doc.values()) and any("gpuNetworks" not in e for e in doc.values())


def test_each_worker_gets_a_read_only_dispatcher_identity(external: mockrun.RunResult,
                                                          workers: dict[str, StackConfig]) -> None:
    expected = [_rule("kueue.x-k8s.io", ["clusterqueues", "localqueues", "workloads", "resourceflavors"],
                      ["list", "watch"]),
                _rule("", ["nodes"], ["list", "watch"])]  # read-only Nodes: what it observes (issue 26)
    secrets = {r.inputs["metadata"]["name"]: r for r in external.of_type(CORE + "Secret") if on_hub(r)}
    for stack, cfg in workers.items():
        key = key_of(stack)

        def on_worker(kind: str, name: str, key: str = key) -> mockrun.Registered:
            (found,) = [r for r in named(external, kind, name, hub=False) if f"-{key}-provider" in str(r.provider)]
            return found

        account = on_worker(CORE + "ServiceAccount", "gpufleet-dispatch")
        assert account.inputs["metadata"]["namespace"] == "kueue-system"
        assert on_worker(RBAC + "ClusterRole", "gpufleet-dispatch-reader").inputs["rules"] == expected
        binding = on_worker(RBAC + "ClusterRoleBinding", "gpufleet-dispatch-reader")
        assert binding.inputs["roleRef"]["name"] == "gpufleet-dispatch-reader"
        assert binding.inputs["subjects"] == [{"kind": "ServiceAccount", "name": "gpufleet-dispatch",
                                               "namespace": "kueue-system"}]
        token = on_worker(CORE + "Secret", "gpufleet-dispatch-token")
        assert token.inputs["type"] == "kubernetes.io/service-account-token"
        assert token.inputs["metadata"]["annotations"] == {"kubernetes.io/service-account.name": "gpufleet-dispatch"}

        secret = secrets[f"gpufleet-dispatch-{key}"]
        assert secret.inputs["metadata"]["namespace"] == "kueue-system"
        data = secret.inputs["stringData"]
        assert data.get(SECRET_SIG) == SECRET_MARK, "the kubeconfig must be registered as a secret"
        kubeconfig = yaml.safe_load(data["value"]["kubeconfig"])
        assert kubeconfig["clusters"][0]["cluster"]["server"] == f"https://{cfg.cluster_name}.example"
        assert kubeconfig["users"] == [{"name": f"{key}-gpufleet-dispatch", "user": {"token": MOCK_TOKEN}}]


def test_no_dispatcher_unless_external(run: mockrun.RunResult) -> None:
    assert run.outputs["dispatcher"] != "External"
    assert not run.of_type(APPS + "Deployment")
    for r in run.resources:
        raw_meta = r.inputs.get("metadata")
        meta = raw_meta if isinstance(raw_meta, dict) else {}
        assert not str(meta.get("name", "")).startswith(("gpufleet-dispatch", "gpufleet-fleet")), r.name
    assert "dispatch" not in run.outputs


IMAGE_TYPE = "docker-build:index:Image"


def fake_digest(resource_name: str) -> str:
    """The digest the mocks return for a pushed image (infra/mockrun.py)."""
    return "sha256:" + hashlib.sha256(resource_name.encode()).hexdigest()


def test_example_hub_runs_the_cost_aware_dispatcher_from_the_image_it_builds(example: mockrun.RunResult,
                                                                            hub_cfg: StackConfig) -> None:
    assert hub_cfg.hub.dispatcher == "External" and hub_cfg.hub.dispatch.image is None
    (repo,) = example.of_type("aws:ecr/repository:Repository")
    assert repo.inputs["name"] == "gpufleet-hub/placement"
    assert repo.inputs["imageScanningConfiguration"] == {"scanOnPush": True}
    url = f"123456789012.dkr.ecr.us-east-1.amazonaws.com/{repo.inputs['name']}"
    (image,) = example.of_type(IMAGE_TYPE)
    assert image.inputs["push"] is True and image.inputs["buildOnPreview"] is False
    assert image.inputs["context"] == {"location": str(REPO)}
    assert image.inputs["dockerfile"] == {"location": str(REPO / "placement" / "dispatch" / "Dockerfile")}
    assert image.inputs["platforms"] == ["linux/amd64"]
    assert image.inputs["tags"] == [f"{url}:dispatch"]
    # The registry credentials (an ECR token) are registered as a secret, never in plain state.
    assert image.inputs["registries"].get(SECRET_SIG) == SECRET_MARK
    (registry,) = image.inputs["registries"]["value"]
    assert registry["address"] == url and registry["username"] == "AWS"
    # The Deployment runs exactly the pushed image: by digest, never by tag.
    (deployment,) = named(example, APPS + "Deployment", "gpufleet-dispatch")
    (container,) = deployment.inputs["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"{url}@{fake_digest(image.name)}"
    assert example.outputs["dispatch"]["image"] == container["image"]
    assert example.outputs["dispatch"]["repository"] == url


def test_gcp_hub_pushes_to_artifact_registry(fabricated_outputs: dict[str, dict[str, Any]]) -> None:
    result = mockrun.run_stack(HUB_STACK, config_override={
        "cloud": "gcp", "region": "us-central1", "project": "gpufleet-dev",
        "hub": hub_section(dispatch={"platform": "linux/arm64"})})
    (repo,) = result.of_type("gcp:artifactregistry/repository:Repository")
    assert repo.inputs["format"] == "DOCKER" and repo.inputs["location"] == "us-central1"
    assert repo.inputs["repositoryId"] == "gpufleet-hub-images"
    (image,) = result.of_type(IMAGE_TYPE)
    assert image.inputs["platforms"] == ["linux/arm64"]
    assert image.inputs["registries"].get(SECRET_SIG) == SECRET_MARK
    (registry,) = image.inputs["registries"]["value"]
    assert registry["address"] == "us-central1-docker.pkg.dev" and registry["username"] == "oauth2accesstoken"
    (deployment,) = named(result, APPS + "Deployment", "gpufleet-dispatch")
    assert deployment.inputs["spec"]["template"]["spec"]["containers"][0]["image"] == (
        f"us-central1-docker.pkg.dev/p/gpufleet-hub-images/placement@{fake_digest(image.name)}")
    assert not result.of_type("aws:ecr/repository:Repository")


def test_a_given_image_is_used_as_is_and_nothing_is_built(external: mockrun.RunResult) -> None:
    assert not external.of_type(IMAGE_TYPE) and not external.of_type("aws:ecr/repository:Repository")
    assert external.outputs["dispatch"]["image"] == IMAGE and external.outputs["dispatch"]["repository"] is None


def test_an_image_without_a_digest_is_never_deployed() -> None:
    from infra.k8s.dispatch_image import pinned

    assert pinned("r.example/p", "sha256:" + "a" * 64) == "r.example/p@sha256:" + "a" * 64
    for digest in ("", "latest", "sha256:abc", "md5:" + "a" * 64):
        with pytest.raises(ValueError, match="sha256 digest"):
            pinned("r.example/p", digest)


def test_every_example_worker_authorises_the_example_hub(hub_cfg: StackConfig,
                                                         workers: dict[str, StackConfig]) -> None:
    """By default the hub egresses from its NAT addresses, and each example worker reads them from the hub stack
    into its public endpoint's allow-list: a route (the internet) and an allow-list entry, nothing else open."""
    from infra.policy.checks import unreachable_reason

    assert hub_cfg.hub.egress_cidrs and not any(is_private_cidr(c) for c in hub_cfg.hub.egress_cidrs)
    for stack, cfg in workers.items():
        assert cfg.cluster.hub_stack == "org/gpufleet/hub" and cfg.cluster.public_access, stack
        assert not cfg.cluster.hub_cidrs and not cfg.cluster.public_access_cidrs, stack  # only the hub's egress
        linked, warnings = with_hub_egress(cfg, hub_cfg.hub.egress_cidrs)
        assert warnings == [] and linked.cluster.hub_cidrs == hub_cfg.hub.egress_cidrs
        for egress in hub_cfg.hub.egress_cidrs:
            assert unreachable_reason(egress, api_access_output(linked), key_of(stack),
                                      hub_link_output(linked)) is None, (stack, egress)


def test_example_hub_and_workers_have_disjoint_ranges(hub_cfg: StackConfig, workers: dict[str, StackConfig]) -> None:
    from infra.config.stack import range_overlaps

    assert range_overlaps({"hub": hub_cfg, **workers}) == []


def test_reachability_carries_each_workers_route_and_ranges(run: mockrun.RunResult,
                                                            workers: dict[str, StackConfig]) -> None:
    for stack, cfg in workers.items():
        entry = run.outputs["reachability"][key_of(stack)]
        assert entry["hubLink"]["privateLink"] == "none"
        assert [r["cidr"] for r in entry["hubLink"]["addressRanges"]] == [c for _, c in linked_ranges(cfg)]
        assert entry["hubRanges"] == []  # the example hub egresses from public NAT addresses only


# ------------------------------------------------------------------------------------------- opt-in HA VPN
# The VPN itself (one gateway per hub VPC, tunnels, algorithms, the documented example and the reachability
# check) is tested in test_hub_vpn.py.

VPN_WORKERS = ["org/gpufleet/gcp-usc1-a3mega", "org/gpufleet/gcp-euw4-a3high"]


def test_vpn_config_is_checked() -> None:
    from infra.config import ConfigError, parse

    hub = yaml.safe_load(Path(HUB_STACK).read_text())["config"]
    raw = {k.split(":", 1)[1]: v for k, v in hub.items()}
    good = {"vpcId": "vpc-0123456789abcdef0", "routeTableIds": ["rtb-0123456789abcdef0"], "workers": VPN_WORKERS[:1]}
    assert parse({**raw, "hub": {**raw["hub"], "vpn": good}}, stack="hub").hub.vpn is not None
    for bad, key in (({**good, "vpcId": "vpc-x"}, "vpcId"), ({**good, "routeTableIds": []}, "routeTableIds"),
                     ({**good, "workers": ["org/gpufleet/nope"]}, "workers[0]"),
                     ({**good, "amazonAsn": 65534}, "googleAsn"), ({**good, "googleAsn": 7224}, "googleAsn")):
        with pytest.raises(ConfigError) as err:
            parse({**raw, "hub": {**raw["hub"], "vpn": bad}}, stack="hub")
        assert str(err.value).startswith(f"gpufleet:hub.vpn.{key}: "), str(err.value)
    with pytest.raises(ConfigError, match=r"^gpufleet:hub\.vpn: .*hubPrivateLink: external"):
        parse({**raw, "cloud": "gcp", "project": "gpufleet-dev", "region": "us-central1",
               "hub": {**raw["hub"], "vpn": good}}, stack="hub")


def test_the_hubs_provider_for_each_worker_keeps_its_identity_when_the_server_moves(run: mockrun.RunResult) -> None:
    """A worker that turns its public endpoint on changes its kubeconfig's server; the hub's provider for it is
    keyed by the worker's stack (clusterIdentifier), so it and the RBAC it made there are not replaced."""
    providers = [r for r in run.of_type("pulumi:providers:kubernetes") if r.name.endswith("-provider")]
    assert providers
    for p in providers:
        assert str(p.inputs.get("clusterIdentifier", "")).startswith("hub-worker:"), p.name
        assert p.inputs.get("upsertExistingObjects") in (True, "true"), p.name
