#!/usr/bin/env python3
"""Measure the training stall of an asynchronous checkpoint against a synchronous one. Prints figures only.

The reference trainer's NumPy model (placement.trainer.numpy_model) sized so that one checkpoint (parameters
and Adam's two moments, float32, in one file) is about --mb MB, written through placement.trainer.checkpoint
to --dir (a path, or any fsspec URI) exactly as the trainer writes it: claim, data with its SHA-256, manifest
last, the last checkpoint kept.

Per run (--runs, median reported), after warm-up steps and with the step time measured without checkpoints:
  sync stall   seconds the training thread is blocked in Checkpointer.save (the write, hashing, manifest)
  async stall  seconds it is blocked in Checkpointer.save_async (taking the snapshot, starting the writer);
               target: under 10 % of the sync stall
  async write  seconds until the background write is durable, and how much slower the steps that ran
               meanwhile were, in total, than the step time without checkpoints (the writer shares the CPU
               and the memory bus with training: on a loaded 2-core machine this is not zero)

Usage: scripts/bench_checkpoint.py [--mb 256] [--runs 5] [--dir PATH_OR_URI] [--keep-files]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _bench  # noqa: E402
import _venv  # noqa: E402


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--mb", type=float, default=256.0, help="checkpoint size, MB (default 256; >= 200)")
    p.add_argument("--runs", type=int, default=5, help="runs of each kind; medians reported (default 5)")
    p.add_argument("--dir", help="where to write: a path or fsspec URI (default: a temporary directory)")
    p.add_argument("--keep-files", action="store_true", help="leave the checkpoints written")
    return p


parser().parse_known_args()  # --help answers before anything is imported: it needs no .venv
_venv.ensure("numpy", "fsspec", extra="trainer")
# One BLAS thread, as the trainer's tests run it: the writer thread has the other core, and a loaded
# machine's multi-threaded BLAS would make the step times noise (set the variable to override).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from placement.trainer.checkpoint import Checkpointer, Snapshot, Store  # noqa: E402
from placement.trainer.numpy_model import NumpyModel  # noqa: E402
from placement.trainer.settings import ModelConfig  # noqa: E402

HIDDEN = 1024
LAYERS = 2


def config_for(mb: float) -> ModelConfig:
    """A model whose checkpoint (3 float32 copies of the parameters) is about ``mb`` MB: the vocabulary
    sets the size (embedding and output are vocab × hidden each)."""
    params = mb * 1e6 / (3 * 4)
    vocab = max(int((params - LAYERS * HIDDEN * (HIDDEN + 1)) / (2 * HIDDEN + 1)), 2)
    return ModelConfig(hidden=HIDDEN, layers=LAYERS, seq_len=16, batch=4, vocab=vocab, lr=1e-3)


def snapshot(model: NumpyModel, step: int, loss: float) -> Snapshot:
    files, state = model.snapshot()
    return Snapshot(step=step, files=files, state={**state, "loss": loss})


def main() -> int:
    args = parser().parse_args()
    print(_bench.machine_line())
    tmp = None
    target = args.dir
    if target is None:
        tmp = tempfile.mkdtemp(prefix="gpufleet-bench-checkpoint.")
        target = tmp
    cfg = config_for(args.mb)
    model = NumpyModel(cfg, seed=0)
    store = Store(target, "bench-checkpoint")
    ck = Checkpointer(home=store, keep=1)
    step, loss = 0, 0.0
    try:
        for _ in range(2):
            loss = model.train_step()
            step += 1
        times = []
        for _ in range(5):
            t = time.perf_counter()
            loss = model.train_step()
            step += 1
            times.append(time.perf_counter() - t)
        base = statistics.median(times)
        assert ck.save(snapshot(model, step, loss))
        nbytes = ck.last.bytes if ck.last else 0
        print(f"checkpoint: {nbytes / 1e6:.0f} MB (NumPy model: hidden {cfg.hidden}, layers {cfg.layers}, vocab "
              f"{cfg.vocab}; parameters and Adam's moments, float32) to {target}")
        print(f"step without checkpoints: median {base * 1e3:.1f} ms (5 steps)")
        sync, stall, write, slowdown = [], [], [], []
        for _ in range(args.runs):
            loss = model.train_step()
            step += 1
            t = time.perf_counter()
            assert ck.save(snapshot(model, step, loss)), "the synchronous checkpoint failed"
            sync.append(time.perf_counter() - t)

            loss = model.train_step()
            step += 1
            t = time.perf_counter()
            ck.save_async(snapshot(model, step, loss))
            stall.append(time.perf_counter() - t)
            extra = 0.0
            while ck.busy:
                s = time.perf_counter()
                loss = model.train_step()
                step += 1
                extra += time.perf_counter() - s - base
            assert ck.wait() and ck.failures == 0, "the asynchronous checkpoint failed"
            write.append(ck.last.seconds if ck.last else float("nan"))
            slowdown.append(extra)
        ms = [x * 1e3 for x in sync]
        ma = [x * 1e3 for x in stall]
        med_sync, med_async = statistics.median(sync), statistics.median(stall)
        share = med_async / med_sync * 100 if med_sync > 0 else float("nan")
        print(f"sync stall:  median {med_sync * 1e3:.1f} ms  (runs: {', '.join(f'{x:.1f}' for x in ms)} ms)")
        print(f"async stall: median {med_async * 1e3:.2f} ms  (runs: {', '.join(f'{x:.2f}' for x in ma)} ms) = "
              f"{share:.2f} % of sync (target < 10 %: {'met' if share < 10 else 'MISSED'})")
        print(f"async write: median {statistics.median(write) * 1e3:.0f} ms in the background; the steps run "
              f"meanwhile were slower by a median {statistics.median(slowdown) * 1e3:.0f} ms in total "
              "(the writer shares the CPU)")
        return 0
    finally:
        if tmp is not None and not args.keep_files:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
