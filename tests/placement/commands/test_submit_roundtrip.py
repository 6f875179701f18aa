"""What ``placement submit`` writes, every reader reads (issue 39): every example job and every job-spec variant the
docs show, rendered by ``submit --dry-run --json`` (direct and ``--via-hub``) on the example stack outputs, is fed
unchanged to the dispatcher's decision (as the Workload Kueue makes from it), to the trainer's settings (each pod's
environment as the kubelet builds it) and to ``placement report``'s reader, and none of them refuses it.

A job spec without a model or ``checkpoint.size_gb`` (the common case) has a checkpoint home and no size: the
dispatcher must still nominate it, pricing the move of its progress as unknown."""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import io
import json
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from dispatchfleet import api_server_checks
from kubefake import (
    COMPLETION_INDEX,
    JOBS,
    JOBSETS,
    WORKLOADS,
    FakeApi,
    container_env,
    kueue_workload,
    reserved_status,
)

from infra.config import load_stack_file
from infra.k8s import kueue_objects as ko
from placement.commands.main import main
from placement.dispatch import snapshot
from placement.dispatch.decide import decide
from placement.dispatch.model import Memory, Pricing
from placement.files.inputs import load_catalog
from placement.fleet.outputs import load_fleet
from placement.trainer.settings import from_env

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "placement" / "examples"
STACKS_FILE = EXAMPLES / "stacks-outputs.json"
FLEET_FILE = EXAMPLES / "fleet.json"
CHECK = ko.ALL_WORKERS
PRIORITIES = {name: value for name, value, _ in ko.PRIORITY_CLASSES}
NOW = time.time()

BASE: dict[str, Any] = {"accelerator": "H100", "gpus": 8, "hours": 10, "command": ["python", "-m", "placement.trainer"]}
# The job-spec variants docs/job-spec.md and the README show, one field group at a time and together.
VARIANTS: dict[str, dict[str, Any]] = {
    "bare": {},  # no model, no checkpoint size, no dataset: the common case
    "model-full": {"model": {"parameters_b": 7, "training": "full"}},
    "model-adapter": {"model": {"parameters_b": 70, "training": "adapter"}},
    "ckpt-size": {"checkpoint": {"size_gb": 200, "interval_minutes": 20, "keep": 5}},
    "dataset": {"data": {"dataset": {"uri": "s3://example-datasets/pile/", "size_gb": 500, "region": "us-east-1"},
                         "outputs_gb": 50}},
    "deadline": {"deadline_hours": 48, "usd_per_hour_of_delay": 20},
    "spot": {"capacity": "spot", "spot": {"interruptions_per_hour": 0.05, "restart_minutes": 15}},
    "on-demand": {"capacity": "on-demand", "priority": "burst"},
    "efa": {"gpus": 16, "clouds": {"allow": ["aws"]}, "require_fabric": True},
    "tcpxo": {"gpus": 16, "regions": {"allow": ["us-central1"]}},
    "tcpx": {"gpus": 16, "regions": {"allow": ["europe-west4"]}, "capacity": "spot"},
    "gcp-single": {"clouds": {"allow": ["gcp"]}, "model": {"parameters_b": 8, "training": "adapter"}},
    "rdma": {"accelerator": "B200", "gpus": 16, "workload": "diffusion"},
    "a100-efa": {"accelerator": ["A100", "A100-80GB"], "gpus": 16, "priority": "low"},
    "everything": {"gpus": 16, "model": {"parameters_b": 13, "training": "full"}, "capacity": "spot",
                   "checkpoint": {"size_gb": 180}, "deadline_hours": 72, "team": "team-a",
                   "data": {"dataset": {"uri": "gs://example-datasets/c4/", "size_gb": 800,
                                        "region": "us-central1"}}},
}
# What the example stacks cannot run: submit exits 1 with one line and renders nothing to read.
NOTHING_TO_RENDER = {
    "example:l4-on-gcp:l4-on-gcp:direct": "no stack has a L4 node pool",
    "example:l4-on-gcp:l4-on-gcp:hub": "no stack has a L4 node pool",
    "example:batch:pretrain-a:direct": "no existing cluster can run",  # 32 on-demand H100s: 2 nodes exist
    "example:batch:pretrain-a:hub": "no existing cluster can run",
    "docs:rdma:hub": "not a worker of hub",  # the example hub lists no A4 worker
}


def example_jobs() -> dict[str, dict[str, Any]]:
    """Every job of placement/examples/: the single job files and each job of the batch files."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(EXAMPLES.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        if not isinstance(doc, dict) or ("jobs" not in doc and "accelerator" not in doc):
            continue  # not a job (a forecast)
        for job in doc.get("jobs") or [doc]:
            out[f"{path.stem}:{job['name']}"] = job
    return out


def specs() -> dict[str, dict[str, Any]]:
    out = {f"example:{k}": v for k, v in example_jobs().items()}
    out.update({f"docs:{k}": {**BASE, "name": f"v-{k}", **v} for k, v in VARIANTS.items()})
    return out


def _submit(spec: dict[str, Any], name: str, via_hub: bool, tmp: Path) -> tuple[int, dict[str, Any] | None, str]:
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump({**spec, "name": name}))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["submit", str(path), "--stacks", str(STACKS_FILE), "--dry-run", "--json",
                     *(["--via-hub"] if via_hub else [])])
    doc = json.loads(out.getvalue()) if out.getvalue().strip() else None
    return code, doc, err.getvalue()


@functools.cache
def rendered(tmp: str) -> dict[str, tuple[int, dict[str, Any] | None, str, bool]]:
    """``submit --dry-run --json`` of every spec, direct (``<name>-d``) and through the hub (``<name>-h``)."""
    out = {}
    for i, (key, spec) in enumerate(sorted(specs().items())):
        for via_hub in (False, True):
            name = f"r{i:02d}-{'h' if via_hub else 'd'}"
            out[f"{key}:{'hub' if via_hub else 'direct'}"] = (*_submit(spec, name, via_hub, Path(tmp)), via_hub)
    return out


@pytest.fixture(scope="module")
def renders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, dict[str, Any] | None, str, bool]]:
    return rendered(str(tmp_path_factory.mktemp("roundtrip")))


def _jobs(renders: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], dict[str, Any], bool]]:
    """(which, the submit document, its Job/JobSet with a uid as the API server gives it, through the hub)."""
    for key, (code, doc, _, via_hub) in sorted(renders.items()):
        if code == 0:
            assert doc is not None
            job = json.loads(json.dumps(doc["manifest"][-1]))
            job["metadata"]["uid"] = f"uid-{job['metadata']['name']}"
            job["metadata"]["creationTimestamp"] = "2026-11-20T00:00:00Z"
            yield key, doc, job, via_hub


def test_every_example_and_docs_variant_renders(renders: dict[str, Any]) -> None:
    for key, (code, doc, err, _) in renders.items():
        if key in NOTHING_TO_RENDER:
            assert code == 1 and NOTHING_TO_RENDER[key] in err and "Traceback" not in err, (key, err)
            assert doc is not None and doc.get("manifest") is None, key
            continue
        assert code == 0, f"{key}: {err.strip().splitlines()[-1:]}"
    kinds = {(doc["chosen"].get("group") or {}).get("name") for code, doc, _, hub in renders.values()
             if code == 0 and hub}
    assert {"single-node", "efa", "tcpxo", "tcpx"} <= kinds  # the GPUDirect fabrics the hub groups
    assert any(json.dumps(job).count("tcpxo-daemon") for _, _, job, _ in _jobs(renders))
    no_size = [k for k, _, job, _ in _jobs(renders) if "gpufleet.io/checkpoint-home" in job["metadata"]["annotations"]
               and "gpufleet.io/checkpoint-gb" not in job["metadata"]["annotations"]]
    assert no_size, "some rendered job has a checkpoint home and no size: the case of issue 39"


def test_an_api_server_accepts_every_rendered_object(renders: dict[str, Any]) -> None:
    for key, doc, job, _ in _jobs(renders):
        for obj in doc["manifest"][:-1]:
            assert api_server_checks(("", "v1", "x"), obj) == [], key
        assert api_server_checks(JOBS if job["kind"] == "Job" else JOBSETS, job) == [], key
        assert api_server_checks(WORKLOADS, kueue_workload(job, PRIORITIES)) == [], key


def _workers() -> list[Any]:
    """The example fleet's workers with the Kueue objects their stacks create, nothing admitted."""
    out = []
    for cluster in load_fleet(str(FLEET_FILE)):
        objects: dict[str, list[dict[str, Any]]] = {"clusterqueues": [], "localqueues": [], "resourceflavors": [],
                                                    "workloads": []}
        for obj in ko.worker_objects(load_stack_file(str(ROOT / "stacks" / f"Pulumi.{cluster.stack}.yaml"))):
            plural = {"ClusterQueue": "clusterqueues", "LocalQueue": "localqueues",
                      "ResourceFlavor": "resourceflavors"}.get(obj["kind"])
            if plural:
                objects[plural].append(obj)
        out.append(snapshot.worker_state(cluster.stack, cluster, objects, NOW))
    return out


def _hub_workload(job: dict[str, Any], workers: list[str]) -> tuple[dict[str, Any], Any]:
    """The Workload Kueue makes for ``job``, waiting in a ClusterQueue with the MultiKueue check (the hub's
    all-workers, or for a direct job the worker queue it names), read by the dispatcher's snapshot."""
    wl = kueue_workload(job, PRIORITIES)
    wl["metadata"].update(uid=f"wl-{job['metadata']['uid']}", creationTimestamp="2026-11-20T00:00:00Z",
                          resourceVersion="1")
    queue = wl["spec"]["queueName"]
    wl["status"] = reserved_status(wl, queue, "default-flavor", CHECK)
    hub = snapshot.hub_workload(wl, job, {CHECK: CHECK}, {CHECK: tuple(workers)}, {queue: frozenset({CHECK})})
    return wl, hub


def test_the_dispatcher_reads_every_rendered_job_and_nominates_it(renders: dict[str, Any]) -> None:
    workers = _workers()
    keys = [w.key for w in workers]
    pricing = Pricing(tuple(load_catalog([]).offers))
    read = {}
    for key, _, job, via_hub in _jobs(renders):
        _, hub = _hub_workload(job, keys)
        assert hub is not None and hub.problem is None and hub.job_error is None, (key, hub and hub.job_error)
        assert hub.warnings == (), (key, hub.warnings)  # what submit wrote reads without a warning
        assert hub.job is not None and hub.job.name == job["metadata"]["name"]
        read[key] = (hub, via_hub)
    result = decide([h for h, _ in read.values()], workers, pricing, NOW)
    by = {d.workload.uid: d for d in result.decisions}
    for key, (hub, via_hub) in read.items():
        d = by[hub.uid]
        assert d.reason != "Unreadable", (key, d.message)
        if via_hub:  # the hub's own jobs: nominated to a worker of their group
            assert d.action == "nominate" and d.clusters[0] in (hub.group_workers or ()), (key, d.message)

    # With progress (evicted from the worker it ran on): the move is priced, or priced as unknown, never refused.
    moved = []
    memory = {}
    for hub, via_hub in read.values():
        if via_hub and hub.checkpoint is not None:
            ran = next(w for w in (hub.group_workers or ()) if w in keys)
            moved.append(replace(hub, evictions=1))
            memory[hub.uid] = Memory(nominated=(ran,), since=NOW - 600, tried=frozenset({ran}), first_at=NOW - 600)
    assert moved
    for d in decide(moved, workers, pricing, NOW, memory=memory).decisions:
        assert d.action == "nominate", d.message
        assert d.workload.checkpoint is not None
        text = "of unknown size" if d.workload.checkpoint.gb is None else " GB checkpoint"
        # Across clouds without federation nothing is read: the restart and its lost progress are said instead.
        restarts = "restarts from step 0" in d.message and "progress it throws away" in d.message
        assert text in d.message or restarts, d.message


def test_the_trainer_reads_every_pods_environment(renders: dict[str, Any]) -> None:
    for key, doc, job, _ in _jobs(renders):
        if job["kind"] == "Job":
            template, pods = job["spec"]["template"], 1
        else:
            (rj,) = job["spec"]["replicatedJobs"]
            template, pods = rj["template"]["spec"]["template"], rj["template"]["spec"]["parallelism"]
        (trainer,) = [c for c in template["spec"]["containers"] if c["name"] == "trainer"]
        # Each worker the job may land on gives it that worker's ConfigMap (through the hub).
        maps = [{o["metadata"]["name"]: o["data"]} for o in doc["manifest"][:-1] if o["kind"] == "ConfigMap"] or [{}]
        for config_maps in maps:
            for index in range(pods):
                annotations = {**(template["metadata"].get("annotations") or {}), COMPLETION_INDEX: str(index)}
                env = from_env(container_env(trainer, config_maps, annotations))
                assert env.rank == index and env.nodes == pods and env.job == job["metadata"]["name"], key
                assert env.checkpoint_dir and "$(" not in env.checkpoint_dir, key


def test_report_reads_every_rendered_job(renders: dict[str, Any], tmp_path: Path) -> None:
    from placement.commands.report import collect

    api = FakeApi("roundtrip")
    try:
        names = set()
        for _, _, job, _ in _jobs(renders):
            created = api.create(JOBS if job["kind"] == "Job" else JOBSETS, job)
            wl = kueue_workload(created, PRIORITIES)
            wl["status"] = {"conditions": [{"type": "Admitted", "status": "True", "reason": "Admitted", "message": "",
                                            "lastTransitionTime": "2026-11-20T01:00:00Z"}]}
            api.create(WORKLOADS, wl)
            names.add(job["metadata"]["name"])
        start = dt.datetime(2026, 11, 20, tzinfo=dt.UTC)
        runs, skipped = collect(_client(api), None, start, start + dt.timedelta(days=1), None,
                                load_catalog([]).offers)
        assert skipped == []
        assert {r.name for r in runs} == names
        assert all(r.admitted_gpu_hours > 0 for r in runs)
    finally:
        api.close()


def _client(api: FakeApi) -> Any:
    from placement.fleet.kube import api_client

    return api_client(api.kubeconfig())


def test_every_name_submit_writes_is_in_the_contract(renders: dict[str, Any]) -> None:
    from placement.model import contract

    annotations = {e.name for e in contract.ANNOTATIONS}
    env = {e.name for e in contract.ENV}
    for key, doc, job, via_hub in _jobs(renders):
        for obj in [*doc["manifest"][:-1], job]:
            written = {k for k in (obj["metadata"].get("annotations") or {}) if k.startswith("gpufleet.io/")}
            assert written <= annotations, (key, written - annotations)
        ann = job["metadata"]["annotations"]
        assert contract.JOB_SPEC in ann, key  # every job: report reads it
        assert ({contract.FABRIC_GROUP, contract.WORKERS} <= set(ann)) is via_hub, key
        templates = [job["spec"]["template"]] if job["kind"] == "Job" else [
            rj["template"]["spec"]["template"] for rj in job["spec"]["replicatedJobs"]]
        for template in templates:
            (trainer,) = [c for c in template["spec"]["containers"] if c["name"] == "trainer"]
            names = {v["name"] for v in trainer["env"] if v["name"].startswith("GPUFLEET_") or v["name"] in env}
            assert {n for n in names if n.startswith("GPUFLEET_")} <= env, (key, names - env)
            assert all(v.get("value") != "" for v in trainer["env"]), key  # unknown is absent, never ""
