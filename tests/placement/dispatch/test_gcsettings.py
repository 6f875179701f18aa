"""The garbage collector's setting of a dispatcher process (issue 30): ``placement dispatch`` applies it."""

from __future__ import annotations

import gc

from placement.commands.main import main
from placement.dispatch import gcsettings


def test_tune_gc_raises_the_young_threshold_and_returns_the_one_it_replaced():
    before = gc.get_threshold()
    try:
        assert gcsettings.tune_gc() == before
        assert gc.get_threshold() == (gcsettings.GEN0_THRESHOLD, before[1], before[2])
    finally:
        gc.set_threshold(*before)


def test_the_dispatch_command_applies_it_before_reading_anything(monkeypatch, tmp_path, capsys):
    called: list[bool] = []
    monkeypatch.setattr(gcsettings, "tune_gc", lambda: called.append(True) or gc.get_threshold())
    code = main(["dispatch", "--once", "--fleet", str(tmp_path / "missing.json"),
                 "--kubeconfig", str(tmp_path / "kubeconfig")])
    assert code == 2 and called == [True]
    assert "--fleet" in capsys.readouterr().err


def test_the_benchmark_counts_its_targets_with_the_same_function():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / "scripts" / "bench_dispatch.py").read_text()
    assert "from placement.dispatch.gcsettings import tune_gc" in text and "tune_gc()" in text

