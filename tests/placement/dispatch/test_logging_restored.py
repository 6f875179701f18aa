"""A test that runs the dispatcher's logging set-up leaves the loggers as it found them (tests/conftest.py), so a
later record never reaches the closed capture stream of a finished test. The two tests run in file order."""

from __future__ import annotations

import logging

import pytest

from placement.dispatch.telemetry import setup_logging


def test_the_dispatcher_logs_to_this_tests_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging("info")
    logging.getLogger("gpufleet.dispatch").info("first")
    assert '"msg": "first"' in capsys.readouterr().err


def test_a_later_record_finds_no_closed_stream(capfd: pytest.CaptureFixture[str]) -> None:
    logging.getLogger("gpufleet.dispatch").warning("second")
    assert "logging error" not in capfd.readouterr().err
