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
====================================  ===========================================================

The Workload's uid is the Event's ``involvedObject.uid``. Events expire (the API server's ``--event-ttl``,
1 h by default): a round older than that starts afresh, which only means a worker tried more than an hour
ago may be tried again.
"""

from __future__ import annotations

import math
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
KEYS = (NOMINATED, TRIED, EVICTIONS, SINCE, FIRST_AT, NOTED, RECORDED)


def _seconds(t: float) -> str:
    return f"{t:.3f}"


def as_annotations(mem: Memory, recorded: float) -> dict[str, str]:
    """The annotations that carry ``mem`` on an Event recorded at ``recorded`` (epoch seconds)."""
    return {NOMINATED: ",".join(mem.nominated), TRIED: ",".join(sorted(mem.tried)), EVICTIONS: str(mem.evictions),
            SINCE: _seconds(mem.since), FIRST_AT: _seconds(mem.first_at), NOTED: mem.noted,
            RECORDED: _seconds(recorded)}


def _keys(text: str) -> tuple[str, ...]:
    return tuple(k for k in text.split(",") if k)


def _time(text: Any) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) and value >= 0 else None


def from_event(event: Mapping[str, Any], component: str) -> tuple[str, float, Memory] | None:
    """``(workload uid, recorded-at, memory)`` of an Event ``component`` recorded on a Workload, or None when it
    is another's or carries no (readable) memory."""
    if ((event.get("source") or {}).get("component")) != component:
        return None
    involved = event.get("involvedObject") or {}
    uid = involved.get("uid")
    if involved.get("kind") != "Workload" or not uid:
        return None
    ann = (event.get("metadata") or {}).get("annotations") or {}
    if not all(k in ann for k in KEYS):
        return None
    since, first_at, recorded = _time(ann[SINCE]), _time(ann[FIRST_AT]), _time(ann[RECORDED])
    try:
        evictions = int(ann[EVICTIONS])
    except (TypeError, ValueError):
        return None
    if since is None or first_at is None or recorded is None or evictions < 0:
        return None
    mem = Memory(nominated=_keys(str(ann[NOMINATED])), since=since, tried=frozenset(_keys(str(ann[TRIED]))),
                 first_at=first_at, evictions=evictions, noted=str(ann[NOTED]))
    return str(uid), recorded, mem


def recall(events: Iterable[Mapping[str, Any]], component: str) -> dict[str, Memory]:
    """Workload uid -> the memory of the newest Event ``component`` recorded on it: by ``recorded-at``; on a
    tie the later nomination and the longer list of tried workers (both only grow within a round), then the
    Event's name, so replicas reading the same Events agree."""
    newest: dict[str, tuple[tuple[float, float, int, str], Memory]] = {}
    for ev in events:
        found = from_event(ev, component)
        if found is None:
            continue
        uid, recorded, mem = found
        rank = (recorded, mem.since, len(mem.tried), str((ev.get("metadata") or {}).get("name") or ""))
        if uid not in newest or rank > newest[uid][0]:
            newest[uid] = (rank, mem)
    return {uid: mem for uid, (_, mem) in newest.items()}
