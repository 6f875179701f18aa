"""``python -m placement.trainer``: parse, build the run's parts, train (or benchmark), exit with the code
the contract asks for. Bad input: one line naming the option or variable, exit 2."""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from placement.trainer.settings import ModelConfig, SettingsError, TrainerEnv, from_env, model_config

BENCHMARK_SCHEMA = "gpufleet.trainer-benchmark/v1"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m placement.trainer",
        description="The reference trainer: keeps the trainer contract (docs/trainer-contract.md). Reads the "
                    "GPUFLEET_* variables placement submit sets; prints one line per checkpoint and, when it "
                    "finishes, `final loss <value>` as its last line.")
    p.add_argument("--steps", type=int, required=True, help="train until this step (a resumed run continues)")
    p.add_argument("--seed", type=int, default=0, help="seed of the model, the data and its order (default 0)")
    p.add_argument("--backend", choices=("numpy", "torch"), default="numpy",
                   help="numpy (default, CPU) or torch (the torch extra; CUDA when there is a GPU)")
    p.add_argument("--config", type=Path, help="the model configuration, YAML (docs/trainer-contract.md"
                                               "#model-configuration)")
    p.add_argument("--benchmark", action="store_true",
                   help="time --steps steps without checkpoints; print one JSON object as the last line")
    p.add_argument("--checkpoint-every", type=int, metavar="STEPS",
                   help="checkpoint every STEPS steps instead of every GPUFLEET_CHECKPOINT_INTERVAL_SECONDS")
    p.add_argument("--log-every", type=int, default=0, metavar="STEPS",
                   help="a progress line on stderr every STEPS steps (default: none)")
    return p


def load_config(path: Path | None) -> ModelConfig:
    if path is None:
        return ModelConfig()
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SettingsError(f"--config {path}: cannot be read ({exc.strerror}); give a YAML file") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise SettingsError(f"--config {path}: not YAML{where}; fix the file") from None
    return model_config(data, f"--config {path}")


def build_model(backend: str, cfg: ModelConfig, seed: int) -> Any:
    if backend == "torch":
        try:
            from placement.trainer.torch_model import TorchModel
        except ImportError:
            raise SettingsError("--backend torch: PyTorch is not installed; pip install 'gpufleet[torch]' "
                                "or use --backend numpy") from None
        return TorchModel(cfg, seed)
    from placement.trainer.numpy_model import NumpyModel

    return NumpyModel(cfg, seed)


def benchmark(model: Any, env: TrainerEnv, cfg: ModelConfig, steps: int) -> dict[str, Any]:
    """Time ``steps`` steps after one untimed warm-up step (allocation, CUDA kernels' first launch); no
    checkpoints. Throughput is of the whole run (every process of a ``torchrun`` gang)."""
    model.train_step()
    start = time.perf_counter()
    for _ in range(steps):
        model.train_step()
    if model.device == "cuda":
        model.torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    gpus = max(int(getattr(model, "world", 1)), 1)
    samples_per_s = steps * cfg.batch * gpus / seconds if seconds > 0 else 0.0
    tokens_per_s = samples_per_s * cfg.seq_len
    workload = cfg.workload or env.workload
    unit = "tokens/s" if workload == "llm" else "samples/s"
    per_gpu = (tokens_per_s if unit == "tokens/s" else samples_per_s) / gpus
    return {"schema": BENCHMARK_SCHEMA, "backend": model.name, "device": model.device,
            "accelerator": model.accelerator, "gpus": gpus, "workload": workload, "steps": steps,
            "seconds": round(seconds, 6), "samples_per_s": round(samples_per_s, 3),
            "tokens_per_s": round(tokens_per_s, 3), "per_gpu": round(per_gpu, 3), "unit": unit}


def _say(line: str, stream: Any = None) -> None:
    with _PRINT:
        print(line, file=stream or sys.stdout, flush=True)


_PRINT = threading.Lock()  # lines from the writer thread and the loop never interleave


def run(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    args = parser().parse_args(argv)
    env_vars = os.environ if environ is None else environ
    try:
        if args.steps < 0:
            raise SettingsError(f"--steps {args.steps}: must be >= 0; give the step to train until")
        for flag, value in (("--checkpoint-every", args.checkpoint_every), ("--log-every", args.log_every)):
            if value is not None and value < 0 or (flag == "--checkpoint-every" and value == 0):
                raise SettingsError(f"{flag} {value}: must be a positive number of steps")
        env = from_env(env_vars)
        cfg = load_config(args.config)
        model = build_model(args.backend, cfg, args.seed)
    except SettingsError as exc:
        print(f"trainer: {exc}", file=sys.stderr)
        return 2
    if args.benchmark:
        _say(json.dumps(benchmark(model, env, cfg, args.steps)))
        return 0
    return _train(args, env, cfg, model)


def _train(args: argparse.Namespace, env: TrainerEnv, cfg: ModelConfig, model: Any) -> int:
    from placement.trainer.checkpoint import Checkpointer, Store, Written
    from placement.trainer.loop import PeerLost, Run, train

    gpus = env.nodes * env.gpus_per_node if env.gpus_per_node else env.nodes * max(getattr(model, "world", 1), 1)
    metrics = None
    if env.metrics_port:  # every pod serves its own; Prometheus tells them apart by instance
        from placement.trainer.metrics import Metrics

        metrics = Metrics(env, env.accelerator or model.accelerator, gpus)
        try:
            metrics.serve(env.metrics_port, env.metrics_addr)
        except OSError as exc:
            print(f"trainer: GPUFLEET_METRICS_PORT={env.metrics_port}: cannot listen ({exc.strerror}); "
                  "set a free port, or 0 to turn the metrics off", file=sys.stderr)
            return 2

    def on_written(w: Written) -> None:
        if metrics is not None:
            metrics.checkpointed(w.step, w.seconds, w.bytes)
        _say(f"checkpoint step {w.step} ({w.kind}): {w.bytes} bytes in {w.seconds:.3f} s -> {w.uri}")

    ckpt = None
    heartbeat = None
    if env.checkpoint_dir:
        try:
            home = Store(env.checkpoint_dir, env.job)
            cache = Store(env.checkpoint_cache_dir, env.job) if env.checkpoint_cache_dir else None
        except (ImportError, ValueError) as exc:
            print(f"trainer: GPUFLEET_CHECKPOINT_DIR={env.checkpoint_dir}: {exc}; install the trainer extra "
                  "(s3fs, gcsfs) or give a path", file=sys.stderr)
            return 2
        # Only rank 0 writes (every rank holds the same state); every rank resumes from the same checkpoint.
        ckpt = Checkpointer(home=home, cache=cache if env.rank == 0 else None, keep=env.keep,
                            on_written=on_written, on_error=lambda msg: _say(f"trainer: {msg}", sys.stderr))
        if env.nodes > 1 and model.name == "numpy":
            from placement.trainer.peers import Heartbeat

            try:
                heartbeat = Heartbeat(env.checkpoint_dir, env.rank, env.nodes, env.peer_timeout_s).start()
            except Exception as exc:  # noqa: BLE001 - any client's error: the home cannot be written now
                print(f"trainer: cannot write heartbeats under {env.checkpoint_dir}: {type(exc).__name__}: {exc}; "
                      f"exit {env.retry_exit_code} (retry)", file=sys.stderr)
                return env.retry_exit_code

    peer_errors: tuple[type[BaseException], ...] = (PeerLost,)
    if model.name == "torch":
        from placement.trainer.torch_model import peer_errors as torch_peer_errors

        peer_errors += torch_peer_errors()

    def on_step(step: int, seconds: float) -> None:
        if heartbeat is not None:
            heartbeat.step = step
        if metrics is not None:
            metrics.stepped(step, seconds, cfg.batch, cfg.tokens_per_step)

    def on_exit(state: str) -> None:
        if heartbeat is not None:
            heartbeat.stop("finished" if state == "finished" else "stopped")

    # Ranks other than 0 resume from the home but never write: rank 0 does, for the gang.
    store: Any = ckpt if env.rank == 0 or ckpt is None else _ReadOnly(ckpt)
    the_run = Run(env=env, model=model, steps=args.steps, checkpoints=store,
                  every_steps=args.checkpoint_every, log_every=args.log_every, peer_errors=peer_errors,
                  check_peers=(lambda: heartbeat.lost) if heartbeat is not None else (lambda: None),
                  on_step=on_step, on_exit=on_exit, agree_stop=getattr(model, "agree_stop", lambda mine: mine))
    try:
        return train(the_run)
    finally:
        if metrics is not None:
            metrics.close()


class _ReadOnly:
    """A rank other than 0 resumes from the home but never writes (rank 0 does)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.home = _NoWrite()
        self.durable_step = -1

    def latest(self) -> Any:
        return self.inner.latest()

    def wait(self, timeout: float | None = None) -> bool:
        return True

    def save_async(self, snap: Any) -> None:
        self.durable_step = snap.step

    def save(self, snap: Any, timeout: float | None = None) -> bool:
        self.durable_step = snap.step
        return True


class _NoWrite:
    def write_finished(self, step: int, loss: float) -> None:
        pass


def main() -> None:
    sys.exit(run())
