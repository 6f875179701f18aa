"""REFERENCE ONLY (tests): how the dispatcher's snapshot read a hub Workload before the fast paths of issue 33's
third round (placement/dispatch/snapshot.py, placement/model/contract.py and placement/dispatch/move.py at commit
df45f44), without any memo: every job spec parsed by ``parse_job``, every usage and template read anew, every
annotation read by the contract's readers, every object made by its dataclass's ``__init__``. Kept unchanged so that
tests/placement/dispatch/test_snapshot_reference.py can check that the snapshot reads every Workload, plain or
hostile, to the same fields and the same errors. Not imported by placement/."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

from placement.dispatch.model import (
    REMAINING_FLOOR_HOURS,
    ZERO,
    CheckpointHome,
    ClusterQueueState,
    FlavorState,
    HubWorkload,
    Need,
    QueuedWorkload,
    WorkerState,
)
from placement.dispatch.move import FROM_ANNOTATION
from placement.dispatch.snapshot import (
    JOB_SPEC_ANNOTATION,
    KUEUE_ADMISSION,
    OWNER_KINDS,
    _limit,
    _str,
    parse_time,
    pod_requests,
    problem_text,
    resources,
)
from placement.errors import InputError
from placement.fleet.stacks import ClusterStack
from placement.model import contract
from placement.model import kueue as ko
from placement.model.contract import (
    CHECKPOINT_GB,
    CHECKPOINT_HOME,
    CHECKPOINT_REGION,
    FABRIC_GROUP,
    JOB_SPEC,
    LAST_DURABLE_STEP,
    MAX_URI,
    STEPS_PER_HOUR,
    WORKERS,
    Checkpoint,
    JobAnnotations,
    _given,
    _region_problem,
    _shown,
    read_fabric_group,
    read_gb,
    read_job_spec_text,
    read_progress,
    read_workers,
)
from placement.model.jobspec import JOB_FIELDS, JobSpec, parse_job
from placement.model.kueue import Allocatable
from placement.model.zones import known_regions


def pool_affinity(template: Mapping[str, Any] | None) -> frozenset[str] | None:
    """The pool names a pod may use: ``gpufleet.io/pool`` in its node selector or required node affinity
    (``In``; several terms are ORed); None when neither constrains it."""
    spec = (template or {}).get("spec") or {}
    selector = spec.get("nodeSelector") or {}
    pools: set[str] | None = {str(selector[ko.POOL_LABEL])} if ko.POOL_LABEL in selector else None
    terms = ((((spec.get("affinity") or {}).get("nodeAffinity") or {})
              .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or [])
    allowed: set[str] = set()
    constrained = bool(terms)
    for term in terms:
        exprs = [e for e in term.get("matchExpressions") or [] if e.get("key") == ko.POOL_LABEL]
        if not exprs:
            constrained = False  # a term without a pool constraint matches every pool
            break
        vals: set[str] | None = None
        for e in exprs:
            if e.get("operator") == "In":
                vals = set(e.get("values") or []) if vals is None else vals & set(e.get("values") or [])
        if vals is not None:
            allowed |= vals
        else:
            constrained = False
            break
    if constrained:
        pools = allowed if pools is None else pools & allowed
    return frozenset(pools) if pools is not None else None


def _condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


def condition_true(obj: Mapping[str, Any], kind: str) -> bool:
    c = _condition(obj, kind)
    return c is not None and c.get("status") == "True"


def needs(wl: Mapping[str, Any]) -> tuple[Need, ...]:
    """The Workload's pod sets (every usage read anew: no memo)."""
    spec, status = wl.get("spec") or {}, wl.get("status") or {}
    assigned = {a.get("name"): a for a in ((status.get("admission") or {}).get("podSetAssignments") or [])}
    out = []
    for ps in spec.get("podSets") or []:
        name = str(ps.get("name") or "main")
        a = assigned.get(name) or {}
        count = int(a.get("count") or ps.get("count") or 1)
        usage = a.get("resourceUsage")
        if usage:
            total = resources(usage)
            per_pod = Allocatable(-(-total.cpu_millis // count), -(-total.memory_mib // count),
                                  -(-total.gpus // count), -(-total.efa // count))
        else:
            per_pod = pod_requests(ps.get("template"))
        out.append(Need(name=name, count=count, per_pod=per_pod, pools=pool_affinity(ps.get("template"))))
    return tuple(out)


def owner_key(wl: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(kind, namespace, name) of the Job or JobSet that owns the Workload."""
    meta = wl.get("metadata") or {}
    refs = meta.get("ownerReferences") or []
    ref = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
    if ref is None or (ref.get("apiVersion"), ref.get("kind")) not in OWNER_KINDS:
        return None
    return str(ref["kind"]), str(meta.get("namespace") or ""), str(ref.get("name"))


def nominated_since(wl: Mapping[str, Any]) -> float | None:
    """When ``kueue-admission`` last applied ``status.nominatedClusterNames`` (``managedFields``), if it owns it."""
    for mf in (wl.get("metadata") or {}).get("managedFields") or []:
        if mf.get("manager") != KUEUE_ADMISSION or mf.get("subresource") != "status":
            continue
        if "f:nominatedClusterNames" in ((mf.get("fieldsV1") or {}).get("f:status") or {}):
            return parse_time(mf.get("time"))
    return None


def hub_workload(wl: Mapping[str, Any], owner: Mapping[str, Any] | None, checks: Mapping[str, str],
                 configs: Mapping[str, Sequence[str]], cq_checks: Mapping[str, frozenset[str]]) -> HubWorkload | None:
    """A hub Workload as the decision function sees it; None unless its ClusterQueue has a MultiKueue check.

    ``owner`` is its Job/JobSet (the annotations ``placement submit --via-hub`` wrote), ``checks`` the
    MultiKueue AdmissionChecks (:func:`multikueue_checks`), ``configs`` the MultiKueueConfigs' clusters.

    Hostile data never raises: a Workload that cannot be read comes back with ``problem`` set (reported on
    it, never nominated); an owner's job spec that cannot be read, or that names a field this version does
    not know (written by a newer ``placement submit``), with ``job_error`` set (the Workload waits: its job
    is never guessed)."""
    try:
        return _hub_workload(wl, owner, checks, configs, cq_checks)
    except Exception as exc:  # one Workload's data, whatever it is, never stops the pass for the others
        meta = wl.get("metadata") if isinstance(wl, Mapping) else None
        meta = meta if isinstance(meta, Mapping) else {}
        ns, name, uid = _str(meta.get("namespace")), _str(meta.get("name")), _str(meta.get("uid"))
        if not (ns and name and uid):
            return None
        return HubWorkload(namespace=ns, name=name, uid=uid, created=0.0, priority=0, queue_name="",
                           cluster_queue=None, check=None, check_state=None, allowed=(),
                           problem=f"the Workload cannot be read: {problem_text(exc)}")


def job_spec_of(doc: dict[str, Any]) -> tuple[tuple[dict[str, Any], JobSpec] | None, str | None]:
    """:func:`read_job_spec` of a document already read from its JSON."""
    unknown = sorted(str(k)[:40] for k in doc if k not in JOB_FIELDS)
    if unknown:
        return None, (f"{JOB_SPEC_ANNOTATION}: field {', '.join(unknown[:3])} is unknown to this dispatcher "
                      "(written by a newer placement submit?); the job waits until the dispatcher is upgraded or "
                      "the field is removed")
    try:
        return (doc, parse_job(doc)), None
    except InputError as exc:
        return None, f"{JOB_SPEC_ANNOTATION}: {exc}"
    except Exception as exc:
        return None, f"{JOB_SPEC_ANNOTATION}: {problem_text(exc)}"


def _hub_workload(wl: Mapping[str, Any], owner: Mapping[str, Any] | None, checks: Mapping[str, str],
                  configs: Mapping[str, Sequence[str]], cq_checks: Mapping[str, frozenset[str]]) -> HubWorkload | None:
    meta, spec, status = wl.get("metadata") or {}, wl.get("spec") or {}, wl.get("status") or {}
    cq = (status.get("admission") or {}).get("clusterQueue")
    states = {str(a.get("name")): a for a in status.get("admissionChecks") or []}
    check = next((n for n in states if n in checks), None)
    if check is None or cq is None or check not in cq_checks.get(str(cq), frozenset()):
        return None
    owner_meta = (owner or {}).get("metadata") or {}
    # What submit wrote on the owner, read as placement.model.contract says: an unreadable job spec is an error (the
    # Workload waits: its job is never guessed); any other annotation that cannot be read is a warning, read as
    # unknown (a checkpoint home without a size is valid: its move is priced as unknown).
    annotations = owner_meta.get("annotations") if type(owner_meta) is dict or isinstance(owner_meta, Mapping) else None
    read = read_annotations(annotations, known_regions())
    job = None
    job_error = read.job_spec_error
    delay = None
    if read.job_spec is not None:
        parsed, job_error = job_spec_of(read.job_spec)
        if parsed is not None:
            doc, job = parsed
            # Set in the spec (0 included: waiting is free for this job), not the engine's default of 0.
            if doc.get("usd_per_hour_of_delay") is not None:
                delay = job.usd_per_hour_of_delay
    home = home_of(read.checkpoint, job)
    nominated = status.get("nominatedClusterNames") or []
    if not isinstance(nominated, list) or not all(isinstance(n, str) for n in nominated):
        raise ValueError("status.nominatedClusterNames is not a list of cluster names")
    if not isinstance(status.get("clusterName") or "", str):
        raise ValueError("status.clusterName is not a cluster name")
    stats = (status.get("schedulingStats") or {}).get("evictions") or []
    evictions = (sum(int(e.get("count") or 0) for e in stats)
                 or int((status.get("requeueState") or {}).get("count") or 0))
    admitted = admitted_hours(status)
    return HubWorkload(
        namespace=str(meta.get("namespace") or ""), name=str(meta.get("name") or ""), uid=str(meta.get("uid") or ""),
        created=parse_time(meta.get("creationTimestamp")) or 0.0, priority=int(spec.get("priority") or 0),
        queue_name=str(spec.get("queueName") or ""), cluster_queue=str(cq), check=check,
        check_state=str(states[check].get("state") or ""), allowed=tuple(configs.get(checks[check], ())),
        nominated=tuple(nominated), nominated_since=nominated_since(wl),
        cluster_name=status.get("clusterName") or None, quota_reserved=condition_true(wl, "QuotaReserved"),
        evicted=condition_true(wl, "Evicted"), finished=condition_true(wl, "Finished"), evictions=evictions,
        needs=needs(wl), job=job, job_error=job_error, group=read.group, group_workers=read.workers,
        delay_usd_per_hour=delay, checkpoint=home, warnings=read.warnings, progress=read.progress,
        admitted_hours=admitted)


def admitted_hours(status: Mapping[str, Any]) -> float | None:
    """Hours a Workload was admitted in its previous admit-evict cycles: Kueue's
    ``status.accumulatedPastExecutionTimeSeconds`` (v1beta2; v1beta1 spells it ``accumulatedPastExexcutionTime
    Seconds``), an int32 of seconds that Kueue's workload controller adds to when the Admitted condition turns
    false. None when absent or not a whole number of seconds from 0 to 2^31 - 1 (the status is the hub's
    controller's, but a malformed one is read as unknown, never trusted)."""
    for key in ("accumulatedPastExecutionTimeSeconds", "accumulatedPastExexcutionTimeSeconds"):
        value = status.get(key)
        if value is None:
            continue
        if type(value) is int and 0 <= value <= 2**31 - 1:
            return value / 3600.0
        return None
    return None


def worker_state(key: str, cluster: ClusterStack | None, objects: Mapping[str, Sequence[Mapping[str, Any]]],
                 now: float, hours: Mapping[tuple[str, str], float] | None = None, *, reachable: bool = True,
                 error: str | None = None) -> WorkerState:
    """A worker's queues from its ``clusterqueues``, ``localqueues``, ``workloads`` and ``resourceflavors``.

    ``hours`` gives the expected length of workloads the hub knows (by namespace and name: MultiKueue copies
    them under the same names) so a running one's remaining time is its length minus the time since it was
    admitted (at least :data:`REMAINING_FLOOR_HOURS`); else ``spec.maximumExecutionTimeSeconds`` bounds it."""
    if not reachable:
        return WorkerState(key=key, cluster=cluster, reachable=False, error=error)
    hours = hours or {}
    pools = {str((f.get("metadata") or {}).get("name")):
             ((f.get("spec") or {}).get("nodeLabels") or {}).get(ko.POOL_LABEL)
             for f in objects.get("resourceflavors", ())}
    local = {(str((q.get("metadata") or {}).get("namespace")), str((q.get("metadata") or {}).get("name"))):
             str((q.get("spec") or {}).get("clusterQueue")) for q in objects.get("localqueues", ())}
    by_cq: dict[str, list[QueuedWorkload]] = {}
    for wl in objects.get("workloads", ()):
        if condition_true(wl, "Finished"):
            continue
        meta, spec, status = wl.get("metadata") or {}, wl.get("spec") or {}, wl.get("status") or {}
        ns, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        admitted = condition_true(wl, "QuotaReserved")
        cq = ((status.get("admission") or {}).get("clusterQueue") if admitted
              else local.get((ns, str(spec.get("queueName")))))
        if not cq:
            continue
        flavors = frozenset(str(f) for a in ((status.get("admission") or {}).get("podSetAssignments") or [])
                            for f in (a.get("flavors") or {}).values())
        remaining = None
        length = hours.get((ns, name))
        if admitted:
            start = parse_time((_condition(wl, "QuotaReserved") or {}).get("lastTransitionTime")) or now
            limit = spec.get("maximumExecutionTimeSeconds")
            if length is None and limit:
                length = float(limit) / 3600
            if length is not None:
                remaining = max(length - (now - start) / 3600, REMAINING_FLOOR_HOURS)
        gpus = sum(n.total.gpus for n in needs(wl))
        by_cq.setdefault(str(cq), []).append(QueuedWorkload(
            namespace=ns, name=name, priority=int(spec.get("priority") or 0), gpus=gpus,
            created=parse_time(meta.get("creationTimestamp")) or 0.0, admitted=admitted, flavors=flavors,
            remaining_hours=remaining, hours=None if admitted else length))
    queues = {}
    for cq in objects.get("clusterqueues", ()):
        name = str((cq.get("metadata") or {}).get("name"))
        reserved = {str(f.get("name")): resources({r.get("name"): r.get("total") for r in f.get("resources") or []})
                    for f in (cq.get("status") or {}).get("flavorsReservation") or []}
        states: list[FlavorState] = []
        for group in (cq.get("spec") or {}).get("resourceGroups") or []:
            for f in group.get("flavors") or []:
                fname = str(f.get("name"))
                rows = f.get("resources") or []
                nominal = resources({r.get("name"): r.get("nominalQuota") for r in rows})
                states.append(FlavorState(name=fname, pool=pools.get(fname), nominal=nominal,
                                          reserved=reserved.get(fname, ZERO),
                                          lending_limit=_limit(rows, "lendingLimit"),
                                          borrowing_limit=_limit(rows, "borrowingLimit")))
        cohort = (cq.get("spec") or {}).get("cohortName")
        queues[name] = ClusterQueueState(name=name, flavors=tuple(states), workloads=tuple(by_cq.get(name, ())),
                                         cohort=str(cohort) if cohort else None)
    return WorkerState(key=key, cluster=cluster, reachable=True, local_queues=local, cluster_queues=queues)


def read_checkpoint(annotations: Mapping[str, Any], regions: Mapping[str, Collection[str]] | None = None
                    ) -> tuple[Checkpoint | None, tuple[str, ...]]:
    """The job's :class:`Checkpoint` from its annotations (None: it names no home, or not one that can be read) and
    the warnings of what was read as unknown, each starting with the annotation's name. ``regions`` (cloud ->
    region names) refuses a region no cloud has. Hostile data: never raises, never refuses the job.

    The home needs :data:`CHECKPOINT_HOME` and :data:`CHECKPOINT_REGION` together; :data:`CHECKPOINT_GB` is
    optional (absent: the size is unknown)."""
    get = annotations.get
    home, where, gb = get(CHECKPOINT_HOME), get(CHECKPOINT_REGION), get(CHECKPOINT_GB)
    if home is None and where is None and gb is None:  # the common case of a job without a home: at once
        return None, ()
    home, where, gb = (None if home == "" else home), (None if where == "" else where), (None if gb == "" else gb)
    if home is None and where is None:
        extra = (f"{CHECKPOINT_GB}: without {CHECKPOINT_HOME}; ignored",) if gb is not None else ()
        return None, extra
    unknown = "the checkpoint home is unknown (a move of the job's progress is not priced)"
    if home is None or where is None:
        missing, given = (CHECKPOINT_HOME, CHECKPOINT_REGION) if home is None else (CHECKPOINT_REGION, CHECKPOINT_HOME)
        return None, (f"{missing}: missing beside {given} (placement submit writes both); {unknown}",)
    if not isinstance(home, str) or len(home) > MAX_URI or any(map(str.isspace, home)):
        return None, (f"{CHECKPOINT_HOME}: {_shown(home)} is not a URI such as s3://bucket/path (one line, at most "
                      f"{MAX_URI} characters); {unknown}",)
    problem = _region_problem(where, regions)
    if problem:
        return None, (f"{CHECKPOINT_REGION}: {problem}; {unknown}",)
    cloud, _, region = str(where).partition(":")
    size, why = read_gb(gb)
    return Checkpoint(home=home, cloud=cloud, region=region, gb=size), ((why,) if why else ())


def read_annotations(annotations: Any, regions: Mapping[str, Collection[str]] | None = None, *,
                     job_spec: bool = True) -> JobAnnotations:
    """Every annotation the dispatcher and ``report`` read from a job, as :class:`JobAnnotations`. Hostile data:
    never raises; only an unreadable job spec is an error, every other problem a warning. ``job_spec`` False: all
    but the job spec (the caller read it already), ``job_spec`` and ``job_spec_error`` then None."""
    if type(annotations) is not dict and not isinstance(annotations, Mapping):
        return JobAnnotations(warnings=("metadata.annotations: not a mapping; read as none",)
                              if annotations is not None else ())
    spec = _given(annotations, JOB_SPEC) if job_spec else None
    doc, error = read_job_spec_text(spec) if spec is not None else (None, None)
    group, why_group = read_fabric_group(annotations.get(FABRIC_GROUP))
    workers, why_workers = read_workers(annotations.get(WORKERS))
    checkpoint, warnings = read_checkpoint(annotations, regions)
    if why_group or why_workers:
        warnings = tuple(w for w in (why_group, why_workers) if w) + warnings
    progress, why_progress = read_progress(annotations) if LAST_DURABLE_STEP in annotations or \
        STEPS_PER_HOUR in annotations else (None, ())
    return JobAnnotations(doc, error, group, workers, checkpoint, warnings + why_progress, progress)


def home_of(found: contract.Checkpoint | None, job: JobSpec | None = None) -> CheckpointHome | None:
    """The :class:`CheckpointHome` of a home read from the annotations; without a size there, ``job``'s own (its
    ``checkpoint.size_gb``, else the training state of its model: :func:`placement.fleet.durable.checkpoint_size`),
    else unknown."""
    if found is None:
        return None
    home = CheckpointHome(uri=found.home, cloud=found.cloud, region=found.region, gb=found.gb,
                          gb_from=FROM_ANNOTATION if found.gb is not None else "")
    return with_job_size(home, job)


def with_job_size(home: CheckpointHome, job: JobSpec | None) -> CheckpointHome:
    """``home`` with the size ``job``'s spec gives when its annotation gave none (unchanged otherwise)."""
    if home.gb is not None or job is None:
        return home
    from placement.fleet.durable import checkpoint_size

    size = checkpoint_size(job)
    return home if size is None else replace(home, gb=size[0], gb_from=size[1])
