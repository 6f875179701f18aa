"""``placement dispatch`` end to end: the controller against a fake hub and three fake workers (the real
stacks' Kueue objects), with a simulated Kueue that copies nominated Workloads to workers, admits them when
quota fits and records the admitting worker on the hub with its own ``kueue-admission`` apply."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from dispatchfleet import KEYS, NS, Clock, Fleet, outputs
from kubefake import WORKLOADS, wait_for

from placement.commands.main import main
from placement.dispatch import snapshot
from placement.dispatch.model import Settings
from placement.dispatch.telemetry import HealthServer, Metrics
from placement.fleet.kube import api_client, apply_workload_status


def test_a_merge_patched_nomination_blocks_kueue_and_the_kueue_admission_apply_does_not(fleet):
    """Why the old `submit` nomination stranded jobs, and why the dispatcher's apply does not."""
    from kubernetes import client

    hub = api_client(fleet.hub.kubeconfig())
    custom = client.CustomObjectsApi(hub)
    kueue = fleet.kueue
    old = fleet.submit("old")
    custom.patch_namespaced_custom_object_status(  # what submit did: a merge patch, manager from the user agent
        "kueue.x-k8s.io", "v1beta2", NS, "workloads", old, {"status": {"nominatedClusterNames": ["aws-use1-p5"]}})
    kueue.step()  # MultiKueue copies it to the worker,
    kueue.step()  # the worker admits it, and the hub's own apply (without the nomination) is refused:
    assert fleet.workers["aws-use1-p5"].get(WORKLOADS, NS, old) is not None
    assert fleet.cluster_of(old) is None
    assert any("mutually exclusive" in f for f in kueue.failures)

    new = fleet.submit("new")
    wl = fleet.hub.get(WORKLOADS, NS, new)
    assert wl is not None
    apply_workload_status(hub, NS, new, snapshot.nomination(wl, ["aws-use1-p5"]), field_manager="kueue-admission")
    after = fleet.hub.get(WORKLOADS, NS, new)
    assert after is not None and after["status"]["admission"] == wl["status"]["admission"]  # nothing else dropped
    kueue.step()
    kueue.step()
    assert fleet.cluster_of(new) == "aws-use1-p5"
    cleared = fleet.hub.get(WORKLOADS, NS, new)
    assert cleared is not None and "nominatedClusterNames" not in cleared["status"]

    # Without force, an apply by a manager that does not own the field is refused with the API's conflict.
    from kubernetes.client.exceptions import ApiException

    third = fleet.submit("third")
    custom.patch_namespaced_custom_object_status(
        "kueue.x-k8s.io", "v1beta2", NS, "workloads", third, {"status": {"nominatedClusterNames": ["aws-use1-p5"]}})
    with pytest.raises(ApiException) as err:
        apply_workload_status(hub, NS, third, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                                               "metadata": {"name": third, "namespace": NS},
                                               "status": {"nominatedClusterNames": ["gcp-usc1-a3mega"]}},
                              field_manager="kueue-admission", force=False)
    assert err.value.status == 409
    assert 'conflict with "OpenAPI-Generator"' in json.loads(err.value.body)["message"]


def _offline(tmp_path: Path, names: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    """What one `placement dispatch --once --dry-run` decides for the whole burst on a fresh fleet."""
    other = Fleet(tmp_path / "offline")
    try:
        other.kueue.admit = {k: False for k in KEYS}
        for i, name in enumerate(names):
            other.submit(name, dataset=_dataset(i))
        code = main(["dispatch", "--once", "--dry-run", "--json", "--kubeconfig", str(other.hub_kubeconfig),
                     "--fleet", str(other.fleet_file), "--metrics-port", "0"])
        out = capsys.readouterr().out
        assert code == 0
        doc = json.loads(out)
        assert doc["kind"] == "dispatch" and doc["written"] is False
        return {d["workload"].split("/")[1]: d["clusters"][0] for d in doc["decisions"] if d["clusters"]}
    finally:
        other.close()


def _dataset(i: int) -> dict[str, Any]:
    homes = (("s3://d/x", "us-east-1"), ("gs://d/x", "us-central1"), ("gs://d/x", "europe-west4"))
    uri, region = homes[i % 3]
    return {"uri": uri, "region": region, "size_gb": 500 + 200 * (i % 5)}


def _burst(fleet: Fleet, names: list[str]) -> dict[str, tuple[str, ...]]:
    """Submit the burst in five waves, 0.3 s apart, and wait until every Workload is nominated."""
    for start in range(0, len(names), 10):
        for i in range(start, start + 10):
            fleet.submit(names[i], dataset=_dataset(i))
        if start == 20:
            fleet.hub.compact()  # watches that had not seen everything get 410 Gone and re-list
        time.sleep(0.3)
    return wait_for(lambda: (lambda n: n if all(n.get(f"job-{x}") for x in names) else None)(fleet.nominated()),
                    timeout=30)


def test_a_burst_of_50_lands_where_the_decision_function_says(fleet, tmp_path, capsys):
    (tmp_path / "offline").mkdir()
    names = [f"b{i:02d}" for i in range(50)]
    expected = _offline(tmp_path, names, capsys)
    assert len(expected) == 50 and len(set(expected.values())) == 3  # the burst spreads over the three workers

    fleet.kueue.admit = {k: False for k in KEYS}  # hold admission so every pass sees the state decide() modelled
    fleet.kueue.start()
    fleet.hub.drop_watch_after = 7  # every watch stream is cut after 7 events
    a, b = fleet.controller("replica-a").start(), fleet.controller("replica-b").start()
    wait_for(lambda: a.leading() or b.leading())
    got = _burst(fleet, names)
    # Passes over waves of arrivals decide what one pass over the whole burst decides.
    assert {k: v[0] for k, v in got.items()} == expected

    # One writer: every nomination came from the leader, and each Workload was nominated once.
    applies = [ap for ap in fleet.hub.applies if ap[2].startswith("gpufleet-dispatch/")]
    leader = "replica-a" if a.leading() else "replica-b"
    assert {ap[2] for ap in applies} == {f"gpufleet-dispatch/{leader}"}
    assert sorted(ap[1] for ap in applies) == sorted(f"job-{x}" for x in names)
    wait_for(lambda: len(fleet.events("Nominated")) == 50)  # each recorded right after its nomination

    # Admission on: each worker admits what its quota holds and the hub records it (Kueue clears the nomination).
    fleet.kueue.admit = {k: True for k in KEYS}
    per_worker = {k: min(6, sum(1 for v in got.values() if v == (k,))) for k in KEYS}  # 48 GPUs each, 8 per job
    admitted = wait_for(lambda: len(fleet.kueue.admissions) >= sum(per_worker.values()) and fleet.kueue.admissions,
                        timeout=20)
    time.sleep(0.3)
    assert not fleet.kueue.failures
    for name, worker in admitted:
        assert fleet.cluster_of(name) == worker == got[name][0]
    assert {k: sum(1 for _, w in fleet.kueue.admissions if w == k) for k in KEYS} == per_worker

    # An eviction is re-routed: a new nomination, away from the worker that evicted it, with an Event.
    name, worker = admitted[0]
    fleet.kueue.evict(worker, NS, name)
    moved = wait_for(lambda: (fleet.nominated().get(name) or (fleet.cluster_of(name),))[0], timeout=10)
    assert moved and moved != worker
    (event,) = wait_for(lambda: fleet.events("Renominated"))
    assert event["involvedObject"]["name"] == name and worker in event["message"]


def test_refused_and_failed_nominations_are_retried_without_duplicates(fleet):
    fleet.kueue.admit = {k: False for k in KEYS}
    fleet.kueue.start()
    fleet.hub.fail("PATCH", "/status", 500, times=3)  # the API server fails some nominations
    fleet.hub.fail("PATCH", "/status", 409, times=2)  # ... and reports others as conflicting
    c = fleet.controller("solo", lease=None).start()
    names = [f"r{i:02d}" for i in range(20)]
    got = _burst(fleet, names)
    wait_for(lambda: len(c.written) == len(names))  # the controller notes each write once the API answered
    applies = [ap for ap in fleet.hub.applies if ap[2].startswith("gpufleet-dispatch/")]
    assert sorted(ap[1] for ap in applies) == sorted(f"job-{x}" for x in names)  # each written once, in the end
    assert {f"{NS}/{k}": v for k, v in got.items()} == dict(c.written)
    assert c.metrics.write_errors.labels("500")._value.get() == 3
    assert c.metrics.write_errors.labels("409")._value.get() == 2


def test_a_4_node_job_is_dispatched_to_and_admitted_by_a_worker_that_borrows_its_inference_share(fleet):
    """The example workers' training queues own 3 of their 4 spot nodes (inferenceShare 0.25): a 4-node job
    fits only with the idle serving node lent by the worker's inference queue, as Kueue admits it."""
    fleet.kueue.start()
    fleet.controller("solo", lease=None).start()
    name = fleet.submit("big", gpus=32, clouds={"allow": ["aws"]})
    assert wait_for(lambda: fleet.cluster_of(name), timeout=20) == "aws-use1-p5"  # the only EFA worker
    (event,) = wait_for(lambda: fleet.events("Nominated"))  # recorded right after the nomination
    assert "borrows 8 GPUs" in event["message"]
    cq = fleet.workers["aws-use1-p5"].get(("kueue.x-k8s.io", "v1beta2", "clusterqueues"), "",
                                          "gpufleet-aws-use1-p5-gpu")
    (spot,) = [f for f in cq["status"]["flavorsReservation"] if f["name"] == "h100-spot"]
    assert spot["resources"][0]["total"] == "32" and spot["resources"][0]["borrowed"] == "8"


def test_a_worker_that_never_admits_is_left_after_the_deadline(fleet):
    fleet.kueue.admit = {"aws-use1-p5": False, "gcp-usc1-a3mega": True, "gcp-euw4-a3high": True}
    fleet.kueue.start()
    c = fleet.controller("solo", lease=None, settings=Settings(deadline_s=1.0))
    c.start()
    name = fleet.submit("stuck", dataset={"uri": "s3://d/x", "region": "us-east-1", "size_gb": 20000})
    first = wait_for(lambda: fleet.nominated().get(name), timeout=10)
    assert first == ("aws-use1-p5",)  # the data is next to it: the cheapest by far
    final = wait_for(lambda: fleet.cluster_of(name), timeout=10)
    assert final != "aws-use1-p5"
    # The Event follows the nomination it explains; the simulated Kueue may admit in between.
    (event,) = wait_for(lambda: fleet.events("DeadlinePassed"))
    assert event["type"] == "Warning" and "aws-use1-p5 did not admit within 1 s" in event["message"]
    assert c.metrics.renominations.labels("deadline")._value.get() == 1
    # From the first nomination to the admission, across the move (observed on the pass after it).
    assert wait_for(lambda: c.metrics.time_to_admission._sum.get()) > 1.0


def test_a_crashed_leaders_lease_is_taken_over(fleet):
    fleet.kueue.start()
    a = fleet.controller("replica-a").start()
    wait_for(a.leading, timeout=10)
    b = fleet.controller("replica-b").start()
    time.sleep(1.5)
    assert not b.leading()
    a.stop()  # a crash: the Lease is not released, it expires
    started = time.monotonic()
    wait_for(b.leading, timeout=10)
    assert time.monotonic() - started >= 1.0  # not before the lease ran out
    lease = fleet.hub.get(("coordination.k8s.io", "v1", "leases"), "kueue-system", "gpufleet-dispatch")
    assert lease is not None and lease["spec"]["holderIdentity"] == "replica-b"
    name = fleet.submit("after")
    wait_for(lambda: fleet.cluster_of(name), timeout=10)
    assert {ap[2] for ap in fleet.hub.applies if ap[1] == name and ap[2].startswith("gpufleet")} == {
        "gpufleet-dispatch/replica-b"}


def test_a_new_leader_resumes_the_round_from_the_events_and_never_goes_back(fleet):
    fleet.kueue.admit = {k: False for k in KEYS}  # no worker ever admits: every nomination misses the deadline
    fleet.kueue.start()
    clock = Clock()
    a = fleet.controller("replica-a", clock=clock).start()
    wait_for(a.leading, timeout=10)
    name = fleet.submit("resume", dataset={"uri": "s3://d/x", "region": "us-east-1", "size_gb": 20000})
    (first,) = wait_for(lambda: fleet.nominated().get(name), timeout=10)
    wait_for(lambda: fleet.events("Nominated"))  # recorded at the time of the nomination, not after the jump
    clock.t += 601  # past the 600 s deadline: a moves on to the next best
    (second,) = wait_for(lambda: (lambda n: n if n and n != (first,) else None)(fleet.nominated().get(name)))
    (moved,) = wait_for(lambda: fleet.events("DeadlinePassed"))
    assert moved["metadata"]["annotations"]["gpufleet.io/tried"] == ",".join(sorted({first, second}))
    a.stop()  # a crash: no memory handed over, the Lease expires

    b = fleet.controller("replica-b", clock=clock).start()
    wait_for(lambda: b.leading() and b.passes > 0, timeout=15)
    wl = fleet.hub.get(WORKLOADS, NS, name)
    assert wl is not None and b.memory[wl["metadata"]["uid"]].tried == {first, second}
    listed = [r.query.get("fieldSelector") for r in fleet.hub.requests
              if r.method == "GET" and r.path == "/api/v1/events" and r.agent == "gpufleet-dispatch/replica-b"]
    assert listed == [["source=gpufleet-dispatch"]]  # one LIST of its own Events on taking over
    clock.t += 601  # the second worker misses its deadline too
    (third,) = wait_for(lambda: (lambda n: n if n and n != (second,) else None)(fleet.nominated().get(name)))
    assert third not in (first, second)  # the one worker not tried in this round, not back to the first
    last = wait_for(lambda: [e for e in fleet.events("DeadlinePassed") if third in e["message"]])
    assert last[0]["reportingInstance"] == "replica-b" and f"{second} did not admit" in last[0]["message"]


def test_a_nominated_workload_met_without_memory_is_looked_up_by_its_uid(fleet):
    from placement.dispatch import memory
    from placement.dispatch.model import Memory

    clock = Clock()
    c = fleet.controller("solo", lease=None, clock=clock)
    c.run_once()  # the start-up recall: no Event yet
    name = fleet.submit("found")
    wl = fleet.hub.get(WORKLOADS, NS, name)
    assert wl is not None
    uid = wl["metadata"]["uid"]
    # Another replica nominated it to gcp-euw4-a3high after trying aws-use1-p5, and recorded so; this one never saw it.
    fleet.hub.apply_status(WORKLOADS, NS, name, {"status": snapshot.nomination(wl, ["gcp-euw4-a3high"])["status"]},
                           "kueue-admission", True)
    mem = Memory(nominated=("gcp-euw4-a3high",), since=clock(), tried=frozenset({"aws-use1-p5", "gcp-euw4-a3high"}),
                 first_at=clock() - 100)
    fleet.hub.create(("", "v1", "events"), {
        "metadata": {"name": f"{name}.other", "namespace": NS, "annotations": memory.as_annotations(mem, clock())},
        "involvedObject": {"kind": "Workload", "name": name, "namespace": NS, "uid": uid},
        "source": {"component": "gpufleet-dispatch"}, "reportingComponent": memory.REPORTING,
        "reportingInstance": "other", "reason": "DeadlinePassed", "message": "moved"})
    fleet.hub.create(("", "v1", "events"), {  # an Event of someone else on the same Workload
        "metadata": {"name": f"{name}.kueue", "namespace": NS},
        "involvedObject": {"kind": "Workload", "name": name, "namespace": NS, "uid": uid},
        "source": {"component": "kueue-admission"}, "reason": "QuotaReserved", "message": "reserved"})
    c.run_once()
    assert c.memory[uid] == mem
    (lookup,) = [r for r in fleet.hub.requests if r.method == "GET" and r.path == f"/api/v1/namespaces/{NS}/events"]
    assert lookup.query["fieldSelector"] == [f"involvedObject.uid={uid},source=gpufleet-dispatch"]
    clock.t += 601
    result = c.run_once()
    (d,) = [d for d in result.decisions if d.workload.name == name]
    assert d.reason == "DeadlinePassed" and d.clusters == ("gcp-usc1-a3mega",)  # not back to aws-use1-p5


def test_a_workload_whose_job_has_not_reached_the_cache_waits_for_it_and_is_priced_with_its_spec(fleet):
    """Kueue makes the Workload of an existing Job, but the two arrive on separate watches: a Workload met
    before its Job waits (never priced as a synthetic job while its spec is on the way); one whose Job is
    still missing after the grace (deleted, or a kind of owner not watched) is priced as the synthetic job."""
    from placement.dispatch.controller import OWNER_GRACE_S

    clock = Clock()
    c = fleet.controller("solo", lease=None, clock=clock)
    name = fleet.submit("late", dataset={"uri": "gs://d/x", "region": "europe-west4", "size_gb": 900})
    job = fleet.hub.get(("batch", "v1", "jobs"), NS, "late")
    assert job is not None
    fleet.hub.delete(("batch", "v1", "jobs"), NS, "late")  # as if its watch event were still in flight
    result = c.run_once()
    assert not [d for d in result.decisions if d.workload.name == name]  # waiting, not decided on a guess
    fleet.hub.create(("batch", "v1", "jobs"), {k: v for k, v in job.items() if k != "status"})
    (d,) = [d for d in c.run_once().decisions if d.workload.name == name]
    assert d.action == "nominate" and d.workload.job is not None and d.workload.job.dataset is not None

    other = fleet.submit("orphan")
    fleet.hub.delete(("batch", "v1", "jobs"), NS, "orphan")
    assert not [d for d in c.run_once().decisions if d.workload.name == other]
    clock.t += OWNER_GRACE_S + 60  # the Workload is older than the grace: its owner is gone, not late
    (d,) = [d for d in c.run_once().decisions if d.workload.name == other]
    assert d.action == "nominate" and d.workload.job is None


def test_the_fake_refuses_field_selectors_the_api_server_does_not_support(fleet):
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core = client.CoreV1Api(api_client(fleet.hub.kubeconfig()))
    assert core.list_event_for_all_namespaces(field_selector="source=x,involvedObject.uid=y").items == []
    with pytest.raises(ApiException) as err:
        core.list_event_for_all_namespaces(field_selector="message=x")
    assert err.value.status == 400 and "field label not supported: message" in err.value.body


@pytest.fixture
def own_secrets_fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Fleet]:
    """The fleet as the hub stack deploys it: every worker has the dispatcher's own read-only Secret."""
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    f = Fleet(tmp_path, fallback=None)
    yield f
    f.close()


def test_the_rbac_allows_every_call_the_controller_makes_and_grants_nothing_it_does_not_use(
        own_secrets_fleet: Fleet) -> None:
    """The rendered hub and worker RBAC against the requests of an end-to-end run: leader election from no
    Lease, worker kubeconfigs (one through MultiKueue's Secret), caches, the start-up Event recall, a
    nomination and its Event, a renewal."""
    from rbac import Attributes, Authorizer, calls

    from infra.k8s import dispatcher as dp

    fleet = own_secrets_fleet
    fleet.kueue.start()
    c = fleet.controller("replica-a", lease=dp.LEASE).start()
    wait_for(c.leading, timeout=10)
    name = fleet.submit("rbac")
    wait_for(lambda: fleet.cluster_of(name), timeout=10)
    wait_for(lambda: fleet.events("Nominated"))
    renewals = len([r for r in fleet.hub.requests if r.method == "PUT" and "/leases/" in r.path])
    wait_for(lambda: len([r for r in fleet.hub.requests if r.method == "PUT" and "/leases/" in r.path]) > renewals)
    c.stop()

    hub = Authorizer(dp.hub_cluster_rules(), {"kueue-system": dp.hub_namespace_rules(KEYS)})
    with fleet.hub.lock:
        hub_calls = calls(r for r in fleet.hub.requests if r.agent.startswith("gpufleet-dispatch/"))
    refused = sorted({str(a) for a in hub_calls if not hub.allows(a)})
    assert not refused, refused
    assert {a.kind for a in hub_calls} == hub.granted()  # and every verb it grants was needed
    secrets = {a.name for a in hub_calls if a.resource == "secrets"}
    assert secrets == {f"gpufleet-dispatch-{k}" for k in KEYS}  # each worker through its read-only Secret
    # MultiKueue's Secrets carry write-capable tokens: the dispatcher may not read them.
    assert not hub.allows(Attributes("get", "", "secrets", "kueue-system", "multikueue-aws-use1-p5"))
    # A name-limited rule allows neither reading another Secret nor listing them.
    assert not hub.allows(Attributes("get", "", "secrets", "kueue-system", "kueue-webhook-server-cert"))
    assert not hub.allows(Attributes("list", "", "secrets", "kueue-system", ""))
    assert not hub.allows(Attributes("get", "", "secrets", "team-a", "gpufleet-dispatch-aws-use1-p5"))

    worker = Authorizer(dp.worker_reader_rules(), {})
    # The dispatcher's calls (its Secrets' tokens), not those of `placement submit` creating the job's storage.
    worker_calls = [a for k in fleet.workers for a in calls(fleet.worker_requests(k))]
    assert worker_calls and all(worker.allows(a) for a in worker_calls)
    assert {a.kind for a in worker_calls} == worker.granted()


def test_live_prices_come_in_the_background_and_move_the_choice(fleet):
    import threading
    from dataclasses import replace

    from placement.dispatch.prices import LivePrices, LiveSettings
    from placement.files.inputs import load_catalog
    from placement.fleet.outputs import load_fleet
    from placement.live import LiveResult, Source
    from placement.model.catalog import Catalog
    from placement.model.quotas import QuotaTable

    gate = threading.Event()

    def clouds(request: Any, catalog: Catalog) -> LiveResult:
        gate.wait(20)  # a slow cloud
        dear = tuple(replace(o, spot_price=o.spot_price * 10 if o.spot_price else None,
                             price=o.price * 10 if o.price else None, price_source="aws-spot")
                     if (o.cloud, o.region) == ("aws", "us-east-1") else o for o in catalog.offers)
        return LiveResult(catalog=Catalog(dear, catalog.as_of, catalog.source), quotas=QuotaTable({}),
                          sources=[Source("aws", "ec2:spot-prices", "", "ok"), Source("gcp", "billing:skus", "", "ok")])

    metrics = Metrics()
    catalog = load_catalog([])
    prices = LivePrices(catalog, load_fleet(str(fleet.fleet_file)), LiveSettings(refresh_s=3600), metrics, fetch=clouds)
    c = fleet.controller("solo", lease=None, prices=prices, metrics=metrics).start()
    near = {"uri": "s3://d/x", "region": "us-east-1", "size_gb": 2000}
    first = fleet.submit("before", dataset=near)
    assert wait_for(lambda: fleet.nominated().get(first), timeout=10) == ("aws-use1-p5",)  # on catalog prices
    wait_for(lambda: c.passes > 0)
    assert c.pricing().source == "catalog"  # the pass went on while the clouds were slow
    gate.set()
    wait_for(lambda: c.pricing().source == "live")
    second = fleet.submit("after", dataset=near)
    assert wait_for(lambda: fleet.nominated().get(second), timeout=10) != ("aws-use1-p5",)  # 10x dearer now
    assert metrics.price_refreshes.labels("ok")._value.get() == 1
    assert 0 <= c.prices_age() < 60


def test_workers_are_read_through_their_secrets_and_healthz_and_metrics_answer(fleet):
    fleet.kueue.start()
    c = fleet.controller("solo", lease=None).start()
    server = HealthServer(c.metrics, c.healthy, 0, "127.0.0.1").start()
    try:
        name = fleet.submit("one")
        wait_for(lambda: fleet.cluster_of(name), timeout=10)
        assert c.workers["aws-use1-p5"].source == "gpufleet-dispatch-aws-use1-p5"
        assert c.workers["gcp-euw4-a3high"].source == "multikueue-gcp-euw4-a3high"  # no own Secret: MultiKueue's
        worker_gets = {r.headers.get("authorization") for k in fleet.workers for r in fleet.worker_requests(k)}
        assert worker_gets == {f"Bearer {k}-token" for k in KEYS}
        assert all(r.method == "GET" for k in fleet.workers for r in fleet.worker_requests(k))  # read-only
        health = urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=5)
        assert health.status == 200
        def scrape() -> str | None:
            text = urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5).read().decode()
            return text if "time_to_admission_seconds_count 1.0" in text else None

        text = wait_for(scrape)
        assert 'gpufleet_dispatch_decisions_total{reason="Nominated"} 1.0' in text
        assert "gpufleet_dispatch_time_to_admission_seconds_count 1.0" in text
        assert 'gpufleet_dispatch_worker_score_usd{worker="aws-use1-p5"}' in text
    finally:
        server.close()


def test_dispatch_command_exit_codes(fleet, tmp_path, capsys):
    base = ["dispatch", "--once", "--kubeconfig", str(fleet.hub_kubeconfig), "--fleet", str(fleet.fleet_file)]
    fleet.submit("cli")
    code = main(base)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "team-a/job-cli" in out and "Nominated" in out
    assert fleet.nominated()["job-cli"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"Not A Key": outputs("aws-use1-p5")}))
    for argv, needle in ((["--fleet", str(bad)], "Not A Key"),
                         (["--wait-usd-per-gpu-hour", "-1"], "--wait-usd-per-gpu-hour"),
                         (["--live", "--live-refresh-seconds", "0"], "--live-refresh-seconds"),
                         (["--live", "--timeout", "-1"], "--timeout"),
                         (["--lease", "x", "--lease-duration-seconds", "2"], "--lease-duration-seconds"),
                         (["--fleet", str(tmp_path / "missing.json")], "not found")):
        code = main([*base, *argv])
        out, err = capsys.readouterr()
        assert code == 2 and len(err.strip().splitlines()) == 1 and needle in err, (argv, err)
    unreachable = tmp_path / "down.kubeconfig"
    cfg = fleet.hub.kubeconfig()
    cfg["clusters"][0]["cluster"]["server"] = "http://127.0.0.1:9"
    unreachable.write_text(yaml.safe_dump(cfg))
    code = main(["dispatch", "--once", "--kubeconfig", str(unreachable), "--fleet", str(fleet.fleet_file)])
    out, err = capsys.readouterr()
    assert code == 1 and len(err.strip().splitlines()) == 1 and "cannot reach" in err


def test_metrics_registry_is_per_controller():
    assert Metrics().registry is not Metrics().registry


def test_a_job_submitted_without_a_checkpoint_size_is_nominated_and_its_move_priced_as_unknown(fleet, capsys):
    """Issue 39: what `submit --via-hub` renders for a job spec without a model or checkpoint.size_gb (a home, no
    size) is nominated, with progress too (the move priced as unknown); a size annotation a tenant broke is a
    warning on that Workload, read as unknown (the job spec's model then bounds it), never Unreadable."""
    from kubefake import JOBS

    name = fleet.submit("nosize")
    ann = fleet.hub.get(JOBS, NS, "nosize")["metadata"]["annotations"]
    assert "gpufleet.io/checkpoint-home" in ann and "gpufleet.io/checkpoint-gb" not in ann
    wl = fleet.hub.get(WORKLOADS, NS, name)
    status = dict(wl["status"], schedulingStats={"evictions": [{"reason": "Preempted", "underlyingCause": "",
                                                                "count": 1}]})
    fleet.hub.apply_status(WORKLOADS, NS, name, {"status": status}, "kueue-admission", True)  # it ran somewhere
    broken = fleet.submit("broken", model={"parameters_b": 7, "training": "full"})
    with fleet.hub.lock:
        fleet.hub.objects[JOBS][(NS, "broken")]["metadata"]["annotations"]["gpufleet.io/checkpoint-gb"] = "lots"
    argv = ["dispatch", "--once", "--dry-run", "--kubeconfig", str(fleet.hub_kubeconfig), "--fleet",
            str(fleet.fleet_file), "--metrics-port", "0"]
    assert main([*argv, "--json"]) == 0
    rows = {d["workload"]: d for d in json.loads(capsys.readouterr().out)["decisions"]}
    d = rows[f"{NS}/{name}"]
    assert d["action"] == "nominate" and d["warnings"] == []
    assert d["checkpoint"]["gb"] is None and d["checkpoint"]["home"] == ann["gpufleet.io/checkpoint-home"]
    fits = [s for s in d["scores"] if s["fits"]]
    assert fits and all(s["move_known"] is False and s["move_usd"] is None for s in fits)
    assert "of unknown size" in d["message"] and "not counted" in d["message"]
    b = rows[f"{NS}/{broken}"]
    assert b["action"] == "nominate" and b["reason"] == "Nominated"
    assert b["warnings"] and b["warnings"][0].startswith("gpufleet.io/checkpoint-gb: 'lots'")
    assert b["checkpoint"]["gb"] == 98 and b["checkpoint"]["gb_from"] == "model.parameters_b"
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert f"placement: warning: {NS}/{broken}: gpufleet.io/checkpoint-gb: 'lots'" in err
