"""The dispatch tests' shared fixture: a fake hub and its workers on loopback (tests/dispatchfleet.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

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
