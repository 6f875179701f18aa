"""The dispatcher's memory on its Events: written as annotations, read back, the newest Event per Workload."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from placement.dispatch import memory
from placement.dispatch.model import Memory

COMPONENT = "gpufleet-dispatch"
keys = st.lists(st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True), max_size=4, unique=True)
times = st.floats(0, 4e9, allow_nan=False)


def event(uid: str, mem: Memory, recorded: float, *, name: str = "e", component: str = COMPONENT,
          kind: str = "Workload") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "team-a", "annotations": memory.as_annotations(mem, recorded)},
            "involvedObject": {"kind": kind, "uid": uid, "name": "job-x", "namespace": "team-a"},
            "source": {"component": component}, "reason": "Nominated", "reportingComponent": memory.REPORTING,
            "reportingInstance": "replica-a"}


@given(nominated=keys, tried=keys, since=times, first_at=times, evictions=st.integers(0, 99),
       noted=st.sampled_from(["", "NoWorkerFits:0123456789abcdef"]), recorded=times)
def test_a_memory_survives_the_round_trip_through_event_annotations(nominated, tried, since, first_at, evictions,
                                                                    noted, recorded):
    mem = Memory(nominated=tuple(nominated), since=round(since, 3), tried=frozenset(tried),
                 first_at=round(first_at, 3), evictions=evictions, noted=noted)
    ann = memory.as_annotations(mem, recorded)
    assert all(isinstance(v, str) for v in ann.values())  # annotation values are strings
    found = memory.from_event(event("u1", mem, recorded), COMPONENT)
    assert found is not None
    uid, at, back = found
    assert uid == "u1" and abs(at - recorded) < 1e-3
    assert back == mem


def test_the_newest_event_of_each_workload_wins():
    first = Memory(nominated=("a",), since=100.0, tried=frozenset({"a"}), first_at=100.0)
    moved = Memory(nominated=("b",), since=400.0, tried=frozenset({"a", "b"}), first_at=100.0)
    other = Memory(nominated=("c",), since=50.0, tried=frozenset({"c"}), first_at=50.0)
    events = [event("u1", moved, 400.0, name="x.2"), event("u1", first, 100.0, name="x.1"),
              event("u2", other, 50.0)]
    assert memory.recall(events, COMPONENT) == {"u1": moved, "u2": other}
    assert memory.recall(reversed(events), COMPONENT) == {"u1": moved, "u2": other}
    # Recorded in the same instant: the later nomination of the round wins, whatever the Events' names.
    tied = [event("u1", moved, 100.0, name="x.a"), event("u1", first, 100.0, name="x.z")]
    assert memory.recall(tied, COMPONENT) == {"u1": moved}


def test_events_of_others_or_without_a_readable_memory_are_ignored():
    mem = Memory(nominated=("a",), since=100.0, tried=frozenset({"a"}), first_at=100.0)
    broken = event("u4", mem, 10.0)
    broken["metadata"]["annotations"][memory.SINCE] = "yesterday"
    partial = event("u5", mem, 10.0)
    del partial["metadata"]["annotations"][memory.TRIED]
    events = [event("u1", mem, 10.0, component="kubelet"), event("u2", mem, 10.0, kind="Pod"),
              {"metadata": {"name": "plain"}, "involvedObject": {"kind": "Workload", "uid": "u3"},
               "source": {"component": COMPONENT}}, broken, partial]
    assert memory.recall(events, COMPONENT) == {}


# ----------------------------------------------------------------------------- memory that cannot be forged

NOW = 1_800_000_000.0


def test_a_forged_event_in_another_namespace_is_never_that_workloads_memory():
    mem = Memory(nominated=("a",), since=NOW - 60, tried=frozenset({"a", "b"}), first_at=NOW - 60)
    forged = event("u1", mem, NOW - 60, name="forged")
    forged["metadata"]["namespace"] = "team-b"  # team-b may create Events in team-b only...
    forged["involvedObject"]["namespace"] = "team-b"  # ...naming team-a's Workload by its uid
    ignored: dict[str, int] = {}
    assert memory.recall([forged], COMPONENT, {"u1": ("team-a", NOW - 600)}, NOW, ignored=ignored) == {}
    assert ignored == {"namespace": 1}
    # An Event whose involvedObject claims another namespace than its own is nobody's memory.
    crossed = event("u1", mem, NOW - 60)
    crossed["involvedObject"]["namespace"] = "team-b"
    assert memory.from_event(crossed, COMPONENT) is None
    # Without the dispatcher's reporting component and instance, it is not the dispatcher's Event.
    for field, value in (("reportingComponent", "kubelet"), ("reportingInstance", "")):
        other = event("u1", mem, NOW - 60)
        other[field] = value
        assert memory.from_event(other, COMPONENT) is None
    genuine = event("u1", mem, NOW - 60)
    assert memory.recall([genuine, forged], COMPONENT, {"u1": ("team-a", NOW - 600)}, NOW) == {"u1": mem}


def test_memory_stamped_beyond_the_clock_skew_tolerance_is_ignored_and_counted():
    known = {"u1": ("team-a", NOW - 600)}
    ahead = Memory(nominated=("a",), since=NOW + 86_400, tried=frozenset({"a"}), first_at=NOW + 86_400)
    ignored: dict[str, int] = {}
    assert memory.recall([event("u1", ahead, NOW + 86_400)], COMPONENT, known, NOW, ignored=ignored) == {}
    assert ignored == {"time": 1}
    before = Memory(nominated=("a",), since=NOW - 7200, tried=frozenset({"a"}), first_at=NOW - 7200)
    assert memory.recall([event("u1", before, NOW - 7200)], COMPONENT, known, NOW) == {}  # before its Workload
    within = Memory(nominated=("a",), since=NOW + 100, tried=frozenset({"a"}), first_at=NOW - 500)
    assert memory.recall([event("u1", within, NOW + 100)], COMPONENT, known, NOW) == {"u1": within}
    assert memory.recall([event("u2", within, NOW)], COMPONENT, known, NOW) == {}  # not a Workload it knows
