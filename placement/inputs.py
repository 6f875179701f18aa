"""Reading the user's files: job specs and batch files (YAML), catalogs (CSV) and quota files.

Shared by every command (``plan``, ``plan-batch``, ``submit``, ``dispatch``). Only the standard library is
imported at module level so ``placement --help`` stays fast; YAML and the core load on first use.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from placement.catalog import Catalog
    from placement.errors import InputError
    from placement.quotas import QuotaTable
    from placement.reservations import Reservation


class UsageError(Exception):
    """A bad flag; printed as one line, exit code 2."""


# ----------------------------------------------------------------------------- numbers
# One set of checks for every number the project reads: catalogs (CSV, the embedded JSON, live answers),
# quota and reservation files, job specs. Python's float() takes "inf", "Infinity", "nan" and "1e999" (inf),
# and YAML reads ``.inf`` / ``.nan`` as floats: none of them is a quantity or a price, so all are refused.

MAX_SHOWN = 60  # characters of a user's value quoted in an error: a value can be megabytes long
MAX_COUNT = 1_000_000  # a count above this (GPUs, vCPUs, nodes) is a typo, and would overflow later arithmetic


def shown(value: Any, limit: int = MAX_SHOWN) -> str:
    """``repr(value)`` cut to ``limit`` characters, for error messages."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a value's repr must never turn a one-line error into a traceback
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _fail(field: str, message: str, source: str | None) -> InputError:
    from placement.errors import InputError

    return InputError(field, message, source=source)


def finite_number(value: Any, field: str, *, source: str | None = None, what: str = "a number") -> float:
    """``value`` (a number, or a string such as ``"2.5"``) as a finite float.

    Refused with an :class:`~placement.errors.InputError` naming ``field``: booleans (YAML ``true`` is not 1),
    blanks, non-numbers, and ``inf`` / ``Infinity`` / ``1e999`` / ``nan`` / ``.inf``.
    """
    if isinstance(value, bool) or value is None:
        raise _fail(field, f"must be {what}, got {shown(value)}", source)
    if isinstance(value, str):
        text = value.strip()
        if not text:
            raise _fail(field, f"must be {what}, got a blank", source)
        try:
            number = float(text)
        except ValueError:
            raise _fail(field, f"must be {what}, got {shown(value)}", source) from None
    elif isinstance(value, (int, float)):
        try:
            number = float(value)
        except OverflowError:
            raise _fail(field, f"must be {what} of a sensible size, got {shown(value)}", source) from None
    else:
        raise _fail(field, f"must be {what}, got {shown(value)}", source)
    if not math.isfinite(number):
        raise _fail(field, f"must be a finite number, got {shown(value)}", source)
    return number


def non_negative_number(value: Any, field: str, *, source: str | None = None, what: str = "a number") -> float:
    """A finite float >= 0 (sizes in GB, hours, rates, limits and usage of a quota)."""
    number = finite_number(value, field, source=source, what=what)
    if number < 0:
        raise _fail(field, f"must be a non-negative number, got {shown(value)}", source)
    return number + 0.0  # -0.0 -> 0.0


def non_negative_price(value: Any, field: str, *, source: str | None = None,
                       what: str = "a price in USD per hour") -> float:
    """A price (USD): finite and >= 0."""
    return non_negative_number(value, field, source=source, what=what)


def positive_number(value: Any, field: str, *, source: str | None = None, what: str = "a number") -> float:
    """A finite float > 0 (durations, throughputs, speeds)."""
    number = finite_number(value, field, source=source, what=what)
    if number <= 0:
        raise _fail(field, f"must be > 0, got {shown(value)}", source)
    return number


def positive_int(value: Any, field: str, *, source: str | None = None, what: str = "a whole number",
                 maximum: int = MAX_COUNT) -> int:
    """A count (GPUs, vCPUs, nodes): a whole number from 1 to ``maximum``. ``8``, ``8.0`` and ``"8"`` are 8;
    ``0``, ``-8``, ``0.5``, ``true`` and ``inf`` are refused."""
    number = finite_number(value, field, source=source, what=what)
    if number != int(number):
        raise _fail(field, f"must be {what}, got {shown(value)}", source)
    if number < 1:
        raise _fail(field, f"must be at least 1, got {shown(value)}", source)
    if number > maximum:
        raise _fail(field, f"must be at most {maximum:,}, got {shown(value)}", source)
    return int(number)


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
    """The embedded catalog, with each ``CLOUD=PATH`` replacing that cloud's offers."""
    from placement.catalog import embedded_catalog, parse_skypilot_csv

    catalog = embedded_catalog()
    for spec in specs:
        cloud, sep, path = spec.partition("=")
        if not sep or not path or cloud not in ("aws", "gcp"):
            raise UsageError(f"--catalog: expected CLOUD=PATH with CLOUD aws or gcp, got {spec!r}")
        user = parse_skypilot_csv(_read(path, "--catalog"), cloud, source=path, modified=_modified(path))
        for line in user.warnings:
            print(f"placement: warning: {line}", file=sys.stderr)
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
