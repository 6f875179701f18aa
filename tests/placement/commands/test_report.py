"""``placement report`` (issue 26) over the hub's Kueue Workloads served by the Kubernetes fake: GPU-hours admitted
in the window, planned and measured cost, $ per run, evictions; one bad Workload is skipped and named."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubefake import WORKLOADS, FakeApi

from placement.commands.main import main
from placement.commands.report import Group, Run

JOBSETS = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
SPEC = {"name": "llm-7b", "accelerator": "H100", "gpus": 16, "hours": 10, "team": "research", "workload": "llm",
        "capacity": "on-demand"}


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[tuple[FakeApi, Path]]:
    api = FakeApi("hub")
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(api.kubeconfig()))
    yield api, path
    api.close()


def _workload(api: FakeApi, name: str, spec: dict[str, object] | str, admitted: str, finished: str | None,
              evictions: int = 0) -> None:
    api.create(JOBSETS, {"metadata": {"namespace": "research", "name": name, "annotations": {
        "gpufleet.io/job-spec": spec if isinstance(spec, str) else json.dumps(spec)}}})
    conditions = [{"type": "Admitted", "status": "True", "lastTransitionTime": admitted}]
    if finished:
        conditions.append({"type": "Finished", "status": "True", "lastTransitionTime": finished})
    api.create(WORKLOADS, {
        "metadata": {"namespace": "research", "name": f"jobset-{name}",
                     "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": name,
                                          "controller": True, "uid": "u"}]},
        "spec": {"queueName": "all-workers", "podSets": [{"name": "main", "count": 2, "template": {"spec": {
            "containers": [{"name": "t", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]}}}]},
        "status": {"conditions": conditions,
                   "schedulingStats": {"evictions": [{"reason": "Preempted", "count": evictions}]}}})


def test_report_counts_admitted_gpu_hours_and_cost_per_team(hub: tuple[FakeApi, Path], tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    api, kubeconfig = hub
    # 10 h admitted, 4 h of it before the window: 6 h × 16 GPUs = 96 GPU-hours; 2 evictions.
    _workload(api, "a", SPEC, "2026-11-01T00:00:00Z", "2026-11-01T10:00:00Z", evictions=2)
    _workload(api, "b", SPEC, "2026-11-01T08:00:00Z", "2026-11-01T12:00:00Z")  # 4 h × 16 = 64 GPU-hours
    _workload(api, "c", "{not json", "2026-11-01T08:00:00Z", None)  # a bad spec: skipped, named
    chart = tmp_path / "cost.png"
    args = ["report", "--kubeconfig", str(kubeconfig), "--from", "2026-11-01T04:00:00Z", "--to",
            "2026-11-02T00:00:00Z", "--no-calibration"]
    assert main([*args, "--json", "--chart", str(chart)]) == 0
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert doc["schema"] == "gpufleet.report/v1"
    (g,) = doc["groups"]
    assert (g["team"], g["workload"], g["runs"], g["interruptions"]) == ("research", "llm", 2, 2)
    assert g["gpu_hours_admitted"] == pytest.approx(160.0)
    assert g["usd_per_run"] == pytest.approx(g["usd_measured"] / 2)
    assert g["usd_planned"] > 0 and g["gpu_hours_progress"] is None
    assert "research/jobset-c" in out.err
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(args) == 0
    assert "GPU-h admitted" in capsys.readouterr().out


def test_group_ratios_are_of_the_sums() -> None:
    runs = (Run("t", "llm", "a", 8, 80.0, tokens=1e9, steps=1000, progress_gpu_hours=40.0, usd_per_gpu_hour=2.0,
                planned_usd=150.0),
            Run("t", "llm", "b", 8, 20.0, tokens=1e9, steps=1000, progress_gpu_hours=20.0, usd_per_gpu_hour=2.0,
                planned_usd=50.0))
    d = Group("t", "llm", runs).doc()
    assert d["utilisation"] == pytest.approx(0.6)
    assert d["usd_per_run"] == pytest.approx(100.0) and d["usd_per_run_planned"] == pytest.approx(100.0)
    assert d["usd_per_1000_steps"] == pytest.approx(100.0) and d["usd_per_1000_units"] == pytest.approx(1e-4)


def test_report_without_a_hub_says_so_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    api = FakeApi("gone")
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(api.kubeconfig()))
    api.close()
    assert main(["report", "--kubeconfig", str(path), "--no-calibration", "--timeout", "1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("placement: error: ")
