"""SkyPilot's side of scripts/bench_skypilot.py; runs under .venv-sky (skypilot==0.14.1), never under .venv.

Usage (by bench_skypilot.py only): ``_sky_optimize.py SPEC.json OUT.json``. SPEC holds ``mode`` ("warm" or "cold"),
``repeat``, ``scenarios`` (name, accelerator, count, nodes, spot, cloud or null) and ``home``: the temporary HOME
bench_skypilot.py made, holding the catalogs under ``.sky/catalogs/v8``. OUT gets the timings (CPU seconds from
``time.process_time``, wall seconds from ``time.perf_counter``) and each scenario's pick.

What is timed is ``sky.optimizer.Optimizer.optimize(dag, minimize=COST, quiet=True)``: in 0.14.1 the public
``sky.optimize`` is an SDK call that sends the DAG to the API server (a local one it would start), whose executor
runs this same ``Optimizer.optimize``; timing the core leaves the HTTP round trip and the request database out, in
SkyPilot's favour. Before each timed call the request-scoped caches are cleared, as the API server's executor does
per request (sky/server/requests/executor.py); the process-wide caches (catalog data frames) stay loaded.

Isolation: it refuses to run unless HOME is the directory named in SPEC (so ~/.sky is never read or written); any
catalog download SkyPilot attempts (requests.get/Session.request) raises instead of reaching the network; the
enabled clouds are AWS and GCP, without credentials, by replacing ``sky.check.get_cached_enabled_clouds_or_refresh``
(what the optimizer calls; 0.14.1 reads them from its state database otherwise, after credential checks).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from typing import Any


class NetworkRefused(RuntimeError):
    pass


def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise NetworkRefused(f"bench: SkyPilot tried to reach the network ({args[:2]!r}); its catalogs must be local")


def _isolate(spec: dict[str, Any]) -> None:
    home = os.path.realpath(spec["home"])
    if os.path.realpath(os.path.expanduser("~")) != home or os.environ.get("SKY_RUNTIME_DIR"):
        sys.exit(f"_sky_optimize.py: HOME must be the bench's temporary directory {home} (and SKY_RUNTIME_DIR unset)")
    import requests

    requests.get = _refuse  # type: ignore[assignment]
    requests.Session.request = _refuse  # type: ignore[method-assign]


def _enable_aws_gcp() -> None:
    import sky
    from sky import check

    enabled = [sky.clouds.AWS(), sky.clouds.GCP()]

    def cached_enabled_clouds(capability: Any, raise_if_no_cloud_access: bool = False) -> list[Any]:
        del capability, raise_if_no_cloud_access
        return list(enabled)

    check.get_cached_enabled_clouds_or_refresh = cached_enabled_clouds  # type: ignore[assignment]


def _dag(s: dict[str, Any]) -> tuple[Any, Any]:
    import sky

    with sky.Dag() as dag:
        task = sky.Task(name=s["name"], num_nodes=s["nodes"])
        task.set_resources(sky.Resources(infra=s["cloud"], accelerators={s["accelerator"]: s["count"]},
                                         use_spot=s["spot"]))
    return dag, task


def _pick(task: Any) -> dict[str, Any]:
    best = task.best_resources
    if best is None:
        return {"cloud": None}
    return {"cloud": str(best.cloud).lower(), "region": best.region, "zone": best.zone,
            "instance_type": best.instance_type, "nodes": task.num_nodes,
            "usd_per_hour": best.get_cost(3600) * task.num_nodes}


def _optimize(s: dict[str, Any]) -> tuple[float, float, dict[str, Any]]:
    from sky import exceptions, optimizer
    from sky.utils import annotations, common

    dag, task = _dag(s)
    annotations.clear_request_level_cache()
    c0, w0 = time.process_time(), time.perf_counter()
    try:
        optimizer.Optimizer.optimize(dag, minimize=common.OptimizeTarget.COST, quiet=True)
        pick = _pick(task)
    except exceptions.ResourcesUnavailableError as e:
        pick = {"cloud": None, "error": str(e).splitlines()[0][:200]}
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    return cpu, wall, pick


def main() -> None:
    spec_path, out_path = sys.argv[1], sys.argv[2]
    with open(spec_path, encoding="utf-8") as fh:
        spec = json.load(fh)
    _isolate(spec)
    c0, w0 = time.process_time(), time.perf_counter()
    import sky

    out: dict[str, Any] = {"import_cpu": time.process_time() - c0, "import_wall": time.perf_counter() - w0,
                           "version": sky.__version__}
    _enable_aws_gcp()
    scenarios = spec["scenarios"]
    first = [_optimize(s) for s in scenarios]  # cold: the catalogs are read and the caches filled here
    out["first"] = [{"cpu": c, "wall": w, "pick": p} for c, w, p in first]
    if spec["mode"] == "warm":
        samples: list[list[tuple[float, float]]] = [[] for _ in scenarios]
        for _ in range(spec["repeat"]):  # round-robin, so every scenario sees the same machine load
            for i, s in enumerate(scenarios):
                cpu, wall, _ = _optimize(s)
                samples[i].append((cpu, wall))
        out["warm"] = [{"cpu": statistics.median(c for c, _ in ss), "wall": statistics.median(w for _, w in ss)}
                       for ss in samples]
    with open(out_path, "w", encoding="utf-8") as fh:
        json.dump(out, fh)


if __name__ == "__main__":
    main()
