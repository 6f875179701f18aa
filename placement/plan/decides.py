"""What decides a plan (issue 26): the spot rate where the pick flips, and warnings on a risky pick. Pure.

Break-even: the per-node spot rate ``r`` that, applied to every spot candidate as the job's own
``spot.interruptions_per_hour`` would be (the job's own rate wins over live and calibrated ones), makes the best
spot candidate and the best candidate that is not spot cost the same. Below it a spot candidate is picked, above
it one that is not: for a chosen spot candidate, the rate at which it stops beating the best on-demand or
reserved one; for a chosen on-demand or reserved one, the rate below which the best spot one would win. Null
when there is no spot candidate or none that is not, or when no rate flips the pick. Found by bisection on
log(r) over the plan's own rows (the runnable ones and those excluded only by the deadline or by interruptions,
which a lower rate may readmit), each priced as the engine prices it; ranked as the engine ranks
(quota tier, total to the cent, ...).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from placement.model.numbers import median
from placement.plan.job import Candidate, Plan, _never, deadline_reason

if TYPE_CHECKING:
    from placement.model.catalog import Offer

MAX_GANG_INTERRUPTIONS = 50.0  # the chosen candidate expects more: warn
MAX_OVERHEAD = 0.25  # expected extra run time over 25 %: warn
OUTLIER_SHARE = 0.5  # a spot price below half the median of the same shape's other zones: warn, when ...
# ... it is also below what a spot discount reaches: AWS ("up to 90% off On-Demand prices", aws.amazon.com/ec2/spot,
# read 2026-11) and GCP ("60-91% off", cloud.google.com/spot-vms, read 2026-11). Spot prices spread 2-5x across
# zones (the embedded catalog's p5en.48xlarge: $8.66-$43.04/h), so a low one within the discount is a price.
SPOT_FLOOR_SHARE = 0.09
RATE_LO, RATE_HI = 1e-7, 100.0  # per node-hour: the bracket searched (100/h never finishes a checkpoint)


def _sig3(x: float) -> float:
    return float(f"{x:.3g}")


def break_even(p: Plan) -> float | None:
    """The break-even spot rate per node-hour of plan ``p`` to 3 significant digits, or None (module docstring)."""
    ctx = p.context
    if ctx is None or not p.rows:
        return None
    job = ctx.job
    best_fixed: tuple[Any, ...] | None = None
    # One offer per terms group (shape, region, capacity): every offer of a group shares the curve of total against
    # rate but for its price, so only its cheapest can win (the rate tried is the job's own, and the job's own rate
    # wins over an offer's live or calibrated one: no offer stands alone).
    groups: dict[int, tuple[Any, Any]] = {}
    for r in p.rows:  # ranked: the first row of a group is its cheapest, the first non-spot row the best one
        t = r[11]
        if t.order != 2:
            if best_fixed is None:
                best_fixed = r[:9]
            continue
        if id(t) not in groups:
            groups[id(t)] = (r[10], t)
    # Only the excluded spot rows the scan kept apart: the others are excluded for good by their region or node
    # shape (most rows of a big catalog), which no rate changes.
    for item in ctx.open_spot:
        offer, t = (item[0], item[1]) if len(item) == 2 else (item[10], item[11])  # type: ignore[misc]
        if t.order != 2 or offer.spot_price is None:
            continue
        reason = t.reason
        if reason is not None and not (t.late or reason.startswith("interrupted every")):
            continue
        if ctx.zone(offer.cloud, offer.zone) is not None:
            continue
        if job.max_usd_per_hour is not None and t.nodes * offer.spot_price > job.max_usd_per_hour:
            continue
        old = groups.get(id(t))
        if old is None or offer.spot_price < old[0].spot_price:
            groups[id(t)] = (offer, t)
    if best_fixed is None or not groups:
        return None
    pool = list(groups.values())

    def key_at(rate: float, offer: Any, t: Any) -> tuple[Any, ...] | None:
        hourly = t.nodes * offer.spot_price
        # The interval follows the rate (and, when checkpoints are billed, the price: issue 36), as the engine's.
        g = (ctx.cost_gang(offer.cloud, t.nodes, offer.shape.gpus, rate, t.run_h, t.write_h, hourly) if t.cost_opt
             else ctx.gang(t.nodes, offer.shape.gpus, rate, t.run_h, t.write_h))
        if _never(g) is not None:
            return None
        mult = t.run_h * (1.0 + g.overhead)
        ready = t.transfer_h + mult
        if deadline_reason(job, ready) is not None:
            return None
        # The bill's checkpoint lines follow the interval, which follows the rate: price them at this rate.
        nat, store, req = ctx.extras(offer.cloud, offer.region, t.run_h, g, mult)
        eg = t.eg - (t.nat + t.ck_store + t.ck_req) + nat + store + req
        total = hourly * mult + eg + ready * t.delay_rate
        return (t.unknown, float(int(total * 100.0 + 0.5)), t.nodes, hourly, offer.cloud, offer.region, offer.zone,
                offer.shape.name, t.order)

    # A candidate's total only grows with the rate: one that loses to the best non-spot one at the lowest rate
    # never wins, so only the few that could are priced at each step of the search.
    ranked = []
    for offer, t in pool:
        k = key_at(RATE_LO, offer, t)
        if k is not None and k < best_fixed:
            ranked.append((k, offer, t))
    ranked.sort(key=lambda x: x[0])  # the likeliest winners first: a step that finds one stops there
    keep = [(offer, t) for _, offer, t in ranked]

    def wins(rate: float, candidates: Sequence[tuple[Any, Any]]) -> bool:
        for offer, t in candidates:
            key = key_at(rate, offer, t)
            if key is not None and key < best_fixed:
                return True
        return False

    # The search first follows the likeliest winner alone (one pricing a step, not all of them at every rate where
    # spot loses). Its path is the whole search's path when no other candidate wins at the lowest rate where the
    # leader lost: each other one then loses at every rate the leader lost at (all at or above it; totals only
    # grow with the rate) and the leader answers every other step alone. Else the search runs again over all.
    lead = search(lambda rate: wins(rate, keep[:1]))
    if lead is None:
        return None if not keep or wins(RATE_HI, keep) else _whole(wins, keep)
    bounds, lowest_loss = lead
    if wins(lowest_loss, keep[1:]):
        return _whole(wins, keep)
    a, b = bounds
    return _sig3(math.exp(0.5 * (a + b)))


def search(spot_wins: Callable[[float], bool]) -> tuple[tuple[float, float], float] | None:
    """The bisection on log(rate) between RATE_LO and RATE_HI: ((a, b), the lowest rate tried where spot lost), or
    None when spot does not win at RATE_LO or still wins at RATE_HI. The break-even rate is exp((a + b) / 2)."""
    lo, hi = RATE_LO, RATE_HI
    if not spot_wins(lo) or spot_wins(hi):
        return None
    lowest_loss = hi
    a, b = math.log(lo), math.log(hi)
    for _ in range(40):
        mid = 0.5 * (a + b)
        rate = math.exp(mid)
        if spot_wins(rate):
            a = mid
        else:
            b, lowest_loss = mid, rate
        if b - a < 1e-5:  # relative 1e-5: far finer than the 3 significant digits shown
            break
    return (a, b), lowest_loss


def _whole(wins: Callable[[float, Sequence[tuple[Any, Any]]], bool], keep: Sequence[tuple[Any, Any]]) -> float | None:
    """The search over every candidate that may win (the leader's alone did not settle it)."""
    found = search(lambda rate: wins(rate, keep))
    if found is None:
        return None
    (a, b), _ = found
    return _sig3(math.exp(0.5 * (a + b)))


def break_even_text(rate: float | None, chosen: Candidate | None) -> str:
    """The text line: where the pick flips between spot and not."""
    if rate is None:
        return "break-even spot rate: none (no rate flips the pick between spot and on-demand/reserved)"
    side = ("the chosen spot candidate stops beating the best on-demand/reserved one above it"
            if chosen is not None and chosen.capacity == "spot"
            else "the best spot candidate would win below it")
    return f"break-even spot rate: {rate:g} interruptions per node-hour ({side})"


def _median_other_zones(chosen: Candidate, offers: Iterable[Offer]) -> float | None:
    o = chosen.offer
    shape, name, cloud = o.shape, o.shape.name, o.cloud
    prices: dict[tuple[str, str], float] = {}
    for x in offers:
        s = x.shape  # the same Shape object on most rows of a machine type: the name compared only otherwise
        if (s is shape or s.name == name) and x.cloud == cloud and x.spot_price is not None \
                and (x.region, x.zone) != (o.region, o.zone):
            prices.setdefault((x.region, x.zone), x.spot_price)
    return median(prices.values()) if prices else None


def price_flag(c: Candidate | None, offers: Iterable[Offer]) -> str | None:
    """Why the chosen candidate's price is suspect, or None (issue 36): the catalog row's own flag (unverified,
    an outlier with a documented reason), else, on-demand, a price outside 0.6-1.67x the median of the same
    machine across the catalog's regions (a user's catalog: SkyPilot's GCP rows that leave the GPUs out)."""
    if c is None or c.reservation is not None:
        return None
    o = c.offer
    if o.price_flag:
        return o.price_flag
    if c.capacity != "on-demand" or o.price is None:
        return None
    from placement.model.catalog import machine_medians, price_problem

    same = [x for x in offers if x.cloud == o.cloud and x.shape.name == o.shape.name]
    return price_problem(o, machine_medians(same).get((o.cloud, o.instance_type)))


def price_flag_text(c: Candidate, flag: str) -> str:
    """The line a plan prints when its chosen price is flagged."""
    o = c.offer
    price = o.spot_price if c.capacity == "spot" else o.price
    return (f"price flagged: the chosen {o.cloud} {o.zone} {o.instance_type} {c.capacity} price "
            f"${price or 0:,.4g}/h rests on a suspect figure ({flag}); check it with `placement refresh` or --live "
            "before acting on the total")


def warnings(p: Plan, offers: Sequence[Offer]) -> list[str]:
    """Warnings on the chosen candidate: a flagged price (:func:`price_flag`), over 50 expected gang
    interruptions, over 25 % overhead, a spot price below half the median spot price of the same shape in the
    catalog's other zones and below the deepest spot discount the clouds give (:data:`SPOT_FLOOR_SHARE` of the
    row's on-demand price, when it has one)."""
    c = p.chosen
    if c is None:
        return []
    out = []
    where = f"{c.offer.cloud} {c.offer.zone} {c.offer.instance_type} x{c.nodes} {c.capacity}"
    flag = price_flag(c, offers)
    if flag:
        out.append(price_flag_text(c, flag))
    if c.expected_interruptions > MAX_GANG_INTERRUPTIONS:
        out.append(f"the chosen {where} expects {c.expected_interruptions:,.1f} gang interruptions over the run "
                   f"(more than {MAX_GANG_INTERRUPTIONS:g}); check the spot rate ({c.interruption_source or 'none'}) "
                   "or prefer fewer, larger nodes or on-demand")
    if c.overhead > MAX_OVERHEAD:
        out.append(f"the chosen {where} expects +{c.overhead:.1%} run time for interruptions and checkpoints "
                   f"(more than {MAX_OVERHEAD:.0%})")
    if c.capacity == "spot" and c.offer.spot_price is not None:
        median = _median_other_zones(c, offers)
        floor = None if c.offer.price is None else SPOT_FLOOR_SHARE * c.offer.price
        if median is not None and c.offer.spot_price < OUTLIER_SHARE * median and \
                (floor is None or c.offer.spot_price < floor):
            out.append(f"the chosen {where}'s spot price ${c.offer.spot_price:,.4f}/h is below half the median "
                       f"${median:,.4f}/h of {c.offer.instance_type} in the catalog's other zones: a stale or wrong "
                       "price? check it (placement refresh, or --live)")
    return out
