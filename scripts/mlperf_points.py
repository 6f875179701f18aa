#!/usr/bin/env python3
"""Per-GPU training throughput of MLCommons Training results, on the one basis the cost model uses.

For each result directory ``<Submitter>/results/<system>/<benchmark>`` of a ``mlcommons/training_results_<round>``
checkout (a work tree, or a bare git directory read with ``git show``):

* each run's time-to-train ``T = run_stop − run_start`` (the MLLOG ``time_ms`` of the two events) and its samples
  to target ``S`` (the ``samples_count`` of ``run_stop``, else of the last ``eval_accuracy``/``block_stop``);
* the runs sorted by ``T``; with 5 or more, the fastest and the slowest are dropped (the MLPerf scoring rule);
* per-GPU samples/s = mean(S) / mean(T) / GPUs, GPUs = ``number_of_nodes × accelerators_per_node`` of
  ``<Submitter>/systems/<system>.json``.

Efficiency of a pair of systems = per-GPU samples/s of the larger / of the smaller (docs/cost-model-fit.md).

Usage: scripts/mlperf_points.py REPO Submitter/system/benchmark [...]   (prints one line per result)
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def _read(repo: Path, rel: str) -> str:
    if (repo / rel).is_file():
        return (repo / rel).read_text(encoding="utf-8", errors="replace")
    out = subprocess.run(["git", "--git-dir", str(repo), "show", f"HEAD:{rel}"], capture_output=True, text=True,
                         check=False)
    if out.returncode != 0:
        raise FileNotFoundError(rel)
    return out.stdout


def _list(repo: Path, rel: str) -> list[str]:
    if (repo / rel).is_dir():
        return sorted(p.name for p in (repo / rel).iterdir())
    out = subprocess.run(["git", "--git-dir", str(repo), "ls-tree", "--name-only", f"HEAD:{rel}"],
                         capture_output=True, text=True, check=False)
    return sorted(out.stdout.split())


def run_figures(text: str) -> tuple[float, float] | None:
    """(seconds to train, samples to target) of one result file, or None when it did not succeed."""
    start = stop = None
    samples = 0.0
    ok = False
    for line in text.splitlines():
        if ":::MLLOG" not in line:
            continue
        try:
            ev = json.loads(line.split(":::MLLOG", 1)[1])
        except ValueError:
            continue
        key, meta = ev.get("key"), ev.get("metadata") or {}
        if key == "run_start":
            start = ev["time_ms"]
        elif key == "run_stop":
            stop = ev["time_ms"]
            ok = meta.get("status") == "success"
            samples = float(meta.get("samples_count") or meta.get("epoch_num") or samples)
        elif key in ("eval_accuracy", "block_stop", "eval_stop") and meta.get("samples_count"):
            samples = float(meta["samples_count"])
        elif key in ("eval_accuracy", "block_stop") and meta.get("epoch_num") and not samples:
            samples = float(meta["epoch_num"])
    if start is None or stop is None or not ok:
        return None
    return (stop - start) / 1000.0, samples


def result(repo: Path, path: str) -> dict[str, float | int | str]:
    submitter, system, bench = path.split("/")
    sysj = json.loads(_read(repo, f"{submitter}/systems/{system}.json"))
    gpus = int(sysj["number_of_nodes"]) * int(sysj["accelerators_per_node"])
    runs = []
    for name in _list(repo, f"{submitter}/results/{system}/{bench}"):
        if name.startswith("result_") and name.endswith(".txt"):
            fig = run_figures(_read(repo, f"{submitter}/results/{system}/{bench}/{name}"))
            if fig is not None:
                runs.append(fig)
    runs.sort()
    kept = runs[1:-1] if len(runs) >= 5 else runs
    t = sum(r[0] for r in kept) / len(kept)
    s = sum(r[1] for r in kept) / len(kept)
    return {"result": path, "gpus": gpus, "runs": len(runs), "kept": len(kept), "minutes": t / 60.0,
            "samples": s, "per_gpu_samples_s": s / t / gpus,
            "accelerator": str(sysj.get("accelerator_model_name", ""))}


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    repo = Path(argv[0])
    for p in argv[1:]:
        try:
            r = result(repo, p)
        except (FileNotFoundError, KeyError, ZeroDivisionError, ValueError) as exc:
            print(f"{p}: ERROR {type(exc).__name__} {exc}")
            continue
        print(f"{r['result']}: {r['gpus']} GPUs, {r['kept']}/{r['runs']} runs, {r['minutes']:.2f} min, "
              f"{r['samples']:.0f} samples, {r['per_gpu_samples_s']:.4f} samples/s/GPU ({r['accelerator']})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
