"""The field parsers every part of the stack config is read with, and the error they raise.

Owns :class:`ConfigError`, the ``gpufleet`` namespace and the typed accessors (``_str``, ``_int``, ``_cidr``,
``_mapping``, ``_unknown_keys``...): each takes one raw YAML/JSON value and the key path it came from, and
returns the typed value or raises :class:`ConfigError` naming the full key (``gpufleet:nodePools[0].maxNodes``).
The underscored names are for the modules of ``infra/config/`` only.

May import: the standard library and :mod:`placement.errors`; nothing else of ``infra/`` or ``placement/``,
and no Pulumi SDK.
"""

from __future__ import annotations

import contextlib
import ipaddress
import math
import re
from collections.abc import Mapping
from typing import Any

from placement.errors import InputError, shown

NAMESPACE = "gpufleet"
_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")
# A Kubernetes DNS-1123 subdomain (the Kueue CRDs' name pattern), without its 253-character bound.
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


class ConfigError(InputError):
    """An invalid stack config value; ``field`` is the full key, e.g. ``gpufleet:nodePools[0].maxNodes``."""


def _key(path: str) -> str:
    # A key path holds the user's own mapping keys: escaped and cut, like values, so an error stays one
    # readable line.
    path = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", path)
    return f"{NAMESPACE}:{path if len(path) <= 200 else path[:197] + '...'}"


def _require(raw: Mapping[str, Any], key: str) -> Any:
    value = raw.get(key)
    if value is None or value == "":
        raise ConfigError(_key(key), "is required; set it with `pulumi config set " + _key(key) + " <value>`")
    return value


# The typed accessors below are the only way a config value is read: each refuses every other YAML/JSON type
# (a list or mapping where a string belongs, a boolean where a number belongs, .inf/.nan, numbers beyond
# what the clouds' and Kubernetes' 32-bit fields take) with one line naming the key, never a traceback.
INT32_MAX = 2**31 - 1
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _str(value: Any, path: str, *, numbers: bool = False) -> str:
    """A non-empty single-line string. ``numbers``: also take a finite YAML number (``1.33``) as its text."""
    if numbers and ((isinstance(value, int) and not isinstance(value, bool) and abs(value) < 10**18)
                    or (isinstance(value, float) and math.isfinite(value))):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(_key(path), f"must be a non-empty string (quote it in YAML), got {shown(value)}")
    if _CONTROL.search(value):
        raise ConfigError(_key(path), f"must be one line without control characters, got {shown(value)}")
    return value


def _opt_str(value: Any, path: str) -> str | None:
    """An optional string key: unset (None) stays None, anything else must be a non-empty string."""
    return None if value is None else _str(value, path)


def _int(value: Any, path: str, *, minimum: int = 0, maximum: int = INT32_MAX) -> int:
    """A whole number in ``minimum..maximum``: an int, an integral finite float (2.0) or such a string."""
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        number = int(value)
    elif isinstance(value, str):
        try:
            number = int(value.strip())
        except ValueError:  # also digit strings longer than Python converts
            try:
                parsed = float(value)
            except ValueError:
                parsed = math.nan
            number = int(parsed) if math.isfinite(parsed) and parsed.is_integer() else None
    if number is None or not minimum <= number <= maximum:
        raise ConfigError(_key(path), f"must be a whole number from {minimum} to {maximum}, got {shown(value)}")
    return number


def _bool(value: Any, path: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ConfigError(_key(path), f"must be true or false, got {shown(value)}")


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(_key(path), f"must be a mapping of keys to values, got {shown(value)}")
    for k in value:
        if not isinstance(k, str):
            raise ConfigError(_key(f"{path}.{shown(k)}"), "keys must be strings (quote the key in YAML)")
    return value


def _strings(value: Any, path: str) -> tuple[str, ...]:
    """A list of non-empty strings; an entry of another type is named by its index."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ConfigError(_key(path), f"must be a list of strings, got {shown(value)}")
    return tuple(_str(v, f"{path}[{i}]") for i, v in enumerate(value))


def _cidr(value: Any, path: str) -> str:
    try:
        return str(ipaddress.ip_network(_str(value, path)))
    except ValueError:
        raise ConfigError(_key(path), f"must be a CIDR block such as 10.0.0.0/16, got {shown(value)}") from None


def _float(value: Any, path: str, *, minimum: float = 0.0, maximum: float = 1e6) -> float:
    """A finite number in ``minimum..maximum`` (a YAML/JSON number or its string); never inf, nan or a bool."""
    number = math.nan
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        with contextlib.suppress(ValueError, OverflowError):  # OverflowError: an int beyond a float's range
            number = float(value)
    if not minimum <= number <= maximum:  # also false for nan
        raise ConfigError(_key(path), f"must be a number from {minimum:g} to {maximum:g}, got {shown(value)}")
    return number


def _choice(value: Any, path: str, choices: tuple[str, ...]) -> str:
    text = _str(value, path)
    if text not in choices:
        raise ConfigError(_key(path), f"must be {' or '.join(choices)}, got {shown(text)}")
    return text


def _unknown_keys(section: Mapping[str, Any], allowed: set[str], path: str) -> None:
    extra = sorted(set(section) - allowed)
    if extra:
        raise ConfigError(
            _key(f"{path}.{extra[0]}" if path else extra[0]),
            f"is not a known key; expected one of {', '.join(sorted(allowed))}",
        )
