"""``placement profile`` (issue 26): the reference trainer's benchmark mode on this machine (CPU here), written as
a calibration speed row merged with the file's other rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from placement.commands.main import main
from placement.files.readers import load_yaml
from placement.model.calibration import parse_calibration

BASE = {"schema": "gpufleet.calibration/v1", "measured": {"from": "2026-10-01T00:00:00Z", "to": "2026-11-01T00:00:00Z"},
        "spot": [{"cloud": "aws", "region": "us-east-1", "instance_type": "p5.48xlarge", "node_hours": 10,
                  "reclaims": 1}]}


def test_profile_writes_a_speed_row_and_keeps_the_files_other_rows(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cal.yaml"
    out.write_text(json.dumps(BASE))
    assert main(["profile", "--steps", "2", "--runs", "1", "--output", str(out), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["results"][0]["schema"] == "gpufleet.trainer-benchmark/v1"
    cal = parse_calibration(load_yaml(str(out), "calibration"))
    assert len(cal.spot) == 1
    (row,) = cal.speed
    assert (row.workload, row.accelerator, row.nodes, row.unit, row.runs) == ("llm", "CPU", 1, "tokens/s", 1)
    assert row.per_gpu == pytest.approx(shown["results"][0]["per_gpu"], rel=1e-5)  # written to 6 digits


def test_profile_refuses_a_missing_config_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "--config", str(tmp_path / "none.yaml"), "--output", str(tmp_path / "c.yaml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--config" in err[0]
    assert not (tmp_path / "c.yaml").exists()


@pytest.mark.parametrize("timeout", ["1e300", "inf", "nan", "0", "-5"])
def test_profile_timeout_out_of_range_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  timeout: str) -> None:
    assert main(["profile", "--timeout", timeout, "--output", str(tmp_path / "c.yaml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--timeout" in err[0] and "Traceback" not in err[0]
    assert not (tmp_path / "c.yaml").exists()


def test_profile_runs_the_trainer_with_one_blas_thread_unless_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    import subprocess

    from placement.trainer.settings import BLAS_THREAD_VARS

    for name in BLAS_THREAD_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    seen: list[dict[str, str]] = []
    real = subprocess.run

    def spy(cmd: list[str], **kw: Any) -> Any:
        seen.append(dict(kw["env"]))
        return real(cmd, **kw)

    monkeypatch.setattr(subprocess, "run", spy)
    assert main(["profile", "--steps", "1", "--runs", "1", "--output", str(tmp_path / "c.yaml")]) == 0
    assert seen and {n: seen[0][n] for n in BLAS_THREAD_VARS} == {n: "3" if n == "OMP_NUM_THREADS" else "1"
                                                                  for n in BLAS_THREAD_VARS}


@pytest.mark.parametrize("where", ["a folder", "in a missing folder", "a FIFO", "not a calibration", "the config"])
def test_profile_checks_its_output_before_the_benchmark_runs(where: str, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 38: --output naming a folder named a temporary file, and a missing folder was created after the
    benchmark had run; now every output path is checked by one rule (placement.files.outputs) before any work."""
    import os

    import placement.commands.profile as profile

    monkeypatch.setattr(profile, "_bench", lambda args: pytest.fail("the benchmark ran"))
    config = tmp_path / "model.yaml"
    config.write_text("layers: 2\n")
    other = tmp_path / "notes.yaml"
    other.write_text("mine: true\n")
    os.mkfifo(tmp_path / "fifo")
    out = {"a folder": tmp_path, "in a missing folder": tmp_path / "nope" / "c.json", "a FIFO": tmp_path / "fifo",
           "not a calibration": other, "the config": config}[where]
    assert main(["profile", "--config", str(config), "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--output" in err[0] and "Traceback" not in err[0]
    assert other.read_text() == "mine: true\n" and not (tmp_path / "nope").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_profile_without_the_trainer_extra_names_the_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    import sys

    import placement.commands.profile as profile

    monkeypatch.setitem(sys.modules, "numpy", None)
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None if name == "numpy" else object())
    monkeypatch.setattr(profile, "_bench", lambda args: pytest.fail("the benchmark ran"))
    assert main(["profile", "--output", str(tmp_path / "c.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'trainer' extra" in err[0] and "scripts/extra trainer" in err[0]
