"""A hub and three workers on fake API servers (:mod:`kubefake`), with the objects the real stacks create,
the simulated Kueue, and what ``placement submit --via-hub`` creates: the fixture of the dispatcher's
end-to-end tests (``tests/placement/dispatch``, ``tests/placement/live``)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from kubefake import WORKLOADS, FakeApi, FakeKueue, secret

from infra.config import load_stack_file
from infra.k8s import kueue_objects as ko
from infra.outputs import node_pool_output, training_service_account_output
from placement.dispatch.controller import Controller, Options
from placement.dispatch.model import Pricing, Settings
from placement.dispatch.prices import LivePrices
from placement.dispatch.telemetry import Metrics
from placement.files.inputs import load_catalog
from placement.fleet.kube import api_client
from placement.fleet.manifests import (
    GROUP_ANNOTATION,
    JOB_LABEL,
    JOB_SPEC_ANNOTATION,
    WORKERS_ANNOTATION,
    per_node_requests,
)
from placement.fleet.outputs import load_fleet
from placement.model.shapes import shape_book

STACKS = Path(__file__).resolve().parents[1] / "stacks"
KEYS = ("aws-use1-p5", "gcp-usc1-a3mega", "gcp-euw4-a3high")
NS = "team-a"
GVP = {"ResourceFlavor": "resourceflavors", "ClusterQueue": "clusterqueues", "LocalQueue": "localqueues",
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


def put(api: FakeApi, obj: dict[str, Any]) -> None:
    api.create(("kueue.x-k8s.io", "v1beta2", GVP[obj["kind"]]), obj)


class Fleet:
    """A hub and three workers with the objects the stacks create, and the simulated Kueue."""

    def __init__(self, tmp_path: Path, *, fallback: str | None = "gcp-euw4-a3high") -> None:
        self.hub = FakeApi("hub")
        self.workers = {k: FakeApi(k) for k in KEYS}
        hub_cfg = load_stack_file(str(STACKS / "Pulumi.hub.yaml"))
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
        group = [(k, p) for k in KEYS for p in outputs(k)["nodePools"]]
        self.pools = sorted({p["name"] for _, p in group})
        shapes = [shape_book().get(p["instanceType"]) for _, p in group]
        reqs = [per_node_requests(s, 8) for s in shapes if s is not None]
        self.cpu, self.memory = min(r[0] for r in reqs), min(r[1] for r in reqs)

    def submit(self, name: str, *, gpus: int = 8, priority: int = 1000, hours: float = 10,
               dataset: dict[str, Any] | None = None, nodes: int = 1) -> str:
        """What `submit --via-hub` creates on the hub (a Job with its annotations) and the Workload Kueue makes
        for it, with quota reserved in all-workers and the MultiKueue check Pending."""
        spec: dict[str, Any] = {"name": name, "accelerator": "H100", "gpus": gpus, "hours": hours, "team": NS}
        if dataset:
            spec["data"] = {"dataset": dataset}
        job = self.hub.create(("batch", "v1", "jobs"), {
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": NS, "labels": {JOB_LABEL: name},
                         "annotations": {JOB_SPEC_ANNOTATION: json.dumps(spec),
                                         GROUP_ANNOTATION: "single-node" if nodes == 1 else "efa",
                                         WORKERS_ANNOTATION: ",".join(KEYS)}},
            "spec": {"suspend": True}})
        template = {"spec": {"containers": [{"name": "trainer", "resources": {"requests": {
            "nvidia.com/gpu": str(gpus // nodes), "cpu": f"{self.cpu}m", "memory": f"{self.memory}Mi"}}}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "gpufleet.io/pool", "operator": "In", "values": self.pools}]}]}}}}}
        wl = self.hub.create(WORKLOADS, {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": f"job-{name}", "namespace": NS,
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name,
                                              "uid": job["metadata"]["uid"], "controller": True}]},
            "spec": {"queueName": "all-workers", "priority": priority,
                     "podSets": [{"name": "main", "count": nodes, "template": template}]}})
        self.kueue.reserve(wl, "aws-use1-p5-spot")
        return f"job-{name}"

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
