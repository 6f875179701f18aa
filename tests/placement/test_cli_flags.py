"""Flags that contradict each other are usage errors; ``python -m placement``; every option has help; width."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from placement.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
JOB = str(ROOT / "placement" / "examples" / "job.yaml")


@pytest.mark.parametrize(("argv", "needle"), [
    (["plan", JOB, "--live", "--offline"], "--offline: not allowed with argument --live"),
    (["plan", JOB, "--refresh"], "--refresh only applies with --live"),
    (["plan", JOB, "--offline", "--refresh"], "--refresh only applies with --live"),
    (["offers", "--accelerator", "H100", "--refresh"], "--refresh only applies with --live"),
])
def test_contradictory_live_flags_exit_2_with_one_line(capsys, argv, needle):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


def test_python_dash_m_placement_runs_the_cli():
    out = subprocess.run([sys.executable, "-m", "placement", "--version"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    from placement import __version__

    assert out.strip() == f"placement (gpufleet) {__version__}"


def _actions(parser):
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from ((f"{name} {a}", h) for a, h in _actions(sub))
        else:
            yield "/".join(action.option_strings) or action.dest, action.help


def test_every_option_of_every_command_has_help():
    assert [name for name, help_text in _actions(build_parser()) if not help_text] == []


def test_plan_table_fits_columns(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "90")
    assert main(["plan", JOB, "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert max(map(len, out.splitlines())) <= 90
    monkeypatch.delenv("COLUMNS")
    assert main(["plan", JOB, "--top", "3"]) == 0  # not a terminal, no COLUMNS: whole lines
    assert max(map(len, capsys.readouterr().out.splitlines())) > 90


def test_help_names_no_readme_section_that_moved():
    for _, help_text in _actions(build_parser()):
        assert "see README:" not in (help_text or "")
    assert os.path.exists(ROOT / "docs" / "kueue-hub.md")
