"""Kueue objects (``kueue.x-k8s.io/v1beta2`` dicts as the API server returns them) -> the dispatcher's
snapshots, and the nomination the dispatcher applies. Pure: dicts in, frozen dataclasses / dicts out.

Field names and semantics follow Kueue v0.19.2 (``apis/kueue/v1beta2/workload_types.go``,
``clusterqueue_types.go``; ``pkg/workload/patching/patching.go`` for what the ``kueue-admission`` field
manager applies).

Over 600 lines, for one reason: a dispatch pass reads 1,000 hub Workloads within issue 33's target only through the
memos beside the readers they stand in for (job specs by their text but for the name, and but for the name and size;
owners' annotations but for the home's URI; reserved usages), and each fast path must fail on hostile data where, and
as, the reader it replaces does: they are kept next to each other (tests/placement/dispatch/reference_snapshot.py is
the read without them, which the tests compare every field with).
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from placement.dispatch.model import (
    REMAINING_FLOOR_HOURS,
    UNLIMITED,
    ZERO,
    ClusterQueueState,
    FlavorState,
    HubWorkload,
    Need,
    QueuedWorkload,
    WorkerState,
    from_fields,
)
from placement.dispatch.move import home_of
from placement.errors import InputError
from placement.fleet.stacks import ClusterStack
from placement.model import contract
from placement.model import kueue as ko
from placement.model.jobspec import JOB_FIELDS, JobSpec, job_size, job_with, largest_node, parse_job
from placement.model.k8snames import dns1123_label_problem, jobset_name_problem
from placement.model.kueue import Allocatable
from placement.model.shapes import shape_book
from placement.model.zones import known_regions

JOB_SPEC_ANNOTATION = contract.JOB_SPEC

KUEUE_ADMISSION = "kueue-admission"  # Kueue's field manager for admission status (constants.AdmissionName)
# Conditions Kueue's admission patch carries (patching.admissionManagedConditions in v0.19.2).
ADMISSION_CONDITIONS = ("QuotaReserved", "BlockedOnPreemptionGates", "Evicted", "Admitted", "Preempted",
                        "Requeued", "DeactivationTarget", "Finished", "PodsReady")
OWNER_KINDS = {("batch/v1", "Job"), ("jobset.x-k8s.io/v1alpha2", "JobSet")}

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}


MAX_QUANTITY = 1e21  # beyond any real resource (a zettabyte of memory): a larger quantity is refused


def quantity(value: Any) -> float:
    """A Kubernetes resource quantity (``"1500m"``, ``"32Gi"``, ``8``, ``"1e3"``) as a number of units;
    ValueError when it is not one, negative, not finite or above :data:`MAX_QUANTITY` (``"1e400"``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"quantity must be a number or a string, got {type(value).__name__}")
    if isinstance(value, (int, float)):
        number = float(value) if abs(value) < 1e300 else math.inf
    else:
        number = _text_quantity(value.strip()[:64])
    if not math.isfinite(number) or not 0 <= number <= MAX_QUANTITY:
        raise ValueError(f"quantity {str(value)[:24]!r} is not a finite, non-negative quantity")
    return number


@functools.lru_cache(maxsize=4096)  # a pass reads the same few quantities on every Workload; errors are not kept
def _text_quantity(text: str) -> float:
    for suffix, scale in _BINARY.items():
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * scale
    if text and text[-1] in _DECIMAL and not text[-1].isdigit() and not (len(text) > 1 and text[-2] in "eE"):
        return float(text[:-1]) * _DECIMAL[text[-1]]
    return float(text)


def resources(rl: Mapping[str, Any] | None) -> Allocatable:
    """A resource list as CPU millicores, memory MiB, GPUs and EFA devices (rounded up)."""
    rl = rl or {}
    if not isinstance(rl, Mapping):
        raise ValueError(f"a resource list must be a mapping, got {type(rl).__name__}")
    # Each resource rounded up from its quantity times its scale (1000 for millicores, 2^-20 for MiB, else 1), in
    # this order; 0 when absent. Written out: one call per resource list of every Workload of a pass.
    cpu = math.ceil(quantity(rl[ko.RES_CPU]) * 1000 - 1e-9) if ko.RES_CPU in rl else 0
    memory = math.ceil(quantity(rl[ko.RES_MEMORY]) * (1 / 2**20) - 1e-9) if ko.RES_MEMORY in rl else 0
    gpus = math.ceil(quantity(rl[ko.RES_GPU]) * 1.0 - 1e-9) if ko.RES_GPU in rl else 0
    efa = math.ceil(quantity(rl[ko.RES_EFA]) * 1.0 - 1e-9) if ko.RES_EFA in rl else 0
    # Allocatable(cpu, memory, gpus, efa) without the frozen dataclass's __init__ (a worker's snapshot reads a few
    # hundred): its fields, in order, as the instance's __dict__.
    return from_fields(Allocatable, {"cpu_millis": cpu, "memory_mib": memory, "gpus": gpus, "efa": efa,
                                     "hugepages_mib": 0})


def _max(a: Allocatable, b: Allocatable) -> Allocatable:
    return Allocatable(max(a.cpu_millis, b.cpu_millis), max(a.memory_mib, b.memory_mib), max(a.gpus, b.gpus),
                       max(a.efa, b.efa))


def pod_requests(template: Mapping[str, Any] | None) -> Allocatable:
    """A pod's effective requests: its containers plus native sidecars, or its largest init container if
    more (requests, else limits, as Kubernetes defaults them)."""
    spec = (template or {}).get("spec") or {}

    def req(c: Mapping[str, Any]) -> Allocatable:
        r = c.get("resources") or {}
        return resources({**(r.get("limits") or {}), **(r.get("requests") or {})})

    total = ZERO
    for c in spec.get("containers") or []:
        total = total + req(c)
    init_peak = ZERO
    for c in spec.get("initContainers") or []:
        if c.get("restartPolicy") == "Always":
            total = total + req(c)
        else:
            init_peak = _max(init_peak, req(c))
    return _max(total, init_peak)


def pool_affinity(template: Mapping[str, Any] | None) -> frozenset[str] | None:
    """The pool names a pod may use: ``gpufleet.io/pool`` in its node selector or required node affinity
    (``In``; several terms are ORed); None when neither constrains it."""
    if type(template) is dict:  # the common case at once: a pod spec that names neither (read below as None)
        spec = template.get("spec")
        if not spec or type(spec) is dict and not spec.get("nodeSelector") and not spec.get("affinity"):
            return None
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


def parse_time(value: Any) -> float | None:
    """RFC 3339 (``2026-11-23T18:03:00Z``, with or without fractions) as seconds since the epoch."""
    # The form the API server writes (``2026-11-23T18:03:05Z``) by its minute, read before, and its seconds: the
    # Workloads of a burst were created within a few minutes. A minute is kept once a whole text of that form is read.
    if type(value) is str and len(value) == 20 and value[19] == "Z":
        minute = _MINUTES.get(value[:17])
        if minute is not None:
            second = _SECONDS.get(value[17:19])
            if second is not None:
                return minute + second
    if not value:
        return None
    try:
        read = datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
    if type(value) is str and _PLAIN_TIME.fullmatch(value):
        if len(_MINUTES) >= _MINUTES_MAX:
            _MINUTES.clear()
        _MINUTES[value[:17]] = read - _SECONDS[value[17:19]]
    return read


# parse_time's minutes ("2026-11-23T18:03:") as seconds since the epoch, and a minute's seconds ("00" to "59": a leap
# second is refused, as datetime refuses it): whole numbers, so a minute plus its seconds is the float that
# datetime.timestamp() gives. Bounded: 17 characters a key, cleared whole when full.
_MINUTES: dict[str, float] = {}
_MINUTES_MAX = 4096
_SECONDS = {f"{s:02d}": s for s in range(60)}
_PLAIN_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-5][0-9]Z")


def _condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    # A loop, not next() of a generator (a worker's snapshot reads three per Workload): the same reads, in order.
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return c
    return None


def condition_true(obj: Mapping[str, Any], kind: str) -> bool:
    c = _condition(obj, kind)
    return c is not None and c.get("status") == "True"


def needs(wl: Mapping[str, Any]) -> tuple[Need, ...]:
    """The Workload's pod sets: counts and per-pod requests from its admission (what Kueue reserved) when it
    has one, else from the pod templates."""
    return _needs(wl.get("spec"), wl.get("status"))


def _needs(spec: Any, status: Any) -> tuple[Need, ...]:
    """:func:`needs` of a Workload whose ``spec`` and ``status`` are these (the hub's snapshot has read them)."""
    spec, status = spec or {}, status or {}
    assigned = {}
    for a in (status.get("admission") or {}).get("podSetAssignments") or []:
        assigned[a.get("name")] = a
    out = []
    for ps in spec.get("podSets") or []:
        name = str(ps.get("name") or "main")
        a = assigned.get(name) or {}
        count = int(a.get("count") or ps.get("count") or 1)
        usage = a.get("resourceUsage")
        # Workloads of one shape reserve the same usage: its share per pod is read once, by its text (strings only,
        # so that no other value that compares equal, such as True for 1, reads as it).
        key = None
        if type(usage) is dict and usage and len(usage) <= _USAGE_KEYS_MAX:
            for v in usage.values():
                if type(v) is not str or len(v) > _QUANTITY_MAX:
                    break
            else:
                key = (count, tuple(usage.items()))
        per_pod = _PER_POD.get(key) if key is not None else None
        if per_pod is None:
            if usage:
                total = resources(usage)  # before the template's pools, as ever: its error is the one reported
                per_pod = Allocatable(-(-total.cpu_millis // count), -(-total.memory_mib // count),
                                      -(-total.gpus // count), -(-total.efa // count))
                if key is not None:
                    if len(_PER_POD) >= _PER_POD_MAX:
                        _PER_POD.clear()
                    _PER_POD[key] = per_pod
            else:
                per_pod = pod_requests(ps.get("template"))
        out.append(Need.of(name, count, per_pod, pool_affinity(ps.get("template"))))
    return tuple(out)


# Per-pod requests read from a reserved usage, by (count, the usage's items): a pass reads the same few on every
# Workload. Bounded (tenants write these); cleared whole when full. An Allocatable is frozen: one is shared.
_PER_POD: dict[tuple[Any, ...], Allocatable] = {}
_PER_POD_MAX = 4096
# What a key may hold, so that the memo's size is bounded by its entries: a usage names a few resources, each a
# quantity of a few characters; a larger one is read every time.
_USAGE_KEYS_MAX = 32
_QUANTITY_MAX = 64


def multikueue_checks(admission_checks: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """MultiKueue AdmissionCheck name -> its MultiKueueConfig name (controller ``kueue.x-k8s.io/multikueue``)."""
    out = {}
    for ac in admission_checks:
        try:
            spec = ac.get("spec") or {}
            if spec.get("controllerName") == ko.MULTIKUEUE_CONTROLLER:
                params = spec.get("parameters") or {}
                out[str((ac.get("metadata") or {}).get("name"))] = str(params.get("name") or "")
        except (AttributeError, TypeError):  # an unreadable check is no MultiKueue check
            continue
    return out


def cluster_queue_checks(cluster_queues: Sequence[Mapping[str, Any]]) -> dict[str, frozenset[str]]:
    """ClusterQueue name -> the admission checks it requires (``admissionChecksStrategy`` or ``admissionChecks``)."""
    out = {}
    for cq in cluster_queues:
        try:
            spec = cq.get("spec") or {}
            names = {str(r.get("name"))
                     for r in (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or []}
            names |= {str(n) for n in spec.get("admissionChecks") or []}
            out[str((cq.get("metadata") or {}).get("name"))] = frozenset(names)
        except (AttributeError, TypeError):  # an unreadable queue requires nothing we can read: none of ours
            continue
    return out


def owner_key(wl: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(kind, namespace, name) of the Job or JobSet that owns the Workload."""
    meta = wl.get("metadata") or {}
    refs = meta.get("ownerReferences") or []
    # The controller's, else the first: a loop (one call per Workload of a pass) in the order the generator it
    # replaces failed on hostile data: iter() first, then the first reference, then each one's fields.
    found = iter(refs)
    ref = refs[0] if refs else None
    for r in found:
        if r.get("controller"):
            ref = r
            break
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


def problem_text(exc: BaseException) -> str:
    """One line for what went wrong reading hostile data (redacted; never the data itself at length)."""
    from placement.fleet.redact import redact

    text = str(exc).splitlines()[0] if str(exc) else ""
    return redact(f"{exc.__class__.__name__}: {text}"[:300] if text else exc.__class__.__name__)


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


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
        return HubWorkload.of({**_UNREADABLE, "namespace": ns, "name": name, "uid": uid,
                               "problem": f"the Workload cannot be read: {problem_text(exc)}"})


# The fields of a Workload that cannot be read, in order (HubWorkload.of: its dict), but its name and problem.
_UNREADABLE: dict[str, Any] = dict(vars(HubWorkload(
    namespace="", name="", uid="", created=0.0, priority=0, queue_name="", cluster_queue=None, check=None,
    check_state=None, allowed=())))


# Parsed job specs by their text without the name and size (JSON, the other fields in their order), each parsed
# with a placeholder name and size: Workloads of one shape repeat all but their names, shapes differ mostly in their
# GPUs and hours, and parse_job is most of a snapshot's time. Bounded (tenants write these); cleared whole when full,
# as a pass holds few shapes.
_PARSED: dict[str, JobSpec | None] = {}
_PARSED_MAX = 4096
# Characters of a memo's key (a spec's text): a spec submit writes is well under 2,000; a tenant may write one of
# up to 256 KiB (the API server's limit on a Job's annotations), which is read every time instead of being kept, so
# that the memos hold at most 4,096 x 16 KiB each.
_KEY_MAX = 16_384
_PLACEHOLDER = {"name": "x", "gpus": 1, "hours": 1}  # values every check of parse_job accepts, in any job
# The same, one step earlier: by the annotation's text with the name's value cut out (:func:`_split_name`), the
# job read from it, the largest node and whether the spec sets usd_per_hour_of_delay. A hit skips reading the
# JSON, the key above (itself JSON written back) and the field checks: most of a Workload's snapshot.
_BY_TEXT: dict[str, tuple[JobSpec, int, bool]] = {}
# And one step further: by that text with the values of "gpus" and "hours" cut out too (:func:`_split_size`), a job
# of one of its sizes and whether it sets usd_per_hour_of_delay: nothing else parse_job reads depends on the size
# but the name's JobSet check (jobspec.job_size), so another size is that job with its GPUs, hours and name.
_BY_SHAPE: dict[str, tuple[JobSpec, bool]] = {}
_NAME_KEY = '"name":"'


def _largest_node(job: JobSpec) -> int:
    """GPUs of the largest node that may hold ``job`` (parse_job's JobSet check: :func:`jobspec.largest_node`)."""
    return largest_node(job.accelerators, job.gpus_per_node, job.gpus, shape_book())


def _name_checks_pass(job: JobSpec, largest: int, name: str) -> bool:
    """Whether ``name`` passes parse_job's checks of a name for ``job`` (a DNS-1123 label; a JobSet's pod names
    when no one node of ``largest`` GPUs holds the job)."""
    if dns1123_label_problem(name):
        return False
    return not (job.gpus > largest and jobset_name_problem(name, -(-job.gpus // largest)))


def _parse_job_memo(doc: dict[str, Any]) -> JobSpec:
    """``parse_job(doc)``, the same job or the same error, memoised by the spec without its name and size: the rest
    is parsed once (with placeholders every check accepts), the size read as parse_job reads it
    (:func:`placement.model.jobspec.job_size`) and the name's own checks (a DNS-1123 label; a JobSet's pod names
    when no one node holds the job) applied to each Workload. Anything unusual (a name, size or spec parse_job
    refuses) goes through ``parse_job`` itself, which says why."""
    name = doc.get("name")
    try:
        key = json.dumps([[k, v] for k, v in doc.items() if k not in _PLACEHOLDER], allow_nan=True)
    except Exception:  # not serialisable back (nesting): parse_job says why, as it would have
        return parse_job(doc)
    if len(key) > _KEY_MAX:
        return parse_job(doc)
    if key in _PARSED:
        hit = _PARSED[key]
    else:
        try:
            hit = parse_job({**doc, **_PLACEHOLDER})
        except Exception:
            hit = None  # refused for a field other than the name or size: parse_job on the real spec says why
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[key] = hit
    if hit is None or not isinstance(name, str):
        return parse_job(doc)
    try:
        gpus, hours = job_size(doc)
    except Exception:
        return parse_job(doc)
    job = job_with(hit, name=name, gpus=gpus, hours=hours)
    if not _name_checks_pass(job, _largest_node(job), name):
        return parse_job(doc)
    return job


def _split_name(text: str) -> tuple[str, str] | None:
    """``(text without the name's value, the name)`` for a job spec text of the plain form submit writes: no
    backslash (so no escape: every ``"`` opens or closes a string) and ``"name"`` once, as ``"name":"<value>"``.
    Two such texts with the same first part differ in that one string alone, so they read as the same document
    but for that string (which :func:`_remember_job_spec` checks is the top-level name). None for any other text:
    read the slow way."""
    if len(text) > _KEY_MAX or "\\" in text or text.count('"name"') != 1:
        return None
    at = text.find(_NAME_KEY)
    if at < 0:
        return None
    start = at + len(_NAME_KEY)
    end = text.find('"', start)
    if end < 0:
        return None
    return text[:start] + text[end:], text[start:end]


def _known_job_spec(text: Any) -> tuple[JobSpec, bool] | None:
    """The job of a :data:`JOB_SPEC_ANNOTATION` text read before but for its name, and whether the spec sets
    ``usd_per_hour_of_delay``; None when not (or its name fails a check: the slow path says why)."""
    split = _split_name(text) if type(text) is str else None
    if split is None:
        return None
    key, name = split
    hit = _BY_TEXT.get(key)
    if hit is None:
        return _known_size(key, name)
    job, largest, delay = hit
    if not _name_checks_pass(job, largest, name):
        return None
    return _named(job, name), delay


def _named(job: JobSpec, name: str) -> JobSpec:
    """``job_with(job, name=name)`` (one per Workload of a pass): a copy of ``job``'s fields, in their order, with its
    name replaced, as the instance's ``__dict__`` (no keyword arguments, no check of a name that is a field)."""
    fields = job.__dict__.copy()
    fields["name"] = name
    return from_fields(JobSpec, fields)


def _known_size(key: str, name: str) -> tuple[JobSpec, bool] | None:
    """:func:`_known_job_spec` of a text (``key``: without its name's value) read before but for its name and size:
    the job of that other size with this one's GPUs and hours (read as parse_job reads them: jobspec.job_size) and
    name, once the name passes its checks for this size (then kept by ``key`` too); None otherwise (the slow path
    says why)."""
    split = _split_size(key)
    if split is None:
        return None
    shape, gpus_value, hours_value = split
    known = _BY_SHAPE.get(shape)
    if known is None:
        return None
    other, delay = known
    try:
        gpus, hours = job_size({"gpus": gpus_value, "hours": hours_value})
    except Exception:  # a size parse_job refuses: it says why
        return None
    job = job_with(other, name=name, gpus=gpus, hours=hours)
    largest = _largest_node(job)
    if not _name_checks_pass(job, largest, name):
        return None
    if len(_BY_TEXT) >= _PARSED_MAX:
        _BY_TEXT.clear()
    _BY_TEXT[key] = (job, largest, delay)
    return job, delay


def _split_size(key: str) -> tuple[str, int, float] | None:
    """``(key without the values of "gpus" and "hours", the GPUs, the hours)`` for a :func:`_split_name` key where
    each is named once and is a plain JSON number (GPUs a whole number from 1, hours a whole or decimal number from 0;
    no leading zero, which JSON refuses), else None. Two keys with the same first part differ in those two numbers
    alone. The hours as a float: jobspec.job_size reads a whole number and its float alike (a refused one goes the
    slow way, which names it as written)."""
    if key.count('"gpus"') != 1 or key.count('"hours"') != 1:
        return None
    gpus = _GPUS_VALUE.search(key)
    hours = _HOURS_VALUE.search(key)
    if gpus is None or hours is None:
        return None
    (g0, g1), (h0, h1) = gpus.span(1), hours.span(1)
    shape = key[:g0] + key[g1:h0] + key[h1:] if g0 < h0 else key[:h0] + key[h1:g0] + key[g1:]
    return shape, int(gpus[1]), float(hours[1])


# A value ends at the next ',' or '}' (its key's object or the document ends): numbers only, so no string follows.
_GPUS_VALUE = re.compile(r'"gpus":([1-9][0-9]{0,8})(?=[,}])')
_HOURS_VALUE = re.compile(r'"hours":((?:0|[1-9][0-9]{0,8})(?:\.[0-9]{1,15})?)(?=[,}])')


def _remember_job_spec(text: Any, doc: Mapping[str, Any], job: JobSpec) -> None:
    """Keep ``job``, read the slow way from ``text`` (its document ``doc``), for the texts that differ from it only in
    the name (:func:`_known_job_spec`): when the string :func:`_split_name` cuts out is the document's name."""
    split = _split_name(text) if type(text) is str else None
    if split is None or doc.get("name") != split[1]:
        return
    if len(_BY_TEXT) >= _PARSED_MAX:
        _BY_TEXT.clear()
    delay = doc.get("usd_per_hour_of_delay") is not None
    _BY_TEXT[split[0]] = (job, _largest_node(job), delay)
    # And for the texts that differ from it in the name, GPUs and hours. The numbers cut out are the document's own:
    # it has a top-level "gpus" and "hours" (parse_job requires both) and the text names each once.
    sized = _split_size(split[0])
    if sized is not None:
        if len(_BY_SHAPE) >= _PARSED_MAX:
            _BY_SHAPE.clear()
        _BY_SHAPE[sized[0]] = (job, delay)


def forget_parsed_job_specs() -> None:
    """Empty the memos of parsed job specs, owners' annotations and reserved usages (benchmarks that time a cold
    pass)."""
    _PARSED.clear()
    _BY_TEXT.clear()
    _BY_SHAPE.clear()
    _PER_POD.clear()
    _ANNOTATIONS.clear()
    _MINUTES.clear()


def read_job_spec(text: Any) -> tuple[tuple[dict[str, Any], JobSpec] | None, str | None]:
    """``((document, job spec), None)`` from the ``gpufleet.io/job-spec`` annotation, or ``(None, why not)``: not
    JSON, not a mapping (:func:`placement.model.contract.read_job_spec_text`), a field this version does not know
    (a newer ``placement submit`` wrote it: never guessed), or a value ``parse_job`` refuses."""
    doc, why = contract.read_job_spec_text(text)
    if doc is None:
        return None, why
    return job_spec_of(doc)


def job_spec_of(doc: dict[str, Any]) -> tuple[tuple[dict[str, Any], JobSpec] | None, str | None]:
    """:func:`read_job_spec` of a document already read from its JSON."""
    unknown = sorted(str(k)[:40] for k in doc if k not in JOB_FIELDS)
    if unknown:
        return None, (f"{JOB_SPEC_ANNOTATION}: field {', '.join(unknown[:3])} is unknown to this dispatcher "
                      "(written by a newer placement submit?); the job waits until the dispatcher is upgraded or "
                      "the field is removed")
    try:
        return (doc, _parse_job_memo(doc)), None
    except InputError as exc:
        return None, f"{JOB_SPEC_ANNOTATION}: {exc}"
    except Exception as exc:
        return None, f"{JOB_SPEC_ANNOTATION}: {problem_text(exc)}"


def _hub_workload(wl: Mapping[str, Any], owner: Mapping[str, Any] | None, checks: Mapping[str, str],
                  configs: Mapping[str, Sequence[str]], cq_checks: Mapping[str, frozenset[str]]) -> HubWorkload | None:
    # Written out (loops for comprehensions, one dict of every field in their order, which HubWorkload.of makes the
    # instance's own): one call per Workload of a pass. What may raise on hostile data is read in the order it always
    # was, so that a Workload wrong in two ways reports the same one.
    meta, spec, status = wl.get("metadata") or {}, wl.get("spec") or {}, wl.get("status") or {}
    cq = (status.get("admission") or {}).get("clusterQueue")
    states = {}
    for a in status.get("admissionChecks") or []:
        states[str(a.get("name"))] = a
    check = None
    for n in states:
        if n in checks:
            check = n
            break
    if check is None or cq is None or check not in cq_checks.get(str(cq), _NO_CHECKS):
        return None
    owner_meta = (owner or {}).get("metadata") or {}
    # What submit wrote on the owner, read as placement.model.contract says: an unreadable job spec is an error (the
    # Workload waits: its job is never guessed); any other annotation that cannot be read is a warning, read as
    # unknown (a checkpoint home without a size is valid: its move is priced as unknown).
    annotations = owner_meta.get("annotations") if type(owner_meta) is dict or isinstance(owner_meta, Mapping) else None
    # A job spec read before but for its name: the other annotations only (the memo's job, named).
    spec_text = annotations.get(JOB_SPEC_ANNOTATION) if type(annotations) is dict else None
    known = _known_job_spec(spec_text)
    if type(annotations) is dict:  # the job spec (unless known) and the rest apart: the rest is memoised
        read, uri = _read_annotations(annotations)
        spec_doc, job_error = None, None
        if known is None and spec_text is not None and spec_text != "":  # contract's unknown: absent or empty
            spec_doc, job_error = contract.read_job_spec_text(spec_text)
    else:
        read = contract.read_annotations(annotations, known_regions(), job_spec=known is None)
        spec_doc, job_error, uri = read.job_spec, read.job_spec_error, None
    job = None
    delay = None
    if known is not None:
        job, delay_set = known
        delay = job.usd_per_hour_of_delay if delay_set else None
    elif spec_doc is not None:
        parsed, job_error = job_spec_of(spec_doc)
        if parsed is not None:
            doc, job = parsed
            # Set in the spec (0 included: waiting is free for this job), not the engine's default of 0.
            if doc.get("usd_per_hour_of_delay") is not None:
                delay = job.usd_per_hour_of_delay
            _remember_job_spec(spec_text, doc, job)
    home = home_of(read.checkpoint, job, uri) if read.checkpoint is not None else None
    nominated = status.get("nominatedClusterNames") or []
    if nominated and (not isinstance(nominated, list) or not all(isinstance(n, str) for n in nominated)):
        raise ValueError("status.nominatedClusterNames is not a list of cluster names")
    if not isinstance(status.get("clusterName") or "", str):
        raise ValueError("status.clusterName is not a cluster name")
    stats = (status.get("schedulingStats") or {}).get("evictions") or []
    evictions = (sum(int(e.get("count") or 0) for e in stats) if stats else 0) \
        or int((status.get("requeueState") or {}).get("count") or 0)
    # admitted_hours reads None when neither of its keys is there (most Workloads: never evicted), without the call.
    admitted = admitted_hours(status) if type(status) is not dict or _PAST_TIME in status or _PAST_TIME_OLD in status \
        else None
    created = parse_time(meta.get("creationTimestamp")) or 0.0
    priority = int(spec.get("priority") or 0)
    queue_name = str(spec.get("queueName") or "")
    check_state = str(states[check].get("state") or "")
    allowed = tuple(configs.get(checks[check], ()))
    since = nominated_since(wl) if meta.get("managedFields") else None
    quota_reserved, evicted, finished = _hub_conditions(wl, status)
    return HubWorkload.of({
        "namespace": str(meta.get("namespace") or ""), "name": str(meta.get("name") or ""),
        "uid": str(meta.get("uid") or ""), "created": created, "priority": priority, "queue_name": queue_name,
        "cluster_queue": str(cq), "check": check, "check_state": check_state, "allowed": allowed,
        "nominated": tuple(nominated), "nominated_since": since, "cluster_name": status.get("clusterName") or None,
        "quota_reserved": quota_reserved, "evicted": evicted, "finished": finished, "evictions": evictions,
        "needs": _needs(spec, status), "job": job, "job_error": job_error,
        "group": read.group, "group_workers": read.workers, "delay_usd_per_hour": delay, "problem": None,
        "checkpoint": home, "warnings": read.warnings, "progress": read.progress, "admitted_hours": admitted})


_NO_CHECKS: frozenset[str] = frozenset()

# What contract.read_annotations reads from an owner's annotations but the job spec, by the values it reads: the same
# few on every Workload of a group (its fabric group, workers, region, size) but for the home's URI, which is kept
# out when it passes the reader's checks (a string of one line, at most MAX_URI characters: the read is then the same
# for every such URI but for the URI itself, which the caller puts in: :func:`_read_annotations`). Bounded (tenants
# write these): strings only, _KEY_MAX characters in all; cleared whole when full. The regions the reader checks
# against are the packaged book's, the same for the whole process.
_ANNOTATIONS: dict[tuple[Any, ...], contract.JobAnnotations] = {}
_READ_KEYS = (contract.FABRIC_GROUP, contract.WORKERS, contract.CHECKPOINT_REGION, contract.CHECKPOINT_GB,
              contract.LAST_DURABLE_STEP, contract.STEPS_PER_HOUR)


def _read_annotations(annotations: dict[str, Any]) -> tuple[contract.JobAnnotations, Any]:
    """``(contract.read_annotations(annotations, known_regions(), job_spec=False), the home's URI)``: the read of
    another Workload's owner with the same values but for a URI that passes the same checks (then its checkpoint's
    ``home`` is that other URI: take the one returned, as :func:`placement.dispatch.move.home_of` does)."""
    home = annotations.get(contract.CHECKPOINT_HOME)
    key: tuple[Any, ...] | None = None
    # No whitespace in the URI, as the reader checks it (any(map(str.isspace, home))): str.split() cuts at the same
    # characters (Py_UNICODE_ISSPACE), in one C call instead of one per character.
    if home is None or type(home) is str and len(home) <= contract.MAX_URI and (not home or home.split() == [home]):
        # The URI's class (absent, empty: read as absent too, kept apart all the same; one) and the values read.
        key = (0 if home is None else 1 if home == "" else 2, *map(annotations.get, _READ_KEYS))
        try:
            hit = _ANNOTATIONS.get(key)
        except TypeError:  # a value that cannot be a key (a list): never kept
            key = None
        else:
            # Only keys of strings or None are kept (below): a tuple equal to one holds the same (of the values JSON
            # reads, only a string equals a string and only null null), so a hit needs no check of its values.
            if hit is not None:
                return hit, home
            size = 0
            for v in key[1:]:
                if v is not None:
                    if type(v) is not str:
                        key = None
                        break
                    size += len(v)
            if size > _KEY_MAX:
                key = None
    read = contract.read_annotations(annotations, known_regions(), job_spec=False)
    if key is not None:
        if len(_ANNOTATIONS) >= _PARSED_MAX:
            _ANNOTATIONS.clear()
        _ANNOTATIONS[key] = read
    return read, home


def _hub_conditions(wl: Mapping[str, Any], status: Mapping[str, Any]) -> tuple[bool, bool, bool]:
    """``condition_true(wl, kind)`` for QuotaReserved, Evicted and Finished (``status`` is ``wl``'s), in one walk of a
    list of condition dicts; anything else read by :func:`condition_true` itself, so that a hostile entry raises as it
    did (a dict's ``get`` never does)."""
    conditions = status.get("conditions")
    if not conditions:
        return False, False, False
    if type(conditions) is list:
        quota = evicted = finished = None
        for c in conditions:
            if type(c) is not dict:
                break
            kind = c.get("type")
            # The first condition of each type, as _condition finds it (a value equals at most one of these).
            if kind == "QuotaReserved":
                if quota is None:
                    quota = c.get("status") == "True"
            elif kind == "Evicted":
                if evicted is None:
                    evicted = c.get("status") == "True"
            elif kind == "Finished" and finished is None:
                finished = c.get("status") == "True"
        else:
            return quota is True, evicted is True, finished is True
    return condition_true(wl, "QuotaReserved"), condition_true(wl, "Evicted"), condition_true(wl, "Finished")


_PAST_TIME, _PAST_TIME_OLD = "accumulatedPastExecutionTimeSeconds", "accumulatedPastExexcutionTimeSeconds"


def admitted_hours(status: Mapping[str, Any]) -> float | None:
    """Hours a Workload was admitted in its previous admit-evict cycles: Kueue's
    ``status.accumulatedPastExecutionTimeSeconds`` (v1beta2; v1beta1 spells it ``accumulatedPastExexcutionTime
    Seconds``), an int32 of seconds that Kueue's workload controller adds to when the Admitted condition turns
    false. None when absent or not a whole number of seconds from 0 to 2^31 - 1 (the status is the hub's
    controller's, but a malformed one is read as unknown, never trusted)."""
    for key in (_PAST_TIME, _PAST_TIME_OLD):
        value = status.get(key)
        if value is None:
            continue
        if type(value) is int and 0 <= value <= 2**31 - 1:
            return value / 3600.0
        return None
    return None


def _limit(rows: Sequence[Mapping[str, Any]], field: str) -> Allocatable | None:
    """A flavor's ``lendingLimit`` or ``borrowingLimit`` over its resources; None when no resource sets one, and
    :data:`UNLIMITED` for a resource without one when another sets it (Kueue's limits are per resource)."""
    limited = {str(r.get("name")): r.get(field) for r in rows if r.get(field) is not None}
    if not limited:
        return None
    values = resources(limited)
    return Allocatable(values.cpu_millis if ko.RES_CPU in limited else UNLIMITED,
                       values.memory_mib if ko.RES_MEMORY in limited else UNLIMITED,
                       values.gpus if ko.RES_GPU in limited else UNLIMITED,
                       values.efa if ko.RES_EFA in limited else UNLIMITED, values.hugepages_mib)


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
        gpus = 0
        for n in needs(wl):  # n.total.gpus, without making the total
            gpus += n.per_pod.gpus * n.count
        by_cq.setdefault(str(cq), []).append(from_fields(QueuedWorkload, {
            "namespace": ns, "name": name, "priority": int(spec.get("priority") or 0), "gpus": gpus,
            "created": parse_time(meta.get("creationTimestamp")) or 0.0, "admitted": admitted, "flavors": flavors,
            "remaining_hours": remaining, "hours": None if admitted else length}))
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
                states.append(from_fields(FlavorState, {
                    "name": fname, "pool": pools.get(fname), "nominal": nominal, "reserved": reserved.get(fname, ZERO),
                    "lending_limit": _limit(rows, "lendingLimit"), "borrowing_limit": _limit(rows, "borrowingLimit")}))
        cohort = (cq.get("spec") or {}).get("cohortName")
        queues[name] = ClusterQueueState(name=name, flavors=tuple(states), workloads=tuple(by_cq.get(name, ())),
                                         cohort=str(cohort) if cohort else None)
    return WorkerState(key=key, cluster=cluster, reachable=True, local_queues=local, cluster_queues=queues)


def nomination(wl: Mapping[str, Any], clusters: Sequence[str]) -> dict[str, Any]:
    """The server-side apply body that nominates ``clusters``, as field manager ``kueue-admission``.

    Kueue v0.19.2 owns ``status.nominatedClusterNames`` through that manager and clears it with its own
    apply when the Workload is admitted or evicted; a value written by any other manager stays (apply only
    removes fields its manager owned) and the Workload can then never record its cluster, since
    ``clusterName`` and ``nominatedClusterNames`` are mutually exclusive (the MultiKueue External
    dispatcher's known limitation). An apply also drops every field the manager owned but left out, so
    this body carries everything Kueue's admission patch carries (``patching.PatchAdmissionStatus``) as
    it is now, with only the nomination changed; ``uid`` and ``resourceVersion`` make the API server refuse
    it (409) if the Workload changed since it was read.
    """
    meta, st = wl.get("metadata") or {}, wl.get("status") or {}
    status: dict[str, Any] = {}
    for key in ("admission", "accumulatedPastExecutionTimeSeconds", "unhealthyNodes", "preemptionGates",
                "admissionChecks", "clusterName"):
        if st.get(key) is not None:
            status[key] = st[key]
    requeue = st.get("requeueState") or {}
    if requeue.get("count") is not None or requeue.get("requeueAt") is not None:
        status["requeueState"] = requeue
    if st.get("admission") is None and st.get("resourceRequests"):
        status["resourceRequests"] = st["resourceRequests"]
    conditions = [c for c in st.get("conditions") or [] if c.get("type") in ADMISSION_CONDITIONS]
    if conditions:
        status["conditions"] = conditions
    evictions = (st.get("schedulingStats") or {}).get("evictions")
    if evictions:
        status["schedulingStats"] = {"evictions": evictions}
    status["nominatedClusterNames"] = list(clusters)
    return {"apiVersion": ko.API_VERSION, "kind": "Workload",
            "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace"), "uid": meta.get("uid"),
                         "resourceVersion": meta.get("resourceVersion")},
            "status": status}
