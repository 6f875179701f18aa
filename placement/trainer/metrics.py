"""The trainer's Prometheus metrics (prometheus-client), served on ``GPUFLEET_METRICS_PORT`` (0: off).

Every metric has the labels ``job, team, workload, accelerator, nodes, gpus``; the checkpoint ones also
``destination, tier``. ``placement calibrate`` turns them into measured throughput and checkpoint write rows:

=============================================  =========  ==================================================
metric                                         type       what
=============================================  =========  ==================================================
``gpufleet_trainer_samples_total``             counter    samples (sequences) trained on by this pod
``gpufleet_trainer_tokens_total``              counter    tokens (sequence positions) trained on by this pod
``gpufleet_trainer_step_seconds``              histogram  wall seconds of one training step
``gpufleet_trainer_step``                      gauge      the current step
``gpufleet_trainer_checkpoint_write_seconds``  histogram  seconds from a checkpoint's start to durable
``gpufleet_trainer_checkpoint_bytes``          gauge      bytes of the last checkpoint's data
``gpufleet_trainer_last_checkpoint_step``      gauge      step of the last durable checkpoint
=============================================  =========  ==================================================
"""

from __future__ import annotations

from typing import Any

from placement.trainer.settings import TrainerEnv

LABELS = ("job", "team", "workload", "accelerator", "nodes", "gpus")
CHECKPOINT_LABELS = (*LABELS, "destination", "tier")
# Step seconds: a CPU toy's milliseconds to a large model's tens of seconds.
STEP_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# Checkpoint writes: a small model's fraction of a second to a 1 TB checkpoint's minutes over object storage.
WRITE_BUCKETS = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 60.0, 120.0, 300.0, 600.0, 1800.0)


class Metrics:
    """The trainer's metrics in their own registry; :meth:`serve` starts the HTTP exporter."""

    def __init__(self, env: TrainerEnv, accelerator: str, gpus: int) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        labels = {"job": env.job, "team": env.team, "workload": env.workload, "accelerator": accelerator,
                  "nodes": str(env.nodes), "gpus": str(gpus)}
        ckpt = {**labels, "destination": env.destination, "tier": env.checkpoint_tier}
        r = self.registry
        self.samples = Counter("gpufleet_trainer_samples", "Samples (sequences) trained on by this pod.",
                               LABELS, registry=r).labels(**labels)
        self.tokens = Counter("gpufleet_trainer_tokens", "Tokens (sequence positions) trained on by this pod.",
                              LABELS, registry=r).labels(**labels)
        self.step_seconds = Histogram("gpufleet_trainer_step_seconds", "Wall seconds of one training step.",
                                      LABELS, buckets=STEP_BUCKETS, registry=r).labels(**labels)
        self.step = Gauge("gpufleet_trainer_step", "The current training step.", LABELS,
                          registry=r).labels(**labels)
        self.write_seconds = Histogram("gpufleet_trainer_checkpoint_write_seconds",
                                       "Seconds from a checkpoint's start until it is durable in the home.",
                                       CHECKPOINT_LABELS, buckets=WRITE_BUCKETS, registry=r).labels(**ckpt)
        self.checkpoint_bytes = Gauge("gpufleet_trainer_checkpoint_bytes", "Bytes of the last checkpoint's data.",
                                      CHECKPOINT_LABELS, registry=r).labels(**ckpt)
        self.last_checkpoint_step = Gauge("gpufleet_trainer_last_checkpoint_step",
                                          "Step of the last checkpoint durable in the home.",
                                          CHECKPOINT_LABELS, registry=r).labels(**ckpt)
        self.server: Any = None

    def serve(self, port: int, addr: str) -> int:
        """Serve ``/metrics`` on ``addr:port`` in a daemon thread; returns the port bound."""
        from prometheus_client import start_http_server

        self.server, _thread = start_http_server(port, addr=addr, registry=self.registry)
        return int(self.server.server_port)

    def stepped(self, step: int, seconds: float, samples: int, tokens: int) -> None:
        self.samples.inc(samples)
        self.tokens.inc(tokens)
        self.step_seconds.observe(seconds)
        self.step.set(step)

    def checkpointed(self, step: int, seconds: float, nbytes: int) -> None:
        self.write_seconds.observe(seconds)
        self.checkpoint_bytes.set(nbytes)
        self.last_checkpoint_step.set(step)

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
