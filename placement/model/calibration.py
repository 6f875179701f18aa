"""Calibration files (``gpufleet.calibration/v1``): what the user's own fleet measured, and how plans use it.

Pure: parse, validate, merge and serialise a calibration document; work out spot rates and measured speeds
from it. Reading and writing files is :mod:`placement.calibrate` (the ``calibrate`` and ``profile`` commands).

The document (fields are only ever added; a reader ignores fields it does not know)::

    schema: gpufleet.calibration/v1
    measured: {from: 2026-10-01T00:00:00Z, to: 2026-11-20T00:00:00Z}
    calibration: {prior_node_hours: 100}          # optional: the weight of the prior spot rate, node-hours
    spot:   # one row per cloud, region, zone (optional), instance type
      - {cloud: aws, region: us-east-1, zone: use1-az6, instance_type: p5.48xlarge, node_hours: 1200, reclaims: 180}
    speed:  # measured per-GPU throughput of a workload class on an accelerator, at a node count
      - {workload: llm, accelerator: H100, nodes: 1, per_gpu: 3100.0, unit: tokens/s, runs: 12}
    checkpoint_write:
      - {destination: fsx, tier: 250, gb: 980, seconds: 41.0, runs: 30}

Spot rates (per node-hour): the rate a plan would otherwise use (the job's default, or the live placement
score's) is the mean of a Gamma prior of weight ``prior_node_hours`` (default 100 node-hours): shape
``a0 = rate × W``, rate parameter ``W``. A row with ``reclaims`` over ``node_hours`` gives the posterior
Gamma(a0 + reclaims, W + node_hours); the plan uses its mean and reports its 90th percentile. The most specific
row wins: the offer's zone, else its region (the zone-less row, else the region's zone rows pooled), else the
instance type anywhere in the cloud (every row of it pooled).

Speeds: a speed row counts once it has at least :data:`MIN_RUNS` runs. Measured per-GPU figures replace the
model's relative speeds only as ratios between accelerators measured on the same workload class at one node;
measured scaling efficiency at N nodes is per_gpu(N) / per_gpu(1) of one accelerator.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from placement.errors import InputError, shown
from placement.model.gamma import PRIOR_NODE_HOURS, gamma_quantile
from placement.model.gamma import prior_p90 as prior_p90  # re-exported: it lived here

SCHEMA = "gpufleet.calibration/v1"
MIN_RUNS = 3  # a speed row replaces the model's figure from this many runs: fewer is one noisy benchmark
FUTURE_SKEW = dt.timedelta(minutes=5)  # clocks disagree a little; a file further ahead than this is refused
UNITS = ("tokens/s", "samples/s")
# Bounds on what a file may hold, so the arithmetic on it stays finite (the Gamma quantile, speed ratios): far
# beyond any fleet (a billion node-hours is 114,000 node-years), far below a float's overflow.
MAX_NODE_HOURS = 1e9  # node_hours, reclaims, calibration.prior_node_hours
MIN_PRIOR_NODE_HOURS = 1e-3  # the prior's weight: below it the prior is gone and one reclaim is the whole rate
MIN_PER_GPU, MAX_PER_GPU = 1e-6, 1e9  # per-GPU tokens or samples a second: their ratios stay within 1e15
MAX_GB = 1e9
MAX_SECONDS = 1e9
MAX_TIER = 1e6  # MB/s per TiB
MAX_RUNS = 10**9
MAX_NODES = 100_000
_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?$")


class SpotRow(NamedTuple):
    """Spot nodes of one instance type observed in one cloud/region (zone: "" = the whole region). A named tuple:
    a file holds 10,000 of them and a plan reads it every time."""

    cloud: str
    region: str
    zone: str
    instance_type: str
    node_hours: float
    reclaims: float


# One instance type's spot rows packed: clouds, regions and zones NUL-joined; node-hours and reclaims as doubles
# (array("d").tobytes()); their positions in the file (array("q").tobytes()).
PackedSpot = tuple[str, str, str, bytes, bytes, bytes]


def pack_spot(rows: Sequence[SpotRow]) -> dict[str, PackedSpot] | None:
    """``rows`` packed per instance type, in file order within each (how the cache stores them), or None when a
    name holds a NUL (it could not be split back)."""
    import array

    by_type: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        by_type.setdefault(r.instance_type, []).append(i)
    out: dict[str, PackedSpot] = {}
    for t, at in by_type.items():
        block = [rows[i] for i in at]
        clouds, regions, zones = ("\0".join(names) for names in ([r.cloud for r in block], [r.region for r in block],
                                                                [r.zone for r in block]))
        if any(text.count("\0") != len(block) - 1 for text in (clouds, regions, zones)):
            return None
        out[t] = (clouds, regions, zones, array.array("d", [r.node_hours for r in block]).tobytes(),
                  array.array("d", [r.reclaims for r in block]).tobytes(), array.array("q", at).tobytes())
    return out


def packed_spot_ok(packed: Mapping[str, PackedSpot]) -> bool:
    """Whether packed spot rows hold only what :func:`parse_calibration` accepts (the rule of :func:`_fast_spot`):
    names non-empty and stripped, clouds in lower case, node-hours in (0, MAX_NODE_HOURS], reclaims in
    [0, MAX_NODE_HOURS]. For rows read back from a cache entry another process could have rewritten; the
    numbers are checked as whole arrays (C speed), the names as whole joined strings."""
    import array

    for t, (clouds, regions, zones, hours, reclaims, _) in packed.items():
        if not t or t != t.strip() or clouds != clouds.lower():
            return False
        if any(_PADDED.search(text) for text in (clouds, regions, zones)) or \
                _EMPTY.search(clouds) or _EMPTY.search(regions):
            return False
        h, r = array.array("d", hours), array.array("d", reclaims)
        th, tr = sum(h), sum(r)  # NaN anywhere makes the sum NaN, which min and max can miss
        if not (th == th and tr == tr and min(h) > 0.0 and max(h) <= MAX_NODE_HOURS and min(r) >= 0.0
                and max(r) <= MAX_NODE_HOURS):
            return False
    return True


_PADDED = re.compile(r"(?:^|\0)\s|\s(?:\0|$)")  # a NUL-joined name with white space at either end
_EMPTY = re.compile(r"(?:^|\0)(?:\0|$)")  # an empty name among NUL-joined names


class SpotColumns(Sequence[SpotRow]):
    """Spot rows kept packed per instance type (:func:`pack_spot`, how the cache stores them): a plan unpacks only
    the rows of its instance types (:meth:`of_types`), so the other 9,990 of a 10,000-row file are never built,
    nor their names split. Any other use builds them all, in file order."""

    def __init__(self, count: int, packed: Mapping[str, PackedSpot]) -> None:
        self.size = count
        self.packed = packed
        self.indexes: dict[frozenset[str], SpotIndex] = {}  # per set of types

    def spot_index(self, types: set[str]) -> SpotIndex:
        """The :class:`SpotIndex` of the rows of ``types``, built once per set of types and kept."""
        key = frozenset(types)
        found = self.indexes.get(key)
        if found is None:
            found = self.indexes[key] = SpotIndex(self.of_types(types))
        return found

    def _unpack(self, t: str) -> list[tuple[int, SpotRow]]:
        """(position in the file, row) of the rows of instance type ``t``."""
        import array

        block = self.packed.get(t)
        if block is None:
            return []
        clouds, regions, zones = (text.split("\0") for text in block[:3])
        hours, reclaims, at = array.array("d", block[3]), array.array("d", block[4]), array.array("q", block[5])
        new = tuple.__new__
        return [(at[i], new(SpotRow, (clouds[i], regions[i], zones[i], t, hours[i], reclaims[i])))
                for i in range(len(at))]

    @functools.cached_property
    def rows(self) -> tuple[SpotRow, ...]:
        found = [pair for t in self.packed for pair in self._unpack(t)]
        found.sort(key=lambda pair: pair[0])
        return tuple(r for _, r in found)

    def of_types(self, types: set[str]) -> list[SpotRow]:
        """The rows of ``types``, in file order."""
        found = [pair for t in types for pair in self._unpack(t)]
        found.sort(key=lambda pair: pair[0])
        return [r for _, r in found]

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: Any) -> Any:
        return self.rows[i]

    def __iter__(self) -> Iterator[SpotRow]:
        return iter(self.rows)

    def __eq__(self, other: object) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, Sequence) else other)

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True)
class SpeedRow:
    """Measured per-GPU throughput (``unit`` per second per GPU) of ``workload`` on ``accelerator`` at ``nodes``."""

    workload: str
    accelerator: str
    nodes: int
    per_gpu: float
    unit: str
    runs: int


@dataclass(frozen=True)
class CheckpointRow:
    """Measured checkpoint writes: ``gb`` GB in ``seconds`` to ``destination`` (``tier`` MB/s/TiB or None)."""

    destination: str
    tier: float | None
    gb: float
    seconds: float
    runs: int


@dataclass(frozen=True)
class Calibration:
    """A parsed calibration document. Times are aware UTC datetimes; ``source`` is where it was read from."""

    measured_from: dt.datetime
    measured_to: dt.datetime
    spot: Sequence[SpotRow] = ()
    speed: tuple[SpeedRow, ...] = ()
    checkpoint_write: tuple[CheckpointRow, ...] = ()
    prior_node_hours: float | None = None
    source: str = ""

    @property
    def prior_weight(self) -> float:
        """Node-hours of the prior spot rate: the file's ``calibration.prior_node_hours``, else 100."""
        return PRIOR_NODE_HOURS if self.prior_node_hours is None else self.prior_node_hours



# ----------------------------------------------------------------------------- parsing


def _time(value: Any, field: str, source: str) -> dt.datetime:
    if isinstance(value, dt.datetime):
        t = value
    elif isinstance(value, str) and _TIME.match(value.strip()):
        t = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    else:
        raise InputError(field, f"must be an ISO-8601 time such as 2026-11-20T00:00:00Z, got {shown(value)}",
                         source=source)
    return t.replace(tzinfo=dt.UTC) if t.tzinfo is None else t.astimezone(dt.UTC)


def _num(row: Mapping[str, Any], key: str, field: str, source: str, *, positive: bool = False,
         integer: bool = False, optional: bool = False, minimum: float = 0.0,
         maximum: float = MAX_NODE_HOURS) -> float | None:
    value = row.get(key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InputError(field, f"must be a finite number, got {shown(value)}", source=source)
    if integer and value != int(value):
        raise InputError(field, f"must be a whole number, got {shown(value)}", source=source)
    if positive and value <= 0:
        raise InputError(field, f"must be above 0, got {shown(value)}: a row without measurements is not a "
                                "measurement; drop the row", source=source)
    if value < 0:
        raise InputError(field, f"must be 0 or more, got {shown(value)}", source=source)
    if value > maximum or (value and value < minimum):
        raise InputError(field, f"must be between {minimum:g} and {maximum:g}, got {shown(value)}: no fleet "
                                "measures that; fix or drop it", source=source)
    return float(value)


def _str(row: Mapping[str, Any], key: str, field: str, source: str, *, optional: bool = False) -> str:
    value = row.get(key)
    if value is None and optional:
        return ""
    if not isinstance(value, str) or not value.strip():
        raise InputError(field, f"must be a non-empty string, got {shown(value)}", source=source)
    return value.strip()


def _rows(doc: Mapping[str, Any], key: str, source: str) -> list[tuple[str, Mapping[str, Any]]]:
    rows = doc.get(key)
    if rows is None:
        return []
    if not isinstance(rows, list):
        raise InputError(key, f"must be a list of rows, got {shown(rows)}", source=source)
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise InputError(f"{key}[{i}]", f"must be a mapping, got {shown(row)}", source=source)
        out.append((f"{key}[{i}]", row))
    return out


def parse_calibration(doc: Any, *, source: str = "", now: dt.datetime | None = None) -> Calibration:
    """Validate a calibration document (see the module docstring). Raises :class:`InputError` naming the row and
    field (``spot[3].node_hours``). A file measured up to a time after ``now`` (from the future: a wrong clock or a
    forged file) and a spot row with zero node-hours are refused, not trusted."""
    if not isinstance(doc, Mapping):
        raise InputError("schema", f"a calibration file is a mapping with schema: {SCHEMA}", source=source)
    if doc.get("schema") != SCHEMA:
        raise InputError("schema", f"must be {SCHEMA}, got {shown(doc.get('schema'))}", source=source)
    measured = doc.get("measured")
    if not isinstance(measured, Mapping):
        raise InputError("measured", "must be a mapping {from: TIME, to: TIME}", source=source)
    start = _time(measured.get("from"), "measured.from", source)
    end = _time(measured.get("to"), "measured.to", source)
    if end < start:
        raise InputError("measured.to", f"is before measured.from ({start:%Y-%m-%dT%H:%M:%SZ})", source=source)
    now = now or dt.datetime.now(dt.UTC)
    if end > now + FUTURE_SKEW:
        raise InputError("measured.to", f"{end:%Y-%m-%dT%H:%M:%SZ} is in the future (now {now:%Y-%m-%dT%H:%M:%SZ}): "
                                        "refused; check the clock of the machine that wrote it and calibrate again",
                         source=source)
    prior: float | None = None
    settings = doc.get("calibration")
    if settings is not None:
        if not isinstance(settings, Mapping):
            raise InputError("calibration", "must be a mapping {prior_node_hours: N}", source=source)
        prior = _num(settings, "prior_node_hours", "calibration.prior_node_hours", source, positive=True,
                     optional=True, minimum=MIN_PRIOR_NODE_HOURS)
    spot = _fast_spot(doc.get("spot"))
    for where, row in ([] if spot is not None else _rows(doc, "spot", source)):
        spot = spot or []
        spot.append(_spot_row(row, where, source))
    speed = [_speed_row(row, where, source) for where, row in _rows(doc, "speed", source)]
    checkpoints = [_checkpoint_row(row, where, source) for where, row in _rows(doc, "checkpoint_write", source)]
    return Calibration(measured_from=start, measured_to=end, spot=tuple(spot or ()), speed=tuple(speed),
                       checkpoint_write=tuple(checkpoints), prior_node_hours=prior, source=source)


def _spot_row(row: Mapping[str, Any], where: str, source: str) -> SpotRow:
    return SpotRow(
        cloud=_str(row, "cloud", f"{where}.cloud", source).lower(),
        region=_str(row, "region", f"{where}.region", source),
        zone=_str(row, "zone", f"{where}.zone", source, optional=True),
        instance_type=_str(row, "instance_type", f"{where}.instance_type", source),
        node_hours=_num(row, "node_hours", f"{where}.node_hours", source, positive=True) or 0.0,
        reclaims=_num(row, "reclaims", f"{where}.reclaims", source) or 0.0)


def _speed_row(row: Mapping[str, Any], where: str, source: str) -> SpeedRow:
    unit = _str(row, "unit", f"{where}.unit", source)
    if unit not in UNITS:
        raise InputError(f"{where}.unit", f"must be one of {', '.join(UNITS)}, got {shown(unit)}", source=source)
    return SpeedRow(
        workload=_str(row, "workload", f"{where}.workload", source),
        accelerator=_str(row, "accelerator", f"{where}.accelerator", source),
        nodes=int(_num(row, "nodes", f"{where}.nodes", source, positive=True, integer=True,
                       maximum=MAX_NODES) or 1),
        per_gpu=_num(row, "per_gpu", f"{where}.per_gpu", source, positive=True, minimum=MIN_PER_GPU,
                     maximum=MAX_PER_GPU) or 0.0,
        unit=unit,
        runs=int(_num(row, "runs", f"{where}.runs", source, positive=True, integer=True, maximum=MAX_RUNS) or 1))


def _checkpoint_row(row: Mapping[str, Any], where: str, source: str) -> CheckpointRow:
    tier = row.get("tier")
    return CheckpointRow(
        destination=_str(row, "destination", f"{where}.destination", source),
        tier=None if tier in (None, "") else _num(row, "tier", f"{where}.tier", source, positive=True,
                                                  maximum=MAX_TIER),
        gb=_num(row, "gb", f"{where}.gb", source, positive=True, maximum=MAX_GB) or 0.0,
        seconds=_num(row, "seconds", f"{where}.seconds", source, positive=True, maximum=MAX_SECONDS) or 0.0,
        runs=int(_num(row, "runs", f"{where}.runs", source, positive=True, integer=True, maximum=MAX_RUNS) or 1))


def without_bad_rows(cal: Calibration) -> tuple[Calibration, list[str]]:
    """``cal`` without the rows :func:`parse_calibration` would refuse (measured figures out of range: a counter
    gone wrong, an absurd label), and one line per row left out naming it and the field, for a calibration made
    from measurements before it is written (a written file always reads back)."""
    problems: list[str] = []
    kept: dict[str, list[Any]] = {"spot": [], "speed": [], "checkpoint_write": []}
    checks = (("spot", cal.spot, _spot_row, lambda r: f"{r.cloud}/{r.region}/{r.zone or '-'}/{r.instance_type}"),
              ("speed", cal.speed, _speed_row, lambda r: f"{r.workload}/{r.accelerator}/{r.nodes} nodes"),
              ("checkpoint_write", cal.checkpoint_write, _checkpoint_row, lambda r: f"{r.destination}/{r.tier}"))
    for key, rows, parse_row, name in checks:
        for r in rows:
            fields = r._asdict() if isinstance(r, tuple) else dataclasses.asdict(r)
            try:
                parse_row(fields, f"{key} row {name(r)}", "")
            except InputError as exc:
                problems.append(str(exc))
                continue
            kept[key].append(r)
    if not problems:
        return cal, []
    return dataclasses.replace(cal, spot=tuple(kept["spot"]), speed=tuple(kept["speed"]),
                               checkpoint_write=tuple(kept["checkpoint_write"])), problems


def _fast_spot(rows: Any) -> list[SpotRow] | None:
    """The spot rows when every one is well formed (the common case, 10,000 rows in a few milliseconds), else None:
    then the row-by-row checks find the bad row and name it."""
    if not isinstance(rows, list):
        return None
    out = []
    new = tuple.__new__
    try:
        for r in rows:
            c, rg, it, nh, rc = r["cloud"], r["region"], r["instance_type"], r["node_hours"], r["reclaims"]
            z = r.get("zone") or ""
            if not (type(c) is str and type(rg) is str and type(it) is str and type(z) is str  # noqa: E721
                    and c and rg and it and c == c.strip().lower() and rg == rg.strip() and it == it.strip()
                    and z == z.strip() and type(nh) in (int, float) and type(rc) in (int, float)
                    and 0 < nh <= MAX_NODE_HOURS and 0 <= rc <= MAX_NODE_HOURS):
                return None
            out.append(new(SpotRow, (c, rg, z, it, float(nh), float(rc))))
    except (KeyError, TypeError, AttributeError):
        return None
    return out


def _stamp(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _g(x: float) -> float | int:
    """A number as written: whole numbers without a fraction, the rest to 6 significant digits."""
    return int(x) if x == int(x) and abs(x) < 1e15 else float(f"{x:.6g}")


def calibration_doc(cal: Calibration) -> dict[str, Any]:
    """The document of ``cal`` (what :func:`parse_calibration` reads back)."""
    doc: dict[str, Any] = {"schema": SCHEMA, "measured": {"from": _stamp(cal.measured_from),
                                                          "to": _stamp(cal.measured_to)}}
    if cal.prior_node_hours is not None:
        doc["calibration"] = {"prior_node_hours": _g(cal.prior_node_hours)}
    doc["spot"] = [{"cloud": r.cloud, "region": r.region, **({"zone": r.zone} if r.zone else {}),
                    "instance_type": r.instance_type, "node_hours": _g(r.node_hours), "reclaims": _g(r.reclaims)}
                   for r in cal.spot]
    doc["speed"] = [{"workload": r.workload, "accelerator": r.accelerator, "nodes": r.nodes, "per_gpu": _g(r.per_gpu),
                     "unit": r.unit, "runs": r.runs} for r in cal.speed]
    doc["checkpoint_write"] = [{"destination": r.destination, "tier": None if r.tier is None else _g(r.tier),
                                "gb": _g(r.gb), "seconds": _g(r.seconds), "runs": r.runs}
                               for r in cal.checkpoint_write]
    return doc


def calibration_text(cal: Calibration) -> str:
    """The file text of ``cal``: JSON (which is YAML too), one row per line, so a 10,000-row file is read in
    milliseconds (a YAML parser takes a large share of a plan's time on it) and still diffs row by row."""
    import json

    doc = calibration_doc(cal)
    parts = [f'  "schema": {json.dumps(doc["schema"])}', f'  "measured": {json.dumps(doc["measured"])}']
    if "calibration" in doc:
        parts.append(f'  "calibration": {json.dumps(doc["calibration"])}')
    for key in ("spot", "speed", "checkpoint_write"):
        rows = ",\n".join(f"    {json.dumps(row)}" for row in doc[key])
        parts.append(f'  "{key}": [\n{rows}\n  ]' if rows else f'  "{key}": []')
    return "{\n" + ",\n".join(parts) + "\n}\n"


def merge(a: Calibration, b: Calibration) -> Calibration:
    """One calibration from two: the measured windows' union; spot rows of the same place summed (files of
    disjoint windows add up); speed and checkpoint rows of the same key averaged, weighted by runs, runs summed.
    ``b``'s prior weight wins when it has one."""
    spot: dict[tuple[str, str, str, str], SpotRow] = {}
    for r in (*a.spot, *b.spot):
        key = (r.cloud, r.region, r.zone, r.instance_type)
        old = spot.get(key)
        spot[key] = r if old is None else old._replace(node_hours=old.node_hours + r.node_hours,
                                                       reclaims=old.reclaims + r.reclaims)
    speed: dict[tuple[str, str, int, str], SpeedRow] = {}
    for s in (*a.speed, *b.speed):
        k = (s.workload, s.accelerator, s.nodes, s.unit)
        prev = speed.get(k)
        speed[k] = s if prev is None else dataclasses.replace(
            prev, per_gpu=(prev.per_gpu * prev.runs + s.per_gpu * s.runs) / (prev.runs + s.runs),
            runs=prev.runs + s.runs)
    ckpt: dict[tuple[str, float | None, float], CheckpointRow] = {}
    for c in (*a.checkpoint_write, *b.checkpoint_write):
        kc = (c.destination, c.tier, c.gb)
        pc = ckpt.get(kc)
        ckpt[kc] = c if pc is None else dataclasses.replace(
            pc, seconds=(pc.seconds * pc.runs + c.seconds * c.runs) / (pc.runs + c.runs), runs=pc.runs + c.runs)
    return Calibration(measured_from=min(a.measured_from, b.measured_from),
                       measured_to=max(a.measured_to, b.measured_to), spot=tuple(spot.values()),
                       speed=tuple(speed.values()), checkpoint_write=tuple(ckpt.values()),
                       prior_node_hours=b.prior_node_hours if b.prior_node_hours is not None else a.prior_node_hours,
                       source=b.source or a.source)


# ----------------------------------------------------------------------------- the Gamma posterior
# (P, quantiles and the prior's p90 are placement.model.gamma, which a plan loads without this module)


@dataclass(frozen=True)
class SpotRate:
    """A spot rate per node-hour: the ``mean`` used, its ``p90``, where it came from (``job`` | ``calibration`` |
    ``live`` | ``default``) and, for ``calibration``, the node-hours and reclaims that updated the prior."""

    mean: float
    p90: float
    source: str
    node_hours: float = 0.0
    reclaims: float = 0.0


def posterior(prior_rate: float, weight: float, node_hours: float, reclaims: float) -> tuple[float, float]:
    """(mean, 90th percentile) of the Gamma posterior of a spot rate: prior mean ``prior_rate`` of ``weight``
    node-hours, updated with ``reclaims`` over ``node_hours``. Rates per node-hour."""
    shape = prior_rate * weight + reclaims
    rate = weight + node_hours
    return shape / rate, gamma_quantile(0.9, shape, rate)


class SpotIndex:
    """The spot rows looked up by the most specific match: zone, region, then the instance type in the cloud."""

    def __init__(self, rows: Iterable[SpotRow]) -> None:
        self.zone: dict[tuple[str, str, str], tuple[float, float]] = {}
        region_rows: dict[tuple[str, str, str], tuple[float, float]] = {}
        region_pool: dict[tuple[str, str, str], list[float]] = {}
        cloud_pool: dict[tuple[str, str], list[float]] = {}
        for r in rows:
            if r.zone:
                self.zone[(r.cloud, r.zone, r.instance_type)] = (r.node_hours, r.reclaims)
                acc = region_pool.setdefault((r.cloud, r.region, r.instance_type), [0.0, 0.0])
                acc[0] += r.node_hours
                acc[1] += r.reclaims
            else:
                region_rows[(r.cloud, r.region, r.instance_type)] = (r.node_hours, r.reclaims)
            pool = cloud_pool.setdefault((r.cloud, r.instance_type), [0.0, 0.0])
            pool[0] += r.node_hours
            pool[1] += r.reclaims
        self.region = {k: (v[0], v[1]) for k, v in region_pool.items()}
        self.region.update(region_rows)  # the region's own row is more specific than its zones pooled
        self.cloud = {k: (v[0], v[1]) for k, v in cloud_pool.items()}

    def find(self, cloud: str, region: str, zone: str, instance_type: str) -> tuple[float, float] | None:
        """(node-hours, reclaims) of the most specific match, or None."""
        hit = self.zone.get((cloud, zone, instance_type))
        if hit is None:
            hit = self.region.get((cloud, region, instance_type))
            if hit is None:
                hit = self.cloud.get((cloud, instance_type))
        return hit


# ----------------------------------------------------------------------------- applying it to offers and jobs


def calibrated_offers(cal: Calibration | None, offers: Sequence[Any], default_rate: float,
                      accelerators: Iterable[str] | None = None) -> list[Any]:
    """``offers`` with the calibrated spot rate on every spot offer a row matches: ``calibrated_rate`` the
    posterior mean (prior: the offer's live rate when it is above ``default_rate``, else ``default_rate``) and
    ``calibrated_weight`` the posterior's node-hours (:func:`posterior` gives the same mean and its p90). Offers
    without a match are the same objects (a plan's memo keys on them). ``accelerators``: only offers of these
    are looked up (a plan's job)."""
    if cal is None or not cal.spot:
        return list(offers)
    wanted = None if accelerators is None else set(accelerators)
    names: dict[int, str | None] = {}  # per shape object: its name when its spot offers are looked up
    types: set[str] = set()
    for o in offers:
        sh = o.shape
        if id(sh) in names:
            name = names[id(sh)]
        else:
            name = names[id(sh)] = sh.name if wanted is None or sh.accelerator in wanted else None
        if name is not None and o.spot_price is not None:
            types.add(name)
    spot = cal.spot
    index = spot.spot_index(types) if isinstance(spot, SpotColumns) else \
        SpotIndex(r for r in spot if r.instance_type in types)
    weight = cal.prior_weight
    zones, regions, clouds = index.zone, index.region, index.cloud
    out = []
    memo: dict[tuple[float, float, float], float] = {}
    new = object.__new__
    for o in offers:
        name = names[id(o.shape)]
        if name is None or o.spot_price is None:
            out.append(o)
            continue
        cloud = o.cloud
        # SpotIndex.find, inlined: the most specific row (zone, region, the instance type in the cloud)
        hit = zones.get((cloud, o.zone, name)) or regions.get((cloud, o.region, name)) or clouds.get((cloud, name))
        if hit is None:
            out.append(o)
            continue
        live = o.interruptions_per_hour
        prior = live if live is not None and live > default_rate else default_rate
        key = (prior, hit[0], hit[1])
        mean = memo.get(key)
        if mean is None:
            mean = memo[key] = (prior * weight + hit[1]) / (weight + hit[0])
        # A shallow copy with two fields set: what dataclasses.replace gives, without re-running __init__ (a
        # tenth of the cost on a big catalog), nor copy.copy's reduce protocol. Offer is a frozen dataclass
        # (no __slots__): its fields live in __dict__.
        c = new(type(o))
        fields = c.__dict__
        fields.update(o.__dict__)
        fields["calibrated_rate"] = mean
        fields["calibrated_weight"] = weight + hit[0]
        out.append(c)
    return out


def measured_speeds(cal: Calibration, workload: str, min_runs: int = MIN_RUNS) -> dict[str, float]:
    """Per-GPU throughput at one node of each accelerator measured on ``workload`` with enough runs, in one unit
    (tokens/s when any accelerator has it, else samples/s): only ratios between these are used."""
    rows = [r for r in cal.speed if r.workload == workload and r.nodes == 1 and r.runs >= min_runs]
    units = {r.unit for r in rows}
    unit = "tokens/s" if "tokens/s" in units else "samples/s"
    best: dict[str, SpeedRow] = {}
    for r in rows:
        if r.unit == unit and (r.accelerator not in best or r.runs > best[r.accelerator].runs):
            best[r.accelerator] = r
    return {a: r.per_gpu for a, r in best.items()}


def measured_scaling(cal: Calibration, workload: str, min_runs: int = MIN_RUNS) -> tuple[tuple[str, int, float], ...]:
    """(accelerator, nodes, efficiency) measured: per_gpu at N nodes over per_gpu at one node, same unit, both
    rows with enough runs; capped at 1 (a superlinear figure is noise, not a fabric)."""
    one: dict[tuple[str, str], float] = {(r.accelerator, r.unit): r.per_gpu for r in cal.speed
                                         if r.workload == workload and r.nodes == 1 and r.runs >= min_runs}
    out = []
    for r in cal.speed:
        base = one.get((r.accelerator, r.unit))
        if r.workload == workload and r.nodes > 1 and r.runs >= min_runs and base:
            out.append((r.accelerator, r.nodes, min(1.0, r.per_gpu / base)))
    return tuple(sorted(out))


def calibrated_job(cal: Calibration | None, job: Any) -> Any:
    """``job`` with measured speed ratios and scaling (where the calibration has enough runs) and the prior
    weight of the file; the job's own ``speed`` entries win. Its ``measured`` names what was replaced:
    ``speed:<accelerator>`` and ``scaling:<accelerator>x<nodes>``."""
    if cal is None:
        return job
    changes: dict[str, Any] = {"prior_node_hours": cal.prior_weight}
    measured: list[str] = []
    speeds = measured_speeds(cal, job.workload)
    own = {name for name, _ in job.speed}
    usable = {a: v for a, v in speeds.items() if a not in own}
    if len(speeds) >= 2 and usable:
        # Anchor the measured ratios on one accelerator's model speed: the job's first when measured (its hours
        # are stated there), else the best-measured one; unmeasured accelerators keep the model's figure.
        first = job.accelerators[0]
        anchor = first if first in speeds else ("H100" if "H100" in speeds else min(speeds))
        base = job.speed_of(anchor)
        extra = tuple((a, base * v / speeds[anchor]) for a, v in sorted(usable.items()))
        changes["speed"] = tuple(job.speed) + extra
        measured += [f"speed:{a}" for a, _ in extra]
    scaling = measured_scaling(cal, job.workload)
    if scaling:
        changes["scaling"] = scaling
        measured += [f"scaling:{a}x{n}" for a, n, _ in scaling]
    changes["measured"] = tuple(measured)
    return dataclasses.replace(job, **changes)
