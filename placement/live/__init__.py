"""Live quota, spot prices, offerings and placement scores from AWS and GCP (``placement plan --live``).

This module holds the contract's types (request, result, source rows); the CLI calls
:func:`placement.live.runner.fetch_live` and ``placement refresh`` :func:`placement.commands.refresh.run_refresh`. It
stays light and imports none of its submodules (they import it): no boto3 / google import here, and a plan whose
answers are all in the on-disk cache imports neither SDK at all.

What is read, through the clouds' own clients (every (cloud, service, region) call runs concurrently):

  AWS (boto3, standard credential chain or ``--aws-profile``; timeouts via botocore ``Config``,
  standard retry mode, 3 attempts):
    service-quotas   ``get_service_quota`` per EC2 quota code a shape consumes (vCPU limits)
    cloudwatch       ``get_metric_data`` AWS/Usage ResourceCount (Class P/OnDemand, P/Spot, G/...)
                     = current vCPU usage, so headroom = applied limit - usage
    ec2:offerings    ``describe_instance_type_offerings`` by availability-zone-id
    ec2:zones        ``describe_availability_zones`` (zone name -> zone ID, for spot prices)
    ec2:spot-prices  ``describe_spot_price_history`` (Linux/UNIX, StartTime now) per zone
    ec2:placement-scores  ``get_spot_placement_scores`` per shape (single-AZ, TargetCapacity = the
                     job's nodes on that shape, up to 10 regions per call)
    pricing          ``get_products`` (on-demand prices; only for ``placement refresh``)
    ec2:reservations ``describe_capacity_reservations`` (active, Linux, non-interruptible, of the shapes'
                     instance types): On-Demand Capacity Reservations and Capacity Blocks with free nodes
  GCP (google-cloud-compute / -billing, Application Default Credentials or ``--gcp-project``):
    compute:regions           ``RegionsClient.get``: limit/usage of each GPU metric and its PREEMPTIBLE_ form
    compute:acceleratorTypes  ``AcceleratorTypesClient.aggregated_list``: which zones offer which GPU
    billing:skus              ``CloudCatalogClient.list_skus`` (Compute Engine): GPU + core + RAM prices
                              per region, on-demand and spot; a machine's price is their sum
    compute:reservations      ``ReservationsClient.aggregated_list``: READY specific-SKU reservations of the
                              shapes' machine types; free nodes = count - inUseCount

Reservations are priced per node-hour at what using them adds to the bill: 0 for AWS Capacity Blocks
(prepaid), AWS reservations under a commitment and GCP reservations attached to a commitment (paid either
way); otherwise the catalog's on-demand price of that shape (zone, else region, else the cloud's highest),
because an unused On-Demand Capacity Reservation or GCP reservation could be released instead.

Placement score -> spot interruption rate (the engine uses max(job rate, offer rate)):
    score >= 8: no change;  5-7: 0.1/h;  3-4: 0.25/h;  1-2: 0.5/h.

Cache (``GPUFLEET_CACHE_DIR`` or ``platformdirs.user_cache_dir("gpufleet")``/live), TTL per kind:
quotas and usage 5 min, spot prices 15 min, placement scores 15 min, offerings/zones 1 h, prices 1 h.
``refresh`` bypasses it (and rewrites it); ``offline`` never touches the network.

Every answer (fresh or cached) is checked before use (checks.py): a malformed one is a failed call, an
out-of-range value is refused alone and named in a ``partial`` source row. A CloudWatch usage result that
is not ``Complete`` leaves that quota unknown, never 0 in use.

Deadlines: per call 3 x timeout + 4 s from its start, overall 3 x timeout + 10 s; a late call is a
``timeout`` source naming its region, the rest is kept, and no worker thread outlives the command.

Concurrency: every call runs on a thread pool; on Linux the AWS half runs in a forked worker process so
botocore's CPU work and the Google import use two cores (``GPUFLEET_LIVE_FORK=0`` turns that off,
``GPUFLEET_LIVE_SEQUENTIAL=1`` makes every call one after another, for measurement). See runner.py.
Endpoint overrides: boto3's ``AWS_ENDPOINT_URL[_<SERVICE>]``; ``GPUFLEET_GCP_COMPUTE_ENDPOINT`` /
``GPUFLEET_GCP_BILLING_ENDPOINT`` (+ ``GPUFLEET_GCP_ANONYMOUS=1`` for a local fake). See gcp.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from placement.model.catalog import Catalog
    from placement.model.quotas import QuotaTable
    from placement.model.reservations import Reservation

# "partial": the call answered but some of its values were refused or unknown (the detail names them).
Status = Literal["ok", "cached", "partial", "timeout", "error", "denied", "throttled", "no-credentials", "offline"]
STATUSES: tuple[str, ...] = ("ok", "cached", "partial", "timeout", "error", "denied", "throttled", "no-credentials",
                             "offline")


@dataclass(frozen=True)
class LiveRequest:
    """What to query. ``timeout_s`` is the per-call timeout in seconds (each call may be retried)."""

    accelerators: tuple[str, ...]
    target_nodes: int
    aws_profile: str | None
    gcp_project: str | None
    refresh: bool
    offline: bool
    timeout_s: float
    progress: bool
    clouds: tuple[str, ...] = ("aws", "gcp")
    regions: tuple[str, ...] | None = None  # restrict to these regions (None: every catalog region)
    cache_dir: str | None = None  # default: $GPUFLEET_CACHE_DIR or the user cache dir
    # Total GPUs of the job, when known: placement scores then ask for ceil(gpus / gpus_per_node) nodes
    # of each shape. Without it, target_nodes nodes of the smallest shape are assumed.
    target_gpus: int | None = None
    gcp_prices: bool = True  # read Cloud Billing SKUs for GCP on-demand/spot price overlays
    gpus_per_node: int | None = None  # the job's node-size override, for the placement-score node count
    reservations: bool = False  # also read capacity reservations (AWS ODCRs / Capacity Blocks, GCP reservations)
    quotas: bool = True  # read quota limits and usage (placement dispatch prices only: its quota is Kueue's)


@dataclass(frozen=True)
class Source:
    """Where one part of the live answer came from, and how that went. ``age_s``: age of the data in seconds."""

    cloud: str
    service: str
    region: str
    status: Status
    detail: str = ""
    age_s: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"cloud": self.cloud, "service": self.service, "region": self.region, "status": self.status,
                "detail": self.detail, "age_s": None if self.age_s is None else round(self.age_s, 1)}


@dataclass(frozen=True)
class LiveResult:
    """The input catalog with live overlays, the live quota table, and one source row per part of the answer."""

    catalog: Catalog
    quotas: QuotaTable
    sources: list[Source] = field(default_factory=list)
    reservations: tuple[Reservation, ...] = ()


__all__ = ["STATUSES", "LiveRequest", "LiveResult", "Source", "Status"]
