"""The torch tier: the reference trainer under the launcher and real ``torchrun`` on loopback (gloo, CPU), with
2 local ranks and as 2 "nodes" of 2 ranks (two torchruns, one rendezvous), from ``.venv-torch``
(scripts/torch_env: torch==2.13.0, the CPU wheel, and the trainer extra's pins from uv.lock).

One chain of runs on one checkpoint home, each resuming where the previous one stopped, so every interrupted
run is checked against the trajectory of one uninterrupted run (the loss of every step): a full run (exit 0,
one writer, one ``final loss``, the default metrics port); SIGTERM to the launcher (75 within the grace
period); ``kill -9`` of a rank (75); SIGSTOP of a rank (75 within the peer timeout plus the grace period);
SIGTERM as the final checkpoint is written (0 with the final loss, or 75 and a rerun that finishes). Then two
nodes: SIGTERM to one node's launcher (both 75), and a resume to the end (both 0, one ``final loss``).

Skipped, naming the reason, only where torch cannot be installed (scripts/torch_env wrote
.venv-torch/UNAVAILABLE); with GPUFLEET_TORCH_TIER=required (what .ci/run sets) a missing .venv-torch fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import ROOT, base_env, free_port

VENV = ROOT / ".venv-torch"
PY = VENV / "bin" / "python"
TORCHRUN = VENV / "bin" / "torchrun"
STEPS = 40
GRACE_S = 8.0
PEER_TIMEOUT_S = 4.0
CONFIG = "hidden: 16\nlayers: 1\nseq_len: 8\nbatch: 4\nvocab: 32\nlr: 0.02\n"
STEP_LINE = re.compile(r"^trainer: step (\d+) loss (\S+)$")
RANK_LINE = re.compile(r"^trainer: rank (\d+) of \d+ .*pid (\d+)$")


def _torch_or_skip() -> None:
    unavailable = VENV / "UNAVAILABLE"
    if unavailable.exists():
        pytest.skip(f"torch cannot be installed here: {unavailable.read_text(encoding='utf-8').strip()}")
    if not TORCHRUN.exists():
        if os.environ.get("GPUFLEET_TORCH_TIER") == "required":
            pytest.fail("no .venv-torch: run scripts/torch_env (.ci/run does)")
        pytest.skip("no .venv-torch: run scripts/torch_env to set the torch tier up")


class Node:
    """One node: ``python -m placement.trainer.launch -- torchrun --nproc-per-node=2 -m placement.trainer``,
    its stderr read on a thread (lines with the seconds since start)."""

    def __init__(self, home: Path, cfg: Path, port: int, *, node_rank: int = 0, nodes: int = 1,
                 steps: int = STEPS, metrics: bool = False) -> None:
        env = base_env(GPUFLEET_CHECKPOINT_DIR=str(home), GPUFLEET_GRACE_SECONDS=f"{GRACE_S:g}",
                       GPUFLEET_PEER_TIMEOUT_SECONDS=f"{PEER_TIMEOUT_S:g}", GPUFLEET_JOB="torch-tier")
        if metrics:
            env.pop("GPUFLEET_METRICS_PORT")  # the default, 9400, for both local ranks
        cmd = [str(PY), "-m", "placement.trainer.launch", "--", str(TORCHRUN), f"--nnodes={nodes}",
               "--nproc-per-node=2", f"--node-rank={node_rank}", "--master-addr=127.0.0.1", f"--master-port={port}",
               "-m", "placement.trainer", "--backend", "torch", "--steps", str(steps), "--config", str(cfg),
               "--checkpoint-every", "10", "--log-every", "1"]
        self.start = time.monotonic()
        self.proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, start_new_session=True)
        self.lines: list[str] = []
        self.pids: dict[int, int] = {}
        self.losses: dict[int, str] = {}
        self._seen = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.out = ""

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.rstrip("\n")
            with self._seen:
                self.lines.append(line)
                if m := RANK_LINE.match(line):
                    self.pids[int(m.group(1))] = int(m.group(2))
                if m := STEP_LINE.match(line):
                    self.losses.setdefault(int(m.group(1)), m.group(2))
                self._seen.notify_all()

    def wait_step(self, step: int, timeout: float = 240) -> None:
        with self._seen:
            ok = self._seen.wait_for(lambda: max(self.losses, default=-1) >= step or self.proc.poll() is not None,
                                     timeout)
        assert ok and max(self.losses, default=-1) >= step, f"no step {step}:\n" + "\n".join(self.lines[-30:])

    def finish(self, timeout: float = 240) -> tuple[int, float]:
        """(exit code, seconds from now to the exit)."""
        t = time.monotonic()
        assert self.proc.stdout is not None
        self.out = self.proc.stdout.read() if self.proc.wait(timeout) is not None else ""
        self._reader.join(10)
        return self.proc.returncode, time.monotonic() - t

    def signal_rank(self, rank: int, sig: int) -> None:
        with self._seen:
            assert self._seen.wait_for(lambda: rank in self.pids, 60)
        os.kill(self.pids[rank], sig)

    def kill(self) -> None:
        for pid in self.pids.values():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            self.proc.wait(10)

    @property
    def text(self) -> str:
        return "\n".join(self.lines[-40:]) + "\n" + self.out


@pytest.fixture
def nodes() -> Iterator[list[Node]]:
    started: list[Node] = []
    yield started
    for node in started:
        node.kill()


def _same_trajectory(node: Node, reference: dict[int, str]) -> None:
    assert node.losses, node.text
    assert {s: node.losses[s] for s in node.losses} == {s: reference[s] for s in node.losses}, \
        "a resumed run left the uninterrupted run's loss trajectory"


def test_torchrun_two_local_ranks_and_two_nodes(tmp_path: Path, nodes: list[Node]) -> None:
    _torch_or_skip()
    cfg = tmp_path / "model.yaml"
    cfg.write_text(CONFIG, encoding="utf-8")

    # A full run: exit 0, one writer, one final loss, both ranks on the default metrics port.
    full = Node(tmp_path / "full", cfg, free_port(), metrics=True)
    nodes.append(full)
    rc, _ = full.finish()
    assert rc == 0, full.text
    assert [line for line in full.out.splitlines() if line.startswith("final loss ")] == \
        [full.out.splitlines()[-1]], full.text
    written = [line for line in full.out.splitlines() if line.startswith("checkpoint step ")]
    assert [line.split()[2] for line in written] == ["10", "20", "30", str(STEPS)], full.text
    assert "Traceback" not in "\n".join(full.lines)
    reference, final = dict(full.losses), full.out.splitlines()[-1]
    assert sorted(reference) == list(range(1, STEPS + 1))
    claims = [json.loads((p / ".gpufleet-claim").read_text()) for p in (tmp_path / "full").glob("step-*")]
    assert claims and all(c["job"] == "torch-tier" for c in claims)

    home = tmp_path / "home"
    # SIGTERM to the launcher: 75 within the grace period, an emergency checkpoint of the step it stopped at.
    term = Node(home, cfg, free_port())
    nodes.append(term)
    term.wait_step(12)
    term.proc.send_signal(signal.SIGTERM)
    rc, took = term.finish()
    assert rc == 75 and took < GRACE_S + 2, (rc, took, term.text)
    assert "final loss" not in term.out
    _same_trajectory(term, reference)

    # kill -9 of a rank: the run resumes on the same trajectory, then the survivor and the launcher say 75.
    killed = Node(home, cfg, free_port())
    nodes.append(killed)
    killed.wait_step(20)
    killed.signal_rank(1, signal.SIGKILL)
    rc, took = killed.finish()
    assert rc == 75, killed.text
    assert any("resumed from" in line for line in killed.lines), killed.text
    _same_trajectory(killed, reference)

    # SIGSTOP of a rank: the other's collective times out; the gang ends within the peer timeout + grace.
    stopped = Node(home, cfg, free_port())
    nodes.append(stopped)
    stopped.wait_step(25)
    stopped.signal_rank(1, signal.SIGSTOP)
    rc, took = stopped.finish()
    assert rc == 75 and took < PEER_TIMEOUT_S + GRACE_S + 4, (rc, took, stopped.text)
    _same_trajectory(stopped, reference)

    # SIGTERM as the final step's checkpoint is written: a durable final checkpoint is a finish (0, the
    # uninterrupted run's final loss); one that is not is a retry, and the rerun finishes.
    last = Node(home, cfg, free_port())
    nodes.append(last)
    last.wait_step(STEPS)
    last.proc.send_signal(signal.SIGTERM)
    rc, _ = last.finish()
    _same_trajectory(last, reference)
    if rc == 75:
        assert "final loss" not in last.out
        last = Node(home, cfg, free_port())
        nodes.append(last)
        rc, _ = last.finish()
    assert rc == 0 and last.out.splitlines()[-1] == final, last.text

    # Two nodes of two ranks: SIGTERM to node 1's launcher ends both with 75; then both resume to the end.
    home2 = tmp_path / "home2"
    port = free_port()
    pair = [Node(home2, cfg, port, node_rank=r, nodes=2) for r in (0, 1)]
    nodes.extend(pair)
    pair[0].wait_step(8)
    pair[1].proc.send_signal(signal.SIGTERM)
    codes = [node.finish()[0] for node in pair]
    assert codes == [75, 75], "\n---\n".join(node.text for node in pair)
    port = free_port()
    pair = [Node(home2, cfg, port, node_rank=r, nodes=2) for r in (0, 1)]
    nodes.extend(pair)
    codes = [node.finish()[0] for node in pair]
    assert codes == [0, 0], "\n---\n".join(node.text for node in pair)
    finals = [line for node in pair for line in node.out.splitlines() if line.startswith("final loss ")]
    assert len(finals) == 1, finals
    assert any("resumed from" in line for line in pair[0].lines)
