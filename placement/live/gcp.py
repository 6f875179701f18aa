"""GCP calls for live data, through google-cloud-compute and google-cloud-billing (REST).

Imported only when a GCP call is actually needed. Every function takes the :class:`GcpContext`, a region
and keyword parameters and returns plain JSON data; exceptions propagate to the runner.

Endpoints: ``GPUFLEET_GCP_COMPUTE_ENDPOINT`` and ``GPUFLEET_GCP_BILLING_ENDPOINT`` (e.g.
``http://127.0.0.1:8080``) become ``client_options={"api_endpoint": ...}``. For a plain-http loopback
endpoint, ``AnonymousCredentials`` are used when ``GPUFLEET_GCP_ANONYMOUS=1`` or when no Application
Default Credentials are found; any other endpoint needs ADC.

Prices (Cloud Billing Catalog, Compute Engine service ``6F81-5844-456A``): a GPU machine's hourly price
is gpus x GPU SKU + vCPUs x the family's Core SKU + memory GiB x its Ram SKU + its bundled Local SSD (375 GiB
per disk x the "SSD backed Local Storage" SKU, a GiB-month price over 730 hours), on-demand (usageType
OnDemand) and spot (Preemptible), per region - the sum the billing catalogue charges for the machine, GPUs
included. A fixed-machine family billed by one SKU per GPU slice (A4: "A4 Nvidia B200 (1 gpu slice)", the
host included) is gpus x that SKU. A shape whose SKUs are not all found in a region keeps its catalog price
there.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

if TYPE_CHECKING:
    from placement.live import LiveRequest

COMPUTE_SERVICE = "services/6F81-5844-456A"
SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]
ENV_COMPUTE = "GPUFLEET_GCP_COMPUTE_ENDPOINT"
ENV_BILLING = "GPUFLEET_GCP_BILLING_ENDPOINT"
ENV_ANONYMOUS = "GPUFLEET_GCP_ANONYMOUS"

# GPU type (Shape.gke_accelerator) -> phrases its SKU description contains (one of).
GPU_SKU_PHRASES: dict[str, tuple[str, ...]] = {
    "nvidia-tesla-a100": ("A100 GPU",),
    "nvidia-a100-80gb": ("A100 80GB GPU",),
    "nvidia-h100-80gb": ("H100 80GB GPU",),
    # The a3-megagpu GPU is described differently by region.
    "nvidia-h100-mega-80gb": ("H100 80GB Mega GPU", "H100 Mega 80GB GPU", "H100 80GB Plus GPU"),
    "nvidia-h200-141gb": ("H200 141GB GPU",),
    "nvidia-b200": ("B200 (1 gpu slice)",),
    "nvidia-l4": ("L4 GPU",),
}
# Machine family (prefix of the machine type) -> the "<family> Core" / "<family> Ram" SKU description stem.
# Longest prefix wins; families whose SKUs are named otherwise simply keep catalog prices.
HOST_SKU_STEMS: dict[str, str] = {
    "a2-": "A2 Instance",
    "a3-highgpu": "A3 Instance",
    "a3-megagpu": "A3 Mega Instance",
    "a3-ultragpu": "A3 Ultra Instance",
    "a4-": "A4 Instance",
    "g2-": "G2 Instance",
}
# Families billed by one SKU per GPU slice that covers the whole machine share (no Core/Ram SKUs of their own).
FIXED_MACHINE_FAMILIES = ("a4-",)
LOCAL_SSD_GIB = 375.0  # one local SSD disk (Compute Engine "About Local SSD disks": 375 GiB each)
HOURS_PER_MONTH = 730.0  # the billing catalogue's GiB-month SKUs, per hour (Google's pricing pages: 730 h)
_SKIP_WORDS = ("commit", "reserved", "custom", "premium", "sole tenancy", "dws", "flex", "calendar")


class MissingCredentials(Exception):
    """No usable GCP credentials or project (classified as ``no-credentials``)."""


def host_stem(machine_type: str) -> str | None:
    best = max((p for p in HOST_SKU_STEMS if machine_type.startswith(p)), key=len, default=None)
    return HOST_SKU_STEMS[best] if best else None


def loopback_http(endpoint: str | None) -> bool:
    """True for a plain-http endpoint on this machine (a local fake), where anonymous access may be used."""
    if not endpoint:
        return False
    u = urlparse(endpoint)
    return u.scheme == "http" and (u.hostname or "") in ("127.0.0.1", "localhost", "::1")


@dataclass
class GcpContext:
    """Imported modules, credentials per endpoint, project, and a thread-safe client cache."""

    compute_v1: Any
    billing_v1: Any
    retry: Any
    timeout_s: float
    project: str | None
    compute_creds: Any
    billing_creds: Any
    cred_error: str
    clients: dict[tuple[str, str], Any] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def _options(self, env: str) -> dict[str, Any] | None:
        ep = os.environ.get(env)
        return {"api_endpoint": ep} if ep else None

    def regions(self, region: str) -> Any:
        # One client per region: each has its own HTTP session, so concurrent calls do not contend
        # for (or overflow) one connection pool.
        return self._client("regions", region, lambda: self.compute_v1.RegionsClient(
            credentials=self._creds("compute"), client_options=self._options(ENV_COMPUTE)))

    def accelerator_types(self) -> Any:
        return self._client("accelerator_types", "", lambda: self.compute_v1.AcceleratorTypesClient(
            credentials=self._creds("compute"), client_options=self._options(ENV_COMPUTE)))

    def reservations(self) -> Any:
        return self._client("reservations", "", lambda: self.compute_v1.ReservationsClient(
            credentials=self._creds("compute"), client_options=self._options(ENV_COMPUTE)))

    def catalog(self) -> Any:
        return self._client("billing", "", lambda: self.billing_v1.CloudCatalogClient(
            credentials=self._creds("billing"), transport="rest", client_options=self._options(ENV_BILLING)))

    def need_project(self) -> str:
        if not self.project:
            raise MissingCredentials("no GCP project: pass --gcp-project or set GOOGLE_CLOUD_PROJECT")
        return self.project

    def _creds(self, which: str) -> Any:
        creds = self.compute_creds if which == "compute" else self.billing_creds
        if creds is None:
            raise MissingCredentials(self.cred_error or "no Application Default Credentials")
        return creds

    def _client(self, kind: str, region: str, make: Callable[[], Any]) -> Any:
        with self.lock:
            c = self.clients.get((kind, region))
            if c is None:
                c = self.clients[(kind, region)] = make()
            return c


def prepare(request: LiveRequest) -> GcpContext:
    """Import the Google clients and resolve credentials and project once."""
    # google.api_core warns about the interpreter's end of life at import; not the user's concern here.
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"google\..*")
    import requests
    from google.api_core import exceptions as gexc
    from google.api_core import retry as gretry
    from google.cloud import billing_v1, compute_v1

    compute_ep, billing_ep = os.environ.get(ENV_COMPUTE), os.environ.get(ENV_BILLING)
    anonymous_env = os.environ.get(ENV_ANONYMOUS) == "1"
    adc: Any = None
    adc_project: str | None = None
    cred_error = ""
    if not (anonymous_env and loopback_http(compute_ep) and loopback_http(billing_ep)):
        import google.auth
        from google.auth.exceptions import DefaultCredentialsError

        try:
            adc, adc_project = google.auth.default(scopes=SCOPES)
        except DefaultCredentialsError:
            cred_error = "no Application Default Credentials (run `gcloud auth application-default login`)"

    def pick(endpoint: str | None) -> Any:
        if loopback_http(endpoint) and (anonymous_env or adc is None):
            from google.auth.credentials import AnonymousCredentials

            return AnonymousCredentials()
        return adc

    project = (request.gcp_project or adc_project or os.environ.get("GOOGLE_CLOUD_PROJECT")
               or os.environ.get("CLOUDSDK_CORE_PROJECT"))
    transient = gretry.if_exception_type(gexc.InternalServerError, gexc.TooManyRequests, gexc.ServiceUnavailable,
                                         gexc.BadGateway, requests.exceptions.ConnectionError,
                                         requests.exceptions.Timeout)
    retry = gretry.Retry(predicate=transient, initial=0.2, maximum=2.0, multiplier=2.0,
                         timeout=2.0 * request.timeout_s)
    return GcpContext(compute_v1=compute_v1, billing_v1=billing_v1, retry=retry, timeout_s=request.timeout_s,
                      project=project, compute_creds=pick(compute_ep), billing_creds=pick(billing_ep),
                      cred_error=cred_error)


def region_quotas(ctx: GcpContext, region: str, *, metrics: list[str]) -> dict[str, list[float]]:
    """Metric -> [limit, usage] (GPUs) for the asked metrics in ``region``."""
    reg = ctx.regions(region).get(project=ctx.need_project(), region=region, retry=ctx.retry, timeout=ctx.timeout_s)
    wanted = set(metrics)
    return {q.metric: [float(q.limit), float(q.usage)] for q in reg.quotas if q.metric in wanted}


def accelerator_zones(ctx: GcpContext, region: str) -> dict[str, list[str]]:
    """GPU type (e.g. nvidia-h100-80gb) -> zones that offer it, from one aggregated list."""
    req = {"project": ctx.need_project(), "return_partial_success": True}
    pager = ctx.accelerator_types().aggregated_list(request=req, retry=ctx.retry, timeout=ctx.timeout_s)
    out: dict[str, set[str]] = {}
    for scope, scoped in pager:
        for at in scoped.accelerator_types:
            zone = (at.zone.rsplit("/", 1)[-1] if at.zone else "") or scope.rsplit("/", 1)[-1]
            out.setdefault(at.name, set()).add(zone)
    return {k: sorted(v) for k, v in sorted(out.items())}


def _unit_price(sku: Any) -> float | None:
    for info in sku.pricing_info[:1]:
        rates = sorted(info.pricing_expression.tiered_rates, key=lambda r: r.start_usage_amount)
        if rates:
            return float(rates[0].unit_price.units) + rates[0].unit_price.nanos / 1e9
    return None


def fixed_machine(machine_type: str) -> bool:
    """True for a family billed by one SKU per GPU slice (no Core/Ram SKUs)."""
    return machine_type.startswith(FIXED_MACHINE_FAMILIES)


def classify_sku(description: str, resource_group: str) -> tuple[str, str] | None:
    """(component kind, name) of a SKU we price machines from: ("gpu", gke accelerator), ("core"|"ram", family
    stem) or ("ssd", "local") for the Local SSD; None for everything else."""
    desc = description.lower()
    if any(w in desc for w in _SKIP_WORDS):
        return None
    if resource_group == "LocalSSD":
        return ("ssd", "local") if desc.startswith(("ssd backed local storage", "spot preemptible ssd backed")) \
            else None
    if resource_group == "GPU" or "gpu slice" in desc:  # a slice SKU's group is not documented: by its name
        for gpu, phrases in GPU_SKU_PHRASES.items():
            if any(p.lower() in desc for p in phrases):
                return ("gpu", gpu)
        return None
    stem_text = desc.removeprefix("spot preemptible ").removeprefix("preemptible ")
    for stem in sorted(set(HOST_SKU_STEMS.values()), key=len, reverse=True):
        s = stem.lower()
        if stem_text.startswith(s + " core"):
            return ("core", stem)
        if stem_text.startswith(s + " ram"):
            return ("ram", stem)
    return None


def skus(ctx: GcpContext, region: str) -> dict[str, dict[str, dict[str, list[float | None]]]]:
    """Unit prices USD/h: {"gpu"|"core"|"ram"|"ssd": {name: {region: [on-demand, spot]}}} (per GPU, vCPU, GiB,
    GiB of Local SSD)."""
    pager = ctx.catalog().list_skus(request={"parent": COMPUTE_SERVICE, "currency_code": "USD", "page_size": 5000},
                                    retry=ctx.retry, timeout=ctx.timeout_s)
    out: dict[str, dict[str, dict[str, list[float | None]]]] = {"gpu": {}, "core": {}, "ram": {}, "ssd": {}}
    for sku in pager:
        cat = sku.category
        if cat.resource_family not in ("Compute", "Storage") or cat.usage_type not in ("OnDemand", "Preemptible"):
            continue
        kind = classify_sku(sku.description, cat.resource_group)
        price = _unit_price(sku) if kind else None
        if kind is None or price is None:
            continue
        if kind[0] == "ssd":
            unit = sku.pricing_info[0].pricing_expression.usage_unit if sku.pricing_info else ""
            if unit.endswith(".mo"):  # GiBy.mo: a GiB-month
                price /= HOURS_PER_MONTH
        slot = 0 if cat.usage_type == "OnDemand" else 1
        for reg in sku.service_regions:
            pair = out[kind[0]].setdefault(kind[1], {}).setdefault(reg, [None, None])
            if pair[slot] is None:
                pair[slot] = price
    return out


def reservations(ctx: GcpContext, region: str, *, machine_types: list[str]) -> list[dict[str, Any]]:
    """READY specific-SKU reservations of ``machine_types`` with free nodes (count - inUseCount), every zone."""
    req = {"project": ctx.need_project(), "return_partial_success": True}
    pager = ctx.reservations().aggregated_list(request=req, retry=ctx.retry, timeout=ctx.timeout_s)
    wanted = set(machine_types)
    out = []
    for scope, scoped in pager:
        for r in scoped.reservations:
            sku = r.specific_reservation
            machine = sku.instance_properties.machine_type
            free = int(sku.count) - int(sku.in_use_count)
            if r.status != "READY" or machine not in wanted or free < 1:
                continue
            zone = (r.zone.rsplit("/", 1)[-1] if r.zone else "") or scope.rsplit("/", 1)[-1]
            out.append({"id": f"{zone}/{r.name}", "instance_type": machine, "zone": zone, "count": free,
                        "ends": r.delete_at_time or None, "kind": "gcp-reservation",
                        "committed": bool(r.commitment)})
    return sorted(out, key=lambda x: x["id"])


OPS: dict[str, Callable[..., Any]] = {"region_quotas": region_quotas, "accelerator_zones": accelerator_zones,
                                      "skus": skus, "reservations": reservations}
