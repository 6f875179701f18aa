#!/usr/bin/env python3
"""Decision latency of ``placement dispatch``: one full pass for 1,000 waiting Workloads across N workers.

A pass = snapshots from the Kueue objects (hub Workloads with their owners' job specs, each worker's
ClusterQueue/LocalQueues/Workloads/ResourceFlavors) + the decision (every worker scored with the placement
engine's cost and the price of waiting, the burst ordered and spread). Fleets are generated from the
embedded catalog's H100 offers (each worker: a spot and an on-demand pool of one shape in one zone, some
work admitted and some queued); Workloads ask 8-32 GPUs with datasets in different clouds and regions, their owners
carrying what ``submit --via-hub`` writes (job spec, fabric group, workers, checkpoint home; the size on half).
Prints the median of ``--runs`` runs (in a fresh memo each: no cost is reused between runs) per fleet size,
and the time a new leader takes to rebuild its memory of every Workload from the Events the pass recorded
(``recall s``: parsing the listed Events, not the LIST itself).

Then the two promises of issue 21, measured: a pass over ``--workloads`` Workloads of which ``--malformed`` are
hostile (nested and newer job specs, overflowing quantities, wrong types; ten kinds in turn) nominates every
good one and reports each bad one (``Unreadable``), with its time; and a worker that never answers, or trickles a
byte a second, delays the reads of a pass by at most its deadline (``--worker-timeout`` s, a loopback server).

Last, the targets of issue 30 (:data:`TARGETS`): a pass over 1,000 Workloads (100 malformed) within 0.25 s at 20
workers and 1 s at 100, each printed with PASS or FAIL (``--strict``: exit 1 when one is missed), with the garbage
collector's settings that ``placement dispatch`` runs with (the thresholds of
:func:`~placement.dispatch.gcsettings.tune_gc`, and no collection while the pass decides:
:func:`~placement.dispatch.gcsettings.deciding`; what counts, with the CPU time of the collection it defers to the
carry-out printed beside it) and, for comparison, with CPython's defaults and with the thresholds alone.

    python scripts/bench_dispatch.py [--workloads 1000] [--workers 5 10 20 40] [--runs 5] [--malformed 100]
                                     [--no-targets] [--targets-only] [--judge wall|cpu] [--strict]

``--judge cpu`` holds the targets against each pass's CPU time (``time.process_time``) instead of its wall time: on a
shared machine the wall clock also counts the time other processes held the cores. ``--targets-only`` runs only the
target passes.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import json
import random
import socket
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _bench  # noqa: E402
import _venv  # noqa: E402

_venv.ensure("yaml", "highspy", extra="")  # before the imports below; re-runs this script under .venv if needed

from placement.dispatch import memory, snapshot  # noqa: E402
from placement.dispatch.controller import COMPONENT  # noqa: E402
from placement.dispatch.decide import UNREADABLE, decide  # noqa: E402
from placement.dispatch.gcsettings import deciding, tune_gc  # noqa: E402
from placement.dispatch.model import Pricing  # noqa: E402
from placement.fleet.stacks import ClusterStack, Pool  # noqa: E402
from placement.model import contract  # noqa: E402
from placement.model import kueue as ko  # noqa: E402
from placement.model.catalog import embedded_catalog  # noqa: E402

NS, QUEUE = "team-a", "all-workers"
NOW = time.time()
DATASETS = (("s3://d/x", "us-east-1"), ("s3://d/x", "us-west-2"), ("gs://d/x", "us-central1"),
            ("gs://d/x", "europe-west4"), ("s3://d/x", "eu-west-1"), ("gs://d/x", "asia-southeast1"))


JOB_SPEC_ANNOTATION = contract.JOB_SPEC
HOMES = (("s3://ckpt-a/checkpoints", "aws", "us-east-1"), ("gs://ckpt-b/checkpoints", "gcp", "us-central1"))


def rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def fleet(n: int, rng: random.Random) -> tuple[list[ClusterStack], dict[str, dict[str, list[dict[str, Any]]]]]:
    offers = sorted((o for o in embedded_catalog().offers
                     if o.shape.accelerator == "H100" and o.shape.gpus == 8 and o.price and o.spot_price),
                    key=lambda o: (o.cloud, o.region, o.zone, o.instance_type))
    clusters, objects = [], {}
    for i in range(n):
        o = offers[(i * 7) % len(offers)]
        key = f"w{i:02d}-{o.region}"[:40]
        pools = (Pool(f"{key}-spot", o.instance_type, "spot", o.zone, 4), Pool(f"{key}-od", o.instance_type,
                                                                                 "on-demand", o.zone, 2))
        clusters.append(ClusterStack(stack=key, cloud=o.cloud, region=o.region, cluster_name=f"c-{key}",
                                     pools=pools, kubeconfig=None, checkpoint_uri=None, filesystem=None,
                                     service_account=None, local_queues=None))
        node = ko.allocatable(o.shape)
        flavors = [{"apiVersion": ko.API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": p.name},
                    "spec": {"nodeLabels": {ko.POOL_LABEL: p.name}}} for p in pools]
        used = rng.randint(0, 4) * 8
        # As the stacks build them (inferenceShare 0.25): the inference queue owns one of the 4 spot nodes and
        # lends it to the training queue of the same cohort, which then borrows it for a 4-node job.
        serving = {p.name: p.max_nodes // 4 for p in pools}
        cq = {"metadata": {"name": f"c-{key}-gpu"}, "spec": {"cohortName": "gpufleet", "resourceGroups": [{"flavors": [
            {"name": p.name, "resources": [
                {"name": "cpu", "nominalQuota": f"{node.cpu_millis * (p.max_nodes - serving[p.name])}m"},
                {"name": "memory", "nominalQuota": f"{node.memory_mib * (p.max_nodes - serving[p.name])}Mi"},
                {"name": "nvidia.com/gpu", "nominalQuota": node.gpus * (p.max_nodes - serving[p.name])}]}
            for p in pools]}]},
            "status": {"flavorsReservation": [{"name": pools[0].name, "resources": [
                {"name": "nvidia.com/gpu", "total": str(used)}]}]}}
        inference = {"metadata": {"name": f"c-{key}-inference"}, "spec": {"cohortName": "gpufleet", "resourceGroups": [
            {"flavors": [{"name": p.name, "resources": [
                {"name": "cpu", "nominalQuota": f"{node.cpu_millis * serving[p.name]}m", "borrowingLimit": 0},
                {"name": "memory", "nominalQuota": f"{node.memory_mib * serving[p.name]}Mi", "borrowingLimit": 0},
                {"name": "nvidia.com/gpu", "nominalQuota": node.gpus * serving[p.name], "borrowingLimit": 0}]}
                for p in pools]}]}}
        wls = []
        for j in range(used // 8):
            wls.append({"metadata": {"name": f"run-{j}", "namespace": NS, "creationTimestamp": rfc3339(NOW - 7200)},
                        "spec": {"queueName": QUEUE, "priority": 1000, "podSets": [
                            {"name": "main", "count": 1, "template": {}}]},
                        "status": {"conditions": [{"type": "QuotaReserved", "status": "True",
                                                   "lastTransitionTime": rfc3339(NOW - 3600 * rng.random() * 6)}],
                                   "admission": {"clusterQueue": cq["metadata"]["name"], "podSetAssignments": [
                                       {"name": "main", "count": 1, "flavors": {"nvidia.com/gpu": pools[0].name},
                                        "resourceUsage": {"nvidia.com/gpu": "8"}}]}}})
        for j in range(rng.randint(0, 6)):
            wls.append({"metadata": {"name": f"queued-{j}", "namespace": NS, "creationTimestamp": rfc3339(NOW - 600)},
                        "spec": {"queueName": QUEUE, "priority": rng.choice((100, 500, 1000)), "podSets": [
                            {"name": "main", "count": 1, "template": {"spec": {"containers": [
                                {"resources": {"requests": {"nvidia.com/gpu": "8"}}}]}}}]}})
        objects[key] = {"clusterqueues": [cq, inference], "resourceflavors": flavors, "workloads": wls,
                        "localqueues": [{"metadata": {"name": QUEUE, "namespace": NS},
                                         "spec": {"clusterQueue": cq["metadata"]["name"]}}]}
    return clusters, objects


def hub(n: int, keys: list[str], rng: random.Random) -> tuple[list[dict[str, Any]], dict[Any, dict[str, Any]]]:
    cpu, mem = 150_000, 1_500_000  # per pod: millicores and MiB, about a whole 8-GPU node
    workloads, owners = [], {}
    for i in range(n):
        gpus = rng.choice((8, 8, 16, 32))
        uri, region = rng.choice(DATASETS)
        spec = {"name": f"j{i}", "accelerator": "H100", "gpus": gpus, "hours": rng.choice((2, 6, 12, 24)),
                "data": {"dataset": {"uri": uri, "region": region, "size_gb": rng.choice((50, 500, 2000))}}}
        # What submit --via-hub writes (placement.model.contract): the spec, the group and its workers, the
        # checkpoint home in the planned worker's region, and its size only when the spec gives one (every other).
        home = HOMES[i % len(HOMES)]
        owners[("Job", NS, f"j{i}")] = {"metadata": {"annotations": {
            JOB_SPEC_ANNOTATION: contract.job_spec_text(spec),
            contract.FABRIC_GROUP: "efa" if gpus > 8 else "single-node", contract.WORKERS: contract.workers_text(keys),
            **contract.checkpoint_annotations(f"{home[0]}/j{i}", home[1], home[2], 140.0 if i % 2 else None)}}}
        nodes = gpus // 8
        workloads.append({
            "metadata": {"name": f"job-j{i}", "namespace": NS, "uid": f"uid-{i}", "resourceVersion": str(i),
                         "creationTimestamp": rfc3339(NOW - 1000 + i),
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": f"j{i}",
                                              "controller": True}]},
            "spec": {"queueName": QUEUE, "priority": rng.choice((500, 1000)), "podSets": [
                {"name": "main", "count": nodes, "template": {"spec": {"containers": [{"resources": {"requests": {
                    "nvidia.com/gpu": "8", "cpu": f"{cpu}m", "memory": f"{mem}Mi"}}}]}}}]},
            "status": {"conditions": [{"type": "QuotaReserved", "status": "True"}],
                       "admission": {"clusterQueue": QUEUE, "podSetAssignments": [
                           {"name": "main", "count": nodes, "resourceUsage": {
                               "nvidia.com/gpu": str(gpus), "cpu": f"{cpu * nodes}m",
                               "memory": f"{mem * nodes}Mi"}}]},
                       "admissionChecks": [{"name": QUEUE, "state": "Pending"}]}})
    return workloads, owners


def snapshots(raw_wls: list[dict[str, Any]], owners: dict[Any, dict[str, Any]], clusters: list[ClusterStack],
              objects: dict[str, dict[str, list[dict[str, Any]]]]) -> tuple[list[Any], list[Any]]:
    """The hub's Workloads and the workers' states as the controller builds them for one pass (every Workload in
    the one all-workers queue, whose admission check is the dispatcher's)."""
    snapshot.forget_parsed_job_specs()  # a cold pass: no job spec parsed by an earlier run is reused
    checks, configs = {QUEUE: QUEUE}, {QUEUE: tuple(c.stack for c in clusters)}
    cq_checks = {QUEUE: frozenset({QUEUE})}
    wls = []
    for w in raw_wls:
        owner = snapshot.owner_key(w)
        hw = snapshot.hub_workload(w, owners.get(owner) if owner else None, checks, configs, cq_checks)
        if hw is not None:
            wls.append(hw)
    hours = {(w.namespace, w.name): w.job.hours for w in wls if w.job is not None}
    return wls, [snapshot.worker_state(c.stack, c, objects[c.stack], NOW, hours) for c in clusters]


def one_pass(raw_wls: list[dict[str, Any]], owners: dict[Any, dict[str, Any]], clusters: list[ClusterStack],
             objects: dict[str, dict[str, list[dict[str, Any]]]],
             pricing: Pricing) -> tuple[float, float, int, float, float]:
    gc.collect()  # the set-up's garbage (the copies above) is not the pass's to collect
    started, cpu = time.perf_counter(), time.process_time()
    wls, workers = snapshots(raw_wls, owners, clusters, objects)
    snap = time.perf_counter() - started
    result = decide(wls, workers, pricing, NOW)
    total = time.perf_counter() - started
    cpu = time.process_time() - cpu
    events = [{"metadata": {"name": f"{d.workload.name}.e", "namespace": d.workload.namespace,
                            "annotations": memory.as_annotations(d.memory, NOW)},
               "involvedObject": {"kind": "Workload", "uid": d.workload.uid, "namespace": d.workload.namespace},
               "source": {"component": COMPONENT}, "reportingComponent": memory.REPORTING,
               "reportingInstance": "bench"}
              for d in result.decisions if d.memory is not None]
    known = {w.uid: (w.namespace, w.created) for w in wls}
    started = time.perf_counter()
    recalled = memory.recall(events, COMPONENT, known, NOW)
    recall = time.perf_counter() - started
    assert len(recalled) == len(events)
    return snap, total, sum(1 for d in result.decisions if d.action == "nominate"), recall, cpu


def corrupt(i: int, wl: dict[str, Any], owner: dict[str, Any]) -> None:
    """Make Workload ``wl`` (and its owner Job) hostile, in one of ten ways by ``i``."""
    ann = owner["metadata"]["annotations"]
    kind = i % 10
    if kind == 0:
        ann[JOB_SPEC_ANNOTATION] = "[" * 200_000  # RecursionError
    elif kind == 1:
        ann[JOB_SPEC_ANNOTATION] = json.dumps({**json.loads(ann[JOB_SPEC_ANNOTATION]), "warp_drive": True})
    elif kind == 2:
        wl["status"]["admission"]["podSetAssignments"][0]["resourceUsage"]["memory"] = "1e400"  # OverflowError
    elif kind == 3:
        ann[JOB_SPEC_ANNOTATION] = "{not json"
    elif kind == 4:
        wl["spec"]["priority"] = "high"
    elif kind == 5:
        wl["status"]["admission"]["podSetAssignments"][0]["count"] = "lots"
    elif kind == 6:
        wl["status"]["admission"]["podSetAssignments"] = {"main": 1}
    elif kind == 7:
        ann[JOB_SPEC_ANNOTATION] = json.dumps({**json.loads(ann[JOB_SPEC_ANNOTATION]), "speed": {"H100": 1e308}})
    elif kind == 8:
        owner["metadata"]["annotations"] = {JOB_SPEC_ANNOTATION: ["not", "a", "string"]}
    else:
        wl["status"]["admission"]["podSetAssignments"][0]["resourceUsage"]["nvidia.com/gpu"] = float("nan")


def hostile_pass(n: int, malformed: int, workers: int, pricing: Pricing, paused: bool = False
                 ) -> tuple[float, int, int, int, float, float]:
    """(seconds, good Workloads nominated, bad ones reported Unreadable, good ones, CPU seconds) of one pass, and
    the CPU seconds of the collection it deferred: ``paused``, the pass decides inside
    :func:`~placement.dispatch.gcsettings.deciding` as ``placement dispatch`` does, and the young collection the
    collector then runs at its next allocation (its walk of what the pass made) is timed after the pass."""
    rng = random.Random(7)
    clusters, objects = fleet(workers, rng)
    raw, owners = hub(n, [c.stack for c in clusters], rng)
    raw, owners = copy.deepcopy(raw), copy.deepcopy(owners)
    bad = set()
    for i in range(malformed):
        j = i * n // malformed  # spread over the burst, so good ones come after bad ones too
        corrupt(i, raw[j], owners[("Job", NS, f"j{j}")])
        bad.add(raw[j]["metadata"]["name"])
    gc.collect()  # the set-up's garbage (the copies above) is not the pass's to collect
    with deciding() if paused else contextlib.nullcontext():
        started, cpu = time.perf_counter(), time.process_time()
        wls, states = snapshots(raw, owners, clusters, objects)
        result = decide(wls, states, pricing, NOW)
        took = time.perf_counter() - started
        cpu = time.process_time() - cpu
        after = time.process_time()
    # The collection the pass deferred runs at the first allocation once the collector is back (leaving the block
    # above, or here): either way inside this clock, and the explicit one finds nothing left when it already ran.
    gc.collect(0)
    deferred = time.process_time() - after if paused else 0.0
    good = sum(1 for d in result.decisions if d.action == "nominate" and d.workload.name not in bad)
    reported = sum(1 for d in result.decisions if d.reason == UNREADABLE and d.workload.name in bad)
    return took, good, reported, n - malformed, cpu, deferred


def silent_server(mode: str) -> tuple[int, threading.Event]:
    """A loopback server that accepts and never answers (``hang``) or answers one byte a second (``trickle``)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            try:
                if mode == "trickle":
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
                while not stop.wait(1.0):
                    if mode == "trickle":
                        conn.sendall(b" ")
            except OSError:
                pass

    def accept() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            threading.Thread(target=serve, args=(conn,), daemon=True).start()
        sock.close()

    threading.Thread(target=accept, daemon=True).start()
    return int(sock.getsockname()[1]), stop


def slow_worker_delay(mode: str, deadline_s: float) -> float:
    """Seconds the reads of a pass take when its only worker is a :func:`silent_server`."""
    from placement.dispatch.controller import WORKER, Controller, Options, _Worker
    from placement.fleet.kube import Informer, api_client

    port, stop = silent_server(mode)
    try:
        config = {"apiVersion": "v1", "kind": "Config", "current-context": "s",
                  "clusters": [{"name": "s", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                  "users": [{"name": "u", "user": {"token": "bench-token"}}],
                  "contexts": [{"name": "s", "context": {"cluster": "s", "user": "u"}}]}
        api = api_client(config, None, "bench", static=True)

        class Hub:
            user_agent = ""

        c = Controller(Hub(), Options(fleet=(), pricing=Pricing(()), identity="bench", lease=None,
                                      worker_timeout_s=deadline_s))
        c.workers["silent"] = _Worker("silent", api, "s", {p: Informer(api, r, list_timeout_s=deadline_s)
                                                           for p, r in WORKER.items()})
        started = time.monotonic()
        c.relist_workers(time.monotonic() + 60)
        took = time.monotonic() - started
        assert c.workers["silent"].stale or not all(i.synced for i in c.workers["silent"].informers.values())
        return took
    finally:
        stop.set()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", type=int, default=1000)
    ap.add_argument("--workers", type=int, nargs="+", default=[5, 10, 20, 40])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--malformed", type=int, default=100, help="hostile Workloads among --workloads (default 100)")
    ap.add_argument("--worker-timeout", type=float, default=2.0, help="read deadline of the silent worker (s)")
    ap.add_argument("--no-targets", action="store_true", help="skip the passes that check the targets of issue 30")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    ap.add_argument("--targets-only", action="store_true", help="only the passes that check the targets")
    ap.add_argument("--judge", choices=("wall", "cpu"), default="wall",
                    help="hold the targets against wall time (default) or CPU time (a shared machine)")
    args = ap.parse_args()
    pricing = Pricing(tuple(embedded_catalog().offers))
    print(_bench.machine_line())
    if args.targets_only:
        missed = targets(pricing, args.runs, args.judge)
        return 1 if missed and args.strict else 0
    print(f"one dispatch pass, {args.workloads} waiting Workloads, median of {args.runs} runs")
    print(f"{'workers':>8} {'snapshots s':>12} {'decision s':>11} {'pass s':>8} {'cpu s':>7} {'nominated':>10} "
          f"{'recall s':>9}")
    for n in args.workers:
        rng = random.Random(n)
        clusters, objects = fleet(n, rng)
        raw, owners = hub(args.workloads, [c.stack for c in clusters], rng)
        runs = [one_pass(raw, owners, clusters, objects, pricing) for _ in range(args.runs)]
        snap = statistics.median(r[0] for r in runs)
        total = statistics.median(r[1] for r in runs)
        recall = statistics.median(r[3] for r in runs)
        cpu = statistics.median(r[4] for r in runs)
        print(f"{n:>8} {snap:>12.3f} {total - snap:>11.3f} {total:>8.3f} {cpu:>7.3f} {runs[0][2]:>10} {recall:>9.3f}")
    hostile = [hostile_pass(args.workloads, args.malformed, 10, pricing) for _ in range(args.runs)]
    took = statistics.median(h[0] for h in hostile)
    _, good, reported, want, _, _ = hostile[0]
    print(f"hostile pass: {args.workloads} Workloads, {args.malformed} malformed, 10 workers: {good} of {want} good "
          f"nominated, {reported} of {args.malformed} bad reported Unreadable, {took:.3f} s (median of {args.runs})")
    for mode in ("hang", "trickle"):
        delays = [slow_worker_delay(mode, args.worker_timeout) for _ in range(max(1, min(args.runs, 3)))]
        print(f"worker that {'never answers' if mode == 'hang' else 'trickles a byte a second'}: reads of the pass "
              f"took {statistics.median(delays):.2f} s with a {args.worker_timeout:g} s deadline")
    missed = 0 if args.no_targets else targets(pricing, args.runs, args.judge)
    return 1 if missed and args.strict else 0


# Issue 30: one pass (snapshots + decision) over 1,000 waiting Workloads, 100 of them malformed, every good one
# nominated and every bad one reported, within these seconds at these fleet sizes.
TARGETS = ((20, 0.25), (100, 1.0))
TARGET_WORKLOADS, TARGET_MALFORMED = 1000, 100


# The collector's settings each target is measured under: (label, thresholds of tune_gc, paused while deciding).
# Only the last counts: the settings ``placement dispatch`` runs with; the others are printed for comparison.
GC_SETTINGS = (("default gc thresholds", False, False), ("tune_gc only", True, False),
               ("gc as placement dispatch sets it (tune_gc, paused while deciding)", True, True))


def targets(pricing: Pricing, runs: int, judge: str = "wall") -> int:
    """Check :data:`TARGETS` (median of ``runs`` passes each); print one line per target and collector setting
    (:data:`GC_SETTINGS`); return how many were missed as ``placement dispatch`` runs: with :func:`tune_gc` (the
    setting the command applies at start), deciding inside :func:`deciding`; the CPU seconds of the collection
    that defers are printed beside it. Wall time is what the target holds; CPU time is printed beside it, as on a
    loaded machine the wall clock also counts the time other processes held the cores; ``judge`` "cpu" holds the
    targets against the CPU time instead."""
    missed = 0
    for workers, limit in TARGETS:
        for label, tuned, paused in GC_SETTINGS:
            counted = (tuned, paused) == GC_SETTINGS[-1][1:]
            before = tune_gc() if tuned else None
            try:
                rows = [hostile_pass(TARGET_WORKLOADS, TARGET_MALFORMED, workers, pricing, paused)
                        for _ in range(runs)]
            finally:
                if before is not None:
                    gc.set_threshold(*before)
            took, cpu = statistics.median(r[0] for r in rows), statistics.median(r[4] for r in rows)
            _, good, reported, want, _, _ = rows[0]
            ok = (cpu if judge == "cpu" else took) <= limit and good == want and reported == TARGET_MALFORMED
            missed += counted and not ok
            deferred = (f", then {statistics.median(r[5] for r in rows):.3f} s cpu collecting after the decisions"
                        if paused else "")
            print(f"target: pass <= {limit:g} s at {workers} workers, {TARGET_WORKLOADS} Workloads ({TARGET_MALFORMED} "
                  f"malformed), {label}: {took:.3f} s (cpu {cpu:.3f} s){deferred}, {good} of {want} good nominated, "
                  f"{reported} of {TARGET_MALFORMED} bad reported: {'PASS' if ok else 'FAIL'} on {judge} time"
                  f"{'' if counted else ' (not counted)'}")
    return missed


if __name__ == "__main__":
    sys.exit(main())
