"""Flags that contradict each other are usage errors; ``python -m placement``; every option has help; width."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from placement.commands.main import build_parser, main

ROOT = Path(__file__).resolve().parents[3]
JOB = str(ROOT / "placement" / "examples" / "job.yaml")


@pytest.mark.parametrize(("argv", "needle"), [
    (["plan", JOB, "--live", "--offline"], "--offline: not allowed with argument --live"),
    (["plan", JOB, "--refresh"], "--refresh only applies with --live"),
    (["plan", JOB, "--offline", "--refresh"], "--refresh only applies with --live"),
    (["offers", "--accelerator", "H100", "--refresh"], "--refresh only applies with --live"),
    (["plan", JOB, "--allow-catalog-fallback"], "--allow-catalog-fallback only applies with --live"),
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


def test_an_empty_now_is_refused_not_taken_for_the_current_time(capsys):
    assert main(["plan", JOB, "--now", ""]) == 2
    err = capsys.readouterr().err
    assert "--now: is empty" in err and err.count("\n") == 1
    assert main(["plan", JOB, "--now", "2026-13-01"]) == 2
    assert "blank" not in capsys.readouterr().err  # blank means open-ended for reservation ends only


def test_refresh_help_says_where_it_writes(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("GPUFLEET_DATA_DIR", str(tmp_path))
    with pytest.raises(SystemExit):
        main(["refresh", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert f"Default output: {tmp_path / 'catalog.json'}" in out and "GPUFLEET_DATA_DIR" in out


def _no_credentials(monkeypatch, clouds):
    import placement.live.runner as runner
    from placement.live import LiveResult, Source

    def fake(request, catalog):
        from placement.model.quotas import QuotaTable

        sources = [Source(c, "credentials", "", "no-credentials", "none found") if c in clouds
                   else Source(c, "compute:regions", "", "ok") for c in ("aws", "gcp")]
        return LiveResult(catalog=catalog, quotas=QuotaTable(), sources=sources)

    monkeypatch.setattr(runner, "fetch_live", fake)


def test_live_without_any_credentials_fails_unless_catalog_fallback_is_allowed(capsys, monkeypatch):
    _no_credentials(monkeypatch, {"aws", "gcp"})
    assert main(["plan", JOB, "--live", "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert "the answer would be catalog data" in captured.err and "--allow-catalog-fallback" in captured.err
    assert main(["plan", JOB, "--live", "--json", "--allow-catalog-fallback"]) == 0
    err = capsys.readouterr().err
    assert err.count("placement: warning: --live: no ") == 2 and "catalog data" in err


def test_live_with_one_cloud_lacking_credentials_warns_and_answers(capsys, monkeypatch):
    _no_credentials(monkeypatch, {"aws"})
    assert main(["plan", JOB, "--live", "--json"]) == 0
    err = capsys.readouterr().err
    assert "placement: warning: --live: no aws credentials: aws candidates use catalog data" in err
