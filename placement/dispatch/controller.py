"""The dispatcher's Kubernetes side: watch the hub and the workers, decide, nominate, record Events.

On the hub it watches Workloads, ClusterQueues, AdmissionChecks, MultiKueueClusters and MultiKueueConfigs,
and the Jobs/JobSets ``placement submit`` labelled (their annotations carry the job spec and the group).
Workers are the hub's MultiKueueClusters: each is read through Secret ``gpufleet-dispatch-<key>`` (key
``kubeconfig``, a read-only identity), else the MultiKueueCluster's own kubeconfig Secret, watching its
ClusterQueues, LocalQueues, Workloads and ResourceFlavors.

Every change (debounced), every ``resync_s`` and at the next admission deadline, the leader runs one pass:
snapshots (:mod:`placement.dispatch.snapshot`) -> :func:`placement.dispatch.decide.decide` -> for each
nomination a server-side apply of ``workloads/status`` as ``kueue-admission`` with force and the
Workload's resourceVersion (a 409 means it changed: the next pass decides again), and an Event. Only the
replica holding the Lease writes, and only while its lease is fresh; the standby keeps its caches warm.
Prices are the catalog's (``Options.pricing``) or, with ``--live``, those a
:class:`~placement.dispatch.prices.LivePrices` keeps current in its own thread: a pass never waits for a cloud.

What the dispatcher remembers per Workload (the workers tried in this round, when the nomination started,
what it last reported) lives in memory and, durably, on the Events it records: each carries that memory as
annotations (:mod:`placement.dispatch.memory`); the RBAC of the contract lets it write only
``workloads/status`` and Events. When a replica starts or becomes leader it lists the Events of its own
component once (field selector ``source=gpufleet-dispatch``) and resumes every waiting Workload from its
newest one; a waiting Workload met later without memory (nominated, or evicted) is looked up by
``involvedObject.uid``. Without an Event (expired after the API server's event TTL, 1 h by default) the
nomination's start is still read back from the Workload's ``managedFields`` (the time ``kueue-admission``
last applied it), so a restart never restarts the deadline clock; only an older round's tried workers are
forgotten.

Everything read is hostile data: each Workload, owner annotation and worker snapshot is parsed on its own (a
bad one is an ``Unreadable`` Event on that Workload, or ``WorkerUnreadable`` for a worker: metric, Event on
its MultiKueueCluster, last good snapshot or none), worker kubeconfig Secrets are loaded as data only
(:func:`placement.fleet.kube.static_kubeconfig`), every log line, Event and output passes
:mod:`placement.fleet.redact`, Events count as memory only from the Workload's own namespace and within the
clock-skew tolerance (:func:`placement.dispatch.memory.trusted`), and every worker read has a deadline: a
worker that misses it is stale for the pass, never waited on.

Why one module: :class:`Controller` owns a pass's shared state (informers, lease, memory, stale workers) from the
watch to the Event; the pure parts already live apart (:mod:`~placement.dispatch.snapshot`,
:mod:`~placement.dispatch.decide`, :mod:`~placement.dispatch.memory`, :mod:`~placement.dispatch.prices`).
"""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from placement.dispatch import memory as remembered
from placement.dispatch import snapshot
from placement.dispatch.decide import ADMITTED, DEADLINE, NO_FIT, RENOMINATED, UNREADABLE, decide
from placement.dispatch.gcsettings import deciding
from placement.dispatch.leader import Elector
from placement.dispatch.model import (
    CheckpointHome,
    Decision,
    HubWorkload,
    Memory,
    PassResult,
    Pricing,
    Settings,
    WorkerState,
)
from placement.dispatch.observe import NodeTally, SpotNode, observe_nodes, queue_events, spot_node, spot_nodes
from placement.dispatch.telemetry import Metrics
from placement.fleet.errors import FleetError
from placement.fleet.kube import (
    KUEUE_GROUP,
    KUEUE_VERSION,
    Informer,
    Resource,
    Unreadable,
    api_client,
    api_message,
    apply_workload_status,
    create_event,
    is_unreachable,
    list_events,
    read_secret_key,
)
from placement.fleet.manifests import JOB_LABEL, JOBSET_GROUP, JOBSET_VERSION
from placement.fleet.redact import redact, redact_value
from placement.fleet.stacks import ClusterStack
from placement.model import kueue as ko

if TYPE_CHECKING:
    from placement.dispatch.prices import LivePrices

log = logging.getLogger("gpufleet.dispatch")

COMPONENT = ko.DISPATCH_NAME
UNHEALTHY_AFTER_S = 300.0  # /healthz fails when the hub has not answered for this long
WORKER_SYNC_GRACE_S = 10.0  # a newly connected worker is waited for this long before passes go on without it
RECALL_ONE_BY_ONE = 8  # Workloads without memory a pass looks up one LIST each; more take one cluster-wide LIST
RECALL_RETRY_S = 30.0  # after a failed Event LIST, passes go on without it for this long before trying again
WORKER_TIMEOUT_S = 10.0  # default deadline of one worker's reads (--worker-timeout-seconds)
PASS_TIMEOUT_S = 60.0  # default deadline of a whole --once pass's reads (--pass-timeout-seconds)
LATE = "late"  # a read left behind at its deadline (:meth:`Controller._kubeconfigs`)
# A new Workload whose Job/JobSet is not in the hub's cache yet waits this long (seconds) for it: Kueue makes the
# Workload of an existing owner, but the two reach the dispatcher on separate watches, and a Workload decided
# before its owner arrives would be priced as a synthetic job (no spec, no dataset). Past it, or for a Workload
# older than this, an absent owner means a deleted or foreign one and the synthetic job is priced.
OWNER_GRACE_S = 10.0
STALE_AFTER_S = 600.0  # a worker snapshot older than this is not scored (its reads keep failing)

HUB = {
    "workloads": Resource(KUEUE_GROUP, KUEUE_VERSION, "workloads"),
    "clusterqueues": Resource(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues"),
    "admissionchecks": Resource(KUEUE_GROUP, KUEUE_VERSION, "admissionchecks"),
    "multikueueclusters": Resource(KUEUE_GROUP, KUEUE_VERSION, "multikueueclusters"),
    "multikueueconfigs": Resource(KUEUE_GROUP, KUEUE_VERSION, "multikueueconfigs"),
    "jobs": Resource("batch", "v1", "jobs", label_selector=JOB_LABEL),
    "jobsets": Resource(JOBSET_GROUP, JOBSET_VERSION, "jobsets", label_selector=JOB_LABEL),
}
WORKER = {plural: Resource(KUEUE_GROUP, KUEUE_VERSION, plural)
          for plural in ("clusterqueues", "localqueues", "workloads", "resourceflavors")}
# Observed for the plans (placement/dispatch/observe.py), never needed to decide: a worker whose nodes cannot be
# read is still scored, only not observed.
NODES = Resource("", "v1", "nodes")


@dataclass(frozen=True)
class Options:
    """How one dispatcher runs (the ``placement dispatch`` flags)."""

    fleet: tuple[ClusterStack, ...]
    pricing: Pricing
    identity: str
    namespace: str = ko.KUEUE_NAMESPACE
    lease: str | None = ko.DISPATCH_NAME
    settings: Settings = field(default_factory=Settings)
    resync_s: float = 30.0
    debounce_s: float = 0.2
    lease_duration_s: int = 15
    renew_deadline_s: int = 10
    retry_period_s: int = 2
    watch_timeout_s: int = 60
    dry_run: bool = False
    worker_timeout_s: float = WORKER_TIMEOUT_S  # each worker's reads, in all
    pass_timeout_s: float = PASS_TIMEOUT_S  # a --once pass's reads, in all


def _now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class _Worker:
    """A worker's client and its informers."""

    def __init__(self, key: str, api: Any, source: str, informers: dict[str, Informer],
                 nodes: Informer | None = None) -> None:
        self.key = key
        self.api = api
        self.source = source  # the Secret its kubeconfig came from
        self.informers = informers
        self.nodes = nodes  # its Nodes, observed (spot node-hours and reclaims), not used to decide
        self.threads: list[threading.Thread] = []
        self.stop = threading.Event()
        self.connected_at = time.monotonic()
        self.stale: str | None = None  # why its reads missed their deadline in this pass (--once)


class Controller:
    """One dispatcher replica. :meth:`start` runs it in threads; :meth:`run_once` does one pass and returns."""

    def __init__(self, hub_api: Any, options: Options, metrics: Metrics | None = None,
                 clock: Callable[[], float] = time.time, prices: LivePrices | None = None) -> None:
        self.hub_api = hub_api
        self.options = options
        hub_api.user_agent = f"{COMPONENT}/{options.identity}"  # the API server's audit log names the replica
        self.metrics = metrics or Metrics()
        self.clock = clock
        self.prices = prices  # live prices (--live), refreshed in their own thread; else options.pricing
        self.metrics.prices_age.set_function(self.prices_age)
        self.memory: dict[str, Memory] = {}
        self.fleet = {c.stack: c for c in options.fleet}
        self._kick = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()  # one pass at a time
        self.hub = {name: Informer(hub_api, res, on_change=self._kick.set, watch_timeout_s=options.watch_timeout_s,
                                   name=f"hub/{name}") for name, res in HUB.items()}
        self.workers: dict[str, _Worker] = {}
        self.worker_errors: dict[str, str] = {}
        self.elector: Elector | None = None
        self._threads: list[threading.Thread] = []
        self.passes = 0
        self.last_result: PassResult | None = None
        self.written: list[tuple[str, tuple[str, ...]]] = []  # (workload key, clusters) of successful nominations
        self._recall_all = True  # list this component's Events before the next pass (start, new leadership)
        self._recall_retry_at = 0.0
        self._recalled: set[str] = set()  # uids already looked up in Events
        self.last_good: dict[str, tuple[WorkerState, float]] = {}  # worker -> its last readable snapshot, when
        self.worker_conditions: dict[str, str] = {}  # worker -> WorkerUnreadable message (this pass)
        self.last_pass_leading = False  # whether the last pass ran as the leader (so could write)
        self._worker_noted: dict[str, str] = {}  # worker -> the problem last recorded as an Event on it
        # Observation (observe()): per worker its last spot-node tally, the spot nodes deleted since, the gauge
        # label sets shown; what was counted (so not again), and since when (a restart does not count again).
        self._observed_lock = threading.Lock()
        self._tallies: dict[str, NodeTally] = {}
        self._deleted: dict[str, list[SpotNode]] = {}
        self._gauged: dict[str, set[tuple[str, str]]] = {}
        self._counted: set[str] = set()
        self._observe_since = clock()
        self._mkc_uids: dict[str, str] = {}
        self._no_owner: dict[str, float] = {}  # Workload uid -> time.monotonic() first seen without its owner
        self._owner_waits = 0  # Workloads the last snapshot left out, waiting for their owner

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Controller:
        """Start the informers, the live prices, the election and the reconcile loop (daemon threads)."""
        for name, inf in self.hub.items():
            self._spawn(inf.run, f"hub-{name}", self._stop)
        if self.prices is not None:
            self._spawn(self.prices.run, "prices", self._stop)
        if self.options.lease:
            self.elector = Elector(self.hub_api, self.options.lease, self.options.namespace, self.options.identity,
                                   lease_duration_s=self.options.lease_duration_s,
                                   renew_deadline_s=self.options.renew_deadline_s,
                                   retry_period_s=self.options.retry_period_s, on_change=self._on_leading).start()
        else:
            self.metrics.leader.set(1)
        self._spawn(self._loop, "reconcile", self._stop)
        return self

    def _spawn(self, target: Callable[[threading.Event], None], name: str, stop: threading.Event,
               into: list[threading.Thread] | None = None) -> None:
        t = threading.Thread(target=target, args=(stop,), name=f"{self.options.identity}-{name}", daemon=True)
        t.start()
        (self._threads if into is None else into).append(t)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop every thread; the Lease is left to expire (as after a crash)."""
        self._stop.set()
        self._kick.set()
        if self.elector:
            self.elector.stop()
        for w in list(self.workers.values()):
            self._drop_worker(w.key)
        for inf in self.hub.values():
            inf.stop()
        for t in self._threads:
            t.join(timeout_s)

    def _on_leading(self, leading: bool) -> None:
        self.metrics.leader.set(1 if leading else 0)
        if leading:
            self._recall_all = True  # another replica may have moved Workloads on since this one last led
            self._kick.set()

    def pricing(self) -> Pricing:
        """The prices a pass decides with: the live ones in use (never waiting for a cloud), else the catalog's."""
        return self.prices.current() if self.prices is not None else self.options.pricing

    def prices_age(self) -> float:
        """Seconds since the oldest price in use was read (NaN when unknown: a CSV catalog without a date)."""
        read_at = self.pricing().read_at
        return max(self.clock() - read_at, 0.0) if read_at is not None else float("nan")

    def leading(self) -> bool:
        return self.elector.leading() if self.elector is not None else not self.options.lease

    def healthy(self) -> str | None:
        """None while healthy (leader or standby); else why not (for ``/healthz``)."""
        if self._stop.is_set():
            return "stopping"
        dead = [t.name for t in self._threads if not t.is_alive()]
        if dead:
            return "thread stopped: " + ", ".join(dead)
        wl = self.hub["workloads"]
        if wl.synced and time.monotonic() - wl.last_ok > UNHEALTHY_AFTER_S + self.options.watch_timeout_s:
            return f"hub API unanswered for {time.monotonic() - wl.last_ok:.0f} s: {wl.last_error}"
        return None

    def _loop(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self._kick.wait(self._next_wait())
            if stop.is_set():
                break
            self._kick.clear()
            stop.wait(self.options.debounce_s)  # let a burst of watch events land before deciding
            if stop.is_set() or not all(i.synced for i in self.hub.values()):
                continue
            try:
                self.sync_workers(watch=True)
                if any(not all(i.synced for i in w.informers.values())
                       and time.monotonic() - w.connected_at < min(WORKER_SYNC_GRACE_S, self.options.worker_timeout_s)
                       for w in self.workers.values()):
                    # A worker being listed: deciding without it would route around it. Shortly again.
                    stop.wait(0.1)
                    self._kick.set()
                    continue
                if self.leading():
                    self.reconcile()
            except Exception:
                log.exception("reconcile pass failed")
                stop.wait(1.0)

    def _next_wait(self) -> float:
        wait = self.options.resync_s
        if self._owner_waits:  # a Workload waits for its owner: look again when its grace ends at the latest
            wait = min(wait, OWNER_GRACE_S / 4)
        now = self.clock()
        for mem in self.memory.values():
            if mem.nominated:
                wait = min(wait, max(mem.since + self.options.settings.deadline_s - now, 0.0) + 0.05)
        return max(wait, 0.05)

    # ------------------------------------------------------------------ workers

    def _worker_kubeconfig(self, mkc: Mapping[str, Any]) -> tuple[str, str] | None:
        key = str((mkc.get("metadata") or {}).get("name"))
        ns = self.options.namespace
        own = ko.dispatch_secret_name(key)
        text = read_secret_key(self.hub_api, ns, own, ko.MULTIKUEUE_KUBECONFIG_KEY)
        if text is not None:
            return text, own
        location = (((mkc.get("spec") or {}).get("clusterSource") or {}).get("kubeConfig") or {})
        if location.get("locationType", "Secret") == "Secret" and location.get("location"):
            name = str(location["location"])
            text = read_secret_key(self.hub_api, ns, name, ko.MULTIKUEUE_KUBECONFIG_KEY)
            if text is not None:
                return text, name
        return None

    def _kubeconfigs(self, mkcs: Mapping[str, Mapping[str, Any]], deadline: float
                     ) -> dict[str, tuple[str, str] | None | BaseException | str]:
        """Each worker's kubeconfig Secret (text and Secret name, None when there is none, or what reading it
        raised), read at once and all by ``deadline`` (``time.monotonic()``). A read still going then (a hub
        that trickles its answer) is left behind as :data:`LATE`: the pass never waits past its deadline."""
        out: dict[str, tuple[str, str] | None | BaseException | str] = {}

        def read(key: str, mkc: Mapping[str, Any]) -> None:
            try:
                out[key] = self._worker_kubeconfig(mkc)
            except Exception as exc:
                out[key] = exc

        threads = {key: threading.Thread(target=read, args=(key, mkc), name=f"secret-{key}", daemon=True)
                   for key, mkc in mkcs.items()}
        for t in threads.values():
            t.start()
        for key, t in threads.items():
            t.join(max(deadline - time.monotonic(), 0.0))
            if t.is_alive():
                out[key] = LATE
        return {key: out.get(key) for key in mkcs}

    def sync_workers(self, *, watch: bool, deadline: float | None = None, bound: str = "") -> None:
        """Follow the hub's MultiKueueClusters: connect to new workers, drop removed ones. The kubeconfig Secrets
        are read within ``--worker-timeout-seconds`` and by ``deadline`` (``time.monotonic()``, the ``--once``
        pass's; ``bound`` names it in the message), or the worker waits for the next pass."""
        # The client's API module, imported before the clock starts: its first import compiles a large module,
        # which is this process's time, not the hub's answer, and must not count against the reads' deadline.
        from kubernetes.client import CoreV1Api  # noqa: F401

        own = time.monotonic() + self.options.worker_timeout_s  # a worker's reads, its Secret's included
        if deadline is None or own < deadline:
            deadline, bound = own, f"--worker-timeout-seconds ({self.options.worker_timeout_s:g} s)"
        keys = {str((m.get("metadata") or {}).get("name")): m for m in self.hub["multikueueclusters"].items()}
        self._mkc_uids = {k: str(m["metadata"].get("uid") or "") for k, m in keys.items()}
        for key in [k for k in self.workers if k not in keys]:
            self._drop_worker(key)
        kubeconfigs = self._kubeconfigs({k: m for k, m in keys.items() if k not in self.workers}, deadline)
        for key, found in kubeconfigs.items():
            try:
                if found is LATE:
                    self.worker_errors[key] = f"kubeconfig Secret not read within {bound}: not scored this pass"
                    continue
                if isinstance(found, BaseException):
                    raise found
                if not isinstance(found, tuple):
                    self.worker_errors[key] = (f"no Secret {ko.dispatch_secret_name(key)} nor the MultiKueueCluster's "
                                               f"kubeconfig Secret in {self.options.namespace}")
                    continue
                text, source = found
                api = api_client(text, None, f"Secret {source}", static=True)
            except FleetError as exc:
                self.worker_errors[key] = redact(str(exc))
                continue
            except Exception as exc:
                why = api_message(exc) if hasattr(exc, "status") else exc.__class__.__name__
                self.worker_errors[key] = f"reading its kubeconfig Secret: {why}"
                continue
            informers = {p: Informer(api, res, on_change=self._kick.set, watch_timeout_s=self.options.watch_timeout_s,
                                     name=f"{key}/{p}", list_timeout_s=self.options.worker_timeout_s)
                         for p, res in WORKER.items()}
            nodes = Informer(api, NODES, watch_timeout_s=self.options.watch_timeout_s, name=f"{key}/nodes",
                             list_timeout_s=self.options.worker_timeout_s,
                             on_delete=functools.partial(self._node_deleted, key))
            w = _Worker(key, api, source, informers, nodes)
            self.workers[key] = w
            self.worker_errors.pop(key, None)
            log.info("worker connected", extra={"worker": key, "secret": source})
            if watch:
                for p, inf in informers.items():
                    self._spawn(inf.run, f"{key}-{p}", w.stop, into=w.threads)
                self._spawn(nodes.run, f"{key}-nodes", w.stop, into=w.threads)

    def _relist_worker(self, w: _Worker, deadline: float) -> None:
        """List the worker's four collections, all within ``deadline`` (``time.monotonic()``)."""
        try:
            for inf in w.informers.values():
                inf.relist(timeout_s=max(deadline - time.monotonic(), 0.01))
        except Exception as exc:
            if hasattr(exc, "status"):
                err = f"HTTP {exc.status}: {api_message(exc)}"
            elif isinstance(exc, TimeoutError) or "Timeout" in exc.__class__.__name__ or (
                    isinstance(exc, Unreadable) and "deadline" in str(exc)):
                err = f"no answer within {self.options.worker_timeout_s:g} s: stale, not scored this pass"
            elif isinstance(exc, Unreadable):
                err = f"unreadable answer: {exc}"
            else:
                err = exc.__class__.__name__
            for inf in w.informers.values():
                inf.last_error = redact(err)

    @staticmethod
    def _relist_nodes(w: _Worker, deadline: float) -> None:
        """List the worker's Nodes within ``deadline``; a failure only leaves it unobserved for the pass."""
        if w.nodes is None:
            return
        try:
            w.nodes.relist(timeout_s=max(deadline - time.monotonic(), 0.01))
        except Exception as exc:
            w.nodes.last_error = redact(f"HTTP {exc.status}: {api_message(exc)}" if hasattr(exc, "status")
                                        else exc.__class__.__name__)

    def relist_workers(self, deadline: float) -> None:
        """List every worker at once, each within ``--worker-timeout-seconds`` and all before ``deadline``: a
        worker that has not answered by then is stale for this pass (not scored), never waited on. Its Nodes
        (observed, not scored) are listed beside, within the same deadline."""
        started = time.monotonic()
        threads = {}
        observers = []
        for w in self.workers.values():
            own = min(started + self.options.worker_timeout_s, deadline)
            t = threading.Thread(target=self._relist_worker, args=(w, own), name=f"list-{w.key}", daemon=True)
            t.start()
            threads[w.key] = (t, own)
            n = threading.Thread(target=self._relist_nodes, args=(w, own), name=f"nodes-{w.key}", daemon=True)
            n.start()
            observers.append((n, own))
        for key, (t, own) in threads.items():
            t.join(max(own - time.monotonic(), 0.0) + 0.05)
            if t.is_alive():
                self.workers[key].stale = (f"no answer within {self.options.worker_timeout_s:g} s: stale, not scored "
                                           "this pass")
        for n, own in observers:
            n.join(max(own - time.monotonic(), 0.0) + 0.05)

    def _drop_worker(self, key: str) -> None:
        w = self.workers.pop(key, None)
        if w is None:
            return
        w.stop.set()
        for inf in w.informers.values():
            inf.stop()
        if w.nodes is not None:
            w.nodes.stop()
        self._tallies.pop(key, None)

    # ------------------------------------------------------------------ one pass

    def snapshots(self) -> tuple[list[HubWorkload], dict[str, Mapping[str, Any]], list[WorkerState]]:
        """The hub Workloads (with their raw objects by uid) and the workers, from the caches."""
        checks = snapshot.multikueue_checks(self.hub["admissionchecks"].items())
        configs = {}
        for c in self.hub["multikueueconfigs"].items():
            try:
                clusters = (c.get("spec") or {}).get("clusters") or ()
                configs[str(c["metadata"].get("name"))] = tuple(str(x) for x in clusters)
            except Exception:  # an unreadable config lists no worker: its Workloads get "lists no worker cluster"
                continue
        cq_checks = snapshot.cluster_queue_checks(self.hub["clusterqueues"].items())
        owners: dict[tuple[str, str, str], Mapping[str, Any]] = {}
        for kind, plural in (("Job", "jobs"), ("JobSet", "jobsets")):
            for o in self.hub[plural].items():
                meta = o.get("metadata") or {}
                owners[(kind, str(meta.get("namespace")), str(meta.get("name")))] = o
        workloads: list[HubWorkload] = []
        raw: dict[str, Mapping[str, Any]] = {}
        no_owner: dict[str, float] = {}
        waits = 0
        for obj in self.hub["workloads"].items():
            try:
                owner = snapshot.owner_key(obj)
            except Exception:
                owner = None  # hub_workload reports what is wrong with the Workload itself
            found = owners.get(owner) if owner else None
            wl = snapshot.hub_workload(obj, found, checks, configs, cq_checks)
            if wl is not None and owner is not None and found is None and self._owner_pending(wl, no_owner):
                waits += 1
                continue  # its Job is on its way to the cache: decided in a later pass, with its spec
            if wl is not None:
                workloads.append(wl)
                raw[wl.uid] = obj
        self._no_owner, self._owner_waits = no_owner, waits
        hours = {(w.namespace, w.name): w.job.hours for w in workloads if w.job is not None}
        now = self.clock()
        states = []
        conditions: dict[str, str] = {}
        for key in sorted(set(self.workers) | set(self.worker_errors) | set(self.fleet)):
            w = self.workers.get(key)
            cluster = self.fleet.get(key)
            label = redact(key)[:63]
            if w is None:
                states.append(WorkerState(key, cluster, reachable=False,
                                          error=self.worker_errors.get(key, "no MultiKueueCluster on the hub")))
                continue
            infs = w.informers
            quiet = time.monotonic() - min(i.last_ok for i in infs.values())
            if not w.stale and all(i.synced for i in infs.values()) and quiet > self._stale_after():
                # Its watches deliver nothing, not even their periodic end (a server that trickles bytes):
                # the cache is no longer a snapshot of the worker.
                w.stale = f"no answer for {quiet:.0f} s: stale, not scored"
            elif w.stale and w.stale.startswith("no answer for") and quiet <= self._stale_after():
                w.stale = None
            if w.stale or not all(i.synced for i in infs.values()):
                err = w.stale or next((i.last_error for i in infs.values() if i.last_error), None) or "not listed yet"
                states.append(WorkerState(key, cluster, reachable=False, error=err))
                self.metrics.worker_up.labels(label).set(0)
                self.metrics.worker_stale.labels(label).set(1 if w.stale else 0)
                continue
            self.metrics.worker_stale.labels(label).set(0)
            try:
                state = snapshot.worker_state(key, cluster, {p: i.items() for p, i in infs.items()}, now, hours)
            except Exception as exc:  # one worker's objects, whatever they hold, never stop the pass
                why = f"its Kueue objects cannot be read: {snapshot.problem_text(exc)}"
                conditions[key] = why
                self.metrics.worker_unreadable.labels(label).set(1)
                good = self.last_good.get(key)
                if good is not None and now - good[1] <= STALE_AFTER_S:
                    log.warning("worker unreadable: scored from its last good snapshot",
                                extra={"worker": key, "error": why, "age_s": round(now - good[1], 1)})
                    states.append(good[0])
                else:
                    log.warning("worker unreadable: not scored", extra={"worker": key, "error": why})
                    states.append(WorkerState(key, cluster, reachable=False, error=f"WorkerUnreadable: {why}"))
                self.metrics.worker_up.labels(label).set(0)
                continue
            self.metrics.worker_unreadable.labels(label).set(0)
            self.metrics.worker_up.labels(label).set(1)
            self.last_good[key] = (state, now)
            states.append(state)
        self.worker_conditions = conditions
        return workloads, raw, states

    def _owner_pending(self, wl: HubWorkload, no_owner: dict[str, float]) -> bool:
        """Whether ``wl``, whose owner is not in the hub's cache, waits for it (:data:`OWNER_GRACE_S`): only a
        Workload never decided here, first met without its owner less than the grace ago and (by the
        Workload's own creationTimestamp, when it has one) created less than the grace ago. Records the first
        meeting in ``no_owner``."""
        first = no_owner[wl.uid] = self._no_owner.get(wl.uid, time.monotonic())
        if wl.uid in self.memory or wl.waiting_reason() is not None:
            return False
        young = not wl.created or self.clock() - wl.created < OWNER_GRACE_S
        return young and time.monotonic() - first < OWNER_GRACE_S

    def _stale_after(self) -> float:
        """Seconds without any answer after which a watched worker's cache is not scored: every watch ends
        (and answers) within its server-side timeout, so three of them missed is a worker that stopped."""
        return max(STALE_AFTER_S, 3 * (self.options.watch_timeout_s + self.options.worker_timeout_s))

    def reconcile(self) -> PassResult:
        """One pass: decide from the caches and carry the decisions out (when leading and not a dry run)."""
        with self._lock:
            started = time.perf_counter()
            with deciding():  # the collector's walk of what the pass makes waits for the carry-out below
                workloads, raw, workers = self.snapshots()
                if self.leading():
                    self.observe()
                self.recall(workloads)
                pricing = self.pricing()
                self.last_pass_leading = not self.options.dry_run and self.leading()
                result = decide(workloads, workers, pricing, self.clock(), self.options.settings,
                                dict(self.memory))
            self.metrics.pending.set(sum(1 for d in result.decisions if d.reason != ADMITTED))
            for a in result.admitted:
                self.metrics.time_to_admission.observe(a.seconds)
            memory = {uid: m for uid, m in self.memory.items() if uid in result.keep}
            for d in result.decisions:
                ok = self._carry_out(d, raw.get(d.workload.uid), pricing.source)
                if d.memory is not None and (d.action != "nominate" or ok):
                    memory[d.workload.uid] = d.memory
            self.memory = memory
            self._report_workers()
            self.passes += 1
            self.last_result = result
            self.metrics.pass_seconds.observe(time.perf_counter() - started)
            return result

    # ------------------------------------------------------------------ observation (issue 26)

    def _node_deleted(self, key: str, obj: Mapping[str, Any]) -> None:
        """A worker's watch reported a Node deleted: kept (as it was last) for the next observation."""
        node = spot_node(obj)
        if node is not None:
            with self._observed_lock:
                self._deleted.setdefault(key, []).append(node)

    def observe(self) -> None:
        """Count what the workers show for the plans (:mod:`placement.dispatch.observe`): spot nodes, their
        node-seconds and reclaims, provisioning failures and admission waits. Only the leader counts (its
        counters are the fleet's); a worker that is stale or whose Nodes cannot be read is not observed, and
        adds no node-seconds across the gap."""
        now = self.clock()
        counted: set[str] = set()
        for key, w in list(self.workers.items()):
            cluster = self.fleet.get(key)
            cloud, region = (cluster.cloud, cluster.region) if cluster is not None else ("unknown", "unknown")
            label = redact(key)[:63]
            with self._observed_lock:
                deleted = self._deleted.pop(key, [])
            nodes = w.nodes
            fresh = nodes is not None and nodes.synced and time.monotonic() - nodes.last_ok <= self._stale_after()
            if nodes is None or not fresh or w.stale:
                self._tallies.pop(key, None)
            else:
                obs, self._tallies[key] = observe_nodes(self._tallies.get(key), spot_nodes(nodes.items()), now,
                                                        deleted, max_gap_s=self._stale_after())
                shown = self._gauged.get(key, set())
                for where in shown - set(obs.current):
                    self.metrics.spot_nodes.labels(label, cloud, region, *where).set(0)
                for where, n in obs.current.items():
                    self.metrics.spot_nodes.labels(label, cloud, region, *where).set(n)
                self._gauged[key] = shown | set(obs.current)
                for where, seconds in obs.node_seconds.items():
                    self.metrics.spot_node_seconds.labels(label, cloud, region, *where).inc(seconds)
                for where, n in obs.reclaims.items():
                    self.metrics.spot_reclaims.labels(label, cloud, region, *where).inc(n)
            if w.stale or not w.informers["workloads"].synced:
                counted |= {k for k in self._counted if k.startswith(f"{key}|")}
                continue
            found = queue_events(w.informers["workloads"].items(), self._observe_since)
            for reason, k in found.failures:
                mark = f"{key}|{k}"
                if mark not in self._counted:
                    self.metrics.provisioning_failures.labels(label, reason).inc()
                counted.add(mark)
            for k, queue, seconds in found.waits:
                mark = f"{key}|{k}"
                if mark not in self._counted:
                    self.metrics.admission_wait.labels(label, redact(queue)[:63]).observe(seconds)
                counted.add(mark)
        self._counted = counted  # what is still to be seen again: bounded by the workers' Workloads

    def recall(self, workloads: Sequence[HubWorkload]) -> None:
        """Resume from Events what this replica does not remember: on start and on becoming leader, every
        waiting Workload (one cluster-wide LIST); afterwards a waiting Workload that is nominated or was evicted
        and that it has no memory of (one LIST by its uid, or one cluster-wide LIST for many)."""
        waiting = {wl.uid: wl for wl in workloads if wl.waiting_reason() is None}
        known = {wl.uid: (wl.namespace, wl.created) for wl in waiting.values()}
        if self._recall_all:
            if time.monotonic() < self._recall_retry_at:
                return
            every = self._events(f"source={COMPONENT}", None)
            if every is None:
                return
            self._recall_all = False
            found = self._recall_from(every, known)
            self.memory.update(found)
            self._recalled = set(waiting)
            log.info("memory recalled from Events", extra={"events": len(every), "workloads": len(found)})
            return
        self._recalled &= set(waiting)
        unknown = [wl for wl in waiting.values() if wl.uid not in self.memory and wl.uid not in self._recalled
                   and (wl.nominated or wl.evictions)]
        if not unknown:
            return
        events: list[dict[str, Any]] = []
        for selector, namespace in ([(f"source={COMPONENT}", None)] if len(unknown) > RECALL_ONE_BY_ONE else
                                    [(f"involvedObject.uid={wl.uid},source={COMPONENT}", wl.namespace)
                                     for wl in unknown]):
            page = self._events(selector, namespace)
            if page is None:
                return
            events += page
        uids = {wl.uid for wl in unknown}
        self.memory.update(self._recall_from(events, {u: k for u, k in known.items() if u in uids}))
        self._recalled |= uids

    def _recall_from(self, events: Sequence[Mapping[str, Any]], known: Mapping[str, tuple[str, float]]
                     ) -> dict[str, Memory]:
        """The memories ``events`` carry for the Workloads ``known`` (uid -> namespace, creation time), only from
        Events that cannot be forged (:func:`placement.dispatch.memory.trusted`); the rest counted by reason."""
        ignored: dict[str, int] = {}
        found = remembered.recall(events, COMPONENT, known, self.clock(), ignored=ignored)
        for reason, n in ignored.items():
            self.metrics.memory_ignored.labels(reason).inc(n)
        if ignored:
            log.warning("events ignored as memory", extra={"ignored": ignored})
        return found

    def _events(self, selector: str, namespace: str | None) -> list[dict[str, Any]] | None:
        """The hub's Events matching ``selector``; None (and a warning) when the API server does not answer."""
        from kubernetes.client.exceptions import ApiException

        try:
            return list_events(self.hub_api, selector, namespace)
        except ApiException as exc:
            why = f"HTTP {exc.status}: {api_message(exc)}"
        except Exception as exc:
            if not is_unreachable(exc):
                raise
            why = exc.__class__.__name__
        self._recall_retry_at = time.monotonic() + RECALL_RETRY_S
        log.warning("events not listed: deciding without the memory they carry",
                    extra={"selector": selector, "error": why})
        return None

    def _carry_out(self, d: Decision, obj: Mapping[str, Any] | None, prices: str = "catalog") -> bool:
        from kubernetes.client.exceptions import ApiException

        wl = d.workload
        fields = {"workload": wl.key, "reason": d.reason, "clusters": list(d.clusters), "prices": prices}
        if d.action == "hold":
            if d.event is not None:
                self._event(wl, d)
            return True
        if d.action == "nominate":
            for s in d.scores:
                if s.fits:
                    label = redact(s.worker)[:63]  # metric labels pass the redaction layer too
                    self.metrics.worker_score.labels(label).set(round(s.usd, 2))
                    self.metrics.worker_wait.labels(label).set(round(s.wait_hours, 3))
        if self.options.dry_run or not self.leading():
            log.info("decided (not written)", extra={**fields, "detail": d.message})
            return False
        if d.action == "nominate":
            assert obj is not None
            body = snapshot.nomination(obj, d.clusters)
            try:
                stored = apply_workload_status(self.hub_api, wl.namespace, wl.name, body,
                                               field_manager=snapshot.KUEUE_ADMISSION, force=True)
                self.hub["workloads"].upsert(stored)
            except ApiException as exc:
                self.metrics.write_errors.labels(str(exc.status)).inc()
                log.warning("nomination refused", extra={**fields, "status": exc.status, "error": api_message(exc)})
                if exc.status == 409:
                    self._kick.set()  # it changed since we read it: decide again on the fresh object
                return False
            except Exception as exc:
                if not is_unreachable(exc):
                    raise
                self.metrics.write_errors.labels("0").inc()
                log.warning("nomination not written", extra={**fields, "error": exc.__class__.__name__})
                return False
            self.written.append((wl.key, d.clusters))
            if d.reason == RENOMINATED:
                self.metrics.renominations.labels("eviction").inc()
            elif d.reason == DEADLINE:
                self.metrics.renominations.labels("deadline").inc()
        self.metrics.decisions.labels(d.reason).inc()
        log.info(d.message, extra=fields)
        if d.event is not None and (d.action == "nominate" or d.reason in (NO_FIT, UNREADABLE)):
            self._event(wl, d)
        return True

    def _report_workers(self) -> None:
        """A Warning Event ``WorkerUnreadable`` on the MultiKueueCluster of each worker the pass could not use
        because of what it holds (a refused kubeconfig Secret, Kueue objects that cannot be read), once per
        distinct problem (``kubectl describe multikueuecluster <key>`` shows it)."""
        from kubernetes.client.exceptions import ApiException

        problems = {k: e for k, e in self.worker_errors.items() if k in self._mkc_uids}
        problems.update(self.worker_conditions)
        self._worker_noted = {k: v for k, v in self._worker_noted.items() if k in problems}
        if self.options.dry_run or not self.leading():
            return
        for key, why in sorted(problems.items()):
            message = redact(f"worker {key} not used: {why}")[:1024]
            if self._worker_noted.get(key) == message or not self._mkc_uids.get(key):
                continue
            now = _now_rfc3339()
            body = {"apiVersion": "v1", "kind": "Event",
                    "metadata": {"name": f"{key}.{uuid.uuid4().hex[:16]}", "namespace": self.options.namespace},
                    "involvedObject": {"apiVersion": ko.API_VERSION, "kind": "MultiKueueCluster", "name": key,
                                       "uid": self._mkc_uids[key]},
                    "reason": "WorkerUnreadable", "message": message, "type": "Warning",
                    "source": {"component": COMPONENT}, "reportingComponent": remembered.REPORTING,
                    "reportingInstance": self.options.identity, "firstTimestamp": now, "lastTimestamp": now,
                    "count": 1}
            try:
                create_event(self.hub_api, self.options.namespace, body)
                self._worker_noted[key] = message
            except ApiException as exc:
                self.metrics.write_errors.labels(str(exc.status)).inc()
            except Exception as exc:
                if not is_unreachable(exc):
                    raise
                self.metrics.write_errors.labels("0").inc()

    def _event(self, wl: HubWorkload, d: Decision) -> None:
        from kubernetes.client.exceptions import ApiException

        assert d.event is not None
        if self.options.dry_run or not self.leading() or not wl.uid:
            return
        now = _now_rfc3339()
        meta: dict[str, Any] = {"name": f"{wl.name}.{uuid.uuid4().hex[:16]}", "namespace": wl.namespace}
        if d.memory is not None:  # what a replica that starts or takes over resumes from
            meta["annotations"] = remembered.as_annotations(d.memory, self.clock())
        body = {"apiVersion": "v1", "kind": "Event", "metadata": meta,
                "involvedObject": {"apiVersion": ko.API_VERSION, "kind": "Workload", "name": wl.name,
                                   "namespace": wl.namespace, "uid": wl.uid},
                "reason": d.event.reason, "message": redact(d.event.message)[:1024], "type": d.event.type,
                "source": {"component": COMPONENT}, "reportingComponent": remembered.REPORTING,
                "reportingInstance": self.options.identity, "firstTimestamp": now, "lastTimestamp": now, "count": 1}
        try:
            create_event(self.hub_api, wl.namespace, body)
        except ApiException as exc:
            self.metrics.write_errors.labels(str(exc.status)).inc()
            log.warning("event not recorded", extra={"workload": wl.key, "status": exc.status})
        except Exception as exc:
            if not is_unreachable(exc):
                raise
            self.metrics.write_errors.labels("0").inc()

    # ------------------------------------------------------------------ --once

    def _relist_hub(self, deadline: float) -> None:
        """List the hub's collections, all by ``deadline`` (``time.monotonic()``): a list still going then (a
        trickled answer) raises :class:`Unreadable` (the command exits 1), never waits past the pass deadline."""
        failed: list[BaseException] = []

        def relist() -> None:
            try:
                for inf in self.hub.values():
                    inf.relist(timeout_s=max(deadline - time.monotonic(), 0.01))
            except BaseException as exc:
                failed.append(exc)

        t = threading.Thread(target=relist, name="list-hub", daemon=True)
        t.start()
        t.join(max(deadline - time.monotonic(), 0.0) + 0.05)
        if t.is_alive():
            raise Unreadable(f"no complete answer within --pass-timeout-seconds ({self.options.pass_timeout_s:g} s)")
        if failed:
            raise failed[0]

    def run_once(self) -> PassResult:
        """List everything once, take the Lease if one is configured and free, and run one pass.

        Raises the client's errors when the hub does not answer (the command exits 1). With live prices, asks
        the clouds once first (bounded by their per-call timeouts)."""
        deadline = time.monotonic() + self.options.pass_timeout_s
        self._relist_hub(deadline)
        if self.prices is not None:
            self.prices.refresh()
        self.sync_workers(watch=False, deadline=deadline,
                          bound=f"--pass-timeout-seconds ({self.options.pass_timeout_s:g} s)")
        self.relist_workers(deadline)
        if self.options.lease and not self.options.dry_run:
            self.elector = Elector(self.hub_api, self.options.lease, self.options.namespace, self.options.identity,
                                   lease_duration_s=self.options.lease_duration_s,
                                   renew_deadline_s=self.options.renew_deadline_s,
                                   retry_period_s=self.options.retry_period_s).start()
            until = time.monotonic() + self.options.retry_period_s + 1.0
            while not self.elector.leading() and time.monotonic() < until:
                time.sleep(0.05)
        try:
            return self.reconcile()
        finally:
            if self.elector is not None:
                self.elector.stop()


def summarize(result: PassResult) -> list[dict[str, Any]]:
    """The decisions of a pass as rows (for ``--once`` output), redacted."""
    return [redact_value(r) for r in _rows(result)]


def _num(x: float, digits: int) -> float | None:
    """A figure for the JSON document: rounded, and None when not finite (strict JSON has no Infinity)."""
    return round(x, digits) if math.isfinite(x) else None


def _checkpoint_row(home: CheckpointHome | None) -> dict[str, Any] | None:
    """The job's checkpoint home as ``--once --json`` says it: ``gb`` null when unknown, ``gb_from`` the
    annotation, ``checkpoint.size_gb`` or ``model.parameters_b`` (an upper bound), null when unknown."""
    if home is None:
        return None
    return {"home": home.uri, "region": home.where, "gb": home.gb,
            "gb_from": home.gb_from if home.gb is not None else None}


def _rows(result: PassResult) -> list[dict[str, Any]]:
    rows = []
    for d in result.decisions:
        best = next((s for s in d.scores if d.clusters and s.worker == d.clusters[0]), None)
        rows.append({"workload": d.workload.key, "action": d.action, "reason": d.reason, "clusters": list(d.clusters),
                     "usd": _num(best.usd, 2) if best else None,
                     "wait_hours": _num(best.wait_hours, 3) if best else None, "message": d.message,
                     "checkpoint": _checkpoint_row(d.workload.checkpoint), "warnings": list(d.workload.warnings),
                     "scores": [{"worker": s.worker, "fits": s.fits, "usd": _num(s.usd, 2) if s.fits else None,
                                 "cost_usd": _num(s.cost_usd, 2) if s.fits else None,
                                 "wait_hours": _num(s.wait_hours, 3) if s.fits else None,
                                 "ready_hours": _num(s.ready_hours, 3) if s.fits else None,
                                 "meets_deadline": not s.late if s.fits else None,
                                 # null when the move is priced as unknown (the checkpoint's size is): not counted
                                 "move_usd": _num(s.move_usd, 2) if s.fits and s.move_known else None,
                                 "move_hours": _num(s.move_hours, 3) if s.fits and s.move_known else None,
                                 "move_known": s.move_known if s.fits else None,
                                 "restarts_from_step_0": s.restarts if s.fits else None,
                                 # how the job gets its progress there: same_cloud, federated (resumes through
                                 # the stacks' identity federation) or restarts (its lost progress priced);
                                 # null where it ran or with nothing to move
                                 "move_case": (s.move_case or None) if s.fits else None,
                                 "lost_hours": _num(s.lost_hours, 3) if s.fits and s.lost_hours is not None
                                 else None,
                                 "lost_usd": _num(s.lost_usd, 2) if s.fits and s.lost_usd is not None else None,
                                 # what lost_hours comes from: progress (the job's last durable step over its
                                 # steps per hour) or admitted (Kueue's accumulated admitted time, an upper bound)
                                 "lost_from": (s.lost_from or None) if s.fits else None,
                                 "pool": s.pool, "reason": s.reason or None} for s in d.scores]})
    return rows


def prices_doc(controller: Controller) -> dict[str, Any]:
    """Where the prices of the pass came from (``--once`` output): source, age and per fleet region."""
    p = controller.pricing()
    age = controller.prices_age()
    return {"source": p.source, "age_s": None if math.isnan(age) else round(age, 1), "regions": dict(p.regions)}


def worker_problems(controller: Controller) -> Sequence[str]:
    """One line per worker that could not be used in the last pass: no kubeconfig, unreachable, stale, or its
    objects unreadable (``WorkerUnreadable``), redacted."""
    problems = dict(controller.worker_errors)
    for key, w in controller.workers.items():
        if w.stale:
            problems[key] = w.stale
        elif not all(i.synced for i in w.informers.values()):
            problems[key] = next((i.last_error for i in w.informers.values() if i.last_error), None) or "not listed"
    for key, why in controller.worker_conditions.items():
        problems[key] = f"WorkerUnreadable: {why}"
    return [redact(f"{k}: {e}") for k, e in sorted(problems.items())]


def worker_conditions(controller: Controller) -> list[dict[str, str]]:
    """The ``WorkerUnreadable`` condition of each worker whose Kueue objects could not be read (``--json``)."""
    return [{"worker": k, "type": "WorkerUnreadable", "status": "True", "message": redact(m)}
            for k, m in sorted(controller.worker_conditions.items())]
