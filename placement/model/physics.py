"""Training physics: how fast a job trains on a candidate, whether it fits, and what interruptions cost. Pure.

Every constant comes from ``placement/data/workloads.yaml`` (read by :mod:`placement.model.physics_data`), where
each one names its measured source; the formulas and their derivation are in ``docs/cost-model.md``.

Units: hours, GB (10⁹ bytes), Gbps (10⁹ bits per second), parameters in billions; rates per hour.

* **Speed** per workload class: training throughput per GPU relative to H100 SXM, measured (MLPerf Training).
* **Memory fit**: ``bytes_per_parameter × parameters / GPUs`` of training state per GPU (sharded as under
  ZeRO-3/FSDP) must fit in the GPU's memory less an activation reserve.
* **Scaling efficiency** of a gang of ``n`` nodes (per-GPU throughput against one node)::

      e = 1 / (1 + s · (g / 8) · (B_ref / B) · (a · (1 − 1/n) + c · (n − 1)))

  ``s`` the per-GPU speed (H100 = 1), ``g`` GPUs per node, ``B`` the node's fabric line rate in Gbps,
  ``B_ref`` = 3200 Gbps, ``a`` and ``c`` fitted per workload class to MLPerf scaling points.
* **Interruptions** (Daly 2006, exact expected-time model): a gang of ``n`` nodes stops at rate
  ``R = n · (r_spot + g · f)`` (``f`` hardware faults per GPU-hour, every capacity kind); with checkpoint
  interval ``τ``, checkpoint write time ``C`` and restart time ``ρ``, ``M = 1/R``::

      T_wall / T_work = (M / τ) · e^(ρ/M) · (e^((τ + C)/M) − 1)

  and ``overhead = T_wall / T_work − 1``. The optimal ``τ`` minimises it (solved numerically).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

WORKLOADS = ("llm", "diffusion", "vision", "recommendation")
TRAINING = ("full", "adapter")
DESTINATIONS = ("object-store", "fsx-lustre", "managed-lustre")
REFERENCE_ACCELERATOR = "H100"
MB_PER_TIB_GB = 2**40 / 1e9  # GB in one TiB: Lustre tiers are quoted in MB/s per TiB of capacity
NO_WRITE_INTERVAL_H = 0.5  # auto interval when the write time is unknown (0): the old fixed default, 30 min
# A candidate whose expected wall time is beyond this many times its run time cannot finish in practice: it is
# excluded (issue 27), never chosen. Also the most restarts a plan may ask a JobSet for (its maxRestarts):
# a run expecting more interruptions than that could never be covered by its restart budget.
MAX_WALL_RATIO = 10.0
MAX_RESTARTS = 10_000
# Activation bytes per token per hidden unit per layer of a transformer block in bf16, stored for the backward
# pass without recomputation (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
# Models", 34·s·b·h per layer without the attention-score term that flash attention does not store), and
# with per-block activation checkpointing (only each block's bf16 input, 2·s·b·h, plus one block's full set
# live during its recomputation).
ACT_BYTES_FULL = 34.0
ACT_BYTES_CHECKPOINTED = 2.0


@dataclass(frozen=True)
class Scaling:
    """Fitted coefficients of one workload class's efficiency formula (see the module docstring)."""

    a: float  # per-step communication share on the reference fabric, as (1 - 1/n) of a ring all-reduce
    c: float  # growth per extra node: latency, stragglers and the smaller per-GPU batch of a fixed global batch


@dataclass(frozen=True)
class Lustre:
    """A Lustre checkpoint filesystem's default size and throughput tier."""

    capacity_gb: float
    mbps_per_tib: float


@dataclass(frozen=True)
class PhysicsBook:
    """The constants of the model (see ``placement/data/workloads.yaml`` for each one's source)."""

    speeds: Mapping[str, Mapping[str, float]]  # workload class -> accelerator -> speed (H100 = 1.0)
    scaling: Mapping[str, Scaling]  # workload class -> fitted coefficients
    reference_gbps: float = 3200.0
    reference_gpus_per_node: int = 8
    training_bytes_per_parameter: Mapping[str, float] = field(default_factory=lambda: {"full": 16.0, "adapter": 2.0})
    checkpoint_bytes_per_parameter: Mapping[str, float] = field(
        default_factory=lambda: {"full": 14.0, "adapter": 0.14})
    memory_reserve: float = 0.2
    faults_per_gpu_hour: float = 2.0e-5
    spot_replacement_minutes: float = 10.0
    object_store_gbps_per_node: float = 50.0
    lustre: Mapping[str, Lustre] = field(default_factory=dict)
    bands: Mapping[str, float] = field(default_factory=dict)  # curve -> measured relative error (held out)
    # The same evidence apart (issue 36): curve -> RMS error of its class's held-out speed ratios, of its held-out
    # scaling points, and how many of each there are.
    speed_bands: Mapping[str, float] = field(default_factory=dict)
    scaling_bands: Mapping[str, float] = field(default_factory=dict)
    evidence: Mapping[str, tuple[int, int]] = field(default_factory=dict)

    def speed(self, workload: str, accelerator: str) -> float:
        """Per-GPU training speed of ``accelerator`` on ``workload`` (H100 = 1.0)."""
        return self.speeds[workload][accelerator]

    def coefficients(self, workload: str, training: str = "full") -> Scaling:
        """The scaling curve of ``workload`` (LLM: adapters and full training apart)."""
        return self.scaling.get(curve_name(workload, training)) or self.scaling[workload]

    def band(self, workload: str, training: str = "full") -> float:
        """The class's measured relative error of run time (held-out points), 0 when unmeasured."""
        return self.bands.get(curve_name(workload, training), self.bands.get(workload, 0.0))

    def speed_band(self, workload: str, training: str = "full") -> float:
        """The curve's error on a speed ratio between accelerators (its class's held-out speed ratios)."""
        cv = curve_name(workload, training)
        return self.speed_bands.get(cv, self.band(workload, training))

    def scaling_band(self, workload: str, training: str = "full") -> float:
        """The curve's error on multi-node efficiency (its held-out scaling points)."""
        cv = curve_name(workload, training)
        return self.scaling_bands.get(cv, self.band(workload, training))


def curve_name(workload: str, training: str = "full") -> str:
    """The scaling curve a job uses: ``llm-adapter`` / ``llm-full`` for LLMs, the class name otherwise."""
    return f"{workload}-{training}" if workload == "llm" else workload


CURVES = ("llm-full", "llm-adapter", "diffusion", "vision", "recommendation")


# ------------------------------------------------------------------------------------------------ scaling


def efficiency(nodes: int, fabric_gbps: float, gpus_per_node: int, speed: float, coef: Scaling,
               reference_gbps: float = 3200.0, reference_gpus: int = 8) -> float:
    """Per-GPU throughput of ``nodes`` nodes against one node, in (0, 1]; exactly 1 on one node.

    ``fabric_gbps`` is one node's GPU fabric line rate (or its plain network without a fabric), ``speed``
    the per-GPU speed (H100 = 1.0): a faster GPU leaves less compute to hide communication behind."""
    if nodes <= 1:
        return 1.0
    load = speed * (gpus_per_node / reference_gpus) * (reference_gbps / max(fabric_gbps, 1e-9))
    return 1.0 / (1.0 + load * (coef.a * (1.0 - 1.0 / nodes) + coef.c * (nodes - 1)))


# ------------------------------------------------------------------------------------------------- memory


def state_gb_per_gpu(parameters_b: float, training: str, gpus: int, book: PhysicsBook) -> float:
    """GB of training state per GPU, the whole state sharded over the job's ``gpus`` (ZeRO-3 / FSDP)."""
    return book.training_bytes_per_parameter[training] * parameters_b / gpus


def usable_gb(gpu_memory_gib: float, book: PhysicsBook) -> float:
    """GB of one GPU's memory left for training state after the activation reserve."""
    return gpu_memory_gib * 2**30 / 1e9 * (1.0 - book.memory_reserve)


def hidden_size(parameters_b: float) -> float:
    """A decoder's hidden size for ``parameters_b`` billion parameters when the job does not give one: the
    fit ``h = 2048 · (P / 1.3)^0.36`` to the public decoders (1.3 B: 2048, 7-8 B: 4096, 70 B: 8192, 405 B:
    16384), which errs on the small side for mid sizes, so more layers and more activation memory: safe."""
    return 2048.0 * (max(parameters_b, 1e-9) / 1.3) ** 0.36


def activation_gb_per_gpu(parameters_b: float, sequence_length: int, micro_batch: int,
                          checkpointing: bool) -> float:
    """GB of a transformer's stored activations per GPU (not sharded by ZeRO-3: each GPU holds its own
    micro-batch): layers × s × b × h × bytes, with layers × h = P / (12 h) (12·h² parameters per layer).
    With per-block checkpointing only each block's input is kept, plus one block recomputed at a time."""
    h = hidden_size(parameters_b)
    layers = parameters_b * 1e9 / (12.0 * h * h)
    tokens = float(sequence_length) * float(micro_batch)
    if checkpointing:
        per_layer = ACT_BYTES_CHECKPOINTED * tokens * h
        return (per_layer * layers + ACT_BYTES_FULL * tokens * h) / 1e9
    return ACT_BYTES_FULL * tokens * h * layers / 1e9


def memory_reason(parameters_b: float, training: str, gpus: int, accelerator: str, gpu_memory_gib: float,
                  book: PhysicsBook, *, workload: str = "vision", sequence_length: int = 2048,
                  micro_batch: int = 1, activation_checkpointing: bool = False) -> str | None:
    """Why ``accelerator`` cannot hold the sharded training state (and, for an LLM, its activations at
    ``sequence_length`` × ``micro_batch``), or None when it can."""
    need = state_gb_per_gpu(parameters_b, training, gpus, book)
    act = activation_gb_per_gpu(parameters_b, sequence_length, micro_batch, activation_checkpointing) \
        if workload == "llm" else 0.0
    room = usable_gb(gpu_memory_gib, book)
    if need + act <= room:
        return None
    bpp = book.training_bytes_per_parameter[training]
    acts = ""
    if act:
        how = "with" if activation_checkpointing else "without"
        acts = (f" + {act:,.0f} GB of activations (sequence {sequence_length}, micro-batch {micro_batch}, "
                f"{how} activation checkpointing)")
        if not activation_checkpointing and need + activation_gb_per_gpu(
                parameters_b, sequence_length, micro_batch, True) <= room:
            acts += "; model.activation_checkpointing: true fits it"
    return (f"{parameters_b:g}B parameters ({training} training, {bpp:g} bytes each) need {need:,.0f} GB per GPU "
            f"over {gpus} GPUs{acts}; {accelerator} has {room:,.0f} GB free of {gpu_memory_gib:g} GiB")


def checkpoint_gb(parameters_b: float, training: str, book: PhysicsBook) -> float:
    """Default checkpoint size in GB for a model of ``parameters_b`` billion parameters."""
    return book.checkpoint_bytes_per_parameter[training] * parameters_b


def write_gbps(destination: str, nodes: int, book: PhysicsBook, capacity_gb: float | None = None,
               mbps_per_tib: float | None = None) -> float:
    """Aggregate checkpoint write throughput in Gbps: object store per node × nodes (each node writes its
    shards); a Lustre filesystem its capacity × throughput tier, whatever the node count."""
    if destination == "object-store":
        return book.object_store_gbps_per_node * max(nodes, 1)
    fs = book.lustre[destination]
    cap = fs.capacity_gb if capacity_gb is None else capacity_gb
    tier = fs.mbps_per_tib if mbps_per_tib is None else mbps_per_tib
    return cap / MB_PER_TIB_GB * tier * 8.0 / 1000.0


# ---------------------------------------------------------------------------------------------- interruptions


def wall_ratio(rate: float, interval_h: float, write_h: float, restart_h: float) -> float:
    """Daly's expected wall time per unit of work, ``(M/τ)·e^(ρ/M)·(e^((τ+C)/M) − 1)``, M = 1/rate.

    ``rate`` 0 gives the limit ``(τ + C)/τ``; an overflow, an underflow of ``R·τ`` to 0 (a denormal
    interval) or anything not finite gives ``inf`` (the job never finishes). Never raises."""
    if not interval_h > 0 or not rate >= 0 or not write_h >= 0 or not restart_h >= 0:
        return math.inf
    x = rate * (interval_h + write_h)
    try:
        if x == 0.0:
            ratio = (interval_h + write_h) / interval_h
        else:
            denom = rate * interval_h
            if denom == 0.0:
                return math.inf
            ratio = math.expm1(x) / denom * math.exp(rate * restart_h)
    except (OverflowError, ZeroDivisionError):
        return math.inf
    return ratio if math.isfinite(ratio) else math.inf


def first_order(rate: float, interval_h: float, restart_h: float) -> float:
    """The first-order overhead ``R·(τ/2 + ρ)`` (no write time): right only while ``R·τ`` ≪ 1."""
    return rate * (interval_h / 2.0 + restart_h)


def optimal_interval(rate: float, write_h: float) -> float:
    """The ``τ`` (hours) that minimises :func:`wall_ratio`: the root of ``e^(x+k)·(1 − x) = 1`` with
    ``x = R·τ``, ``k = R·C`` (the restart factor does not move the optimum). Bisection to 1e-12 relative.

    ``rate`` 0 has no optimum (``inf``: never checkpoint for interruptions); ``write_h`` 0 has it at 0."""
    if not rate > 0 or not math.isfinite(rate):
        return math.inf
    if not math.isfinite(write_h):
        return math.inf
    if write_h <= 0:
        return 0.0
    k = rate * write_h
    if k < 1e-12:
        # Young's root sqrt(2k)/R = sqrt(2C/R) is exact to a relative O(sqrt k) here, where the bisection's f
        # (about k - x²/2) would drown in rounding error; written as sqrt(2C/R) so a denormal C does not
        # underflow k to 0.
        return math.sqrt(2.0 * write_h / rate)
    lo, hi, done = _bisection_start(k)  # f(0) = e^k - 1 > 0, f(1) = -1 < 0
    for _ in range(200 - done):
        mid = (lo + hi) / 2.0
        try:
            # e^(x+k)(1-x) - 1 written with expm1, so the x terms cancel exactly rather than in rounding.
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


def cost_optimal_interval(rate: float, write_h: float, restart_h: float, a: float, b: float) -> float:
    """The ``τ`` (hours) that minimises ``a·T_wall/T_work + b/τ``: a job whose every hour of wall time costs ``a``
    (compute, the value of delay, current checkpoints' storage) and every checkpoint written ``b`` (its storage
    once replaced, its PUTs). With ``x = R·τ``, ``k = R·C`` and ``β = b·R / (a·e^(R·ρ))`` the optimum is the root of

        e^(x+k)·(1 − x) = 1 − β

    (Daly's equation is ``β = 0``): the left side falls from ``e^k`` at 0 through 0 at 1, so there is one root,
    in (0, 1) for β < 1 and beyond 1 otherwise. Bisection to 1e-12 relative. ``rate`` 0 has no optimum
    (``inf``: one checkpoint at the end); ``b`` 0 (or ``a`` 0) is :func:`optimal_interval`."""
    if not (a > 0 and b > 0) or not math.isfinite(a) or not math.isfinite(b):
        return optimal_interval(rate, write_h)
    if not rate > 0 or not math.isfinite(rate) or not math.isfinite(write_h) or not math.isfinite(restart_h):
        return math.inf
    k = rate * max(write_h, 0.0)
    try:
        b_per_a = b / (a * math.exp(rate * restart_h))  # β / R
    except (OverflowError, ZeroDivisionError):
        b_per_a = 0.0
    beta = b_per_a * rate
    if k + beta < 1e-12:
        # Young's root sqrt(2(k + β))/R = sqrt(2C/R + 2(β/R)/R), written so a tiny rate does not underflow (as
        # optimal_interval does); a denormal rate gives no finite interval.
        try:
            tau = math.sqrt(2.0 * max(write_h, 0.0) / rate + 2.0 * b_per_a / rate)
        except (OverflowError, ZeroDivisionError):
            return math.inf
        return tau if math.isfinite(tau) else math.inf

    def f(x: float) -> float:
        try:
            return math.expm1(x + k) * (1.0 - x) - x + beta  # e^(x+k)(1-x) - 1 + beta, without cancellation
        except OverflowError:
            return -math.inf

    # f is concave and falls on x > 0 (f' = -x·e^(x+k)), and f(x) <= e^k - 1 + β - e^k·x²/2: Newton from the
    # right of the root, at that bound's zero, steps down onto the root monotonically (a tangent of a concave
    # function lies above it). Bisection takes over should it ever leave the bracket.
    lo, hi = 0.0, math.sqrt(2.0 * (math.expm1(k) + beta) / math.exp(k)) if k < 700 else 1.0
    while f(hi) > 0 and hi < 1e6:
        lo, hi = hi, hi * 2.0
    x = hi
    for _ in range(100):
        fx = f(x)
        if fx > 0:
            lo = x
        else:
            hi = x
        try:
            slope = -x * math.exp(x + k)
        except OverflowError:
            slope = -math.inf
        nxt = x - fx / slope if slope < 0 and math.isfinite(slope) else (lo + hi) / 2.0
        if not lo <= nxt <= hi:
            nxt = (lo + hi) / 2.0
        if abs(nxt - x) <= 1e-12 * x or hi - lo <= 1e-12 * hi:
            x = nxt
            break
        x = nxt
    return x / rate


def _f_interval(x: float, k: float) -> float:
    """:func:`optimal_interval`'s ``f`` at ``x``, as its bisection computes it (the same expression)."""
    try:
        return math.expm1(x + k) * (1.0 - x) - x
    except OverflowError:
        return -1.0


def _bisection_start(k: float) -> tuple[float, float, int]:
    """(lo, hi, n): the bracket :func:`optimal_interval`'s bisection reaches from [0, 1] after its first ``n``
    halvings, found without them, so it gives the very same float in about half the time.

    Newton's method finds the root x (``f`` is concave and decreasing on [0, 1], started from the root's series
    in sqrt(2k), or from 1); the bracket is then the dyadic interval of width 2^-n holding x, about x·2^-36 wide
    and never under 2^-40 (so the bisection's early stop at 1e-12 relative comes later). The bisection's earlier
    midpoints are coarser dyadic points, so none lies inside it: each is at least as far from x as the bracket's
    ends, which are at least a 16th of its width (>= 2^-44) from x, over a hundred times the rounding noise of
    ``f`` near its root (about 4e-16): there each sign it took is the true sign, and the ends' own signs are
    checked. Where x lies too near a dyadic point (an end of every coarser bracket too) or Newton does not settle:
    [0, 1], n = 0, the whole bisection."""
    if not 1e-12 <= k <= 20.0:  # past 20 the root is within e^-21 of 1, nearer than any bracket this would pick
        return 0.0, 1.0, 0
    s = math.sqrt(2.0 * k)
    # k = -x - ln(1 - x) = x²/2 + x³/3 + ... inverted: x = s - s²/3 + s³/36 + O(s⁴), s = sqrt(2k)
    x = s - s * s / 3.0 + s * s * s / 36.0 if s < 1.0 else 1.0
    for _ in range(60):
        if not 0.0 < x < 2.0:
            return 0.0, 1.0, 0
        em1 = math.expm1(x + k)
        step = (em1 * (1.0 - x) - x) / (x * (em1 + 1.0))  # Newton: f' = -x·e^(x+k)
        x += step
        if abs(step) <= 1e-9 * x:
            em1 = math.expm1(x + k)
            x += (em1 * (1.0 - x) - x) / (x * (em1 + 1.0))  # quadratic: one more step leaves only noise
            break
    else:
        return 0.0, 1.0, 0
    if not 0.0 < x < 1.0:
        return 0.0, 1.0, 0
    n = min(37 - math.frexp(x)[1], 40)
    while n > 0:
        width = math.ldexp(1.0, -n)
        lo = math.floor(x / width) * width  # powers of two: exact
        hi = lo + width
        if min(x - lo, hi - x) >= width / 16.0:
            if (lo == 0.0 or _f_interval(lo, k) > 0) and (hi == 1.0 or not _f_interval(hi, k) > 0):
                return lo, hi, n
            return 0.0, 1.0, 0
        n -= 1
    return 0.0, 1.0, 0


@dataclass(frozen=True)
class Gang:
    """Interruptions of one gang over one run: its rate (per hour), the checkpoint interval and write time
    (hours), the restart (hours, a spot one includes waiting for a replacement node), the expected extra
    run time as a fraction (``overhead``) and the expected number of interruptions over the run."""

    rate: float
    interval_h: float
    write_h: float
    restart_h: float
    overhead: float
    expected_interruptions: float
    interval_capped: bool = False  # a fixed interval longer than the run, priced as one checkpoint at the end
    asked_interval_h: float = 0.0  # the job's fixed interval (0 under auto)
    # Why this interval (issue 36): "fixed" (the job's), "daly" (the wall-time optimum), "cost" (the job's total:
    # compute over the wall time plus checkpoint storage and requests), "run" (one checkpoint at the end: no
    # interruption to guard against, or the optimum is past the run), "no-write" (the write time is unknown).
    basis: str = "daly"
    daly_interval_h: float = 0.0  # the wall-time optimum, for comparison (0 when the job fixes the interval)


def gang(run_h: float, nodes: int, gpus_per_node: int, *, spot_rate: float, faults_per_gpu_hour: float,
         restart_h: float, replacement_h: float, write_h: float, interval_h: float | None,
         auto_interval_h: float | None = None, daly_interval_h: float | None = None) -> Gang:
    """The expected cost of interruptions for ``nodes`` nodes running ``run_h`` hours of work.

    ``spot_rate`` is the per-node reclaim rate (0 unless spot); ``interval_h`` None picks the wall-time optimal
    interval (capped at the run: one checkpoint at the end is the least a run writes), or ``auto_interval_h``
    when given (the cost-optimal one the engine found, basis ``cost``; capped at the run likewise);
    ``daly_interval_h`` is the wall-time optimum when the caller already has it (it is the same for the gang)."""
    hw = nodes * gpus_per_node * faults_per_gpu_hour
    spot = nodes * spot_rate
    rate = hw + spot
    restart = restart_h + (replacement_h * spot / rate if rate > 0 else 0.0)
    capped = False
    asked = 0.0
    daly = 0.0
    basis = "fixed"
    if interval_h is None:
        daly = (NO_WRITE_INTERVAL_H if write_h <= 0 else optimal_interval(rate, write_h)
                if daly_interval_h is None else daly_interval_h)
        basis = "no-write" if write_h <= 0 else "daly"
        tau = daly
        if auto_interval_h is not None and write_h > 0:
            tau, basis = auto_interval_h, "cost"
        if run_h > 0 and tau >= run_h and basis != "no-write":
            basis = "run"
        tau = min(tau, run_h) if run_h > 0 else tau
        if not math.isfinite(tau) or tau <= 0:
            tau = max(run_h, NO_WRITE_INTERVAL_H) if math.isfinite(run_h) else NO_WRITE_INTERVAL_H
    else:
        asked = tau = interval_h
        if run_h > 0 and tau > run_h:
            # A fixed interval longer than the run: the run writes one checkpoint at its end, so it is priced
            # as an interval of the run itself (Daly's formula past the run would charge work never done).
            tau, capped = run_h, True
    ratio = wall_ratio(rate, tau, write_h, restart)
    overhead = ratio - 1.0
    stops = rate * run_h * ratio if math.isfinite(ratio) and rate > 0 else (0.0 if rate == 0 else math.inf)
    # The frozen dataclass's __init__, without its eight object.__setattr__ calls (a plan with a calibration file
    # builds one per calibrated pool): the same fields in the same instance __dict__.
    g = object.__new__(Gang)
    g.__dict__.update(rate=rate, interval_h=tau, write_h=write_h, restart_h=restart, overhead=overhead,
                      expected_interruptions=stops if math.isfinite(stops) else math.inf, interval_capped=capped,
                      asked_interval_h=asked, basis=basis, daly_interval_h=daly)
    return g


def _duration(hours: float) -> str:
    if hours >= 48:
        return f"{hours:,.0f} h"
    if hours >= 1:
        return f"{hours:,.1f} h"
    return f"{hours * 60:,.1f} min" if hours * 60 >= 0.1 else f"{hours * 3600:,.2g} s"


def impractical_reason(g: Gang, run_h: float, max_wall_ratio: float = MAX_WALL_RATIO,
                       max_restarts: int = MAX_RESTARTS) -> str | None:
    """Why a gang cannot finish in practice, or None: its expected wall time is beyond ``max_wall_ratio`` × its
    run time, or it expects more interruptions than a restart budget of ``max_restarts`` could cover. The
    reason blames what causes it: the checkpoint writes when they alone exceed the limit (even with no
    interruption at all), the interruptions otherwise. Never raises (rate 0, infinities, NaN)."""
    ratio = 1.0 + g.overhead if g.overhead == g.overhead else math.inf
    writes_alone = (g.interval_h + g.write_h) / g.interval_h if g.interval_h > 0 else math.inf
    if not math.isfinite(writes_alone):
        writes_alone = math.inf
    if ratio <= max_wall_ratio and not g.expected_interruptions > max_restarts:
        return None
    if writes_alone > max_wall_ratio:
        return (f"each checkpoint takes {_duration(g.write_h)} to write, every {_duration(g.interval_h)} of work: "
                f"the run would take {writes_alone:,.3g} times its {_duration(run_h)} even with no interruption "
                "(raise checkpoint.write_gbps, use a faster destination or a longer checkpoint.interval_minutes)")
    if g.rate > 0:
        every = _duration(1.0 / g.rate)
        if ratio > max_wall_ratio:
            return (f"interrupted every {every} on average: expected wall time {ratio:,.3g} times its "
                    f"{_duration(run_h)} run (the limit is {max_wall_ratio:g}x); it cannot finish in practice")
        return (f"interrupted every {every} on average: {g.expected_interruptions:,.0f} interruptions expected, "
                f"more than the {max_restarts:,} restarts a job may be given")
    return (f"expected wall time {ratio:,.3g} times its {_duration(run_h)} run (the limit is "
            f"{max_wall_ratio:g}x); it cannot finish in practice")


# ------------------------------------------------------------------------------------------------ fitting


@dataclass(frozen=True)
class ScalingPoint:
    """One measured scaling point: per-GPU ``efficiency`` of ``gpus`` GPUs against ``base_gpus`` GPUs of the
    same system (nodes of ``gpus_per_node``), on a fabric of ``fabric_gbps`` per node, at per-GPU ``speed``."""

    workload: str
    role: str  # fit | held_out
    system: str
    accelerator: str
    fabric_gbps: float
    base_gpus: int
    gpus: int
    efficiency: float
    source: str
    speed: float = 1.0
    gpus_per_node: int = 8
    training: str = "full"  # llm: adapter (LoRA) or full training - separate curves
    basis: str = "samples"  # samples: per-GPU samples/s from time-to-train and samples to target; time: equal samples

    @property
    def curve(self) -> str:
        return curve_name(self.workload, self.training)


def _terms(p: ScalingPoint, nodes: int, reference_gbps: float, reference_gpus: int) -> tuple[float, float]:
    load = p.speed * (p.gpus_per_node / reference_gpus) * (reference_gbps / p.fabric_gbps)
    return load * (1.0 - 1.0 / nodes), load * (nodes - 1)


def fit_scaling(points: tuple[ScalingPoint, ...], reference_gbps: float = 3200.0,
                gpus_per_node: int = 8) -> Scaling:
    """Least squares of ``1/e − 1 = a·x₁ + c·x₂`` over ``points`` (each against one node), with a, c >= 0."""
    rows = []
    for p in points:
        if p.base_gpus != p.gpus_per_node:
            raise ValueError(f"fit point {p.system} {p.gpus}: base_gpus must be one node ({p.gpus_per_node})")
        x1, x2 = _terms(p, p.gpus // p.gpus_per_node, reference_gbps, gpus_per_node)
        rows.append((x1, x2, 1.0 / p.efficiency - 1.0))
    s11 = sum(r[0] * r[0] for r in rows)
    s12 = sum(r[0] * r[1] for r in rows)
    s22 = sum(r[1] * r[1] for r in rows)
    s1y = sum(r[0] * r[2] for r in rows)
    s2y = sum(r[1] * r[2] for r in rows)
    det = s11 * s22 - s12 * s12
    a = c = -1.0
    if det > 1e-12 * max(s11 * s22, 1e-300):
        a = (s22 * s1y - s12 * s2y) / det
        c = (s11 * s2y - s12 * s1y) / det
    if a < 0 or c < 0:  # the best fit with one coefficient at zero
        only_a = (max(s1y / s11, 0.0), 0.0) if s11 > 0 else (0.0, 0.0)
        only_c = (0.0, max(s2y / s22, 0.0)) if s22 > 0 else (0.0, 0.0)

        def sse(ac: tuple[float, float]) -> float:
            return sum((ac[0] * r[0] + ac[1] * r[1] - r[2]) ** 2 for r in rows)

        a, c = min(only_a, only_c, key=sse)
    return Scaling(a=a, c=c)


def predicted(p: ScalingPoint, coef: Scaling, reference_gbps: float = 3200.0, gpus_per_node: int = 8) -> float:
    """The model's efficiency for point ``p`` (against its own base run)."""
    def e(gpus: int) -> float:
        return efficiency(max(gpus // p.gpus_per_node, 1), p.fabric_gbps, p.gpus_per_node, p.speed, coef,
                          reference_gbps, gpus_per_node)
    return e(p.gpus) / e(p.base_gpus)
