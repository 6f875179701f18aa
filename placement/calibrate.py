"""Calibration files on disk and where their numbers come from: ``placement calibrate`` (a Prometheus server's HTTP
API, or a file of exported samples) and the file plans read by default.

The pure part (schema, posterior, speeds) is :mod:`placement.calibration`. Files ``calibrate`` writes live in
``<user data dir>/calibration/calibration-<UTC time>.json`` (``$GPUFLEET_DATA_DIR`` moves the data directory);
plans read the newest of them unless given ``--calibration FILE`` or ``--no-calibration``. Nothing here reads or
deletes a file it did not write, except the one the user names.

Queries (``W`` = the window in seconds, evaluated at ``--to``), metric names from the dispatcher and the trainer
(docs/calibration.md):

- node-hours  ``sum by (cloud, region, zone, instance_type) (increase(gpufleet_spot_node_seconds_total[W])) / 3600``
- reclaims    ``sum by (cloud, region, zone, instance_type) (increase(gpufleet_spot_reclaims_total[W]))``
- speed       per training job: ``increase(gpufleet_trainer_tokens_total[W])`` (samples when no tokens) summed
  over the job's exporters, over ``increase(gpufleet_trainer_step_seconds_sum[W])`` (its slowest exporter: ranks
  step in lock-step), over the job's GPUs; one row per (workload, accelerator, nodes): the median over jobs,
  ``runs`` the number of jobs
- checkpoint  ``increase(..._checkpoint_write_seconds_sum[W]) / increase(..._count[W])`` per (destination, tier),
  ``gb`` the mean of ``gpufleet_trainer_checkpoint_bytes`` / 1e9, ``runs`` the writes counted
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import itertools
import json
import math
import operator
import os
import statistics
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from placement.calibration import (
    FUTURE_SKEW,
    Calibration,
    CheckpointRow,
    SpeedRow,
    SpotColumns,
    SpotRow,
    calibration_text,
    pack_spot,
    parse_calibration,
)
from placement.errors import InputError, UsageError, shown

DIR_NAME = "calibration"
PREFIX = "calibration-"
NODE_SECONDS = "gpufleet_spot_node_seconds_total"
RECLAIMS = "gpufleet_spot_reclaims_total"
SPOT_LABELS = ("cloud", "region", "zone", "instance_type")
JOB_LABELS = ("job", "workload", "accelerator", "nodes", "gpus")
MAX_WINDOW_DAYS = 400  # a longer window than any retention: a mistyped --from


# ----------------------------------------------------------------------------- files


def calibration_dir() -> Path:
    """Where ``calibrate`` and ``profile`` write: ``<user data dir>/calibration``."""
    from placement.catalog import user_data_dir

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
    from placement.catalog_cache import cache_dir

    name = hashlib.sha256(real.encode()).hexdigest()[:32]
    return cache_dir().parent / "calibration" / f"{name}.marshal", (CACHE_FORMAT, _code(), real, st.st_mtime_ns,
                                                                      st.st_size)


@functools.cache
def _code() -> str:
    """A digest of the parser's code, read once per process (the code a process runs does not change)."""
    import hashlib

    return hashlib.sha256(Path(__file__).with_name("calibration.py").read_bytes()).hexdigest()[:16]


# Entries already read in this process, by entry path and key: `placement dispatch` plans every workload with one
# file, and a plan's spot index (SpotColumns.spot_index) is then built once. A few files at most.
_RECENT: dict[tuple[Path, tuple[Any, ...]], Calibration] = {}
_RECENT_MAX = 4


def _well_packed(count: Any, packed: Any) -> bool:
    """Whether a cache entry's packed spot rows (:func:`placement.calibration.pack_spot`) split back into
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
    from placement.readers import MAX_YAML_BYTES, parse_yaml, read_text

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
    from placement.calibration import calibrated_job, calibrated_offers
    from placement.jobspec import JobSpec

    del now  # "from the future" is judged by the clock, not by a plan made --now as of another time
    cal = resolve(args)
    if cal is None:
        return None, list(offers), job
    out = calibrated_offers(cal, offers, JobSpec.interruptions_per_hour, None if job is None else job.accelerators)
    return cal, out, None if job is None else calibrated_job(cal, job)


def write_calibration(cal: Calibration, path: Path) -> Path:
    """Write ``cal`` to ``path`` atomically (a temporary file beside it, then a rename): never half-written."""
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


# ----------------------------------------------------------------------------- Prometheus


class PromError(Exception):
    """The Prometheus server could not answer (unreachable, an error status, a malformed answer)."""


def query(url: str, promql: str, at: dt.datetime, *, timeout_s: float = 10.0, retries: int = 2,
          deadline_s: float = 60.0, opener: Callable[..., Any] | None = None) -> list[dict[str, Any]]:
    """One instant query (``/api/v1/query``) evaluated at ``at``: the vector's samples. Each request has
    ``timeout_s``; a failure is retried ``retries`` times with a short back-off, all within ``deadline_s``."""
    endpoint = url.rstrip("/") + "/api/v1/query"
    body = urllib.parse.urlencode({"query": promql, "time": f"{at.timestamp():.3f}"}).encode()
    start = time.monotonic()
    opener = opener or urllib.request.urlopen
    last = ""
    for attempt in range(retries + 1):
        left = deadline_s - (time.monotonic() - start)
        if left <= 0:
            break
        try:
            req = urllib.request.Request(endpoint, data=body, method="POST",
                                         headers={"Content-Type": "application/x-www-form-urlencoded"})
            with opener(req, timeout=min(timeout_s, left)) as resp:
                doc = json.loads(resp.read(64 * 1024 * 1024))
            if doc.get("status") != "success":
                raise PromError(f"{doc.get('errorType', 'error')}: {doc.get('error', '')}"[:200])
            data = doc.get("data") or {}
            if data.get("resultType") != "vector":
                raise PromError(f"expected a vector, got {shown(data.get('resultType'))}")
            return list(data.get("result") or [])
        except urllib.error.HTTPError as exc:
            last = f"HTTP {exc.code}"
            if exc.code < 500 and exc.code != 429:
                try:
                    detail = json.loads(exc.read()).get("error", "")
                except (ValueError, OSError):
                    detail = ""
                raise PromError(f"HTTP {exc.code} {detail}"[:200]) from None
        except PromError:
            raise
        except (OSError, ValueError) as exc:
            last = exc.__class__.__name__
        if attempt < retries:
            time.sleep(min(0.2 * 2 ** attempt, max(0.0, deadline_s - (time.monotonic() - start))))
    raise PromError(f"no answer from {endpoint} ({last or 'deadline'})")


def _value(sample: Mapping[str, Any]) -> float:
    v = float(sample["value"][1])
    return v if math.isfinite(v) else 0.0


def from_prometheus(url: str, start: dt.datetime, end: dt.datetime, *, timeout_s: float = 10.0,
                    opener: Callable[..., Any] | None = None) -> Calibration:
    """A calibration from a Prometheus server's metrics over [start, end]."""
    window = f"{max(1, int((end - start).total_seconds()))}s"

    def q(promql: str) -> list[dict[str, Any]]:
        return query(url, promql, end, timeout_s=timeout_s, opener=opener)

    by = ", ".join(SPOT_LABELS)
    hours = q(f"sum by ({by}) (increase({NODE_SECONDS}[{window}]))")
    reclaims = q(f"sum by ({by}) (increase({RECLAIMS}[{window}]))")
    spot = _spot_rows(((s["metric"], _value(s) / 3600.0) for s in hours),
                      ((s["metric"], _value(s)) for s in reclaims))
    jl = ", ".join(JOB_LABELS)
    tokens = q(f"sum by ({jl}) (increase(gpufleet_trainer_tokens_total[{window}]))")
    samples = q(f"sum by ({jl}) (increase(gpufleet_trainer_samples_total[{window}]))")
    steps = q(f"max by ({jl}) (increase(gpufleet_trainer_step_seconds_sum[{window}]))")
    speed = _speed_rows([(s["metric"], _value(s)) for s in tokens], [(s["metric"], _value(s)) for s in samples],
                        [(s["metric"], _value(s)) for s in steps])
    ck_by = "destination, tier"
    w_sum = q(f"sum by ({ck_by}) (increase(gpufleet_trainer_checkpoint_write_seconds_sum[{window}]))")
    w_count = q(f"sum by ({ck_by}) (increase(gpufleet_trainer_checkpoint_write_seconds_count[{window}]))")
    size = q(f"avg by ({ck_by}) (avg_over_time(gpufleet_trainer_checkpoint_bytes[{window}]))")
    ckpt = _checkpoint_rows([(s["metric"], _value(s)) for s in w_sum], [(s["metric"], _value(s)) for s in w_count],
                            [(s["metric"], _value(s)) for s in size])
    return Calibration(measured_from=start, measured_to=end, spot=spot, speed=speed, checkpoint_write=ckpt)


def _key(labels: Mapping[str, str], names: Iterable[str]) -> tuple[str, ...]:
    return tuple(str(labels.get(n, "")) for n in names)


def _spot_rows(hours: Iterable[tuple[Mapping[str, str], float]],
               reclaims: Iterable[tuple[Mapping[str, str], float]]) -> tuple[SpotRow, ...]:
    """Rows of every (cloud, region, zone, instance type) with node-hours (a place with none is left out: zero
    node-hours is no measurement). Rows without a cloud, region or instance type label are dropped."""
    nh: dict[tuple[str, ...], float] = defaultdict(float)
    for labels, v in hours:
        nh[_key(labels, SPOT_LABELS)] += v
    rc: dict[tuple[str, ...], float] = defaultdict(float)
    for labels, v in reclaims:
        rc[_key(labels, SPOT_LABELS)] += v
    rows = []
    for key in sorted(nh):
        cloud, region, zone, itype = key
        if nh[key] <= 0 or not (cloud and region and itype):
            continue
        rows.append(SpotRow(cloud=cloud.lower(), region=region, zone=zone, instance_type=itype,
                            node_hours=round(nh[key], 6), reclaims=round(max(rc.get(key, 0.0), 0.0), 6)))
    return tuple(rows)


def _speed_rows(tokens: list[tuple[Mapping[str, str], float]], samples: list[tuple[Mapping[str, str], float]],
                steps: list[tuple[Mapping[str, str], float]]) -> tuple[SpeedRow, ...]:
    secs = {_key(m, JOB_LABELS): v for m, v in steps}
    tok = {_key(m, JOB_LABELS): v for m, v in tokens}
    smp = {_key(m, JOB_LABELS): v for m, v in samples}
    per: dict[tuple[str, str, int, str], list[float]] = defaultdict(list)
    for key, s in secs.items():
        _job, workload, accel, nodes, gpus = key
        try:
            n, g = int(float(nodes)), int(float(gpus))
        except ValueError:
            continue
        if s <= 0 or g <= 0 or n <= 0 or not workload or not accel:
            continue
        amount, unit = (tok[key], "tokens/s") if tok.get(key, 0.0) > 0 else (smp.get(key, 0.0), "samples/s")
        if amount <= 0:
            continue
        per[(workload, accel, n, unit)].append(amount / s / g)
    return tuple(SpeedRow(workload=w, accelerator=a, nodes=n, per_gpu=round(statistics.median(v), 6), unit=u,
                          runs=len(v)) for (w, a, n, u), v in sorted(per.items()))


def _checkpoint_rows(sums: list[tuple[Mapping[str, str], float]], counts: list[tuple[Mapping[str, str], float]],
                     size: list[tuple[Mapping[str, str], float]]) -> tuple[CheckpointRow, ...]:
    names = ("destination", "tier")
    total = {_key(m, names): v for m, v in sums}
    gb = {_key(m, names): v / 1e9 for m, v in size}
    rows = []
    for m, n in counts:
        key = _key(m, names)
        runs = int(round(n))
        if runs <= 0 or total.get(key, 0.0) <= 0 or gb.get(key, 0.0) <= 0 or not key[0]:
            continue
        try:
            tier = float(key[1]) if key[1] else None
        except ValueError:
            tier = None
        rows.append(CheckpointRow(destination=key[0], tier=tier if tier and tier > 0 else None,
                                  gb=round(gb[key], 6), seconds=round(total[key] / n, 6), runs=runs))
    return tuple(sorted(rows, key=lambda r: (r.destination, r.tier or 0.0)))


# ----------------------------------------------------------------------------- exported samples


def _increase(values: Any, lo: float, hi: float) -> float:
    """A counter's increase over the samples in [lo, hi] (seconds): the sum of its rises, a drop being a reset
    (the value after it counts from 0). Samples outside the window are ignored; no extrapolation. ``values``:
    ``[[t, "v"], ...]`` (times and values as JSON numbers or strings)."""
    kept = []
    for t, v in values:
        t, v = float(t), float(v)
        if lo <= t <= hi:
            kept.append(v)
    return _rise(kept)


def _rise(v: list[float]) -> float:
    """The sum of a counter's rises over values ``v`` (in time order), a drop being a reset (the value after it
    counts from 0); non-finite values are skipped. Written as last - first + the value before each drop (the
    same sum, telescoped), exactly rounded (math.fsum): one comparison per sample in C-speed iteration."""
    if not math.isfinite(sum(v)):  # a NaN or an infinity among them (or an overflow): keep the finite ones
        v = [x for x in v if math.isfinite(x)]
    if len(v) < 2:
        return 0.0
    drops = list(itertools.compress(v, map(operator.gt, v, itertools.islice(v, 1, None))))  # a > the next
    return math.fsum([v[-1], -v[0], *drops])


def from_samples(path: str, start: dt.datetime | None, end: dt.datetime | None) -> Calibration:
    """A calibration from exported samples: one or more Prometheus ``/api/v1/query_range`` answers (a matrix),
    concatenated, one per line, or in a JSON list, e.g. ``curl -sG URL/api/v1/query_range --data-urlencode
    query=gpufleet_spot_node_seconds_total -d start=... -d end=... -d step=1h``. The window defaults to the
    samples' first and last times."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise UsageError(f"--samples: cannot read {shown(path)} ({exc.strerror or exc.__class__.__name__})") from None
    fast = _fast_series(raw)
    series: list[tuple[dict[str, str], Any]] = []
    text = ""
    if fast is None:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InputError("samples", "is not UTF-8 text; export with /api/v1/query_range", source=path) from None
        del raw
    for i, doc in enumerate(_documents(text, path) if fast is None else []):
        data = doc.get("data") if isinstance(doc, Mapping) else None
        if not isinstance(data, Mapping) or data.get("resultType") != "matrix" or \
                not isinstance(data.get("result"), list):
            raise InputError(f"document {i + 1}", "is not a Prometheus query_range answer (data.resultType "
                                                  "matrix); export with /api/v1/query_range", source=path)
        for j, s in enumerate(data["result"]):
            metric, values = (s.get("metric"), s.get("values")) if isinstance(s, Mapping) else (None, None)
            if not isinstance(metric, Mapping) or not isinstance(values, list):
                raise InputError(f"document {i + 1} result[{j}]", "needs metric and values", source=path)
            series.append((dict(metric), values))
    times = [float(values[k][0]) for _, values in series if len(values) for k in (0, -1)]
    times += [t for s in fast or () for t in s[1:3] if not math.isnan(t)]
    if not times:
        raise InputError("samples", "holds no samples; export the gpufleet_* metrics over the window", source=path)
    lo = start.timestamp() if start else min(times)
    hi = end.timestamp() if end else max(times)
    hours: list[tuple[Mapping[str, str], float]] = []
    reclaims: list[tuple[Mapping[str, str], float]] = []
    by_name: dict[str, list[tuple[Mapping[str, str], float]]] = defaultdict(list)
    for j, (metric, values) in enumerate(_windowed(fast, raw, lo, hi) if fast is not None else series):
        try:
            inc = values if isinstance(values, float) else _increase(values, lo, hi)
        except (ValueError, TypeError, IndexError):
            raise InputError(f"series {j + 1} ({shown(metric.get('__name__'))})",
                             "values must be [time, \"number\"] pairs", source=path) from None
        name = metric.get("__name__", "")
        if name == NODE_SECONDS:
            hours.append((metric, inc / 3600.0))
        elif name == RECLAIMS:
            reclaims.append((metric, inc))
        else:
            by_name[name].append((metric, inc))
    speed = _speed_rows(_summed(by_name["gpufleet_trainer_tokens_total"]),
                        _summed(by_name["gpufleet_trainer_samples_total"]),
                        _summed(by_name["gpufleet_trainer_step_seconds_sum"], max))
    return Calibration(measured_from=dt.datetime.fromtimestamp(lo, dt.UTC),
                       measured_to=dt.datetime.fromtimestamp(hi, dt.UTC), spot=_spot_rows(hours, reclaims),
                       speed=speed)


def _fast_series(raw: bytes) -> list[tuple[dict[str, str], float, float, float, int, int]] | None:
    """The series of query_range answers read without the json module's object per sample pair: (labels, first
    time, last time, the counter's increase over all its samples, where its values' text starts and ends in
    ``raw``). A series' values are the quoted strings of its text (split on quotes, each parsed by float(), as
    the json path parses them), summed up at once and let go (memory stays one series deep); times are not
    parsed beyond each series' first and last (a time matters only where the window cuts a series: the caller
    then parses that series' text). None when the text is not in the shape Prometheus writes (then the json
    module reads it, slowly but surely)."""
    decoder = json.JSONDecoder()
    out: list[tuple[dict[str, str], float, float, float, int, int]] = []
    pos = 0
    try:
        while True:
            i = raw.find(b'"metric"', pos)
            if i < 0:
                break
            j = raw.find(b"{", i)
            k = raw.find(b'"values"', j)
            if j < 0 or k < 0:
                return None
            head = raw[j:k].decode("utf-8")
            metric, after = decoder.raw_decode(head, 0)
            if head[after:].strip(" \n\t\r,") != "" or not isinstance(metric, dict):
                return None
            start = raw.find(b"[", k) + 1
            end = raw.find(b"]]", start)
            if start <= 0 or end < 0 or raw[k + 8:start - 1].strip(b" \n\t\r:") != b"":
                return None
            chunk = raw[start:end + 1]
            if b"{" in chunk or b"metric" in chunk:
                return None
            pairs = chunk.count(b"[")
            parts = chunk.split(b'"')
            if len(parts) != 2 * pairs + 1:  # each pair holds one quoted value
                return None
            if pairs:
                first = chunk[chunk.index(b"[") + 1:chunk.index(b",")]
                last = chunk[chunk.rindex(b"[") + 1:chunk.rindex(b",")]
                t0, t1 = float(first), float(last)
            else:
                t0 = t1 = math.nan
            out.append(({str(a): str(b) for a, b in metric.items()}, t0, t1, _rise(list(map(float, parts[1::2]))),
                        start, end + 1))
            pos = end + 2
    except (ValueError, TypeError, UnicodeDecodeError):
        return None
    return out or None


def _windowed(fast: list[tuple[dict[str, str], float, float, float, int, int]], raw: bytes, lo: float,
              hi: float) -> Iterable[tuple[dict[str, str], Any]]:
    """(labels, increase or the samples) of each fast-read series: a series wholly inside [lo, hi] has its
    increase; one the window cuts has its text (``raw[start:end]``) read by the json module, times and all."""
    for metric, t0, t1, rise, start, end in fast:
        if math.isnan(t0) or (t0 >= lo and t1 <= hi):
            yield metric, rise
        else:
            try:
                yield metric, json.loads(b"[" + raw[start:end] + b"]")
            except ValueError:
                yield metric, None  # reported by the caller as the series' bad values


def _summed(rows: list[tuple[Mapping[str, str], float]],
            combine: Callable[[float, float], float] = lambda a, b: a + b) -> list[tuple[Mapping[str, str], float]]:
    acc: dict[tuple[str, ...], float] = {}
    labels: dict[tuple[str, ...], Mapping[str, str]] = {}
    for m, v in rows:
        k = _key(m, JOB_LABELS)
        acc[k] = v if k not in acc else combine(acc[k], v)
        labels[k] = m
    return [(labels[k], v) for k, v in acc.items()]


def _documents(text: str, path: str) -> list[Any]:
    stripped = text.lstrip()
    try:
        if stripped.startswith("["):
            doc = json.loads(stripped)
            return doc if isinstance(doc, list) else [doc]
        decoder = json.JSONDecoder()
        out: list[Any] = []
        i = 0
        while True:
            while i < len(text) and text[i].isspace():
                i += 1
            if i >= len(text):
                return out
            obj, i = decoder.raw_decode(text, i)
            out.append(obj)
    except ValueError as exc:
        raise InputError("samples", f"is not JSON ({exc.__class__.__name__}: {str(exc)[:80]}); export with "
                                    "/api/v1/query_range", source=path) from None


# ----------------------------------------------------------------------------- the command


def _when(text: str | None, flag: str) -> dt.datetime | None:
    if text is None:
        return None
    from placement.reservations import parse_time

    if not text.strip():
        raise UsageError(f"{flag}: is empty; give an ISO-8601 time such as 2026-11-20T00:00:00Z")
    return parse_time(text, flag, "", blank="")


def window(args: Any, now: dt.datetime, default_days: float = 30.0) -> tuple[dt.datetime | None, dt.datetime | None]:
    """(--from, --to), checked: not in the future, from before to, at most MAX_WINDOW_DAYS long."""
    start, end = _when(args.start, "--from"), _when(args.end, "--to")
    if end is not None and end > now:
        raise UsageError(f"--to: {end:%Y-%m-%dT%H:%M:%SZ} is in the future; give a time up to now, or leave it out")
    if start is not None and end is not None and start >= end:
        raise UsageError("--from: must be before --to")
    if start is not None and (end or now) - start > dt.timedelta(days=MAX_WINDOW_DAYS):
        raise UsageError(f"--from: the window is over {MAX_WINDOW_DAYS} days; give a later --from")
    return start, end


def run_calibrate(args: Any) -> int:
    """``placement calibrate``: 0 written, 1 nothing measured (nothing written) or Prometheus unreachable, 2 bad
    input."""
    import sys

    now = dt.datetime.now(dt.UTC)
    start, end = window(args, now)
    if args.prior_node_hours is not None and not 0 < args.prior_node_hours < math.inf:
        raise UsageError("--prior-node-hours: must be a positive number of node-hours")
    if not 0 < args.timeout < math.inf:
        raise UsageError("--timeout: must be a positive number of seconds")
    if args.prometheus:
        if urllib.parse.urlsplit(args.prometheus).scheme not in ("http", "https"):
            raise UsageError(f"--prometheus: {shown(args.prometheus)} is not an http(s) URL, e.g. "
                             "http://localhost:9090")
        end = end or now
        start = start or end - dt.timedelta(days=30)
        try:
            cal = from_prometheus(args.prometheus, start, end, timeout_s=args.timeout)
        except PromError as exc:
            print(f"placement: error: --prometheus: {exc}", file=sys.stderr)
            return 1
    else:
        cal = from_samples(args.samples, start, end)
        if cal.measured_to > now:
            raise InputError("samples", f"end at {cal.measured_to:%Y-%m-%dT%H:%M:%SZ}, in the future: refused; "
                                        "check the exporting machine's clock", source=args.samples)
    if args.prior_node_hours is not None:
        cal = Calibration(**{**cal.__dict__, "prior_node_hours": float(args.prior_node_hours)})
    if not (cal.spot or cal.speed or cal.checkpoint_write):
        print("placement: error: nothing measured in the window (no spot node-hours, trainer throughput or "
              "checkpoint writes); nothing written", file=sys.stderr)
        return 1
    path = Path(args.output) if args.output else default_output(now)
    write_calibration(cal, path)
    if args.json:
        from placement.calibration import calibration_doc

        sys.stdout.write(json.dumps({**calibration_doc(cal), "path": str(path)}, indent=2) + "\n")
    else:
        sys.stdout.write(f"wrote {path}: {len(cal.spot)} spot, {len(cal.speed)} speed and "
                         f"{len(cal.checkpoint_write)} checkpoint rows measured "
                         f"{cal.measured_from:%Y-%m-%dT%H:%M:%SZ} to {cal.measured_to:%Y-%m-%dT%H:%M:%SZ}\n")
    return 0
