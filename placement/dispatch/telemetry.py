"""What the dispatcher shows the outside: Prometheus metrics (``prometheus_client``), ``/healthz`` and
structured JSON logs (the standard ``logging`` module with a JSON formatter)."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from placement.fleet.redact import redact, redact_value

# LogRecord attributes that are not "extra" fields a caller passed.
_STANDARD = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time`` (RFC 3339, UTC), ``level``, ``logger``, ``msg`` and every ``extra``."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(), "logger": record.name, "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                doc[key] = value
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        # One redaction layer for every line: the message, each field, a traceback (placement.fleet.redact).
        return redact(json.dumps(redact_value(doc), default=str))


class RedactingHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler whose own failures (a closed stream) print one redacted line, not the standard
    traceback: that one would show the exception being handled when the line was logged, and an API error's
    body may echo a credential."""

    def handleError(self, record: logging.LogRecord) -> None:
        import sys

        if not logging.raiseExceptions:
            return
        try:
            kind = sys.exc_info()[0]
            sys.stderr.write(redact(f"--- logging error ({kind.__name__ if kind else 'unknown'}) in "
                                    f"{record.name} ---\n"))
        except Exception:  # stderr itself is gone: nothing more to say
            pass


def setup_logging(level: str = "info") -> None:
    """JSON logs on stderr for the ``gpufleet`` loggers (and the client's ``leaderelection`` logger)."""
    import time

    handler = RedactingHandler()
    formatter = JsonFormatter()
    formatter.converter = time.gmtime  # type: ignore[assignment]
    handler.setFormatter(formatter)
    for name in ("gpufleet", "leaderelection"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(level.upper())
        logger.propagate = False


class Metrics:
    """The dispatcher's Prometheus metrics, in their own registry (several controllers can share a process)."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        r = self.registry
        self.decisions = Counter("gpufleet_dispatch_decisions", "Dispatch decisions written, by reason "
                                 "(Nominated, Renominated, DeadlinePassed, NoWorkerFits)", ["reason"], registry=r)
        self.renominations = Counter("gpufleet_dispatch_renominations", "Workloads nominated again, by cause "
                                     "(eviction, deadline)", ["cause"], registry=r)
        self.write_errors = Counter("gpufleet_dispatch_write_errors", "Nominations or events the API server "
                                    "refused or did not answer, by HTTP status (0: unreachable)", ["status"],
                                    registry=r)
        self.time_to_admission = Histogram(
            "gpufleet_dispatch_time_to_admission_seconds", "From the first nomination to a worker admitting the "
            "Workload", buckets=(10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400, 43200), registry=r)
        self.worker_score = Gauge("gpufleet_dispatch_worker_score_usd", "Score (cost + price of waiting, USD) of "
                                  "each worker for the last Workload decided", ["worker"], registry=r)
        self.worker_wait = Gauge("gpufleet_dispatch_worker_wait_hours", "Expected wait on each worker for the last "
                                 "Workload decided", ["worker"], registry=r)
        self.worker_up = Gauge("gpufleet_dispatch_worker_up", "1 when the worker's queues could be read", ["worker"],
                               registry=r)
        self.pending = Gauge("gpufleet_dispatch_pending_workloads", "Hub Workloads waiting for a nomination",
                             registry=r)
        self.leader = Gauge("gpufleet_dispatch_leader", "1 while this replica holds the Lease", registry=r)
        self.prices_age = Gauge("gpufleet_dispatch_prices_age_seconds", "Age of the oldest price in use: since the "
                                "clouds answered (--live), else since the catalog's as-of date", registry=r)
        self.price_regions = Gauge("gpufleet_dispatch_price_regions", "Fleet regions by where their prices come from "
                                   "(live, kept: the last live answer after a failed refresh, catalog)", ["state"],
                                   registry=r)
        self.price_refreshes = Counter("gpufleet_dispatch_price_refreshes", "Live price refreshes by result (ok, "
                                       "partial, failed)", ["result"], registry=r)
        self.worker_unreadable = Gauge("gpufleet_dispatch_worker_unreadable", "1 while the worker's Kueue objects "
                                       "cannot be read (condition WorkerUnreadable): scored from its last good "
                                       "snapshot, or not at all", ["worker"], registry=r)
        self.worker_stale = Gauge("gpufleet_dispatch_worker_stale", "1 when the worker did not answer within its "
                                  "read deadline in the last pass (not scored)", ["worker"], registry=r)
        self.memory_ignored = Counter("gpufleet_dispatch_memory_ignored", "Events not trusted as a Workload's "
                                      "memory, by reason (namespace, time: beyond the clock-skew tolerance)",
                                      ["reason"], registry=r)
        # What the plans are calibrated with (issue 26; placement/dispatch/observe.py); only the leader counts.
        where = ["worker", "cloud", "region", "zone", "instance_type"]
        self.spot_nodes = Gauge("gpufleet_spot_nodes", "Spot nodes on each worker now, by zone and instance type",
                                where, registry=r)
        self.spot_node_seconds = Counter("gpufleet_spot_node_seconds", "Spot node-seconds observed (node-hours "
                                         "over a window: increase(...[W]) / 3600)", where, registry=r)
        self.spot_reclaims = Counter("gpufleet_spot_reclaims", "Spot nodes that went away with a termination signal "
                                     "(reclaimed by the cloud)", where, registry=r)
        self.provisioning_failures = Counter("gpufleet_provisioning_failures", "Provisioning failures on the "
                                             "workers, by reason (pods_ready_timeout, provisioning_request_failed)",
                                             ["worker", "reason"], registry=r)
        self.admission_wait = Histogram("gpufleet_admission_wait_seconds", "From a worker Workload's creation to "
                                        "its quota reservation there", ["worker", "queue"],
                                        buckets=(10, 30, 60, 300, 900, 1800, 3600, 7200, 14400, 43200, 86400),
                                        registry=r)
        self.pass_seconds = Histogram("gpufleet_dispatch_pass_seconds", "Duration of one reconcile pass",
                                      buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10), registry=r)

    def text(self) -> bytes:
        from prometheus_client import generate_latest

        return bytes(generate_latest(self.registry))


class HealthServer:
    """``/metrics`` (Prometheus text format) and ``/healthz`` (200 while ``healthy()`` says so, else 503 with
    the reason) on ``port`` (0: any free port), in a daemon thread."""

    def __init__(self, metrics: Metrics, healthy: Callable[[], str | None], port: int, host: str = "") -> None:
        from prometheus_client import CONTENT_TYPE_LATEST

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    body, code, ctype = metrics.text(), 200, CONTENT_TYPE_LATEST
                elif path == "/healthz":
                    problem = healthy()
                    body, code, ctype = (problem or "ok").encode() + b"\n", 503 if problem else 200, "text/plain"
                else:
                    body, code, ctype = b"not found\n", 404, "text/plain"
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, name="health", daemon=True)

    def start(self) -> HealthServer:
        self.thread.start()
        return self

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
