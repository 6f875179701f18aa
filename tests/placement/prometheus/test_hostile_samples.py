"""Issue 38: ``calibrate --samples`` on a hostile export: every malformed file is one line naming what is wrong
(exit 2), never a traceback, and nothing is written; the export itself is never the output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from factories import run

T0 = 1793491200.0  # 2026-11-01T00:00:00Z
SPOT = {"cloud": "gcp", "region": "us-central1", "zone": "us-central1-a", "instance_type": "a3-highgpu-8g"}
JOB = {"job": "j", "team": "t", "workload": "llm", "accelerator": "H100", "nodes": "1", "gpus": "8"}


def _doc(*series: dict[str, Any]) -> str:
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": list(series)}})


def _node(values: list[Any]) -> dict[str, Any]:
    return {"metric": {"__name__": "gpufleet_spot_node_seconds_total", **SPOT}, "values": values}


def _trainer(name: str, labels: dict[str, str], values: list[Any]) -> dict[str, Any]:
    return {"metric": {"__name__": name, **labels}, "values": values}


# (case, the export's text, what the one error line holds)
CASES = [
    ("nodes='inf'", _doc(_trainer("gpufleet_trainer_tokens_total", {**JOB, "nodes": "inf"},
                                  [[T0, "0"], [T0 + 600, "1e6"]]),
                         _trainer("gpufleet_trainer_step_seconds_sum", {**JOB, "nodes": "inf"},
                                  [[T0, "0"], [T0 + 600, "500"]])), "nodes='inf'"),
    ("a sample at year 33658", _doc(_node([[T0, "0"], [1e12, "3600"]])), "sample time"),
    ("a NaN time", _doc(_node([["NaN", "0"], [T0, "3600"]])), "sample time"),
    ("a NaN time as a JSON constant", _doc(_node([[T0, "0"], [float("nan"), "3600"]])), "sample time"),
    ("a time of true", _doc(_node([[True, "0"], [T0 + 3600, "1"]])), "sample time"),
    ("a JSON list answer", json.dumps([1, 2]), "document 1"),
    ("a sample without metric", json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [
        {"values": [[T0, "1"]]}]}}), "needs metric and values"),
    ("a non-numeric value", _doc(_node([[T0, "0"], [T0 + 3600, "lots"]])), "not a number"),
    ("an object as a value", _doc(_node([[T0, "0"], [T0 + 3600, {}]])), "not a number"),
    ("a sample that is no pair", _doc(_node([[T0], [T0 + 3600, "1"]])), "not a number"),
    ("an absurd counter", _doc(_node([[T0, "0"], [T0 + 3600, "1e300"]])), "node_hours"),
    ("arrays nested past the parser's depth", "[" * 100_000 + "]" * 100_000, "not JSON"),
    ("not UTF-8", "\udcff", "UTF-8"),
]


@pytest.mark.parametrize("text, said", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_malformed_export_is_one_line_exit_2_and_nothing_written(text: str, said: str, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    samples, out = tmp_path / "samples.json", tmp_path / "cal.json"
    samples.write_bytes(text.encode("utf-8", "surrogateescape"))
    code, stdout, err = run(capsys, "calibrate", "--samples", str(samples), "-o", str(out))
    assert code == 2 and said in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and not out.exists()


@pytest.mark.parametrize("same", ["the same path", "a link to it", "another spelling"])
def test_the_export_is_never_the_output(same: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    samples = tmp_path / "samples.json"
    text = _doc(_node([[T0, "0"], [T0 + 3600, "3600"]]))
    samples.write_text(text)
    out = {"the same path": samples, "another spelling": tmp_path / "." / "samples.json"}.get(same)
    if out is None:
        out = tmp_path / "link.json"
        out.symlink_to(samples)
    code, _, err = run(capsys, "calibrate", "--samples", str(samples), "-o", str(out))
    assert code == 2 and "--output" in err and len(err.strip().splitlines()) == 1
    assert samples.read_text() == text  # the user's only export is untouched
