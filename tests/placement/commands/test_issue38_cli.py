"""Issue 38's command-line cases not covered beside their code: output paths and extras checked before any work
(plan-batch and report --chart), the calibration in force said with what of it applied, and calibrate's window
the samples' own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from factories import run

EXAMPLES = Path(__file__).resolve().parents[3] / "placement" / "examples"
BURST = [str(EXAMPLES / "burst.yaml"), "--quotas", str(EXAMPLES / "burst-quotas.csv"), "--now",
         "2026-11-30T00:00:00Z"]


def _no_solve(monkeypatch: pytest.MonkeyPatch) -> None:
    import placement.plan.batch as batch
    import placement.plan.schedule as schedule

    for module in (batch, schedule):
        monkeypatch.setattr(module, "solve", lambda *a, **k: pytest.fail("solved before the chart path was checked"))


@pytest.mark.parametrize("where", ["in a missing folder", "a folder", "not a .png", "the batch file"])
def test_plan_batch_chart_is_checked_before_the_solve(where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Before: a missing folder failed after the solve, with the whole schedule already printed."""
    _no_solve(monkeypatch)
    chart = {"in a missing folder": tmp_path / "nope" / "g.png", "a folder": tmp_path,
             "not a .png": tmp_path / "g.svg", "the batch file": EXAMPLES / "burst.yaml"}[where]
    code, out, err = run(capsys, "plan-batch", *BURST, "--chart", str(chart))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "--chart" in err


def test_a_chart_without_its_extra_names_the_one_command_that_adds_it(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    _no_solve(monkeypatch)
    code, out, err = run(capsys, "plan-batch", *BURST, "--chart", str(tmp_path / "g.png"))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "'charts' extra" in err and "scripts/extra charts" in err and "pip install 'gpufleet" not in err


def test_report_chart_is_checked_before_the_hub_is_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "report", "--kubeconfig", str(tmp_path / "none"), "--chart",
                         str(tmp_path / "nope" / "c.png"))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "--chart" in err


def _calibration(tmp_path: Path, spot: list[dict[str, Any]], speed: list[dict[str, Any]]) -> str:
    path = tmp_path / "cal.json"
    path.write_text(json.dumps({"schema": "gpufleet.calibration/v1",
                                "measured": {"from": "2026-11-01T00:00:00Z", "to": "2026-11-20T00:00:00Z"},
                                "spot": spot, "speed": speed, "checkpoint_write": []}))
    return str(path)


def test_a_calibration_whose_rows_do_not_apply_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: the plan's last line named the file even when none of its rows applied (a CPU speed row)."""
    cal = _calibration(tmp_path, [], [{"workload": "llm", "accelerator": "CPU", "nodes": 1, "unit": "tokens/s",
                                       "per_gpu": 100.0, "runs": 5}])
    code, out, _ = run(capsys, "plan", str(EXAMPLES / "job.yaml"), "--top", "1", "--calibration", cal)
    assert code == 0
    last = out.strip().splitlines()[-1]
    assert last.startswith("calibration: ") and "does not apply" in last and "model's" in last
    code, out, _ = run(capsys, "plan", str(EXAMPLES / "job.yaml"), "--top", "1", "--calibration", cal, "--json")
    doc = json.loads(out)["calibration"]
    assert doc["path"] == cal and doc["speed_rows"] == 1 and doc["applied"]["any"] is False


def test_the_calibration_in_force_says_how_many_rows_applied_and_its_window(tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    cal = _calibration(tmp_path, [{"cloud": "aws", "region": "eu-south-2", "zone": "eus2-az2",
                                   "instance_type": "p5en.48xlarge", "node_hours": 500, "reclaims": 1}], [])
    code, out, _ = run(capsys, "plan", str(EXAMPLES / "job.yaml"), "--top", "1", "--calibration", cal)
    last = out.strip().splitlines()[-1]
    assert code == 0 and "1 of 1 spot rows" in last and "19.0 days" in last


def test_calibrate_says_the_window_of_its_samples(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Before: two minutes of data were written as a 30-day window."""
    t0 = 1793491200.0
    labels = {"__name__": "gpufleet_spot_node_seconds_total", "cloud": "gcp", "region": "us-central1",
              "zone": "us-central1-a", "instance_type": "a3-highgpu-8g"}
    samples = tmp_path / "s.json"
    samples.write_text(json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": labels, "values": [[t0, "0"], [t0 + 120, "120"]]}]}}))
    code, out, _ = run(capsys, "calibrate", "--samples", str(samples), "-o", str(tmp_path / "c.json"))
    assert code == 0 and "to 2026-11-01T00:02:00Z (2.0 min of samples)" in out
    written = json.loads((tmp_path / "c.json").read_text())
    assert written["measured"] == {"from": "2026-11-01T00:00:00Z", "to": "2026-11-01T00:02:00Z"}


def test_report_without_the_kubernetes_client_is_one_line_naming_the_command(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: a traceback (ModuleNotFoundError: kubernetes)."""
    import importlib.util
    import sys

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "kubernetes" else real(name, *a))
    monkeypatch.setitem(sys.modules, "kubernetes", None)
    code, out, err = run(capsys, "report", "--kubeconfig", str(tmp_path / "kubeconfig"))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "'submit' extra" in err and "scripts/extra submit" in err and "Traceback" not in err


def test_a_samples_export_over_the_cap_is_refused_before_a_byte_is_read(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Before: a 3 GiB export was read whole. A sparse file: no disk is used."""
    from placement.prometheus.measurements import MAX_SAMPLES_BYTES

    big = tmp_path / "big.json"
    with big.open("wb") as fh:
        fh.truncate(MAX_SAMPLES_BYTES + 1)
    code, _, err = run(capsys, "calibrate", "--samples", str(big), "-o", str(tmp_path / "c.json"))
    assert code == 2 and "--samples" in err and len(err.strip().splitlines()) == 1


def _spot(nh: float, rc: float) -> dict[str, Any]:
    return {"cloud": "aws", "region": "eu-south-2", "zone": "eus2-az2", "instance_type": "p5en.48xlarge",
            "node_hours": nh, "reclaims": rc}


def _speed(acc: str, per_gpu: float, **kw: Any) -> dict[str, Any]:
    return {"workload": "llm", "accelerator": acc, "nodes": 1, "unit": "tokens/s", "per_gpu": per_gpu, "runs": 5,
            **kw}


# (case, spot rows, speed rows, prior_node_hours, the field the one error line names, or None: it plans)
FIGURES = [
    ("node_hours 1e300", [_spot(1e300, 0)], [], None, "spot[0].node_hours"),
    ("reclaims 1e300", [_spot(1, 1e300)], [], None, "spot[0].reclaims"),
    ("prior_node_hours 1e300", [_spot(10, 1)], [], 1e300, "calibration.prior_node_hours"),
    ("prior_node_hours 1e-300", [_spot(10, 1)], [], 1e-300, "calibration.prior_node_hours"),
    ("per_gpu 1e300 and 1e-300", [], [_speed("H100", 1e300), _speed("H200", 1e-300)], None, "speed[0].per_gpu"),
    ("node_hours 1e-300 with reclaims", [_spot(1e-300, 5)], [], None, None),
    ("the bounds' edges: rates", [_spot(1e9, 0), _spot(1e-9, 1e9)], [], 1e-3, None),
    ("the bounds' edges: speeds 1e15 apart", [], [_speed("H100", 1e9), _speed("H200", 1e-6)], None, None),
    ("the bounds' edges: scaling", [], [_speed("H100", 1e-6, runs=10**9), _speed("H100", 1e9, nodes=100_000)], None,
     None),
]


@pytest.mark.parametrize("spot, speed, prior, field", [f[1:] for f in FIGURES], ids=[f[0] for f in FIGURES])
def test_calibration_figures_past_what_the_arithmetic_takes_are_refused_by_field(
        spot: list[dict[str, Any]], speed: list[dict[str, Any]], prior: float | None, field: str | None,
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: ZeroDivisionError in the Gamma quantile and the speed ratios. A figure out of range is one line
    naming it (exit 2); one at the edge of the range plans (exit 0); never a traceback."""
    path = Path(_calibration(tmp_path, spot, speed))
    if prior is not None:
        doc = json.loads(path.read_text())
        path.write_text(json.dumps({**doc, "calibration": {"prior_node_hours": prior}}))
    code, out, err = run(capsys, "plan", str(EXAMPLES / "job.yaml"), "--top", "1", "--calibration", str(path))
    assert "Traceback" not in err
    if field is None:
        assert code == 0 and out.strip().splitlines()[-1].startswith("calibration: ")
    else:
        errors = [line for line in err.splitlines() if "error" in line]
        assert code == 2 and len(errors) == 1 and field in errors[0]


def test_the_newest_calibration_in_force_by_default_says_so_and_how_to_leave_it_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: the newest calibration file applied to every plan silently."""
    folder = tmp_path / "data" / "calibration"
    folder.mkdir(parents=True)
    cal = Path(_calibration(tmp_path, [{"cloud": "aws", "region": "eu-south-2", "zone": "eus2-az2",
                                        "instance_type": "p5en.48xlarge", "node_hours": 500, "reclaims": 1}], []))
    cal.rename(folder / "calibration-20261120T000000Z.json")
    monkeypatch.setenv("GPUFLEET_DATA_DIR", str(tmp_path / "data"))
    code, out, _ = run(capsys, "plan", str(EXAMPLES / "job.yaml"), "--top", "1")
    last = out.strip().splitlines()[-1]
    assert code == 0 and "calibration-20261120T000000Z.json (the newest" in last and "--no-calibration" in last
    code, out, _ = run(capsys, "plan", str(EXAMPLES / "job.yaml"), "--top", "1", "--no-calibration")
    assert code == 0 and "calibration:" not in out
