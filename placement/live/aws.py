"""AWS calls for live data, through boto3. Imported only when an AWS call is actually needed.

Every function takes the :class:`AwsContext`, a region, and keyword parameters, and returns plain
JSON data (so it can be cached). Exceptions propagate; the runner classifies them.

Endpoints: boto3's own ``AWS_ENDPOINT_URL`` / ``AWS_ENDPOINT_URL_<SERVICE>`` variables apply
(``AWS_ENDPOINT_URL_EC2``, ``_SERVICE_QUOTAS``, ``_CLOUDWATCH``, ``_PRICING``); nothing here overrides them.
Timeouts: ``Config(connect_timeout, read_timeout, retries={"mode": "standard", "max_attempts": 3})``.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from placement.live import LiveRequest

# Test seam: each hook is called as hook(client, service, region, purpose) when a client is created,
# e.g. to attach a botocore Stubber. Empty in normal use.
CLIENT_HOOKS: list[Callable[[Any, str, str, str], None]] = []

# Quota code -> CloudWatch AWS/Usage ``Class`` dimension whose ResourceCount (vCPU) is that quota's usage.
# AWS publishes spot usage per family letter (P/Spot), not per quota: P4 and P5 spot quotas both read
# P/Spot, which over-counts usage for each of them (the safe side).
CODE_USAGE_CLASS: dict[str, str] = {
    "L-417A185B": "P/OnDemand",
    "L-7212CCBC": "P/Spot",
    "L-C4BD4855": "P/Spot",
    "L-DB2E81BA": "G/OnDemand",
    "L-3819A6DF": "G/Spot",
}
SCORE_REGION = "us-east-1"  # GetSpotPlacementScores answers for any regions from one endpoint
USER_AGENT = "gpufleet-placement"


class MissingCredentials(Exception):
    """No AWS credentials were found (classified as ``no-credentials``)."""


@dataclass
class AwsContext:
    """A boto3 session plus a thread-safe client cache (boto3 sessions are not thread-safe)."""

    session: Any
    config: Any
    clients: dict[tuple[str, str, str], Any] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def client(self, service: str, region: str, purpose: str = "") -> Any:
        key = (service, region, purpose)
        with self.lock:
            c = self.clients.get(key)
            if c is None:
                c = self.session.client(service, region_name=region, config=self.config)
                for hook in CLIENT_HOOKS:
                    hook(c, service, region, purpose)
                self.clients[key] = c
            return c


_REUSE_LOCK = threading.Lock()


def _reuse_client_classes() -> None:
    """Make botocore build each service's model and client class once per process, not once per client.

    botocore re-creates both for every client: ~36 ms of CPU per EC2 client (830 operations), and this
    module creates three clients per region. Both objects depend only on the service (and API version),
    so sharing them across regional clients is safe. If botocore's internals change, this does nothing.
    """
    from botocore import client as bc

    creator: Any = bc.ClientCreator
    with _REUSE_LOCK:
        if getattr(creator, "_gpufleet_reuse", False):
            return
        load, make = getattr(creator, "_load_service_model", None), getattr(creator, "_create_client_class", None)
        if load is None or make is None:
            return
        models: dict[tuple[str, Any], Any] = {}
        classes: dict[str, Any] = {}

        def load_cached(self: Any, service_name: str, api_version: Any = None) -> Any:
            key = (service_name, api_version)
            if key not in models:
                models[key] = load(self, service_name, api_version)
            return models[key]

        def make_cached(self: Any, service_name: str, service_model: Any) -> Any:
            if service_name not in classes:
                classes[service_name] = make(self, service_name, service_model)
            return classes[service_name]

        creator._load_service_model = load_cached
        creator._create_client_class = make_cached
        creator._gpufleet_reuse = True


def prepare(request: LiveRequest) -> AwsContext:
    """Import boto3, open the session and resolve credentials once (before any thread uses it)."""
    import boto3
    from botocore.config import Config

    _reuse_client_classes()

    session = boto3.Session(profile_name=request.aws_profile) if request.aws_profile else boto3.Session()
    if session.get_credentials() is None:
        raise MissingCredentials("no AWS credentials (standard chain" +
                                 (f", profile {request.aws_profile})" if request.aws_profile else ")"))
    config = Config(connect_timeout=request.timeout_s, read_timeout=request.timeout_s,
                    retries={"mode": "standard", "max_attempts": 3}, user_agent_extra=USER_AGENT)
    return AwsContext(session=session, config=config)


def _pages(call: Callable[..., dict[str, Any]], key: str, **kwargs: Any) -> list[Any]:
    """All items of a NextToken-paginated EC2/pricing call (pages are inherently one after another)."""
    items: list[Any] = []
    token: str | None = None
    for _ in range(100):
        resp = call(**kwargs, **({"NextToken": token} if token else {}))
        items.extend(resp.get(key) or [])
        token = resp.get("NextToken")
        if not token:
            break
    return items


def offerings(ctx: AwsContext, region: str, *, types: list[str]) -> dict[str, list[str]]:
    """Instance type -> zone IDs of ``region`` where it is offered."""
    ec2 = ctx.client("ec2", region)
    rows = _pages(ec2.describe_instance_type_offerings, "InstanceTypeOfferings", LocationType="availability-zone-id",
                  Filters=[{"Name": "instance-type", "Values": list(types)}], MaxResults=1000)
    out: dict[str, set[str]] = {t: set() for t in types}
    for row in rows:
        out.setdefault(row["InstanceType"], set()).add(row["Location"])
    return {t: sorted(z) for t, z in out.items()}


def zones(ctx: AwsContext, region: str) -> dict[str, str]:
    """Zone name -> zone ID (names are shuffled per account; IDs are not)."""
    resp = ctx.client("ec2", region).describe_availability_zones(AllAvailabilityZones=False)
    return {z["ZoneName"]: z["ZoneId"] for z in resp.get("AvailabilityZones") or [] if z.get("ZoneId")}


def spot_prices(ctx: AwsContext, region: str, *, types: list[str]) -> list[list[Any]]:
    """Current Linux spot price rows ``[instance type, zone name, zone ID or None, USD/h]``, newest per zone."""
    ec2 = ctx.client("ec2", region)
    now = dt.datetime.now(dt.UTC)
    rows = _pages(ec2.describe_spot_price_history, "SpotPriceHistory", InstanceTypes=list(types),
                  ProductDescriptions=["Linux/UNIX"], StartTime=now, MaxResults=1000)
    newest: dict[tuple[str, str], tuple[Any, list[Any]]] = {}
    for r in rows:
        try:
            price = float(r["SpotPrice"])
        except (KeyError, TypeError, ValueError):
            continue
        k = (r["InstanceType"], r["AvailabilityZone"])
        ts = r.get("Timestamp")
        stamp = ts.timestamp() if hasattr(ts, "timestamp") else 0.0
        if k not in newest or stamp >= newest[k][0]:
            newest[k] = (stamp, [r["InstanceType"], r["AvailabilityZone"], r.get("AvailabilityZoneId"), price])
    return [v[1] for _, v in sorted(newest.items())]


def quota(ctx: AwsContext, region: str, *, code: str) -> dict[str, Any]:
    """The applied value (vCPUs) of EC2 quota ``code`` in ``region``; the AWS default when none is applied."""
    sq = ctx.client("service-quotas", region)
    try:
        q = sq.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]
    except Exception as exc:  # noqa: BLE001 - only NoSuchResource falls back; the rest propagate
        err = getattr(exc, "response", {}).get("Error", {}) if isinstance(getattr(exc, "response", None), dict) else {}
        if err.get("Code") != "NoSuchResourceException":
            raise
        q = sq.get_aws_default_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]
    return {"code": q.get("QuotaCode") or code, "limit": float(q["Value"])}


def usage(ctx: AwsContext, region: str, *, classes: list[str]) -> dict[str, float]:
    """Current vCPU usage per AWS/Usage class (no datapoint in the last 15 min = nothing running = 0)."""
    cw = ctx.client("cloudwatch", region)
    now = dt.datetime.now(dt.UTC)
    ids = {f"u{i}": cls for i, cls in enumerate(classes)}
    queries = [{"Id": qid, "ReturnData": True, "MetricStat": {"Stat": "Maximum", "Period": 60, "Metric": {
        "Namespace": "AWS/Usage", "MetricName": "ResourceCount", "Dimensions": [
            {"Name": "Service", "Value": "EC2"}, {"Name": "Type", "Value": "Resource"},
            {"Name": "Resource", "Value": "vCPU"}, {"Name": "Class", "Value": cls}]}}} for qid, cls in ids.items()]
    resp = cw.get_metric_data(MetricDataQueries=queries, StartTime=now - dt.timedelta(minutes=15), EndTime=now,
                              ScanBy="TimestampDescending")
    out = {cls: 0.0 for cls in classes}
    for res in resp.get("MetricDataResults") or []:
        cls = ids.get(res.get("Id", ""))
        values = res.get("Values") or []
        if cls is not None and values:
            out[cls] = float(values[0])
    return out


def scores(ctx: AwsContext, region: str, *, instance_type: str, nodes: int, regions: list[str]) -> dict[str, int]:
    """Spot placement score (1-10) per zone ID for ``nodes`` instances of ``instance_type`` in one AZ."""
    ec2 = ctx.client("ec2", SCORE_REGION, "placement-scores")
    rows = _pages(ec2.get_spot_placement_scores, "SpotPlacementScores", InstanceTypes=[instance_type],
                  TargetCapacity=max(int(nodes), 1), TargetCapacityUnitType="units", SingleAvailabilityZone=True,
                  RegionNames=list(regions), MaxResults=1000)
    return {r["AvailabilityZoneId"]: int(r["Score"]) for r in rows if r.get("AvailabilityZoneId") and "Score" in r}


def ondemand_prices(ctx: AwsContext, region: str, *, instance_type: str) -> dict[str, float]:
    """Linux shared-tenancy on-demand USD/h of ``instance_type`` per region code (Pricing API, us-east-1)."""
    pricing = ctx.client("pricing", "us-east-1")
    filters = [{"Type": "TERM_MATCH", "Field": f, "Value": v} for f, v in (
        ("instanceType", instance_type), ("operatingSystem", "Linux"), ("tenancy", "Shared"),
        ("preInstalledSw", "NA"), ("capacitystatus", "Used"), ("licenseModel", "No License required"))]
    items = _pages(pricing.get_products, "PriceList", ServiceCode="AmazonEC2", Filters=filters,
                   FormatVersion="aws_v1", MaxResults=100)
    out: dict[str, float] = {}
    for item in items:
        doc = json.loads(item) if isinstance(item, str) else item
        region_code = ((doc.get("product") or {}).get("attributes") or {}).get("regionCode")
        if not region_code:
            continue
        for term in ((doc.get("terms") or {}).get("OnDemand") or {}).values():
            for dim in (term.get("priceDimensions") or {}).values():
                usd = (dim.get("pricePerUnit") or {}).get("USD")
                try:
                    price = float(str(usd))
                except ValueError:
                    continue
                if price > 0:
                    out[region_code] = price
    return out


def reservations(ctx: AwsContext, region: str, *, types: list[str]) -> list[dict[str, Any]]:
    """Active capacity reservations of ``types`` with free nodes: On-Demand Capacity Reservations and Capacity
    Blocks (``ReservationType`` capacity-block), Linux, default tenancy, not interruptible."""
    ec2 = ctx.client("ec2", region)
    rows = _pages(ec2.describe_capacity_reservations, "CapacityReservations", MaxResults=1000,
                  Filters=[{"Name": "state", "Values": ["active"]}, {"Name": "instance-type", "Values": list(types)}])
    out = []
    for r in rows:
        free = int(r.get("AvailableInstanceCount") or 0)
        if (free < 1 or r.get("Interruptible") or r.get("InstancePlatform", "Linux/UNIX") != "Linux/UNIX"
                or r.get("Tenancy", "default") != "default"):
            continue
        end = r.get("EndDate")
        out.append({
            "id": r["CapacityReservationId"], "instance_type": r["InstanceType"],
            "zone_id": r.get("AvailabilityZoneId"), "zone": r.get("AvailabilityZone"), "count": free,
            "ends": end.isoformat() if hasattr(end, "isoformat") else end or None,
            "kind": "capacity-block" if r.get("ReservationType") == "capacity-block" else "odcr",
            "committed": bool(r.get("CommitmentInfo")),
        })
    return sorted(out, key=lambda x: x["id"])


OPS: dict[str, Callable[..., Any]] = {"offerings": offerings, "zones": zones, "spot_prices": spot_prices,
                                      "quota": quota, "usage": usage, "scores": scores,
                                      "ondemand_prices": ondemand_prices, "reservations": reservations}
