"""Live prices for ``placement dispatch --live``: the catalog overlaid with live spot prices and offerings,
re-read in a background thread, the last good answer of each fleet region kept when a refresh fails.

Each refresh is one :func:`placement.live.runner.fetch_live` over the fleet's clouds, regions and accelerators,
prices only (no quota calls: a worker's quota is its Kueue's) and never from the on-disk cache. What it
overlays (AWS ``DescribeSpotPriceHistory``, ``DescribeInstanceTypeOfferings``, placement scores; GCP billing
SKUs and accelerator types) is described in :mod:`placement.live`. Per fleet (cloud, region), the prices in
use are:

* ``live``: this refresh's answer, when every price source of that region answered (AWS
  ``ec2:spot-prices``, ``ec2:offerings``, ``ec2:zones`` of the region; GCP ``billing:skus`` and
  ``compute:acceleratorTypes``, which cover all its regions);
* ``kept``: the last live answer of that region, when this refresh failed there;
* ``catalog``: the catalog's, until a refresh has answered there once.

A failed placement-score call does not count as a failure (spot prices stand without it). The merge is
pure (:func:`failed_regions`, :func:`merge`, :func:`pricing_of`); :class:`LivePrices` runs the refreshes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from placement.dispatch.model import Pricing
from placement.dispatch.telemetry import Metrics
from placement.fleet.stacks import ClusterStack
from placement.live import LiveRequest, LiveResult, Source
from placement.model.catalog import Catalog, Offer

log = logging.getLogger("gpufleet.dispatch.prices")

REFRESH_S = 900.0  # default of --live-refresh-seconds: AWS spot prices move within the hour
# The live services whose answers set a region's prices (placement.live source names).
PRICE_SERVICES = {"aws": ("ec2:spot-prices", "ec2:offerings", "ec2:zones"),
                  "gcp": ("billing:skus", "compute:acceleratorTypes")}
WHOLE_CLOUD = ("all", "credentials")  # a source row that stands for every call of its cloud
FAILED = ("no-credentials", "denied", "throttled", "timeout", "error")
LIVE, KEPT, CATALOG = "live", "kept", "catalog"

Region = tuple[str, str]  # (cloud, region)


@dataclass(frozen=True)
class Part:
    """The offers of one fleet (cloud, region) in use: ``state`` live, kept or catalog; ``read_at`` when the
    clouds answered (epoch seconds), None for catalog prices."""

    offers: tuple[Offer, ...]
    state: str
    read_at: float | None = None


def catalog_time(catalog: Catalog) -> float | None:
    """The catalog's as-of date (midnight UTC) in epoch seconds, when it has one."""
    try:
        day = datetime.strptime(catalog.as_of, "%Y-%m-%d").replace(tzinfo=UTC)
    except (TypeError, ValueError):
        return None
    return day.timestamp()


def fleet_regions(fleet: Iterable[ClusterStack]) -> frozenset[Region]:
    return frozenset((c.cloud, c.region) for c in fleet)


def failed_regions(sources: Iterable[Source], regions: Iterable[Region]) -> frozenset[Region]:
    """The fleet regions whose prices this refresh could not read: a failed price source of that region, or
    of its whole cloud (a global call, missing credentials or SDK)."""
    wanted = frozenset(regions)
    out: set[Region] = set()
    for s in sources:
        if s.status not in FAILED:
            continue
        if s.service in WHOLE_CLOUD or (s.service in PRICE_SERVICES.get(s.cloud, ()) and not s.region):
            out |= {r for r in wanted if r[0] == s.cloud}
        elif s.service in PRICE_SERVICES.get(s.cloud, ()):
            out |= {r for r in wanted if r == (s.cloud, s.region)}
    return frozenset(out)


def _by_region(offers: Iterable[Offer], regions: frozenset[Region]) -> dict[Region, list[Offer]]:
    out: dict[Region, list[Offer]] = {r: [] for r in regions}
    for o in offers:
        if (o.cloud, o.region) in regions:
            out[(o.cloud, o.region)].append(o)
    return out


def merge(before: Mapping[Region, Part], live: Catalog, failed: frozenset[Region], regions: frozenset[Region],
          now: float) -> dict[Region, Part]:
    """The parts in use after a refresh that answered ``live`` (the catalog with this refresh's overlays)
    and failed in ``failed``: this answer where it held, else the last live one, else the catalog's."""
    fresh = _by_region(live.offers, regions)
    out: dict[Region, Part] = {}
    for r in sorted(regions):
        prev = before.get(r)
        if r not in failed:
            out[r] = Part(tuple(fresh[r]), LIVE, now)
        elif prev is not None and prev.read_at is not None:
            out[r] = Part(prev.offers, KEPT, prev.read_at)
        else:
            out[r] = Part(tuple(fresh[r]), CATALOG, None)
    return out


def pricing_of(catalog: Catalog, parts: Mapping[Region, Part]) -> Pricing:
    """The catalog with each fleet region's offers replaced by its part's. ``read_at``: the oldest live
    answer in use, else the catalog's date; ``source``: ``live`` when every fleet region has live prices
    (fresh or kept), ``live+catalog`` when some, ``catalog`` when none."""
    offers = [o for o in catalog.offers if (o.cloud, o.region) not in parts]
    for p in parts.values():
        offers.extend(p.offers)
    live_at = [p.read_at for p in parts.values() if p.read_at is not None]
    states = {r: p.state for r, p in parts.items()}
    if not live_at:
        source = CATALOG
    elif len(live_at) == len(parts):
        source = LIVE
    else:
        source = f"{LIVE}+{CATALOG}"
    return Pricing(offers=tuple(offers), source=source, read_at=min(live_at) if live_at else catalog_time(catalog),
                   regions=tuple(sorted((f"{c}/{r}", st) for (c, r), st in states.items())))


Fetch = Callable[[LiveRequest, Catalog], LiveResult]


def _fetch_live(request: LiveRequest, catalog: Catalog) -> LiveResult:
    from placement.live.runner import fetch_live  # the cloud SDKs load on the first refresh, in its thread

    return fetch_live(request, catalog)


@dataclass(frozen=True)
class LiveSettings:
    """``placement dispatch --live``: credentials (``--aws-profile``, ``--gcp-project``), the per-call timeout
    (seconds) and the refresh period (seconds)."""

    aws_profile: str | None = None
    gcp_project: str | None = None
    timeout_s: float = 5.0
    refresh_s: float = REFRESH_S


class LivePrices:
    """The prices the controller decides with, kept current by :meth:`run` (a thread) or :meth:`refresh`.

    :meth:`current` never waits for a cloud: it returns the prices of the last refresh (the catalog's until
    the first one answers)."""

    def __init__(self, catalog: Catalog, fleet: Sequence[ClusterStack], settings: LiveSettings,
                 metrics: Metrics | None = None, fetch: Fetch | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.catalog = catalog
        self.settings = settings
        self.metrics = metrics
        self.clock = clock
        self._fetch = fetch
        self.regions = fleet_regions(fleet)
        book_accels = sorted({s.accelerator for c in fleet for p in c.pools if (s := p.shape) is not None})
        self.request = LiveRequest(
            accelerators=tuple(book_accels), target_nodes=1, aws_profile=settings.aws_profile,
            gcp_project=settings.gcp_project, refresh=True, offline=False, timeout_s=settings.timeout_s,
            progress=False, clouds=tuple(sorted({c for c, _ in self.regions})),
            regions=tuple(sorted({r for _, r in self.regions})), quotas=False)
        self.parts: dict[Region, Part] = {r: Part(tuple(o), CATALOG) for r, o in
                                          _by_region(catalog.offers, self.regions).items()}
        self._pricing = pricing_of(catalog, self.parts)
        self.refreshes = 0
        self._report()

    def current(self) -> Pricing:
        return self._pricing

    def refresh(self) -> Pricing:
        """Ask the clouds once and update the prices in use (never raises: a failure keeps them)."""
        started = self.clock()
        try:
            result = (self._fetch or _fetch_live)(self.request, self.catalog)
        except Exception as exc:  # a bug or an SDK surprise must not stop the dispatcher: keep the prices
            log.exception("price refresh failed; keeping the prices in use", extra={"error": repr(exc)})
            self._count("failed")
            return self._pricing
        failed = failed_regions(result.sources, self.regions)
        self.parts = merge(self.parts, result.catalog, failed, self.regions, started)
        self._pricing = pricing_of(self.catalog, self.parts)
        self.refreshes += 1
        problems = [f"{s.cloud} {s.service} {s.region or '-'}: {s.status} {s.detail}".strip()
                    for s in result.sources if s.status in FAILED]
        outcome = "ok" if not failed else "failed" if failed == self.regions else "partial"
        self._count(outcome)
        self._report()
        log.info("prices refreshed", extra={"prices": self._pricing.source, "result": outcome,
                                            "regions": dict(self._pricing.regions), "problems": problems,
                                            "seconds": round(self.clock() - started, 2)})
        return self._pricing

    def run(self, stop: threading.Event) -> None:
        """Refresh now and every ``refresh_s`` until ``stop`` is set."""
        while not stop.is_set():
            self.refresh()
            stop.wait(self.settings.refresh_s)

    def _count(self, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.price_refreshes.labels(outcome).inc()

    def _report(self) -> None:
        if self.metrics is None:
            return
        for state in (LIVE, KEPT, CATALOG):
            self.metrics.price_regions.labels(state).set(sum(1 for p in self.parts.values() if p.state == state))
