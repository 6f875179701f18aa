"""One set of checks for every number the project reads: catalogs (CSV, the embedded JSON, live answers),
quota and reservation files, job specs.

Python's ``float()`` takes ``"inf"``, ``"Infinity"``, ``"nan"`` and ``"1e999"`` (inf), and YAML reads ``.inf`` /
``.nan`` as floats: none of them is a quantity or a price, so all are refused. The bottom floor of
``placement`` with :mod:`placement.errors`: it imports nothing else from the package.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

from placement.errors import InputError, shown

MAX_COUNT = 1_000_000  # a count above this (GPUs, vCPUs, nodes) is a typo, and would overflow later arithmetic
# The largest price any file or answer may carry (USD per hour of a node, or per GB): far above any real one
# (a p6 node is about 100 USD per hour), low enough that cost arithmetic can never overflow to inf.
MAX_PRICE_USD = 1e6


def finite_number(value: Any, field: str, *, source: str | None = None, what: str = "a number") -> float:
    """``value`` (a number, or a string such as ``"2.5"``) as a finite float.

    Refused with an :class:`~placement.errors.InputError` naming ``field``: booleans (YAML ``true`` is not 1),
    blanks, non-numbers, and ``inf`` / ``Infinity`` / ``1e999`` / ``nan`` / ``.inf``.
    """
    kind = type(value)
    # Exact types first (a catalog has hundreds of thousands of cells); bool is not int here.
    if kind is str or kind is float or kind is int:
        try:
            number = float(value)  # float() ignores surrounding whitespace
        except ValueError:
            shown_value = "a blank" if not value.strip() else shown(value)
            raise InputError(field, f"must be {what}, got {shown_value}", source=source) from None
        except OverflowError:
            raise InputError(field, f"must be {what} of a sensible size, got {shown(value)}", source=source) from None
        if math.isfinite(number):
            return number
        raise InputError(field, f"must be a finite number, got {shown(value)}", source=source)
    if isinstance(value, (int, float)) and not isinstance(value, bool):  # subclasses (IntEnum, numpy floats)
        return finite_number(float(value) if isinstance(value, float) else int(value), field, source=source,
                             what=what)
    raise InputError(field, f"must be {what}, got {shown(value)}", source=source)


def non_negative_number(value: Any, field: str, *, source: str | None = None, what: str = "a number") -> float:
    """A finite float >= 0 (sizes in GB, hours, rates, limits and usage of a quota)."""
    number = finite_number(value, field, source=source, what=what)
    if number < 0:
        raise InputError(field, f"must be a non-negative number, got {shown(value)}", source=source)
    return number + 0.0  # -0.0 -> 0.0


def non_negative_price(value: Any, field: str, *, source: str | None = None,
                       what: str = "a price in USD per hour") -> float:
    """A price (USD): finite, >= 0 and at most :data:`MAX_PRICE_USD` (so nodes x hours x price stays finite)."""
    price = non_negative_number(value, field, source=source, what=what)
    if price > MAX_PRICE_USD:
        raise InputError(field, f"must be at most {MAX_PRICE_USD:,.0f} USD, got {shown(value)}", source=source)
    return price


def positive_number(value: Any, field: str, *, source: str | None = None, what: str = "a number") -> float:
    """A finite float > 0 (durations, throughputs, speeds)."""
    number = finite_number(value, field, source=source, what=what)
    if number <= 0:
        raise InputError(field, f"must be > 0, got {shown(value)}", source=source)
    return number


def positive_int(value: Any, field: str, *, source: str | None = None, what: str = "a whole number",
                 maximum: int = MAX_COUNT) -> int:
    """A count (GPUs, vCPUs, nodes): a whole number from 1 to ``maximum``. ``8``, ``8.0`` and ``"8"`` are 8;
    ``0``, ``-8``, ``0.5``, ``true`` and ``inf`` are refused."""
    number = finite_number(value, field, source=source, what=what)
    if number != int(number):
        raise InputError(field, f"must be {what}, got {shown(value)}", source=source)
    if number < 1:
        raise InputError(field, f"must be at least 1, got {shown(value)}", source=source)
    if number > maximum:
        raise InputError(field, f"must be at most {maximum:,}, got {shown(value)}", source=source)
    return int(number)


# A float as YAML 1.1 (PyYAML) resolves it: a dot is required, and an exponent needs its sign (1.0e+3).
_YAML11_FLOAT = re.compile(r"[-+]?([0-9][0-9_]*)?\.[0-9.]*([eE][-+][0-9]+)?")


def yaml_number(text: str) -> str | None:
    """How to write the number ``text`` so YAML 1.1 reads it as a number (``1e3`` -> ``1.0e+3``), or None when
    ``text`` is not a finite number. YAML 1.1 reads an exponent without a dot or without a sign as text."""
    try:
        number = float(text)
    except ValueError:
        return None
    if not math.isfinite(number):
        return None
    plain = text.strip()
    if _YAML11_FLOAT.fullmatch(plain) or re.fullmatch(r"[-+]?[0-9][0-9_]*", plain):
        return plain  # already a YAML number: it was quoted
    form = re.fullmatch(r"([-+]?[0-9]*)(\.[0-9]*)?[eE]([-+]?)([0-9]+)", plain)
    if form is None:
        return repr(number)  # digits float() takes and YAML does not (other scripts' digits): the value itself
    whole, fraction, sign, exponent = form.groups()
    return f"{whole or '0'}{fraction if fraction and fraction != '.' else '.0'}e{sign or '+'}{exponent}"


def median(values: Iterable[float]) -> float:
    """``statistics.median`` of a non-empty collection (the same float: the middle value, or the mean of the two
    middle ones), without importing statistics, which loads decimal and fractions into every plan process for it."""
    data = sorted(values)
    half = len(data) // 2
    return data[half] if len(data) % 2 else (data[half - 1] + data[half]) / 2
