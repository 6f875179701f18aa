"""The file loaders: the user's catalog, quota and reservation files, read and built into the core's tables.

Above the readers (:mod:`placement.readers`: text, CSV, YAML; :mod:`placement.model.numbers`: number checks) and
the parsers that take their text (:mod:`placement.model.catalog`, :mod:`placement.model.quotas`,
:mod:`placement.model.reservations`); below the commands. Nothing under it imports it. Only the standard library
is imported at module level so ``placement --help`` stays fast; the parsers load on first use.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from placement.errors import UsageError, shown
from placement.files.readers import load_yaml, read_text
from placement.model.text import is_yaml_path

if TYPE_CHECKING:
    from placement.model.catalog import Catalog
    from placement.model.quotas import QuotaTable
    from placement.model.reservations import Reservation


def load_catalog(specs: Sequence[str]) -> Catalog:
    """The default catalog (the newer of the embedded and the refreshed one), with each ``CLOUD=PATH``
    replacing that cloud's offers (a large CSV parsed before is read from :mod:`placement.files.catalog_cache`)."""
    from placement.model.catalog import default_catalog, with_origins
    from placement.model.shapes import CLOUDS

    named = {cloud for cloud, sep, path in (spec.partition("=") for spec in specs) if sep and path}
    # Every cloud replaced: nothing of the default catalog would be kept, so neither the embedded catalog (a few
    # milliseconds of every such plan, issue 33) nor a refreshed one is read.
    catalog = with_origins((), ()) if named >= set(CLOUDS) else default_catalog()
    seen: set[str] = set()
    for spec in specs:
        cloud, sep, path = spec.partition("=")
        if not sep or not path or cloud not in ("aws", "gcp"):
            raise UsageError(f"--catalog: expected CLOUD=PATH with CLOUD aws or gcp, got {shown(spec)}")
        if cloud in seen:
            # The second would silently replace the first: refuse rather than guess which was meant.
            raise UsageError(f"--catalog: {cloud} is given twice; give one CSV per cloud")
        seen.add(cloud)
        from placement.files.catalog_cache import parse_cached

        user = parse_cached(read_text(path, "--catalog"), cloud, source=path, modified=modified(path))
        for line in user.warnings:
            print(f"placement: warning: {line}", file=sys.stderr)
        catalog = catalog.merged(user, [cloud])
    return catalog


def modified(path: str) -> str | None:
    """The file's modification date (UTC, ISO), the only hint of a user CSV's age."""
    import datetime as dt
    import os

    try:
        return dt.datetime.fromtimestamp(os.stat(path).st_mtime, dt.UTC).date().isoformat()
    except OSError:
        return None


def load_quotas(path: str | None) -> QuotaTable:
    """The ``--quotas`` file (an empty table without a path): CSV, or a YAML list when named ``*.yaml`` /
    ``*.yml`` in any case."""
    from placement.model.quotas import QuotaTable, parse_quota_csv, parse_quota_rows

    if not path:
        return QuotaTable()
    if is_yaml_path(path):
        doc = load_yaml(path, "--quotas")
        if not isinstance(doc, list):
            raise UsageError(f"--quotas: {path} must be a YAML list of mappings with "
                             "cloud, region, quota, limit, usage")
        return parse_quota_rows(doc, source=path)
    return parse_quota_csv(read_text(path, "--quotas"), source=path)


def load_reservations(path: str | None) -> tuple[Reservation, ...]:
    """The ``--reservations`` CSV (none without a path)."""
    if not path:
        return ()
    from placement.model.reservations import parse_reservations_csv

    return parse_reservations_csv(read_text(path, "--reservations"), source=path)
