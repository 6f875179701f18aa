"""The dispatch tests' shared fixtures: a fake hub and its workers on loopback (tests/dispatchfleet.py), and the
dispatch benchmark (scripts/bench_dispatch.py) as a module, whose fleet and Workloads several tests build."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from dispatchfleet import Fleet


@pytest.fixture
def fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Fleet]:
    """A hub and workers serving on 127.0.0.1, reached directly (a proxy in the environment is ignored)."""
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    f = Fleet(tmp_path)
    yield f
    f.close()


@pytest.fixture(scope="session")
def bench() -> ModuleType:
    """scripts/bench_dispatch.py loaded once (its own imports, scripts/_bench.py and _venv.py, from scripts/)."""
    scripts = Path(__file__).resolve().parents[3] / "scripts"
    spec = importlib.util.spec_from_file_location("bench_dispatch_for_tests", scripts / "bench_dispatch.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    sys.path.insert(0, str(scripts))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(scripts))
    return module
