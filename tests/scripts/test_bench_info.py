"""Benchmark figures carry their date and machine: the line every scripts/bench_*.py prints first."""

from __future__ import annotations

import datetime as dt
import importlib.util
import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_machine_line_names_date_cpu_cores_and_load():
    spec = importlib.util.spec_from_file_location("_bench", ROOT / "scripts" / "_bench.py")
    assert spec and spec.loader
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    line = bench.machine_line()
    assert line.startswith(f"measured {dt.datetime.now(dt.UTC):%Y-%m-%d} ")
    assert f", {os.cpu_count()} cores, " in line
    assert re.search(r"load average \d+\.\d\d/\d+\.\d\d/\d+\.\d\d", line)
    assert "command: " in line


def test_every_bench_script_prints_the_machine_line():
    for script in sorted((ROOT / "scripts").glob("bench_*.py")):
        assert "print(_bench.machine_line())" in script.read_text(), script.name
