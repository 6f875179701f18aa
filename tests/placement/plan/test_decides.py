"""The break-even search (placement.plan.decides): the leader's path is the whole search's path."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from placement.model.catalog import embedded_catalog
from placement.model.jobspec import parse_job
from placement.plan import decides
from placement.plan.job import plan


def _jobs(n: int, seed: int) -> list[Any]:
    """``n`` varied jobs (accelerators, sizes, lengths, deadlines, delay prices, checkpoint sizes), seeded."""
    rng = random.Random(seed)
    out: list[Any] = []
    while len(out) < n:
        doc: dict[str, Any] = {
            "name": f"j{len(out)}", "capacity": "any",
            "accelerator": rng.choice([["H100"], ["H100", "H200"], ["A100", "A100-80GB"], ["H200"], ["A100"]]),
            "gpus": rng.choice([8, 16, 32, 64]), "hours": rng.choice([4, 12, 48, 200, 1000])}
        if rng.random() < 0.5:
            doc["data"] = {"dataset": {"uri": "s3://b/d", "size_gb": rng.choice([10, 2000]), "region": "us-east-1"},
                           "outputs_gb": 100}
        if rng.random() < 0.3:
            doc["deadline_hours"] = doc["hours"] * rng.uniform(1.2, 3.0)
        if rng.random() < 0.4:
            doc["usd_per_hour_of_delay"] = rng.choice([10, 500, 5000])
        if rng.random() < 0.4:
            doc["checkpoint"] = {"size_gb": rng.choice([10, 500, 5000]), "write_gbps": 10}
        out.append(parse_job(doc))
    return out


def test_the_leader_alone_finds_the_rate_the_search_over_every_candidate_finds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    offers = embedded_catalog().offers
    real = decides.search
    found = 0
    for job in _jobs(16, seed=33):
        fast = decides.break_even(plan(job, offers))
        def whole_only(spot_wins: Callable[[float], bool], calls: list[int] = []) -> Any:  # noqa: B006
            calls.append(1)  # the leader's search answers nothing: break_even searches over every candidate
            return None if len(calls) == 1 else real(spot_wins)

        monkeypatch.setattr(decides, "search", whole_only)
        whole = decides.break_even(plan(job, offers))
        monkeypatch.setattr(decides, "search", real)
        assert fast == whole, job.name
        found += fast is not None
    assert found >= 4  # enough plans where spot and on-demand trade places to mean something
