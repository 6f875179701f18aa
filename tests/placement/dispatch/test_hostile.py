"""A dispatcher a shared hub can trust (issue 21): hostile and broken tenant data, kubeconfig Secrets, echoed
credentials, forged memory and slow workers, against the fake hub and workers (``dispatchfleet``)."""

from __future__ import annotations

import io
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from dispatchfleet import KEYS, NS, Fleet
from kubefake import CLUSTERQUEUES, WORKLOADS, Fault, secret

from placement.commands.main import main
from placement.dispatch import memory
from placement.dispatch.controller import summarize, worker_problems
from placement.dispatch.telemetry import JsonFormatter, Metrics
from placement.fleet.manifests import JOB_SPEC_ANNOTATION

JOBS = ("batch", "v1", "jobs")
EVENTS = ("", "v1", "events")


def _edit(fleet: Fleet, gvp: tuple[str, str, str], name: str, change: Any, api: Any = None) -> None:
    """Change a stored object in place, as a tenant (or a broken controller) would have written it."""
    api = api or fleet.hub
    with api.lock:
        change(api.objects[gvp][(NS if gvp[2] != "clusterqueues" else "", name)])


def _worker_cq(fleet: Fleet, key: str) -> str:
    return str(fleet.workers[key].list(CLUSTERQUEUES)[0]["metadata"]["name"])


def _reasons(fleet: Fleet, name: str) -> dict[str, str]:
    return {e["reason"]: e["message"] for e in fleet.events() if e["involvedObject"]["name"] == name}


# ----------------------------------------------------------------------------- isolation per object


def test_one_tenants_bad_objects_never_stop_the_pass_for_the_others(fleet: Fleet) -> None:
    good = fleet.submit("good")
    nested = fleet.submit("nested")  # a 200 KB job-spec annotation of nested '[' (RecursionError)
    _edit(fleet, JOBS, "nested", lambda o: o["metadata"]["annotations"].update({JOB_SPEC_ANNOTATION: "[" * 200_000}))
    huge = fleet.submit("huge")  # memory "1e400" (OverflowError)

    def overflow(o: dict[str, Any]) -> None:
        o["status"]["admission"]["podSetAssignments"][0]["resourceUsage"]["memory"] = "1e400"

    _edit(fleet, WORKLOADS, huge, overflow)
    newer = fleet.submit("newer")  # allowed only on GCP europe-west4, with a field from a newer submit

    def future(o: dict[str, Any]) -> None:
        spec = json.loads(o["metadata"]["annotations"][JOB_SPEC_ANNOTATION])
        spec.update(clouds=["gcp"], regions=["europe-west4"], warp_drive={"enabled": True})
        o["metadata"]["annotations"][JOB_SPEC_ANNOTATION] = json.dumps(spec)

    _edit(fleet, JOBS, "newer", future)
    # A worker ClusterQueue with a reservation total "lots": that worker is unreadable, not the pass.
    aws = "aws-use1-p5"

    def lots(o: dict[str, Any]) -> None:
        o["status"] = {"flavorsReservation": [{"name": "x", "resources": [{"name": "nvidia.com/gpu",
                                                                          "total": "lots"}]}]}

    _edit(fleet, CLUSTERQUEUES, _worker_cq(fleet, aws), lots, fleet.workers[aws])
    metrics = Metrics()
    c = fleet.controller("solo", lease=None, metrics=metrics)
    c.run_once()
    nominated = fleet.nominated()
    assert nominated[good] and nominated[good][0] != aws  # the good one, on a readable worker
    assert not nominated[nested] and not nominated[huge] and not nominated[newer]  # never guessed
    assert "nested too deeply" in _reasons(fleet, nested)["Unreadable"]
    assert "cannot be read" in _reasons(fleet, huge)["Unreadable"]
    assert "warp_drive" in _reasons(fleet, newer)["Unreadable"] and "newer" in _reasons(fleet, newer)["Unreadable"]
    # The unreadable worker: a WorkerUnreadable condition, metric and Event on its MultiKueueCluster.
    assert any(p.startswith(f"{aws}: WorkerUnreadable") for p in worker_problems(c))
    assert f'gpufleet_dispatch_worker_unreadable{{worker="{aws}"}} 1.0' in metrics.text().decode()
    (ev,) = [e for e in fleet.events("WorkerUnreadable") if e["involvedObject"]["name"] == aws]
    assert ev["involvedObject"]["kind"] == "MultiKueueCluster" and "cannot be read" in ev["message"]
    # A second pass reports nothing new: each problem is an Event once.
    before = len(fleet.events())
    c.run_once()
    assert len(fleet.events()) == before


def test_a_reservation_given_as_a_mapping_makes_only_that_worker_unreadable(fleet: Fleet) -> None:
    good = fleet.submit("good")
    key = "gcp-usc1-a3mega"
    _edit(fleet, CLUSTERQUEUES, _worker_cq(fleet, key), lambda o: o.update(status={"flavorsReservation": {"a": 1}}),
          fleet.workers[key])
    c = fleet.controller("solo", lease=None)
    c.run_once()
    assert fleet.nominated()[good] and fleet.nominated()[good][0] != key
    assert any(p.startswith(f"{key}: WorkerUnreadable") for p in worker_problems(c))


def test_list_items_that_are_not_objects_are_dropped_and_the_good_one_is_nominated(fleet: Fleet) -> None:
    good = fleet.submit("good")
    items = fleet.hub.list(WORKLOADS)
    body = json.dumps({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadList",
                       "metadata": {"resourceVersion": str(fleet.hub.rv)},
                       "items": [1, "x", None, [], {"metadata": []}, *items]}).encode()
    fleet.hub.answer_raw("GET", "/workloads", 200, "application/json", body)
    c = fleet.controller("solo", lease=None)
    c.run_once()
    assert fleet.nominated()[good]


def test_a_hub_list_answered_by_a_login_page_is_one_line_exit_1(fleet: Fleet, capsys: pytest.CaptureFixture[str]
                                                                ) -> None:
    fleet.submit("good")
    fleet.hub.answer_raw("GET", "/workloads", 200, "text/html", b"<html><body>Sign in</body></html>", times=5)
    code = main(["dispatch", "--once", "--kubeconfig", str(fleet.hub_kubeconfig), "--fleet", str(fleet.fleet_file),
                 "--metrics-port", "0", "--log-level", "error"])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert [ln for ln in err.splitlines() if ln.startswith("placement: error:")] == [
        "placement: error: hub API: answer of type text/html, not JSON (a proxy's login page?)"]


# ----------------------------------------------------------------------------- kubeconfigs as data


def test_a_worker_secret_with_an_exec_plugin_or_a_token_file_is_refused_and_never_run(fleet: Fleet,
                                                                                      tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    own = tmp_path / "hub-token"
    own.write_text("the-pods-own-hub-token-0001")
    key_exec, key_file = "aws-use1-p5", "gcp-usc1-a3mega"
    for key, user in ((key_exec, {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "sh",
                                           "args": ["-c", f"touch {marker}; echo '{{}}'"]}}),
                      (key_file, {"tokenFile": str(own)})):
        doc = fleet.workers[key].kubeconfig()
        doc["users"][0]["user"] = user
        fleet.hub.delete(("", "v1", "secrets"), "kueue-system", f"gpufleet-dispatch-{key}")
        fleet.hub.create(("", "v1", "secrets"), secret(f"gpufleet-dispatch-{key}", "kueue-system",
                                                       {"kubeconfig": yaml.safe_dump(doc)}))
    good = fleet.submit("good")
    c = fleet.controller("solo", lease=None)
    c.run_once()
    assert not marker.exists()  # the command never ran
    for key in (key_exec, key_file):  # nothing reached the worker: not its queues, not the hub's token
        assert not fleet.worker_requests(key)
    problems = "\n".join(worker_problems(c))
    assert "user.exec runs a command" in problems and "user.tokenFile reads a file" in problems
    events = {e["involvedObject"]["name"]: e["message"] for e in fleet.events("WorkerUnreadable")}
    assert "exec" in events[key_exec] and "tokenFile" in events[key_file]
    assert fleet.nominated()[good] == ("gcp-euw4-a3high",)  # the one worker whose Secret is data


# ----------------------------------------------------------------------------- nothing secret leaves


def test_no_credential_reaches_a_log_line_an_event_a_metric_or_the_output(fleet: Fleet, tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    hub_token = "hub-secret-token-4242"
    tokens = [hub_token, *(f"{k}-token" for k in KEYS)]
    hub_cfg = fleet.hub.kubeconfig(token=hub_token)
    good = fleet.submit("good")
    # Every worker answers 403 echoing the request's Authorization header (as some proxies do).
    for k in KEYS:
        fleet.workers[k].faults.append(Fault("GET", "/clusterqueues", 403, 1,
                                             f"forbidden: Authorization: Bearer {k}-token; token={k}-token"))
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("gpufleet")
    logger.addHandler(handler)
    old = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        from placement.fleet.kube import api_client

        metrics = Metrics()
        c = fleet.controller("solo", lease=None, metrics=metrics)
        c.hub_api = api_client(hub_cfg)
        first = c.run_once()  # no worker readable: NoWorkerFits, whose message names each worker's error
        # The hub refuses the nomination, echoing its own token.
        fleet.hub.faults.append(Fault("PATCH", f"/workloads/{good}/status", 403, 1,
                                      f"Authorization: Bearer {hub_token} is forbidden; raw {hub_token}"))
        second = c.run_once()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)
    assert _reasons(fleet, good).get("NoWorkerFits")
    outputs = [stream.getvalue(), metrics.text().decode(), json.dumps(summarize(first)), json.dumps(summarize(second)),
               "\n".join(worker_problems(c)), json.dumps(fleet.events())]
    assert "nomination refused" in outputs[0] and "403" in outputs[0]
    # The command itself, as the Deployment runs it: its JSON, its table and its stderr (JSON logs included).
    hub_file = tmp_path / "hub-secret.kubeconfig"
    hub_file.write_text(yaml.safe_dump(hub_cfg))
    for as_json in (True, False):
        for k in KEYS:
            fleet.workers[k].faults.append(Fault("GET", "/clusterqueues", 403, 1, f"echo: Bearer {k}-token {k}-token"))
        main(["dispatch", "--once", "--dry-run", "--kubeconfig", str(hub_file), "--fleet", str(fleet.fleet_file),
              "--metrics-port", "0", "--log-level", "debug", *(["--json"] if as_json else [])])
        out, err = capsys.readouterr()
        assert "echo: [redacted]" in out + err  # the worker's error reached the output, masked
        outputs += [out, err]
    for text in outputs:
        for token in tokens:
            assert token not in text


# ----------------------------------------------------------------------------- memory that cannot be forged


def test_an_event_forged_in_another_namespace_is_not_recalled(fleet: Fleet) -> None:
    name = fleet.submit("victim")
    wl = fleet.hub.get(WORKLOADS, NS, name)
    assert wl is not None
    uid = wl["metadata"]["uid"]
    now = time.time()
    forged = memory.as_annotations(memory.Memory(nominated=(), since=now, tried=frozenset(KEYS), first_at=0.0),
                                   now)
    fleet.hub.create(EVENTS, {  # team-b writes an Event in team-b naming team-a's Workload by uid
        "metadata": {"name": "forged", "namespace": "team-b", "annotations": forged},
        "involvedObject": {"kind": "Workload", "name": name, "namespace": "team-b", "uid": uid},
        "source": {"component": "gpufleet-dispatch"}, "reportingComponent": memory.REPORTING,
        "reportingInstance": "x", "reason": "Nominated", "message": "forged"})
    metrics = Metrics()
    c = fleet.controller("solo", lease=None, metrics=metrics)
    c.run_once()
    assert fleet.nominated()[name]  # nominated as if the forged memory did not exist
    assert uid not in c.memory or c.memory[uid].tried != frozenset(KEYS)


# ----------------------------------------------------------------------------- bounded reads


@pytest.mark.parametrize("mode", ["hang", "trickle"])
def test_a_worker_that_never_answers_delays_the_pass_by_at_most_its_deadline(fleet: Fleet, mode: str) -> None:
    good = fleet.submit("good")
    slow = "gcp-usc1-a3mega"
    c = fleet.controller("base", lease=None, dry_run=True, worker_timeout_s=1.0)
    started = time.monotonic()
    c.run_once()
    baseline = time.monotonic() - started
    fleet.workers[slow].stalls["/clusterqueues"] = mode
    c = fleet.controller("solo", lease=None, worker_timeout_s=1.0)
    started = time.monotonic()
    c.run_once()
    took = time.monotonic() - started
    assert took <= baseline + 1.0 + 1.5  # its deadline, and the loopback's scheduling noise
    # Stale for the pass: cut off at its deadline (a trickle) or not waited for any longer (no answer at all).
    assert any(p.startswith(f"{slow}: no answer within 1 s") for p in worker_problems(c))
    assert fleet.nominated()[good] and fleet.nominated()[good][0] != slow


def test_the_pass_deadline_bounds_the_reads_of_every_worker_together(fleet: Fleet) -> None:
    good = fleet.submit("good")
    for api in fleet.workers.values():
        api.stalls["/workloads"] = "hang"
    c = fleet.controller("solo", lease=None, dry_run=True, worker_timeout_s=30.0, pass_timeout_s=2.0)
    started = time.monotonic()
    result = c.run_once()
    assert time.monotonic() - started < 2.0 + 2.5  # the pass deadline, not 3 workers x 30 s
    assert len(worker_problems(c)) == 3
    (d,) = [d for d in result.decisions if d.workload.name == good]
    assert d.reason == "NoWorkerFits" and not d.clusters


def test_a_watched_worker_silent_for_three_watch_timeouts_is_not_scored(fleet: Fleet) -> None:
    first, second = fleet.submit("first"), fleet.submit("second")
    c = fleet.controller("solo", lease=None, dry_run=True)
    result = c.run_once()
    chosen = next(d.clusters[0] for d in result.decisions if d.workload.name == first)
    for inf in c.workers[chosen].informers.values():
        inf.last_ok -= c._stale_after() + 1  # its watches have delivered nothing, not even their timeouts
    again = c.reconcile()
    assert all(d.clusters and d.clusters[0] != chosen for d in again.decisions if d.workload.name == second)
    assert any(p.startswith(f"{chosen}: no answer for") for p in worker_problems(c))


def test_the_long_running_controller_nominates_the_good_one_beside_a_hostile_one(fleet: Fleet) -> None:
    from kubefake import wait_for

    fleet.submit("nested")
    _edit(fleet, JOBS, "nested", lambda o: o["metadata"]["annotations"].update({JOB_SPEC_ANNOTATION: "[" * 200_000}))
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logging.getLogger("gpufleet").addHandler(handler)
    try:
        c = fleet.controller("solo", lease=None).start()
        good = fleet.submit("good")
        wait_for(lambda: fleet.nominated().get(good), timeout=20)
        wait_for(lambda: fleet.events("Unreadable"), timeout=10)
        c.stop()
    finally:
        logging.getLogger("gpufleet").removeHandler(handler)
    assert "reconcile pass failed" not in stream.getvalue()


# ----------------------------------------------------------------------------- --once


def test_once_with_a_lease_reports_what_it_wrote(fleet: Fleet, capsys: pytest.CaptureFixture[str]) -> None:
    good = fleet.submit("good")
    code = main(["dispatch", "--once", "--json", "--lease", "gpufleet-dispatch", "--kubeconfig",
                 str(fleet.hub_kubeconfig), "--fleet", str(fleet.fleet_file), "--metrics-port", "0",
                 "--log-level", "error", "--retry-period-seconds", "1", "--renew-deadline-seconds", "2",
                 "--lease-duration-seconds", "3"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out, parse_constant=lambda c: pytest.fail(f"--json printed {c}"))
    assert fleet.nominated()[good]  # it wrote...
    assert doc["written"] is True and "nothing written" not in err  # ...and says so


@pytest.mark.parametrize("flag, value", [("--wait-usd-per-gpu-hour", "1e308"), ("--default-hours", "1e300"),
                                         ("--worker-timeout-seconds", "inf"), ("--admission-deadline-seconds", "nan"),
                                         ("--lease-duration-seconds", "99999999")])
def test_numeric_flags_are_bounded(fleet: Fleet, capsys: pytest.CaptureFixture[str], flag: str, value: str) -> None:
    code = main(["dispatch", "--once", "--json", "--kubeconfig", str(fleet.hub_kubeconfig), "--fleet",
                 str(fleet.fleet_file), "--metrics-port", "0", flag, value])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and flag in err


# ----------------------------------------------------------------------------- property: a good one always goes

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

json_value = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8) | st.sampled_from(["1e400", "lots", "-1", "8", "32Gi", "Pending", "True", "all-workers"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> None:
    for p in path[:-1]:
        doc = doc[p]
    doc[path[-1]] = value


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The hub's and the workers' objects with one good Workload waiting, read once from the fake fleet."""
    import os

    saved = {v: os.environ.pop(v) for v in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
             if v in os.environ}
    f = Fleet(tmp_path_factory.mktemp("world"))
    try:
        f.submit("good")
        hub = {p: f.hub.list(("kueue.x-k8s.io", "v1beta2", p)) for p in
               ("workloads", "clusterqueues", "admissionchecks", "multikueueclusters", "multikueueconfigs")}
        hub["jobs"] = f.hub.list(JOBS)
        hub["jobsets"] = []
        workers = {k: {p: api.list(("kueue.x-k8s.io", "v1beta2", p))
                       for p in ("clusterqueues", "localqueues", "workloads", "resourceflavors")}
                   for k, api in f.workers.items()}
        yield {"hub": hub, "workers": workers, "fleet_file": str(f.fleet_file)}
    finally:
        f.close()
        os.environ.update(saved)


class _Api:
    """Stands in for the hub's ApiClient: an offline pass never calls it."""

    user_agent = ""


def _offline_pass(world: dict[str, Any], hub_extra: dict[str, list[Any]], worker_extra: dict[str, list[Any]]
                  ) -> dict[str, tuple[str, ...]]:
    """One pass of the real controller's snapshots and decision over the world's objects plus the extras."""
    from placement.dispatch.controller import WORKER, Controller, Options, _Worker
    from placement.dispatch.decide import decide
    from placement.dispatch.model import Pricing
    from placement.files.inputs import load_catalog
    from placement.fleet.kube import Informer
    from placement.fleet.outputs import load_fleet

    pricing = Pricing(tuple(load_catalog([]).offers))
    c = Controller(_Api(), Options(fleet=load_fleet(world["fleet_file"]), pricing=pricing, identity="fuzz",
                                   lease=None, dry_run=True))

    def fill(inf: Informer, objs: list[Any]) -> None:
        # What a list answer leaves in the cache (kube.parse_list drops items that are not objects).
        inf._items = {inf._key(o): o for o in objs if isinstance(o, dict) and isinstance(o.get("metadata"), dict)}
        inf.synced = True
        inf.last_ok = time.monotonic()  # just listed

    for plural, inf in c.hub.items():
        fill(inf, [*world["hub"][plural], *hub_extra.get(plural, [])])
    c._mkc_uids = {k: "" for k in world["workers"]}
    for key, objs in world["workers"].items():
        infs = {p: Informer(_Api(), res) for p, res in WORKER.items()}
        for p, inf in infs.items():
            fill(inf, [*objs[p], *(worker_extra.get(p, []) if key == "aws-use1-p5" else [])])
        c.workers[key] = _Worker(key, None, "s", infs)
    workloads, _, workers = c.snapshots()
    result = decide(workloads, workers, c.pricing(), time.time(), c.options.settings, {})
    return {d.workload.name: d.clusters for d in result.decisions if d.action == "nominate"}


def _hostile(pool: list[dict[str, Any]], base_index: int, data: Any) -> Any:
    """A copy of one of ``pool``'s objects with one field replaced by an arbitrary value, renamed."""
    import copy

    obj = copy.deepcopy(pool[base_index % len(pool)]) if pool else {}
    paths = [p for p in _paths(obj) if p[:1] != ("metadata",) or p[:2] == ("metadata", "annotations")]
    if paths:
        _set(obj, data.draw(st.sampled_from(paths)), data.draw(json_value))
    meta = obj.setdefault("metadata", {}) if isinstance(obj, dict) else {}
    if isinstance(meta, dict):
        meta.update(name=f"hostile-{base_index}", uid=f"uid-hostile-{base_index}")
    return obj


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(data=st.data())
def test_arbitrary_objects_beside_a_good_one_never_stop_its_nomination(world: dict[str, Any], data: Any) -> None:
    hub_extra: dict[str, list[Any]] = {}
    for i in range(data.draw(st.integers(1, 4))):
        plural = data.draw(st.sampled_from(["workloads", "jobs", "clusterqueues", "multikueueconfigs",
                                            "admissionchecks"]))
        shaped = data.draw(st.booleans())  # a real object with one field gone wrong, or anything at all
        hub_extra.setdefault(plural, []).append(_hostile(world["hub"][plural], i, data) if shaped
                                                else data.draw(json_value))
    worker_extra: dict[str, list[Any]] = {}
    for i, plural in enumerate(data.draw(st.lists(st.sampled_from(
            ["clusterqueues", "localqueues", "workloads", "resourceflavors"]), max_size=2))):
        own = world["workers"]["aws-use1-p5"][plural]
        worker_extra.setdefault(plural, []).append(_hostile(own, i, data) if data.draw(st.booleans())
                                                   else data.draw(json_value))
    nominated = _offline_pass(world, hub_extra, worker_extra)
    assert nominated.get("job-good"), nominated
