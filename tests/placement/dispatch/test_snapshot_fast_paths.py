"""The snapshot's fast paths of issue 33 (a dispatch pass over 1,000 Workloads within its target) read every hub
Workload as the slow path does: a job spec known by its annotation's text but for the name, a spec parsed once for
every size of it, a pod set's requests read once per reserved usage. Each is checked, in one pass's order (the memos
filled by the Workloads before), against the path that parses every spec and reads every pod set, on plain and
hostile input: names parse_job refuses, escapes, a second "name", sizes it refuses, values that compare equal
without being the same (True and 1)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from placement.dispatch import snapshot
from placement.dispatch.model import HubWorkload
from placement.model import contract
from placement.model.jobspec import parse_job

CHECKS = {"all-workers": "all-workers"}
CONFIGS = {"all-workers": ("w1", "w2")}
CQ_CHECKS = {"all-workers": frozenset({"all-workers"})}
BASE: dict[str, Any] = {"accelerator": "H100", "gpus": 8, "hours": 3,
                        "data": {"dataset": {"uri": "s3://d/x", "region": "us-east-1", "size_gb": 50}}}
PLAIN = contract.job_spec_text  # what submit writes: keys sorted, compact


def _texts() -> list[Any]:
    """Job spec annotations in a pass's order: repeats of one spec under other names and sizes, among odd ones."""
    return [
        PLAIN({"name": "a1", **BASE}),
        PLAIN({"name": "a2", **BASE}),  # the same but for the name
        PLAIN({"name": "Bad_Name", **BASE}),  # a name parse_job refuses, on a text known but for it
        PLAIN({"name": "a3", **BASE, "gpus": 64}),  # another size: a JobSet, its name checked for its pods
        PLAIN({"name": "9-leads-with-a-digit", **BASE, "gpus": 64}),  # fine for a Job, not for a JobSet
        PLAIN({"name": "9-leads-with-a-digit", **BASE}),
        PLAIN({"name": "a" * 60, **BASE, "gpus": 64}),  # too long for a JobSet's pod names
        PLAIN({"name": "a4", **BASE, "gpus": 16, "hours": 7.5}),
        PLAIN({"name": "a5", **BASE, "gpus": 0}),  # sizes parse_job refuses, and values it reads otherwise
        PLAIN({"name": "a6", **BASE, "gpus": True}),
        PLAIN({"name": "a7", **BASE, "gpus": 8.5}),
        PLAIN({"name": "a8", **BASE, "hours": "3"}),
        PLAIN({"name": "a9", **BASE, "hours": -1}),
        PLAIN({"name": "a10", **BASE, "hours": math.nan}),
        PLAIN({"name": "a11", **{k: v for k, v in BASE.items() if k != "gpus"}}),
        PLAIN({"name": "a12", **BASE, "gpus": 10**30}),
        PLAIN({"name": "a1", **BASE}).replace('"name":"a1"', '"name":"a\\u0031"'),  # an escape: read the slow way
        PLAIN({"name": "b1", **BASE}).replace('"name":"b1"', '"name":"b\\"1"'),
        json.dumps({"name": "b2", **BASE}),  # not submit's form: a space after each colon
        PLAIN({"name": "b3", **BASE, "team": "name"}),  # "name" twice in the text, once as a value
        PLAIN({"name": "b4", **BASE}).replace('"name":"b4"', '"name":"b4","name":"c4"'),  # the name twice
        PLAIN({"name": "b5", **BASE, "data": {"dataset": {**BASE["data"]["dataset"], "name": "b5"}}}),
        PLAIN({"name": 7, **BASE}),
        PLAIN({**BASE}),
        PLAIN({"name": "b6", **BASE, "warp_drive": True}),  # a field this version does not know
        PLAIN({"name": "d1", **BASE, "usd_per_hour_of_delay": 0}),  # its price of waiting set (to 0)
        PLAIN({"name": "d2", **BASE, "usd_per_hour_of_delay": 0}),
        PLAIN({"name": "d3", **BASE, "usd_per_hour_of_delay": 50, "gpus": 16}),
        PLAIN({"name": "d4", **BASE, "deadline_hours": 12, "regions": {"allow": ["us-east-1", "nowhere-1"]}}),
        PLAIN({"name": "d5", **BASE, "deadline_hours": 12, "regions": {"allow": ["us-east-1", "nowhere-1"]}}),
        "{not json", "[" * 1000, ["not", "a", "string"], "",
        PLAIN({"name": "a13", **BASE}),  # the first spec again, after all of them
        PLAIN({"name": "Bad_Name", **BASE}),
    ]


def _raw(i: int, usage: dict[str, Any] | None = None, count: int = 1, selector: str | None = None,
         template: Any = None) -> dict[str, Any]:
    if template is None:
        template = {"spec": {"nodeSelector": {"gpufleet.io/pool": selector}}} if selector else {}
    return {"metadata": {"name": f"job-{i}", "namespace": "team-a", "uid": f"u{i}",
                         "creationTimestamp": "2026-11-23T10:00:00Z",
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": f"j{i}",
                                              "controller": True}]},
            "spec": {"queueName": "all-workers", "priority": 500,
                     "podSets": [{"name": "main", "count": count, "template": template}]},
            "status": {"conditions": [{"type": "QuotaReserved", "status": "True"}],
                       "admission": {"clusterQueue": "all-workers", "podSetAssignments": [
                           {"name": "main", "count": count, "resourceUsage": usage if usage is not None else {
                               "nvidia.com/gpu": "8", "cpu": "150", "memory": "1500Gi"}}]},
                       "admissionChecks": [{"name": "all-workers", "state": "Pending"}]}}


def _owner(text: Any) -> dict[str, Any]:
    return {"metadata": {"annotations": {contract.JOB_SPEC: text, contract.FABRIC_GROUP: "efa"}}}


class _Never(dict):  # type: ignore[type-arg]
    """A memo that keeps nothing: every usage read anew."""

    def __setitem__(self, key: Any, value: Any) -> None:
        pass


def _pass(items: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[HubWorkload | None]:
    snapshot.forget_parsed_job_specs()
    snapshot._PER_POD.clear()
    return [snapshot.hub_workload(raw, owner, CHECKS, CONFIGS, CQ_CHECKS) for raw, owner in items]


def _same(fast: list[HubWorkload | None], slow: list[HubWorkload | None]) -> None:
    assert len(fast) == len(slow)
    for a, b in zip(fast, slow, strict=True):
        assert repr(a) == repr(b)  # every field, the job's included, in order
        assert a == b
        if a is not None and b is not None and a.job is not None and b.job is not None:
            assert list(a.job.__dict__.items()) == list(b.job.__dict__.items())
            assert hash(a.job) == hash(b.job)


def test_job_specs_read_by_their_text_and_size_as_parse_job_reads_each(monkeypatch: pytest.MonkeyPatch) -> None:
    items = [(_raw(i), _owner(text)) for i, text in enumerate(_texts())]
    parsed: list[Any] = []
    known: list[Any] = []
    real, by_text = snapshot.parse_job, snapshot._known_job_spec
    monkeypatch.setattr(snapshot, "parse_job", lambda doc: parsed.append(doc) or real(doc))
    monkeypatch.setattr(snapshot, "_known_job_spec", lambda text: known.append(by_text(text)) or known[-1])
    fast = _pass(items)
    assert sum(k is not None for k in known) >= 4, "texts known but for their names come from the memo"
    assert len(parsed) < len(items) - 10, "the other sizes of a spec are not parsed again"
    assert sum(w is not None and w.job is not None for w in fast) >= 12
    assert sum(w is not None and w.job_error is not None for w in fast) >= 12
    with monkeypatch.context() as m:
        m.setattr(snapshot, "_known_job_spec", lambda text: None)
        m.setattr(snapshot, "_parse_job_memo", parse_job)
        slow = _pass(items)
    _same(fast, slow)
    _same(_pass(items[::-1]), slow[::-1])  # the memos filled in another order


def test_the_text_is_cut_only_around_a_plain_name() -> None:
    text = PLAIN({"name": "a1", **BASE})
    assert snapshot._split_name(text) == (text.replace('"a1"', '""'), "a1")
    for odd in (text.replace('"a1"', '"a\\u0031"'), text.replace('"a1"', '"a1","name":"a2"'),
                text.replace('"hours":3', '"hours":3,"team":"name"'), text.replace('"name":', '"name": '), "{}", ""):
        assert snapshot._split_name(odd) is None, odd


@pytest.mark.parametrize("usages", [
    [{"nvidia.com/gpu": "16", "cpu": "300", "memory": "2Gi"}, {"nvidia.com/gpu": "16", "cpu": "300", "memory": "2Gi"}],
    [{"nvidia.com/gpu": "1"}, {"nvidia.com/gpu": True}, {"nvidia.com/gpu": 1}, {"nvidia.com/gpu": 1.0}],
    [{"nvidia.com/gpu": 1}, {"nvidia.com/gpu": True}],  # equal and hashed alike, but True is no quantity
    [{"nvidia.com/gpu": "8"}, {"nvidia.com/gpu": "1e400"}, {"nvidia.com/gpu": math.nan}, {"nvidia.com/gpu": ["8"]},
     {"nvidia.com/gpu": "8"}],
    [{"cpu": "1", "nvidia.com/gpu": "8"}, {"nvidia.com/gpu": "8", "cpu": "1"}, {}],
])
def test_a_usage_read_once_as_each_workload_reads_its_own(usages: list[dict[str, Any]],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    owner = _owner(PLAIN({"name": "a1", **BASE}))
    items = [(_raw(i, usage, count, selector), owner)
             for i, (usage, count, selector) in enumerate((u, c, s) for u in usages for c in (1, 2)
                                                           for s in (None, "p1"))]
    fast = _pass(items)
    assert snapshot._PER_POD or not any(all(type(v) is str for v in u.values()) and u for u in usages)
    monkeypatch.setattr(snapshot, "_PER_POD", _Never())
    _same(fast, _pass(items))


def test_a_usage_and_a_template_both_hostile_report_the_usage_first(monkeypatch: pytest.MonkeyPatch) -> None:
    owner = _owner(PLAIN({"name": "a1", **BASE}))
    usage = {"nvidia.com/gpu": "8", "cpu": "1"}
    items = [(_raw(0, usage), owner), (_raw(1, {"nvidia.com/gpu": "1e400"}, template="not a template"), owner),
             (_raw(2, usage, template="not a template"), owner)]  # a usage read before, its template hostile
    fast = _pass(items)
    assert [w is not None and w.problem is not None for w in fast] == [False, True, True]
    assert fast[1] is not None and "quantity" in str(fast[1].problem)  # the usage's problem, read first as ever
    monkeypatch.setattr(snapshot, "_PER_POD", _Never())
    _same(fast, _pass(items))


def test_a_spec_or_usage_too_large_to_keep_is_read_every_time_the_same() -> None:
    """A tenant may write a spec of up to 256 KiB (or a usage of many long quantities): the memos keep none of them
    (each holds at most its entries times a small key), and each Workload still reads the same as the slow path."""
    big = {"name": "big-1", **BASE, "command": ["python", "-c", "#" * snapshot._KEY_MAX]}
    usage = {f"example.com/r{i}": "1" for i in range(snapshot._USAGE_KEYS_MAX + 1)} | {"nvidia.com/gpu": "8"}
    items = [(_raw(0, usage), _owner(PLAIN(big))), (_raw(1, usage), _owner(PLAIN({**big, "name": "big-2"})))]
    fast = _pass(items)
    assert not snapshot._PARSED and not snapshot._BY_TEXT and not snapshot._PER_POD
    assert all(w is not None and w.job is not None for w in fast)
    assert [w.job.name for w in fast if w is not None and w.job is not None] == ["big-1", "big-2"]
