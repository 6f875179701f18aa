"""scripts/mlperf_points.py: the one basis of every scaling point and speed (issue 27), on a small made-up
result directory laid out like mlcommons/training_results_<round>."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "mlperf_points.py"


def _module():
    spec = importlib.util.spec_from_file_location("mlperf_points", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _log(start_ms: int, minutes: float, samples: int, status: str = "success") -> str:
    stop = start_ms + int(minutes * 60_000)
    lines = [{"key": "run_start", "time_ms": start_ms, "metadata": {}},
             {"key": "eval_accuracy", "time_ms": stop - 1, "metadata": {"samples_count": samples}},
             {"key": "run_stop", "time_ms": stop, "metadata": {"samples_count": samples, "status": status}}]
    return "\n".join(":::MLLOG " + json.dumps(x) for x in lines) + "\n"


def test_per_gpu_samples_per_second_drops_the_fastest_and_slowest_run(tmp_path: Path) -> None:
    mod = _module()
    (tmp_path / "Acme" / "systems").mkdir(parents=True)
    (tmp_path / "Acme" / "systems" / "box_n2.json").write_text(
        json.dumps({"number_of_nodes": "2", "accelerators_per_node": "8"}))
    runs = tmp_path / "Acme" / "results" / "box_n2" / "llama2_70b_lora"
    runs.mkdir(parents=True)
    for i, minutes in enumerate([10, 20, 20, 20, 40]):  # the 10 and the 40 are dropped
        (runs / f"result_{i}.txt").write_text(_log(1_000_000, minutes, 3200))
    (runs / "result_5.txt").write_text(_log(1_000_000, 1, 3200, status="aborted"))  # not a success: ignored
    r = mod.result(tmp_path, "Acme/box_n2/llama2_70b_lora")
    assert r["gpus"] == 16 and r["runs"] == 5 and r["kept"] == 3
    assert r["per_gpu_samples_s"] == pytest.approx(3200 / (20 * 60) / 16)
