"""Shared test helpers: paths to the repo and to tests/data (pinned public schemas and reference files)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Pinned copies of the public CRDs, catalog snapshot and quota references the tests check against (source, version
# and licence of each in tests/data/README.md): a fresh clone checks everything.
DATA = REPO / "tests" / "data"
KUEUE_CRDS = DATA / "kueue-crds"
JOBSET_CRDS = DATA / "jobset-crds"


@pytest.fixture
def data_file():
    """Path of a file under tests/data; a missing one is a broken checkout, so it fails rather than skips."""

    def get(rel: str) -> Path:
        if rel.startswith("catalog-snapshot/"):
            # Public data of other projects, lent beside the developers' checkout with the instruction to read it
            # there and never copy it into the project: tests comparing our data with it skip on a user's clone.
            lent = REPO.parent / "shared" / rel
            if not lent.is_file():
                pytest.skip(f"the public catalog snapshot ({rel}) is not redistributed with the repository; "
                            "it is read beside a developer's checkout only")
            return lent
        path = DATA / rel
        assert path.is_file(), f"{path} is missing: tests/data ships with the repository (tests/data/README.md)"
        return path

    return get


@pytest.fixture(autouse=True, scope="session")
def _no_user_data_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    """A catalog someone refreshed on this machine (~/.local/share/gpufleet) must not change test answers:
    every test sees an empty data directory unless it sets GPUFLEET_DATA_DIR itself."""
    import os

    os.environ.setdefault("GPUFLEET_DATA_DIR", str(tmp_path_factory.mktemp("gpufleet-data")))


@pytest.fixture(autouse=True, scope="session")
def _no_user_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Tests never read or write the real user cache (~/.cache/gpufleet: parsed catalogs, live answers): every
    test sees a cache directory of its own session unless it sets GPUFLEET_CACHE_DIR itself."""
    import os

    os.environ["GPUFLEET_CACHE_DIR"] = str(tmp_path_factory.mktemp("gpufleet-cache"))


@pytest.fixture(autouse=True)
def _dispatch_loggers_restored() -> Iterator[None]:
    """An in-process `placement dispatch` sets up its JSON logging on the ``gpufleet`` and ``leaderelection``
    loggers, with a handler bound to the stderr of that moment: under pytest, the test's capture stream, closed
    when the test ends. Each test leaves those loggers as it found them, so a record logged later (another test,
    a thread still stopping) never reaches a closed stream."""
    import logging

    loggers = [logging.getLogger(name) for name in ("gpufleet", "leaderelection")]
    saved = [(lg.handlers[:], lg.level, lg.propagate) for lg in loggers]
    yield
    for lg, (handlers, level, propagate) in zip(loggers, saved, strict=True):
        lg.handlers[:] = handlers
        lg.setLevel(level)
        lg.propagate = propagate
