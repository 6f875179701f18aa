"""The garbage collector's setting of a dispatcher process (issue 30): ``placement dispatch`` applies it."""

from __future__ import annotations

import gc

import pytest

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
    assert "from placement.dispatch.gcsettings import deciding, tune_gc" in text and "tune_gc()" in text
    assert "with deciding()" in text



def test_deciding_pauses_the_collector_and_gives_it_back_even_on_an_error():
    assert gc.isenabled()
    with gcsettings.deciding():
        assert not gc.isenabled()
        with gcsettings.deciding():  # nested: still off, and left off by the inner one
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError), gcsettings.deciding():
        raise ValueError("a pass that fails")
    assert gc.isenabled()
    gc.disable()
    try:
        with gcsettings.deciding():
            pass
        assert not gc.isenabled()  # off before: left off (one-shot commands pause it themselves)
    finally:
        gc.enable()


def test_a_pass_decides_without_collections_and_carries_out_with_them(fleet, monkeypatch):
    from placement.dispatch import controller as ctl

    seen: dict[str, list[bool]] = {"snapshots": [], "decide": [], "carry_out": []}
    real_decide, real_snapshots, real_carry = ctl.decide, ctl.Controller.snapshots, ctl.Controller._carry_out

    def decide(*args, **kwargs):
        seen["decide"].append(gc.isenabled())
        return real_decide(*args, **kwargs)

    def snapshots(self, *args, **kwargs):
        seen["snapshots"].append(gc.isenabled())
        return real_snapshots(self, *args, **kwargs)

    def carry_out(self, *args, **kwargs):
        seen["carry_out"].append(gc.isenabled())
        return real_carry(self, *args, **kwargs)

    monkeypatch.setattr(ctl, "decide", decide)
    monkeypatch.setattr(ctl.Controller, "snapshots", snapshots)
    monkeypatch.setattr(ctl.Controller, "_carry_out", carry_out)
    name = fleet.submit("paused")
    c = fleet.controller("solo", lease=None)
    result = c.run_once()
    assert any(d.workload.name == name and d.action == "nominate" for d in result.decisions)
    assert seen["snapshots"] == [False] and seen["decide"] == [False]
    assert seen["carry_out"] and all(seen["carry_out"])
    assert gc.isenabled()


def test_a_pass_that_fails_while_deciding_gives_the_collector_back(fleet, monkeypatch):
    from placement.dispatch import controller as ctl

    def decide(*args, **kwargs):
        raise RuntimeError("a bug in the decision")

    monkeypatch.setattr(ctl, "decide", decide)
    fleet.submit("fails")
    c = fleet.controller("solo", lease=None)
    with pytest.raises(RuntimeError):
        c.reconcile()
    assert gc.isenabled()
