"""Commitment prices read from the clouds themselves (``placement portfolio --live``), over the data's figures.

Imported only when ``--live`` asks for it; each SDK only when its cloud has a pool in play.

  AWS (boto3; the standard credential chain or ``--aws-profile``; botocore timeouts and standard retries):
    ec2:DescribeCapacityBlockOfferings          per (region, instance type) of a Capacity Block term: the
                                                offerings of one instance for the term's shortest duration,
                                                starting in the next ``start_within_weeks`` weeks. Each one's
                                                price per node-hour is ``UpfrontFee / (InstanceCount × hours)``;
                                                the cheapest per start week becomes a dated rate: a block can
                                                start only in a week with an offering, at its price.
    savingsplans:DescribeSavingsPlansOfferingRates   the plan's rate (USD per instance-hour) per instance type
                                                and region: EC2Instance plans for ``scope: family-region`` terms,
                                                Compute plans for ``scope: all``; 1 or 3 years by the term's
                                                duration; No Upfront for a monthly term, All Upfront for an
                                                upfront one; Linux/UNIX, shared tenancy.
  GCP (google-cloud-billing, Application Default Credentials; ``GPUFLEET_GCP_BILLING_ENDPOINT`` for a fake):
    billing:skus                                the Compute Engine SKUs: per region, the GPU, core and RAM unit
                                                prices of each mode: OnDemand, Commit1Yr and Commit3Yr
                                                (``Commitment v1: ...``), calendar mode (``... Calendar Mode``)
                                                and flex-start (``DWS Defined Duration ...``). A machine's price in
                                                a mode is GPUs × GPU + vCPUs × core + GiB × RAM over the parts both
                                                the mode and on-demand price (the GPU at least); its discount is
                                                1 − that / the same parts on demand. Committed-use terms take the
                                                1- or 3-year discount by duration; a future-reservation term the
                                                calendar-mode one, else flex-start's (calendar mode carries the
                                                flex-start discount).

Every figure read becomes a :class:`placement.model.commitments.Rate` with ``source: live: ...``, today's date and
``verified: true``. A call that fails (no credentials, denied, throttled, timeout, a malformed answer) leaves
the data's figures in place, with a warning naming the cloud, the call and why (credentials never reach it).
Every answer is checked by shape before use; a value that is not a finite price is skipped.
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from placement.live import LiveRequest, Source
from placement.live.errors import classify, scrub
from placement.model.commitments import Book, Rate, Term

if TYPE_CHECKING:
    from placement.plan.portfolio import Pool

RateKey = tuple[str, str | None, str]
SP_TYPES = {"family-region": "EC2Instance", "all": "Compute"}
SP_REGION = "us-east-1"  # Savings Plans is a global service answered from one endpoint
SECONDS_PER_YEAR = 31_536_000
MAX_PAGES = 50
WORKERS = 8


@dataclass
class LiveRates:
    """What the live calls gave: rates by (term, region, instance type), one source row per call kind, and a
    warning per failure (the data's figures stay in use there)."""

    rates: dict[RateKey, Rate] = field(default_factory=dict)
    sources: list[Source] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def failed(self, cloud: str, service: str, region: str, exc: BaseException) -> None:
        status, detail = classify(exc)
        self.sources.append(Source(cloud, service, region, status, detail))  # type: ignore[arg-type]
        self.warnings.append(f"live {cloud} {service} {region}: {status}: {detail}; the data's figures are used")


def _finite(x: Any) -> float | None:
    """``x`` as a positive finite number, or None (an answer's value is untrusted)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) and v > 0 else None


# ------------------------------------------------------------------------------------------------ AWS


def capacity_block_weeks(offerings: Sequence[Mapping[str, Any]], now: dt.datetime) -> dict[int, float]:
    """Start week (from ``now``) -> the cheapest USD per node-hour of the offerings starting that week."""
    out: dict[int, float] = {}
    for o in offerings:
        if not isinstance(o, Mapping):
            continue
        fee, count, hours = _finite(o.get("UpfrontFee")), _finite(o.get("InstanceCount")), \
            _finite(o.get("CapacityBlockDurationHours"))
        start = o.get("StartDate")
        if fee is None or count is None or hours is None or not isinstance(start, dt.datetime):
            continue
        if str(o.get("CurrencyCode") or "USD") != "USD":
            continue
        when = start if start.tzinfo else start.replace(tzinfo=dt.UTC)
        week = max(int((when - now).total_seconds() // (7 * 86400)), 0)
        price = fee / (count * hours)
        out[week] = min(out.get(week, math.inf), price)
    return out


def capacity_block_offerings(ctx: Any, region: str, *, instance_type: str, hours: int, start: dt.datetime,
                             end: dt.datetime) -> list[dict[str, Any]]:
    """ec2:DescribeCapacityBlockOfferings for one instance of ``instance_type`` for ``hours``, starting in
    [start, end]."""
    from placement.live.aws import _api_answer

    ec2 = ctx.client("ec2", region, "capacity-blocks")
    items: list[dict[str, Any]] = []
    token: str | None = None
    for _ in range(MAX_PAGES):
        resp = _api_answer(ec2.describe_capacity_block_offerings(
            InstanceType=instance_type, InstanceCount=1, CapacityDurationHours=hours, StartDateRange=start,
            EndDateRange=end, **({"NextToken": token} if token else {})))
        got = resp.get("CapacityBlockOfferings") or []
        if not isinstance(got, list):
            raise ValueError("CapacityBlockOfferings is not a list")
        items.extend(got)
        token = resp.get("NextToken")
        if not token:
            break
    return items


def savings_plan_rates(ctx: Any, *, plan_type: str, seconds: int, payment: str, instance_types: Sequence[str],
                       regions: Sequence[str]) -> dict[tuple[str, str], float]:
    """(region, instance type) -> the plan's USD per instance-hour (Linux/UNIX, shared tenancy)."""
    sp = ctx.client("savingsplans", SP_REGION, "rates")
    out: dict[tuple[str, str], float] = {}
    token: str | None = None
    wanted_types, wanted_regions = set(instance_types), set(regions)
    for _ in range(MAX_PAGES):
        resp = sp.describe_savings_plans_offering_rates(
            savingsPlanTypes=[plan_type], savingsPlanPaymentOptions=[payment], products=["EC2"],
            serviceCodes=["AmazonEC2"], maxResults=1000,
            filters=[{"name": "instanceType", "values": sorted(wanted_types)},
                     {"name": "region", "values": sorted(wanted_regions)},
                     {"name": "productDescription", "values": ["Linux/UNIX"]},
                     {"name": "tenancy", "values": ["shared"]}],
            **({"nextToken": token} if token else {}))
        results = resp.get("searchResults") or []
        if not isinstance(results, list):
            raise ValueError("searchResults is not a list")
        for r in results:
            if not isinstance(r, Mapping):
                continue
            offering = r.get("savingsPlanOffering") or {}
            if not isinstance(offering, Mapping) or int(_finite(offering.get("durationSeconds")) or 0) != seconds \
                    or str(offering.get("planType") or plan_type) != plan_type:
                continue
            if str(offering.get("currency") or "USD") != "USD" or str(r.get("unit") or "Hrs") != "Hrs":
                continue
            props = {str(p.get("name")): str(p.get("value")) for p in r.get("properties") or []
                     if isinstance(p, Mapping)}
            rate = _finite(r.get("rate"))
            key = (props.get("region", ""), props.get("instanceType", ""))
            if rate is None or key[0] not in wanted_regions or key[1] not in wanted_types:
                continue
            out[key] = min(out.get(key, math.inf), rate)
        token = resp.get("nextToken")
        if not token:
            break
    return out


def _aws(book: Book, ps: Sequence[Pool], request: LiveRequest, now: dt.datetime, got: LiveRates) -> None:
    from placement.live import aws

    try:
        ctx = aws.prepare(request)
    except Exception as exc:  # noqa: BLE001 - reported as the cloud's source row; the data's figures stay
        got.failed("aws", "credentials", "-", exc)
        return
    today = now.date().isoformat()
    blocks = [(t, p) for t in book.terms if t.kind == "capacity-block" for p in ps
              if t.covers(p.cloud, p.accelerator, p.gpus)]

    def block(tp: tuple[Term, Pool]) -> tuple[Term, Pool, dict[int, float] | BaseException]:
        t, p = tp
        try:
            within = t.start_within_weeks if t.start_within_weeks is not None else 8
            offers = capacity_block_offerings(ctx, p.region, instance_type=p.instance_type,
                                              hours=168 * min(t.durations_weeks), start=now,
                                              end=now + dt.timedelta(weeks=within + 1))
            return t, p, capacity_block_weeks(offers, now)
        except Exception as exc:  # noqa: BLE001 - one failed pool keeps its data figure
            return t, p, exc

    ok = 0
    with ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="gpufleet-cb") as pool:
        for t, p, res in pool.map(block, blocks):
            if isinstance(res, BaseException):
                got.failed("aws", "ec2:capacity-blocks", p.region, res)
                continue
            ok += 1
            median = statistics.median(res.values()) if res else None
            got.rates[(t.id, p.region, p.instance_type)] = Rate(
                t.id, p.instance_type, p.region, None, median, "live: ec2:DescribeCapacityBlockOfferings", today,
                True, f"{len(res)} start weeks offered" if res else "no block offered in the weeks asked",
                weeks=res)
    if blocks:
        got.sources.append(Source("aws", "ec2:capacity-blocks", "*", "ok" if ok == len(blocks) else "partial",
                                  f"{ok} of {len(blocks)} pools"))
    for t in book.terms:
        if t.kind != "savings-plan" or t.cloud != "aws":
            continue
        mine = [p for p in ps if t.covers(p.cloud, p.accelerator, p.gpus)]
        if not mine:
            continue
        years = max(1, round(max(t.durations_weeks) / 52))
        payment = "All Upfront" if t.payment == "upfront" else "No Upfront"
        try:
            rates = savings_plan_rates(ctx, plan_type=SP_TYPES[t.scope], seconds=years * SECONDS_PER_YEAR,
                                       payment=payment, instance_types=sorted({p.instance_type for p in mine}),
                                       regions=sorted({p.region for p in mine}))
        except Exception as exc:  # noqa: BLE001 - the term keeps its data figure
            got.failed("aws", "savingsplans", t.id, exc)
            continue
        for (region, itype), rate in rates.items():
            got.rates[(t.id, region, itype)] = Rate(
                t.id, itype, region, None, rate, "live: savingsplans:DescribeSavingsPlansOfferingRates", today, True,
                f"{SP_TYPES[t.scope]} {years} year {payment}")
        got.sources.append(Source("aws", "savingsplans", t.id, "ok", f"{len(rates)} rates"))


# ------------------------------------------------------------------------------------------------ GCP

MODES = ("ondemand", "commit1", "commit3", "calendar", "flex")


def sku_mode(description: str, usage_type: str) -> str | None:
    """Which price a SKU is: on-demand, a 1- or 3-year commitment, calendar mode or flex-start (None: another)."""
    d = description.lower()
    if usage_type == "Commit1Yr":
        return "commit1"
    if usage_type == "Commit3Yr":
        return "commit3"
    if usage_type != "OnDemand":
        return None
    if "calendar mode" in d:
        return "calendar"
    if "dws defined duration" in d or "flex start" in d or "flex-start" in d:
        return "flex"
    if any(w in d for w in ("commit", "reserved", "custom", "premium", "sole tenancy", "dws", "spot", "preemptible")):
        return None
    return "ondemand"


def sku_part(description: str) -> tuple[str, str] | None:
    """("gpu", GPU type) or ("core"|"ram", family stem such as "A3 Mega") of a SKU description, whatever its mode's
    wording (``A3 Instance Core``, ``A3 Cpu`` of a commitment, ``DWS Defined Duration A3 Core``)."""
    from placement.live.gcp import GPU_SKU_PHRASES, HOST_SKU_STEMS

    d = description.lower()
    phrases = sorted(((p.lower(), gpu) for gpu, ps in GPU_SKU_PHRASES.items() for p in ps), key=lambda x: -len(x[0]))
    for phrase, gpu in phrases:
        if phrase in d:
            return ("gpu", gpu)
    stems = sorted({s.removesuffix(" Instance") for s in HOST_SKU_STEMS.values()}, key=len, reverse=True)
    for stem in stems:
        s = stem.lower()
        for word, part in (("core", "core"), ("cpu", "core"), ("ram", "ram")):
            if f"{s} {word}" in d or f"{s} instance {word}" in d:
                return (part, stem)
    return None


def gcp_prices(skus: Sequence[Any]) -> dict[tuple[str, str, str, str], float]:
    """(mode, part, name, region) -> unit price, USD per hour (per GPU, vCPU or GiB), from Cloud Billing SKUs."""
    from placement.live.gcp import _unit_price

    out: dict[tuple[str, str, str, str], float] = {}
    for sku in skus:
        cat = sku.category
        if cat.resource_family != "Compute":
            continue
        mode = sku_mode(str(sku.description), str(cat.usage_type))
        part = sku_part(str(sku.description)) if mode else None
        price = _finite(_unit_price(sku)) if part else None
        if mode is None or part is None or price is None:
            continue
        for region in sku.service_regions:
            out.setdefault((mode, part[0], part[1], str(region)), price)
    return out


def machine_discounts(prices: Mapping[tuple[str, str, str, str], float], pool: Pool) -> dict[str, float]:
    """Mode -> fraction off on-demand of ``pool``'s machine, over the parts priced in both (the GPU at least)."""
    from placement.live.gcp import host_stem

    sh = pool.shape
    if sh is None or not sh.gke_accelerator:
        return {}
    stem = (host_stem(pool.instance_type) or "").removesuffix(" Instance")
    parts = [("gpu", sh.gke_accelerator, float(sh.gpus)), ("core", stem, float(sh.vcpus)),
             ("ram", stem, float(sh.memory_gib))]
    out: dict[str, float] = {}
    for mode in MODES[1:]:
        both = [(kind, name, qty) for kind, name, qty in parts
                if (mode, kind, name, pool.region) in prices and ("ondemand", kind, name, pool.region) in prices]
        if not any(kind == "gpu" for kind, _, _ in both):
            continue
        od = sum(qty * prices[("ondemand", k, n, pool.region)] for k, n, qty in both)
        at = sum(qty * prices[(mode, k, n, pool.region)] for k, n, qty in both)
        if od > 0:
            out[mode] = 1.0 - at / od
    return out


def _gcp(book: Book, ps: Sequence[Pool], request: LiveRequest, now: dt.datetime, got: LiveRates) -> None:
    from placement.live import gcp

    terms = [t for t in book.terms if t.cloud == "gcp" and t.kind in ("committed-use", "future-reservation")]
    mine = [p for p in ps if p.cloud == "gcp" and any(t.covers(p.cloud, p.accelerator, p.gpus) for t in terms)]
    if not mine:
        return
    try:
        ctx = gcp.prepare(request)
        pager = ctx.catalog().list_skus(request={"parent": gcp.COMPUTE_SERVICE, "currency_code": "USD",
                                                 "page_size": 5000}, retry=ctx.retry, timeout=ctx.timeout_s)
        deadline = time.monotonic() + 3 * request.timeout_s + 10
        skus = []
        for s in pager:
            skus.append(s)
            if time.monotonic() > deadline:
                raise TimeoutError("the SKU listing ran past its deadline")
    except Exception as exc:  # noqa: BLE001 - the data's figures stay
        got.failed("gcp", "billing:skus", "-", exc)
        return
    prices = gcp_prices(skus)
    today = now.date().isoformat()
    n = 0
    for p in mine:
        disc = machine_discounts(prices, p)
        for t in terms:
            if not t.covers(p.cloud, p.accelerator, p.gpus):
                continue
            if t.kind == "committed-use":
                mode = "commit3" if max(t.durations_weeks) >= 104 else "commit1"
            else:
                mode = "calendar" if "calendar" in disc else "flex"
            if mode not in disc:
                continue
            got.rates[(t.id, p.region, p.instance_type)] = Rate(
                t.id, p.instance_type, p.region, round(disc[mode], 4), None,
                f"live: Cloud Billing Catalog ({mode} SKUs against on-demand)", today, True)
            n += 1
    got.sources.append(Source("gcp", "billing:skus", "*", "ok", f"{len(skus)} SKUs, {n} rates"))


# ------------------------------------------------------------------------------------------------ entry


def read_rates(book: Book, ps: Sequence[Pool], *, aws_profile: str | None = None, gcp_project: str | None = None,
               timeout_s: float = 10.0, now: dt.datetime | None = None,
               clouds: Sequence[str] = ("aws", "gcp")) -> LiveRates:
    """The clouds' own figures for the commitment terms on pools ``ps``."""
    now = now or dt.datetime.now(dt.UTC)
    request = LiveRequest(accelerators=tuple(sorted({p.accelerator for p in ps})), target_nodes=1,
                          aws_profile=aws_profile, gcp_project=gcp_project, refresh=True, offline=False,
                          timeout_s=timeout_s, progress=False)
    got = LiveRates()
    steps: list[Callable[[], None]] = []
    if "aws" in clouds and any(p.cloud == "aws" for p in ps):
        steps.append(lambda: _aws(book, [p for p in ps if p.cloud == "aws"], request, now, got))
    if "gcp" in clouds and any(p.cloud == "gcp" for p in ps):
        steps.append(lambda: _gcp(book, [p for p in ps if p.cloud == "gcp"], request, now, got))
    for step in steps:
        step()
    got.warnings = [scrub(w, 400) for w in got.warnings]
    return got


def rates_by_term(rates: Mapping[RateKey, Rate]) -> dict[str, int]:
    """How many live rates each term got (for a summary line)."""
    out: dict[str, int] = defaultdict(int)
    for (term, _, _) in rates:
        out[term] += 1
    return dict(out)
