"""Calibration speed (issue 26's benchmark targets) without a changed result: the cache of a large calibration
file gives back the rows it was given, a plan with it is the plan without it, the optimal checkpoint interval's
jump-started bisection gives the very float the full bisection gives, and a plan builds its chosen candidate once."""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import os
import random
from pathlib import Path

import pytest
from factories import job

import placement.files.calibrations as calibrations
import placement.prometheus.measurements as measurements
from placement.model.calibration import Calibration, SpeedRow, SpotColumns, SpotRow, calibrated_offers, calibration_text
from placement.model.catalog import embedded_catalog
from placement.model.physics import optimal_interval
from placement.plan.job import plan

T = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)


def big_calibration(rows: int = 3000) -> Calibration:
    """Rows on the embedded catalog's spot zones (a third zone-less, so region rows too) and made-up ones,
    duplicates included (the last row of a place wins), over the 64 KiB a cache entry needs."""
    rng = random.Random(5)
    real = sorted({(o.cloud, o.region, o.zone, o.shape.name) for o in embedded_catalog().offers
                   if o.spot_price is not None})
    out = []
    for i in range(rows):
        cloud, region, zone, itype = real[i % len(real)] if i % 2 else ("aws", f"r-{i % 7}", f"z-{i}", f"t-{i % 5}")
        out.append(SpotRow(cloud, region, zone if i % 3 else "", itype, node_hours=float(rng.randrange(1, 5000)),
                           reclaims=float(rng.randrange(0, 300))))
    return Calibration(measured_from=T - dt.timedelta(days=30), measured_to=T, spot=tuple(out),
                       speed=(SpeedRow("llm", "H100", 1, 3100.0, "tokens/s", 4),))


def test_a_cached_file_reads_back_the_same_rows_in_file_order(tmp_path: Path) -> None:
    want = big_calibration()
    path = tmp_path / "cal.json"
    path.write_text(calibration_text(want))
    assert path.stat().st_size >= calibrations.CACHE_MIN_BYTES
    first = calibrations.read_calibration(path)  # parsed, then remembered
    again = calibrations.read_calibration(path)  # from the cache entry
    assert isinstance(again.spot, SpotColumns) and not isinstance(first.spot, SpotColumns)
    assert len(again.spot) == len(want.spot)
    assert tuple(again.spot) == want.spot == first.spot
    assert again.speed == want.speed and again.measured_to == want.measured_to
    types = {"p5.48xlarge", "t-3", "nowhere"}
    assert again.spot.of_types(types) == [r for r in want.spot if r.instance_type in types]


def test_a_plan_with_the_cached_file_is_the_plan_with_the_parsed_one(tmp_path: Path) -> None:

    want = big_calibration()
    path = tmp_path / "cal.json"
    path.write_text(calibration_text(want))
    parsed = calibrations.read_calibration(path)
    cached = calibrations.read_calibration(path)
    assert isinstance(cached.spot, SpotColumns)
    j = job(gpus=64, hours=200)
    offers = embedded_catalog().offers
    a = calibrated_offers(parsed, offers, j.interruptions_per_hour, j.accelerators)
    b = calibrated_offers(cached, offers, j.interruptions_per_hour, j.accelerators)
    assert a == b and sum(o.calibrated_rate is not None for o in a) > 10
    pa, pb = plan(j, a), plan(j, b)
    assert [(c.offer, c.cost.total_usd, c.interruptions_per_hour) for c in pa.ranked] == \
        [(c.offer, c.cost.total_usd, c.interruptions_per_hour) for c in pb.ranked]


def test_a_damaged_cache_entry_is_read_past(tmp_path: Path) -> None:
    want = big_calibration()
    path = tmp_path / "cal.json"
    path.write_text(calibration_text(want))
    calibrations.read_calibration(path)
    entry = calibrations._cache_entry(str(path))
    assert entry is not None and entry[0].exists()
    import marshal

    key, payload = marshal.loads(entry[0].read_bytes())
    count, packed = payload[3]
    t = next(iter(packed))
    packed[t] = (packed[t][0] + "\0extra", *packed[t][1:])  # one more cloud than rows
    entry[0].write_bytes(marshal.dumps((key, (*payload[:3], (count, packed), *payload[4:]))))
    assert calibrations._cached(str(path), None) is None
    assert tuple(calibrations.read_calibration(path).spot) == want.spot


def _bisection(rate: float, write_h: float) -> float:
    """optimal_interval as it was: the full bisection from [0, 1] (the reference)."""
    k = rate * write_h
    if k < 1e-12:
        return math.sqrt(2.0 * write_h / rate)
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        try:
            f = math.expm1(mid + k) * (1.0 - mid) - mid
        except OverflowError:
            f = -1.0
        if f > 0:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return (lo + hi) / 2.0 / rate


def test_the_optimal_interval_is_the_full_bisections_float() -> None:
    rng = random.Random(26)
    cases = [(10 ** rng.uniform(-9, 4), 10 ** rng.uniform(-8, 3)) for _ in range(20_000)]
    cases += [(r, w) for r in (1e-6, 0.05, 0.8, 3.2, 51.2) for w in (1 / 3600, 1 / 60, 0.05, 0.25, 1.0, 5.0)]
    cases += [(1.0, k) for k in (1e-12, 2e-12, 0.5, 0.25, 0.125, 20.0, 20.000001, 700.0, 710.0)]
    for rate, write in cases:
        assert optimal_interval(rate, write) == _bisection(rate, write), (rate, write)


@pytest.mark.parametrize("rate, write", [(0.8, 1 / 60), (0.05, 0.5), (12.0, 0.01)])
def test_the_optimal_interval_meets_its_equation(rate: float, write: float) -> None:
    x, k = rate * optimal_interval(rate, write), rate * write
    assert math.exp(x + k) * (1 - x) == pytest.approx(1.0, rel=1e-9)


def test_a_plan_builds_its_chosen_candidate_once() -> None:

    p = plan(job(gpus=64, hours=200), embedded_catalog().offers)
    assert p.chosen is p.chosen is p.head(3)[0]
    assert p.head(3)[1] is p.head(2)[1]
    assert [c.offer for c in p.head(3)] == [c.offer for c in p.ranked[:3]]


@pytest.mark.parametrize("window", [None, (1000 + 20 * 3600, 1000 + 70 * 3600)])
def test_calibrate_reads_samples_without_numpy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               window: tuple[int, int] | None) -> None:
    """numpy is an optional extra (trainer), not a core dependency: calibrate --samples must not need it. The
    counts are the json path's, resets and NaN included."""
    import json
    import sys

    rng = random.Random(9)
    result = []
    for s in range(4):
        v, values = 0.0, []
        for i in range(100):
            v = 0.0 if i == 30 + s else v + rng.choice([0.0, 1.0, rng.uniform(0, 4e6)])
            values.append([1000 + i * 3600, "NaN" if i == 50 else rng.choice([repr(v), f"{v:.6g}", f"{v:e}"])])
        result.append({"metric": {"__name__": "gpufleet_spot_node_seconds_total", "worker": "w", "cloud": "aws",
                                  "region": "r", "zone": f"z{s}", "instance_type": "p5.48xlarge"},
                       "values": values})
    samples = tmp_path / "s.json"
    samples.write_text(json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}))
    monkeypatch.setitem(sys.modules, "numpy", None)  # import numpy raises ImportError
    start, end = (None, None) if window is None else (dt.datetime.fromtimestamp(w, dt.UTC) for w in window)
    fast = measurements.from_samples(str(samples), start, end)
    assert measurements._fast_series(samples.read_bytes()) is not None
    monkeypatch.setattr(measurements, "_fast_series", lambda raw: None)
    assert measurements.from_samples(str(samples), start, end) == fast and len(fast.spot) == 4


def test_a_counters_increase_is_its_rises_with_resets_counted_from_zero() -> None:
    assert measurements._rise([0.0, 5.0, 5.0, 2.0, 7.0, math.nan, 1.0, math.inf]) == 5.0 + 7.0 + 1.0
    assert measurements._rise([3.0]) == 0.0 and measurements._rise([]) == 0.0
    assert measurements._increase([[0, "1"], [10, "4"], [20, "2"], [30, "9"]], 5, 25) == (2.0, 10.0, 20.0)


def test_a_file_read_again_in_one_process_is_read_anew_once_it_changes(tmp_path: Path) -> None:
    want = big_calibration()
    path = tmp_path / "cal.json"
    path.write_text(calibration_text(want))
    calibrations.read_calibration(path)
    first = calibrations.read_calibration(path)
    assert calibrations.read_calibration(path) is first  # kept in this process: dispatch reads it every pass
    changed = dataclasses.replace(want, spot=(want.spot[0]._replace(reclaims=want.spot[0].reclaims + 1),
                                              *want.spot[1:]))
    text = calibration_text(changed)
    st = path.stat()
    path.write_text(text)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    again = calibrations.read_calibration(path)
    assert again is not first and tuple(again.spot) == changed.spot


def _quantile_bisection(q: float, shape: float, rate: float) -> float:
    """gamma_quantile as it was: P evaluated at every step of the bisection (the reference)."""
    from placement.model.gamma import _gamma_p

    mean = shape / rate
    lo, hi = 0.0, max(mean, 1e-300)
    while _gamma_p(shape, hi * rate) < q:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if _gamma_p(shape, mid * rate) < q:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-10 * hi:
            break
    return 0.5 * (lo + hi)


def test_the_gamma_quantile_is_the_full_bisections_float() -> None:
    from placement.model.gamma import _quantile_bracket, gamma_quantile

    rng = random.Random(90)
    cases = [(0.9, 0.05 * 100 + rng.randrange(0, 3000), 100 + rng.uniform(1, 20_000)) for _ in range(150)]
    cases += [(rng.uniform(0.01, 0.99), 10 ** rng.uniform(-3, 5), 10 ** rng.uniform(-3, 5)) for _ in range(150)]
    cases += [(0.9, 5.0, 100.0), (0.9, 0.05, 1.0), (0.9, 0.001, 1.0), (0.5, 1e5, 1e5), (0.99, 2.0, 1e-3)]
    confirmed = 0
    for q, shape, rate in cases:
        assert gamma_quantile.__wrapped__(q, shape, rate) == _quantile_bisection(q, shape, rate), (q, shape, rate)
        confirmed += _quantile_bracket(q, shape, rate) is not None
    assert confirmed > 0.9 * len(cases)  # the quick path, not the fallback, is what was compared


def _entry_rewritten(path: Path, change: str) -> Path:
    """The cache entry of ``path`` after another process rewrote it (same key): one reclaim count set to -1000, or
    replaced by a FIFO or by a link to /dev/zero."""
    import array
    import marshal

    calibrations.read_calibration(path)
    entry = calibrations._cache_entry(str(path))
    assert entry is not None and entry[0].exists()
    key, payload = marshal.loads(entry[0].read_bytes())
    if change == "reclaims -1000":
        count, packed = payload[3]
        t = next(iter(packed))
        reclaims = array.array("d", packed[t][4])
        reclaims[0] = -1000.0
        packed[t] = (*packed[t][:4], reclaims.tobytes(), packed[t][5])
        entry[0].write_bytes(marshal.dumps((key, (*payload[:3], (count, packed), *payload[4:]))))
    else:
        entry[0].unlink()
        if change == "a FIFO":
            os.mkfifo(entry[0])
        else:
            entry[0].symlink_to("/dev/zero")
    calibrations._RECENT.clear()  # another process: nothing remembered in memory
    return entry[0]


@pytest.mark.parametrize("change", ["reclaims -1000", "a FIFO", "a link to /dev/zero"])
def test_a_rewritten_or_replaced_cache_entry_is_never_trusted_nor_waited_on(tmp_path: Path, change: str) -> None:
    """Issue 38: an entry rewritten with the same key is checked by the file's own rules; a FIFO (which would
    block open()) or a link to /dev/zero (read whole, forever) is refused before a byte is read."""
    want = big_calibration()
    path = tmp_path / "cal.json"
    path.write_text(calibration_text(want))
    _entry_rewritten(path, change)
    assert calibrations._cached(str(path), None) is None  # returns at once, in every case
    got = calibrations.read_calibration(path)
    assert tuple(got.spot) == want.spot and min(r.reclaims for r in got.spot) >= 0
