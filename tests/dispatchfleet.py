"""A hub and three workers on fake API servers (:mod:`kubefake`), with the objects the real stacks create,
the simulated Kueue, and jobs exactly as ``placement submit --via-hub`` creates them (it runs, against the fakes:
its storage objects on the workers, its Job/JobSet on the hub, whose Workload the simulated Kueue makes from it):
the fixture of the dispatcher's end-to-end tests (``tests/placement/dispatch``, ``tests/placement/live``).

The fake API servers validate what is created as a real one does (:func:`api_server_checks`: object metadata, and
the pinned Kueue v0.19.2 and JobSet v0.12.0 CRD schemas)."""

from __future__ import annotations

import contextlib
import functools
import io
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from kubefake import GVP, JOBS, JOBSETS, WORKLOADS, FakeApi, FakeKueue, metadata_problems, secret

from infra.config import load_stack_file
from infra.k8s import kueue_objects as ko
from infra.outputs import node_pool_output, training_service_account_output
from placement.dispatch.controller import Controller, Options
from placement.dispatch.model import Pricing, Settings
from placement.dispatch.prices import LivePrices
from placement.dispatch.telemetry import Metrics
from placement.files.inputs import load_catalog
from placement.fleet.kube import api_client
from placement.fleet.outputs import load_fleet

ROOT = Path(__file__).resolve().parents[1]
STACKS = ROOT / "stacks"
KEYS = ("aws-use1-p5", "gcp-usc1-a3mega", "gcp-euw4-a3high")
NS = "team-a"
GVP_OF = {"ResourceFlavor": "resourceflavors", "ClusterQueue": "clusterqueues", "LocalQueue": "localqueues",
       "WorkloadPriorityClass": "workloadpriorityclasses", "Topology": "topologies",
       "MultiKueueCluster": "multikueueclusters", "MultiKueueConfig": "multikueueconfigs",
       "AdmissionCheck": "admissionchecks", "Cohort": "cohorts"}


def outputs(key: str) -> dict[str, Any]:
    """A worker stack's outputs as the fleet file holds them (no kubeconfig)."""
    cfg = load_stack_file(str(STACKS / f"Pulumi.{key}.yaml"))
    scheme = "s3" if cfg.cloud == "aws" else "gs"
    return {"cloud": cfg.cloud, "region": cfg.region, "clusterName": cfg.cluster_name,
            "nodePools": [node_pool_output(p) for p in cfg.node_pools],
            "trainingServiceAccount": training_service_account_output(cfg),
            "kueue": {"clusterQueue": ko.cluster_queue_name(cfg),
                      "localQueues": [{"namespace": q["metadata"]["namespace"], "name": q["metadata"]["name"]}
                                      for q in ko.local_queues(cfg)]},
            "checkpointUri": f"{scheme}://{cfg.cluster_name}-ckpt/checkpoints", "checkpointFilesystem": None}


def hub_outputs(keys: tuple[str, ...] = KEYS) -> dict[str, Any]:
    """The hub stack's outputs as `placement submit --stacks` reads them (MultiKueueCluster name -> clusterName)."""
    cfg = load_stack_file(str(STACKS / "Pulumi.hub.yaml"))
    return {"role": "hub", "cloud": cfg.cloud, "region": cfg.region, "dispatcher": "External",
            "workers": {k: outputs(k)["clusterName"] for k in keys},
            "kueue": {"clusterQueues": [ko.ALL_WORKERS],
                      "localQueues": [{"namespace": t, "name": ko.ALL_WORKERS} for t in cfg.kueue.teams]}}


@functools.cache
def _crd_validators() -> tuple[Any, ...]:
    from infra.k8s.crd_validate import CRDValidator

    return CRDValidator(ROOT / "tests" / "data" / "kueue-crds"), CRDValidator(ROOT / "tests" / "data" / "jobset-crds")


def api_server_checks(gvp: GVP, obj: dict[str, Any]) -> list[str]:
    """What a real API server refuses on a create: invalid metadata (names, annotations over 256 KiB, labels),
    and a custom resource its CRD's schema (Kueue v0.19.2, JobSet v0.12.0: unknown fields too) refuses."""
    problems = metadata_problems(obj)
    for validator in _crd_validators():
        if (obj.get("apiVersion"), obj.get("kind")) in validator.kinds():
            problems += validator.validate(obj)
    return problems


def put(api: FakeApi, obj: dict[str, Any]) -> None:
    api.create(("kueue.x-k8s.io", "v1beta2", GVP_OF[obj["kind"]]), obj)


class Fleet:
    """A hub and three workers with the objects the stacks create, and the simulated Kueue."""

    def __init__(self, tmp_path: Path, *, fallback: str | None = "gcp-euw4-a3high") -> None:
        self.hub = FakeApi("hub", validate=api_server_checks)
        self.workers = {k: FakeApi(k, validate=api_server_checks) for k in KEYS}
        hub_cfg = load_stack_file(str(STACKS / "Pulumi.hub.yaml"))
        for obj in ko.priority_classes():  # the hub stack's WorkloadPriorityClasses (infra/k8s/hub.py)
            put(self.hub, obj)
        for k, api in self.workers.items():
            for obj in ko.worker_objects(load_stack_file(str(STACKS / f"Pulumi.{k}.yaml"))):
                put(api, obj)
            text = yaml.safe_dump(api.kubeconfig(token=f"{k}-token"))
            # The dispatcher's own read-only Secret; one worker has only MultiKueue's (the fallback).
            if k != fallback:
                self.hub.create(("", "v1", "secrets"), secret(f"gpufleet-dispatch-{k}", "kueue-system",
                                                              {"kubeconfig": text}))
            self.hub.create(("", "v1", "secrets"), secret(ko.kubeconfig_secret_name(k), "kueue-system",
                                                          {"kubeconfig": text}))
            put(self.hub, ko.multikueue_cluster(k, ko.kubeconfig_secret_name(k)))
        workers = [ko.worker_from_outputs(f"org/gpufleet/{k}", outputs(k)) for k in KEYS]
        for obj in ko.hub_all_workers_objects(workers, hub_cfg).values():
            put(self.hub, obj)
        self.fleet_file = tmp_path / "fleet.json"
        self.fleet_file.write_text(json.dumps({k: outputs(k) for k in KEYS}))
        self.hub_kubeconfig = tmp_path / "hub.kubeconfig"
        self.hub_kubeconfig.write_text(yaml.safe_dump(self.hub.kubeconfig()))
        self.kueue = FakeKueue(self.hub, self.workers)
        self.controllers: list[Controller] = []
        # What `placement submit --stacks` reads: every worker's outputs with its kubeconfig, and the hub's.
        self.jobs_dir = tmp_path / "jobs"
        self.jobs_dir.mkdir(exist_ok=True)
        self.stacks_file = tmp_path / "stacks.json"
        self.stacks_file.write_text(json.dumps(
            {**{k: {**outputs(k), "kubeconfig": self.workers[k].kubeconfig(token=f"{k}-submit")} for k in KEYS},
             "hub": hub_outputs()}))
        self.submitted: dict[str, dict[str, Any]] = {}  # job name -> submit's JSON document

    def submit(self, name: str, *, gpus: int = 8, hours: float = 10, dataset: dict[str, Any] | None = None,
               **spec: Any) -> str:
        """Run `placement submit --via-hub` for a job spec of ``gpus`` H100s for ``hours`` in team-a (plus
        ``dataset`` and any other job-spec fields): it creates the job's storage objects on the workers of its
        group and its Job/JobSet on the hub, as rendered; Kueue then makes the Workload (quota reserved in
        all-workers, the MultiKueue check Pending). The Workload's name."""
        from placement.commands.main import main

        doc: dict[str, Any] = {"name": name, "accelerator": "H100", "gpus": gpus, "hours": hours, "team": NS,
                               "command": ["python", "-m", "placement.trainer"], **spec}
        if dataset:
            doc["data"] = {"dataset": dataset}
        path = self.jobs_dir / f"{name}.yaml"
        path.write_text(yaml.safe_dump(doc))
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["submit", str(path), "--stacks", str(self.stacks_file), "--via-hub", "--kubeconfig",
                         str(self.hub_kubeconfig), "--json"])
        assert code == 0, err.getvalue()
        result = json.loads(out.getvalue())
        self.submitted[name] = result
        kind = result["submitted"]["kind"]
        job = self.hub.get(JOBS if kind == "Job" else JOBSETS, NS, name)
        assert job is not None, f"placement submit reported {kind} {name} but the hub has none"
        return self.kueue.workload_for(job)

    def worker_requests(self, key: str) -> list[Any]:
        """The requests worker ``key`` got from anyone but `placement submit` (which creates a job's storage
        objects on it with the stack's kubeconfig, token ``<key>-submit``): the dispatcher's."""
        with self.workers[key].lock:
            return [r for r in self.workers[key].requests if r.headers.get("authorization") != f"Bearer {key}-submit"]

    def controller(self, identity: str, clock: Callable[[], float] = time.time, prices: LivePrices | None = None,
                   metrics: Metrics | None = None, **kw: Any) -> Controller:
        opts: dict[str, Any] = dict(
            fleet=load_fleet(str(self.fleet_file)), pricing=Pricing(tuple(load_catalog([]).offers)),
            identity=identity, lease="gpufleet-dispatch", settings=Settings(deadline_s=600), resync_s=0.5,
            debounce_s=0.05, lease_duration_s=3, renew_deadline_s=2, retry_period_s=1, watch_timeout_s=3)
        opts.update(kw)
        c = Controller(api_client(self.hub.kubeconfig()), Options(**opts), metrics, clock=clock, prices=prices)
        self.controllers.append(c)
        return c

    def nominated(self) -> dict[str, tuple[str, ...]]:
        return {w["metadata"]["name"]: tuple((w.get("status") or {}).get("nominatedClusterNames") or ())
                for w in self.hub.list(WORKLOADS)}

    def cluster_of(self, name: str) -> str | None:
        wl = self.hub.get(WORKLOADS, NS, name)
        return None if wl is None else (wl.get("status") or {}).get("clusterName")

    def events(self, reason: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self.hub.list(("", "v1", "events")) if reason is None or e["reason"] == reason]

    def close(self) -> None:
        for c in self.controllers:
            c.stop()
        self.kueue.stop()
        for api in (self.hub, *self.workers.values()):
            api.close()



class Clock:
    """A clock the test moves: admission deadlines pass when it says so."""

    def __init__(self) -> None:
        self.t = float(int(time.time()))  # whole seconds: Event annotations keep milliseconds

    def __call__(self) -> float:
        return self.t
