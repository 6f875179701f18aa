"""The trainer's Prometheus metrics (prometheus-client), served on ``GPUFLEET_METRICS_PORT`` (0: off).

**One scrape target per pod.** With one process per pod, it serves its own metrics. Under ``torchrun`` with
several processes on the node (``LOCAL_WORLD_SIZE`` > 1) every process records into prometheus-client's
multiprocess mode (files in one folder per node, :func:`multiprocess_dir`) and only local rank 0 binds the
port, serving them all: a second process never fails to bind, and the pod annotation's one port scrapes every
rank. A port that cannot be bound (taken) is one line on stderr and training goes on without metrics; an
address that does not resolve is bad input (exit 2, naming ``GPUFLEET_METRICS_ADDR``).

Every metric has the labels ``job, team, workload, accelerator, nodes, gpus, rank`` (``rank``: the process's
global rank; the counters are per process, so ``sum by (job)`` is the gang's); the checkpoint ones, which only
the writer (rank 0) has, also ``destination, tier``. ``placement calibrate`` turns them into measured
throughput and checkpoint write rows:

=============================================  =========  ==================================================
metric                                         type       what
=============================================  =========  ==================================================
``gpufleet_trainer_samples_total``             counter    samples (sequences) trained on by this process
``gpufleet_trainer_tokens_total``              counter    tokens (sequence positions) trained on by this process
``gpufleet_trainer_step_seconds``              histogram  wall seconds of one training step
``gpufleet_trainer_step``                      gauge      the current step
``gpufleet_trainer_checkpoint_write_seconds``  histogram  seconds from a checkpoint's start to durable
``gpufleet_trainer_checkpoint_bytes``          gauge      bytes of the last checkpoint's data
``gpufleet_trainer_last_checkpoint_step``      gauge      step of the last durable checkpoint
=============================================  =========  ==================================================
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from placement.trainer.outcome import process_start
from placement.trainer.settings import TrainerEnv

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
LABELS = ("job", "team", "workload", "accelerator", "nodes", "gpus", "rank")
CHECKPOINT_LABELS = (*LABELS, "destination", "tier")
# Step seconds: a CPU toy's milliseconds to a large model's tens of seconds.
STEP_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# Checkpoint writes: a small model's fraction of a second to a 1 TB checkpoint's minutes over object storage.
WRITE_BUCKETS = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 60.0, 120.0, 300.0, 600.0, 1800.0)


def multiprocess_dir(env: TrainerEnv) -> str | None:
    """The folder the processes of this node share for prometheus-client's multiprocess mode, made when
    missing; None with one process per node. One per ``torchrun`` agent (the processes' parent: its pid and
    start time), under the launcher's folder (``GPUFLEET_OUTCOME_DIR``, removed with it) or the temporary
    folder. Set it as ``PROMETHEUS_MULTIPROC_DIR`` before prometheus-client is imported."""
    if env.local_world <= 1:
        return None
    agent = os.getppid()
    base = env.outcome_dir if env.outcome_dir and os.path.isdir(env.outcome_dir) else tempfile.gettempdir()
    folder = os.path.join(base, f"metrics-{agent}-{process_start(agent) or 0}")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    return folder


class Metrics:
    """The trainer's metrics in their own registry; :meth:`serve` starts the HTTP exporter (local rank 0).
    ``multiproc``: the folder of :func:`multiprocess_dir` (its variable already set), or None."""

    def __init__(self, env: TrainerEnv, accelerator: str, gpus: int, multiproc: str | None = None) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        self.multiproc = multiproc
        labels = {"job": env.job, "team": env.team, "workload": env.workload, "accelerator": accelerator,
                  "nodes": str(env.nodes), "gpus": str(gpus), "rank": str(env.rank)}
        ckpt = {**labels, "destination": env.destination, "tier": env.checkpoint_tier}
        r = self.registry
        self.samples = Counter("gpufleet_trainer_samples", "Samples (sequences) trained on by this process.",
                               LABELS, registry=r).labels(**labels)
        self.tokens = Counter("gpufleet_trainer_tokens", "Tokens (sequence positions) trained on by this process.",
                              LABELS, registry=r).labels(**labels)
        self.step_seconds = Histogram("gpufleet_trainer_step_seconds", "Wall seconds of one training step.",
                                      LABELS, buckets=STEP_BUCKETS, registry=r).labels(**labels)
        # Gauges across processes (multiprocess mode): each series is one process's (the rank label), its
        # newest value; ignored with one process.
        self.step = Gauge("gpufleet_trainer_step", "The current training step.", LABELS, registry=r,
                          multiprocess_mode="mostrecent").labels(**labels)
        self.write_seconds: Any = None
        self.checkpoint_bytes: Any = None
        self.last_checkpoint_step: Any = None
        if env.writer:  # only the writer checkpoints: no other rank reports a checkpoint size of 0
            self.write_seconds = Histogram("gpufleet_trainer_checkpoint_write_seconds",
                                           "Seconds from a checkpoint's start until it is durable in the home.",
                                           CHECKPOINT_LABELS, buckets=WRITE_BUCKETS, registry=r).labels(**ckpt)
            self.checkpoint_bytes = Gauge("gpufleet_trainer_checkpoint_bytes", "Bytes of the last checkpoint's "
                                          "data.", CHECKPOINT_LABELS, registry=r,
                                          multiprocess_mode="mostrecent").labels(**ckpt)
            self.last_checkpoint_step = Gauge("gpufleet_trainer_last_checkpoint_step",
                                              "Step of the last checkpoint durable in the home.", CHECKPOINT_LABELS,
                                              registry=r, multiprocess_mode="mostrecent").labels(**ckpt)
        self.server: Any = None

    def serve(self, port: int, addr: str) -> int:
        """Serve ``/metrics`` on ``addr:port`` in a daemon thread (every process of the node's, in multiprocess
        mode); returns the port bound. Raises OSError (``socket.gaierror`` for an address that does not
        resolve)."""
        from prometheus_client import CollectorRegistry, start_http_server

        registry = self.registry
        if self.multiproc:
            from prometheus_client import multiprocess

            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry, path=self.multiproc)
        self.server, _thread = start_http_server(port, addr=addr, registry=registry)
        return int(self.server.server_port)

    def stepped(self, step: int, seconds: float, samples: int, tokens: int) -> None:
        self.samples.inc(samples)
        self.tokens.inc(tokens)
        self.step_seconds.observe(seconds)
        self.step.set(step)

    def checkpointed(self, step: int, seconds: float, nbytes: int) -> None:
        if self.write_seconds is None:
            return
        self.write_seconds.observe(seconds)
        self.checkpoint_bytes.set(nbytes)
        self.last_checkpoint_step.set(step)

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
