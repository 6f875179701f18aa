"""``placement/data/workloads.yaml`` read into a :class:`~placement.model.physics.PhysicsBook` (cached, once per
process). The parsing is pure (:func:`parse_workloads`); only :func:`physics_book` reads the file."""

from __future__ import annotations

import functools
import math
from typing import Any

from placement.errors import InputError
from placement.model.packaged import packaged_book
from placement.model.physics import (
    CURVES,
    TRAINING,
    WORKLOADS,
    Lustre,
    PhysicsBook,
    Scaling,
    ScalingPoint,
    fit_scaling,
    predicted,
)


def _num(value: Any, where: str, *, positive: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or (value <= 0 if positive else value < 0):
        raise InputError(where, f"must be a {'positive' if positive else 'non-negative'} number, got {value!r}")
    return float(value)


def _speeds(doc: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per class and accelerator: the geometric mean of the measured ratios (3 digits), or a stand-in class."""
    rows = doc.get("speed") or {}
    out: dict[str, dict[str, float]] = {}
    stand_ins: list[tuple[str, str, str]] = []
    for w in WORKLOADS:
        cls = rows.get(w)
        if not isinstance(cls, dict):
            raise InputError(f"speed.{w}", "is required: a mapping of accelerator -> measured ratios")
        out[w] = {}
        for accel, row in cls.items():
            where = f"speed.{w}.{accel}"
            if not isinstance(row, dict):
                raise InputError(where, "must be a mapping with measured (or stand_in and why)")
            if "stand_in" in row:
                if row["stand_in"] not in WORKLOADS or not str(row.get("why") or "").strip():
                    raise InputError(where, "stand_in must name a workload class, with a why")
                stand_ins.append((w, str(accel).upper(), row["stand_in"]))
                continue
            measured = row.get("measured")
            if not isinstance(measured, list) or not measured:
                raise InputError(f"{where}.measured", "must list the measured ratios with their results")
            logs = []
            for i, m in enumerate(measured):
                if not isinstance(m, dict) or not str(m.get("result") or "").strip():
                    raise InputError(f"{where}.measured[{i}].result", "is required: the measured result it cites")
                value = _num(m.get("value"), f"{where}.measured[{i}].value")
                via = m.get("via")
                if via is not None:
                    # A same-round ratio against another accelerator (B200/H200 in v5.x, where no H100 ran),
                    # chained through that accelerator's own figure in this class.
                    if str(via).upper() not in out[w]:
                        raise InputError(f"{where}.measured[{i}].via", f"{via} needs its own figure listed first")
                    value *= out[w][str(via).upper()]
                logs.append(math.log(value))
            out[w][str(accel).upper()] = round(math.exp(sum(logs) / len(logs)), 3)
    for w, accel, other in stand_ins:
        if accel not in out[other]:
            raise InputError(f"speed.{w}.{accel}.stand_in", f"{other} has no measured figure for {accel}")
        out[w][accel] = out[other][accel]
    return out


def _points(doc: dict[str, Any], speeds: dict[str, dict[str, float]]) -> tuple[ScalingPoint, ...]:
    out = []
    for i, p in enumerate(doc.get("points") or []):
        where = f"scaling.points[{i}]"
        try:
            w, accel = str(p["workload"]), str(p["accelerator"]).upper()
            out.append(ScalingPoint(workload=w, role=str(p["role"]), system=str(p["system"]), accelerator=accel,
                                    fabric_gbps=_num(p["fabric_gbps"], f"{where}.fabric_gbps"),
                                    base_gpus=int(p["base_gpus"]), gpus=int(p["gpus"]),
                                    efficiency=_num(p["efficiency"], f"{where}.efficiency"),
                                    source=str(p["source"]), speed=speeds[w][accel],
                                    gpus_per_node=int(p.get("gpus_per_node", 8)),
                                    training=str(p.get("training", "full")), basis=str(p.get("basis", "samples"))))
        except KeyError as exc:
            raise InputError(f"{where}.{exc.args[0]}", "is required (or names no known class/accelerator)") from None
        if out[-1].role not in ("fit", "held_out"):
            raise InputError(f"{where}.role", "must be fit or held_out")
        if out[-1].training not in TRAINING or out[-1].basis not in ("samples", "time"):
            raise InputError(f"{where}", "training must be full or adapter, basis samples or time")
    return tuple(out)


def parse_workloads(doc: dict[str, Any]) -> tuple[PhysicsBook, tuple[ScalingPoint, ...]]:
    """The book of constants and the scaling points it was fitted to (and checked against)."""
    speeds = _speeds(doc)
    sc = doc.get("scaling") or {}
    ref_gbps = _num(sc.get("reference_gbps", 3200), "scaling.reference_gbps")
    ref_gpus = int(sc.get("reference_gpus_per_node", 8))
    points = _points(sc, speeds)
    scaling: dict[str, Scaling] = {}
    for cv in CURVES:
        fit = tuple(p for p in points if p.curve == cv and p.role == "fit")
        if fit:
            scaling[cv] = fit_scaling(fit, ref_gbps, ref_gpus)
    for w, other in (sc.get("stand_in") or {}).items():
        scaling[str(w)] = scaling[str(other)]
    missing = [cv for cv in CURVES if cv not in scaling]
    if missing:
        raise InputError(f"scaling.points ({missing[0]})", "needs fit points or a stand_in curve")
    scaling["llm"] = scaling["llm-full"]
    mem = doc.get("memory") or {}
    ck = doc.get("checkpoint") or {}
    ints = doc.get("interruptions") or {}
    tb = {t: _num((mem.get("training_bytes_per_parameter") or {}).get(t),
                  f"memory.training_bytes_per_parameter.{t}") for t in TRAINING}
    cb = {t: _num((ck.get("bytes_per_parameter") or {}).get(t), f"checkpoint.bytes_per_parameter.{t}")
          for t in TRAINING}
    lustre = {str(k): Lustre(capacity_gb=_num(v.get("capacity_gb"), f"checkpoint.lustre.{k}.capacity_gb"),
                             mbps_per_tib=_num(v.get("mbps_per_tib"), f"checkpoint.lustre.{k}.mbps_per_tib"))
              for k, v in (ck.get("lustre") or {}).items()}
    reserve = _num(mem.get("reserve"), "memory.reserve", positive=False)
    if reserve >= 1:
        raise InputError("memory.reserve", f"must be below 1, got {reserve!r}")
    book = PhysicsBook(
        speeds=speeds, scaling=scaling, reference_gbps=ref_gbps, reference_gpus_per_node=ref_gpus,
        training_bytes_per_parameter=tb, checkpoint_bytes_per_parameter=cb, memory_reserve=reserve,
        faults_per_gpu_hour=_num(ints.get("faults_per_gpu_hour"), "interruptions.faults_per_gpu_hour",
                                 positive=False),
        spot_replacement_minutes=_num(ints.get("spot_replacement_minutes"),
                                      "interruptions.spot_replacement_minutes", positive=False),
        object_store_gbps_per_node=_num(ck.get("object_store_gbps_per_node"), "checkpoint.object_store_gbps_per_node"),
        lustre=lustre)
    held = doc.get("speed_held_out") or []
    bands, speed_bands, scaling_bands, evidence = held_out_bands(book, points, held)
    return PhysicsBook(**{**book.__dict__, "bands": bands, "speed_bands": speed_bands, "scaling_bands": scaling_bands,
                          "evidence": evidence}), points


def point_error(p: ScalingPoint, book: PhysicsBook) -> float:
    """Relative error of the model's per-GPU throughput at point ``p``: model / measured − 1."""
    e = predicted(p, book.scaling[p.curve], book.reference_gbps, book.reference_gpus_per_node)
    return e / p.efficiency - 1.0


def speed_error(h: dict[str, Any], book: PhysicsBook) -> float:
    """Relative error of a held-out speed ratio ``A/B``: model / measured − 1."""
    a, b = str(h["pair"]).upper().split("/")
    return book.speeds[h["workload"]][a] / book.speeds[h["workload"]][b] / float(h["value"]) - 1.0


def _held_out_errors(book: PhysicsBook, points: tuple[ScalingPoint, ...], held: list[dict[str, Any]]
                     ) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Per curve, the relative errors of its class's held-out speed ratios and of its held-out scaling points."""
    speed_errs: dict[str, list[float]] = {cv: [] for cv in CURVES}
    scaling_errs: dict[str, list[float]] = {cv: [] for cv in CURVES}
    for p in points:
        if p.role == "held_out":
            scaling_errs[p.curve].append(point_error(p, book))
    for h in held:
        w = str(h["workload"])
        for cv in CURVES:
            if cv == w or cv.startswith(w + "-"):
                speed_errs[cv].append(speed_error(h, book))
    return speed_errs, scaling_errs


def _rms(errs: dict[str, list[float]]) -> dict[str, float]:
    """Per curve, the root mean square of ``errs`` to 2 digits; a curve without any borrows the largest."""
    out = {cv: round(math.sqrt(sum(e * e for e in v) / len(v)), 2) for cv, v in errs.items() if v}
    worst = max(out.values(), default=0.0)
    return {cv: out.get(cv, worst) for cv in CURVES}


def held_out_bands(book: PhysicsBook, points: tuple[ScalingPoint, ...], held: list[dict[str, Any]]
                   ) -> tuple[dict[str, float], dict[str, float], dict[str, float], dict[str, tuple[int, int]]]:
    """Per curve, from its held-out evidence: the band (the RMS of every held-out relative error: its scaling
    points and its class's speed ratios), then each kind apart (issue 36): the speed band (what a choice between
    accelerators rests on), the scaling band (what a choice between node counts or fabrics rests on), and how
    many of each. To 2 digits; a curve without evidence of a kind borrows the largest band of that kind."""
    speed_errs, scaling_errs = _held_out_errors(book, points, held)
    evidence = {cv: (len(speed_errs[cv]), len(scaling_errs[cv])) for cv in CURVES}
    return (_rms({cv: scaling_errs[cv] + speed_errs[cv] for cv in CURVES}), _rms(speed_errs), _rms(scaling_errs),
            evidence)


@functools.cache
def _loaded() -> tuple[PhysicsBook, tuple[ScalingPoint, ...]]:
    return parse_workloads(packaged_book("workloads.yaml"))


def physics_book() -> PhysicsBook:
    """The shipped constants (cached)."""
    return _loaded()[0]


def scaling_points() -> tuple[ScalingPoint, ...]:
    """The shipped MLPerf scaling points, fitted and held out."""
    return _loaded()[1]


def fit_report(book: PhysicsBook | None = None, points: tuple[ScalingPoint, ...] | None = None) -> str:
    """The model against its measurements, as Markdown tables (docs/cost-model-fit.md, scripts/fit_report.py):
    every measured speed ratio by benchmark, the held-out speed ratios, every scaling point (fit or held out)
    with its basis and the model's error, a summary line per curve (its band), efficiencies by fabric, the
    memory rule against the single-GPU probe, and Daly against the first-order formula."""
    from placement.model.physics import (
        activation_gb_per_gpu,
        efficiency,
        first_order,
        optimal_interval,
        state_gb_per_gpu,
        usable_gb,
        wall_ratio,
    )
    from placement.model.shapes import shape_book

    if book is None or points is None:
        book, points = _loaded()
    doc = packaged_book("workloads.yaml")
    out = ["### Speed per GPU (H100 = 1.0): every measured ratio", "",
           "| class | accelerator | model | benchmark | basis | measured | result | against |",
           "|---|---|---|---|---|---|---|---|"]
    sb = shape_book()
    for w in WORKLOADS:
        for accel, row in doc["speed"][w].items():
            a = str(accel).upper()
            if "stand_in" in row:
                out.append(f"| {w} | {a} | {book.speeds[w][a]:.3f} | stand-in: {row['stand_in']} | | | "
                           f"{row['why']} | |")
                continue
            for m in row["measured"]:
                if m["result"] == "reference":
                    continue
                via = f" × {m['via']}" if m.get("via") else ""
                out.append(f"| {w} | {a} | {book.speeds[w][a]:.3f} | {m.get('benchmark', '')} | "
                           f"{m.get('basis', '')} | {m['value']:g}{via} | {m['result']} | {m['reference']} |")
        out.append(f"| {w} | datasheet | | | | | B200 {sb.speed('B200'):.3f}, L40S {sb.speed('L40S'):.3f} | |")
    out += ["", "### Held-out speed ratios (not used for the speeds)", "",
            "| class | pair | basis | measured | model | error | result | against |",
            "|---|---|---|---|---|---|---|---|"]
    for h in doc.get("speed_held_out") or []:
        a, b = str(h["pair"]).upper().split("/")
        model = book.speeds[h["workload"]][a] / book.speeds[h["workload"]][b]
        out.append(f"| {h['workload']} | {h['pair']} | {h.get('basis', '')} | {h['value']:.3f} | {model:.3f} | "
                   f"{speed_error(h, book):+.0%} | {h['result']} | {h['reference']} |")
    out += ["", "### Scaling efficiency: every point, fitted or held out", ""]
    for cv in CURVES:
        c = book.scaling[cv]
        out.append(f"- {cv}: a = {c.a:.4f}, c = {c.c:.6f}; error band ±{book.bands[cv]:.0%}")
    out += ["", "| curve | role | basis | system | accelerator | GPUs (base) | GPUs per node | fabric Gbps | "
            "measured | model | error | source |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in sorted(points, key=lambda p: (CURVES.index(p.curve), p.role != "fit")):
        e = predicted(p, book.scaling[p.curve], book.reference_gbps, book.reference_gpus_per_node)
        out.append(f"| {p.curve} | {p.role} | {p.basis} | {p.system} | {p.accelerator} | {p.gpus} ({p.base_gpus}) | "
                   f"{p.gpus_per_node} | {p.fabric_gbps:g} | {p.efficiency:.3f} | {e:.3f} | "
                   f"{point_error(p, book):+.0%} | {p.source} |")
    out += ["", "### Summary per curve (held-out points: scaling, and the class's held-out speed ratios)", ""]
    held = doc.get("speed_held_out") or []
    for cv in CURVES:
        errs = [point_error(p, book) for p in points if p.curve == cv and p.role == "held_out"]
        errs += [speed_error(h, book) for h in held if cv == h["workload"] or cv.startswith(h["workload"] + "-")]
        fit = [point_error(p, book) for p in points if p.curve == cv and p.role == "fit"]
        inside = sum(1 for e in errs if abs(e) <= 0.15)
        worst = max((abs(e) for e in errs), default=0.0)
        n_speed, n_scaling = book.evidence.get(cv, (0, 0))
        out.append(f"- {cv}: {len(fit)} fit points, {len(errs)} held out: {inside} within 15 %, worst "
                   f"{worst:.0%}, band (RMS of all of them) ±{book.bands[cv]:.0%}: speed ratios "
                   f"±{book.speed_bands.get(cv, 0):.0%} ({n_speed}), scaling points "
                   f"±{book.scaling_bands.get(cv, 0):.0%} ({n_scaling})")
    every = [point_error(p, book) for p in points if p.role == "held_out"] + [speed_error(h, book) for h in held]
    out.append(f"- all classes: {sum(1 for e in every if abs(e) <= 0.15)} of {len(every)} distinct held-out points "
               "within 15 % (the LLM speed ratios count once here, under both LLM curves above)")
    out += ["", "### Efficiency by fabric: 64 GPUs on 8 nodes of 8 (H100 speed)", "",
            "| fabric Gbps per node | " + " | ".join(CURVES) + " |", "|---|" + "---|" * len(CURVES)]
    for gbps in (3200, 1600, 800, 400, 100):
        es = [efficiency(8, gbps, 8, 1.0, book.scaling[cv], book.reference_gbps, 8) for cv in CURVES]
        out.append(f"| {gbps} | " + " | ".join(f"{e:.2f}" for e in es) + " |")
    out += ["", "### Memory: the rule against the single-GPU probe (docs/measurements.md)", "",
            "| probe | parameters | training | activation checkpointing | measured | state GB | activations GB | "
            "room GB | rule |", "|---|---|---|---|---|---|---|---|---|"]
    for gpu, gib, params, training, ckpt, measured in PROBE:
        state = state_gb_per_gpu(params, training, 1, book)
        act = activation_gb_per_gpu(params, 2048, 1, ckpt)
        room = usable_gb(gib, book)
        rule = "fits" if state + act <= room else "refused"
        out.append(f"| {gpu} | {params:g} B | {training} | {'yes' if ckpt else 'no'} | {measured} | {state:.1f} | "
                   f"{act:.1f} | {room:.1f} | {rule} |")
    out += ["", "### Interruptions: Daly against the first-order formula", "",
            "r = 0.05/h per node, restart 15 min, interval 30 min, C = 2 min.", "",
            "| nodes | first order (no C) | Daly | Daly at the optimal interval (C = 2 min) | optimal interval |",
            "|---|---|---|---|---|"]
    for n in (8, 16, 32, 64):
        rate = n * 0.05
        tau = optimal_interval(rate, 2 / 60)
        out.append(f"| {n} | {first_order(rate, 0.5, 0.25):.1%} | {wall_ratio(rate, 0.5, 2 / 60, 0.25) - 1:.1%} | "
                   f"{wall_ratio(rate, tau, 2 / 60, 0.25) - 1:.1%} | {tau * 60:.1f} min |")
    return "\n".join(out) + "\n"


# The single-GPU probe of docs/measurements.md (section "Memory"): GPU, GiB, billions of parameters, training,
# activation checkpointing, what happened. Micro-batch 1, sequence 2048.
PROBE = (
    ("H100", 80.0, 4.50, "full", False, "trained (peak 76.1 GB)"),
    ("H100", 80.0, 5.07, "full", False, "out of memory"),
    ("H200", 141.0, 8.96, "full", False, "trained (peak 144.9 GB)"),
    ("H100", 80.0, 30.5, "adapter", False, "out of memory (peak 83.1 GB)"),
    ("H100", 80.0, 30.5, "adapter", True, "trained (peak 63.7 GB)"),
    ("H100", 80.0, 35.3, "adapter", True, "out of memory (peak 83.8 GB)"),
)
