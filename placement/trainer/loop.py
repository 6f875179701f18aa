"""The training loop that keeps the trainer contract; :func:`train` is the example in
docs/trainer-contract.md (generated from this file by scripts/docs_examples.py)."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from placement.files import safe
from placement.trainer.checkpoint import Checkpointer, FileWriter, Snapshot
from placement.trainer.notice import Notice, install
from placement.trainer.settings import TrainerEnv

# Seconds kept back from GPUFLEET_GRACE_SECONDS for the process to exit before the kubelet's SIGKILL.
EXIT_MARGIN_S = 2.0


class Model(Protocol):
    """What the loop needs of a backend (placement.trainer.numpy_model, placement.trainer.torch_model)."""

    name: str
    device: str

    def train_step(self) -> float: ...

    def snapshot(self) -> tuple[dict[str, FileWriter], dict[str, Any]]: ...

    def restore(self, files: Mapping[str, bytes], state: Mapping[str, Any]) -> None:
        """Load a checkpoint; ValueError, KeyError or TypeError when it does not fit this run (another model,
        another --seed, a malformed state)."""


class PeerLost(Exception):
    """A peer of the gang is gone: the NumPy backend's heartbeats (placement.trainer.peers), a collective that
    failed or timed out (placement.trainer.torch_model)."""


@dataclass
class Run:
    """One run's parts. ``checkpoints`` None: no checkpoint home. ``every_steps``: checkpoint every so many
    steps instead of every ``GPUFLEET_CHECKPOINT_INTERVAL_SECONDS`` (drills and tests)."""

    env: TrainerEnv
    model: Model
    steps: int
    checkpoints: Checkpointer | None = None
    every_steps: int | None = None
    log_every: int = 0  # a progress line on stderr every so many steps (0: none)
    peer_errors: tuple[type[BaseException], ...] = (PeerLost,)
    check_peers: Callable[[], str | None] = lambda: None
    on_step: Callable[[int, float], None] = lambda step, seconds: None  # metrics
    on_exit: Callable[[str], None] = lambda state: None  # "finished" | "stopped" | "lost": heartbeats
    # Whether the gang stops now, given whether this rank got SIGTERM (PyTorch: an all-reduce of the flag).
    agree_stop: Callable[[bool], bool] = lambda mine: mine
    # SIGTERM/SIGINT: the CLI passes the one it installed when the process started (placement.trainer.notice).
    notice: Notice = field(default_factory=Notice)


def _wait(ckpt: Checkpointer, notice: Notice, grace_s: float) -> bool:
    """Wait for the write in flight; once SIGTERM has come, only until the grace period's end less the exit
    margin. True when nothing is in flight any more."""
    while not ckpt.wait(0.2):
        if notice.first is not None and time.monotonic() >= notice.first + grace_s - EXIT_MARGIN_S:
            return False
    return True


def train(run: Run) -> int:
    """Train to ``run.steps`` and return the exit code the contract asks for (docs/trainer-contract.md)."""
    env, model, ckpt = run.env, run.model, run.checkpoints
    notice = install(run.notice)  # SIGTERM only records the notice (idempotent): finish this step, save, exit

    step, loss = 0, math.nan
    try:
        resumed = ckpt.latest() if ckpt else None  # the newest COMPLETE checkpoint: a torn one is skipped
    except OSError as exc:  # the store is unreachable now: restart later rather than start over from 0
        print(f"trainer: cannot read {env.checkpoint_dir}: {exc}; exit {env.retry_exit_code} (retry)",
              file=sys.stderr)
        return env.retry_exit_code
    if resumed is not None:
        try:
            model.restore(resumed.files, resumed.state)  # parameters, optimizer, RNG and data order
        except (KeyError, ValueError, TypeError) as exc:  # another model's or seed's: a configuration error
            print(f"trainer: {resumed.uri} does not fit this model ({str(exc)[:300]}); run with its configuration "
                  "and --seed, or give another GPUFLEET_CHECKPOINT_DIR", file=sys.stderr)
            return 2
        step, loss = resumed.step, float(resumed.state["loss"])
        print(f"trainer: resumed from {resumed.uri} at step {step}", file=sys.stderr)

    started_at, started_step = time.monotonic(), step

    def snapshot(kind: str) -> Snapshot:
        if ckpt:  # what this process measured, published beside the checkpoint (gpufleet-progress.json)
            hours = (time.monotonic() - started_at) / 3600
            ckpt.steps_per_hour = (step - started_step) / hours if hours > 0 and step > started_step else None
        files, state = model.snapshot()
        return Snapshot(step=step, files=files, state={**state, "loss": loss}, kind=kind)

    last = time.monotonic()
    try:
        while step < run.steps and not run.agree_stop(bool(notice)):  # every rank stops at the same step
            started = time.monotonic()
            loss = model.train_step()  # with PyTorch, collectives raise DistError when a peer is gone
            step += 1
            run.on_step(step, time.monotonic() - started)
            if run.log_every and step % run.log_every == 0 and env.local_rank == 0:  # one line per node
                print(f"trainer: step {step} loss {loss:.6f}", file=sys.stderr, flush=True)
            lost = run.check_peers()
            if lost:
                raise PeerLost(lost)
            due = (step % run.every_steps == 0) if run.every_steps else time.monotonic() - last >= env.interval_s
            if ckpt and due and step < run.steps:
                ckpt.save_async(snapshot("interval"))  # returns at once: training goes on while it writes
                last = time.monotonic()
    except run.peer_errors as exc:  # a peer is gone: restart the gang from its last checkpoint
        if ckpt:  # a write in flight may still finish (within the grace period)
            ckpt.wait(max(env.grace_s - EXIT_MARGIN_S, 0.0))
        print(f"trainer: lost a peer at step {step}: {str(exc)[:300]}; exit {env.retry_exit_code} (retry)",
              file=sys.stderr)
        run.on_exit("lost")
        return env.retry_exit_code

    if step < run.steps:  # SIGTERM: an emergency checkpoint within the grace period, then retry
        deadline = (notice.first or time.monotonic()) + env.grace_s - EXIT_MARGIN_S

        def left() -> float:
            return max(deadline - time.monotonic(), 0.0)

        ok = ckpt is not None and ckpt.wait(left()) and (
            ckpt.durable_step == step or ckpt.save(snapshot("emergency"), timeout=left()))
        saved = "durable" if ok else "not durable within the grace period" if ckpt else "not written (no home)"
        if ckpt and not env.writer:
            saved = "left to rank 0"
        print(f"trainer: {'SIGTERM' if notice else 'a peer got SIGTERM'} at step {step}: checkpoint of step {step} "
              f"{saved}; exit {env.retry_exit_code} (retry)", file=sys.stderr)
        run.on_exit("stopped")
        return env.retry_exit_code  # never 0: exit 0 would end the Job as Succeeded

    if ckpt:  # the final checkpoint; a SIGTERM meanwhile bounds the wait by the grace period
        ok = _wait(ckpt, notice, env.grace_s)
        if ok and ckpt.durable_step != step:
            ckpt.save_async(snapshot("final"))
            ok = _wait(ckpt, notice, env.grace_s) and ckpt.durable_step == step
        if not ok:
            why = "not durable within the grace period after SIGTERM" if notice else "failed"
            print(f"trainer: the final checkpoint of step {step} {why}; exit {env.retry_exit_code} (retry)",
                  file=sys.stderr)
            run.on_exit("stopped")
            return env.retry_exit_code
        ckpt.home.write_finished(step, loss)
    if env.finished_file:  # the launcher's "finished" marker: this exit 0 is a real finish
        try:
            safe.write_atomic(env.finished_file, f"{step}\n".encode())  # never through a FIFO or link there
        except OSError as exc:
            print(f"trainer: cannot write GPUFLEET_FINISHED_FILE={env.finished_file} ({exc.strerror})",
                  file=sys.stderr)
    run.on_exit("finished")
    if env.writer:  # one line per gang: every rank ends at the same loss
        print(f"final loss {loss!r}", flush=True)
    return 0
