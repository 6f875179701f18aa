"""The fleet's measurements as calibration rows: from a Prometheus server (``placement calibrate --prometheus``) or
from a file of exported samples (``--samples``).

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

import datetime as dt
import itertools
import json
import math
import operator
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from placement.errors import InputError, shown
from placement.model.calibration import (
    Calibration,
    CheckpointRow,
    SpeedRow,
    SpotRow,
)
from placement.prometheus.client import finite, query

NODE_SECONDS = "gpufleet_spot_node_seconds_total"
RECLAIMS = "gpufleet_spot_reclaims_total"
SPOT_LABELS = ("cloud", "region", "zone", "instance_type")
JOB_LABELS = ("job", "workload", "accelerator", "nodes", "gpus")




def from_prometheus(url: str, start: dt.datetime, end: dt.datetime, *,
                    timeout_s: float = 10.0) -> tuple[Calibration, list[str]]:
    """A calibration from a Prometheus server's metrics over [start, end], and one warning per query whose answer
    held samples that were left out (malformed). The calibration's window is the samples' own: from the first
    sample of the fleet's metrics in [start, end] to the last (to within a thousandth of the window), never the
    window asked for when the data covers less of it."""
    seconds = max(1, int((end - start).total_seconds()))
    window = f"{seconds}s"
    step = f"{max(1, seconds // 1000)}s"  # subqueries: a thousand evaluations over the window
    warnings: list[str] = []

    def q(what: str, promql: str) -> list[tuple[dict[str, str], float]]:
        answer = query(url, promql, end, timeout_s=timeout_s)
        if answer.dropped:
            warnings.append(f"--prometheus: {what}: left out {answer.dropped_text()}")
        return finite(answer)

    by = ", ".join(SPOT_LABELS)
    hours = q("spot node-hours", f"sum by ({by}) (increase({NODE_SECONDS}[{window}]))")
    reclaims = q("spot reclaims", f"sum by ({by}) (increase({RECLAIMS}[{window}]))")
    spot = _spot_rows(((m, v / 3600.0) for m, v in hours), reclaims)
    jl = ", ".join(JOB_LABELS)
    tokens = q("trainer tokens", f"sum by ({jl}) (increase(gpufleet_trainer_tokens_total[{window}]))")
    samples = q("trainer samples", f"sum by ({jl}) (increase(gpufleet_trainer_samples_total[{window}]))")
    steps = q("trainer step seconds", f"max by ({jl}) (increase(gpufleet_trainer_step_seconds_sum[{window}]))")
    labels: list[str] = []
    speed = _speed_rows(tokens, samples, steps, labels)
    warnings += [f"--prometheus: {line}" for line in labels]
    ck_by = "destination, tier"
    w_sum = q("checkpoint write seconds",
              f"sum by ({ck_by}) (increase(gpufleet_trainer_checkpoint_write_seconds_sum[{window}]))")
    w_count = q("checkpoint writes",
                f"sum by ({ck_by}) (increase(gpufleet_trainer_checkpoint_write_seconds_count[{window}]))")
    # The size gauge reads 0 until a job's first checkpoint: only the samples after it are a checkpoint's size.
    size = q("checkpoint bytes",
             f"avg by ({ck_by}) (avg_over_time((gpufleet_trainer_checkpoint_bytes > 0)[{window}:{step}]))")
    ckpt = _checkpoint_rows(w_sum, w_count, size)
    first, last = start, end
    if spot or speed or ckpt:
        series = "{__name__=~\"" + "|".join(MEASURED) + "\"}"
        lo = q("first sample", f"min(min_over_time(timestamp({series})[{window}:{step}]))")
        hi = q("last sample", f"max(max_over_time(timestamp({series})[{window}:{step}]))")
        first = max(start, _stamp_or(lo, start))
        last = max(first, min(end, _stamp_or(hi, end)))
    return Calibration(measured_from=first, measured_to=last, spot=spot, speed=speed,
                       checkpoint_write=ckpt), warnings


MAX_TIMESTAMP = 253_402_300_799.0  # 9999-12-31T23:59:59Z: the last second a datetime holds


# The series whose samples a calibration measures: their first and last times are its window.
MEASURED = (NODE_SECONDS, "gpufleet_trainer_step_seconds_count", "gpufleet_trainer_checkpoint_write_seconds_count")


def _stamp_or(answer: list[tuple[dict[str, str], float]], default: dt.datetime) -> dt.datetime:
    """The time of a ``timestamp()`` query's one sample (Unix seconds), or ``default``."""
    for _, v in answer:
        if 0 < v < MAX_TIMESTAMP:
            return dt.datetime.fromtimestamp(v, dt.UTC)
    return default


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


def _speed_rows(tokens: Sequence[tuple[Mapping[str, str], float]], samples: Sequence[tuple[Mapping[str, str], float]],
                steps: Sequence[tuple[Mapping[str, str], float]],
                problems: list[str] | None = None) -> tuple[SpeedRow, ...]:
    """Measured per-GPU speed rows; a run whose ``nodes`` or ``gpus`` label is no whole count is left out and,
    when ``problems`` is given, named there (job and label)."""
    secs = {_key(m, JOB_LABELS): v for m, v in steps}
    tok = {_key(m, JOB_LABELS): v for m, v in tokens}
    smp = {_key(m, JOB_LABELS): v for m, v in samples}
    per: dict[tuple[str, str, int, str], list[float]] = defaultdict(list)
    for key, s in secs.items():
        _job, workload, accel, nodes, gpus = key
        n, g = _count(nodes), _count(gpus)
        if (n is None or g is None) and problems is not None:
            label, text = ("nodes", nodes) if n is None else ("gpus", gpus)
            problems.append(f"job {shown(_job)}: label {label}={shown(text)} is not a whole number from 1 to "
                            f"100,000 (a count the trainer labels its metrics with); its speed is left out")
        if n is None or g is None or not s > 0 or not workload or not accel:
            continue
        amount, unit = (tok[key], "tokens/s") if tok.get(key, 0.0) > 0 else (smp.get(key, 0.0), "samples/s")
        if not 0 < amount < math.inf:
            continue
        per[(workload, accel, n, unit)].append(amount / s / g)
    return tuple(SpeedRow(workload=w, accelerator=a, nodes=n, per_gpu=round(statistics.median(v), 6), unit=u,
                          runs=len(v)) for (w, a, n, u), v in sorted(per.items()))


def _count(label: str) -> int | None:
    """A ``nodes`` or ``gpus`` label as a whole number from 1 to 100,000, else None."""
    try:
        n = float(label)
    except ValueError:
        return None
    return int(n) if n.is_integer() and 1 <= n <= 100_000 else None


def _checkpoint_rows(sums: Sequence[tuple[Mapping[str, str], float]], counts: Sequence[tuple[Mapping[str, str], float]],
                     size: Sequence[tuple[Mapping[str, str], float]]) -> tuple[CheckpointRow, ...]:
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
        rows.append(CheckpointRow(destination=key[0], tier=tier if tier and 0 < tier < math.inf else None,
                                  gb=round(gb[key], 6), seconds=round(total[key] / n, 6), runs=runs))
    return tuple(sorted(rows, key=lambda r: (r.destination, r.tier or 0.0)))


def _increase(values: Any, lo: float, hi: float) -> tuple[float, float, float]:
    """(a counter's increase over the samples in [lo, hi] (seconds), the first and the last of their times; NaN
    times when none is inside): the sum of its rises, a drop being a reset (the value after it counts from 0).
    Samples outside the window are ignored; no extrapolation. ``values``: ``[[t, "v"], ...]`` (times and values as
    JSON numbers or strings). A time that is not a Unix time (:func:`sample_time`) is a ValueError."""
    kept = []
    first = last = math.nan
    for t, v in values:
        t, v = sample_time(t), float(v)
        if lo <= t <= hi:
            kept.append(v)
            first = t if first != first else first
            last = t
    return _rise(kept), first, last


def sample_time(value: Any) -> float:
    """A sample's time as Unix seconds: a finite number between 1970 and the year 9999, else ValueError."""
    t = float(value) if not isinstance(value, bool) else math.nan  # true is no time, though float(True) is 1
    if not 0.0 <= t <= MAX_TIMESTAMP:
        raise ValueError(f"sample time {shown(value)} is not a Unix time between 1970 and 9999")
    return t


def _rise(v: list[float]) -> float:
    """The sum of a counter's rises over values ``v`` (in time order), a drop being a reset (the value after it
    counts from 0); non-finite values are skipped. Written as last - first + the value before each drop (the
    same sum, telescoped), exactly rounded (math.fsum): one comparison per sample in C-speed iteration."""
    if not math.isfinite(sum(v)):  # a NaN or an infinity among them (or an overflow): keep the finite ones
        v = [x for x in v if math.isfinite(x)]
    if len(v) < 2:
        return 0.0
    drops = list(itertools.compress(v, map(operator.gt, v, itertools.islice(v, 1, None))))  # a > the next
    try:
        return math.fsum([v[-1], -v[0], *drops])
    except OverflowError:  # values near a float's limit: no counter of ours; left out as a non-finite increase
        return math.inf


def from_samples(path: str, start: dt.datetime | None, end: dt.datetime | None) -> Calibration:
    """A calibration from exported samples: one or more Prometheus ``/api/v1/query_range`` answers (a matrix),
    concatenated, one per line, or in a JSON list, e.g. ``curl -sG URL/api/v1/query_range --data-urlencode
    query=gpufleet_spot_node_seconds_total -d start=... -d end=... -d step=1h``. The window defaults to the
    samples' first and last times."""
    from placement.files.readers import read_bytes

    raw = read_bytes(path, "--samples", MAX_SAMPLES_BYTES)
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
            series.append(({str(k): str(v) for k, v in metric.items()}, values))

    def bad(j: int, metric: Mapping[str, str], why: str) -> InputError:
        return InputError(f"series {j + 1} ({shown(metric.get('__name__'))})",
                          f"{why}; values must be [unix time, \"number\"] pairs (export with /api/v1/query_range)",
                          source=path)

    times: list[float] = []
    for j, (metric, values) in enumerate(series):
        try:
            times += [sample_time(values[k][0]) for k in (0, -1)] if values else []
        except (ValueError, TypeError, IndexError, KeyError) as exc:
            raise bad(j, metric, str(exc) if isinstance(exc, ValueError) and "sample time" in str(exc)
                      else "a sample is not a pair") from None
    for j, (metric, t0, t1, *_) in enumerate(fast or ()):
        if not math.isnan(t0):
            try:
                times += [sample_time(t0), sample_time(t1)]
            except ValueError as exc:
                raise bad(j, metric, str(exc)) from None
    if not times:
        raise InputError("samples", "holds no samples; export the gpufleet_* metrics over the window", source=path)
    lo = start.timestamp() if start else min(times)
    hi = end.timestamp() if end else max(times)
    hours: list[tuple[Mapping[str, str], float]] = []
    reclaims: list[tuple[Mapping[str, str], float]] = []
    by_name: dict[str, list[tuple[Mapping[str, str], float]]] = defaultdict(list)
    first, last = math.inf, -math.inf  # the samples' own times inside the window
    for j, (metric, values) in enumerate(_windowed(fast, raw, lo, hi) if fast is not None else series):
        try:
            inc, t0, t1 = values if isinstance(values, tuple) else _increase(values, lo, hi)
        except (ValueError, TypeError, IndexError) as exc:
            why = str(exc) if isinstance(exc, ValueError) and "sample time" in str(exc) else "a value is not a number"
            raise bad(j, metric, why) from None
        if t0 == t0:
            first, last = min(first, t0), max(last, t1)
        if not math.isfinite(inc):
            continue
        name = metric.get("__name__", "")
        if name == NODE_SECONDS:
            hours.append((metric, inc / 3600.0))
        elif name == RECLAIMS:
            reclaims.append((metric, inc))
        else:
            by_name[name].append((metric, inc))
    if first > last:
        raise InputError("samples", f"holds no samples between {_iso(lo)} and {_iso(hi)} (--from/--to); widen the "
                                    "window or export the metrics over it", source=path)
    labels: list[str] = []
    speed = _speed_rows(_summed(by_name["gpufleet_trainer_tokens_total"]),
                        _summed(by_name["gpufleet_trainer_samples_total"]),
                        _summed(by_name["gpufleet_trainer_step_seconds_sum"], max), labels)
    if labels:
        raise InputError("samples", f"{labels[0].replace('; its speed is left out', '')}; fix the label or drop "
                                    "the series from the export", source=path)
    return Calibration(measured_from=dt.datetime.fromtimestamp(first, dt.UTC),
                       measured_to=dt.datetime.fromtimestamp(last, dt.UTC), spot=_spot_rows(hours, reclaims),
                       speed=speed)


MAX_SAMPLES_BYTES = 512 * 2**20  # an export of 90 days of a 40-worker fleet, hourly, is about 83 MB


def _iso(t: float) -> str:
    return f"{dt.datetime.fromtimestamp(t, dt.UTC):%Y-%m-%dT%H:%M:%SZ}"


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
                if t0 != t0 or t1 != t1:  # a NaN time (NaN marks a series without samples here): the json path
                    return None
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
    """(labels, (increase, first time, last time) or the samples) of each fast-read series: a series wholly
    inside [lo, hi] has its increase; one the window cuts has its text (``raw[start:end]``) read by the json
    module, times and all."""
    for metric, t0, t1, rise, start, end in fast:
        if math.isnan(t0) or (t0 >= lo and t1 <= hi):
            yield metric, (rise, t0, t1)
        else:
            try:
                yield metric, json.loads(b"[" + raw[start:end] + b"]")
            except (ValueError, RecursionError):
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
    except (ValueError, RecursionError) as exc:  # RecursionError: arrays nested past the parser's depth
        raise InputError("samples", f"is not JSON ({exc.__class__.__name__}: {str(exc)[:80]}); export with "
                                    "/api/v1/query_range", source=path) from None
