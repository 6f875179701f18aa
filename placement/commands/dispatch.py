"""``placement dispatch``: parse and check the flags, build the controller, run it (or one pass).

Exit codes: 0 ok (``--once``: the pass ran; long-running: stopped by SIGTERM/SIGINT), 1 the hub's API
server is unreachable, 2 bad flags or a bad fleet/catalog file (one line naming the flag and the fix).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import socket
import sys
import threading
from typing import Any

from placement.errors import UsageError
from placement.fleet.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, FleetError

# Caps of the numeric flags: far above any sensible value, low enough that every figure stays finite.
MAX_USD_PER_GPU_HOUR = 10_000.0
MAX_HOURS = 10_000.0
MAX_SECONDS = 86_400.0 * 7
MAX_TIMEOUT_S = 600.0


def add_arguments(d: argparse.ArgumentParser) -> None:
    """The ``dispatch`` sub-command's flags (docs/kueue-hub.md#placement-dispatch)."""
    from placement.commands.common import add_calibration_flags

    d.description = ("The hub's MultiKueue dispatcher, a controller that runs on the hub (the hub stack "
                     "deploys it with gpufleet:hub.dispatcher: External). For every Workload waiting in the hub's "
                     "all-workers queue it nominates the worker with the lowest cost: the placement engine's total "
                     "plus the expected wait for admission, moving on when the nominated worker has not admitted "
                     "within --admission-deadline-seconds. It needs the hub's API (--kubeconfig or --in-cluster; "
                     "exit 1 when unreachable) and a fleet file: worker key -> that worker stack's outputs, e.g. "
                     "placement/examples/fleet.json (the example stacks' workers). --once --dry-run decides one "
                     "pass, prints it and writes nothing.")
    where = d.add_mutually_exclusive_group()
    where.add_argument("--in-cluster", action="store_true", help="use the pod's service account (in the hub cluster)")
    where.add_argument("--kubeconfig", metavar="PATH", help="the hub's kubeconfig (default: $KUBECONFIG or "
                                                            "~/.kube/config)")
    d.add_argument("--fleet", required=True, metavar="PATH",
                   help="fleet file: worker key -> that worker stack's outputs, without kubeconfig (ConfigMap "
                        "gpufleet-fleet, key fleet.json)")
    d.add_argument("--namespace", default="kueue-system", help="namespace of the Lease and the kubeconfig Secrets "
                                                               "(default kueue-system)")
    d.add_argument("--lease", metavar="NAME", help="coordination.k8s.io Lease to elect a leader with; without it this "
                                                   "process assumes it is the only dispatcher")
    d.add_argument("--identity", default=os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}",
                   help="leader identity (default: $POD_NAME, else host-pid)")
    d.add_argument("--catalog", action="append", default=[], metavar="CLOUD=PATH",
                   help="price pools with a SkyPilot-format vms.csv for CLOUD instead of the embedded catalog")
    live = d.add_argument_group("live prices (needs the 'live' extra: boto3, google-cloud-compute/-billing)")
    live.add_argument("--live", action="store_true",
                      help="overlay live spot prices and offerings from AWS and GCP on the catalog, re-read in the "
                           "background every --live-refresh-seconds (the last good prices are kept on failure)")
    live.add_argument("--live-refresh-seconds", type=float, default=900.0, metavar="S",
                      help="with --live: seconds between refreshes (default 900)")
    live.add_argument("--aws-profile", metavar="NAME", help="AWS profile (default: the standard credential chain, "
                                                            "e.g. the pod's IRSA role)")
    live.add_argument("--gcp-project", metavar="ID", help="GCP project (default: from Application Default "
                                                          "Credentials / GOOGLE_CLOUD_PROJECT)")
    live.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS",
                      help="per-call timeout of the live queries (default 5)")
    d.add_argument("--wait-usd-per-gpu-hour", type=float, default=2.0, metavar="USD",
                   help="price of waiting for admission, per GPU of the job, per hour (default 2.0); a job "
                        "whose spec sets usd_per_hour_of_delay is priced at that instead")
    d.add_argument("--admission-deadline-seconds", type=float, default=300.0, metavar="S",
                   help="move to the next best worker when the nominated one has not admitted by then (default 300)")
    d.add_argument("--default-hours", type=float, default=4.0, metavar="H",
                   help="remaining time of a running workload of unknown length (default 4)")
    d.add_argument("--metrics-port", type=int, default=9090, metavar="PORT",
                   help="/metrics and /healthz port (default 9090; 0: none)")
    d.add_argument("--resync-seconds", type=float, default=30.0, metavar="S", help="pass at least this often "
                                                                                   "(default 30)")
    d.add_argument("--lease-duration-seconds", type=int, default=15, metavar="S",
                   help="with --lease: how long a leader's Lease holds without renewal (default 15)")
    d.add_argument("--renew-deadline-seconds", type=int, default=10, metavar="S",
                   help="with --lease: the leader steps down when it cannot renew within this (default 10)")
    d.add_argument("--retry-period-seconds", type=int, default=2, metavar="S",
                   help="with --lease: seconds between attempts to acquire or renew the Lease (default 2)")
    d.add_argument("--watch-timeout-seconds", type=int, default=60, metavar="S",
                   help="server-side timeout of each watch request before it is resumed (default 60)")
    d.add_argument("--worker-timeout-seconds", type=float, default=10.0, metavar="S",
                   help="deadline of one worker's reads, in all; a worker that has not answered by then is stale "
                        "for the pass (not scored), never waited on (default 10)")
    d.add_argument("--pass-timeout-seconds", type=float, default=60.0, metavar="S",
                   help="with --once: deadline of the whole pass's reads (default 60)")
    d.add_argument("--once", action="store_true", help="one reconcile pass, print the decisions, exit")
    d.add_argument("--dry-run", action="store_true", help="decide but write nothing (no nomination, no Event)")
    d.add_argument("--json", action="store_true", help="with --once: one gpufleet.placement/v1 document")
    d.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"),
                   help="log verbosity on stderr (default info)")
    add_calibration_flags(d)


def _check(args: argparse.Namespace) -> None:
    from placement.dispatch.leader import check_durations

    def positive(value: float, flag: str, cap: float, zero_ok: bool = False) -> None:
        # Bounded like every other number: a value beyond the cap (1e308, inf) would print Infinity or overflow.
        if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok) or value > cap:
            raise UsageError(f"{flag}: must be a {'non-negative' if zero_ok else 'positive'} number of at most "
                             f"{cap:g}, got {value:g}")

    positive(args.wait_usd_per_gpu_hour, "--wait-usd-per-gpu-hour", MAX_USD_PER_GPU_HOUR, zero_ok=True)
    positive(args.admission_deadline_seconds, "--admission-deadline-seconds", MAX_SECONDS)
    positive(args.default_hours, "--default-hours", MAX_HOURS)
    positive(args.resync_seconds, "--resync-seconds", MAX_SECONDS)
    positive(args.live_refresh_seconds, "--live-refresh-seconds", MAX_SECONDS)
    positive(args.timeout, "--timeout", MAX_TIMEOUT_S)
    positive(args.worker_timeout_seconds, "--worker-timeout-seconds", MAX_TIMEOUT_S)
    positive(args.pass_timeout_seconds, "--pass-timeout-seconds", MAX_SECONDS)
    if not 0 <= args.metrics_port <= 65535:
        raise UsageError(f"--metrics-port: must be 0..65535, got {args.metrics_port}")
    if not 1 <= args.watch_timeout_seconds <= MAX_SECONDS:
        raise UsageError(f"--watch-timeout-seconds: must be 1..{MAX_SECONDS:g}")
    for flag, value in (("--lease-duration-seconds", args.lease_duration_seconds),
                        ("--renew-deadline-seconds", args.renew_deadline_seconds),
                        ("--retry-period-seconds", args.retry_period_seconds)):
        if not 0 <= value <= MAX_SECONDS:
            raise UsageError(f"{flag}: must be 0..{MAX_SECONDS:g}, got {value}")
    if args.lease:
        problem = check_durations(args.lease_duration_seconds, args.renew_deadline_seconds, args.retry_period_seconds)
        if problem:
            raise UsageError(problem)
    if args.json and not args.once:
        raise UsageError("--json: only with --once")


def run_dispatch(args: argparse.Namespace) -> int:
    """``placement dispatch``: 0 ok, 1 hub unreachable, 2 bad flags/config."""
    from placement.console import require_extra
    from placement.fleet.redact import redact

    require_extra("dispatch", ("kubernetes", "prometheus_client"), "placement dispatch")
    try:
        return _run(args)
    except FleetError as exc:
        print(f"placement: error: {redact(exc)}", file=sys.stderr)
        return exc.code


def _run(args: argparse.Namespace) -> int:
    from placement.dispatch.controller import Controller, Options
    from placement.dispatch.gcsettings import tune_gc
    from placement.dispatch.model import Pricing, Settings
    from placement.dispatch.prices import LivePrices, LiveSettings, catalog_time
    from placement.dispatch.telemetry import HealthServer, Metrics, setup_logging
    from placement.files.inputs import load_catalog
    from placement.fleet.kube import Unreadable, api_client, api_message, is_unreachable
    from placement.fleet.outputs import load_fleet
    from placement.fleet.redact import redact

    _check(args)
    tune_gc()  # before the informers fill their caches: fewer collections scanning them during each pass
    fleet = load_fleet(args.fleet)
    catalog = load_catalog(args.catalog)
    setup_logging(args.log_level)
    if args.in_cluster:
        hub = api_client(in_cluster=True)
    else:
        hub = api_client(path=args.kubeconfig, what="--kubeconfig", default=not args.kubeconfig)
    options = Options(
        fleet=fleet, pricing=Pricing(tuple(catalog.offers), source="catalog", read_at=catalog_time(catalog)),
        identity=args.identity,
        namespace=args.namespace, lease=args.lease,
        settings=Settings(wait_usd_per_gpu_hour=args.wait_usd_per_gpu_hour,
                          deadline_s=args.admission_deadline_seconds, default_hours=args.default_hours,
                          calibration=_calibration(args)),
        resync_s=args.resync_seconds, lease_duration_s=args.lease_duration_seconds,
        renew_deadline_s=args.renew_deadline_seconds, retry_period_s=args.retry_period_seconds,
        watch_timeout_s=args.watch_timeout_seconds, dry_run=args.dry_run,
        worker_timeout_s=args.worker_timeout_seconds, pass_timeout_s=args.pass_timeout_seconds)
    metrics = Metrics()
    prices = None
    if args.live:
        prices = LivePrices(catalog, fleet, LiveSettings(aws_profile=args.aws_profile, gcp_project=args.gcp_project,
                                                         timeout_s=args.timeout, refresh_s=args.live_refresh_seconds),
                            metrics)
    controller = Controller(hub, options, metrics, prices=prices)
    if args.once:
        from kubernetes.client.exceptions import ApiException

        try:
            result = controller.run_once()
        except ApiException as exc:
            code = EXIT_FAILED if exc.status in (401, 403) or exc.status >= 500 else EXIT_BAD_INPUT
            print(f"placement: error: hub API: HTTP {exc.status}: {api_message(exc)}", file=sys.stderr)
            return code
        except Unreadable as exc:
            print(f"placement: error: hub API: {redact(exc)}", file=sys.stderr)
            return EXIT_FAILED
        except Exception as exc:
            if not is_unreachable(exc):
                raise
            print(f"placement: error: cannot reach the hub's API server ({exc.__class__.__name__})", file=sys.stderr)
            return EXIT_FAILED
        _print_once(controller, result, args)
        return EXIT_OK
    server = HealthServer(metrics, controller.healthy, args.metrics_port).start() if args.metrics_port else None
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    controller.start()
    stop.wait()
    controller.stop()
    if server:
        server.close()
    return EXIT_OK


def _calibration(args: argparse.Namespace) -> Any:
    """--calibration FILE, else the newest file placement calibrate wrote, unless --no-calibration (issue 26)."""
    from placement.files.calibrations import resolve

    return resolve(args)


def _print_once(controller: Any, result: Any, args: argparse.Namespace) -> None:
    from placement.commands.render import SCHEMA, table
    from placement.dispatch.controller import prices_doc, summarize, worker_conditions, worker_problems

    rows = summarize(result)
    # Leadership as it was during the pass: run_once() has stopped the elector by now.
    written = not args.dry_run and controller.last_pass_leading
    prices = prices_doc(controller)
    if args.json:
        doc = {"schema": SCHEMA, "kind": "dispatch", "written": written, "decisions": rows,
               "workers": worker_problems(controller), "worker_conditions": worker_conditions(controller),
               "prices": prices}
        print(json.dumps(doc, indent=2, allow_nan=False))
        return
    body = table(("workload", "action", "reason", "worker", "$", "wait h"),
                 [[r["workload"], r["action"], r["reason"], ",".join(r["clusters"]) or "-",
                   "-" if r["usd"] is None else f"{r['usd']:,.2f}",
                   "-" if r["wait_hours"] is None else f"{r['wait_hours']:.2f}"] for r in rows],
                 right={4, 5}) if rows else "(no Workload waits for a nomination)"
    print(body)
    age = "" if prices["age_s"] is None else f", {prices['age_s'] / 3600:.1f} h old"
    regions = ", ".join(f"{r} {st}" for r, st in prices["regions"].items())
    print(f"prices: {prices['source']}{age}" + (f" ({regions})" if regions else ""), file=sys.stderr)
    for problem in worker_problems(controller):
        print(f"worker {problem}", file=sys.stderr)
    for r in rows:  # an annotation of the job read as unknown (never a reason to wait): one line each
        for warning in r["warnings"]:
            print(f"placement: warning: {r['workload']}: {warning}", file=sys.stderr)
    if not written:
        why = "--dry-run" if args.dry_run else f"Lease {args.lease} is held by another replica"
        print(f"nothing written ({why})", file=sys.stderr)
