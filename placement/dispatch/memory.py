"""What the dispatcher remembers of a Workload, carried as annotations on the Events it records. Pure.

Every Event ``placement dispatch`` records on a hub Workload (``Nominated``, ``Renominated``,
``DeadlinePassed``, ``NoWorkerFits``) carries the :class:`~placement.dispatch.model.Memory` the decision
left behind, so a replica that starts, or becomes leader, resumes the round where the last one stopped:

====================================  ===========================================================
``gpufleet.io/nominated``             comma-separated worker keys nominated (empty: none)
``gpufleet.io/tried``                 comma-separated worker keys tried in this round
``gpufleet.io/evictions``             the Workload's eviction count when that was decided
``gpufleet.io/nominated-at``          when the current nomination started (epoch seconds)
``gpufleet.io/first-nominated-at``    when the round's first nomination was written (epoch seconds; 0: none)
``gpufleet.io/noted``                 the situation last reported (kind and digest), so it is not reported twice
``gpufleet.io/recorded-at``           when the Event was recorded (epoch seconds): the newest one wins
``gpufleet.io/ran-on``                comma-separated worker keys that admitted it (its progress is there
                                      and in its checkpoint home); optional: older Events lack it
====================================  ===========================================================

The Workload's uid is the Event's ``involvedObject.uid``. Memory cannot be forged from another namespace
or another clock: an Event counts only when its source and ``reportingComponent`` are the dispatcher's,
it names a ``reportingInstance``, it sits in the Workload's own namespace (a tenant who may create Events
in team-b never reaches team-a's Workloads), it carries that Workload's uid, and every time in it lies
between the Workload's creation and now, within :data:`SKEW_S` (an Event stamped by a replica whose clock
runs ahead is ignored and counted in ``gpufleet_dispatch_memory_ignored_total{reason}``). Events expire
(the API server's ``--event-ttl``, 1 h by default): a round older than that starts afresh, which only
means a worker tried more than an hour ago may be tried again.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from typing import Any

from placement.dispatch.model import Memory

NOMINATED = "gpufleet.io/nominated"
TRIED = "gpufleet.io/tried"
EVICTIONS = "gpufleet.io/evictions"
SINCE = "gpufleet.io/nominated-at"
FIRST_AT = "gpufleet.io/first-nominated-at"
NOTED = "gpufleet.io/noted"
RECORDED = "gpufleet.io/recorded-at"
RAN_ON = "gpufleet.io/ran-on"
KEYS = (NOMINATED, TRIED, EVICTIONS, SINCE, FIRST_AT, NOTED, RECORDED)  # all required; RAN_ON optional


def _seconds(t: float) -> str:
    return f"{t:.3f}"


def as_annotations(mem: Memory, recorded: float) -> dict[str, str]:
    """The annotations that carry ``mem`` on an Event recorded at ``recorded`` (epoch seconds)."""
    return {NOMINATED: ",".join(mem.nominated), TRIED: ",".join(sorted(mem.tried)), EVICTIONS: str(mem.evictions),
            SINCE: _seconds(mem.since), FIRST_AT: _seconds(mem.first_at), NOTED: mem.noted,
            RECORDED: _seconds(recorded), RAN_ON: ",".join(sorted(mem.ran_on))}


def _keys(text: str) -> tuple[str, ...]:
    return tuple(k for k in text.split(",") if k)


def _time(text: Any) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) and value >= 0 else None


REPORTING = "gpufleet.io/dispatch"  # the reportingComponent of every Event the dispatcher records
SKEW_S = 300.0  # tolerance for clocks between replicas and the API server: a memory beyond it is ignored


def from_event(event: Mapping[str, Any], component: str) -> tuple[str, float, Memory] | None:
    """``(workload uid, recorded-at, memory)`` of an Event ``component`` recorded on a Workload, or None when it
    is another's (source and reporting component), carries no (readable) memory, or sits in another namespace
    than the Workload it names."""
    if not isinstance(event, Mapping) or not isinstance(event.get("metadata"), Mapping):
        return None
    source = event.get("source")
    if not isinstance(source, Mapping) or source.get("component") != component:
        return None
    if event.get("reportingComponent") != REPORTING or not isinstance(event.get("reportingInstance"), str) \
            or not event["reportingInstance"]:
        return None
    involved = event.get("involvedObject")
    if not isinstance(involved, Mapping):
        return None
    uid = involved.get("uid")
    if involved.get("kind") != "Workload" or not isinstance(uid, str) or not uid:
        return None
    if involved.get("namespace") != event["metadata"].get("namespace"):
        return None  # an Event about a Workload of another namespace: never that Workload's memory
    ann = event["metadata"].get("annotations") or {}
    if not isinstance(ann, Mapping) or not all(isinstance(ann.get(k), str) for k in KEYS):
        return None
    since, first_at, recorded = _time(ann[SINCE]), _time(ann[FIRST_AT]), _time(ann[RECORDED])
    try:
        evictions = int(ann[EVICTIONS][:12])
    except (TypeError, ValueError):
        return None
    if since is None or first_at is None or recorded is None or evictions < 0:
        return None
    ran_on = ann.get(RAN_ON)
    mem = Memory(nominated=_keys(str(ann[NOMINATED])), since=since, tried=frozenset(_keys(str(ann[TRIED]))),
                 first_at=first_at, evictions=evictions, noted=str(ann[NOTED])[:80],
                 ran_on=frozenset(_keys(ran_on[:4096])) if isinstance(ran_on, str) else frozenset())
    return str(uid), recorded, mem


def trusted(event: Mapping[str, Any], mem: Memory, recorded: float, namespace: str, created: float, now: float,
            skew_s: float = SKEW_S) -> str | None:
    """None when ``mem`` (read from ``event``) may be the memory of a Workload in ``namespace`` created at
    ``created``: the Event sits in that namespace, and every time it carries (recorded, nomination start,
    round start) lies between the Workload's creation and ``now``, each with ``skew_s`` of tolerance.
    Else the reason it is ignored (``namespace`` or ``time``)."""
    if event["metadata"].get("namespace") != namespace:
        return "namespace"
    low, high = created - skew_s, now + skew_s
    times = [recorded, mem.since] + ([mem.first_at] if mem.first_at else [])
    if any(not low <= t <= high for t in times):
        return "time"
    return None


def recall(events: Iterable[Mapping[str, Any]], component: str,
           workloads: Mapping[str, tuple[str, float]] | None = None, now: float | None = None,
           skew_s: float = SKEW_S, ignored: dict[str, int] | None = None) -> dict[str, Memory]:
    """Workload uid -> the memory of the newest Event ``component`` recorded on it: by ``recorded-at``; on a
    tie the later nomination and the longer list of tried workers (both only grow within a round), then the
    Event's name, so replicas reading the same Events agree.

    With ``workloads`` (uid -> (namespace, creation time)) and ``now``, only Events that :func:`trusted`
    accepts count, and only for those uids; ``ignored`` counts the others by reason."""
    newest: dict[str, tuple[tuple[float, float, int, str], Memory]] = {}
    for ev in events:
        found = from_event(ev, component)
        if found is None:
            continue
        uid, recorded, mem = found
        if workloads is not None:
            known = workloads.get(uid)
            if known is None:
                continue
            why = trusted(ev, mem, recorded, known[0], known[1], time.time() if now is None else now, skew_s)
            if why is not None:
                if ignored is not None:
                    ignored[why] = ignored.get(why, 0) + 1
                continue
        rank = (recorded, mem.since, len(mem.tried), str(ev["metadata"].get("name") or ""))
        if uid not in newest or rank > newest[uid][0]:
            newest[uid] = (rank, mem)
    return {uid: mem for uid, (_, mem) in newest.items()}
