"""Calibration files on disk: where ``calibrate`` and ``profile`` write them, the newest one plans read by
default, and an in-process and on-disk cache of large ones.

The pure part (schema, posterior, speeds) is :mod:`placement.model.calibration`. Files ``calibrate`` writes live in
``<user data dir>/calibration/calibration-<UTC time>.json`` (``$GPUFLEET_DATA_DIR`` moves the data directory);
plans read the newest of them unless given ``--calibration FILE`` or ``--no-calibration``. Nothing here reads or
deletes a file it did not write, except the one the user names.
"""

from __future__ import annotations

import contextlib
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


def _cached(path: str, now: dt.datetime | None) -> Calibration | None:
    import marshal

    from placement.model.calibration import FUTURE_SKEW, Calibration, CheckpointRow, SpeedRow, SpotColumns

    entry = _cache_entry(path)
    if entry is None:
        return None
    recent = _RECENT.get(entry)
    if recent is not None and recent.source == str(path):
        if recent.measured_to > (now or dt.datetime.now(dt.UTC)) + FUTURE_SKEW:
            return None  # parsed again: the error names the field
        return recent
    try:
        with open(entry[0], "rb") as fh:
            key, payload = marshal.loads(fh.read())  # one read: load(fh) reads piece by piece, 5x slower
    except (OSError, EOFError, ValueError, TypeError):
        return None
    if key != entry[1]:
        return None
    try:
        start, end, prior, (count, packed), speed, ckpt = payload
    except (TypeError, ValueError):
        return None
    if not _well_packed(count, packed):
        return None
    cal = Calibration(measured_from=dt.datetime.fromtimestamp(start, dt.UTC),
                      measured_to=dt.datetime.fromtimestamp(end, dt.UTC), spot=SpotColumns(count, packed),
                      speed=tuple(SpeedRow(*r) for r in speed), checkpoint_write=tuple(CheckpointRow(*r) for r in ckpt),
                      prior_node_hours=prior, source=str(path))
    if cal.measured_to > (now or dt.datetime.now(dt.UTC)) + FUTURE_SKEW:
        return None  # parsed again: the error names the field
    if len(_RECENT) >= _RECENT_MAX:
        _RECENT.clear()  # a few files at most: start over (no eviction order to keep across threads)
    _RECENT[entry] = cal
    return cal


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


def info(cal: Calibration | None) -> dict[str, Any] | None:
    """The ``calibration`` object of a plan document: which file, its window and its rows."""
    if cal is None:
        return None
    return {"path": cal.source, "from": f"{cal.measured_from:%Y-%m-%dT%H:%M:%SZ}",
            "to": f"{cal.measured_to:%Y-%m-%dT%H:%M:%SZ}", "spot_rows": len(cal.spot), "speed_rows": len(cal.speed),
            "prior_node_hours": cal.prior_weight}
