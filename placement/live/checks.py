"""Checks on every live answer (fresh or cached) before anything uses it. Pure functions, no I/O.

A cloud answer is JSON data shaped by ``placement.live.aws`` / ``.gcp``. Two outcomes:

* the answer's shape is wrong (not the mapping or list the call returns, a value of the wrong type):
  :class:`BadAnswer` - the call counts as failed (``error``), or, for a cached answer, as a cache miss;
* single values are out of range: that row is dropped and named in a note, the rest of the answer is used.
  A note makes the call's source row ``partial`` with the notes as its detail.

Live values are refused when they are not finite, below the floor or above the cap:

==========================  ==============================  =====================
value                       accepted                        cap
==========================  ==============================  =====================
spot / on-demand price      > 0 USD per node-hour           ``MAX_NODE_USD_PER_HOUR``
GCP unit price              >= 0 USD per GPU/vCPU/GiB-hour  ``MAX_UNIT_USD_PER_HOUR``
quota limit, usage          >= 0 (vCPUs on AWS, GPUs on GCP)  ``MAX_QUOTA``
reservation free nodes      integer >= 1                    ``MAX_NODES``
placement score             integer 1-10                    -
==========================  ==============================  =====================

Numbers are read with the file inputs' rule (``placement.model.numbers.finite_number``); what differs is the outcome
(a value dropped and named, not the command refused) and the caps above, specific to what a cloud can answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from placement.errors import InputError, shown
from placement.model.numbers import finite_number

# The most expensive single machine any cloud lists is well under 1,000 USD/h (an 8-GPU node ~100 USD/h).
MAX_NODE_USD_PER_HOUR = 5_000.0
MAX_UNIT_USD_PER_HOUR = 1_000.0
MAX_QUOTA = 10_000_000.0  # vCPUs or GPUs in one region: orders of magnitude above any real quota
MAX_NODES = 100_000
MAX_NOTES_SHOWN = 3
RESERVATION_KINDS = ("odcr", "capacity-block", "gcp-reservation")  # placement.live.aws / .gcp reservations()


class BadAnswer(Exception):
    """The answer's shape is not what the call returns: the whole answer is unusable."""


@dataclass(frozen=True)
class Checked:
    """A checked answer: the usable data, and one note per refused value (empty when all was usable)."""

    data: Any
    notes: tuple[str, ...] = ()


def _num(value: Any) -> float | None:
    """``value`` as a finite float, else None; :class:`BadAnswer` when it is not a number at all (bool included)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise BadAnswer(f"expected a number, got {type(value).__name__}")
    try:
        return finite_number(value, "live value")  # the file inputs' number rule: finite, no inf/nan/1e999
    except InputError:
        return None


def live_price(value: Any, *, cap: float = MAX_NODE_USD_PER_HOUR, zero_ok: bool = False) -> float | None:
    """A live price in USD per hour when it is finite, positive (or zero with ``zero_ok``) and at most ``cap``."""
    x = _num(value)
    if x is None or x > cap or x < 0 or (x == 0 and not zero_ok):
        return None
    return x


def live_quantity(value: Any, *, cap: float = MAX_QUOTA) -> float | None:
    """A live quota limit or usage (vCPUs or GPUs) when finite, non-negative and at most ``cap``."""
    x = _num(value)
    return x if x is not None and 0 <= x <= cap else None


def live_count(value: Any, *, low: int = 1, cap: int = MAX_NODES) -> int | None:
    """A live count (nodes, a score) when it is an integer between ``low`` and ``cap``."""
    x = _num(value)
    if x is None or x != int(x) or not low <= x <= cap:
        return None
    return int(x)


def _short(value: Any) -> str:
    return shown(value, 24)


def _mapping(data: Any, what: str) -> dict[str, Any]:
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise BadAnswer(f"{what}: expected a mapping, got {type(data).__name__}")
    return data


def _str_list(value: Any, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadAnswer(f"{what}: expected a list of names")
    return value


def _note(kind: str, refused: list[str]) -> tuple[str, ...]:
    if not refused:
        return ()
    shown = "; ".join(refused[:MAX_NOTES_SHOWN]) + ("; ..." if len(refused) > MAX_NOTES_SHOWN else "")
    return (f"refused {len(refused)} {kind} ({shown})",)


def _offerings(data: Any) -> Checked:
    d = _mapping(data, "offerings")
    return Checked({k: _str_list(v, f"offerings[{k}]") for k, v in d.items()})


def _zones(data: Any) -> Checked:
    d = _mapping(data, "zones")
    if not all(isinstance(v, str) for v in d.values()):
        raise BadAnswer("zones: expected zone name -> zone ID")
    return Checked(d)


def _spot_prices(data: Any) -> Checked:
    if not isinstance(data, list):
        raise BadAnswer("spot prices: expected a list of rows")
    rows, refused = [], []
    for row in data:
        if not (isinstance(row, list) and len(row) == 4 and isinstance(row[0], str) and isinstance(row[1], str)):
            raise BadAnswer("spot prices: a row is not [instance type, zone, zone ID, price]")
        price = live_price(row[3])
        if price is None:
            refused.append(f"{row[0]} {row[2] or row[1]}: {_short(row[3])}")
            continue
        rows.append([row[0], row[1], row[2], price])
    return Checked(rows, _note("spot prices", refused))


def _quota(data: Any) -> Checked:
    d = _mapping(data, "quota")
    code = d.get("code")
    if not isinstance(code, str):
        raise BadAnswer("quota: no quota code")
    limit = live_quantity(d.get("limit"))
    if limit is None:
        raise BadAnswer(f"quota {code}: refused limit {_short(d.get('limit'))} (quota left unknown)")
    return Checked({"code": code, "limit": limit})


def _usage(data: Any) -> Checked:
    d = _mapping(data, "usage")
    values = _mapping(d.get("usage"), "usage.usage")
    unknown = dict(_mapping(d.get("unknown", {}), "usage.unknown"))
    known: dict[str, float] = {}
    for cls, value in values.items():
        x = live_quantity(value)
        if x is None:
            unknown[cls] = f"refused value {_short(value)}"
        else:
            known[cls] = x
    notes = tuple(f"usage of {cls} unknown ({why}): its quotas are unknown" for cls, why in sorted(unknown.items()))
    return Checked({"usage": known, "unknown": {k: str(v) for k, v in unknown.items()}}, notes)


def _per_key(data: Any, shape: str, what: str, check: Callable[[Any], Any]) -> Checked:
    """A mapping answer (zone or region -> value) with each value checked; refused values are named."""
    d = _mapping(data, shape)
    out, refused = {}, []
    for key, value in d.items():
        ok = check(value)
        if ok is None:
            refused.append(f"{key}: {_short(value)}")
        else:
            out[key] = ok
    return Checked(out, _note(what, refused))


def _scores(data: Any) -> Checked:
    return _per_key(data, "scores", "placement scores", lambda v: live_count(v, low=1, cap=10))


def _ondemand(data: Any) -> Checked:
    return _per_key(data, "on-demand prices", "on-demand prices", live_price)


def _reservations(data: Any) -> Checked:
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise BadAnswer("reservations: expected a list of mappings")
    from placement.model.reservations import parse_time

    out, refused = [], []
    for r in data:
        if not isinstance(r.get("id"), str) or not isinstance(r.get("instance_type"), str):
            raise BadAnswer("reservations: a row has no id or instance type")
        n = live_count(r.get("count"))
        why = None
        # The fields the overlay reads (a cached file can hold anything): a row without them is refused, named.
        if r.get("kind") not in RESERVATION_KINDS:
            why = f"kind {_short(r.get('kind'))}"
        elif any(r.get(k) is not None and not isinstance(r[k], str) for k in ("zone", "zone_id")):
            why = f"zone {_short(r.get('zone'))}" if not isinstance(r.get("zone"), (str, type(None))) else \
                f"zone_id {_short(r.get('zone_id'))}"
        elif n is None:
            why = f"count {_short(r.get('count'))}"
        elif r.get("ends") is not None:
            try:
                if not isinstance(r["ends"], str):
                    raise InputError("ends", "not a time")
                parse_time(r["ends"], "ends", "live")
            except InputError:
                why = f"ends {_short(r['ends'])}"
        if why is not None:
            refused.append(f"{r['id']}: {why}")
        else:
            out.append({**r, "count": n})
    return Checked(out, _note("reservations", refused))


def _region_quotas(data: Any) -> Checked:
    d = _mapping(data, "region quotas")
    out, refused = {}, []
    for metric, pair in d.items():
        if not isinstance(pair, list) or len(pair) != 2:
            raise BadAnswer(f"region quotas: {metric} is not [limit, usage]")
        limit, used = live_quantity(pair[0]), live_quantity(pair[1])
        if limit is None or used is None:
            refused.append(f"{metric}: limit {_short(pair[0])}, usage {_short(pair[1])}")
        else:
            out[metric] = [limit, used]
    return Checked(out, tuple(n + ": those quotas are unknown" for n in _note("quota values", refused)))


def _accelerator_zones(data: Any) -> Checked:
    d = _mapping(data, "accelerator types")
    return Checked({k: _str_list(v, f"accelerator types[{k}]") for k, v in d.items()})


def _skus(data: Any) -> Checked:
    d = _mapping(data, "SKUs")
    out: dict[str, dict[str, dict[str, list[float | None]]]] = {}
    refused = []
    for kind in ("gpu", "core", "ram", "ssd"):
        # "ssd" (the Local SSD, issue 36) is absent from answers cached before it was read: none then.
        raw = d.get(kind) if kind != "ssd" else (d.get(kind) or {})
        for name, by_region in _mapping(raw, f"SKUs.{kind}").items():
            for region, pair in _mapping(by_region, f"SKUs.{kind}.{name}").items():
                if not isinstance(pair, list) or len(pair) != 2:
                    raise BadAnswer(f"SKUs: {kind} {name} {region} is not [on-demand, spot]")
                clean: list[float | None] = []
                for value in pair:
                    p = None if value is None else live_price(value, cap=MAX_UNIT_USD_PER_HOUR, zero_ok=True)
                    if value is not None and p is None:
                        refused.append(f"{kind} {name} {region}: {_short(value)}")
                    clean.append(p)
                out.setdefault(kind, {}).setdefault(name, {})[region] = clean
    for kind in ("gpu", "core", "ram", "ssd"):
        out.setdefault(kind, {})  # a kind whose mapping was empty
    return Checked(out, _note("unit prices", refused))


CHECKS: dict[str, Callable[[Any], Checked]] = {
    "offerings": _offerings, "zones": _zones, "spot_prices": _spot_prices, "quota": _quota, "usage": _usage,
    "scores": _scores, "ondemand_prices": _ondemand, "reservations": _reservations,
    "region_quotas": _region_quotas, "accelerator_zones": _accelerator_zones, "skus": _skus,
}


def check_answer(op: str, data: Any) -> Checked:
    """The usable part of the answer of call ``op`` and notes on what was refused; :class:`BadAnswer` when
    the answer as a whole is unusable."""
    check = CHECKS.get(op)
    if check is None:
        raise BadAnswer(f"no check for {op!r}")
    try:
        return check(data)
    except BadAnswer:
        raise
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise BadAnswer(f"{op}: malformed answer ({type(exc).__name__})") from None
