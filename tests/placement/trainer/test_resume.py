"""The restore drill: killed with SIGTERM at a random step, the trainer writes an emergency checkpoint, exits
with the retry code (never 0), and a restarted run resumes to the same final loss as an uninterrupted one;
against a local directory and against a real moto_server S3 endpoint."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT, base_env, trainer

STEPS = 300
SEED = 7


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The last stdout line of a run that is never interrupted (no checkpoint home)."""
    cfg = tmp_path_factory.mktemp("cfg") / "model.yaml"
    from .conftest import SMALL

    cfg.write_text(SMALL, encoding="utf-8")
    proc = trainer("--steps", str(STEPS), "--seed", str(SEED), "--config", str(cfg), env=base_env())
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()[-1]


def sigterm_at(step: int, args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    """Run the trainer, send SIGTERM once it reports ``step``; (exit code, stdout, stderr)."""
    proc = subprocess.Popen([sys.executable, "-m", "placement.trainer", *args, "--log-every", "1"], env=env,
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if line.startswith("trainer: step ") and int(line.split()[2]) >= step:
            proc.send_signal(signal.SIGTERM)
            break
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, "".join(seen) + err


def drill(home: str, extra_env: dict[str, str], cfg: Path, final: str, every: int = 25) -> None:
    step = random.randrange(5, 120)
    env = base_env(GPUFLEET_CHECKPOINT_DIR=home, GPUFLEET_RETRY_EXIT_CODE="75", GPUFLEET_GRACE_SECONDS="30",
                   **extra_env)
    args = ["--steps", str(STEPS), "--seed", str(SEED), "--config", str(cfg), "--checkpoint-every", str(every)]
    rc, out, err = sigterm_at(step, args, env)
    assert rc == 75, f"SIGTERM at step {step}: exit {rc}\n{err[-2000:]}"
    assert "final loss" not in out
    stopped = next(line for line in err.splitlines() if "SIGTERM at step" in line)
    assert "durable" in stopped, stopped
    stopped_at = int(stopped.split("SIGTERM at step ")[1].split(":")[0])
    last = out.splitlines()[-1]
    # An emergency checkpoint, unless the interval checkpoint of that very step was already durable (no second write).
    assert last.startswith(f"checkpoint step {stopped_at} (emergency)") or (
        stopped_at % every == 0 and last.startswith(f"checkpoint step {stopped_at} (interval)")), last

    resumed = trainer(*args, env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed from {home}/step-{stopped_at:010d} at step {stopped_at}" in resumed.stderr
    assert resumed.stdout.splitlines()[-1] == final, f"SIGTERM at step {step} (stopped at {stopped_at})"


def test_sigterm_then_resume_on_a_local_directory(tmp_path: Path, small_config: Path, uninterrupted: str) -> None:
    drill(str(tmp_path / "home"), {}, small_config, uninterrupted)


def test_sigterm_then_resume_on_s3(moto_s3: dict[str, str], small_config: Path, uninterrupted: str,
                                   tmp_path: Path) -> None:
    home = f"s3://ckpt/{tmp_path.name}"
    drill(home, moto_s3, small_config, uninterrupted, every=60)  # fewer requests: moto is slow when loaded
    import boto3

    s3 = boto3.client("s3", endpoint_url=moto_s3["AWS_ENDPOINT_URL"], region_name="us-east-1",
                      aws_access_key_id="testing", aws_secret_access_key="testing")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="ckpt", Prefix=f"{tmp_path.name}/")["Contents"]]
    assert f"{tmp_path.name}/step-{STEPS:010d}/manifest.json" in keys
    assert f"{tmp_path.name}/gpufleet-finished.json" in keys
    # keeps the last 3 (the default): no more manifests than that
    assert sum(k.endswith("/manifest.json") for k in keys) == 3


def test_a_torn_checkpoint_is_skipped_and_the_rerun_ends_the_same(tmp_path: Path, small_config: Path) -> None:
    """A finished run's newest checkpoint loses its manifest (torn): the rerun resumes from the one before,
    ends with the same final loss, and exits 0."""
    home = tmp_path / "home"
    env = base_env(GPUFLEET_CHECKPOINT_DIR=str(home))
    args = ["--steps", "40", "--config", str(small_config), "--checkpoint-every", "10"]
    first = trainer(*args, env=env)
    assert first.returncode == 0
    assert first.stdout.splitlines()[-1].startswith("final loss ")
    assert [line.split()[2] for line in first.stdout.splitlines()[:-1]] == ["10", "20", "30", "40"]
    (home / "step-0000000040" / "manifest.json").unlink()
    again = trainer(*args, env=env)
    assert again.returncode == 0
    assert f"resumed from {home}/step-0000000030 at step 30" in again.stderr
    assert again.stdout.splitlines()[-1] == first.stdout.splitlines()[-1]


def test_an_unreachable_store_at_start_is_the_retry_code(small_config: Path) -> None:
    """S3 that does not answer (nothing listens on the endpoint): restart later, never start over from 0."""
    from .conftest import free_port

    env = base_env(GPUFLEET_CHECKPOINT_DIR="s3://ckpt/job", AWS_ENDPOINT_URL=f"http://127.0.0.1:{free_port()}",
                   AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1",
                   AWS_MAX_ATTEMPTS="1", AWS_RETRY_MODE="standard")
    proc = trainer("--steps", "10", "--config", str(small_config), env=env)
    assert proc.returncode == 75, proc.stderr
    assert "cannot read s3://ckpt/job" in proc.stderr and "Traceback" not in proc.stderr


def test_a_checkpoint_of_another_model_is_one_line_and_exit_2(tmp_path: Path, small_config: Path) -> None:
    env = base_env(GPUFLEET_CHECKPOINT_DIR=str(tmp_path / "home"))
    assert trainer("--steps", "5", "--config", str(small_config), env=env).returncode == 0
    wider = tmp_path / "wider.yaml"
    wider.write_text(small_config.read_text(encoding="utf-8").replace("hidden: 16", "hidden: 24"), encoding="utf-8")
    proc = trainer("--steps", "10", "--config", str(wider), env=env)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if not line.startswith("trainer: resumed")]
    assert len(lines) == 1 and "does not fit this model" in lines[0] and "Traceback" not in proc.stderr


def test_the_cache_is_synced_to_the_home_and_a_new_node_resumes_from_the_home(tmp_path: Path,
                                                                                small_config: Path) -> None:
    import shutil

    home, cache = tmp_path / "home", tmp_path / "cache"
    env = base_env(GPUFLEET_CHECKPOINT_DIR=str(home), GPUFLEET_CHECKPOINT_CACHE_DIR=str(cache),
                   GPUFLEET_CHECKPOINT_KEEP="2")
    args = ["--config", str(small_config), "--checkpoint-every", "10"]
    first = trainer("--steps", "30", *args, env=env)
    assert first.returncode == 0, first.stderr
    for root in (home, cache):
        assert sorted(p.name for p in root.glob("step-*")) == ["step-0000000020", "step-0000000030"]
    shutil.rmtree(cache)  # the pod lands on another node: its local cache is gone
    more = trainer("--steps", "40", *args, env=env)
    assert more.returncode == 0
    assert f"resumed from {home}/step-0000000030 at step 30" in more.stderr
    whole = trainer("--steps", "40", "--config", str(small_config), env=base_env())
    assert more.stdout.splitlines()[-1] == whole.stdout.splitlines()[-1]
