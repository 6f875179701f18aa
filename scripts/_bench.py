"""Shared by scripts/bench_*.py: one line saying when, on what and how busy the machine was, so a figure
copied into docs/benchmarks.md carries its date and machine."""

from __future__ import annotations

import datetime as dt
import os
import platform
import sys
from pathlib import Path


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_line() -> str:
    """``measured 2026-11-23 20:50 UTC on <CPU>, 2 cores, load average 0.4/0.3/0.5, Python 3.11.7``."""
    load = "/".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "unknown"
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (f"measured {when} on {cpu_model()}, {os.cpu_count()} cores, load average {load} (1/5/15 min), "
            f"Python {platform.python_version()}; command: {Path(sys.argv[0]).name} {' '.join(sys.argv[1:])}".rstrip())
