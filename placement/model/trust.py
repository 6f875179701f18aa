"""How far a catalog's numbers can be trusted: offers whose spot price is not below on-demand, and catalogs
older than they should be (a week for one the user wrote, a month for the embedded one). Pure functions over
an already-parsed catalog (never in the per-row parser: the flags are worked out for the offers shown, and the
age once per command).

A spot price at or above the on-demand price is not a bargain that exists: AWS caps the spot price at the
on-demand price, and a spot price there means the pool has (almost) no spare capacity; a catalog row with
spot above on-demand is a data error. Either way the row is flagged, not dropped: the price may still be
what is charged.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from placement.model.catalog import Catalog, CatalogOrigin, Offer

STALE_AFTER_DAYS = 7.0  # a week: spot prices move daily, on-demand prices and offerings within weeks
# The embedded catalog is the release's own data, each row dated (placement/data/catalog.json): every command's
# header names its date, and a warning on every command within its first month was noise a new user learnt to
# skip (issue 38). Past a month (the clouds' list prices change on that scale) it is said again.
EMBEDDED_STALE_AFTER_DAYS = 30.0
SPOT_NOT_CHEAPER = "spot price at or above on-demand here: no spare spot capacity, or a catalog error"


def spot_not_cheaper(offer: Offer) -> bool:
    """True when ``offer`` has both prices and the spot one is not below the on-demand one."""
    return offer.spot_price is not None and offer.price is not None and offer.spot_price >= offer.price


def _date(text: str | None) -> dt.datetime | None:
    """An ``as_of``/``modified`` stamp (a date, or an ISO-8601 time) as UTC; None when absent or unreadable."""
    if not text:
        return None
    try:
        stamp = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=dt.UTC)


def age_days(origin: CatalogOrigin, now: dt.datetime) -> float | None:
    """Days from when one cloud's catalog held (its ``as_of``, else the CSV file's modification time) to
    ``now``; None when it does not say, or when live answers were laid over it."""
    if origin.live:
        return None
    stamp = _date(origin.as_of) or _date(origin.modified)
    return None if stamp is None else (now - stamp).total_seconds() / 86400.0


def stale_after_days(origin: CatalogOrigin) -> float:
    """Days after which ``origin``'s catalog is called old: :data:`EMBEDDED_STALE_AFTER_DAYS` for the embedded
    one, :data:`STALE_AFTER_DAYS` for one the user wrote (``placement refresh``, a CSV)."""
    return EMBEDDED_STALE_AFTER_DAYS if origin.source == "embedded" else STALE_AFTER_DAYS


def stale(catalog: Catalog, now: dt.datetime) -> list[tuple[CatalogOrigin, float]]:
    """(origin, age in days) of every cloud whose catalog is older than :func:`stale_after_days` says."""
    out = []
    for origin in catalog.provenance():
        days = age_days(origin, now)
        if days is not None and days > stale_after_days(origin):
            out.append((origin, days))
    return out


def stale_lines(catalog: Catalog, now: dt.datetime) -> list[str]:
    """One warning naming every cloud whose catalog is old and how old (none when all are fresh)."""
    old = stale(catalog, now)
    if not old:
        return []
    parts = ", ".join(f"{origin.describe()} ({days:,.0f} days old, over "
                      f"{'a month' if stale_after_days(origin) == EMBEDDED_STALE_AFTER_DAYS else 'a week'})"
                      for origin, days in old)
    return [f"catalog {parts}: prices and offerings may have moved; `placement refresh` writes a new one, --live "
            "asks the clouds"]


def stale_clouds(catalog: Catalog, now: dt.datetime) -> Sequence[str]:
    """The clouds whose catalog is old (:func:`stale`)."""
    return [origin.cloud for origin, _ in stale(catalog, now)]
