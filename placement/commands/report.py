"""``placement report``: unit economics per team and workload class over a window (issue 26), from the hub's Kueue
Workloads and the trainer's Prometheus metrics.

Per run (a Workload whose Job/JobSet carries ``gpufleet.io/job-spec``, which ``placement submit`` writes on every job,
direct or through the hub: :mod:`placement.model.contract`; :func:`read_run` reads it):

- GPU-hours admitted: the Workload's GPUs (its pod sets) × the hours it was admitted within the window: from
  its ``Admitted`` condition's transition to True until its ``Finished`` condition's transition (or the window's
  end while still admitted). A Workload not admitted now and not finished is not counted (its admitted span is
  unknown).
- progress: ``increase(gpufleet_trainer_tokens_total[W])`` (samples for other workload classes) and the steps
  (``max_over_time - min_over_time`` of ``gpufleet_trainer_step``) of the Prometheus ``job`` label equal to the
  run's name. GPU-hours of progress = the tokens (samples) / the planned per-GPU rate / 3600; the planned rate is
  the calibration's measured ``speed`` row of the workload class on the plan's accelerator (``placement profile``
  / ``calibrate``); without one, progress GPU-hours are unknown (null).
- utilisation = GPU-hours of progress / GPU-hours admitted.
- cost: measured = GPU-hours admitted × the plan's price per GPU-hour (the engine's chosen candidate for the job
  spec, on the catalog); planned = that candidate's compute + egress. ``$ per 1,000 steps`` and ``$ per 1,000
  tokens`` (or samples) divide the measured cost.
- interruptions: the Workload's evictions (``status.schedulingStats.evictions``, else ``requeueState.count``).

Groups sum their runs; ratios are of the sums. The JSON document is ``gpufleet.report/v1`` (fields only added).
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

SCHEMA = "gpufleet.report/v1"


@dataclass(frozen=True)
class Run:
    """One job's figures over the window. Hours, GPU-hours, USD; None = unknown."""

    team: str
    workload: str
    name: str
    gpus: int
    admitted_gpu_hours: float
    evictions: int = 0
    tokens: float | None = None  # tokens, or samples for a class measured in samples (``unit``)
    steps: float | None = None
    unit: str = "tokens"
    progress_gpu_hours: float | None = None
    usd_per_gpu_hour: float | None = None
    planned_usd: float | None = None

    @property
    def measured_usd(self) -> float | None:
        return None if self.usd_per_gpu_hour is None else self.admitted_gpu_hours * self.usd_per_gpu_hour


@dataclass(frozen=True)
class Group:
    team: str
    workload: str
    runs: tuple[Run, ...] = field(default=())

    def _sum(self, get: Callable[[Run], float | None]) -> float | None:
        values = [get(r) for r in self.runs]
        return None if not values or any(v is None for v in values) else float(sum(v for v in values if v is not None))

    def doc(self) -> dict[str, Any]:
        admitted = sum(r.admitted_gpu_hours for r in self.runs)
        progress = self._sum(lambda r: r.progress_gpu_hours)
        measured = self._sum(lambda r: r.measured_usd)
        planned = self._sum(lambda r: r.planned_usd)
        tokens = self._sum(lambda r: r.tokens)
        steps = self._sum(lambda r: r.steps)
        n = len(self.runs)
        units = {r.unit for r in self.runs}
        return {
            "team": self.team, "workload": self.workload, "runs": n,
            "gpu_hours_admitted": _r(admitted), "gpu_hours_progress": _r(progress),
            "utilisation": _r(None if progress is None or admitted <= 0 else progress / admitted),
            "usd_measured": _r(measured), "usd_planned": _r(planned),
            "usd_per_run": _r(None if measured is None or n == 0 else measured / n),
            "usd_per_run_planned": _r(None if planned is None or n == 0 else planned / n),
            "usd_per_1000_steps": _r(None if measured is None or not steps else measured / steps * 1000),
            "usd_per_1000_units": _r(None if measured is None or not tokens else measured / tokens * 1000),
            "unit": units.pop() if len(units) == 1 else "mixed",
            "interruptions": sum(r.evictions for r in self.runs),
        }


def add_arguments(rp: argparse.ArgumentParser) -> None:
    from placement.commands.common import add_calibration_flags, seconds

    rp.add_argument("--kubeconfig", metavar="PATH", help="the hub's kubeconfig (default: $KUBECONFIG, ~/.kube/config)")
    rp.add_argument("--prometheus", metavar="URL", help="the Prometheus server with the trainer's metrics "
                                                        "(without it, progress and utilisation are unknown)")
    rp.add_argument("--from", dest="start", metavar="TIME", help="window start, ISO-8601 (default: 7 days before --to)")
    rp.add_argument("--to", dest="end", metavar="TIME", help="window end, ISO-8601 (default: now)")
    rp.add_argument("--chart", metavar="FILE.png", help="also draw planned vs measured cost per run (needs the "
                                                         "charts extra: matplotlib)")
    rp.add_argument("--catalog", action="append", default=[], metavar="CLOUD=PATH",
                    help="price the plans with a SkyPilot-format vms.csv for CLOUD instead of the embedded catalog")
    rp.add_argument("--timeout", type=seconds(), default=10.0, metavar="SECONDS",
                    help="per request, wall time (default 10; at most 3600)")
    rp.add_argument("--json", action="store_true", help="print one gpufleet.report/v1 JSON document")
    add_calibration_flags(rp)


def run(args: argparse.Namespace) -> int:
    """``placement report``, with a fleet error (an unreachable hub) as its one-line message and exit code."""
    import sys

    from placement.fleet.errors import FleetError

    try:
        return run_report(args)
    except FleetError as exc:
        print(f"placement: error: {exc}", file=sys.stderr)
        return exc.code


def _r(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else round(x, 4)


def groups(runs: Iterable[Run]) -> list[Group]:
    by: dict[tuple[str, str], list[Run]] = defaultdict(list)
    for r in runs:
        by[(r.team, r.workload)].append(r)
    return [Group(team=t, workload=w, runs=tuple(rs)) for (t, w), rs in sorted(by.items())]


def report_doc(runs: Sequence[Run], start: dt.datetime, end: dt.datetime) -> dict[str, Any]:
    return {"schema": SCHEMA, "window": {"from": f"{start:%Y-%m-%dT%H:%M:%SZ}", "to": f"{end:%Y-%m-%dT%H:%M:%SZ}"},
            "groups": [g.doc() for g in groups(runs)],
            "runs": [{"team": r.team, "workload": r.workload, "name": r.name, "gpus": r.gpus,
                      "gpu_hours_admitted": _r(r.admitted_gpu_hours), "gpu_hours_progress": _r(r.progress_gpu_hours),
                      "usd_measured": _r(r.measured_usd), "usd_planned": _r(r.planned_usd),
                      "tokens": _r(r.tokens), "steps": _r(r.steps), "unit": r.unit, "interruptions": r.evictions}
                     for r in runs]}


def report_text(doc: Mapping[str, Any]) -> str:
    from placement.commands.render import table

    def f(x: Any, fmt: str = ",.1f") -> str:
        return "-" if x is None else format(x, fmt)

    rows = [[g["team"], g["workload"], str(g["runs"]), f(g["gpu_hours_admitted"]), f(g["gpu_hours_progress"]),
             f(g["utilisation"], ".0%"), f(g["usd_per_run"], ",.2f"), f(g["usd_per_run_planned"], ",.2f"),
             f(g["usd_per_1000_steps"], ",.2f"), f(g["usd_per_1000_units"], ",.4f"), str(g["interruptions"])]
            for g in doc["groups"]]
    head = f"report {doc['window']['from']} to {doc['window']['to']}: {len(doc['runs'])} runs"
    if not rows:
        return head + " (no admitted gpufleet Workloads in the window)"
    return head + "\n" + table(("team", "workload", "runs", "GPU-h admitted", "GPU-h progress", "util",
                                "$/run", "$/run planned", "$/1k steps", "$/1k tokens|samples", "interruptions"),
                               rows, right=set(range(2, 11)))


def chart(doc: Mapping[str, Any], path: str) -> None:
    """A PNG of planned against measured cost per run, per team and workload class (matplotlib, Agg), written
    whole or not at all (:func:`placement.files.outputs.written`). The path and the extra were checked before the
    report was made (:func:`check_chart`)."""
    import matplotlib

    from placement.files.outputs import written

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups_ = doc["groups"]
    labels = [f"{g['team']}/{g['workload']}" for g in groups_]
    planned = [g["usd_per_run_planned"] or 0.0 for g in groups_]
    measured = [g["usd_per_run"] or 0.0 for g in groups_]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(labels) + 2), 4.0))
    xs = range(len(labels))
    ax.bar([x - 0.2 for x in xs], planned, width=0.4, label="planned $/run")
    ax.bar([x + 0.2 for x in xs], measured, width=0.4, label="measured $/run")
    ax.set_xticks(list(xs), labels, rotation=20, ha="right")
    ax.set_ylabel("USD per run")
    ax.set_title(f"Planned vs measured cost per run, {doc['window']['from'][:10]} to {doc['window']['to'][:10]}")
    ax.legend()
    fig.tight_layout()
    try:
        with written(path) as fh:
            fig.savefig(fh, format="png")
    finally:
        plt.close(fig)



# ----------------------------------------------------------------------------- adapters (Kubernetes, Prometheus)


def _admitted_hours(wl: Mapping[str, Any], lo: float, hi: float) -> float:
    from placement.dispatch.snapshot import _condition, parse_time

    adm = _condition(wl, "Admitted")
    fin = _condition(wl, "Finished")
    finished = fin is not None and fin.get("status") == "True"
    if adm is None:
        return 0.0
    if adm.get("status") == "True":
        start, end = parse_time(adm.get("lastTransitionTime")), hi
        if finished:
            end = parse_time(fin.get("lastTransitionTime")) or hi  # type: ignore[union-attr]
    else:
        return 0.0
    if start is None:
        return 0.0
    return max(0.0, min(end, hi) - max(start, lo)) / 3600.0


def read_run(wl: Mapping[str, Any], owner: Mapping[str, Any] | None) -> tuple[tuple[Any, int, str] | None, str | None]:
    """``((job spec, GPUs, job spec text), None)`` for a Workload and its owner Job/JobSet as ``placement submit``
    wrote it (:data:`placement.model.contract.JOB_SPEC`), or ``(None, why it is skipped)``. The GPUs are the
    Workload's pod sets' (the job spec's when it has none). Only the job spec is required: every other annotation
    is the dispatcher's, never a reason to skip a run."""
    from placement.dispatch.snapshot import needs, read_job_spec
    from placement.model import contract

    meta = (owner or {}).get("metadata") or {}
    ann = meta.get("annotations") if isinstance(meta, Mapping) else None
    text = ann.get(contract.JOB_SPEC) if isinstance(ann, Mapping) else None
    if text is None or text == "":
        return None, f"no {contract.JOB_SPEC} on its Job/JobSet (not submitted by placement submit)"
    parsed, why = read_job_spec(text)
    if parsed is None:
        return None, why
    _, job = parsed
    gpus = sum(n.count * n.per_pod.gpus for n in needs(wl)) or job.gpus
    return (job, gpus, str(text)), None


def collect(api: Any, prometheus: str | None, start: dt.datetime, end: dt.datetime, calibration: Any,
            offers: Sequence[Any], timeout_s: float = 10.0) -> tuple[list[Run], list[str]]:
    """Runs of the window from the hub's API (``api``) and Prometheus; and one line per Workload skipped or
    Prometheus answer partly left out."""
    from placement.dispatch.snapshot import owner_key
    from placement.fleet.kube import Resource, list_objects
    from placement.model.calibration import calibrated_job
    from placement.model.kueue import API_GROUP
    from placement.plan.job import plan

    workloads, _ = list_objects(api, Resource(API_GROUP, "v1beta2", "workloads"), timeout_s)
    owners: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    for kind, res in (("Job", Resource("batch", "v1", "jobs")),
                      ("JobSet", Resource("jobset.x-k8s.io", "v1alpha2", "jobsets"))):
        items, _ = list_objects(api, res, timeout_s)
        for o in items:
            m = o.get("metadata") or {}
            owners[(kind, str(m.get("namespace") or ""), str(m.get("name") or ""))] = o
    lo, hi = start.timestamp(), end.timestamp()
    runs: list[Run] = []
    skipped: list[str] = []
    progress = _progress(prometheus, start, end, timeout_s, skipped) if prometheus else {}
    plans: dict[str, tuple[float | None, float | None, str]] = {}
    for wl in workloads:
        meta = wl.get("metadata") or {}
        where = f"{meta.get('namespace')}/{meta.get('name')}"
        try:
            hours = _admitted_hours(wl, lo, hi)
            if hours <= 0:
                continue
            key = owner_key(wl)
            read, why = read_run(wl, owners.get(key) if key else None)
            if read is None:
                skipped.append(f"skipped {where}: {why}")
                continue
            job, gpus, text = read
            if text not in plans:
                p = plan(calibrated_job(calibration, job), offers).chosen
                plans[text] = ((p.usd_per_hour / max(p.billed_gpus, 1), p.cost.compute_usd + p.cost.egress_usd,
                                p.offer.shape.accelerator) if p is not None else (None, None, job.accelerators[0]))
            per_gpu_usd, planned, accel = plans[text]
            got = progress.get(job.name, {})
            unit = "tokens" if job.workload == "llm" else "samples"
            amount = got.get(unit)
            rate = _planned_rate(calibration, job.workload, accel, unit)
            runs.append(Run(team=job.team or str(meta.get("namespace") or ""), workload=job.workload, name=job.name,
                            gpus=gpus, admitted_gpu_hours=hours * gpus, evictions=_evictions(wl), tokens=amount,
                            steps=got.get("steps"), unit=unit,
                            progress_gpu_hours=None if amount is None or rate is None else amount / rate / 3600.0,
                            usd_per_gpu_hour=per_gpu_usd, planned_usd=planned))
        except Exception as exc:  # noqa: BLE001 - one unreadable Workload is reported, never stops the report
            from placement.dispatch.snapshot import problem_text

            skipped.append(f"skipped {where}: {problem_text(exc)}")
    return runs, skipped


def _evictions(wl: Mapping[str, Any]) -> int:
    status = wl.get("status") or {}
    stats = (status.get("schedulingStats") or {}).get("evictions") or []
    return sum(int(e.get("count") or 0) for e in stats) or int((status.get("requeueState") or {}).get("count") or 0)


def _planned_rate(cal: Any, workload: str, accelerator: str, unit: str) -> float | None:
    if cal is None:
        return None
    want = f"{unit}/s"
    rows = [r for r in cal.speed if r.workload == workload and r.accelerator == accelerator and r.unit == want]
    if not rows:
        return None
    return max(rows, key=lambda r: (r.nodes == 1, r.runs)).per_gpu


def _progress(url: str, start: dt.datetime, end: dt.datetime, timeout_s: float,
              warnings: list[str]) -> dict[str, dict[str, float]]:
    """Tokens, samples and steps per training job (the ``job`` label) over the window. Samples the server
    answered malformed, or without a finite number, are left out with a line in ``warnings`` per query."""
    from placement.prometheus.client import query

    window = f"{max(1, int((end - start).total_seconds()))}s"
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for key, promql in (("tokens", f"sum by (job) (increase(gpufleet_trainer_tokens_total[{window}]))"),
                        ("samples", f"sum by (job) (increase(gpufleet_trainer_samples_total[{window}]))"),
                        ("steps", f"max by (job) (max_over_time(gpufleet_trainer_step[{window}]) - "
                                  f"min_over_time(gpufleet_trainer_step[{window}]))")):
        answer = query(url, promql, end, timeout_s=timeout_s)
        dropped = dict(answer.dropped)
        for metric, v in answer.samples:
            name = metric.get("job", "")
            if not name:
                dropped["without a job label"] = dropped.get("without a job label", 0) + 1
            elif not 0 <= v < math.inf:
                dropped["with a value that is not a finite count"] = dropped.get(
                    "with a value that is not a finite count", 0) + 1
            else:
                out[name][key] = v
        if dropped:
            text = ", ".join(f"{n} {why}" for why, n in sorted(dropped.items()))
            warnings.append(f"--prometheus: {key}: left out {text} (those runs' progress is unknown)")
    return out


def run_report(args: Any) -> int:
    """``placement report``: 0 shown, 1 the hub or Prometheus unreachable, 2 bad input. The flags, the files, the
    output path and the extras are checked before the hub is asked anything."""
    import json
    import sys

    from placement.commands.calibrate import window
    from placement.console import require_extra
    from placement.errors import redact_url
    from placement.files.calibrations import resolve
    from placement.files.inputs import load_catalog
    from placement.prometheus.client import PromError, server_url

    now = dt.datetime.now(dt.UTC)
    start, end = window(args, now)
    end = end or now
    start = start or end - dt.timedelta(days=7)
    if args.prometheus:
        server_url(args.prometheus)  # a malformed URL is named (without its credentials) before any work
    from placement.commands.common import check_chart

    check_chart(args.chart)
    require_extra("submit", ("kubernetes",), "placement report (it reads the hub's Workloads)")
    cal = resolve(args)
    offers = load_catalog(args.catalog).offers
    from placement.fleet.kube import Unreadable, api_client, is_unreachable

    try:
        api = api_client(path=args.kubeconfig, what="--kubeconfig", default=not args.kubeconfig)
        runs, skipped = collect(api, args.prometheus, start, end, cal, offers, args.timeout)
    except PromError as exc:
        print(f"placement: error: --prometheus: {redact_url(exc)}", file=sys.stderr)
        return 1
    except Unreadable as exc:
        print(f"placement: error: hub API: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        if not is_unreachable(exc):
            raise
        print(f"placement: error: cannot reach the hub's API server ({exc.__class__.__name__})", file=sys.stderr)
        return 1
    for line in skipped:
        print(f"placement: warning: {line}", file=sys.stderr)
    doc = report_doc(runs, start, end)
    if args.chart:
        chart(doc, args.chart)
    sys.stdout.write((json.dumps(doc, indent=2, allow_nan=False) if args.json else report_text(doc)) + "\n")
    return 0
