"""Plan the live calls, answer what the cache can, run the rest concurrently, summarise the sources.

One :class:`Task` is one cloud call (one region, one service, one set of parameters). All tasks of all
regions go to a ``ThreadPoolExecutor``; each cloud's SDK is imported (and its credentials resolved) in a
worker of that pool, so AWS calls are already in flight while the Google clients are still importing.

Both SDKs are CPU-heavy (importing google.cloud.compute_v1 ~2 s; botocore's EC2 model, clients, signing
and parsing ~1 s for 20 regions), and threads share one core. So on Linux, when the process has no
other thread yet, the AWS calls run in a forked child (with its own thread pool) while the parent
imports the Google clients and makes the GCP calls: the two halves use two cores. The child sends its
outcomes back as JSON over a pipe and also writes the cache. ``GPUFLEET_LIVE_FORK=0`` disables this;
``GPUFLEET_LIVE_SEQUENTIAL=1`` runs everything on one worker thread, one call after another (measurement).

Sources: one row per (cloud, service, region) that failed; successful, cached and offline answers are
folded into one row per (cloud, service, status) whose ``detail`` says how many regions it covers.
A cloud without credentials gets one ``no-credentials`` row (service ``credentials``).

Why one module: the task list, the cache look-up, the thread pool, the forked AWS child and the summary are one
pipeline under one deadline budget; each cloud's calls live in :mod:`~placement.live.aws` and
:mod:`~placement.live.gcp`.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
import os
import signal
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from typing import Any

from placement.errors import InputError
from placement.live import LiveRequest, LiveResult, Source
from placement.live.cache import DiskCache, cache_root, fresh
from placement.live.checks import BadAnswer, check_answer
from placement.live.errors import classify, scrub
from placement.live.overlay import LiveData, apply, quotas, reservations
from placement.model.catalog import Catalog
from placement.model.shapes import Shape, node_plan, shape_book

SEQUENTIAL_ENV = "GPUFLEET_LIVE_SEQUENTIAL"
FORK_ENV = "GPUFLEET_LIVE_FORK"  # "0": never fork an AWS worker process
MAX_WORKERS = 64
SCORE_REGIONS_PER_CALL = 10  # GetSpotPlacementScores accepts at most 10 RegionNames
FAILURES = ("no-credentials", "denied", "throttled", "timeout", "error")  # most telling first


@dataclass(frozen=True)
class Task:
    """One call. ``params`` are the keyword arguments of ``<cloud>.OPS[op]`` (hashable, JSON-able)."""

    cloud: str
    service: str
    region: str
    kind: str  # cache TTL kind (placement.live.cache.TTL_S)
    op: str
    params: tuple[tuple[str, Any], ...]
    scope: str  # account/project/endpoint identity, so answers for another identity are never reused

    @property
    def key(self) -> str:
        return json.dumps([self.scope, self.cloud, self.op, self.region, self.params])

    def kwargs(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.params}


@dataclass(frozen=True)
class Outcome:
    """How one call went. ``data`` is the checked answer (placement.live.checks); ``notes`` name the values
    that were refused or unknown in it (its source row is then ``partial``)."""

    status: str
    data: Any = None
    detail: str = ""
    age_s: float | None = None
    notes: tuple[str, ...] = ()


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def _aws_scope(req: LiveRequest) -> str:
    # The access key ID is hashed, never stored; endpoint overrides keep answers of a fake apart.
    profile = req.aws_profile or os.environ.get("AWS_PROFILE") or "default"
    endpoints = sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_ENDPOINT_URL"))
    return "aws:" + _digest([profile, os.environ.get("AWS_ACCESS_KEY_ID", ""), endpoints])


def _gcp_scope(req: LiveRequest) -> str:
    project = (req.gcp_project or os.environ.get("GOOGLE_CLOUD_PROJECT") or os.environ.get("CLOUDSDK_CORE_PROJECT")
               or "adc")
    endpoints = sorted((k, v) for k, v in os.environ.items() if k.startswith("GPUFLEET_GCP_"))
    return "gcp:" + _digest([project, endpoints])


def _shapes(accels: set[str], cloud: str) -> list[Shape]:
    return sorted((s for s in shape_book().for_cloud(cloud) if s.accelerator in accels), key=lambda s: s.name)


def canonical_accelerators(names: Iterable[str]) -> set[str]:
    book = shape_book()
    return {book.canonical_accelerator(a) for a in names}


def build_tasks(request: LiveRequest, catalog: Catalog, *, pricing: bool = False) -> list[Task]:
    """Every call needed for ``request``: the regions of the catalog offers of its accelerators.

    ``pricing`` (``placement refresh``): catalog data only - offerings, spot and on-demand prices, no quota,
    usage or placement scores.
    """
    accels = canonical_accelerators(request.accelerators)
    tasks: list[Task] = []
    all_shapes = _shapes(accels, "aws") + _shapes(accels, "gcp")
    gpus = request.target_gpus or request.target_nodes * min((s.gpus for s in all_shapes), default=1)
    for cloud in request.clouds:
        regions = sorted({o.region for o in catalog.offers if o.cloud == cloud and o.shape.accelerator in accels})
        if request.regions is not None:
            regions = [r for r in regions if r in request.regions]
        shapes = _shapes(accels, cloud)
        if not regions or not shapes:
            continue
        if cloud == "aws":
            tasks += _aws_tasks(request, regions, shapes, gpus, pricing)
        elif cloud == "gcp":
            tasks += _gcp_tasks(request, regions, shapes, pricing)
    return tasks


def _score_nodes(request: LiveRequest, shape: Shape, gpus: int) -> int | None:
    """Nodes of ``shape`` the job would run on (the engine's node rule), or None when it cannot run there."""
    nodes, reason = node_plan(gpus, shape, request.gpus_per_node)
    if reason is not None or (nodes > 1 and not shape.multi_node):
        return None
    return nodes


def _aws_tasks(request: LiveRequest, regions: list[str], shapes: list[Shape], gpus: int, pricing: bool) -> list[Task]:
    from placement.live.aws import CODE_USAGE_CLASS

    scope = _aws_scope(request)
    types = tuple(s.name for s in shapes)
    codes = sorted({k for s in shapes for k in (s.quota.on_demand, s.quota.spot) if k})
    classes = tuple(sorted({CODE_USAGE_CLASS[c] for c in codes if c in CODE_USAGE_CLASS}))
    tasks: list[Task] = []
    # Slowest first: global calls, then per-region ones.
    for s in shapes:
        if pricing:
            tasks.append(Task("aws", "pricing", "", "prices", "ondemand_prices", (("instance_type", s.name),), scope))
            continue
        nodes = _score_nodes(request, s, gpus) if request.target_gpus else math.ceil(gpus / s.gpus)
        if nodes is None or (nodes > 1 and not s.multi_node):
            continue  # can never host this job: no score needed
        for i in range(0, len(regions), SCORE_REGIONS_PER_CALL):
            chunk = tuple(regions[i:i + SCORE_REGIONS_PER_CALL])
            tasks.append(Task("aws", "ec2:placement-scores", "", "scores", "scores",
                              (("instance_type", s.name), ("nodes", nodes), ("regions", chunk)), scope))
    for r in regions:
        tasks.append(Task("aws", "ec2:offerings", r, "offerings", "offerings", (("types", types),), scope))
        tasks.append(Task("aws", "ec2:spot-prices", r, "spot-prices", "spot_prices", (("types", types),), scope))
        tasks.append(Task("aws", "ec2:zones", r, "offerings", "zones", (), scope))
        if pricing:
            continue
        if request.quotas:
            tasks += [Task("aws", "service-quotas", r, "quotas", "quota", (("code", c),), scope) for c in codes]
        if classes and request.quotas:
            tasks.append(Task("aws", "cloudwatch", r, "usage", "usage", (("classes", classes),), scope))
        if request.reservations:
            tasks.append(Task("aws", "ec2:reservations", r, "reservations", "reservations", (("types", types),),
                              scope))
    return tasks


def _gcp_tasks(request: LiveRequest, regions: list[str], shapes: list[Shape], pricing: bool) -> list[Task]:
    scope = _gcp_scope(request)
    metrics = tuple(sorted({k for s in shapes for k in (s.quota.on_demand, s.quota.spot) if k}))
    tasks = [Task("gcp", "compute:acceleratorTypes", "", "offerings", "accelerator_zones", (), scope)]
    if request.gcp_prices or pricing:
        tasks.append(Task("gcp", "billing:skus", "", "prices", "skus", (), scope))
    if pricing:
        return tasks
    if request.reservations:
        types = tuple(s.name for s in shapes)
        tasks.append(Task("gcp", "compute:reservations", "", "reservations", "reservations",
                          (("machine_types", types),), scope))
    if request.quotas:
        tasks += [Task("gcp", "compute:regions", r, "quotas", "region_quotas", (("metrics", metrics),), scope)
                  for r in regions]
    return tasks


# ----------------------------------------------------------------------------- execution


class _Progress:
    """One self-overwriting status line on stderr (only when asked for). Thread-safe."""

    def __init__(self, enabled: bool, total: dict[str, int]) -> None:
        self.enabled = enabled and sum(total.values()) > 0
        self.total = total
        self.done: dict[str, int] = defaultdict(int)
        self.t0 = time.monotonic()
        self.last = 0.0
        self.lock = threading.Lock()

    def tick(self, cloud: str | None = None, n: int = 1, force: bool = False) -> None:
        with self.lock:
            if cloud:
                self.done[cloud] += n
            if not self.enabled:
                return
            now = time.monotonic()
            if not force and now - self.last < 0.1:
                return
            self.last = now
            parts = ", ".join(f"{c} {self.done[c]}/{t}" for c, t in sorted(self.total.items()))
            sys.stderr.write(f"\r\x1b[Kquerying live data: {parts} ({now - self.t0:.1f}s)")
            sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


def _prepare(cloud: str, request: LiveRequest) -> tuple[Any, Any]:
    module = importlib.import_module(f"placement.live.{cloud}")
    return module, module.prepare(request)


def _call(module: Any, ctx: Any, task: Task) -> Any:
    op: Callable[..., Any] = module.OPS[task.op]
    return op(ctx, task.region, **task.kwargs())


def _deadline_s(request: LiveRequest) -> float:
    """Overall bound of the live phase in seconds: three attempts per call plus importing the SDKs."""
    return 3 * request.timeout_s + 10.0


RETRY_BACKOFF_S = 4.0  # botocore standard mode: up to 1 s + 2 s of back-off before attempts 2 and 3


def _call_deadline_s(request: LiveRequest) -> float:
    """Bound of one call in seconds, from when it starts: three attempts of ``timeout_s`` and their back-off.

    The SDKs' own timeouts (botocore connect/read, google api_core) bound each socket wait, not the whole
    answer: an endpoint that trickles a byte at a time never trips them. This bound does, per call, so
    one slow region costs only its own calls; the regions that answered are kept.
    """
    return 3 * request.timeout_s + RETRY_BACKOFF_S


class _DaemonPool:
    """A minimal thread pool whose workers are daemon threads.

    ``ThreadPoolExecutor`` joins its workers at interpreter exit, even after ``shutdown(wait=False)``: a
    call stuck on a slow-loris endpoint would keep the process alive after its output is printed. Calls
    past their deadline are abandoned here instead; their sockets close when the process exits.
    """

    def __init__(self, workers: int, name: str) -> None:
        import queue

        self._queue: queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]] | None] = \
            queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True)
                         for i in range(max(workers, 1))]
        for t in self._threads:
            t.start()

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            fut, fn, args = item
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn(*args))
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on the future
                fut.set_exception(exc)

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        fut: Future[Any] = Future()
        self._queue.put((fut, fn, args))
        return fut

    def shutdown(self) -> None:
        """Stop idle workers; busy ones finish (or are abandoned with the process). Never waits."""
        for _ in self._threads:
            self._queue.put(None)


def _checked(task: Task, data: Any) -> Outcome:
    """The outcome of an answer: ``ok`` (notes: values refused), or ``error`` when it is unusable."""
    try:
        checked = check_answer(task.op, data)
    except BadAnswer as exc:
        return Outcome("error", None, f"unusable answer: {exc}")
    return Outcome("ok", checked.data, "", 0.0, checked.notes)


def _run_pool(tasks: list[Task], request: LiveRequest, cache: DiskCache, progress: _Progress,
              sequential: bool, on_outcome: Callable[[Task, Outcome], None] | None = None) -> dict[Task, Outcome]:
    """Run ``tasks`` on one thread pool: each cloud's SDK import + credentials first, then its calls.

    Each call has its own deadline (:func:`_call_deadline_s`, from when it starts) and all of them the
    overall one (:func:`_deadline_s`); a call past either is reported as ``timeout`` and abandoned.
    ``on_outcome`` is called with each outcome as soon as it is known.
    """
    outcomes: dict[Task, Outcome] = {}

    def record(task: Task, outcome: Outcome) -> None:
        outcomes[task] = outcome
        if on_outcome is not None:
            on_outcome(task, outcome)

    by_cloud: dict[str, list[Task]] = defaultdict(list)
    for t in tasks:
        by_cloud[t.cloud].append(t)
    workers = 1 if sequential else min(MAX_WORKERS, len(tasks) + len(by_cloud))
    deadline = time.monotonic() + _deadline_s(request)
    per_call = _call_deadline_s(request)
    started: dict[Task, float] = {}

    def run(module: Any, ctx: Any, task: Task) -> Any:
        started[task] = time.monotonic()
        return _call(module, ctx, task)

    pool = _DaemonPool(workers, "gpufleet-live")
    preps: dict[Future[Any], str] = {pool.submit(_prepare, c, request): c for c in by_cloud}
    calls: dict[Future[Any], Task] = {}
    try:
        while preps or calls:
            now = time.monotonic()
            left = deadline - now
            if left <= 0:
                break
            for fut, task in list(calls.items()):
                t0 = started.get(task)
                if t0 is not None and now - t0 > per_call and not fut.done():
                    calls.pop(fut)
                    region = f" ({task.region})" if task.region else ""
                    record(task, Outcome("timeout", None, f"no complete answer within {per_call:g}s{region}"))
                    progress.tick(task.cloud)
            done, _ = wait([*preps, *calls], timeout=min(left, 0.1), return_when=FIRST_COMPLETED)
            for fut in done:
                if fut in preps:
                    cloud = preps.pop(fut)
                    try:
                        module, ctx = fut.result()
                    except Exception as exc:  # noqa: BLE001 - any failure to start is this cloud's status
                        status, detail = classify(exc)
                        for t in by_cloud[cloud]:
                            record(t, Outcome(status, None, detail))
                        progress.tick(cloud, len(by_cloud[cloud]))
                        continue
                    for t in by_cloud[cloud]:
                        calls[pool.submit(run, module, ctx, t)] = t
                elif fut in calls:
                    task = calls.pop(fut)
                    try:
                        data = fut.result()
                    except Exception as exc:  # noqa: BLE001 - reported as the source's status
                        status, detail = classify(exc)
                        record(task, Outcome(status, None, detail))
                    else:
                        outcome = _checked(task, data)
                        record(task, outcome)
                        if outcome.status == "ok":
                            cache.put(task.key, data)  # the raw answer: it is checked again when read
                    progress.tick(task.cloud)
            progress.tick()
        for cloud in preps.values():
            for t in by_cloud[cloud]:
                record(t, Outcome("timeout", None, f"{cloud} client not ready within {_deadline_s(request):g}s"))
        for task in calls.values():
            region = f" ({task.region})" if task.region else ""
            record(task, Outcome("timeout", None, f"no answer within {_deadline_s(request):g}s{region}"))
    finally:
        pool.shutdown()
    return outcomes


def _can_fork(by_cloud: dict[str, list[Task]], sequential: bool) -> bool:
    """Fork a worker for AWS only where that is safe and pays: Linux, no other thread running yet (a fork
    copies no threads, so no lock can be left held), and both clouds to query."""
    return (not sequential and os.environ.get(FORK_ENV, "1") != "0" and sys.platform.startswith("linux")
            and hasattr(os, "fork") and threading.active_count() == 1 and len(by_cloud) > 1 and "aws" in by_cloud)


def _forked_aws(aws_tasks: list[Task], request: LiveRequest, cache: DiskCache,
                progress: _Progress) -> tuple[int, threading.Thread, dict[Task, Outcome]]:
    """Start the AWS calls in a forked child (its own interpreter state, so its CPU work - botocore
    models, clients, signing, parsing - runs on another core than the Google import). The child
    streams one JSON line per finished call, so whatever answered before a deadline is kept even if
    the child has to be killed; a reader thread collects them."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 1
        try:
            os.close(rfd)
            index = {t: i for i, t in enumerate(aws_tasks)}

            def send(task: Task, o: Outcome) -> None:
                try:
                    line = json.dumps([index[task], o.status, o.data, o.detail, list(o.notes)])
                except (TypeError, ValueError):
                    line = json.dumps([index[task], "error", None, "answer not serialisable", []])
                view = memoryview(line.encode() + b"\n")
                while view:
                    view = view[os.write(wfd, view):]

            _run_pool(aws_tasks, request, cache, _Progress(False, {}), sequential=False, on_outcome=send)
            code = 0
        finally:
            os._exit(code)  # never run the parent's atexit handlers or flush its buffers twice
    os.close(wfd)
    result: dict[Task, Outcome] = {}

    def read() -> None:
        with os.fdopen(rfd, "rb") as fh:
            for line in fh:
                try:
                    i, status, data, detail, notes = json.loads(line)
                    task = aws_tasks[i]
                except (ValueError, TypeError, IndexError):
                    continue  # a line cut short by a kill at the deadline
                result[task] = Outcome(status, data, detail, 0.0 if status == "ok" else None, tuple(notes))
                progress.tick("aws")

    reader = threading.Thread(target=read, name="gpufleet-live-aws", daemon=True)
    reader.start()
    return pid, reader, result


def execute(tasks: list[Task], request: LiveRequest, cache: DiskCache) -> dict[Task, Outcome]:
    """Run ``tasks`` (all of them network calls) concurrently; write successful answers to ``cache``."""
    by_cloud: dict[str, list[Task]] = defaultdict(list)
    for t in tasks:
        by_cloud[t.cloud].append(t)
    sequential = os.environ.get(SEQUENTIAL_ENV) == "1"
    progress = _Progress(request.progress, {c: len(ts) for c, ts in by_cloud.items()})
    try:
        if not _can_fork(by_cloud, sequential):
            return _run_pool(tasks, request, cache, progress, sequential)
        aws_tasks = by_cloud.pop("aws")
        pid, reader, aws_out = _forked_aws(aws_tasks, request, cache, progress)
        outcomes = _run_pool([t for ts in by_cloud.values() for t in ts], request, cache, progress, False)
        # The child reports its own timeouts at the same deadline; the second of grace lets them arrive.
        reader.join(timeout=max(_deadline_s(request) + 1.0 - (time.monotonic() - progress.t0), 0.1))
        killed = reader.is_alive()
        if killed:
            os.kill(pid, signal.SIGKILL)  # our own child, past the deadline
        os.waitpid(pid, 0)
        reader.join(timeout=1.0)
        for t in aws_tasks:
            region = f" ({t.region})" if t.region else ""
            outcomes[t] = aws_out.get(t) or Outcome(
                "timeout" if killed else "error", None,
                f"no answer within {_deadline_s(request):g}s{region}" if killed else "AWS worker gave no answer")
        return outcomes
    finally:
        progress.close()


# ----------------------------------------------------------------------------- summary


def _ago(age: float) -> str:
    return f"{age:.0f}s" if age < 120 else f"{age / 60:.0f} min" if age < 7200 else f"{age / 3600:.1f} h"


def summarize(outcomes: dict[Task, Outcome]) -> list[Source]:
    """Source rows: failures per (cloud, service, region), the rest folded per (cloud, service, status).

    A cloud whose every call failed the same way (its SDK missing, say) gets one row, not one per region.
    """
    rows: list[Source] = []
    by_cloud: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for t, o in outcomes.items():
        by_cloud[t.cloud].add((o.status, o.detail or ""))
    whole_cloud = {c for c, kinds in by_cloud.items()
                   if len(kinds) == 1 and next(iter(kinds))[0] in FAILURES and next(iter(kinds))[0] != "no-credentials"}
    for cloud in sorted(whole_cloud):
        status, detail = next(iter(by_cloud[cloud]))
        rows.append(Source(cloud, "all", "", status, scrub(detail), None))  # type: ignore[arg-type]
    groups: dict[tuple[str, str, str], list[Outcome]] = defaultdict(list)
    for t, o in outcomes.items():
        if t.cloud not in whole_cloud:
            groups[(t.cloud, t.service, t.region)].append(o)
    nocreds: dict[str, Outcome] = {}
    folded: dict[tuple[str, str, str, str], list[tuple[str, float | None]]] = defaultdict(list)
    for (cloud, service, region), outs in sorted(groups.items()):
        fails = [o for o in outs if o.status in FAILURES]
        notes = list(dict.fromkeys(n for o in outs for n in o.notes))
        if notes and not fails:
            # Answered, but some values were refused or are unknown: say which, on this region's own row.
            ages = [o.age_s for o in outs if o.age_s is not None]
            rows.append(Source(cloud, service, region, "partial", scrub("; ".join(notes), 400),
                               max(ages) if ages else None))
            continue
        if fails:
            worst = min(fails, key=lambda o: FAILURES.index(o.status))
            if worst.status == "no-credentials" and len(fails) == len(outs):
                nocreds.setdefault(cloud, worst)
                continue
            detail = worst.detail
            if len(outs) > 1 and len(fails) < len(outs):
                detail = f"{len(fails)} of {len(outs)} calls failed; {detail}"
            if notes:
                detail = f"{detail}; {'; '.join(notes)}"
            rows.append(Source(cloud, service, region, worst.status, scrub(detail), None))  # type: ignore[arg-type]
            continue
        ages = [o.age_s for o in outs if o.age_s is not None]
        age = max(ages) if ages else None
        if all(o.status == "offline" for o in outs):
            note = "from cache" if all(o.data is not None for o in outs) else (
                "no cached data: catalog only" if all(o.data is None for o in outs) else "partly cached")
            folded[(cloud, service, "offline", note)].append((region, age))
        elif any(o.status == "ok" for o in outs):
            folded[(cloud, service, "ok", "")] += [(region, 0.0)] * (1 if region else len(outs))
        else:
            folded[(cloud, service, "cached", "")] += [(region, age)] * (1 if region else len(outs))
    for cloud, o in sorted(nocreds.items()):
        rows.append(Source(cloud, "credentials", "", "no-credentials", scrub(o.detail), None))
    for (cloud, service, status, note), regions in sorted(folded.items()):
        names = [r for r, _ in regions if r]
        ages = [a for _, a in regions if a is not None]
        age = max(ages) if ages else None
        region = names[0] if len(names) == 1 else ""
        calls = len(regions) - len(names)  # region-less (global) calls, e.g. one per shape
        parts = [f"{len(names)} regions"] if len(names) > 1 else [f"{calls} calls"] if calls > 1 else []
        if note:
            parts.append(note)
        if status in ("cached", "offline") and age is not None:
            parts.append(f"oldest {_ago(age)} old")
        rows.append(Source(cloud, service, region, status, "; ".join(parts), age))  # type: ignore[arg-type]
    rows.sort(key=lambda s: (s.status in ("ok", "cached", "offline"), s.cloud, s.service, s.region))
    return rows


def gather(outcomes: dict[Task, Outcome], accels: set[str]) -> LiveData:
    """Collect the answers that carry data (fresh, cached, or offline-cached) into :class:`LiveData`."""
    d = LiveData(accelerators=accels)
    for t, o in outcomes.items():
        if o.data is None:
            continue
        p = dict(t.params)
        if t.op == "offerings":
            d.aws_offerings[t.region] = o.data
        elif t.op == "zones":
            d.aws_zone_ids[t.region] = o.data
        elif t.op == "spot_prices":
            d.aws_spot_rows[t.region] = o.data
        elif t.op == "quota":
            d.aws_quota_limits.setdefault(t.region, {})[o.data["code"]] = float(o.data["limit"])
        elif t.op == "usage":
            d.aws_usage[t.region] = o.data["usage"]  # classes of unknown usage are absent
        elif t.op == "scores":
            d.aws_scores.setdefault(p["instance_type"], {}).update(o.data)
        elif t.op == "ondemand_prices":
            d.aws_ondemand[p["instance_type"]] = o.data
        elif t.op == "region_quotas":
            d.gcp_quotas[t.region] = o.data
        elif t.op == "accelerator_zones":
            d.gcp_accel_zones = o.data
        elif t.op == "skus":
            d.gcp_unit_prices = o.data
        elif t.op == "reservations" and t.cloud == "aws":
            d.aws_reservations[t.region] = o.data
        elif t.op == "reservations":
            d.gcp_reservations = o.data
    return d


def collect(request: LiveRequest, tasks: list[Task]) -> dict[Task, Outcome]:
    """Answer each task from the cache when allowed and fresh, else from the network (or not at all offline)."""
    if not request.timeout_s > 0 or not math.isfinite(request.timeout_s):
        raise InputError("--timeout", f"must be a positive number of seconds, got {request.timeout_s:g}")
    cache = DiskCache(cache_root(request.cache_dir))
    now = time.time()
    outcomes: dict[Task, Outcome] = {}
    pending: list[Task] = []
    for t in tasks:
        entry = None if (request.refresh and not request.offline) else cache.get(t.key)
        checked = None
        if entry is not None:
            try:
                checked = check_answer(t.op, entry.data)
            except BadAnswer:
                entry = None  # the right key but data no call returns: a miss, rewritten by the next answer
        if request.offline:
            outcomes[t] = (Outcome("offline", checked.data, "", entry.age_s(now), checked.notes)
                           if entry is not None and checked is not None else Outcome("offline", None, "", None))
        elif entry is not None and checked is not None and fresh(entry, t.kind, now):
            outcomes[t] = Outcome("cached", checked.data, "", entry.age_s(now), checked.notes)
        else:
            pending.append(t)
    if pending:
        outcomes.update(execute(pending, request, cache))
    return outcomes


def fetch_live(request: LiveRequest, catalog: Catalog) -> LiveResult:
    """Query (or read from cache) everything ``request`` needs and overlay it on ``catalog``.

    Never raises for a cloud-side failure: failed parts are reported in ``sources`` and the
    affected candidates keep catalog prices and get no quota entry (``quota unknown``).
    """
    return fetch(request, catalog)


def fetch(request: LiveRequest, catalog: Catalog, *, pricing: bool = False, new_pairs: bool = False) -> LiveResult:
    """The whole ``--live`` path: tasks, cache, calls, overlay, sources."""
    tasks = build_tasks(request, catalog, pricing=pricing)
    outcomes = collect(request, tasks)
    data = gather(outcomes, canonical_accelerators(request.accelerators))
    live = apply(catalog, data, new_pairs=new_pairs)
    return LiveResult(catalog=live, quotas=quotas(data), sources=summarize(outcomes),
                      reservations=reservations(data, live))
