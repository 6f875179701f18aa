"""Reading the user's files: job specs and batch files (YAML), catalogs (CSV) and quota files.

Shared by every command (``plan``, ``plan-batch``, ``submit``, ``dispatch``). Only the standard library is
imported at module level so ``placement --help`` stays fast; YAML and the core load on first use.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from placement.catalog import Catalog
    from placement.quotas import QuotaTable
    from placement.reservations import Reservation


class UsageError(Exception):
    """A bad flag; printed as one line, exit code 2."""


def _read(path: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        raise UsageError(f"{what}: file {path!r} not found") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise UsageError(f"{what}: cannot read {path!r} ({exc.__class__.__name__})") from None


def load_yaml(path: str, what: str) -> Any:
    import yaml

    text = _read(path, what)
    try:
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise UsageError(f"{what}: {path} is not valid YAML{where}; fix the syntax") from None


def load_catalog(specs: Sequence[str]) -> Catalog:
    """The default catalog (the newer of the embedded and the refreshed one), with each ``CLOUD=PATH``
    replacing that cloud's offers."""
    from placement.catalog import default_catalog, parse_skypilot_csv

    catalog = default_catalog()
    for spec in specs:
        cloud, sep, path = spec.partition("=")
        if not sep or not path or cloud not in ("aws", "gcp"):
            raise UsageError(f"--catalog: expected CLOUD=PATH with CLOUD aws or gcp, got {spec!r}")
        user = parse_skypilot_csv(_read(path, "--catalog"), cloud, source=path, modified=_modified(path))
        catalog = catalog.merged(user, [cloud])
    return catalog


def _modified(path: str) -> str | None:
    """The file's modification date (UTC, ISO), the only hint of a user CSV's age."""
    import datetime as dt
    import os

    try:
        return dt.datetime.fromtimestamp(os.stat(path).st_mtime, dt.UTC).date().isoformat()
    except OSError:
        return None


def load_quotas(path: str | None) -> QuotaTable:
    from placement.quotas import QuotaTable, parse_quota_csv, parse_quota_rows

    if not path:
        return QuotaTable()
    if path.endswith((".yaml", ".yml")):
        doc = load_yaml(path, "--quotas")
        if not isinstance(doc, list):
            raise UsageError(f"--quotas: {path} must be a YAML list of mappings with "
                             "cloud, region, quota, limit, usage")
        return parse_quota_rows(doc, source=path)
    return parse_quota_csv(_read(path, "--quotas"), source=path)


def load_reservations(path: str | None) -> tuple[Reservation, ...]:
    """The ``--reservations`` CSV (none without a path)."""
    from placement.reservations import parse_reservations_csv

    if not path:
        return ()
    return parse_reservations_csv(_read(path, "--reservations"), source=path)
