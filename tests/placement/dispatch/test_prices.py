"""``placement dispatch --live``: which fleet regions a refresh priced, the last good prices kept on failure,
and the refresh loop never holding up the prices in use."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

from factories import offer

from placement.dispatch.prices import LivePrices, LiveSettings, Part, failed_regions, merge, pricing_of
from placement.dispatch.telemetry import Metrics
from placement.fleet.stacks import ClusterStack, Pool
from placement.live import LiveRequest, LiveResult, Source
from placement.model.catalog import Catalog
from placement.model.quotas import QuotaTable

EAST, WEST, USC = ("aws", "us-east-1"), ("aws", "us-west-2"), ("gcp", "us-central1")
CATALOG = Catalog(offers=(offer("p5.48xlarge", "us-east-1", "use1-az1", price=98.0, spot=40.0),
                          offer("p5.48xlarge", "us-west-2", "usw2-az1", price=98.0, spot=41.0),
                          offer("p5.48xlarge", "eu-west-1", "euw1-az1", price=99.0, spot=42.0),
                          offer("a3-megagpu-8g", "us-central1", "us-central1-a", price=92.0, spot=31.0)),
                  as_of="2026-11-01", source="test")


def cluster(key: str, cloud: str, region: str, itype: str, zone: str) -> ClusterStack:
    pool = Pool(name=f"{key}-spot", instance_type=itype, capacity="spot", zone=zone, max_nodes=4)
    return ClusterStack(stack=key, cloud=cloud, region=region, cluster_name=f"c-{key}", pools=(pool,),
                        kubeconfig=None, checkpoint_uri=None, filesystem=None, service_account=None,
                        local_queues=None)


FLEET = (cluster("e", "aws", "us-east-1", "p5.48xlarge", "use1-az1"),
         cluster("w", "aws", "us-west-2", "p5.48xlarge", "usw2-az1"),
         cluster("g", "gcp", "us-central1", "a3-megagpu-8g", "us-central1-a"))


def spot(pricing: Any, region: str) -> float:
    (o,) = [o for o in pricing.offers if o.region == region]
    return float(o.spot_price)


def answer(catalog: Catalog, spots: dict[str, float], failures: tuple[Source, ...] = ()) -> LiveResult:
    """What fetch_live returns: the catalog with spot prices overlaid where given, and its sources."""
    offers = tuple(replace(o, spot_price=spots[o.region], price_source="live") if o.region in spots else o
                   for o in catalog.offers)
    ok = [Source("aws", "ec2:spot-prices", "", "ok", "2 regions"), Source("gcp", "billing:skus", "", "ok")]
    return LiveResult(catalog=Catalog(offers, catalog.as_of, catalog.source), quotas=QuotaTable({}),
                      sources=[*failures, *ok])


class Clouds:
    """An injected fetch_live: answers from a list, one per refresh, recording the requests."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.requests: list[LiveRequest] = []

    def __call__(self, request: LiveRequest, catalog: Catalog) -> LiveResult:
        self.requests.append(request)
        a = self.answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a(catalog) if callable(a) else a


def test_failed_price_sources_mark_their_region_or_their_whole_cloud():
    regions = {EAST, WEST, USC}
    assert failed_regions([Source("aws", "ec2:spot-prices", "us-east-1", "timeout")], regions) == {EAST}
    assert failed_regions([Source("aws", "ec2:offerings", "eu-west-1", "error")], regions) == set()  # not ours
    assert failed_regions([Source("gcp", "billing:skus", "", "denied")], regions) == {USC}  # a global call
    assert failed_regions([Source("aws", "all", "", "error", "boto3 not installed")], regions) == {EAST, WEST}
    assert failed_regions([Source("gcp", "credentials", "", "no-credentials")], regions) == {USC}
    # Placement scores refine the spot rate; spot prices stand without them. Quota sources are not prices.
    assert failed_regions([Source("aws", "ec2:placement-scores", "", "denied"),
                           Source("aws", "service-quotas", "us-east-1", "throttled")], regions) == set()
    assert failed_regions([Source("aws", "ec2:spot-prices", "", "ok")], regions) == set()


def test_a_region_keeps_its_last_live_prices_when_a_refresh_fails_there_and_the_catalogs_before_any():
    regions = frozenset({EAST, USC})
    catalog_parts = {EAST: Part((CATALOG.offers[0],), "catalog"), USC: Part((CATALOG.offers[3],), "catalog")}
    first = answer(CATALOG, {"us-east-1": 20.0, "us-central1": 15.0}).catalog
    parts = merge(catalog_parts, first, frozenset({USC}), regions, 100.0)
    assert (parts[EAST].state, parts[EAST].read_at, parts[EAST].offers[0].spot_price) == ("live", 100.0, 20.0)
    assert (parts[USC].state, parts[USC].read_at, parts[USC].offers[0].spot_price) == ("catalog", None, 15.0)
    second = answer(CATALOG, {"us-central1": 16.0}).catalog  # us-east-1 failed: the overlay fell back to 40
    parts = merge(parts, second, frozenset({EAST}), regions, 1000.0)
    assert (parts[EAST].state, parts[EAST].read_at, parts[EAST].offers[0].spot_price) == ("kept", 100.0, 20.0)
    assert (parts[USC].state, parts[USC].offers[0].spot_price) == ("live", 16.0)
    p = pricing_of(CATALOG, parts)
    assert p.source == "live" and p.read_at == 100.0  # the oldest answer in use
    assert dict(p.regions) == {"aws/us-east-1": "kept", "gcp/us-central1": "live"}
    assert spot(p, "eu-west-1") == 42.0  # outside the fleet: the catalog's, never asked for


def test_live_prices_refresh_keep_the_last_good_prices_and_report_them():
    now = [1_800_000_000.0]
    clouds = Clouds(lambda c: answer(c, {"us-east-1": 20.0, "us-west-2": 21.0, "us-central1": 15.0}),
                    lambda c: answer(c, {"us-west-2": 25.0, "us-central1": 14.0},
                                     (Source("aws", "ec2:spot-prices", "us-east-1", "throttled", "slow down"),)),
                    RuntimeError("an SDK surprise"))
    metrics = Metrics()
    live = LivePrices(CATALOG, FLEET, LiveSettings(aws_profile="prod", gcp_project="p", timeout_s=3),
                      metrics, fetch=clouds, clock=lambda: now[0])
    before = live.current()
    assert before.source == "catalog" and spot(before, "us-east-1") == 40.0
    assert metrics.price_regions.labels("catalog")._value.get() == 3

    first = live.refresh()
    (req,) = clouds.requests
    assert (req.quotas, req.refresh, req.offline, req.aws_profile, req.gcp_project, req.timeout_s) == (
        False, True, False, "prod", "p", 3)
    assert set(req.clouds) == {"aws", "gcp"} and set(req.regions or ()) == {"us-east-1", "us-west-2", "us-central1"}
    assert set(req.accelerators) == {"H100"}
    assert first.source == "live" and first.read_at == now[0]
    assert (spot(first, "us-east-1"), spot(first, "us-west-2"), spot(first, "us-central1")) == (20.0, 21.0, 15.0)

    now[0] += 900
    second = live.refresh()
    assert spot(second, "us-east-1") == 20.0  # kept from the first refresh, not the catalog's 40
    assert (spot(second, "us-west-2"), spot(second, "us-central1")) == (25.0, 14.0)
    assert dict(second.regions)["aws/us-east-1"] == "kept" and second.read_at == now[0] - 900

    now[0] += 900
    third = live.refresh()  # fetch itself raised: everything kept
    assert third is second and live.current() is second
    assert [metrics.price_refreshes.labels(r)._value.get() for r in ("ok", "partial", "failed")] == [1, 1, 1]
    assert [metrics.price_regions.labels(s)._value.get() for s in ("live", "kept", "catalog")] == [2, 1, 0]


def test_a_slow_cloud_never_holds_up_the_prices_in_use():
    gate, asked = threading.Event(), threading.Event()

    def slow(request: LiveRequest, catalog: Catalog) -> LiveResult:
        asked.set()
        gate.wait(10)
        return answer(catalog, {"us-east-1": 20.0})

    live = LivePrices(CATALOG, FLEET, LiveSettings(refresh_s=3600), fetch=slow)
    stop = threading.Event()
    thread = threading.Thread(target=live.run, args=(stop,), daemon=True)
    thread.start()
    try:
        assert asked.wait(5)
        assert live.current().source == "catalog"  # answered at once while the refresh waits on the cloud
        gate.set()
        for _ in range(100):
            if live.current().source != "catalog":
                break
            stop.wait(0.05)
        assert spot(live.current(), "us-east-1") == 20.0
    finally:
        stop.set()
        gate.set()
        thread.join(5)
    assert not thread.is_alive()
