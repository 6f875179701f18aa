"""Calibration files on disk: where ``calibrate`` and ``profile`` write them, the newest one plans read by
default, and an in-process and on-disk cache of large ones.

The pure part (schema, posterior, speeds) is :mod:`placement.model.calibration`. Files ``calibrate`` writes live in
``<user data dir>/calibration/calibration-<UTC time>.json`` (``$GPUFLEET_DATA_DIR`` moves the data directory);
plans read the newest of them unless given ``--calibration FILE`` or ``--no-calibration``. Nothing here reads or
deletes a file it did not write, except the one the user names.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import functools
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from placement.errors import InputError, UsageError, shown

if TYPE_CHECKING:
    from placement.model.calibration import Calibration

# The model (placement.model.calibration: statistics, its record types) is imported where a file is read or
# written, not here: a plan without a calibration file looks for one and is done.

DIR_NAME = "calibration"
PREFIX = "calibration-"


def calibration_dir() -> Path:
    """Where ``calibrate`` and ``profile`` write: ``<user data dir>/calibration``."""
    from placement.model.catalog import user_data_dir

    return user_data_dir() / DIR_NAME


def default_output(now: dt.datetime) -> Path:
    return calibration_dir() / f"{PREFIX}{now.astimezone(dt.UTC):%Y%m%dT%H%M%S}Z.json"


def newest_calibration() -> Path | None:
    """The newest file ``calibrate``/``profile`` wrote (by modification time, then name), or None."""
    folder = calibration_dir()
    try:
        found = [p for p in folder.iterdir() if p.name.startswith(PREFIX) and p.suffix in (".json", ".yaml")
                 and p.is_file()]
    except OSError:
        return None
    if not found:
        return None
    return max(found, key=lambda p: (p.stat().st_mtime_ns, p.name))


CACHE_FORMAT = "gpufleet.calibration-cache/v2"  # v2: spot rows packed per instance type
CACHE_MIN_BYTES = 64 * 2**10  # smaller files parse faster than an entry is read


def _cache_entry(path: str) -> tuple[Path, tuple[Any, ...]] | None:
    """(entry path, key) of a calibration file's parsed rows in the user cache directory, or None."""
    import hashlib

    try:
        real = os.path.realpath(path)
        st = os.stat(real)
    except OSError:
        return None
    if st.st_size < CACHE_MIN_BYTES:
        return None
    from placement.files.catalog_cache import cache_dir

    name = hashlib.sha256(real.encode()).hexdigest()[:32]
    return cache_dir().parent / "calibration" / f"{name}.marshal", (CACHE_FORMAT, _code(), real, st.st_mtime_ns,
                                                                      st.st_size)


@functools.cache
def _code() -> str:
    """A digest of the parser's code, read once per process (the code a process runs does not change)."""
    import hashlib

    parser = Path(__file__).resolve().parents[1] / "model" / "calibration.py"
    return hashlib.sha256(parser.read_bytes()).hexdigest()[:16]


# Entries already read in this process, by entry path and key: `placement dispatch` plans every workload with one
# file, and a plan's spot index (SpotColumns.spot_index) is then built once. A few files at most.
_RECENT: dict[tuple[Path, tuple[Any, ...]], Calibration] = {}
_RECENT_MAX = 4


def _well_packed(count: Any, packed: Any) -> bool:
    """Whether a cache entry's packed spot rows (:func:`placement.model.calibration.pack_spot`) split back into
    ``count`` rows of six equal columns: counted, not split (a plan splits only the types it needs)."""
    if type(count) is not int or type(packed) is not dict:  # noqa: E721
        return False
    total = 0
    for t, block in packed.items():
        if type(t) is not str or type(block) is not tuple or len(block) != 6:  # noqa: E721
            return False
        n, rest = divmod(len(block[3]), 8)
        if rest or n == 0 or len(block[4]) != 8 * n or len(block[5]) != 8 * n or \
                any(type(text) is not str or text.count("\0") != n - 1 for text in block[:3]):  # noqa: E721
            return False
        total += n
    return total == count


CACHE_MAX_BYTES = 256 * 2**20  # an entry is ~100 bytes a row: far above the largest calibration file's


def _cached(path: str, now: dt.datetime | None) -> Calibration | None:
    """The parsed rows of ``path`` from its cache entry, or None (then the file is parsed). The entry is a file
    another process could have replaced or rewritten: it is opened only when it is a regular file (not a link, a
    FIFO or a device) under :data:`CACHE_MAX_BYTES` (:mod:`placement.files.safe`), and what it holds is checked
    with the same rules as the file itself (:func:`_checked`) before it is trusted."""
    import marshal

    from placement.files.safe import read_bytes
    from placement.model.calibration import FUTURE_SKEW

    entry = _cache_entry(path)
    if entry is None:
        return None
    recent = _RECENT.get(entry)
    if recent is not None and recent.source == str(path):
        if recent.measured_to > (now or dt.datetime.now(dt.UTC)) + FUTURE_SKEW:
            return None  # parsed again: the error names the field
        return recent
    try:
        key, payload = marshal.loads(read_bytes(entry[0], CACHE_MAX_BYTES))  # one read: 5x faster than load(fh)
    except (OSError, EOFError, ValueError, TypeError):
        return None
    if key != entry[1]:
        return None
    cal = _checked(payload, str(path), now)
    if cal is None:
        return None
    if len(_RECENT) >= _RECENT_MAX:
        _RECENT.clear()  # a few files at most: start over (no eviction order to keep across threads)
    _RECENT[entry] = cal
    return cal


def _checked(payload: Any, source: str, now: dt.datetime | None) -> Calibration | None:
    """The calibration a cache entry's payload holds when it passes the checks a calibration file passes, else
    None: the window, prior weight, speed and checkpoint rows go through :func:`parse_calibration` itself (a few
    rows), the packed spot rows through :func:`placement.model.calibration.packed_spot_ok` (the same rules, on
    whole columns)."""
    from placement.model.calibration import SCHEMA, SpotColumns, packed_spot_ok, parse_calibration

    try:
        start, end, prior, (count, packed), speed, ckpt = payload
        if not _well_packed(count, packed) or not packed_spot_ok(packed):
            return None
        stamps = [dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ") for t in (start, end)]
        doc = {"schema": SCHEMA, "measured": {"from": stamps[0], "to": stamps[1]},
               **({} if prior is None else {"calibration": {"prior_node_hours": prior}}),
               "speed": [dict(zip(("workload", "accelerator", "nodes", "per_gpu", "unit", "runs"), r, strict=True))
                         for r in speed],
               "checkpoint_write": [dict(zip(("destination", "tier", "gb", "seconds", "runs"), r, strict=True))
                                    for r in ckpt]}
        rows = parse_calibration(doc, source=source, now=now)
    except (TypeError, ValueError, OverflowError, OSError):  # InputError is a ValueError: a rewritten entry
        return None
    return dataclasses.replace(rows, spot=SpotColumns(count, packed))


def _remember(path: str, cal: Calibration) -> None:
    """Write the parsed rows beside the cache's other entries (atomically; a failure only costs the next read)."""
    import marshal
    import tempfile

    from placement.model.calibration import pack_spot

    entry = _cache_entry(path)
    if entry is None:
        return
    # Packed per instance type (names joined, numbers as doubles): a tenth of the time marshal takes for 10,000
    # tuples, and a plan unpacks only its instance types' rows.
    packed = pack_spot(cal.spot)
    if packed is None:
        return  # a NUL inside a name: not worth a cache entry
    spot = (len(cal.spot), packed)
    payload = (cal.measured_from.timestamp(), cal.measured_to.timestamp(), cal.prior_node_hours, spot,
               [(r.workload, r.accelerator, r.nodes, r.per_gpu, r.unit, r.runs) for r in cal.speed],
               [(r.destination, r.tier, r.gb, r.seconds, r.runs) for r in cal.checkpoint_write])
    with contextlib.suppress(OSError, ValueError):
        entry[0].parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".calibration.", suffix=".tmp", dir=entry[0].parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                marshal.dump((entry[1], payload), fh)
            os.replace(tmp, entry[0])
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


def read_calibration(path: str | os.PathLike[str], now: dt.datetime | None = None) -> Calibration:
    """Read and validate one calibration file: JSON (what calibrate writes; read with the json module) or YAML.
    A large file's parsed rows are kept in the user cache directory, keyed by its path, size and modification
    time, so a plan reads a 10,000-row file in milliseconds."""
    from placement.files.readers import read_text
    from placement.model.calibration import parse_calibration
    from placement.model.text import MAX_YAML_BYTES, parse_yaml

    hit = _cached(str(path), now)
    if hit is not None:
        return hit
    text = read_text(str(path), "calibration file", MAX_YAML_BYTES)
    doc: Any = None
    if text.lstrip().startswith("{"):
        with contextlib.suppress(ValueError, RecursionError):
            doc = json.loads(text)
    if doc is None:
        doc = parse_yaml(text, f"calibration file: {shown(str(path))}")
    try:
        cal = parse_calibration(doc, source=str(path), now=now)
    except InputError as exc:
        raise InputError(exc.field, f"{exc.message} (or plan with --no-calibration)", source=str(path)) from None
    _remember(str(path), cal)
    return cal


def resolve(args: Any, now: dt.datetime | None = None) -> Calibration | None:
    """The calibration a plan uses: ``--calibration FILE``, none with ``--no-calibration``, else the newest file
    ``calibrate`` wrote (none when there is none)."""
    if getattr(args, "no_calibration", False):
        if getattr(args, "calibration", None):
            raise UsageError("--calibration and --no-calibration: give one of them")
        return None
    path = getattr(args, "calibration", None)
    if path:
        return read_calibration(path, now)
    newest = newest_calibration()
    return None if newest is None else read_calibration(newest, now)


def apply_calibration(args: Any, now: dt.datetime, offers: Sequence[Any],
                      job: Any = None) -> tuple[Calibration | None, list[Any], Any]:
    """(the calibration ``args`` name or the newest, offers with calibrated spot rates, ``job`` with measured
    speeds): what plan, plan-batch, submit and dispatch plan with."""
    del now  # "from the future" is judged by the clock, not by a plan made --now as of another time
    cal = resolve(args)
    if cal is None:
        return None, list(offers), job
    from placement.model.calibration import calibrated_job, calibrated_offers
    from placement.model.jobspec import JobSpec

    out = calibrated_offers(cal, offers, JobSpec.interruptions_per_hour, None if job is None else job.accelerators)
    return cal, out, None if job is None else calibrated_job(cal, job)


def write_calibration(cal: Calibration, path: Path) -> Path:
    """Write ``cal`` to ``path`` atomically (a temporary file beside it, then a rename): never half-written."""
    import tempfile

    from placement.model.calibration import calibration_text

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(calibration_text(cal))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def applied(cal: Calibration | None, offers: Sequence[Any], jobs: Sequence[Any] = ()) -> dict[str, Any] | None:
    """What of ``cal`` a plan used: ``offers`` as priced (:func:`apply_calibration`'s) and the calibrated
    ``jobs``. Spot rows count when they are of an instance type the plan has a spot offer of (the rows its offers'
    rates are drawn from); speed and scaling rows when they replaced a model figure of a job (``job.measured``);
    checkpoint rows are recorded, never used by plans."""
    if cal is None:
        return None
    calibrated = [o for o in offers if getattr(o, "calibrated_rate", None) is not None]
    types = {o.shape.name for o in calibrated}
    from placement.model.calibration import SpotColumns

    if isinstance(cal.spot, SpotColumns):
        spot_rows = sum(len(cal.spot.packed[t][5]) // 8 for t in types if t in cal.spot.packed)
    else:
        spot_rows = sum(1 for r in cal.spot if r.instance_type in types)
    measured = sorted({m for job in jobs for m in getattr(job, "measured", ())})
    speed = [m.split(":", 1)[1] for m in measured if m.startswith("speed:")]
    scaling = [m.split(":", 1)[1] for m in measured if m.startswith("scaling:")]
    return {"spot_rows": spot_rows, "spot_offers": len(calibrated), "speed": speed, "scaling": scaling,
            "any": bool(spot_rows or speed or scaling)}


def info(cal: Calibration | None, used: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The ``calibration`` object of a plan document: which file, its window and its rows, and (``used``, from
    :func:`applied`) how many of them the plan used: ``applied`` (fields only added)."""
    if cal is None:
        return None
    doc: dict[str, Any] = {
        "path": cal.source, "from": f"{cal.measured_from:%Y-%m-%dT%H:%M:%SZ}",
        "to": f"{cal.measured_to:%Y-%m-%dT%H:%M:%SZ}", "spot_rows": len(cal.spot), "speed_rows": len(cal.speed),
        "prior_node_hours": cal.prior_weight, "checkpoint_rows": len(cal.checkpoint_write),
        "window_hours": round((cal.measured_to - cal.measured_from).total_seconds() / 3600.0, 4)}
    if used is not None:
        doc["applied"] = used
    return doc


def calibration_line(cal: Calibration, used: dict[str, Any], chosen_by_default: bool) -> str:
    """The plan's line on the calibration in force: the file, its window, and how many of its rows applied,
    or that none did (then the plan is the model's alone)."""
    hours = (cal.measured_to - cal.measured_from).total_seconds() / 3600.0
    span = f"{hours / 24:,.1f} days" if hours >= 48 else (f"{hours:,.1f} h" if hours >= 1 else
                                                         f"{hours * 60:,.0f} min")
    default = " (the newest calibrate wrote; --no-calibration ignores it)" if chosen_by_default else ""
    head = (f"calibration: {cal.source}{default}, measured {cal.measured_from:%Y-%m-%d %H:%M} to "
            f"{cal.measured_to:%Y-%m-%d %H:%M}Z ({span})")
    total = len(cal.spot) + len(cal.speed) + len(cal.checkpoint_write)
    if not used["any"]:
        rows = "its one row does not" if total == 1 else f"none of its {total:,} rows"
        return (f"{head}: {rows} apply to this plan (no spot row of its instance types, no speed measured on "
                "enough runs for its workload); figures are the model's")
    parts = []
    if used["spot_rows"]:
        parts.append(f"{used['spot_rows']:,} of {len(cal.spot):,} spot rows priced {used['spot_offers']:,} spot "
                     "offers")
    if used["speed"]:
        parts.append(f"measured speed on {', '.join(used['speed'])}")
    if used["scaling"]:
        parts.append(f"measured scaling {', '.join(used['scaling'])}")
    return f"{head}: {'; '.join(parts)}"
