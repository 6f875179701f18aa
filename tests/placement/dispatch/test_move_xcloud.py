"""Issue 35 item 4: a cross-cloud move is priced with what it keeps. Through the identity federation the home's
stack made for the destination, it is the checkpoint's egress and transfer (the job resumes); without, the job
restarts from step 0 and its lost progress (last durable step over steps per hour, at the destination's rate) is
priced instead. The Event and ``--once --json`` say which."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from factories import offer
from siblings import sibling

from placement.dispatch import snapshot
from placement.dispatch.controller import _rows
from placement.dispatch.decide import decide
from placement.dispatch.model import CheckpointHome, Memory, PassResult, Pricing, WorkerState
from placement.dispatch.move import FEDERATED, RESTARTS, SAME_CLOUD
from placement.fleet.stacks import Federation, parse_cluster
from placement.model import contract
from placement.model.egress import egress_book, transfer_hours, transfer_usd

_h = sibling(__file__, "test_decide.py")
NOW, worker, workload = _h.NOW, _h.worker, _h.workload
HOME = CheckpointHome(uri="s3://a-ckpt/checkpoints/llm", cloud="aws", region="us-east-1", gb=200.0)
ROLE = "arn:aws:iam::123456789012:role/a-from-g"


def _fleet(federate: tuple[str, ...] = ("g",)) -> tuple[list[WorkerState], Pricing]:
    """a (AWS, the home's worker: it ran the job) and two GCP workers, g and h, priced alike."""
    a = worker("a", "us-east-1")
    fed = {k: Federation(cloud="aws", audience="sts.amazonaws.com", role_arn=ROLE) for k in federate}
    a = replace(a, cluster=replace(a.cluster, checkpoint_uri="s3://a-ckpt/checkpoints", federation=fed))
    g, h = (worker(k, "us-central1", itype="a3-megagpu-8g") for k in ("g", "h"))
    prices = Pricing((offer("p5.48xlarge", "us-east-1", "us-east-1-z", price=150.0, spot=50.0),
                      offer("a3-megagpu-8g", "us-central1", "us-central1-z", price=60.0, spot=20.0)))
    return [a, g, h], prices


def _evicted(**kw: Any) -> tuple[Any, dict[str, Memory]]:
    wl = workload("llm", allowed=("a", "g", "h"), evictions=1, checkpoint=HOME, **kw)
    mem = Memory(nominated=("a",), since=NOW - 3000, tried=frozenset({"a"}), first_at=NOW - 3000, evictions=0)
    return wl, {wl.uid: mem}


def test_a_federated_destination_resumes_and_pays_the_cross_cloud_read() -> None:
    workers, prices = _fleet()
    wl, mem = _evicted(progress=contract.Progress(9000, 1000.0))
    (d,) = decide([wl], workers, prices, NOW, memory=mem).decisions
    s = {x.worker: x for x in d.scores}
    assert s["g"].move_case == FEDERATED and not s["g"].restarts and s["g"].lost_usd is None
    egress = transfer_usd(egress_book(), "aws", "us-east-1", "gcp", "us-central1", 200.0)
    assert egress > 0 and s["g"].move_usd == pytest.approx(egress)
    assert s["g"].move_hours == pytest.approx(transfer_hours(200.0, egress_book().throughput_gbps["cross_cloud"]))
    # h is GCP too but the home's stack federates nothing of it: it restarts, 9 h of work thrown away.
    assert s["h"].move_case == RESTARTS and s["h"].restarts and s["h"].move_usd == 0.0
    assert s["h"].lost_hours == pytest.approx(9.0)
    base = s["g"].cost_usd - s["g"].move_usd  # same pool and price: the engine's cost is g's without its move
    rate = base / (s["g"].ready_hours - s["g"].move_hours)
    assert s["h"].lost_usd == pytest.approx(9.0 * rate) and s["h"].cost_usd == pytest.approx(base + 9.0 * rate)
    assert s["a"].move_case == "" and not s["a"].restarts  # where it ran: its own copy
    assert d.clusters == ("g",)
    assert d.event is not None and "identity federation" in d.event.message and "step 0" not in d.event.message
    rows = {r["worker"]: r for r in _rows(PassResult(decisions=(d,)))[0]["scores"]}
    assert rows["g"]["move_case"] == "federated" and rows["g"]["restarts_from_step_0"] is False
    assert rows["h"]["move_case"] == "restarts" and rows["h"]["restarts_from_step_0"] is True
    assert rows["h"]["lost_hours"] == pytest.approx(9.0) and rows["h"]["lost_usd"] > 0
    assert rows["a"]["move_case"] is None


def test_without_federation_the_lost_progress_is_priced_and_said() -> None:
    workers, prices = _fleet(federate=())
    wl, mem = _evicted(progress=contract.Progress(9000, 1000.0))
    (d,) = decide([wl], workers, prices, NOW, memory=mem).decisions
    s = {x.worker: x for x in d.scores}
    assert all(s[k].restarts and s[k].lost_hours == pytest.approx(9.0) for k in ("g", "h"))
    assert d.event is not None and "restarts from step 0" in d.event.message
    assert "9.00 h of work" in d.event.message and "$" in d.event.message
    # Unknown progress: priced as unknown, said so, never counted as free without saying it.
    wl, mem = _evicted()
    (d,) = decide([wl], workers, prices, NOW, memory=mem).decisions
    s = {x.worker: x for x in d.scores}
    assert s["g"].restarts and not s["g"].move_known and s["g"].lost_usd is None
    assert d.event is not None and "priced as unknown" in d.event.message
    assert _rows(PassResult(decisions=(d,)))[0]["scores"][1]["lost_usd"] is None


def test_lost_progress_decides_between_resuming_and_restarting() -> None:
    workers, prices = _fleet(federate=("g",))
    # Nothing durable yet: restarting on h loses nothing, while g pays the checkpoint's cross-cloud read.
    wl, mem = _evicted(progress=contract.Progress(0, 1000.0))
    (d,) = decide([wl], workers, prices, NOW, memory=mem).decisions
    assert d.clusters == ("h",) and {x.worker: x for x in d.scores}["h"].lost_usd == 0.0
    # 50 h of work thrown away on h: resuming on g is cheaper.
    wl, mem = _evicted(progress=contract.Progress(50_000, 1000.0))
    (d,) = decide([wl], workers, prices, NOW, memory=mem).decisions
    assert d.clusters == ("g",)


def test_same_cloud_moves_are_unchanged() -> None:
    workers, prices = _fleet()
    b = worker("b", "us-west-2")
    wl = workload("llm", allowed=("a", "b"), evictions=1, checkpoint=HOME, progress=contract.Progress(9000, 1000.0))
    mem = {wl.uid: Memory(nominated=("a",), since=NOW - 3000, tried=frozenset({"a"}), first_at=NOW - 3000)}
    west = Pricing((*prices.offers, offer("p5.48xlarge", "us-west-2", "us-west-2-z", price=150.0, spot=50.0)))
    (d,) = decide([wl], [*workers, b], west, NOW, memory=mem).decisions
    s = {x.worker: x for x in d.scores}
    assert s["b"].fits
    assert s["b"].move_case == SAME_CLOUD and not s["b"].restarts and s["b"].lost_usd is None


def test_progress_annotations_are_read_and_hostile_ones_are_warnings() -> None:
    read = contract.read_annotations({contract.LAST_DURABLE_STEP: "9000", contract.STEPS_PER_HOUR: "1000"})
    assert read.progress == contract.Progress(9000, 1000.0) and read.warnings == ()
    assert read.progress.hours == pytest.approx(9.0)
    for bad in ({contract.LAST_DURABLE_STEP: "-1"}, {contract.LAST_DURABLE_STEP: "1e3"},
                {contract.LAST_DURABLE_STEP: ["x"]}, {contract.STEPS_PER_HOUR: "10"}):
        read = contract.read_annotations(bad)
        assert read.progress is None and read.warnings and read.warnings[0].startswith("gpufleet.io/")
    read = contract.read_annotations({contract.LAST_DURABLE_STEP: "5", contract.STEPS_PER_HOUR: "nan"})
    assert read.progress == contract.Progress(5) and read.progress.hours is None and read.warnings
    doc = contract.progress_doc(contract.Progress(12, 3.5), "llm")
    assert contract.read_progress(doc) == (contract.Progress(12, 3.5), ())


def test_the_fleet_file_carries_federation_and_refuses_a_malformed_one() -> None:
    base = {"cloud": "aws", "region": "us-east-1", "clusterName": "c", "nodePools": []}
    cl = parse_cluster("a", {**base, "federation": {"g": {"audience": "sts.amazonaws.com", "roleArn": ROLE}}}, "f")
    assert cl.federation == {"g": Federation("aws", "sts.amazonaws.com", ROLE)}
    from placement.errors import InputError

    with pytest.raises(InputError, match="federation.g.roleArn"):
        parse_cluster("a", {**base, "federation": {"g": {"audience": "x"}}}, "f")
    assert parse_cluster("a", base, "f").federation == {}


def test_the_snapshot_reads_the_progress_of_the_owner() -> None:
    annotations = {contract.LAST_DURABLE_STEP: "40", contract.STEPS_PER_HOUR: "20"}
    read = contract.read_annotations(annotations)
    assert read.progress is not None and read.progress.hours == pytest.approx(2.0)
    wl = {"metadata": {"name": "w", "namespace": "t", "uid": "u"}, "spec": {"queueName": "q"},
          "status": {"admission": {"clusterQueue": "q"}, "admissionChecks": [{"name": "mk", "state": "Pending"}]}}
    for _ in range(2):  # read, then read again from the snapshot's memo of annotations
        hub = snapshot.hub_workload(wl, {"metadata": {"annotations": annotations}}, {"mk": "cfg"}, {"cfg": ("a",)},
                                    {"q": frozenset({"mk"})})
        assert hub is not None and hub.progress == read.progress


def test_without_the_trainers_progress_kueues_admitted_time_bounds_the_loss() -> None:
    """A job that carries no progress annotations (nothing copied the trainer's onto it): the hours Kueue counted
    it admitted before (status.accumulatedPastExecutionTimeSeconds) price what a restart throws away, said as an
    upper bound; the trainer's own progress wins when it is there."""
    workers, prices = _fleet(federate=())
    wl, mem = _evicted(admitted_hours=2.5)
    (d,) = decide([wl], workers, prices, NOW, memory=mem).decisions
    s = {x.worker: x for x in d.scores}
    assert s["g"].restarts and s["g"].move_known and s["g"].lost_hours == pytest.approx(2.5)
    assert s["g"].lost_from == "admitted" and s["g"].lost_usd is not None and s["g"].lost_usd > 0
    assert d.event is not None and "at most" in d.event.message and "accumulatedPastExecutionTimeSeconds" in \
        d.event.message
    row = next(r for r in _rows(PassResult(decisions=(d,)))[0]["scores"] if r["worker"] == "g")
    assert row["lost_from"] == "admitted" and row["lost_hours"] == pytest.approx(2.5)
    wl, mem = _evicted(admitted_hours=2.5, progress=contract.Progress(9000, 1000.0))
    (d,) = decide([wl], workers, prices, NOW, memory=mem).decisions
    g = next(x for x in d.scores if x.worker == "g")
    assert g.lost_hours == pytest.approx(9.0) and g.lost_from == "progress"


@pytest.mark.parametrize(("status", "hours"), [
    ({"accumulatedPastExecutionTimeSeconds": 5400}, 1.5),
    ({"accumulatedPastExexcutionTimeSeconds": 3600}, 1.0),  # v1beta1's spelling
    ({}, None), ({"accumulatedPastExecutionTimeSeconds": -1}, None),
    ({"accumulatedPastExecutionTimeSeconds": "9"}, None),
    ({"accumulatedPastExecutionTimeSeconds": True}, None), ({"accumulatedPastExecutionTimeSeconds": 2**40}, None),
    ({"accumulatedPastExecutionTimeSeconds": 1.5}, None),
])
def test_kueues_admitted_time_is_read_by_shape(status: dict[str, Any], hours: float | None) -> None:
    assert snapshot.admitted_hours(status) == (pytest.approx(hours) if hours is not None else None)
