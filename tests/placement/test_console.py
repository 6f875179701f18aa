"""What the commands share with their process: exit codes, and the collector paused only while asked."""

from __future__ import annotations

import gc

import pytest

from placement import console
from placement.fleet import errors as fleet_errors


def test_one_set_of_exit_codes() -> None:
    assert (console.EXIT_OK, console.EXIT_NOTHING_FEASIBLE, console.EXIT_BAD_INPUT) == (0, 1, 2)
    assert (fleet_errors.EXIT_OK, fleet_errors.EXIT_FAILED, fleet_errors.EXIT_BAD_INPUT) == (0, 1, 2)


def test_the_collector_is_paused_inside_and_back_after_an_error() -> None:
    assert gc.isenabled()
    with pytest.raises(ValueError), console.paused_gc():
        assert not gc.isenabled()
        with console.paused_gc():
            pass
        assert not gc.isenabled()  # a nested use leaves it off
        raise ValueError
    assert gc.isenabled()


def test_a_plan_leaves_the_collector_on(tmp_path) -> None:
    from placement.commands.main import main

    job = tmp_path / "job.yaml"
    job.write_text("name: j\naccelerator: H100\ngpus: 8\nhours: 2\n")
    assert main(["plan", str(job), "--json"]) == 0
    assert gc.isenabled()
