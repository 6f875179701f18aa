"""The launcher: an exit 0 that follows a SIGTERM without the trainer's finished marker becomes the retry
code; a real finish, and every other code, pass through; SIGTERM reaches the command."""

from __future__ import annotations

import importlib.util
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

from .conftest import ROOT, base_env

# A user's trainer in shell: says it is ready, then waits; `trap` decides what SIGTERM does.
TRAINER = """
trap '{on_term}' TERM
echo ready
i=0
while [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done
{at_end}
"""


def launch(script: str, *, term: bool, env: dict[str, str] | None = None) -> tuple[int, str]:
    proc = subprocess.Popen([sys.executable, "-m", "placement.trainer.launch", "--", "bash", "-c", script],
                            env=env or base_env(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    if term:
        proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, err


def test_exit_0_after_sigterm_without_the_marker_is_the_retry_code() -> None:
    rc, err = launch(TRAINER.format(on_term="exit 0", at_end="exit 0"), term=True)
    assert rc == 75
    assert len([line for line in err.splitlines() if line.startswith("launch:")]) == 1


def test_the_retry_code_comes_from_the_environment() -> None:
    rc, _ = launch(TRAINER.format(on_term="exit 0", at_end="exit 0"), term=True,
                   env=base_env(GPUFLEET_RETRY_EXIT_CODE="42"))
    assert rc == 42


def test_a_real_finish_after_sigterm_passes_through() -> None:
    script = TRAINER.format(on_term='echo done > "$GPUFLEET_FINISHED_FILE"; exit 0', at_end="exit 0")
    rc, err = launch(script, term=True)
    assert rc == 0 and "launch:" not in err


def test_exit_0_without_sigterm_passes_through() -> None:
    proc = subprocess.run([sys.executable, "-m", "placement.trainer.launch", "--", "true"], env=base_env(),
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stderr == ""


@pytest.mark.parametrize("code", [1, 3, 75, 137])
def test_after_sigterm_any_code_is_the_retry_code_and_without_it_codes_pass_through(code: int) -> None:
    """torchrun exits 1 on SIGTERM: after a SIGTERM the launcher exits the retry code whatever the command's."""
    rc, _ = launch(TRAINER.format(on_term=f"exit {code}", at_end="exit 0"), term=True)
    assert rc == 75
    proc = subprocess.run([sys.executable, "-m", "placement.trainer.launch", "--", "bash", "-c", f"exit {code}"],
                          env=base_env(), cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == code


def test_a_command_killed_by_the_sigterm_is_the_retry_code() -> None:
    rc, _ = launch("echo ready; exec sleep 30", term=True)
    assert rc == 75


def test_a_command_still_running_at_the_end_of_the_grace_period_is_killed() -> None:
    start = time.monotonic()
    rc, err = launch(TRAINER.format(on_term="", at_end="exit 0"), term=True,
                     env=base_env(GPUFLEET_GRACE_SECONDS="2"))
    assert rc == 75 and "killing" in err
    assert time.monotonic() - start < 20


def test_the_reference_trainer_under_the_launcher(tmp_path: Path, small_config: Path) -> None:
    """The trainer writes the launcher's marker after its final step; SIGTERM mid-run still retries."""
    env = base_env(GPUFLEET_CHECKPOINT_DIR=str(tmp_path / "home"))
    args = [sys.executable, "-m", "placement.trainer.launch", "--", sys.executable, "-m", "placement.trainer",
            "--config", str(small_config)]
    done = subprocess.run([*args, "--steps", "20"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.splitlines()[-1].startswith("final loss ")
    proc = subprocess.Popen([*args, "--steps", "100000", "--log-every", "1"], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.startswith("trainer: step 30"):
            break
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 75


def test_usage_errors_exit_2_with_one_line() -> None:
    for argv, code in ((["--"], 2), (["--", "no-such-command-gpufleet"], 127)):
        proc = subprocess.run([sys.executable, "-m", "placement.trainer.launch", *argv], env=base_env(),
                              cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert proc.returncode == code
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "placement.trainer.launch", "--", "true"],
                          env=base_env(GPUFLEET_RETRY_EXIT_CODE="0"), cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2 and "GPUFLEET_RETRY_EXIT_CODE" in proc.stderr


def _k8s_rules() -> ModuleType:
    """The Job and JobSet controllers' rule matching, re-implemented from their sources in
    tests/placement/fleet/test_manifests.py (loaded by path: the tests' folder is not a package)."""
    path = ROOT / "tests" / "placement" / "fleet" / "test_manifests.py"
    spec = importlib.util.spec_from_file_location("k8s_rules_of_test_manifests", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_launchers_real_exit_codes_under_the_rendered_failure_policies(tmp_path: Path) -> None:
    """The launcher's codes for a drain, a lost peer, a bug and a finish, judged by the pod failure policy and
    the JobSet failure policy that submit renders: the first two restart the gang (counted), a bug fails the
    job at once, a finish is no failure."""
    from placement.fleet import manifests as m

    k8s = _k8s_rules()
    worker = tmp_path / "worker.py"
    worker.write_text(
        "import os, sys, signal\n"
        "from placement.trainer.outcome import Recorder\n"
        "rank, how = int(sys.argv[1]), sys.argv[2]\n"
        "rec = Recorder(os.environ['GPUFLEET_OUTCOME_DIR'], rank, rank, 2)\n"
        "rec.write('running')\n"
        "if how == 'finish': rec.ended(0, 75); sys.exit(0)\n"
        "if rank == 1 and how == 'kill': os.kill(os.getpid(), signal.SIGKILL)\n"
        "if rank == 1 and how == 'bug': rec.ended(1, 75); sys.exit(1)\n"
        "rec.ended(75, 75); sys.exit(75)\n", encoding="utf-8")

    def launcher(how: str, term: bool = False) -> int:
        # as torchrun: both workers, then exit 1 when either failed
        script = (f"echo ready; {sys.executable} {worker} 0 {how} & a=$!; {sys.executable} {worker} 1 {how}; b=$?; "
                  f"wait $a; a=$?; [ $a = 0 ] && [ $b = 0 ] || exit 1")
        if term:
            script = "trap 'exit 1' TERM; echo ready; sleep 30 & wait"
        rc, _ = launch(script, term=term)
        return rc

    codes = {"drain": launcher("", term=True), "lost peer": launcher("kill"), "bug": launcher("bug"),
             "finish": launcher("finish")}
    assert codes == {"drain": m.RETRY_EXIT_CODE, "lost peer": m.RETRY_EXIT_CODE, "bug": 1, "finish": 0}
    gang_job = {"podFailurePolicy": m.pod_failure_policy(gang=True), "backoffLimit": 0}
    one_node = {"podFailurePolicy": m.pod_failure_policy(gang=False), "backoffLimit": 3}
    jobset = m.jobset_failure_policy(3)
    for what, code in codes.items():
        pod = {"containers": [{"name": m.CONTAINER, "exitCode": code}]}
        if code == 0:  # a Succeeded pod: no failure policy looks at it
            continue
        gang = k8s.jobset_action(jobset, k8s.job_reason(gang_job, [pod]) or "")
        single = k8s.job_reason(one_node, [pod])
        if what == "bug":
            assert (gang, single) == ("FailJobSet", "PodFailurePolicy"), what
        else:
            assert (gang, single) == ("RestartJobSet", None), what  # restarted; one node: counted, replaced
