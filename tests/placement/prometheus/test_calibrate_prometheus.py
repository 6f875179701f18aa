"""``placement calibrate`` against a real Prometheus server (the system's package, started on loopback) scraping
test exporters that expose the dispatcher's and the trainer's metrics every second; and from exported samples."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from placement.commands.main import main
from placement.files.readers import load_yaml
from placement.model.calibration import parse_calibration
from placement.prometheus.client import query

PROMETHEUS = shutil.which("prometheus")
SPOT = ("worker", "cloud", "region", "zone", "instance_type")
TRAINER = ("job", "team", "workload", "accelerator", "nodes", "gpus")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Fleet:
    """A worker's dispatcher and a trainer, as Prometheus sees them: counters on one loopback exporter."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

        self.registry = CollectorRegistry()
        self.node_seconds = Counter("gpufleet_spot_node_seconds", "spot node-seconds observed", SPOT,
                                    registry=self.registry)
        self.reclaims = Counter("gpufleet_spot_reclaims", "spot nodes reclaimed", SPOT, registry=self.registry)
        self.tokens = Counter("gpufleet_trainer_tokens", "tokens", TRAINER, registry=self.registry)
        self.samples = Counter("gpufleet_trainer_samples", "samples", TRAINER, registry=self.registry)
        self.steps = Histogram("gpufleet_trainer_step_seconds", "step seconds", TRAINER, registry=self.registry,
                               buckets=(1, 10, 100))
        ckpt = ("destination", "tier")
        # The trainer's size gauge reads 0 until its first checkpoint (issue 38: those samples are no size).
        self.ckpt_bytes = Gauge("gpufleet_trainer_checkpoint_bytes", "bytes", ckpt, registry=self.registry)
        self.ckpt_write = Histogram("gpufleet_trainer_checkpoint_write_seconds", "write seconds", ckpt,
                                    registry=self.registry, buckets=(1, 10, 100))
        self.ckpt = {"destination": "s3", "tier": ""}
        self.ckpt_bytes.labels(**self.ckpt).set(0)
        self.ckpt_write.labels(**self.ckpt)
        self.labels = {"worker": "aws-use1", "cloud": "aws", "region": "us-east-1", "zone": "use1-az6",
                       "instance_type": "p5.48xlarge"}
        self.idle = {**self.labels, "zone": "use1-az4"}
        self.job = {"job": "llm-7b", "team": "research", "workload": "llm", "accelerator": "H100", "nodes": "1",
                    "gpus": "8"}
        for c in (self.node_seconds, self.reclaims):
            c.labels(**self.labels)
            c.labels(**self.idle)  # a pool that never ran a spot node: zero node-hours, left out
        self.tokens.labels(**self.job)
        self.samples.labels(**self.job)
        self.steps.labels(**self.job)
        self.port = _free_port()
        self.server, _ = start_http_server(self.port, addr="127.0.0.1", registry=self.registry)

    def run(self) -> None:
        """Two node-hours with one reclaim; 8e6 tokens in 100 s of steps on 8 GPUs (10,000 tokens/s per GPU)."""
        self.node_seconds.labels(**self.labels).inc(7200)
        self.reclaims.labels(**self.labels).inc(1)
        self.tokens.labels(**self.job).inc(8e6)
        self.samples.labels(**self.job).inc(4000)
        self.steps.labels(**self.job).observe(100.0)
        self.ckpt_bytes.labels(**self.ckpt).set(3e9)
        self.ckpt_write.labels(**self.ckpt).observe(6.0)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[str, Fleet]]:
    if PROMETHEUS is None:
        pytest.skip("the prometheus package is not installed (scripts/_prometheus.sh installs it with apt-get)")
    fleet = Fleet()
    port = _free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(json.dumps({  # JSON is YAML
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        # honor_labels: the trainer's own `job` label (the training job) is kept, not renamed exported_job.
        "scrape_configs": [{"job_name": "fleet", "honor_labels": True,
                            "static_configs": [{"targets": [f"127.0.0.1:{fleet.port}"]}]}],
    }))
    proc = subprocess.Popen([PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                pytest.fail("prometheus did not become ready in 20 s")
            time.sleep(0.1)
        yield url, fleet
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        fleet.close()


def _scrapes(url: str, metric: str, n: int, timeout_s: float = 20.0) -> None:
    """Wait until Prometheus holds ``n`` samples of ``metric``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = query(url, f"count_over_time({metric}[1h])", dt.datetime.now(dt.UTC)).samples
        if got and min(v for _, v in got) >= n:
            return
        time.sleep(0.2)
    pytest.fail(f"prometheus did not scrape {metric} {n} times")


def test_calibrate_reads_a_real_prometheus(prometheus: tuple[str, Fleet], tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    url, fleet = prometheus
    start = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    _scrapes(url, "gpufleet_spot_node_seconds_total", 2)
    fleet.run()
    _scrapes(url, "gpufleet_spot_node_seconds_total", 4)
    out = tmp_path / "cal.yaml"
    end = dt.datetime.now(dt.UTC)
    assert main(["calibrate", "--prometheus", url, "--from", start.isoformat(), "--to", end.isoformat(),
                 "--output", str(out)]) == 0
    assert "1 spot, 1 speed" in capsys.readouterr().out
    cal = parse_calibration(load_yaml(str(out), "calibration"))
    (row,) = cal.spot  # the idle pool had no node-hours
    assert (row.cloud, row.region, row.zone, row.instance_type) == ("aws", "us-east-1", "use1-az6", "p5.48xlarge")
    # increase() extrapolates towards the window's ends; both counters share the scrape times, so their ratio holds.
    assert 2.0 <= row.node_hours <= 3.0
    assert row.reclaims / row.node_hours == pytest.approx(0.5, rel=1e-5)  # the file keeps 6 digits
    (speed,) = cal.speed
    assert (speed.workload, speed.accelerator, speed.nodes, speed.unit, speed.runs) == ("llm", "H100", 1,
                                                                                        "tokens/s", 1)
    assert speed.per_gpu == pytest.approx(10_000, rel=1e-5)
    (ckpt,) = cal.checkpoint_write  # 3 GB: the samples before the first checkpoint (gauge 0) are left out
    assert (ckpt.destination, ckpt.gb, ckpt.runs) == ("s3", 3.0, 1) and ckpt.seconds == pytest.approx(6.0)


def test_calibrate_with_prometheus_down_says_so_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    assert main(["calibrate", "--prometheus", url, "--timeout", "0.5"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("placement: error: --prometheus: ")


def _matrix(metric: dict[str, str], values: list[tuple[float, float]]) -> dict[str, Any]:
    return {"metric": metric, "values": [[t, repr(v)] for t, v in values]}


def test_calibrate_from_exported_samples_counts_resets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("GPUFLEET_DATA_DIR", str(tmp_path))
    t0 = dt.datetime(2026, 11, 1, tzinfo=dt.UTC).timestamp()
    labels = {"worker": "w1", "cloud": "gcp", "region": "us-central1", "zone": "us-central1-a",
              "instance_type": "a3-highgpu-8g"}
    # 3600 s, then the dispatcher restarts (the counter resets to 0) and counts 1800 s more: 1.5 node-hours.
    node = _matrix({"__name__": "gpufleet_spot_node_seconds_total", **labels},
                   [(t0, 0.0), (t0 + 3600, 3600.0), (t0 + 3700, 0.0), (t0 + 5500, 1800.0)])
    rec = _matrix({"__name__": "gpufleet_spot_reclaims_total", **labels}, [(t0, 0.0), (t0 + 5500, 2.0)])
    samples = tmp_path / "samples.json"
    samples.write_text("\n".join(json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [m]}})
                                 for m in (node, rec)))
    assert main(["calibrate", "--samples", str(samples)]) == 0
    written = list((tmp_path / "calibration").glob("calibration-*.json"))
    assert len(written) == 1
    cal = parse_calibration(load_yaml(str(written[0]), "calibration"))
    (row,) = cal.spot
    assert (row.node_hours, row.reclaims) == (1.5, 2.0)
    assert cal.measured_from.timestamp() == t0
    capsys.readouterr()


def test_calibrate_refuses_a_window_in_the_future(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["calibrate", "--samples", str(tmp_path / "x.json"), "--to", "2099-01-01T00:00:00Z"]) == 2
    assert "--to" in capsys.readouterr().err


def test_report_reads_progress_from_a_real_prometheus(prometheus: tuple[str, Fleet], tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    # The hub (the Kubernetes fake) holds the run's Workload; Prometheus the trainer's tokens; the calibration the
    # planned per-GPU rate: 8e6 tokens at 10,000 tokens/s per GPU are 8e6 / 1e4 / 3600 GPU-hours of progress.
    import yaml
    from kubefake import WORKLOADS, FakeApi

    url, fleet = prometheus
    start = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    _scrapes(url, "gpufleet_trainer_tokens_total", 2)
    fleet.run()
    _scrapes(url, "gpufleet_trainer_tokens_total", 4)
    end = dt.datetime.now(dt.UTC)
    api = FakeApi("hub")
    try:
        spec = {"name": "llm-7b", "accelerator": "H100", "gpus": 8, "hours": 10, "team": "research",
                "capacity": "on-demand"}
        api.create(("jobset.x-k8s.io", "v1alpha2", "jobsets"), {"metadata": {
            "namespace": "research", "name": "llm-7b", "annotations": {"gpufleet.io/job-spec": json.dumps(spec)}}})
        api.create(WORKLOADS, {
            "metadata": {"namespace": "research", "name": "jobset-llm-7b", "ownerReferences": [
                {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "llm-7b", "controller": True,
                 "uid": "u"}]},
            "spec": {"podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": [
                {"name": "t", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]}}}]},
            "status": {"conditions": [{"type": "Admitted", "status": "True",
                                       "lastTransitionTime": start.strftime("%Y-%m-%dT%H:%M:%SZ")}]}})
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(api.kubeconfig()))
        cal = tmp_path / "cal.json"
        cal.write_text(json.dumps({"schema": "gpufleet.calibration/v1",
                                   "measured": {"from": "2026-10-01T00:00:00Z", "to": "2026-11-01T00:00:00Z"},
                                   "speed": [{"workload": "llm", "accelerator": "H100", "nodes": 1,
                                              "per_gpu": 10000.0, "unit": "tokens/s", "runs": 3}]}))
        assert main(["report", "--kubeconfig", str(kubeconfig), "--prometheus", url, "--from", start.isoformat(),
                     "--to", end.isoformat(), "--calibration", str(cal), "--json"]) == 0
    finally:
        api.close()
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    assert run["name"] == "llm-7b" and run["unit"] == "tokens"
    # increase() extrapolates towards the window's ends (see above): within a third of the exact figure.
    assert 8e6 <= run["tokens"] <= 8e6 * 1.34
    assert run["gpu_hours_progress"] == pytest.approx(run["tokens"] / 1e4 / 3600, rel=1e-3)


@pytest.mark.parametrize("window", [None, (1000.0, 1000.0 + 40 * 3600)])
def test_exported_samples_read_fast_agree_with_the_json_module(tmp_path: Path, window: tuple[float, float] | None,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # The array reader (values parsed without a Python float each, times only where the window cuts a series)
    # counts exactly what the json module's reading counts: resets, exponents, a window inside the series.
    import random

    from placement.prometheus import measurements

    rng = random.Random(5)
    result = []
    for s in range(6):
        v, values = 0.0, []
        for i in range(100):
            v = 0.0 if i == 30 + s else v + rng.choice([0.0, 1.0, rng.uniform(0, 4e6)])
            text = rng.choice([repr(v), f"{v:.6g}", f"{v:.17g}", f"{v:e}"])
            values.append([1000 + i * 3600, text])
        result.append({"metric": {"__name__": "gpufleet_spot_node_seconds_total", "worker": "w", "cloud": "aws",
                                  "region": "r", "zone": f"z{s}", "instance_type": "p5.48xlarge"},
                       "values": values})
    samples = tmp_path / "s.json"
    samples.write_text(json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}))
    start, end = (None, None) if window is None else (dt.datetime.fromtimestamp(w, dt.UTC) for w in window)
    fast = measurements.from_samples(str(samples), start, end)
    assert measurements._fast_series(samples.read_bytes()) is not None
    monkeypatch.setattr(measurements, "_fast_series", lambda raw: None)
    slow = measurements.from_samples(str(samples), start, end)
    assert fast == slow and len(fast.spot) == 6 and fast.spot[0].node_hours > 0


def test_exported_samples_skip_nan_values_either_way(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from placement.prometheus import measurements

    labels = {"__name__": "gpufleet_spot_node_seconds_total", "worker": "w", "cloud": "aws", "region": "r",
              "zone": "z", "instance_type": "p5.48xlarge"}
    samples = tmp_path / "s.json"
    samples.write_text(json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": labels, "values": [[0, "0"], [3600, "NaN"], [7200, "7200"]]}]}}))
    (row,) = measurements.from_samples(str(samples), None, None).spot
    assert row.node_hours == 2.0
    monkeypatch.setattr(measurements, "_fast_series", lambda raw: None)
    assert measurements.from_samples(str(samples), None, None).spot == (row,)
