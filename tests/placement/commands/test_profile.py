"""``placement profile`` (issue 26): the reference trainer's benchmark mode on this machine (CPU here), written as
a calibration speed row merged with the file's other rows."""

from __future__ import annotations

import json
from pathlib import Path

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
