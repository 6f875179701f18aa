"""Leader election over a ``coordination.k8s.io/v1`` Lease, with the ``kubernetes`` client's own
``leaderelection`` package (``LeaderElection`` and its ``LeaseLock``).

Two adjustments: the lock talks through the dispatcher's ``ApiClient`` (the package's lock uses the
process-wide default configuration), and the elector records when it last renewed, so the controller
writes only while its lease is fresh (:meth:`Elector.leading`), not merely until it notices a failed
renewal. A stopped elector leaves the Lease to expire (a crashed replica does the same); the standby
takes over after ``lease_duration_s``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("gpufleet.dispatch.leader")


class _Stopped(Exception):
    """Raised inside the election loop to end it when the elector is stopped."""


class Elector:
    """Campaigns for Lease ``namespace/name`` as ``identity`` in a daemon thread until :meth:`stop`.

    Durations are whole seconds (the client's ``electionconfig.Config`` requires ``lease_duration_s >
    renew_deadline_s > 1.2 × retry_period_s >= 1``)."""

    def __init__(self, api: Any, name: str, namespace: str, identity: str, *, lease_duration_s: int = 15,
                 renew_deadline_s: int = 10, retry_period_s: int = 2,
                 on_change: Callable[[bool], None] | None = None) -> None:
        from kubernetes import client
        from kubernetes.leaderelection import electionconfig, leaderelection
        from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

        problem = check_durations(lease_duration_s, renew_deadline_s, retry_period_s)
        if problem:
            raise ValueError(problem)
        self.identity = identity
        self.renew_deadline_s = renew_deadline_s
        self.retry_period_s = retry_period_s
        self._stop = threading.Event()
        self._leading = False
        self._renewed = 0.0
        self._on_change = on_change
        elector = self
        stop = self._stop

        class Lock(LeaseLock):  # type: ignore[misc]
            def __init__(self) -> None:
                super().__init__(name, namespace, identity)
                self.api_instance = client.CoordinationV1Api(api)

            def get(self, name: str, namespace: str) -> Any:
                if stop.is_set():
                    raise _Stopped
                return super().get(name, namespace)

        class Election(leaderelection.LeaderElection):  # type: ignore[misc]
            def update_lock(self, record: Any) -> bool:
                ok = bool(super().update_lock(record))
                if ok:
                    elector._renewed = time.monotonic()
                return ok

        self._lock_cls = Lock
        self._election_cls = Election
        self._config = lambda: electionconfig.Config(
            Lock(), lease_duration_s, renew_deadline_s, retry_period_s, self._started, self._stopped)
        self.thread = threading.Thread(target=self._run, name=f"elector-{identity}", daemon=True)

    def _started(self) -> None:
        self._leading = True
        log.info("leading", extra={"identity": self.identity})
        if self._on_change:
            self._on_change(True)

    def _stopped(self) -> None:
        was = self._leading
        self._leading = False
        if was:
            log.warning("lost the lease", extra={"identity": self.identity})
            if self._on_change:
                self._on_change(False)

    def leading(self) -> bool:
        """True while this replica holds the Lease and renewed it within the renew deadline."""
        return self._leading and time.monotonic() - self._renewed < self.renew_deadline_s

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._election_cls(self._config()).run()
            except _Stopped:
                break
            except Exception:  # an answer the package does not handle: log, wait, campaign again
                log.exception("leader election failed", extra={"identity": self.identity})
            self._stopped()
            self._stop.wait(self.retry_period_s)
        self._stopped()

    def start(self) -> Elector:
        self.thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._leading = False


def check_durations(lease_duration_s: int, renew_deadline_s: int, retry_period_s: int) -> str | None:
    """Why these durations would make the client's election config exit the process, or None."""
    if retry_period_s < 1:
        return "--retry-period-seconds must be at least 1"
    if renew_deadline_s <= 1.2 * retry_period_s:
        return "--renew-deadline-seconds must be more than 1.2 x --retry-period-seconds"
    if lease_duration_s <= renew_deadline_s:
        return "--lease-duration-seconds must be more than --renew-deadline-seconds"
    return None
