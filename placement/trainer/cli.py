"""``python -m placement.trainer``: parse, build the run's parts, train (or benchmark), exit with the code
the contract asks for. Bad input: one line naming the option or variable, exit 2, before anything is written.

Every process of a gang keeps the same order: settings and ranks (placement.trainer.settings.ranks), the model
configuration, the extra's modules, the model (the process group under torchrun), the metrics, then the
checkpoint home (checked, and claimed by the writer, global rank 0), then training. Under the launcher each
process records its outcome for it (placement.trainer.outcome).
"""

from __future__ import annotations

import argparse
import errno
import importlib.util
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from placement.errors import shown
from placement.trainer.notice import NOTICE, install
from placement.trainer.outcome import ENV as OUTCOME_ENV
from placement.trainer.outcome import Recorder
from placement.trainer.settings import (
    DEFAULT_RETRY_EXIT_CODE,
    ModelConfig,
    SettingsError,
    TrainerEnv,
    from_env,
    model_config,
    one_blas_thread,
)

MAX_CONFIG_BYTES = 1 << 20

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

    from placement.files import safe

    try:
        text = safe.read_text(path, MAX_CONFIG_BYTES)
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or str(exc)
        raise SettingsError(f"--config {shown(str(path), 80)}: cannot be read ({why}); give a YAML file") from None
    try:
        data = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError) as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise SettingsError(f"--config {path}: not YAML{where}; fix the file") from None
    return model_config(data, f"--config {path}")


def missing_extra(backend: str, env: TrainerEnv) -> str | None:
    """One line naming the extra a run needs and the command that adds it, when one of its modules is
    missing; None when everything is there."""
    needed = ["numpy", "fsspec", "prometheus_client"]
    for uri in (env.checkpoint_dir, env.checkpoint_cache_dir):
        scheme = uri.partition("://")[0] if "://" in uri else ""
        needed += {"s3": ["s3fs"], "gs": ["gcsfs"], "gcs": ["gcsfs"]}.get(scheme, [])
    for module in needed:
        if importlib.util.find_spec(module) is None:
            from placement.console import extra_command  # the one command per extra the CLI's hints name

            return (f"the reference trainer needs the trainer extra (no module named {module}); add it with: "
                    f"{extra_command('trainer')}")
    if backend == "torch" and importlib.util.find_spec("torch") is None:
        return ("--backend torch: PyTorch is not installed here (the torch extra); `scripts/torch_env` makes "
                ".venv-torch with the CPU wheel in a checkout, pip install torch in an image; or use --backend numpy")
    return None


def build_model(backend: str, cfg: ModelConfig, seed: int, env: TrainerEnv | None = None) -> Any:
    if backend == "torch":
        from placement.trainer.torch_model import TorchModel

        return TorchModel(cfg, seed, env)
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
    """Parse, check, train (or benchmark); the exit code. Under the launcher the outcome is recorded for it
    (``GPUFLEET_OUTCOME_DIR``), an unexpected exception's too (as exit 1) before it propagates."""
    os.environ.update(one_blas_thread(os.environ))  # before NumPy or PyTorch loads its BLAS
    args = parser().parse_args(argv)
    env_vars = os.environ if environ is None else environ
    recorder = Recorder(env_vars.get(OUTCOME_ENV, "").strip())
    code, retry = 1, DEFAULT_RETRY_EXIT_CODE
    try:
        try:
            if args.steps < 0:
                raise SettingsError(f"--steps {args.steps}: must be >= 0; give the step to train until")
            for flag, value in (("--checkpoint-every", args.checkpoint_every), ("--log-every", args.log_every)):
                if value is not None and value < 0 or (flag == "--checkpoint-every" and value == 0):
                    raise SettingsError(f"{flag} {value}: must be a positive number of steps")
            env = from_env(env_vars)
            retry = env.retry_exit_code
            recorder.rank, recorder.local_rank, recorder.local_world = env.rank, env.local_rank, env.local_world
            recorder.write("running")
            if env.world > 1:  # one write: the ranks of a node share the stream
                sys.stderr.write(f"trainer: rank {env.rank} of {env.world} (local rank {env.local_rank} of "
                                 f"{env.local_world}, node {env.node_rank} of {env.nodes}; from {env.rank_source}), "
                                 f"pid {os.getpid()}\n")
                sys.stderr.flush()
            cfg = load_config(args.config)
            missing = missing_extra(args.backend, env)
            if missing:
                raise SettingsError(missing)
            if env.finished_file and not os.path.isdir(os.path.dirname(env.finished_file) or "."):
                raise SettingsError(f"GPUFLEET_FINISHED_FILE={shown(env.finished_file, 80)}: its folder does not "
                                    "exist; give a path in an existing folder (the launcher sets it), or unset it")
        except SettingsError as exc:
            print(f"trainer: {exc}", file=sys.stderr)
            code = 2
            return code
        code = _run(args, env, cfg)
        return code
    finally:
        recorder.ended(code, retry)


def _run(args: argparse.Namespace, env: TrainerEnv, cfg: ModelConfig) -> int:
    from placement.trainer.loop import PeerLost

    try:
        model = build_model(args.backend, cfg, args.seed, env)
    except SettingsError as exc:
        print(f"trainer: {exc}", file=sys.stderr)
        return 2
    except PeerLost as exc:  # the rendezvous or process group: the peers are not there (yet)
        print(f"trainer: cannot join the gang: {exc}; exit {env.retry_exit_code} (retry)", file=sys.stderr)
        return env.retry_exit_code
    if args.benchmark:
        _say(json.dumps(benchmark(model, env, cfg, args.steps)))
        return 0
    return _train(args, env, cfg, model)


def _metrics(env: TrainerEnv, model: Any, gpus: int) -> Any:
    """The metrics of this process, served by local rank 0 for the whole node (placement.trainer.metrics);
    None when off. Raises SettingsError for an address that does not resolve; a port that cannot be bound is
    one line and no metrics: no rank fails to start because of them."""
    from placement.trainer import metrics as m

    multiproc = None
    try:
        multiproc = m.multiprocess_dir(env)
    except OSError as exc:
        print(f"trainer: cannot make the metrics folder ({exc.strerror}); only local rank 0's metrics are served",
              file=sys.stderr)
    if multiproc:
        os.environ[m.MULTIPROC_ENV] = multiproc  # read when prometheus-client is imported (next)
    elif env.local_rank > 0:
        return None
    metrics = m.Metrics(env, env.accelerator or model.accelerator, gpus, multiproc)
    if env.local_rank > 0:
        return metrics  # local rank 0 serves them
    try:
        metrics.serve(env.metrics_port, env.metrics_addr)
    except OSError as exc:
        if isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL:
            reason = exc.strerror or str(exc)
            raise SettingsError(f"GPUFLEET_METRICS_ADDR={shown(env.metrics_addr, 80)}: not an address of this "
                                f"host ({reason}); set an IP address, or 0.0.0.0 for all") from None
        print(f"trainer: GPUFLEET_METRICS_PORT={env.metrics_port}: cannot listen on {env.metrics_addr} "
              f"({exc.strerror}); training goes on without metrics (set a free port, or 0 to turn them off)",
              file=sys.stderr)
    return metrics


def _train(args: argparse.Namespace, env: TrainerEnv, cfg: ModelConfig, model: Any) -> int:
    from placement.trainer.checkpoint import Checkpointer, HomeError, Store, StoreUnreachable, Written
    from placement.trainer.loop import PeerLost, Run, train

    gpus = env.nodes * env.gpus_per_node if env.gpus_per_node else max(env.world, getattr(model, "world", 1), 1)
    metrics = None
    if env.metrics_port:
        try:
            metrics = _metrics(env, model, gpus)
        except SettingsError as exc:
            print(f"trainer: {exc}", file=sys.stderr)
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
            print(f"trainer: GPUFLEET_CHECKPOINT_DIR={shown(env.checkpoint_dir, 80)}: {str(exc)[:200]}; install "
                  "the trainer extra (s3fs, gcsfs) or give a path", file=sys.stderr)
            return 2
        # One home, one job: the writer claims it; every rank refuses another job's. Before anything is written.
        for var, where in (("GPUFLEET_CHECKPOINT_DIR", home), ("GPUFLEET_CHECKPOINT_CACHE_DIR", cache)):
            if where is None:
                continue
            try:
                where.prepare(create=env.writer)
                if env.writer:
                    where.claim()
                elif (why := where.conflict()) is not None:
                    raise HomeError(f"{why}; give job {env.job} its own checkpoint home")
            except HomeError as exc:
                print(f"trainer: {var}={shown(where.uri, 80)} {exc}", file=sys.stderr)
                return 2
            except Exception as exc:  # noqa: BLE001 - any client's error: the store cannot be reached now
                print(f"trainer: cannot read {where.uri}: {StoreUnreachable(f'{type(exc).__name__}: {exc}')}; "
                      f"exit {env.retry_exit_code} (retry)", file=sys.stderr)
                return env.retry_exit_code
        # Only global rank 0 writes (every rank holds the same state); every rank resumes from the same one.
        ckpt = Checkpointer(home=home, cache=cache if env.writer else None, keep=env.keep,
                            on_written=on_written, on_error=lambda msg: _say(f"trainer: {msg}", sys.stderr))
        if env.world > 1 and model.name == "numpy":
            from placement.trainer.peers import Heartbeat

            try:
                heartbeat = Heartbeat(env.checkpoint_dir, env.rank, env.world, env.peer_timeout_s).start()
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
    store: Any = ckpt if env.writer or ckpt is None else _ReadOnly(ckpt)
    the_run = Run(env=env, model=model, steps=args.steps, checkpoints=store,
                  every_steps=args.checkpoint_every, log_every=args.log_every, peer_errors=peer_errors,
                  check_peers=(lambda: heartbeat.lost) if heartbeat is not None else (lambda: None),
                  on_step=on_step, on_exit=on_exit, agree_stop=getattr(model, "agree_stop", lambda mine: mine),
                  notice=NOTICE)
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
    install()  # idempotent: `python -m placement.trainer` did it before its imports
    code = run()
    if "torch" in sys.modules:
        # With PyTorch loaded, the interpreter's own shutdown takes seconds (collecting torch's module graph, a
        # process group's destructor waiting on peers that are gone) that the grace period cannot spare: the
        # outcome is recorded and the checkpoint durable, so end here.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
