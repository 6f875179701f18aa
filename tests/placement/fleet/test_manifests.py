"""How a submitted job runs to its end (placement.fleet.manifests): the restart budget sized from the plan, the
failure policies that restart the gang on node disruptions and fail fast on application failures, the trainer's
environment and grace period. The Kubernetes Job controller's and JobSet controller's rule matching is
re-implemented here from their sources (kubernetes pkg/controller/job/pod_failure_policy.go, jobset v0.12.0
pkg/controllers/failure_policy.go) to run the rendered policies against failures."""

from __future__ import annotations

import datetime as dt
import math
import random
import re
from typing import Any

import pytest
from factories import job, offer

from placement.fleet import manifests as m
from placement.fleet.choose import Existing
from placement.fleet.stacks import ClusterStack, Pool, Queue, TrainingAccount
from placement.plan.job import Candidate, candidates

QUEUES = (Queue("team-a", "q"),)


def stack(cloud: str, *pools: Pool, uri: str | None = "s3://b/ckpt") -> ClusterStack:
    return ClusterStack(stack=f"s-{cloud}", cloud=cloud, region="r", cluster_name=f"c-{cloud}", pools=pools,
                        kubeconfig=None, checkpoint_uri=uri, filesystem=None,
                        service_account=TrainingAccount("trainer", ("team-a",)), local_queues=QUEUES)


def spot_candidate(j: Any, itype: str = "p5.48xlarge", region: str = "us-east-1") -> Candidate:
    (c,) = [c for c in candidates(j, [offer(itype, region)]) if c.capacity == "spot"]
    return c


def render_one(j: Any, c: Candidate, cloud: str = "aws", now: dt.datetime | None = None) -> dict[str, Any]:
    pool = Pool("p", c.offer.instance_type, "spot", c.offer.zone, 64)
    cl = stack(cloud, pool)
    objs, _ = m.render(m.Target(job=j, candidate=c, existing=Existing(cl, pool, "team-a", "q"), now=now))
    return objs[-1]


def poisson_tail(lam: float, n: int) -> float:
    """P(N > n) for N ~ Poisson(lam), summed directly."""
    return 1.0 - sum(math.exp(-lam) * lam**k / math.factorial(k) for k in range(n + 1))


# ----------------------------------------------------------------------------- the budget


def test_a_72h_spot_gang_gets_restarts_for_the_interruptions_its_plan_expects():
    # The issue's job: 32 x H100 for 72 h on spot at 0.05 interruptions per node-hour: 4 p5 nodes.
    j = job(name="big", gpus=32, hours=72, capacity="spot", spot={"interruptions_per_hour": 0.05})
    c = spot_candidate(j)
    assert c.nodes == 4
    expected = m.planned_interruptions(c)
    assert 15.0 < expected < 17.0  # 0.2/h x 72 h x (1 + 10 % overhead)
    js = render_one(j, c)
    budget = js["spec"]["failurePolicy"]["maxRestarts"]
    # Today's 3 restarts run out ~15 h in; the budget covers the expected count with 99 % probability.
    assert budget == m.restart_budget(expected) and budget > expected
    assert poisson_tail(expected, budget) <= 1 - m.RESTART_COVERAGE < poisson_tail(expected, budget - 1)
    env = {e["name"]: e.get("value") for e in js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "containers"][0]["env"]}
    assert env["GPUFLEET_MAX_RESTARTS"] == str(budget)


def test_the_budget_holds_against_a_simulated_run():
    rng = random.Random(20)
    lam = 15.84
    budget = m.restart_budget(lam)
    runs = 20_000
    # Interruptions as a Poisson process over the run: exponential gaps at rate lam per run.
    failed = 0
    for _ in range(runs):
        t, n = rng.expovariate(lam), 0
        while t < 1.0:
            n += 1
            t += rng.expovariate(lam)
        failed += n > budget
    assert failed / runs <= 0.015


@pytest.mark.parametrize("lam", [0.0, 1e-6, 0.1, 1.0, 4.0, 16.0, 64.0, 400.0, 2000.0])
def test_budget_is_the_poisson_quantile_and_never_below_the_floor(lam):
    b = m.restart_budget(lam)
    assert b >= m.MIN_RESTARTS and b >= math.floor(lam)
    if lam and b > m.MIN_RESTARTS:
        # The smallest count that covers 99 %: one fewer would not (log-space for large lam).
        def cdf(n: int) -> float:
            return sum(math.exp(-lam + k * math.log(lam) - math.lgamma(k + 1)) for k in range(n + 1))
        assert cdf(b) >= m.RESTART_COVERAGE > cdf(b - 1)


@pytest.mark.parametrize("lam", [math.nan, math.inf, -1.0, 1e5])
def test_budget_is_finite_for_any_expectation(lam):
    b = m.restart_budget(lam)
    assert m.MIN_RESTARTS <= b < 2**31  # JobSet maxRestarts is an int32
    if lam == 1e5:
        assert lam < b < lam + 3 * math.sqrt(lam)


def test_on_demand_gets_the_floor_and_the_engine_field_wins_when_present():
    j = job(gpus=16, hours=10, capacity="on-demand")
    (c,) = [c for c in candidates(j, [offer("p5.48xlarge", "us-east-1")]) if c.capacity == "on-demand"]
    assert m.planned_interruptions(c) == 0.0
    assert render_one(j, c)["spec"]["failurePolicy"]["maxRestarts"] == m.MIN_RESTARTS

    class WithField:  # the engine's Candidate.expected_interruptions (issue 19), when it exists
        expected_interruptions = 7.5
    assert m.planned_interruptions(WithField()) == 7.5  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- the rules, run


def pod_failure(policy: dict[str, Any], pod: dict[str, Any]) -> tuple[str | None, str | None]:
    """(action, message) of the first pod failure policy rule matching a failed ``pod`` (Kubernetes'
    matchPodFailurePolicy): exit-code rules look at terminated containers with a non-zero code, init
    containers after containers; condition rules at conditions with equal type and status."""
    statuses = [*pod.get("containers", []), *pod.get("initContainers", [])]
    for i, rule in enumerate(policy["rules"]):
        if "onExitCodes" in rule:
            req = rule["onExitCodes"]
            for st in statuses:
                code = st.get("exitCode")
                if code is None or code == 0 or req.get("containerName", st["name"]) != st["name"]:
                    continue
                if (code in req["values"]) == (req["operator"] == "In"):
                    return rule["action"], (f"Container {st['name']} for pod ns/p failed with exit code {code} "
                                            f"matching {rule['action']} rule at index {i}")
        else:
            for cond in pod.get("conditions", []):
                if any(cond["type"] == pat["type"] and cond["status"] == pat.get("status", "True")
                       for pat in rule["onPodConditions"]):
                    return rule["action"], f"Pod ns/p has condition {cond['type']} matching {rule['action']} " \
                                           f"rule at index {i}"
    return None, None


def job_reason(spec: dict[str, Any], pods: list[dict[str, Any]]) -> str | None:
    """The Job's failure reason after ``pods`` failed: PodFailurePolicy on a FailJob rule, else
    BackoffLimitExceeded once the counted failures pass backoffLimit, else None (pods are replaced)."""
    counted = 0
    for pod in pods:
        action, _ = pod_failure(spec["podFailurePolicy"], pod)
        if action == "FailJob":
            return "PodFailurePolicy"
        if action != "Ignore":
            counted += 1
        if counted > spec["backoffLimit"]:
            return "BackoffLimitExceeded"
    return None


def jobset_action(policy: dict[str, Any], reason: str, message: str = "") -> str:
    """The JobSet controller's action for a child Job that failed with ``reason`` (ruleIsApplicable: an empty
    list matches anything; no matching rule: RestartJobSet)."""
    for rule in policy.get("rules", []):
        if rule.get("onJobFailureReasons") and reason not in rule["onJobFailureReasons"]:
            continue
        pats = rule.get("onJobFailureMessagePatterns")
        if pats and not any(re.search(p, message) for p in pats):
            continue
        return str(rule["action"])
    return "RestartJobSet"


RECLAIMED = {"conditions": [{"type": "DisruptionTarget", "status": "True"}],
             "containers": [{"name": "trainer", "exitCode": 143}], "initContainers": [{"name": "tcpx-daemon",
                                                                                         "exitCode": 137}]}
LOST_PEER = {"containers": [{"name": "trainer", "exitCode": m.RETRY_EXIT_CODE}]}
BUG = {"containers": [{"name": "trainer", "exitCode": 1}]}
OOM = {"containers": [{"name": "trainer", "exitCode": 137}]}
SIDECAR_ONLY = {"containers": [{"name": "trainer", "exitCode": 0}], "initContainers": [{"name": "tcpx-daemon",
                                                                                           "exitCode": 1}]}


def test_gang_restarts_on_disruptions_and_lost_peers_and_fails_fast_on_its_own_failures():
    j = job(name="g", gpus=16, hours=24, capacity="spot")
    js = render_one(j, spot_candidate(j))
    policy = js["spec"]["failurePolicy"]
    child = js["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert child["backoffLimit"] == 0 and js["spec"]["replicatedJobs"][0]["replicas"] == 1
    for pod in (RECLAIMED, LOST_PEER):
        assert jobset_action(policy, job_reason(child, [pod]) or "") == "RestartJobSet"
    for pod in (BUG, OOM):
        assert job_reason(child, [pod]) == "BackoffLimitExceeded"
        assert jobset_action(policy, "BackoffLimitExceeded") == "FailJobSet"
    # A reclaimed pod seen with a crashed peer in one sync: the FailJob rule decides (reason PodFailurePolicy).
    assert job_reason(child, [RECLAIMED, BUG]) == "PodFailurePolicy"

    # Disruptions restart the gang exactly maxRestarts times, then the JobSet fails (restartJobSetActionApplier).
    restarts = 0
    for _ in range(policy["maxRestarts"] + 1):
        assert jobset_action(policy, "PodFailurePolicy") == "RestartJobSet"
        if restarts >= policy["maxRestarts"]:
            break
        restarts += 1
    assert restarts == policy["maxRestarts"] == m.restart_budget(m.planned_interruptions(spot_candidate(j)))


def test_single_node_job_counts_disruptions_against_its_budget_and_fails_fast_otherwise():
    j = job(name="one", gpus=8, hours=24, capacity="spot")
    c = spot_candidate(j)
    obj = render_one(j, c)
    spec = obj["spec"]
    assert obj["kind"] == "Job" and spec["backoffLimit"] == m.restart_budget(m.planned_interruptions(c))
    assert job_reason(spec, [RECLAIMED] * spec["backoffLimit"]) is None  # each replaced, within the budget
    assert job_reason(spec, [RECLAIMED] * (spec["backoffLimit"] + 1)) == "BackoffLimitExceeded"
    assert job_reason(spec, [LOST_PEER]) is None
    assert job_reason(spec, [BUG]) == job_reason(spec, [OOM]) == "PodFailurePolicy"  # fails at once
    assert job_reason(spec, [SIDECAR_ONLY]) is None  # only the trainer's exit codes judge the job


def test_rendered_policies_pass_the_api_validation_rules():
    """Kubernetes' Job validation (values ordered and unique, 0 never with In, containerName a container
    of the pod, restartPolicy Never) and JobSet's webhook (rule names, known failure reasons)."""
    reasons = {"BackoffLimitExceeded", "DeadlineExceeded", "FailedIndexes", "MaxFailedIndexesExceeded",
               "PodFailurePolicy"}
    name_re = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    for gang in (True, False):
        for rule in m.pod_failure_policy(gang)["rules"]:
            assert rule["action"] in ("FailJob", "Ignore", "Count", "FailIndex")
            assert ("onExitCodes" in rule) != ("onPodConditions" in rule)
            if "onExitCodes" in rule:
                vals = rule["onExitCodes"]["values"]
                assert vals == sorted(set(vals)) and (rule["onExitCodes"]["operator"] == "NotIn" or 0 not in vals)
                assert rule["onExitCodes"]["containerName"] == m.CONTAINER
    fp = m.jobset_failure_policy(5)
    names = [r["name"] for r in fp["rules"]]
    assert len(set(names)) == len(names) and all(name_re.fullmatch(n) and len(n) <= 128 for n in names)
    assert all(set(r.get("onJobFailureReasons", [])) <= reasons for r in fp["rules"])


# ----------------------------------------------------------------------------- what the pod knows


def test_the_trainer_learns_its_data_checkpoints_interval_and_deadline():
    j = job(name="ft", gpus=16, hours=24, capacity="spot", deadline_hours=36, checkpoint={"interval_minutes": 20},
            data={"dataset": {"uri": "s3://data/pile/", "size_gb": 100, "region": "us-east-1"}})
    c = spot_candidate(j)
    now = dt.datetime(2026, 11, 26, 1, 0, tzinfo=dt.UTC)
    js = render_one(j, c, now=now)
    pod = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["GPUFLEET_DATASET_URI"] == "s3://data/pile/"
    assert env["GPUFLEET_CHECKPOINT_DIR"] == "s3://b/ckpt/ft"  # no volume: under the stack's bucket
    assert env["GPUFLEET_CHECKPOINT_INTERVAL_SECONDS"] == "1200"
    assert env["GPUFLEET_DEADLINE"] == "2026-11-27T13:00:00Z"
    assert env["GPUFLEET_RETRY_EXIT_CODE"] == "75"
    # The deadline is Kueue's maximum execution time (admitted time never exceeds time since submission).
    assert js["metadata"]["labels"][m.MAX_EXEC_TIME_LABEL] == str(36 * 3600)
    # No deadline, no limit.
    j2 = job(name="ft", gpus=16, hours=24, capacity="spot")
    assert m.MAX_EXEC_TIME_LABEL not in render_one(j2, spot_candidate(j2))["metadata"]["labels"]


def test_planned_interval_prefers_the_candidates_own():
    j = job(checkpoint={"interval_minutes": 30})

    class Auto:  # issue 19: the engine picks an interval per candidate
        checkpoint_interval_minutes = 12.5
    assert m.planned_interval_seconds(j, Auto()) == 750  # type: ignore[arg-type]
    assert m.planned_interval_seconds(j, spot_candidate(job(gpus=8))) == 1800


@pytest.mark.parametrize("cloud, itype, region", [("aws", "p5.48xlarge", "us-east-1"),
                                                  ("gcp", "a3-megagpu-8g", "us-central1")])
def test_grace_period_fits_the_clouds_reclaim_notice(cloud, itype, region):
    j = job(name="g", gpus=16, hours=4, capacity="spot")
    obj = render_one(j, spot_candidate(j, itype, region), cloud=cloud)
    grace = obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert 0 < grace < m.RECLAIM_NOTICE_SECONDS[cloud]
    if cloud == "gcp":
        assert grace <= 15  # GKE graceful node shutdown gives ordinary pods the first 15 s of the 30 s
    # Through the hub a group spanning both clouds gets the shorter one.
    assert m.lifecycle(j, spot_candidate(j), ["aws", "gcp"]).grace_s == m.GRACE_SECONDS["gcp"]


def test_checkpoint_dir_under_the_mount_the_bucket_or_the_workers_configmap():
    j = job(name="ft", gpus=8)

    def plan(storage: m.Storage) -> m.PodPlan:
        return m.PodPlan(name="ft", namespace="team-a", job=j, nodes=1, gpus_per_node=8, cpu_millis=1, memory_mib=1,
                         efa=0, fabric="none", gpu_vpcs_shape=None, networks=(), service_account=None,
                         storage=storage, scheduling={})

    def ckpt(storage: m.Storage) -> str | None:
        return {e["name"]: e.get("value") for e in m.job_env(plan(storage))}.get("GPUFLEET_CHECKPOINT_DIR")

    mounted = m.Storage(volume={"name": "checkpoints", "persistentVolumeClaim": {"claimName": "c"}})
    assert ckpt(mounted) == "/checkpoints/ft"
    assert ckpt(m.Storage(env=({"name": "CHECKPOINT_URI", "value": "gs://b/p/"},))) == "gs://b/p/ft"
    # Through the hub the bucket is the admitting worker's, from its ConfigMap: Kubernetes expands $(VAR)
    # from envFrom variables (kubelet makeEnvironmentVariables).
    via_hub = m.Storage(env_from=({"configMapRef": {"name": m.CHECKPOINT_CONFIGMAP, "optional": True}},))
    assert ckpt(via_hub) == "$(CHECKPOINT_URI)/ft"
    assert ckpt(m.Storage()) is None
