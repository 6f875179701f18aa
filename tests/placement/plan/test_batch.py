"""Joint placement: never over quota, at least as good as greedy, strictly better when contended."""

from __future__ import annotations

from collections import defaultdict

from factories import job, offer, quotas, reservation
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.plan.batch import greedy, solve


def _used(result):
    used = defaultdict(float)
    for a in result.assignments:
        if a.candidate and a.candidate.quota_group:
            used[a.candidate.quota_group] += a.candidate.quota.needed
    return used


def _room(c, q):
    """Headroom of a candidate's group: a quota row, or its reservation's free nodes."""
    return c.quota.headroom if c.reservation is not None else q.get(*c.quota_group).headroom


def test_beats_greedy_when_first_job_takes_the_cheap_region():
    # One cheap region with room for one 8-GPU job. Job A is indifferent (a cheap second choice); job B
    # has a big dataset in the cheap region, so moving B elsewhere costs a lot. Greedy gives the cheap
    # region to A (first in line); the MILP gives it to B.
    east = offer("p5.48xlarge", "us-east-1", price=50)
    west = offer("p5.48xlarge", "us-west-2", price=51)
    q = quotas(("aws", "us-east-1", "L-417A185B", 192, 0), ("aws", "us-west-2", "L-417A185B", 384, 0))
    a = job(name="a", capacity="on-demand")
    b = job(
        name="b", capacity="on-demand", data={"dataset": {"uri": "s3://x/y", "size_gb": 5000, "region": "us-east-1"}}
    )
    g = greedy([a, b], [east, west], q)
    m = solve([a, b], [east, west], q)
    assert [x.candidate.offer.region for x in g.assignments] == ["us-east-1", "us-west-2"]
    assert [x.candidate.offer.region for x in m.assignments] == ["us-west-2", "us-east-1"]
    assert m.total_usd < g.total_usd
    assert m.status == "Optimal"


def test_reports_unplaceable_when_quota_runs_out():
    east = offer("p5.48xlarge", "us-east-1", price=50)
    q = quotas(("aws", "us-east-1", "L-417A185B", 192, 0))
    jobs = [job(name=f"j{i}", capacity="on-demand") for i in range(3)]
    m = solve(jobs, [east], q)
    assert m.placed == 1
    assert sum(1 for a in m.assignments if a.candidate is None and a.reason) == 2


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 24), st.sampled_from(["spot", "on-demand", "any"])), min_size=1, max_size=8),
    st.lists(st.integers(0, 600), min_size=4, max_size=4),
)
def test_never_exceeds_headroom_and_never_worse_than_greedy(specs, limits):
    offers = [
        offer("p5.48xlarge", "us-east-1", price=55, spot=20),
        offer("p5.48xlarge", "us-west-2", price=50, spot=25),
        offer("a3-megagpu-8g", "us-central1", price=90, spot=40),
    ]
    q = quotas(
        ("aws", "us-east-1", "L-417A185B", limits[0], 0),
        ("aws", "us-east-1", "L-C4BD4855", limits[1], 0),
        ("aws", "us-west-2", "L-417A185B", limits[2], 0),
        ("gcp", "us-central1", "NVIDIA_H100_MEGA_GPUS", limits[3] // 8, 0),
    )
    jobs = [job(name=f"j{i}", gpus=g, capacity=c) for i, (g, c) in enumerate(specs)]
    m = solve(jobs, offers, q)
    g = greedy(jobs, offers, q)
    for group, used in _used(m).items():
        assert used <= q.get(*group).headroom
    # lexicographic objective: most jobs placed, then fewest on quota-unknown candidates, then cost
    assert m.placed >= g.placed
    if m.placed == g.placed:
        assert _unknown(m) <= _unknown(g)
        if _unknown(m) == _unknown(g):
            assert m.total_usd <= g.total_usd + 1e-6


def _unknown(result):
    return sum(1 for a in result.assignments if a.candidate and a.candidate.quota_group is None)


def _quota_feasible(jobs, offers, q, res=()):
    """Every assignment (a candidate or None per job) whose quota use fits, by enumeration."""
    import itertools

    from placement.plan.job import plan

    options = [[None, *plan(j, offers, q, reservations=res).ranked] for j in jobs]
    for combo in itertools.product(*options):
        used = defaultdict(float)
        ok = True
        for c in combo:
            if c is not None and c.quota_group:
                used[c.quota_group] += c.quota.needed
                ok = ok and used[c.quota_group] <= _room(c, q)
        if ok:
            yield combo


def _brute_force(jobs, offers, q, res=()):
    """Best (most placed, fewest quota-unknown, least cost) over every assignment, by enumeration."""
    best = None
    for combo in _quota_feasible(jobs, offers, q, res):
        placed = [c for c in combo if c is not None]
        key = (-len(placed), sum(1 for c in placed if c.quota_group is None), sum(c.cost.total_usd for c in placed))
        best = key if best is None or key < best else best
    return best


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([8, 16]),
            st.sampled_from(["spot", "on-demand"]),
            st.sampled_from(["us-east-1", "us-west-2"]),
        ),
        min_size=1,
        max_size=4,
    ),
    st.lists(st.integers(0, 4), min_size=3, max_size=3),
    st.integers(0, 3),
)
def test_matches_brute_force_optimum(specs, nodes, reserved):
    offers = [
        offer("p5.48xlarge", "us-east-1", price=55, spot=20),
        offer("p5.48xlarge", "us-west-2", price=50, spot=25),
    ]
    q = quotas(
        ("aws", "us-east-1", "L-417A185B", 192 * nodes[0], 0),
        ("aws", "us-east-1", "L-C4BD4855", 192 * nodes[1], 0),
        ("aws", "us-west-2", "L-417A185B", 192 * nodes[2], 0),
    )
    data = lambda region: {"dataset": {"uri": "s3://b/d", "size_gb": 3000, "region": region}}  # noqa: E731
    caps = {"spot": "spot", "on-demand": "any"}  # "any" also takes the reservation
    jobs = [job(name=f"j{i}", gpus=g, capacity=caps[c], data=data(r)) for i, (g, c, r) in enumerate(specs)]
    res = [reservation(region="us-west-2", zone="usw2-az1", count=reserved, usd_per_hour=30)] if reserved else []
    m = solve(jobs, offers, q, reservations=res)
    want = _brute_force(jobs, offers, q, res)
    assert m.placed == -want[0]
    assert _unknown(m) == want[1]
    assert abs(m.total_usd - want[2]) <= 1e-4 * max(want[2], 1.0) + 1e-6


def test_identical_jobs_earlier_in_the_file_win():
    # Room for two 8-GPU jobs in the cheap region and two in the dear one; six identical jobs.
    cheap = offer("p5.48xlarge", "us-east-1", price=50)
    dear = offer("p5.48xlarge", "us-west-2", price=70)
    q = quotas(("aws", "us-east-1", "L-417A185B", 384, 0), ("aws", "us-west-2", "L-417A185B", 384, 0))
    jobs = [job(name=f"j{i}", capacity="on-demand", team=f"team-{i}") for i in range(6)]
    for result in (solve(jobs, [cheap, dear], q), greedy(jobs, [cheap, dear], q)):
        regions = [a.candidate.offer.region if a.candidate else None for a in result.assignments]
        assert regions == ["us-east-1", "us-east-1", "us-west-2", "us-west-2", None, None]


def test_a_reservation_is_shared_across_the_burst():
    od = offer("p5.48xlarge", "us-east-1", zone="use1-az1", price=50, spot=None)
    r = reservation(count=2, usd_per_hour=0)
    jobs = [job(name=f"j{i}", capacity="any") for i in range(3)]
    for result in (solve(jobs, [od], reservations=[r]), greedy(jobs, [od], reservations=[r])):
        kinds = [a.candidate.capacity for a in result.assignments]
        assert sorted(kinds) == ["on-demand", "reserved", "reserved"]
        assert result.quota_used[("aws", "us-east-1", "reservation:r1")] == 2
        assert result.total_usd == 50 * 10


def _greedy_over_every_candidate(jobs, offers, q):
    """The greedy rule applied to each job's full ranked candidate list (what pruning must not change)."""
    from placement.plan.job import plan

    used = defaultdict(float)
    picks = []
    for j in jobs:
        chosen = None
        for c in plan(j, offers, q).ranked:
            g = c.quota_group if c.quota.headroom is not None else None
            if g is None or used[g] + c.quota.needed <= c.quota.headroom:
                chosen = c
                break
        if chosen is not None and chosen.quota.headroom is not None:
            used[chosen.quota_group] += chosen.quota.needed
        picks.append(None if chosen is None else (chosen.offer, chosen.capacity))
    return picks


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 24), st.sampled_from(["spot", "on-demand", "any"])), min_size=1, max_size=8),
       st.lists(st.integers(0, 600), min_size=4, max_size=4))
def test_greedy_on_pruned_options_picks_what_greedy_on_every_candidate_picks(specs, limits):
    offers = [offer("p5.48xlarge", r, zone=f"{r}-{z}", price=p, spot=p / 3)
              for r, p in (("us-east-1", 50), ("us-west-2", 55)) for z in ("a", "b")]
    q = quotas(*[("aws", r, k, lim, 0) for (r, k), lim in zip(
        [("us-east-1", "L-417A185B"), ("us-east-1", "L-C4BD4855"), ("us-west-2", "L-417A185B"),
         ("us-west-2", "L-C4BD4855")], limits, strict=True)])
    jobs = [job(name=f"j{i}", gpus=g, capacity=cap) for i, (g, cap) in enumerate(specs)]
    got = [None if a.candidate is None else (a.candidate.offer, a.candidate.capacity)
           for a in greedy(jobs, offers, q).assignments]
    assert got == _greedy_over_every_candidate(jobs, offers, q)


def test_candidates_are_generated_once_per_distinct_job_for_the_whole_command(tmp_path, monkeypatch, capsys):
    import yaml

    import placement.plan.batch as batch
    from placement.commands.main import main

    calls = []
    real = batch.plan

    def counting(job, *a, **k):
        calls.append(job.name)
        return real(job, *a, **k)

    monkeypatch.setattr(batch, "plan", counting)
    spec = {"accelerator": "H100", "gpus": 8, "hours": 4, "capacity": "on-demand"}
    doc = {"jobs": [{**spec, "name": "a"}, {**spec, "name": "b"}, {**spec, "name": "c", "hours": 9}]}
    path = tmp_path / "batch.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert main(["plan-batch", str(path), "--json"]) == 0
    assert sorted(calls) == ["a", "c"]  # a and b are identical; greedy and the MILP share the candidates


def test_time_limit_bounds_candidate_generation_and_reports_what_it_placed(monkeypatch):
    import time

    import placement.plan.batch as batch

    real = batch.plan

    def slow(job, *a, **k):
        time.sleep(0.3)
        return real(job, *a, **k)

    monkeypatch.setattr(batch, "plan", slow)
    east = offer("p5.48xlarge", "us-east-1", price=50)
    jobs = [job(name=f"j{i}", capacity="on-demand", hours=1 + i) for i in range(8)]  # all distinct
    t0 = time.monotonic()
    m = solve(jobs, [east], None, time_limit_s=0.5)
    elapsed = time.monotonic() - t0
    assert elapsed < 0.5 + 0.3 + 1.0  # the last job started before the deadline, then the solver's minimum
    placed = [a for a in m.assignments if a.candidate is not None]
    cut = [a for a in m.assignments if a.candidate is None]
    assert placed and cut and all("--time-limit" in a.reason for a in cut)
    assert "time limit" in m.status


# ----------------------------------------------------------------------------- priorities (issue 19 item 5)


def test_a_high_priority_pretrain_is_never_dropped_to_place_more_low_priority_jobs():
    # Quota for 32 H100s (4 nodes) in the only region. Counting jobs alone, two 16-GPU fine-tunes (2 jobs)
    # beat one 32-GPU pretrain (1 job): the pretrain used to be the job dropped. At priority production it
    # takes the quota, and each fine-tune names what bound it and who took it.
    east = offer("p5.48xlarge", "us-east-1", price=50)
    q = quotas(("aws", "us-east-1", "L-417A185B", 4 * 192, 0))
    pretrain = job(name="pretrain", gpus=32, capacity="on-demand", priority="production")
    tunes = [job(name=f"tune-{i}", gpus=16, capacity="on-demand", priority=100) for i in range(2)]
    m = solve([*tunes, pretrain], [east], q)
    by_name = {a.job.name: a for a in m.assignments}
    assert by_name["pretrain"].candidate is not None
    assert [by_name[f"tune-{i}"].candidate for i in range(2)] == [None, None]
    (b,) = by_name["tune-0"].binding
    assert (b.key, b.needed, b.headroom, b.used, b.taken_by) == ("L-417A185B", 384, 768, 768, ("pretrain",))
    assert "quota L-417A185B in aws us-east-1" in by_name["tune-0"].reason and "pretrain" in by_name["tune-0"].reason
    assert by_name["tune-0"].moved and not by_name["pretrain"].moved
    # Without priorities the count wins, as before.
    flat = solve([job(name=f"tune-{i}", gpus=16, capacity="on-demand") for i in range(2)]
                 + [job(name="pretrain", gpus=32, capacity="on-demand")], [east], q)
    assert flat.placed == 2 and flat.assignments[2].candidate is None


def test_priority_accepts_a_class_name_or_an_integer():
    assert (job(priority="burst").priority, job(priority="burst").priority_value) == ("burst", 500)
    assert (job(priority=700).priority, job(priority=700).priority_value) == ("burst", 700)
    assert job(priority=5).priority == "low" and job().priority_value == 1000


def _brute_force_by_priority(jobs, offers, q):
    """Best assignment by enumeration: per priority tier (highest first) the most placed, then cost."""
    tiers = sorted({j.priority_value for j in jobs}, reverse=True)
    best = None
    for combo in _quota_feasible(jobs, offers, q):
        key = (*(-sum(1 for j, c in zip(jobs, combo, strict=True) if c is not None and j.priority_value == t)
                 for t in tiers),
               sum(1 for c in combo if c is not None and c.quota_group is None),
               sum(c.cost.total_usd for c in combo if c is not None))
        best = key if best is None or key < best else best
    return tiers, best


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([8, 16, 32]), st.sampled_from([100, 500, 1000])), min_size=1, max_size=5),
       st.integers(1, 6))
def test_priorities_are_lexicographic_like_brute_force(specs, nodes):
    offers = [offer("p5.48xlarge", "us-east-1", price=55), offer("p5.48xlarge", "us-west-2", price=50)]
    q = quotas(("aws", "us-east-1", "L-417A185B", 192 * nodes, 0), ("aws", "us-west-2", "L-417A185B", 192, 0))
    jobs = [job(name=f"j{i}", gpus=g, capacity="on-demand", priority=p) for i, (g, p) in enumerate(specs)]
    m = solve(jobs, offers, q)
    tiers, want = _brute_force_by_priority(jobs, offers, q)
    got = [-sum(1 for a in m.assignments if a.candidate is not None and a.job.priority_value == t) for t in tiers]
    assert got == list(want[: len(tiers)])
    assert abs(m.total_usd - want[-1]) <= 1e-4 * max(want[-1], 1.0) + 1e-6
    for a in m.assignments:  # every unplaced job names a full group
        assert a.candidate is not None or a.binding or "quota" in a.reason
