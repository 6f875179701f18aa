"""Fixtures for the reference trainer's tests: its environment, a runner, and a real moto_server S3 endpoint
on loopback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
# A small model: a step takes a millisecond or two, so a run of hundreds of steps takes about a second.
SMALL = "hidden: 16\nlayers: 1\nseq_len: 8\nbatch: 4\nvocab: 32\nlr: 0.02\n"


def base_env(**extra: str) -> dict[str, str]:
    """The trainer's environment: no GPUFLEET_* from the caller, metrics off, one BLAS thread (a loaded
    2-core machine runs multi-threaded BLAS tens of times slower), only loopback."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUFLEET_", "AWS_", "NNODES", "NODE_RANK"))}
    env.update({"PYTHONPATH": str(ROOT), "GPUFLEET_METRICS_PORT": "0", "OPENBLAS_NUM_THREADS": "1",
                "OMP_NUM_THREADS": "1", "GPUFLEET_CHECKPOINT_INTERVAL_SECONDS": "3600", "NO_PROXY": "*"})
    env.update(extra)
    return env


@pytest.fixture
def small_config(tmp_path: Path) -> Path:
    path = tmp_path / "model.yaml"
    path.write_text(SMALL, encoding="utf-8")
    return path


def trainer(*args: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "placement.trainer", *args], env=env, capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT, check=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def moto_s3() -> Iterator[dict[str, str]]:
    """A real ``moto_server`` process on 127.0.0.1 with an empty bucket ``ckpt``; yields the AWS_* variables
    that point boto3/s3fs at it."""
    import boto3

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    env = {"AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1"}
    s3 = boto3.client("s3", endpoint_url=url, region_name="us-east-1", aws_access_key_id="testing",
                      aws_secret_access_key="testing")
    deadline = time.monotonic() + 30
    while True:
        try:
            s3.create_bucket(Bucket="ckpt")
            break
        except Exception:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise
            time.sleep(0.2)
    yield env
    proc.terminate()
    proc.wait(10)
