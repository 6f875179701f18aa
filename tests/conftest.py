"""Shared test helpers: paths to the repo and to ../shared (public reference data, may be absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture
def shared_file():
    """Path of a file under ../shared, or skip with the reason when it is absent."""

    def get(rel: str) -> Path:
        path = SHARED / rel
        if not path.exists():
            pytest.skip(f"{path} is absent (public reference data lives beside the repo in ../shared)")
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
