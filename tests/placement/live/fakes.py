"""Local HTTP fakes of the cloud APIs that ``placement --live`` reads, with fault injection.

* :class:`GcpFake`: ``GET /compute/v1/projects/P/regions/R``, ``/compute/v1/projects/P/aggregated/acceleratorTypes``,
  ``/compute/v1/projects/P/aggregated/reservations`` and Cloud Billing ``GET /v1/services/6F81-5844-456A/skus``
  (paginated), in the JSON shapes of the real APIs, for the real ``compute_v1`` / ``billing_v1`` clients
  (``api_endpoint`` http://127.0.0.1:PORT).
* :class:`AwsFake`: a proxy in front of moto's server. It forwards what moto implements (EC2 describe calls,
  CloudWatch) and answers itself what moto lacks (Service Quotas, GetSpotPlacementScores, Pricing,
  DescribeCapacityReservations), so a separate process (the benchmark) can use it through ``AWS_ENDPOINT_URL``.

Both bind 127.0.0.1 on a random port, count requests, add ``latency_s`` to every answer and apply
``faults``: key (region name, or ``acceleratorTypes`` / ``skus`` / ``placement-scores``) -> ``"403"``,
``"429"``, ``"500"``, ``"hang"`` (answer after ``hang_s``), a number (extra latency in seconds), or an odd
200 answer: ``"html"`` (an HTML page), ``"truncated"`` (half a document) or ``"trickle"`` (a body that
never ends: one byte every ``trickle_s`` for ``trickle_for_s``, so no socket read ever times out).
Used by tests/placement/live and scripts/bench_live.py. Only loopback is ever contacted.
"""

from __future__ import annotations

import http.client
import json
import re
import threading
import time
import urllib.parse
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

GPU_METRICS = {
    "nvidia-tesla-a100": "NVIDIA_A100_GPUS",
    "nvidia-a100-80gb": "NVIDIA_A100_80GB_GPUS",
    "nvidia-h100-80gb": "NVIDIA_H100_GPUS",
    "nvidia-h100-mega-80gb": "NVIDIA_H100_MEGA_GPUS",
    "nvidia-h200-141gb": "NVIDIA_H200_GPUS",
    "nvidia-b200": "NVIDIA_B200_GPUS",
    "nvidia-l4": "NVIDIA_L4_GPUS",
}
GPU_SKU_TEXT = {
    "nvidia-tesla-a100": "Nvidia Tesla A100 GPU",
    "nvidia-a100-80gb": "Nvidia Tesla A100 80GB GPU",
    "nvidia-h100-80gb": "Nvidia H100 80GB GPU",
    "nvidia-h100-mega-80gb": "Nvidia H100 80GB Mega GPU",
    "nvidia-h200-141gb": "H200 141GB GPU",
    "nvidia-b200": "A4 Nvidia B200 (1 gpu slice)",
    "nvidia-l4": "Nvidia L4 GPU",
}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def handle_error(self, request: object, client_address: object) -> None:
        # A client that gives up at its deadline resets the connection; that is the behaviour under test,
        # not an error of the fake worth a traceback on stderr.
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


class _Base:
    """Threaded server on 127.0.0.1:0 with request counting, latency and faults."""

    def __init__(self, latency_s: float = 0.0, hang_s: float = 30.0, trickle_s: float = 0.2,
                 trickle_for_s: float = 60.0) -> None:
        self.latency_s = latency_s
        self.hang_s = hang_s
        self.trickle_s = trickle_s
        self.trickle_for_s = trickle_for_s
        self.faults: dict[str, str | float] = {}
        self.requests: list[str] = []
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                fake._dispatch(self, b"")

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                fake._dispatch(self, body)

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, name=type(self).__name__, daemon=True)

    def start(self) -> _Base:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def count(self, pattern: str = "") -> int:
        with self._lock:
            return sum(1 for r in self.requests if pattern in r)

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
        self.faults.clear()
        for name in ("metric_status", "spot_rows"):
            table = getattr(self, name, None)
            if table is not None:
                table.clear()
        reservations = getattr(self, "reservations", None)
        if reservations is not None:
            reservations.clear()

    def _record(self, what: str) -> None:
        with self._lock:
            self.requests.append(what)

    def _delay(self, key: str) -> str | None:
        """Sleep the base latency (+ a numeric fault); return an error fault to answer with, if any."""
        fault = self.faults.get(key)
        extra = float(fault) if isinstance(fault, (int, float)) else 0.0
        if fault == "hang":
            extra = self.hang_s
        if self.latency_s + extra > 0:
            time.sleep(self.latency_s + extra)
        return fault if isinstance(fault, str) and fault != "hang" else None

    @staticmethod
    def _send(h: BaseHTTPRequestHandler, status: int, body: bytes, ctype: str,
              headers: Iterable[tuple[str, str]] = ()) -> None:
        try:
            h.send_response(status)
            h.send_header("Content-Type", ctype)
            h.send_header("Content-Length", str(len(body)))
            for k, v in headers:
                h.send_header(k, v)
            h.end_headers()
            h.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (its timeout): fine

    def _odd(self, h: BaseHTTPRequestHandler, fault: str, ctype: str) -> bool:
        """Answer 200 with an unusable body for the odd faults; False for the error-code ones."""
        if fault == "html":
            self._send(h, 200, b"<html><body><h1>Sign in</h1></body></html>", "text/html")
        elif fault == "truncated":
            self._send(h, 200, b'{"items": {"zones/x": {"acceleratorTypes": [{"name": "nvi' if "json" in ctype
                       else b"<?xml version='1.0'?><Response><item><instanceType>p5.4", ctype)
        elif fault == "trickle":
            try:
                h.send_response(200)
                h.send_header("Content-Type", ctype)
                h.send_header("Content-Length", "100000")
                h.end_headers()
                h.wfile.flush()
                end = time.monotonic() + self.trickle_for_s
                while time.monotonic() < end:
                    h.wfile.write(b" ")
                    h.wfile.flush()
                    time.sleep(self.trickle_s)
                h.close_connection = True
            except (BrokenPipeError, ConnectionResetError):
                pass
        else:
            return False
        return True

    def _dispatch(self, h: BaseHTTPRequestHandler, body: bytes) -> None:
        raise NotImplementedError


# ----------------------------------------------------------------------------- GCP


class GcpFake(_Base):
    """Compute Engine regions/acceleratorTypes and Cloud Billing SKUs for ``project``."""

    def __init__(self, project: str, zones: dict[str, list[str]], quotas: dict[str, dict[str, tuple[float, float]]],
                 skus: list[dict[str, Any]], sku_page_size: int = 50, **kw: Any) -> None:
        """``zones``: zone -> GPU types offered there; ``quotas``: region -> metric -> (limit, usage)."""
        super().__init__(**kw)
        self.project = project
        self.zones = zones
        self.quotas = quotas
        # zone -> reservations as the API returns them (see gcp_reservation()); empty unless a test sets them
        self.reservations: dict[str, list[dict[str, Any]]] = {}
        self.skus = skus
        self.sku_page_size = sku_page_size

    def _error(self, h: BaseHTTPRequestHandler, code: str) -> None:
        if self._odd(h, code, "application/json"):
            return
        status = {"403": ("PERMISSION_DENIED", "Required 'compute.regions.get' permission"),
                  "429": ("RESOURCE_EXHAUSTED", "Quota exceeded for quota metric 'Queries'"),
                  "500": ("INTERNAL", "Internal error. Please try again.")}[code]
        doc = {"error": {"code": int(code), "message": status[1], "status": status[0],
                         "errors": [{"message": status[1], "domain": "global", "reason": status[0].lower()}]}}
        self._send(h, int(code), json.dumps(doc).encode(), "application/json")

    def _dispatch(self, h: BaseHTTPRequestHandler, body: bytes) -> None:
        url = urllib.parse.urlsplit(h.path)
        query = urllib.parse.parse_qs(url.query)
        path = url.path
        self._record(f"GET {path}")
        base = f"https://www.googleapis.com/compute/v1/projects/{self.project}"
        m = re.fullmatch(r"/compute/v1/projects/([^/]+)/regions/([^/]+)", path)
        if m:
            fault = self._delay(m.group(2))
            if fault:
                return self._error(h, fault)
            if m.group(1) != self.project or m.group(2) not in self.quotas:
                return self._send(h, 404, json.dumps({"error": {"code": 404, "message": "not found",
                                                                 "status": "NOT_FOUND"}}).encode(), "application/json")
            region = m.group(2)
            quotas = [{"metric": "CPUS", "limit": 2400.0, "usage": 12.0},
                      {"metric": "DISKS_TOTAL_GB", "limit": 409600.0, "usage": 500.0}]
            quotas += [{"metric": k, "limit": v[0], "usage": v[1]} for k, v in sorted(self.quotas[region].items())]
            doc = {"kind": "compute#region", "id": str(1000 + len(region)), "name": region, "status": "UP",
                   "description": region, "selfLink": f"{base}/regions/{region}",
                   "zones": [f"{base}/zones/{z}" for z in sorted(self.zones) if z.rsplit("-", 1)[0] == region],
                   "quotas": quotas, "supportsPzs": False}
            return self._send(h, 200, json.dumps(doc).encode(), "application/json")
        if path == f"/compute/v1/projects/{self.project}/aggregated/acceleratorTypes":
            fault = self._delay("acceleratorTypes")
            if fault:
                return self._error(h, fault)
            items: dict[str, Any] = {}
            for zone, gpus in sorted(self.zones.items()):
                if not gpus:
                    items[f"zones/{zone}"] = {"warning": {
                        "code": "NO_RESULTS_ON_PAGE",
                        "message": f"There are no results for scope 'zones/{zone}' on this page.",
                        "data": [{"key": "scope", "value": f"zones/{zone}"}]}}
                    continue
                items[f"zones/{zone}"] = {"acceleratorTypes": [{
                    "kind": "compute#acceleratorType", "id": str(10000 + i),
                    "creationTimestamp": "2023-01-01T00:00:00.000-08:00",
                    "name": g, "description": g.upper(), "zone": f"{base}/zones/{zone}",
                    "selfLink": f"{base}/zones/{zone}/acceleratorTypes/{g}", "maximumCardsPerInstance": 8}
                    for i, g in enumerate(gpus)]}
            doc = {"kind": "compute#acceleratorTypeAggregatedList",
                   "id": f"projects/{self.project}/aggregated/acceleratorTypes",
                   "items": items, "selfLink": f"{base}/aggregated/acceleratorTypes"}
            return self._send(h, 200, json.dumps(doc).encode(), "application/json")
        if path == f"/compute/v1/projects/{self.project}/aggregated/reservations":
            fault = self._delay("reservations")
            if fault:
                return self._error(h, fault)
            zones = sorted(set(self.zones) | set(self.reservations))
            items = {f"zones/{z}": ({"reservations": self.reservations[z]} if self.reservations.get(z) else {
                "warning": {"code": "NO_RESULTS_ON_PAGE", "message": f"There are no results for scope 'zones/{z}'.",
                            "data": [{"key": "scope", "value": f"zones/{z}"}]}}) for z in zones}
            doc = {"kind": "compute#reservationAggregatedList",
                   "id": f"projects/{self.project}/aggregated/reservations", "items": items,
                   "selfLink": f"{base}/aggregated/reservations"}
            return self._send(h, 200, json.dumps(doc).encode(), "application/json")
        if path == "/v1/services/6F81-5844-456A/skus":
            fault = self._delay("skus")
            if fault:
                return self._error(h, fault)
            start = int((query.get("pageToken") or ["0"])[0] or 0)
            size = min(int((query.get("pageSize") or [str(self.sku_page_size)])[0]), self.sku_page_size)
            page = self.skus[start:start + size]
            doc = {"skus": page, "nextPageToken": str(start + size) if start + size < len(self.skus) else ""}
            return self._send(h, 200, json.dumps(doc).encode(), "application/json")
        self._send(h, 404, b'{"error": {"code": 404, "message": "no such path", "status": "NOT_FOUND"}}',
                   "application/json")


def gcp_reservation(project: str, zone: str, name: str, machine_type: str, count: int, in_use: int,
                    status: str = "READY", delete_at: str | None = None,
                    commitment: str | None = None) -> dict[str, Any]:
    """One Compute Engine reservation in the API's JSON shape (a specific-SKU reservation)."""
    base = f"https://www.googleapis.com/compute/v1/projects/{project}"
    doc: dict[str, Any] = {
        "kind": "compute#reservation", "id": str(abs(hash(name)) % 10**12), "name": name,
        "creationTimestamp": "2026-11-01T00:00:00.000-07:00", "zone": f"{base}/zones/{zone}",
        "selfLink": f"{base}/zones/{zone}/reservations/{name}", "status": status,
        "specificReservationRequired": False,
        "specificReservation": {"count": str(count), "inUseCount": str(in_use), "instanceProperties": {
            "machineType": machine_type}},
    }
    if delete_at:
        doc["deleteAtTime"] = delete_at
    if commitment:
        doc["commitment"] = f"{base}/regions/{zone.rsplit('-', 1)[0]}/commitments/{commitment}"
    return doc


def money(usd: float) -> dict[str, Any]:
    units = int(usd)
    return {"currencyCode": "USD", "units": str(units), "nanos": int(round((usd - units) * 1e9))}


def sku(sku_id: str, description: str, group: str, usage: str, regions: list[str], usd: float,
        unit: str = "h") -> dict[str, Any]:
    """One Cloud Billing SKU in the API's JSON shape."""
    return {"name": f"services/6F81-5844-456A/skus/{sku_id}", "skuId": sku_id, "description": description,
            "category": {"serviceDisplayName": "Compute Engine", "resourceFamily": "Compute",
                         "resourceGroup": group, "usageType": usage},
            "serviceRegions": regions,
            "pricingInfo": [{"summary": "", "effectiveTime": "2026-11-01T00:00:00Z", "currencyConversionRate": 1,
                             "pricingExpression": {"usageUnit": unit, "usageUnitDescription": "hour",
                                                   "baseUnit": "s", "baseUnitDescription": "second",
                                                   "baseUnitConversionFactor": 3600, "displayQuantity": 1,
                                                   "tieredRates": [{"startUsageAmount": 0, "unitPrice": money(usd)}]},
                             "aggregationInfo": {"aggregationLevel": "ACCOUNT", "aggregationInterval": "DAILY",
                                                 "aggregationCount": 1}}],
            "serviceProviderName": "Google", "geoTaxonomy": {"type": "REGIONAL", "regions": regions}}


def gcp_skus(regions: list[str], gpu_prices: dict[str, tuple[float, float]],
             host_prices: dict[str, tuple[float, float, float, float]],
             ssd_prices: tuple[float, float] | None = None) -> list[dict[str, Any]]:
    """SKUs for ``regions``: GPU (on-demand, spot) per GPU type, and per host stem (core od, core spot,
    ram od, ram spot), the Local SSD (GiB-month on-demand, spot) when given; plus a few SKUs that must be
    ignored (commitment, other families). Descriptions, groups and units as the Cloud Billing Catalog names them
    (e.g. "SSD backed Local Storage running in Americas", Storage/LocalSSD, GiBy.mo)."""
    out: list[dict[str, Any]] = []
    if ssd_prices is not None:
        for sku_id, text, usage, usd in (
                ("S000-OD", "SSD backed Local Storage running in Americas", "OnDemand", ssd_prices[0]),
                ("S000-SP", "SSD backed Local Storage attached to Spot Preemptible VMs running in Americas",
                 "Preemptible", ssd_prices[1]),
                ("S000-CM", "Commitment v1: Local SSD In Americas for 1 Year", "Commit1Yr", ssd_prices[0] / 2)):
            doc = sku(sku_id, text, "LocalSSD", usage, regions, usd, "GiBy.mo")
            doc["category"]["resourceFamily"] = "Storage"
            out.append(doc)
    n = 0
    for gpu, (od, spot) in sorted(gpu_prices.items()):
        text = GPU_SKU_TEXT[gpu]
        out.append(sku(f"G{n:03d}-OD", f"{text} running in Americas", "GPU", "OnDemand", regions, od))
        out.append(sku(f"G{n:03d}-SP", f"{text} attached to Spot Preemptible VMs running in Americas", "GPU",
                       "Preemptible", regions, spot))
        out.append(sku(f"G{n:03d}-CM", f"Commitment v1: {text} in Americas for 1 Year", "GPU", "Commit1Yr",
                       regions, od / 2))
        n += 1
    for stem, (core_od, core_sp, ram_od, ram_sp) in sorted(host_prices.items()):
        out.append(sku(f"H{n:03d}-C", f"{stem} Core running in Americas", "CPU", "OnDemand", regions, core_od))
        out.append(sku(f"H{n:03d}-CS", f"Spot Preemptible {stem} Core running in Americas", "CPU", "Preemptible",
                       regions, core_sp))
        out.append(sku(f"H{n:03d}-R", f"{stem} Ram running in Americas", "RAM", "OnDemand", regions, ram_od, "GiBy.h"))
        out.append(sku(f"H{n:03d}-RS", f"Spot Preemptible {stem} Ram running in Americas", "RAM", "Preemptible",
                       regions, ram_sp, "GiBy.h"))
        n += 1
    out.append(sku("X000", "N1 Predefined Instance Core running in Americas", "N1Standard", "OnDemand", regions, 0.03))
    return out


# ----------------------------------------------------------------------------- AWS


class _CborTime(float):
    """An epoch-seconds time stamp, encoded as CBOR tag 1."""


def _cbor(obj: Any) -> bytes:
    """Tiny CBOR encoder (maps, lists, strings, numbers) for CloudWatch's rpc-v2-cbor bodies."""
    def head(major: int, n: int) -> bytes:
        if n < 24:
            return bytes([major << 5 | n])
        if n < 256:
            return bytes([major << 5 | 24, n])
        return bytes([major << 5 | 25]) + n.to_bytes(2, "big")
    if isinstance(obj, str):
        b = obj.encode()
        return head(3, len(b)) + b
    if isinstance(obj, bool):
        return bytes([0xF5 if obj else 0xF4])
    if isinstance(obj, int):
        return head(0, obj)
    if isinstance(obj, _CborTime):
        return b"\xc1" + _cbor(float(obj))
    if isinstance(obj, float):
        import struct

        return b"\xfb" + struct.pack(">d", obj)
    if isinstance(obj, list):
        return head(4, len(obj)) + b"".join(_cbor(v) for v in obj)
    if isinstance(obj, dict):
        return head(5, len(obj)) + b"".join(_cbor(k) + _cbor(v) for k, v in obj.items())
    raise TypeError(type(obj))


class AwsFake(_Base):
    """Proxy to a moto server (``upstream`` http://127.0.0.1:PORT) plus the calls moto does not implement.

    ``quota_limits``: (region, code) -> vCPUs (default ``default_limit``); ``scores``: instance type ->
    zone ID -> score; ``ondemand``: (instance type, region) -> USD/h for the Pricing API.
    With ``native`` (region -> zone name -> zone ID, and ``offerings``: region -> type -> zone IDs) and no
    upstream, it answers the EC2 describe calls and CloudWatch itself (the benchmark: moto's own CPU time
    would otherwise be part of what is measured).
    """

    def __init__(self, upstream: str | None, quota_limits: dict[tuple[str, str], float] | None = None,
                 default_limit: float = 1536.0, scores: dict[str, dict[str, int]] | None = None,
                 ondemand: dict[tuple[str, str], float] | None = None,
                 native: dict[str, dict[str, str]] | None = None,
                 offerings: dict[str, dict[str, list[str]]] | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        up = urllib.parse.urlsplit(upstream or "http://127.0.0.1:9")
        self.upstream = (up.hostname or "127.0.0.1", up.port or 80)
        self.native = native if upstream is None else None
        self.offerings = offerings or {}
        self.quota_limits = quota_limits or {}
        self.default_limit = default_limit
        self.scores = scores or {}
        self.ondemand = ondemand or {}
        # region -> capacity reservations (DescribeCapacityReservations fields, see aws_reservation())
        self.reservations: dict[str, list[dict[str, Any]]] = {}
        # region -> GetMetricData per-result StatusCode ("Complete", "InternalError", "Forbidden", "PartialData")
        # or "missing" (no results at all), answered here instead of by moto; ``metric_value`` its datapoint.
        self.metric_status: dict[str, str] = {}
        self.metric_value: float = 96.0
        # region -> DescribeSpotPriceHistory rows (instance type, zone name, price text), answered here.
        self.spot_rows: dict[str, list[tuple[str, str, str]]] = {}
        self._local = threading.local()

    @staticmethod
    def scope(h: BaseHTTPRequestHandler) -> tuple[str, str]:
        """(region, service) from the SigV4 credential scope of the request."""
        m = re.search(r"Credential=[^/]+/\d{8}/([^/]+)/([^/]+)/aws4_request", h.headers.get("Authorization", ""))
        return (m.group(1), m.group(2)) if m else ("", "")

    def _error(self, h: BaseHTTPRequestHandler, code: str, service: str, target: str) -> None:
        if self._odd(h, code, "text/xml" if service == "ec2" else h.headers.get("Content-Type", "application/json")):
            return
        name = {"403": "UnauthorizedOperation" if service == "ec2" else "AccessDeniedException",
                "429": "Throttling" if service == "ec2" else "ThrottlingException",
                "500": "InternalError" if service == "ec2" else "ServiceException"}[code]
        msg = f"injected {code} for this region"
        if service == "ec2":
            body = (f"<?xml version='1.0' encoding='UTF-8'?><Response><Errors><Error><Code>{name}</Code>"
                    f"<Message>{msg}</Message></Error></Errors><RequestID>fake</RequestID></Response>").encode()
            return self._send(h, int(code), body, "text/xml")
        if service == "monitoring" and "cbor" in h.headers.get("Content-Type", ""):
            return self._send(h, int(code), _cbor({"__type": name, "message": msg}), "application/cbor",
                              [("smithy-protocol", "rpc-v2-cbor")])
        if service == "monitoring":
            return self._send(h, int(code), json.dumps({"__type": name, "message": msg}).encode(),
                              "application/x-amz-json-1.0")
        return self._send(h, int(code), json.dumps({"__type": name, "message": msg}).encode(),
                          "application/x-amz-json-1.1")

    def _dispatch(self, h: BaseHTTPRequestHandler, body: bytes) -> None:
        region, service = self.scope(h)
        target = h.headers.get("X-Amz-Target", "")
        form = urllib.parse.parse_qs(body.decode(errors="replace")) if service == "ec2" else {}
        action = (form.get("Action") or [""])[0] or target.rsplit(".", 1)[-1] or h.path.rsplit("/", 1)[-1]
        self._record(f"{service} {region} {action}")
        fault_key = "placement-scores" if action == "GetSpotPlacementScores" else region
        fault = self._delay(fault_key)
        if fault:
            return self._error(h, fault, service, target)
        if target.startswith("ServiceQuotasV20190624."):
            req = json.loads(body or b"{}")
            code = req.get("QuotaCode", "")
            doc = {"Quota": {"ServiceCode": "ec2", "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
                             "QuotaCode": code, "QuotaName": code, "Unit": "None", "Adjustable": True,
                             "GlobalQuota": False,
                             "Value": self.quota_limits.get((region, code), self.default_limit)}}
            return self._send(h, 200, json.dumps(doc).encode(), "application/x-amz-json-1.1")
        if target == "AWSPriceListService.GetProducts":
            req = json.loads(body or b"{}")
            itype = next((f["Value"] for f in req.get("Filters", []) if f.get("Field") == "instanceType"), "")
            items = [json.dumps({"product": {"attributes": {"regionCode": r, "instanceType": itype}},
                                 "terms": {"OnDemand": {"x": {"priceDimensions": {"y": {
                                     "unit": "Hrs", "pricePerUnit": {"USD": f"{p:.4f}"}}}}}}})
                     for (t, r), p in sorted(self.ondemand.items()) if t == itype]
            return self._send(h, 200, json.dumps({"FormatVersion": "aws_v1", "PriceList": items}).encode(),
                              "application/x-amz-json-1.1")
        if action == "GetSpotPlacementScores":
            return self._scores(h, form)
        if action == "DescribeCapacityReservations":
            return self._reservations(h, region, form)
        if service == "monitoring" and region in self.metric_status:
            return self._metric_data(h, self.metric_status[region], body)
        if action == "DescribeSpotPriceHistory" and region in self.spot_rows:
            return self._spot_rows(h, self.spot_rows[region])
        if self.native is not None:
            return self._native(h, region, service, action, form)
        self._forward(h, body)

    def _native(self, h: BaseHTTPRequestHandler, region: str, service: str, action: str,
                form: dict[str, list[str]]) -> None:
        zones = (self.native or {}).get(region, {})
        if service == "monitoring":  # GetMetricData: no datapoints (nothing running)
            doc = {"MetricDataResults": [{"Id": f"u{i}", "Label": "ResourceCount", "Timestamps": [], "Values": [],
                                          "StatusCode": "Complete"} for i in range(4)], "Messages": []}
            if "cbor" in h.headers.get("Content-Type", ""):
                return self._send(h, 200, _cbor(doc), "application/cbor", [("smithy-protocol", "rpc-v2-cbor")])
            return self._send(h, 200, json.dumps(doc).encode(), "application/x-amz-json-1.0")
        ns = "xmlns='http://ec2.amazonaws.com/doc/2016-11-15/'"
        if action == "DescribeAvailabilityZones":
            items = "".join(f"<item><zoneName>{n}</zoneName><zoneId>{z}</zoneId><zoneState>available</zoneState>"
                            f"<regionName>{region}</regionName><zoneType>availability-zone</zoneType></item>"
                            for n, z in sorted(zones.items()))
            body = f"<DescribeAvailabilityZonesResponse {ns}><requestId>f</requestId><availabilityZoneInfo>{items}" \
                   "</availabilityZoneInfo></DescribeAvailabilityZonesResponse>"
        elif action == "DescribeInstanceTypeOfferings":
            types = [v[0] for k, v in sorted(form.items()) if k.startswith("Filter.1.Value.")]
            items = "".join(f"<item><instanceType>{t}</instanceType><locationType>availability-zone-id</locationType>"
                            f"<location>{z}</location></item>"
                            for t, zs in sorted(self.offerings.get(region, {}).items()) if t in types for z in zs)
            body = f"<DescribeInstanceTypeOfferingsResponse {ns}><requestId>f</requestId><instanceTypeOfferingSet>" \
                   f"{items}</instanceTypeOfferingSet></DescribeInstanceTypeOfferingsResponse>"
        elif action == "DescribeSpotPriceHistory":
            types = [v[0] for k, v in sorted(form.items()) if k.startswith("InstanceType.")]
            by_id = {z: n for n, z in zones.items()}
            items = "".join(f"<item><instanceType>{t}</instanceType><productDescription>Linux/UNIX</productDescription>"
                            f"<spotPrice>{20 + i % 5}.125000</spotPrice><timestamp>2026-11-22T00:00:00.000Z</timestamp>"
                            f"<availabilityZone>{by_id.get(z, z)}</availabilityZone></item>"
                            for t, zs in sorted(self.offerings.get(region, {}).items()) if t in types
                            for i, z in enumerate(zs))
            body = f"<DescribeSpotPriceHistoryResponse {ns}><requestId>f</requestId><spotPriceHistorySet>{items}" \
                   "</spotPriceHistorySet><nextToken/></DescribeSpotPriceHistoryResponse>"
        else:
            return self._error(h, "500", service, action)
        self._send(h, 200, body.encode(), "text/xml")

    def _metric_data(self, h: BaseHTTPRequestHandler, status: str, body: bytes) -> None:
        """GetMetricData whose every result has ``status`` (and ``metric_value`` when Complete)."""
        cbor = "cbor" in h.headers.get("Content-Type", "")
        ids = [f"u{i}" for i in range(8)]  # the ids the client asks for are u0, u1, ...
        results = [] if status == "missing" else [
            {"Id": i, "Label": "ResourceCount", "StatusCode": status,
             "Timestamps": [] if status != "Complete" else [time.time()],
             "Values": [] if status != "Complete" else [self.metric_value]} for i in ids]
        messages = [] if status in ("Complete", "missing") else [{"Code": status, "Value": f"injected {status}"}]
        doc = {"MetricDataResults": results, "Messages": messages}
        if cbor:
            for r in results:
                r["Timestamps"] = [_CborTime(t) for t in r["Timestamps"]]
            return self._send(h, 200, _cbor(doc), "application/cbor", [("smithy-protocol", "rpc-v2-cbor")])
        return self._send(h, 200, json.dumps(doc).encode(), "application/x-amz-json-1.0")

    def _spot_rows(self, h: BaseHTTPRequestHandler, rows: list[tuple[str, str, str]]) -> None:
        ns = "xmlns='http://ec2.amazonaws.com/doc/2016-11-15/'"
        items = "".join(f"<item><instanceType>{t}</instanceType><productDescription>Linux/UNIX</productDescription>"
                        f"<spotPrice>{p}</spotPrice><timestamp>2026-11-22T00:00:00.000Z</timestamp>"
                        f"<availabilityZone>{z}</availabilityZone></item>" for t, z, p in rows)
        body = f"<DescribeSpotPriceHistoryResponse {ns}><requestId>f</requestId><spotPriceHistorySet>{items}" \
               "</spotPriceHistorySet><nextToken/></DescribeSpotPriceHistoryResponse>"
        self._send(h, 200, body.encode(), "text/xml")

    def _scores(self, h: BaseHTTPRequestHandler, form: dict[str, list[str]]) -> None:
        itype = (form.get("InstanceType.1") or [""])[0]
        regions = [v[0] for k, v in sorted(form.items()) if k.startswith("RegionName.")]
        rows = []
        for zid, score in sorted(self.scores.get(itype, {}).items()):
            region = next((r for r in regions if zid.startswith(_zone_prefix(r))), None)
            if region:
                rows.append(f"<item><region>{region}</region><availabilityZoneId>{zid}</availabilityZoneId>"
                            f"<score>{score}</score></item>")
        body = (f"<?xml version='1.0' encoding='UTF-8'?><GetSpotPlacementScoresResponse "
                f"xmlns='http://ec2.amazonaws.com/doc/2016-11-15/'><requestId>fake</requestId>"
                f"<spotPlacementScoreSet>{''.join(rows)}</spotPlacementScoreSet></GetSpotPlacementScoresResponse>")
        self._send(h, 200, body.encode(), "text/xml")

    def _reservations(self, h: BaseHTTPRequestHandler, region: str, form: dict[str, list[str]]) -> None:
        """DescribeCapacityReservations, honouring the state and instance-type filters."""
        filters: dict[str, set[str]] = {}
        for k, v in form.items():
            m = re.fullmatch(r"Filter\.(\d+)\.Name", k)
            if m:
                filters[v[0]] = {vals[0] for kk, vals in form.items() if kk.startswith(f"Filter.{m.group(1)}.Value.")}
        items = []
        for r in self.reservations.get(region, []):
            if "state" in filters and r.get("State", "active") not in filters["state"]:
                continue
            if "instance-type" in filters and r["InstanceType"] not in filters["instance-type"]:
                continue
            fields = {"capacityReservationId": r["CapacityReservationId"], "instanceType": r["InstanceType"],
                      "instancePlatform": r.get("InstancePlatform", "Linux/UNIX"),
                      "availabilityZone": r["AvailabilityZone"], "availabilityZoneId": r.get("AvailabilityZoneId"),
                      "tenancy": r.get("Tenancy", "default"), "totalInstanceCount": r["TotalInstanceCount"],
                      "availableInstanceCount": r["AvailableInstanceCount"], "state": r.get("State", "active"),
                      "endDate": r.get("EndDate"), "endDateType": "limited" if r.get("EndDate") else "unlimited",
                      "instanceMatchCriteria": r.get("InstanceMatchCriteria", "open"),
                      "reservationType": r.get("ReservationType", "default"),
                      "interruptible": str(bool(r.get("Interruptible", False))).lower()}
            items.append("<item>" + "".join(f"<{k}>{v}</{k}>" for k, v in fields.items() if v is not None) + "</item>")
        body = (f"<?xml version='1.0' encoding='UTF-8'?><DescribeCapacityReservationsResponse "
                f"xmlns='http://ec2.amazonaws.com/doc/2016-11-15/'><requestId>fake</requestId>"
                f"<capacityReservationSet>{''.join(items)}</capacityReservationSet>"
                f"</DescribeCapacityReservationsResponse>")
        self._send(h, 200, body.encode(), "text/xml")

    def _forward(self, h: BaseHTTPRequestHandler, body: bytes) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = http.client.HTTPConnection(*self.upstream, timeout=60)
        headers = {k: v for k, v in h.headers.items() if k.lower() not in ("host", "connection")}
        try:
            conn.request(h.command, h.path, body=body or None, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException):
            self._local.conn = None
            return self._send(h, 502, b"", "text/plain")
        keep = [(k, v) for k, v in resp.getheaders()
                if k.lower() not in ("content-length", "connection", "transfer-encoding", "content-type",
                                     "server", "date")]
        self._send(h, resp.status, data, resp.getheader("Content-Type") or "text/xml", keep)


def _zone_prefix(region: str) -> str:
    from placement.model.zones import aws_zone_id_prefix

    return (aws_zone_id_prefix(region) or region) + "-"
