"""What a user types or another process leaves behind never crashes, hangs, overwrites or deletes (issue 38): the
trainer and the launcher on bad values, a file where the home belongs, another job's home, another seed, a
malformed manifest, a FIFO among the peers' heartbeats, two quick SIGTERMs, a missing extra."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import ROOT, base_env, free_port, trainer

LAUNCH = [sys.executable, "-m", "placement.trainer.launch", "--"]


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


@pytest.mark.parametrize(("env", "name"), [
    ({"GPUFLEET_GRACE_SECONDS": "1e300"}, "GPUFLEET_GRACE_SECONDS"),
    ({"GPUFLEET_PEER_TIMEOUT_SECONDS": "1e300"}, "GPUFLEET_PEER_TIMEOUT_SECONDS"),
    ({"GPUFLEET_RETRY_EXIT_CODE": "7" * 5000}, "GPUFLEET_RETRY_EXIT_CODE"),
    ({"GPUFLEET_RETRY_EXIT_CODE": "x" * 5000}, "GPUFLEET_RETRY_EXIT_CODE"),
    ({"RANK": "2", "WORLD_SIZE": "2"}, "RANK"),
    ({"GPUFLEET_FINISHED_FILE": "/nonexistent-gpufleet/finished"}, "GPUFLEET_FINISHED_FILE"),
    ({"GPUFLEET_METRICS_PORT": "0", "GPUFLEET_METRICS_ADDR": "no-such-host.invalid"}, "GPUFLEET_METRICS_ADDR"),
])
def test_bad_values_are_one_short_line_and_exit_2(tmp_path: Path, small_config: Path, env: dict[str, str],
                                                  name: str) -> None:
    if name == "GPUFLEET_METRICS_ADDR":
        env = {**env, "GPUFLEET_METRICS_PORT": str(free_port())}
    home = tmp_path / "home"
    proc = trainer("--steps", "3", "--config", str(small_config),
                   env=base_env(GPUFLEET_CHECKPOINT_DIR=str(home), **env))
    assert proc.returncode == 2
    line = one_line(proc.stderr)
    assert name in line and len(line) < 400
    if name == "GPUFLEET_METRICS_ADDR":
        assert "PORT" not in line
    assert not home.exists()  # nothing half-written


def test_a_file_where_the_home_belongs_fails_at_start(tmp_path: Path, small_config: Path) -> None:
    home = tmp_path / "home"
    home.write_text("the user's file", encoding="utf-8")
    proc = trainer("--steps", "100000", "--config", str(small_config), "--checkpoint-every", "10",
                   env=base_env(GPUFLEET_CHECKPOINT_DIR=str(home)), timeout=60)
    assert proc.returncode == 2 and "GPUFLEET_CHECKPOINT_DIR" in one_line(proc.stderr)
    assert home.read_text(encoding="utf-8") == "the user's file"


def test_another_job_on_the_same_home_is_refused_and_a_seed_change_too(tmp_path: Path, small_config: Path) -> None:
    home = tmp_path / "home"
    args = ["--steps", "20", "--config", str(small_config), "--checkpoint-every", "10"]
    first = trainer(*args, env=base_env(GPUFLEET_CHECKPOINT_DIR=str(home), GPUFLEET_JOB="job-a"))
    assert first.returncode == 0, first.stderr
    before = {p: p.read_bytes() for p in home.rglob("*") if p.is_file()}
    other = trainer(*args, env=base_env(GPUFLEET_CHECKPOINT_DIR=str(home), GPUFLEET_JOB="job-b"))
    assert other.returncode == 2 and "job-a" in one_line(other.stderr)
    assert {p: p.read_bytes() for p in home.rglob("*") if p.is_file()} == before
    reseeded = trainer(*args[:2], "--seed", "1", *args[2:],
                       env=base_env(GPUFLEET_CHECKPOINT_DIR=str(home), GPUFLEET_JOB="job-a"))
    assert reseeded.returncode == 2 and "--seed" in one_line(reseeded.stderr)


def test_a_malformed_manifest_field_falls_back_to_the_previous_checkpoint(tmp_path: Path,
                                                                        small_config: Path) -> None:
    home = tmp_path / "home"
    env = base_env(GPUFLEET_CHECKPOINT_DIR=str(home))
    args = ["--config", str(small_config), "--checkpoint-every", "10"]
    assert trainer("--steps", "20", *args, env=env).returncode == 0
    manifest = home / "step-0000000020" / "manifest.json"
    doc = json.loads(manifest.read_text(encoding="utf-8"))
    doc["state"]["loss"] = "low"
    manifest.write_text(json.dumps(doc), encoding="utf-8")
    again = trainer("--steps", "30", *args, env=env)
    assert again.returncode == 0 and "Traceback" not in again.stderr
    assert "resumed from" in again.stderr and "step-0000000010" in again.stderr


def test_a_fifo_among_the_peers_heartbeats_does_not_block(tmp_path: Path, small_config: Path) -> None:
    home = tmp_path / "home"
    (home / "_peers").mkdir(parents=True)
    os.mkfifo(home / "_peers" / "rank-1.json")
    env = base_env(GPUFLEET_CHECKPOINT_DIR=str(home), NNODES="2", NODE_RANK="0", GPUFLEET_PEER_TIMEOUT_SECONDS="1")
    proc = trainer("--steps", "100000000", "--config", str(small_config), env=env, timeout=60)
    assert proc.returncode == 75 and "rank 1" in proc.stderr


def _handles_sigterm(pid: int) -> bool:
    for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    return False


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc to know the handler is in")
def test_two_sigterms_50_ms_apart_while_starting_still_exit_75(tmp_path: Path, small_config: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "placement.trainer", "--steps", "100000", "--config",
                             str(small_config)], env=base_env(GPUFLEET_CHECKPOINT_DIR=str(tmp_path / "home")),
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not _handles_sigterm(proc.pid):  # as soon as the handler is in: before NumPy and the model load
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.005)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 75, err


def test_without_the_trainer_extra_one_line_names_the_command(tmp_path: Path) -> None:
    code = ("import sys, runpy; sys.modules['numpy'] = None; sys.argv = ['placement.trainer', '--steps', '1']; "
            "runpy.run_module('placement.trainer', run_name='__main__', alter_sys=True)")
    proc = subprocess.run([sys.executable, "-c", code], env=base_env(), cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2
    line = one_line(proc.stderr)
    assert "trainer extra" in line and line.endswith("scripts/extra trainer")  # the README's one command


def test_the_trainer_sets_one_blas_thread_unless_the_user_set_them(monkeypatch: pytest.MonkeyPatch) -> None:
    from placement.trainer import cli
    from placement.trainer.settings import BLAS_THREAD_VARS

    for name in BLAS_THREAD_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MKL_NUM_THREADS", "4")
    monkeypatch.setenv("GPUFLEET_METRICS_PORT", "0")
    assert cli.run(["--benchmark", "--steps", "1"]) == 0
    assert {n: os.environ[n] for n in BLAS_THREAD_VARS} == {n: "4" if n == "MKL_NUM_THREADS" else "1"
                                                             for n in BLAS_THREAD_VARS}


# ---- the launcher


def test_launcher_bad_commands_and_values_are_one_line(tmp_path: Path) -> None:
    script = tmp_path / "no-shebang"
    script.write_bytes(b"\x7fELF-not-really")
    script.chmod(0o755)
    cases = [
        (LAUNCH + [str(script)], {}, 126, "no-shebang"),
        (LAUNCH + ["true"], {"GPUFLEET_FINISHED_FILE": "/nonexistent-gpufleet/finished"}, 2, "GPUFLEET_FINISHED_FILE"),
        (LAUNCH + ["true"], {"GPUFLEET_RETRY_EXIT_CODE": "9" * 5000}, 2, "GPUFLEET_RETRY_EXIT_CODE"),
        (LAUNCH + ["true"], {"GPUFLEET_GRACE_SECONDS": "1e400"}, 2, "GPUFLEET_GRACE_SECONDS"),
    ]
    for argv, env, code, name in cases:
        proc = subprocess.run(argv, env=base_env(**env), cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert proc.returncode == code, (argv[-1], proc.stderr)
        line = one_line(proc.stderr)
        assert name in line and len(line) < 400


@pytest.mark.parametrize("grace", ["1", "0.4", "0"])
def test_a_short_grace_period_still_kills_a_command_that_ignores_sigterm(grace: str) -> None:
    proc = subprocess.Popen(LAUNCH + ["bash", "-c", "trap '' TERM; echo ready; while :; do sleep 0.05; done"],
                            env=base_env(GPUFLEET_GRACE_SECONDS=grace), cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    t = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    assert proc.returncode == 75 and time.monotonic() - t < float(grace) + 2


def test_a_lost_peer_among_local_ranks_is_the_retry_code_and_a_bug_is_not(tmp_path: Path) -> None:
    """Two processes under the launcher (as torchrun's workers would be): one dies by kill -9 (no outcome) or
    fails with a bug, the other exits with the retry code (as after torchrun's SIGTERM); the command exits 1."""
    worker = tmp_path / "worker.py"
    worker.write_text(
        "import os, sys, signal\n"
        "from placement.trainer.outcome import Recorder\n"
        "rank = int(sys.argv[1]); rec = Recorder(os.environ['GPUFLEET_OUTCOME_DIR'], rank, rank, 2)\n"
        "rec.write('running')\n"
        "if rank == 1 and sys.argv[2] == 'kill': os.kill(os.getpid(), signal.SIGKILL)\n"
        "if rank == 1: rec.ended(1, 75); sys.exit(1)\n"
        "rec.ended(75, 75); sys.exit(75)\n", encoding="utf-8")
    for how, code in (("kill", 75), ("bug", 1)):
        script = (f"{sys.executable} {worker} 0 {how}; {sys.executable} {worker} 1 {how}; exit 1")
        proc = subprocess.run(LAUNCH + ["bash", "-c", script], env=base_env(), cwd=ROOT, capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == code, (how, proc.stderr)
        assert "rank 1" in proc.stderr
