"""plan-batch over time: the MILP against brute force, deadlines, windows, priorities, the burst example, bad input."""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import json
import math
import random
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from factories import job, offer, quotas, reservation

from placement.commands.main import main
from placement.plan.batch import _group, _needed, _total
from placement.plan.job import plan
from placement.plan.schedule import Grid, _engine_reservations, _window, earliest_hours, occupied, solve, starts

EXAMPLES = Path(__file__).resolve().parents[3] / "placement" / "examples"
NOW = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)


def _brute(jobs, offers, q, res, horizon, slot=1.0):
    """Every candidate row (unpruned) x every start for every job, lexicographic by priority tier, then cost."""
    g = Grid(NOW, horizon, slot)
    by_id = {r.id: r for r in res}
    choices = []
    for j in jobs:
        e = earliest_hours(j, g)
        p = plan(j, offers, q, reservations=_engine_reservations(res), now=NOW)
        opts = [None]
        for r in p.rows:
            rid = r[11].reservation.id if r[11].reservation is not None else None
            lo, hi = _window(by_id[rid] if rid else None, g)
            fields = SimpleNamespace(ready_h=r[15], start_min=lo, end_max=hi)  # what starts() reads
            for t in starts(fields, e, j.deadline_hours, g):
                cost = _total(r) + j.usd_per_hour_of_delay * (t - e)
                opts.append((r, t, cost))
        choices.append(opts)
    best = None
    tiers = sorted({j.priority_value for j in jobs}, reverse=True)
    for combo in itertools.product(*choices):
        used = defaultdict(float)
        ok = True
        for c in combo:
            if c is None:
                continue
            r, t, _ = c
            grp = _group(r)
            if grp is None:
                continue
            for s in occupied(t, r[15], slot):
                used[(grp, s)] += _needed(r)
                if used[(grp, s)] > r[11].headroom + 1e-9:
                    ok = False
        if not ok:
            continue
        key = (*(sum(1 for j, c in zip(jobs, combo, strict=True) if c is None and j.priority_value == p)
                 for p in tiers), sum(c[2] for c in combo if c is not None))
        if best is None or key < best:
            best = key
    return best


def _instance(seed):
    rng = random.Random(seed)
    east = offer("p5.48xlarge", "us-east-1", price=rng.choice([40, 50]), spot=None)
    west = offer("p5.48xlarge", "us-west-2", price=rng.choice([55, 70]), spot=None)
    q = quotas(("aws", "us-east-1", "L-417A185B", 192 * rng.choice([1, 2]), 0),
               ("aws", "us-west-2", "L-417A185B", 192, 0))
    jobs = []
    for i in range(rng.choice([3, 4])):
        fields = {"name": f"j{i}", "capacity": "any", "gpus": 8, "hours": rng.choice([2, 3, 5]),
                  "priority": rng.choice([100, 1000]), "usd_per_hour_of_delay": rng.choice([0, 1, 5])}
        if rng.random() < 0.5:
            fields["deadline_hours"] = rng.choice([6, 9, 12])
        if rng.random() < 0.4:
            fields["earliest_start"] = rng.choice([1, 2.5])
        jobs.append(job(**fields))
    res = []
    if rng.random() < 0.5:
        res.append(dataclasses.replace(reservation(count=1, rid="cb"), starts=NOW + dt.timedelta(hours=2),
                                       ends=NOW + dt.timedelta(hours=10)))
    return jobs, [east, west], q, res


@pytest.mark.parametrize("generate", [False, True], ids=["every-column", "column-generation"])
@pytest.mark.parametrize("seed", range(12))
def test_milp_cost_equals_brute_force_over_every_start_and_candidate(seed, generate):
    jobs, offers, q, res = _instance(seed)
    s = solve(jobs, offers, q, reservations=res, now=NOW, horizon_h=12, slot_h=1, generate=generate)
    best = _brute(jobs, offers, q, res, 12)
    tiers = sorted({j.priority_value for j in jobs}, reverse=True)
    got = (*(sum(1 for x in s.jobs if x.candidate is None and x.job.priority_value == p) for p in tiers),)
    assert got == best[:-1]  # as many placed in every priority tier
    assert math.isclose(s.total_usd, best[-1], rel_tol=1e-6, abs_tol=1e-6)
    for x in s.jobs:  # deadline and window rules
        if x.candidate is None:
            continue
        assert x.start_h >= x.earliest_h - 1e-9
        if x.job.deadline_hours is not None:
            assert x.end_h <= x.job.deadline_hours + 1e-9
        r = x.candidate.reservation
        if r is not None:
            assert x.start_h >= (r.starts - NOW).total_seconds() / 3600 - 1e-9
            assert x.end_h <= (r.ends - NOW).total_seconds() / 3600 + 1e-9
    for grp, used in s.usage.items():  # never over quota in any slot
        assert all(u <= h + 1e-9 for u, h in zip(used, s.headroom[grp], strict=True))


def test_a_higher_tier_is_never_left_out_for_lower_ones():
    east = offer("p5.48xlarge", "us-east-1", price=50, spot=None)
    q = quotas(("aws", "us-east-1", "L-417A185B", 192, 0))
    low = [job(name=f"low{i}", capacity="on-demand", hours=2, priority=100, deadline_hours=4) for i in range(2)]
    high = job(name="high", capacity="on-demand", hours=3, priority=1000, deadline_hours=4)
    s = solve([*low, high], [east], q, now=NOW, horizon_h=12)
    placed = {x.job.name for x in s.jobs if x.candidate is not None}
    assert "high" in placed and len(placed) == 1  # two low jobs would fit, but not beside the high one


def test_a_reservation_is_used_only_inside_its_window():
    r = dataclasses.replace(reservation(count=1, rid="cb"), starts=NOW + dt.timedelta(hours=5),
                            ends=NOW + dt.timedelta(hours=20))
    j = job(name="a", capacity="reserved", hours=4)
    s = solve([j], [], None, reservations=[r], now=NOW, horizon_h=24)
    x = s.jobs[0]
    assert x.candidate is not None and x.start_h == 5 and x.end_h <= 20


def test_burst_example_runs_the_sweep_after_the_lora_job_and_saves_what_all_at_once_paid(capsys):
    code = main(["plan-batch", str(EXAMPLES / "burst.yaml"), "--quotas", str(EXAMPLES / "burst-quotas.csv"),
                 "--now", "2026-11-30T00:00:00Z", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    jobs = {j["job"]: j for j in doc["jobs"]}
    lora, sweep = jobs["lora-70b"], jobs["eval-sweep"]
    assert sweep["chosen"]["region"] == lora["chosen"]["region"] == "us-west-2"
    assert sweep["start_hours"] >= lora["end_hours"]
    assert doc["schedule"]["saved_usd"] > 0
    assert math.isclose(doc["schedule"]["saved_usd"], doc["schedule"]["all_at_once"]["total_usd"] - doc["total_usd"],
                        abs_tol=0.02)
    code = main(["plan-batch", str(EXAMPLES / "burst.yaml"), "--quotas", str(EXAMPLES / "burst-quotas.csv"),
                 "--now", "2026-11-30T00:00:00Z", "--json", "--no-schedule", "--no-greedy"])
    at_once = json.loads(capsys.readouterr().out)
    moved = {j["job"]: j for j in at_once["jobs"]}["eval-sweep"]
    assert moved["chosen"]["region"] != "us-west-2"  # all at once, the sweep is pushed elsewhere
    assert "schedule" not in at_once


def test_text_has_the_schedule_and_usage_bars_and_the_chart_is_a_png(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "g.png"
    code = main(["plan-batch", str(EXAMPLES / "burst.yaml"), "--quotas", str(EXAMPLES / "burst-quotas.csv"),
                 "--now", "2026-11-30T00:00:00Z", "--chart", str(png)])
    out = capsys.readouterr().out
    assert code == 0
    assert "start h" in out and "usage per quota key" in out and "scheduling saves $" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _bad(capsys, tmp_path, batch, *extra):
    path = tmp_path / "b.yaml"
    path.write_text(yaml.safe_dump(batch))
    code = main(["plan-batch", str(path), "--now", "2026-12-01T00:00:00Z", *extra])
    out, err = capsys.readouterr()
    return code, out, err


BASE = {"name": "a", "accelerator": "H100", "gpus": 8, "hours": 2}


@pytest.mark.parametrize(("jobs", "extra", "field"), [
    ([{**BASE, "earliest_start": 30, "deadline_hours": 24}], [], "jobs[0].earliest_start"),
    ([{**BASE, "earliest_start": "2026-12-03T00:00:00Z", "deadline_hours": 24}], [], "jobs[0].earliest_start"),
    ([{**BASE, "earliest_start": "next tuesday"}], [], "jobs[a].earliest_start"),  # parsed: named by the job
    ([BASE], ["--horizon-hours", "9000"], "--horizon-hours"),
    ([BASE], ["--slot-hours", "0"], "--slot-hours"),
])
def test_bad_schedule_input_is_one_line_naming_the_field(capsys, tmp_path, jobs, extra, field):
    code, out, err = _bad(capsys, tmp_path, {"jobs": jobs}, *extra)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and field in err and "Traceback" not in err


def test_a_reservation_window_in_the_past_is_refused(capsys, tmp_path):
    res = tmp_path / "r.csv"
    res.write_text("cloud,region,zone,instance_type,count,usd_per_hour,ends,starts,id\n"
                   "aws,us-east-1,use1-az4,p5.48xlarge,2,0,2026-11-20T00:00:00Z,2026-11-10T00:00:00Z,cb-1\n")
    code, out, err = _bad(capsys, tmp_path, {"jobs": [BASE]}, "--reservations", str(res))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "ends" in err and "cb-1" in err


def test_a_plan_now_cannot_use_a_reservation_whose_window_starts_later_but_a_schedule_waits_for_it():
    r = dataclasses.replace(reservation(count=1, rid="cb"), starts=NOW + dt.timedelta(hours=3))
    j = job(name="a", capacity="reserved", hours=4)
    now_plan = plan(j, [], None, reservations=[r], now=NOW)
    assert not now_plan.rows and "starts" in (now_plan.excluded[0].excluded or "")
    s = solve([j], [], None, reservations=[r], now=NOW, horizon_h=24)
    assert s.jobs[0].start_h == 3


def test_the_reservations_file_reads_an_optional_starts_column():
    from placement.model.reservations import parse_reservations_csv

    (r,) = parse_reservations_csv("cloud,region,zone,instance_type,count,usd_per_hour,ends,starts,id\n"
                                  "aws,us-east-1,use1-az4,p5.48xlarge,2,0,2026-12-10T00:00:00Z,2026-12-03,cb-1\n",
                                  "r.csv")
    assert r.starts == dt.datetime(2026, 12, 3, tzinfo=dt.UTC) and r.window[1] == dt.datetime(2026, 12, 10,
                                                                                             tzinfo=dt.UTC)


def _starts_by_definition(o: SimpleNamespace, earliest: float, deadline: float | None, g: Grid) -> list[float]:
    """The module doc's definition, one candidate start at a time: the earliest start and every slot boundary
    after it before the horizon's end, kept when the run ends by its deadline and inside its window."""
    lo = max(earliest, o.start_min)
    end_by = min(math.inf if deadline is None else deadline, o.end_max)
    out = [lo] if lo < g.horizon_h else []
    k = math.floor(lo / g.slot_h + 1e-9) + 1
    while k * g.slot_h < g.horizon_h - 1e-9:
        out.append(k * g.slot_h)
        k += 1
    return [t for t in out if t + o.ready_h <= end_by + 1e-9]


def test_starts_are_every_boundary_that_ends_in_time() -> None:
    """starts() works out its last slot boundary arithmetically: the same starts as the definition, to the float,
    at awkward slots (1/3 h, 0.1 h), horizons that are and are not whole slots, deadlines and windows on a
    boundary and just off it."""
    rng = random.Random(11)
    for _ in range(3000):
        slot = rng.choice([1.0, 0.5, 1 / 3, 0.1, 2.0, 24.0, 7.3])
        g = Grid(NOW, rng.choice([168.0, 10.0, 5.5, slot * rng.randint(1, 40)]), slot)
        o = SimpleNamespace(ready_h=rng.choice([0.5, 2.7, 8.0, rng.uniform(0, 100), slot * rng.randint(1, 8)]),
                            start_min=rng.choice([0.0, 3.0, rng.uniform(0, 30), slot * rng.randint(0, 8)]),
                            end_max=rng.choice([math.inf, 50.0, rng.uniform(0, 120), slot * rng.randint(0, 60)]))
        e = rng.choice([0.0, 2.5, rng.uniform(0, 60), slot * rng.randint(0, 20)])
        d = rng.choice([None, 24.0, rng.uniform(0, 200), slot * rng.randint(0, 100)])
        assert starts(o, e, d, g) == _starts_by_definition(o, e, d, g), (slot, g.horizon_h, o, e, d)  # type: ignore[arg-type]
