"""``placement/data/workloads.yaml`` read into a :class:`~placement.physics.PhysicsBook` (cached, once per
process). The parsing is pure (:func:`parse_workloads`); only :func:`physics_book` reads the file."""

from __future__ import annotations

import functools
import math
from importlib import resources
from typing import Any

import yaml

from placement.errors import InputError
from placement.physics import (
    TRAINING,
    WORKLOADS,
    Lustre,
    PhysicsBook,
    Scaling,
    ScalingPoint,
    fit_scaling,
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
                logs.append(math.log(_num(m.get("value"), f"{where}.measured[{i}].value")))
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
                                    source=str(p["source"]), speed=speeds[w][accel]))
        except KeyError as exc:
            raise InputError(f"{where}.{exc.args[0]}", "is required (or names no known class/accelerator)") from None
        if out[-1].role not in ("fit", "held_out"):
            raise InputError(f"{where}.role", "must be fit or held_out")
    return tuple(out)


def parse_workloads(doc: dict[str, Any]) -> tuple[PhysicsBook, tuple[ScalingPoint, ...]]:
    """The book of constants and the scaling points it was fitted to (and checked against)."""
    speeds = _speeds(doc)
    sc = doc.get("scaling") or {}
    ref_gbps = _num(sc.get("reference_gbps", 3200), "scaling.reference_gbps")
    ref_gpus = int(sc.get("reference_gpus_per_node", 8))
    points = _points(sc, speeds)
    scaling: dict[str, Scaling] = {}
    for w in WORKLOADS:
        fit = tuple(p for p in points if p.workload == w and p.role == "fit")
        if fit:
            scaling[w] = fit_scaling(fit, ref_gbps, ref_gpus)
    for w, other in (sc.get("stand_in") or {}).items():
        scaling[str(w)] = scaling[str(other)]
    missing = [w for w in WORKLOADS if w not in scaling]
    if missing:
        raise InputError(f"scaling.points ({missing[0]})", "needs fit points or a stand_in class")
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
    return book, points


@functools.cache
def _loaded() -> tuple[PhysicsBook, tuple[ScalingPoint, ...]]:
    text = resources.files("placement.data").joinpath("workloads.yaml").read_text(encoding="utf-8")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return parse_workloads(yaml.load(text, Loader=loader))


def physics_book() -> PhysicsBook:
    """The shipped constants (cached)."""
    return _loaded()[0]


def scaling_points() -> tuple[ScalingPoint, ...]:
    """The shipped MLPerf scaling points, fitted and held out."""
    return _loaded()[1]
