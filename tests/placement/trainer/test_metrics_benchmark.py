"""The trainer's Prometheus metrics (names and labels of the shared interface), its benchmark mode's JSON
line, bad input, a lost peer, and the PyTorch backend where it is installed."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from .conftest import ROOT, base_env, free_port, trainer

LABELS = {"job", "team", "workload", "accelerator", "nodes", "gpus", "rank"}
METRICS = {
    "gpufleet_trainer_samples_total": LABELS, "gpufleet_trainer_tokens_total": LABELS,
    "gpufleet_trainer_step_seconds_bucket": LABELS | {"le"}, "gpufleet_trainer_step": LABELS,
    "gpufleet_trainer_checkpoint_write_seconds_bucket": LABELS | {"destination", "tier", "le"},
    "gpufleet_trainer_checkpoint_bytes": LABELS | {"destination", "tier"},
    "gpufleet_trainer_last_checkpoint_step": LABELS | {"destination", "tier"},
}
JOB_ENV = {"GPUFLEET_JOB": "llama-ft", "GPUFLEET_TEAM": "research", "GPUFLEET_WORKLOAD": "llm",
           "GPUFLEET_ACCELERATOR": "H100", "GPUFLEET_NODES": "1", "GPUFLEET_GPUS_PER_NODE": "8",
           "GPUFLEET_CHECKPOINT_DESTINATION": "fsx", "GPUFLEET_CHECKPOINT_TIER": "250"}


def scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def test_metrics_have_the_shared_names_and_labels(tmp_path: Path, small_config: Path) -> None:
    port = free_port()
    env = base_env(GPUFLEET_METRICS_PORT=str(port), GPUFLEET_METRICS_ADDR="127.0.0.1",
                   GPUFLEET_CHECKPOINT_DIR=str(tmp_path / "home"), **JOB_ENV)
    proc = subprocess.Popen([sys.executable, "-m", "placement.trainer", "--steps", "1000000", "--config",
                             str(small_config), "--checkpoint-every", "10", "--log-every", "1"], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if line.startswith("trainer: step 25"):
                break
        deadline = time.monotonic() + 30
        while True:
            samples = scrape(port)
            if samples.get("gpufleet_trainer_last_checkpoint_step", [({}, 0.0)])[0][1] >= 10:
                break
            assert time.monotonic() < deadline, "no checkpoint metric within 30 s"
            time.sleep(0.2)
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    for name, labels in METRICS.items():
        assert name in samples, name
        for got, _ in samples[name]:
            assert set(got) == labels, name
            assert {k: got[k] for k in ("job", "team", "workload", "accelerator", "nodes", "gpus")} == {
                "job": "llama-ft", "team": "research", "workload": "llm", "accelerator": "H100", "nodes": "1",
                "gpus": "8"}
            if "destination" in labels:
                assert (got["destination"], got["tier"]) == ("fsx", "250")
    step = samples["gpufleet_trainer_step"][0][1]
    assert step >= 25
    # 4 sequences of 8 tokens per step (the small config)
    assert samples["gpufleet_trainer_samples_total"][0][1] >= 4 * 25
    assert samples["gpufleet_trainer_tokens_total"][0][1] == 8 * samples["gpufleet_trainer_samples_total"][0][1]
    assert samples["gpufleet_trainer_checkpoint_bytes"][0][1] > 0
    assert proc.returncode == 75


def test_local_ranks_share_one_port_and_say_which_rank(tmp_path: Path, small_config: Path) -> None:
    """Two processes of one node (torchrun's variables) on one metrics port: neither fails to start, local rank 0
    serves both, each series labelled with its rank."""
    port = free_port()
    procs = [subprocess.Popen([sys.executable, "-m", "placement.trainer", "--steps", "1000000", "--config",
                               str(small_config)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=base_env(GPUFLEET_METRICS_PORT=str(port), GPUFLEET_METRICS_ADDR="127.0.0.1",
                                           GPUFLEET_OUTCOME_DIR=str(tmp_path), RANK=str(r), WORLD_SIZE="2",
                                           LOCAL_RANK=str(r), LOCAL_WORLD_SIZE="2", **JOB_ENV))
             for r in (0, 1)]
    try:
        deadline = time.monotonic() + 60
        while True:
            assert all(p.poll() is None for p in procs), [p.communicate()[1] for p in procs]
            try:
                ranks = {got["rank"] for got, v in scrape(port).get("gpufleet_trainer_samples_total", []) if v > 0}
            except OSError:
                ranks = set()
            if ranks == {"0", "1"}:
                break
            assert time.monotonic() < deadline, f"ranks served: {ranks}"
            time.sleep(0.2)
    finally:
        for p in procs:
            p.terminate()
        errs = [p.communicate(timeout=60)[1] for p in procs]
    assert [p.returncode for p in procs] == [75, 75], errs


def test_benchmark_prints_the_json_line(tmp_path: Path, small_config: Path) -> None:
    home = tmp_path / "home"
    proc = trainer("--benchmark", "--steps", "20", "--config", str(small_config),
                   env=base_env(GPUFLEET_CHECKPOINT_DIR=str(home)))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout.splitlines()[-1])
    assert set(doc) == {"schema", "backend", "device", "accelerator", "gpus", "workload", "steps", "seconds",
                        "samples_per_s", "tokens_per_s", "per_gpu", "unit"}
    assert doc["schema"] == "gpufleet.trainer-benchmark/v1"
    assert (doc["backend"], doc["device"], doc["accelerator"], doc["gpus"]) == ("numpy", "cpu", "CPU", 1)
    assert (doc["workload"], doc["steps"], doc["unit"]) == ("llm", 20, "tokens/s")
    assert doc["seconds"] > 0 and doc["tokens_per_s"] == pytest.approx(doc["samples_per_s"] * 8, rel=1e-3)
    assert doc["per_gpu"] == pytest.approx(doc["tokens_per_s"], rel=1e-6)
    assert not home.exists()  # no checkpoints


def test_benchmark_of_a_vision_model_counts_samples(tmp_path: Path) -> None:
    cfg = tmp_path / "vision.yaml"
    cfg.write_text("workload: vision\nhidden: 8\nlayers: 1\nseq_len: 4\nbatch: 2\nvocab: 16\n", encoding="utf-8")
    proc = trainer("--benchmark", "--steps", "5", "--config", str(cfg), env=base_env())
    doc = json.loads(proc.stdout.splitlines()[-1])
    assert (doc["workload"], doc["unit"]) == ("vision", "samples/s")
    assert doc["per_gpu"] == pytest.approx(doc["samples_per_s"], rel=1e-6)


@pytest.mark.parametrize(("args", "env", "names"), [
    ([], {"GPUFLEET_RETRY_EXIT_CODE": "0"}, "GPUFLEET_RETRY_EXIT_CODE"),
    ([], {"GPUFLEET_GRACE_SECONDS": "soon"}, "GPUFLEET_GRACE_SECONDS"),
    ([], {"GPUFLEET_WORKLOAD": "chess"}, "GPUFLEET_WORKLOAD"),
    ([], {"GPUFLEET_CHECKPOINT_KEEP": "0"}, "GPUFLEET_CHECKPOINT_KEEP"),
    (["--config", "CFG"], {}, "layer"),
    (["--checkpoint-every", "0"], {}, "--checkpoint-every"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], env: dict[str, str],
                                          names: str) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("layer: 3\n", encoding="utf-8")
    args = [str(cfg) if a == "CFG" else a for a in args]
    home = tmp_path / "home"
    proc = trainer("--steps", "5", *args, env=base_env(GPUFLEET_CHECKPOINT_DIR=str(home), **env))
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and names in proc.stderr and "Traceback" not in proc.stderr
    assert not home.exists()  # nothing half-written


def test_a_lost_peer_is_the_retry_code(tmp_path: Path, small_config: Path) -> None:
    """Rank 0 of a two-node NumPy gang whose rank 1 never sends a heartbeat exits with the retry code."""
    env = base_env(GPUFLEET_CHECKPOINT_DIR=str(tmp_path / "home"), NNODES="2", NODE_RANK="0",
                   GPUFLEET_PEER_TIMEOUT_SECONDS="1")
    proc = trainer("--steps", "100000000", "--config", str(small_config), env=env)
    assert proc.returncode == 75
    assert "lost a peer" in proc.stderr and "rank 1" in proc.stderr


def test_a_peer_that_stops_makes_the_others_retry(tmp_path: Path, small_config: Path) -> None:
    """Rank 1 gets SIGTERM: it says so in its heartbeat and exits 75; rank 0 sees it and exits 75 too."""
    import signal

    home = str(tmp_path / "home")
    procs = [subprocess.Popen([sys.executable, "-m", "placement.trainer", "--steps", "100000000", "--config",
                               str(small_config), "--log-every", "1"], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              env=base_env(GPUFLEET_CHECKPOINT_DIR=home, NNODES="2", NODE_RANK=str(r),
                                           GPUFLEET_PEER_TIMEOUT_SECONDS="20"))
             for r in (0, 1)]
    for p in procs:
        assert p.stderr is not None
        for line in p.stderr:
            if line.startswith("trainer: step 20"):
                break
    procs[1].send_signal(signal.SIGTERM)
    _, err1 = procs[1].communicate(timeout=60)
    _, err0 = procs[0].communicate(timeout=60)
    assert procs[1].returncode == 75 and procs[0].returncode == 75
    assert "peer rank 1 stopped" in err0


@pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                    reason="PyTorch is not installed (the torch extra: gigabytes of wheels, never in dev)")
def test_torch_backend_resumes_to_the_same_loss(tmp_path: Path, small_config: Path) -> None:
    env = base_env(GPUFLEET_CHECKPOINT_DIR=str(tmp_path / "home"))
    args = ["--backend", "torch", "--config", str(small_config), "--checkpoint-every", "10"]
    whole = trainer("--steps", "40", *args, env=base_env())
    first = trainer("--steps", "20", *args, env=env)
    rest = trainer("--steps", "40", *args, env=env)
    assert whole.returncode == first.returncode == rest.returncode == 0
    assert rest.stdout.splitlines()[-1] == whole.stdout.splitlines()[-1]
    bench = trainer("--benchmark", "--backend", "torch", "--steps", "5", "--config", str(small_config),
                    env=base_env())
    assert json.loads(bench.stdout.splitlines()[-1])["backend"] == "torch"
