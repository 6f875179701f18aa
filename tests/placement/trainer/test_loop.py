"""The training loop in-process: an emergency checkpoint that does not fit the grace period still ends with
the retry code in time, and an in-flight write is awaited rather than duplicated."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import pytest

from placement.trainer.checkpoint import Checkpointer, FileWriter, Store
from placement.trainer.loop import Run, train
from placement.trainer.settings import TrainerEnv


class Counter:
    """A model whose loss is its step; its snapshot's writer blocks while ``gate`` is clear."""

    name, device = "fake", "cpu"

    def __init__(self, gate: threading.Event) -> None:
        self.t = 0
        self.gate = gate

    def train_step(self) -> float:
        self.t += 1
        time.sleep(0.001)
        return float(self.t)

    def snapshot(self) -> tuple[dict[str, FileWriter], dict[str, Any]]:
        gate = self.gate

        def write(f: IO[bytes]) -> None:
            gate.wait(30)
            f.write(b"state")

        return {"s": write}, {"t": self.t}

    def restore(self, files: Mapping[str, bytes], state: Mapping[str, Any]) -> None:
        self.t = int(state["t"])


@pytest.fixture(autouse=True)
def handlers() -> Iterator[None]:
    saved = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    yield
    signal.signal(signal.SIGTERM, saved[0])
    signal.signal(signal.SIGINT, saved[1])


def test_an_emergency_checkpoint_that_does_not_fit_the_grace_period_still_exits_in_time(tmp_path: Path) -> None:
    gate = threading.Event()  # never set: the store hangs
    env = TrainerEnv(checkpoint_dir=str(tmp_path), grace_s=2.5, retry_exit_code=75)

    def on_step(step: int, seconds: float) -> None:
        if step == 5:
            os.kill(os.getpid(), signal.SIGTERM)

    ck = Checkpointer(home=Store(str(tmp_path), "j"))
    start = time.monotonic()
    code = train(Run(env=env, model=Counter(gate), steps=1000, checkpoints=ck, on_step=on_step))
    elapsed = time.monotonic() - start
    gate.set()
    assert code == 75
    assert elapsed < 2.5  # grace 2.5 s less the 2 s exit margin: about 0.5 s after the notice
    assert not (tmp_path / "step-0000000005" / "manifest.json").exists()  # torn, never loaded
    ck.wait(10)


def test_sigterm_during_a_write_of_the_same_step_waits_for_it(tmp_path: Path) -> None:
    gate = threading.Event()
    env = TrainerEnv(checkpoint_dir=str(tmp_path), grace_s=30, retry_exit_code=75)
    written: list[int] = []

    def on_step(step: int, seconds: float) -> None:
        if step == 10:
            os.kill(os.getpid(), signal.SIGTERM)
            threading.Timer(0.3, gate.set).start()

    ck = Checkpointer(home=Store(str(tmp_path), "j"), on_written=lambda w: written.append(w.step))
    code = train(Run(env=env, model=Counter(gate), steps=1000, checkpoints=ck, every_steps=10, on_step=on_step))
    assert code == 75
    assert written == [10]  # the interval checkpoint of step 10 is the emergency one: written once
