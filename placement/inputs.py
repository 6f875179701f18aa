"""Reading the user's files: job specs and batch files (YAML), catalogs (CSV) and quota files.

Shared by every command (``plan``, ``plan-batch``, ``submit``, ``dispatch``). Only the standard library is
imported at module level so ``placement --help`` stays fast; YAML and the core load on first use.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator, Sequence
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
    kind = type(value)
    # Exact types first (a catalog has hundreds of thousands of cells); bool is not int here.
    if kind is str or kind is float or kind is int:
        try:
            number = float(value)  # float() ignores surrounding whitespace
        except ValueError:
            shown_value = "a blank" if not value.strip() else shown(value)
            raise _fail(field, f"must be {what}, got {shown_value}", source) from None
        except OverflowError:
            raise _fail(field, f"must be {what} of a sensible size, got {shown(value)}", source) from None
        if math.isfinite(number):
            return number
        raise _fail(field, f"must be a finite number, got {shown(value)}", source)
    if isinstance(value, (int, float)) and not isinstance(value, bool):  # subclasses (IntEnum, numpy floats)
        return finite_number(float(value) if isinstance(value, float) else int(value), field, source=source,
                             what=what)
    raise _fail(field, f"must be {what}, got {shown(value)}", source)


# The largest price any file or answer may carry (USD per hour of a node, or per GB): far above any real one
# (a p6 node is about 100 USD per hour), low enough that cost arithmetic can never overflow to inf.
MAX_PRICE_USD = 1e6


def non_negative_number(value: Any, field: str, *, source: str | None = None, what: str = "a number") -> float:
    """A finite float >= 0 (sizes in GB, hours, rates, limits and usage of a quota)."""
    number = finite_number(value, field, source=source, what=what)
    if number < 0:
        raise _fail(field, f"must be a non-negative number, got {shown(value)}", source)
    return number + 0.0  # -0.0 -> 0.0


def non_negative_price(value: Any, field: str, *, source: str | None = None,
                       what: str = "a price in USD per hour") -> float:
    """A price (USD): finite, >= 0 and at most :data:`MAX_PRICE_USD` (so nodes x hours x price stays finite)."""
    price = non_negative_number(value, field, source=source, what=what)
    if price > MAX_PRICE_USD:
        raise _fail(field, f"must be at most {MAX_PRICE_USD:,.0f} USD, got {shown(value)}", source)
    return price


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


# ----------------------------------------------------------------------------- CSV


def csv_table(text: str, source: str, required: Sequence[str],
              hint: str = "") -> tuple[list[str], Iterator[dict[str, Any]]]:
    """The header and the rows (as dicts) of a user's CSV, checked: every ``required`` column once, no column
    twice, no row with more cells than the header, and malformed CSV (a cell over the csv module's size limit,
    a stray quote in strict places) as an :class:`~placement.errors.InputError` naming the line. A leading
    byte-order mark (spreadsheet exports) is ignored."""
    import csv
    import io

    reader = csv.DictReader(io.StringIO(text.removeprefix("\ufeff")))
    try:
        header = list(reader.fieldnames or [])
    except csv.Error as exc:
        raise _fail("header", f"is not valid CSV ({exc})", source) from None
    dup = next((c for i, c in enumerate(header) if c in header[:i]), None)
    if dup is not None:
        raise _fail(shown(dup), "column appears twice in the header; keep one", source)
    missing = [c for c in required if c not in header]
    if missing:
        raise _fail(missing[0], "column is missing; the header must have " + ",".join(required) + hint, source)

    def rows() -> Iterator[dict[str, Any]]:
        try:
            for row in reader:
                if None in row:
                    raise _fail(f"line {reader.line_num}", f"has more cells than the header's {len(header)}", source)
                yield row
        except csv.Error as exc:
            raise _fail(f"line {reader.line_num + 1}", f"is not valid CSV ({str(exc)[:80]})", source) from None

    return header, rows()


# Bounds on a user's file, checked before it is parsed: a few hundred bytes of YAML can otherwise expand to
# gigabytes (aliases) or crash the C loader (nesting), and a wrong path can name a huge file.
MAX_YAML_BYTES = 16 * 2**20  # job, batch, quota, reservation and stack-output files
MAX_CSV_BYTES = 512 * 2**20  # catalogs: a full SkyPilot vms.csv is tens of MB
MAX_YAML_DEPTH = 64  # nested collections; job specs use 4
MAX_YAML_NODES = 1_000_000  # values after expanding aliases (a shared mapping is counted each time it is used)


def _read(path: str, what: str, limit: int = MAX_CSV_BYTES) -> str:
    """The text of the user's file ``path`` (flag ``what``); any OSError, a non-UTF-8 file or one larger than
    ``limit`` bytes is a :class:`UsageError` naming the flag."""
    import os

    try:
        with open(path, encoding="utf-8") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > limit:
                raise UsageError(f"{what}: {shown(path)} is {size / 2**20:.0f} MiB; at most {limit // 2**20} MiB")
            text = fh.read(limit + 1)  # a pipe or device reports no size
    except FileNotFoundError:
        raise UsageError(f"{what}: file {shown(path)} not found") from None
    except UnicodeDecodeError:
        raise UsageError(f"{what}: {shown(path)} is not UTF-8 text") from None
    except (OSError, ValueError) as exc:  # EISDIR, ENOTDIR, ENAMETOOLONG, EACCES, ELOOP, embedded NUL ...
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc.__class__.__name__
        raise UsageError(f"{what}: cannot read {shown(path)} ({reason})") from None
    if len(text) > limit:
        raise UsageError(f"{what}: {shown(path)} is larger than {limit // 2**20} MiB")
    return text


def _prescan(text: str, label: str) -> None:
    """Refuse nesting deeper than :data:`MAX_YAML_DEPTH` from the token stream (the scanner keeps no
    recursion; the composer that would crash on deep nesting is not run yet)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
    opens = (yaml.BlockSequenceStartToken, yaml.BlockMappingStartToken, yaml.FlowSequenceStartToken,
             yaml.FlowMappingStartToken)
    closes = (yaml.BlockEndToken, yaml.FlowSequenceEndToken, yaml.FlowMappingEndToken)
    depth = 0
    try:
        while loader.check_token():
            token = loader.get_token()
            if isinstance(token, opens):
                depth += 1
                if depth > MAX_YAML_DEPTH:
                    raise UsageError(f"{label}: nested more than {MAX_YAML_DEPTH} levels deep at line "
                                     f"{token.start_mark.line + 1}; flatten it")
            elif isinstance(token, closes):
                depth -= 1
    finally:
        loader.dispose()


def _expanded_size(root: Any, label: str) -> int:
    """Nodes of the document with every alias expanded, without expanding it (each node counted once, then
    reused), refusing more than :data:`MAX_YAML_NODES` (an alias bomb) and an alias to its own ancestor."""
    import yaml

    def children(node: Any) -> list[Any]:
        if isinstance(node, yaml.SequenceNode):
            return list(node.value)
        if isinstance(node, yaml.MappingNode):
            return [n for pair in node.value for n in pair]
        return []

    size: dict[int, int] = {}
    open_: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        nid = id(node)
        if done:
            open_.discard(nid)
            size[nid] = 1 + sum(size[id(c)] for c in children(node))
            if size[nid] > MAX_YAML_NODES:
                raise UsageError(f"{label}: expands to more than {MAX_YAML_NODES:,} values (YAML aliases, line "
                                 f"{node.start_mark.line + 1}); write a smaller file")
            continue
        if nid in size:
            continue
        if nid in open_:
            raise UsageError(f"{label}: an alias at line {node.start_mark.line + 1} refers to a value that contains "
                             "it; write the value out")
        open_.add(nid)
        stack.append((node, True))
        stack.extend((c, False) for c in children(node) if id(c) not in size)
    return size[id(root)]


def _strict_loader(label: str) -> type:
    """The YAML loader for users' files: safe (C when available) and refusing a key given twice."""
    import yaml

    base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class StrictLoader(base):  # type: ignore[misc]
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # "<<: *base" then an explicit key overrides a merged one, by design
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                try:
                    if key in seen:
                        raise UsageError(f"{label}: key {shown(key, 40)} is given twice (lines {seen[key]} and "
                                         f"{line}); keep one")
                    seen[key] = line
                except TypeError:
                    continue  # an unhashable key: the base class says so
            return super().construct_mapping(node, deep)

    return StrictLoader


def load_yaml(path: str, what: str) -> Any:
    """One user YAML (or JSON) file: job, batch, quota, reservation, stack-output and fleet files.

    Read with :func:`parse_yaml` after a size check (at most :data:`MAX_YAML_BYTES`).
    """
    return parse_yaml(_read(path, what, MAX_YAML_BYTES), f"{what}: {shown(path)}")


def parse_yaml(text: str, label: str) -> Any:
    """YAML text from a user (a file, a kubeconfig in stack outputs); ``label`` starts every error.

    Bounded before it is built: at most :data:`MAX_YAML_DEPTH` levels of nesting (the C loader overflows
    its stack on deep nesting, checked before composing), at most :data:`MAX_YAML_NODES` values with aliases
    expanded (a few hundred bytes of aliases would otherwise expand to gigabytes); a key given twice in a
    mapping is refused. Errors are :class:`UsageError`.
    """
    import yaml

    if len(text) > MAX_YAML_BYTES:
        raise UsageError(f"{label}: larger than {MAX_YAML_BYTES // 2**20} MiB")
    try:
        _prescan(text, label)
        loader = _strict_loader(label)(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            _expanded_size(node, label)
            return loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None)
        detail = f" ({shown(problem, 80)[1:-1]})" if isinstance(problem, str) else ""
        raise UsageError(f"{label} is not valid YAML{where}{detail}; fix the syntax") from None
    except RecursionError:
        raise UsageError(f"{label}: nested too deeply; flatten it") from None


def load_catalog(specs: Sequence[str]) -> Catalog:
    """The default catalog (the newer of the embedded and the refreshed one), with each ``CLOUD=PATH``
    replacing that cloud's offers."""
    from placement.catalog import default_catalog, parse_skypilot_csv

    catalog = default_catalog()
    seen: set[str] = set()
    for spec in specs:
        cloud, sep, path = spec.partition("=")
        if not sep or not path or cloud not in ("aws", "gcp"):
            raise UsageError(f"--catalog: expected CLOUD=PATH with CLOUD aws or gcp, got {shown(spec)}")
        if cloud in seen:
            # The second would silently replace the first: refuse rather than guess which was meant.
            raise UsageError(f"--catalog: {cloud} is given twice; give one CSV per cloud")
        seen.add(cloud)
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
