"""Ranks from what the launcher in use sets (torchrun, one process per pod, a completion index), in the documented
order; and the launcher's decision from the processes' outcome markers."""

from __future__ import annotations

import pytest

from placement.trainer.outcome import Outcome, decide
from placement.trainer.settings import Ranks, SettingsError, ranks


@pytest.mark.parametrize(("env", "want"), [
    ({}, Ranks(0, 1, 0, 1, 0, 1, "alone")),
    # torchrun: 2 nodes x 2; the pod's NODE_RANK (submit) is there too, and loses to RANK
    ({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
      "GROUP_WORLD_SIZE": "2", "NODE_RANK": "1", "NNODES": "2"}, Ranks(3, 4, 1, 2, 1, 2, "torchrun")),
    ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "NODE_RANK": "0"},
     Ranks(1, 2, 1, 2, 0, 1, "torchrun")),
    ({"NODE_RANK": "2", "NNODES": "4"}, Ranks(2, 4, 0, 1, 2, 4, "NODE_RANK")),
    ({"NODE_RANK": "1", "GPUFLEET_NODES": "2"}, Ranks(1, 2, 0, 1, 1, 2, "NODE_RANK")),
    ({"JOB_COMPLETION_INDEX": "1", "NNODES": "2"}, Ranks(1, 2, 0, 1, 1, 2, "JOB_COMPLETION_INDEX")),
])
def test_ranks_in_the_documented_order(env: dict[str, str], want: Ranks) -> None:
    assert ranks(env) == want


@pytest.mark.parametrize("env", [
    {"RANK": "0"}, {"RANK": "2", "WORLD_SIZE": "2"}, {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "2",
                                                       "LOCAL_WORLD_SIZE": "2"},
    {"NODE_RANK": "2", "NNODES": "2"}, {"JOB_COMPLETION_INDEX": "-1"}, {"WORLD_SIZE": "9" * 5000},
])
def test_bad_ranks_name_the_variable(env: dict[str, str]) -> None:
    with pytest.raises(SettingsError) as err:
        ranks(env)
    assert any(name in str(err.value) for name in env) and len(str(err.value)) < 300


def o(rank: int, state: str, code: int | None = None, world: int = 2) -> Outcome:
    return Outcome(rank=rank, local_rank=rank, local_world=world, pid=100 + rank, start=1, state=state, code=code)


@pytest.mark.parametrize(("rc", "sigterm", "outcomes", "finished", "want"), [
    (1, True, [o(0, "finished", 0), o(1, "finished", 0)], False, 0),  # torchrun's 1 after a real finish
    (0, False, [o(0, "finished", 0), o(1, "finished", 0)], False, 0),
    (1, True, [o(0, "retry", 75), o(1, "retry", 75)], False, 75),  # a drain
    (1, True, [o(0, "finished", 0)], False, 75),  # rank 1 never said: not a finish
    (1, False, [o(0, "retry", 75), o(1, "running")], False, 75),  # kill -9 of rank 1
    (1, False, [o(0, "retry", 75), o(1, "failed", 1)], False, 1),  # a bug in rank 1
    (1, False, [o(0, "retry", 75), o(1, "failed", 2)], False, 2),  # bad input in rank 1
    (0, False, [o(0, "finished", 0), o(1, "running")], False, 0),  # exit 0 without its last marker
    (0, True, [], True, 0),  # a one-process trainer: the finished file after SIGTERM
    (0, True, [], False, 75),  # ... exit 0 on a drain without it
    (3, False, [], False, 3),  # no markers: the code passes
    (75, False, [], False, 75),
])
def test_the_launchers_decision(rc: int, sigterm: bool, outcomes: list[Outcome], finished: bool, want: int) -> None:
    assert decide(rc, sigterm, outcomes, finished, 75).code == want
