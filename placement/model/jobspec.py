"""Job spec: the YAML a user writes, validated into a frozen :class:`JobSpec`.

Pure: takes parsed YAML (dicts and lists) and returns data, raising :class:`InputError` with the
dotted field name and the fix on the first problem.

Why one module: :class:`JobSpec` and its parser are one schema (docs/job-spec.md), each field's check beside the
fields it interacts with (capacity, spot, deadlines, data).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Literal

from placement.errors import InputError, shown
from placement.model.k8snames import dns1123_label_problem, jobset_name_problem
from placement.model.numbers import MAX_COUNT, finite_number, yaml_number
from placement.model.physics import DESTINATIONS, TRAINING, WORKLOADS
from placement.model.physics_data import physics_book
from placement.model.shapes import CLOUDS, ShapeBook, shape_book
from placement.model.zones import known_regions, needs_opt_in, region_cloud, zone_region

CapacityChoice = Literal["spot", "on-demand", "reserved", "any"]
CAPACITY_CHOICES = ("spot", "on-demand", "reserved", "any")
PRIORITIES = ("production", "burst", "low")
TRANSFER_PATHS = ("same_region", "inter_region", "cross_cloud")
_SCHEMES = {"s3": "aws", "gs": "gcp"}
# Bounds that keep every later product finite: a year of run time, an exabyte of data, a million GPUs.
MAX_HOURS = 24 * 366.0
MAX_GB = 1e9
MAX_RATE = 1e6  # per hour, minutes, Gbps, USD per hour: far above any real value, far below overflow
JOB_FIELDS = ("name", "accelerator", "gpus", "hours", "capacity", "data", "checkpoint", "spot", "clouds", "regions",
              "zones", "max_usd_per_hour", "priority", "team", "image", "command", "gpus_per_node", "speed",
              "deadline_hours", "usd_per_hour_of_delay", "workload", "model", "require_fabric", "faults",
              "earliest_start")
BATCH_FIELDS = ("jobs",)


def _names(names: Sequence[str]) -> str:
    """Names from the user's file for a message: escaped (one line) and cut short."""
    return ", ".join(shown(n)[1:-1] for n in names[:5]) + (", ..." if len(names) > 5 else "")


def _unknown_keys(doc: Mapping[Any, Any], allowed: Sequence[str], prefix: str) -> None:
    """Refuse a key that is not a string, or not one of ``allowed`` (with the nearest known one as a hint)."""
    for key in doc:
        if not isinstance(key, str):
            raise InputError(f"{prefix}{shown(key)}".rstrip("."), f"keys must be field names (strings), got "
                             f"{type(key).__name__} {shown(key)}")
    unknown = sorted(set(doc) - set(allowed))
    if unknown:
        import difflib  # only for a misspelt name

        close = difflib.get_close_matches(unknown[0], allowed, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise InputError(f"{prefix}{shown(unknown[0])[1:-1]}", f"is not a known field; {hint}expected one of "
                         f"{', '.join(sorted(allowed))}")


@dataclass(frozen=True)
class Dataset:
    """The training data: where it lives (``cloud``/``region``) and its size in GB."""

    uri: str
    size_gb: float
    region: str
    cloud: str


@dataclass(frozen=True)
class JobSpec:
    """A training job to place. Times in hours unless named otherwise; sizes in GB; money in USD.

    ``interruptions_per_hour`` is per spot node: a gang of N nodes is interrupted N times as often.
    ``hours`` is the run time on the first accelerator listed, at the job's GPU count, on a full-bandwidth
    fabric (3200 Gbps per 8-GPU node), without interruptions or checkpoint writes. ``speed`` overrides the
    measured per-GPU training speed of the job's ``workload`` class (H100 = 1.0,
    ``placement/data/workloads.yaml``). ``throughput_gbps`` overrides the data's transfer throughput per
    path (same_region, inter_region, cross_cloud), in Gbps.

    Checkpoints: ``checkpoint_interval_minutes`` None is ``auto`` (the optimal interval per candidate);
    ``checkpoint_size_gb`` None defaults from ``parameters_b`` (unknown without it: writes not priced);
    ``checkpoint_write_gbps`` None uses the ``checkpoint_destination``'s throughput. ``faults_per_gpu_hour``
    and ``spot_replacement_minutes`` None use the data's figures.
    """

    name: str
    accelerators: tuple[str, ...]
    gpus: int
    hours: float
    capacity: CapacityChoice = "any"
    dataset: Dataset | None = None
    outputs_gb: float = 0.0
    checkpoint_interval_minutes: float | None = None
    interruptions_per_hour: float = 0.05
    restart_minutes: float = 15.0
    allow_clouds: tuple[str, ...] = ()
    deny_clouds: tuple[str, ...] = ()
    allow_regions: tuple[str, ...] = ()
    deny_regions: tuple[str, ...] = ()
    max_usd_per_hour: float | None = None
    priority: str = "production"  # the Kueue WorkloadPriorityClass name `placement submit` labels the job with
    team: str | None = None
    image: str = "nvcr.io/nvidia/pytorch:25.10-py3"
    command: tuple[str, ...] = ()
    gpus_per_node: int | None = None
    speed: tuple[tuple[str, float], ...] = ()
    allow_zones: tuple[str, ...] = ()
    deny_zones: tuple[str, ...] = ()
    opt_in_zones: tuple[str, ...] = ()
    throughput_gbps: tuple[tuple[str, float], ...] = ()
    deadline_hours: float | None = None
    usd_per_hour_of_delay: float = 0.0
    workload: str = "llm"
    parameters_b: float | None = None
    training: str = "full"
    sequence_length: int = 2048  # tokens per sample (LLM activation memory)
    micro_batch: int = 1  # samples per GPU per step (LLM activation memory)
    activation_checkpointing: bool = False  # per-block recomputation: the safe default assumes none
    require_fabric: bool = False
    checkpoint_size_gb: float | None = None
    checkpoint_write_gbps: float | None = None
    checkpoint_destination: str = "object-store"
    checkpoint_keep: int | None = None  # checkpoints kept current (None: the data's default, 3)
    # Days a replaced checkpoint stays billed (None: the stacks' retention on the candidate's cloud, bill.yaml)
    checkpoint_retention_days: float | None = None
    filesystem_capacity_gb: float | None = None
    filesystem_mbps_per_tib: float | None = None
    faults_per_gpu_hour: float | None = None
    spot_replacement_minutes: float | None = None
    # Calibration (issue 26): the job gave spot.interruptions_per_hour (it then wins over live and calibrated
    # rates); the prior's weight in node-hours; measured (accelerator, nodes, efficiency); what was measured.
    interruptions_from_job: bool = False
    prior_node_hours: float = 100.0
    scaling: tuple[tuple[str, int, float], ...] = ()
    measured: tuple[str, ...] = ()
    priority_value: int = 1000  # plan-batch: higher first (the class's value, or the integer the job gave)
    # plan-batch's schedule: the earliest start, hours from --now (a number) or an ISO-8601 time (a str, read
    # against --now by placement.plan.schedule); None = now.
    earliest_start: float | str | None = None
    warnings: tuple[str, ...] = field(default=(), compare=False)

    def capacities(self) -> tuple[str, ...]:
        """The capacity kinds this job accepts (``any``: on-demand, spot and reserved)."""
        return ("on-demand", "spot", "reserved") if self.capacity == "any" else (self.capacity,)

    def allows(self, cloud: str, region: str) -> str | None:
        """``None`` when the job may run in ``cloud``/``region``, else the reason it may not."""
        if self.allow_clouds and cloud not in self.allow_clouds:
            return f"cloud {cloud} not in clouds.allow"
        if cloud in self.deny_clouds:
            return f"cloud {cloud} in clouds.deny"
        if self.allow_regions and region not in self.allow_regions:
            return f"region {region} not in regions.allow"
        if region in self.deny_regions:
            return f"region {region} in regions.deny"
        return None

    def allows_zone(self, cloud: str, zone: str) -> str | None:
        """``None`` when the job may run in ``zone``, else the reason. AWS Local and Wavelength Zones need the
        job to name them (zones.opt_in or zones.allow)."""
        if zone in self.deny_zones:
            return f"zone {zone} in zones.deny"
        if self.allow_zones and zone not in self.allow_zones:
            return f"zone {zone} not in zones.allow"
        if zone not in self.allow_zones and zone not in self.opt_in_zones and needs_opt_in(cloud, zone):
            return f"{zone} is a Local/Wavelength Zone; list it in zones.opt_in to consider it"
        return None

    def speed_of(self, accelerator: str) -> float:
        """Per-GPU training speed (H100 = 1.0): the job's ``speed`` entry, else the measured figure of its
        ``workload`` class (``placement/data/workloads.yaml``; the shape data's datasheet figure for an
        accelerator that file does not know)."""
        for name, value in self.speed:
            if name == accelerator:
                return value
        speeds = physics_book().speeds[self.workload]
        return speeds[accelerator] if accelerator in speeds else shape_book().speed(accelerator)

    def run_hours(self, accelerator: str) -> float:
        """Hours of training on one node-equivalent of ``accelerator`` at the reference fabric's efficiency:
        ``hours × speed[first listed] / speed[accelerator]`` (the engine adds the candidate's scaling)."""
        return self.hours * self.speed_of(self.accelerators[0]) / self.speed_of(accelerator)

    def gbps(self, path: str, default: float) -> float:
        """Transfer throughput for ``path`` in Gbps: the job's override, else ``default`` (the data's)."""
        for name, value in self.throughput_gbps:
            if name == path:
                return value
        return default


def _number(value: Any, field: str, *, minimum: float = 0.0, strict: bool = False, integer: bool = False,
            maximum: float | None = None) -> float:
    """A finite number from YAML (``true``, ``"8"``, ``.inf`` and ``.nan`` are refused), within bounds."""
    kind = "a whole number" if integer else "a number"
    if isinstance(value, str):
        try:
            float(value)
        except ValueError:
            raise InputError(field, f"must be {kind}, got {shown(value)}") from None
        # YAML 1.1 reads a quoted number, and an exponent without a dot or a sign (1e3, 1.0e3), as text.
        hint = yaml_number(value)
        why = " (in YAML an exponent needs a dot and a sign)" if hint != value.strip() else ""
        raise InputError(field, f"must be {kind}; YAML read {shown(value)} as text: write it as {hint}, "
                         f"unquoted{why}")
    number = finite_number(value, field, what=kind)
    if integer and number != int(number):
        raise InputError(field, f"must be a whole number, got {shown(value)}")
    if number < minimum or (strict and number == minimum):
        op = ">" if strict else ">="
        raise InputError(field, f"must be {op} {minimum:g}, got {shown(value)}")
    if maximum is not None and number > maximum:
        raise InputError(field, f"must be at most {maximum:g}, got {shown(value)}")
    return number + 0.0


def _strings(value: Any, field: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise InputError(field, "must be a name or a list of names")
    return tuple(v.strip() for v in value)


def _section(doc: Mapping[str, Any], key: str, allowed: set[str], prefix: str = "") -> Mapping[str, Any]:
    value = doc.get(key)
    path = f"{prefix}{key}"
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InputError(path, "must be a mapping")
    _unknown_keys(value, sorted(allowed), f"{path}.")
    return value


def _clouds(value: Any, field: str) -> tuple[str, ...]:
    clouds = tuple(c.lower() for c in _strings(value, field))
    for c in clouds:
        if c not in CLOUDS:
            raise InputError(field, f"unknown cloud {shown(c)}; use {' or '.join(CLOUDS)}")
    return clouds


def _regions(value: Any, field: str, clouds: tuple[str, ...], warnings: list[str], *,
             required: bool) -> tuple[str, ...]:
    """Region names; those no (allowed) cloud knows are a warning, and an allow list that names none at all
    is an error (it would silently exclude every candidate)."""
    names = _strings(value, field)
    if not names:
        return names  # none named (the common case): nothing to look up
    known = set().union(*(known_regions()[c] for c in (clouds or CLOUDS)))
    unknown = [r for r in names if r not in known]
    if not unknown:
        return names
    where = f" of {'/'.join(clouds)}" if clouds else ""
    if required and len(unknown) == len(names):
        raise InputError(field, f"names no known region{where} ({_names(unknown)}); use names like us-east-1 "
                         "(AWS) or us-central1 (GCP)")
    warnings.append(f"{field}: {_names(unknown)} is not a known region{where} (placement/data/regions.yaml)")
    return names


def _zones(value: Any, field: str, warnings: list[str]) -> tuple[str, ...]:
    """``zones.allow``: zones no known region has are a warning; a list naming none is an error (it would
    exclude every candidate)."""
    names = _strings(value, field)
    unknown = [z for z in names if zone_region(z) is None]
    if unknown and len(unknown) == len(names):
        raise InputError(field, f"names no zone of a known region ({_names(unknown)}); use AWS zone IDs like use1-az4 "
                         "(or names like us-east-1a) or GCP zones like us-central1-a")
    if unknown:
        warnings.append(f"{field}: {_names(unknown)} is not a zone of a known region (placement/data/regions.yaml)")
    return names


def check_allowed_zones(job: JobSpec, offered: Collection[str], where: str = "") -> list[str]:
    """``zones.allow`` against the zones the catalogs (and reservations) offer, known only once they are loaded:
    a list naming none of them is an error naming the zones (every candidate would be excluded, and the answer
    would be "nothing feasible"); one naming some is a warning per zone no catalog has. ``where`` prefixes the
    field (``jobs[train-7b].`` in a batch). Returns the warnings."""
    field = f"{where}zones.allow"
    unknown = [z for z in job.allow_zones if z not in offered]
    if not unknown:
        return []
    if len(unknown) == len(job.allow_zones):
        import difflib  # only for a misspelt name

        close = difflib.get_close_matches(unknown[0], sorted(offered), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}? " if close else ""
        raise InputError(field, f"names no zone any catalog offers ({_names(unknown)}); {hint}`placement offers "
                         "--accelerator ACCEL` lists the zones with their offers")
    return [f"{field}: no catalog offers zone {_names([z])}; only the other zones listed are considered"
            for z in unknown]


def _speed(value: Any, field: str, book: ShapeBook) -> tuple[tuple[str, float], ...]:
    if value is None:
        return ()
    if not isinstance(value, Mapping) or not value:
        raise InputError(field, "must be a mapping of accelerator to relative training speed, e.g. {A100: 0.35}")
    out: dict[str, float] = {}
    for name, speed in value.items():
        accel = book.canonical_accelerator(str(name))
        if accel not in book.accelerators():
            raise InputError(f"{field}.{_names([str(name)])}",
                             f"unknown accelerator; known: {', '.join(sorted(book.accelerators()))}")
        out[accel] = _number(speed, f"{field}.{_names([str(name)])}", strict=True, maximum=MAX_RATE)
    return tuple(sorted(out.items()))


def _throughput(value: Any, field: str) -> tuple[tuple[str, float], ...]:
    """``data.throughput_gbps``: one number for every path, or a mapping per path."""
    if value is None:
        return ()
    if isinstance(value, Mapping):
        _unknown_keys(value, TRANSFER_PATHS, f"{field}.")
        return tuple((p, _number(value[p], f"{field}.{p}", strict=True, maximum=MAX_RATE))
                     for p in TRANSFER_PATHS if p in value)
    gbps = _number(value, field, strict=True, maximum=MAX_RATE)
    return tuple((p, gbps) for p in TRANSFER_PATHS)


@functools.cache
def _priority_values() -> dict[str, int]:
    """Each WorkloadPriorityClass name with its value (read, never changed, by every job spec parsed)."""
    from placement.model.priorities import PRIORITY_CLASSES

    return {name: v for name, v, _ in PRIORITY_CLASSES}


def _priority(value: Any, field: str) -> tuple[str, int]:
    """(Kueue WorkloadPriorityClass name, value): a class name, or an integer on the classes' scale (production
    1000, burst 500, low 100), which takes the class of the highest value at or below it (else ``low``)."""
    values = _priority_values()
    if isinstance(value, str) and value in values:
        return value, values[value]
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) <= 1_000_000_000:
        below = [(v, name) for name, v in values.items() if v <= value]
        return (max(below)[1] if below else min((v, n) for n, v in values.items())[1]), value
    raise InputError(field, f"must be one of {', '.join(PRIORITIES)} or an integer (higher first, like a Kueue "
                     f"WorkloadPriorityClass value: production 1000, burst 500, low 100), got {shown(value)}")


def job_size(doc: Mapping[str, Any], *, where: str = "") -> tuple[int, float]:
    """``(gpus, hours)`` of a job mapping as :func:`parse_job` reads them (InputError as it raises). Nothing else
    parse_job reads depends on them but the name's JobSet check (its node count): the dispatcher parses the rest
    of a spec once for every size of it (:mod:`placement.dispatch.snapshot`)."""
    if doc.get("gpus") is None:
        raise InputError(f"{where}gpus", "is required: the total number of GPUs, e.g. 16")
    gpus = int(_number(doc["gpus"], f"{where}gpus", minimum=1, integer=True, maximum=MAX_COUNT))
    if doc.get("hours") is None:
        raise InputError(f"{where}hours", "is required: expected run time in hours without interruptions")
    hours = _number(doc["hours"], f"{where}hours", minimum=0, strict=True, maximum=MAX_HOURS)
    return gpus, hours


def largest_node(accelerators: Sequence[str], gpus_per_node: int | None, gpus: int, book: ShapeBook) -> int:
    """GPUs of the largest node that may hold a job: its ``gpus_per_node``, else the largest node of its
    accelerators (``gpus`` when none has one). A job of more GPUs is a JobSet, whose pods' names are checked."""
    return gpus_per_node or max((book.node_sizes(a)[-1] for a in accelerators if book.node_sizes(a)), default=gpus)


def parse_job(doc: Any, *, where: str = "") -> JobSpec:
    """Validate one job mapping. ``where`` prefixes field names (``jobs[3].``) for batch files."""
    if not isinstance(doc, Mapping):
        raise InputError(where.rstrip(".") or "job", "must be a mapping of job fields (name, accelerator, gpus, hours)")
    if "jobs" in doc:
        raise InputError(f"{where}jobs", "this is a batch file (a jobs: list); use `placement plan-batch` for it")
    _unknown_keys(doc, JOB_FIELDS, where)

    name = doc.get("name")
    if name is None:
        raise InputError(f"{where}name", "is required: lower-case letters, digits and '-' (a Kubernetes name)")
    if not isinstance(name, str):
        raise InputError(f"{where}name", f"must be a string (a Kubernetes name), got {shown(name)}")
    if problem := dns1123_label_problem(name):
        raise InputError(f"{where}name", f"{problem} (the job's name is a Kubernetes name)")

    if doc.get("accelerator") is None:
        raise InputError(f"{where}accelerator", "is required: a GPU name such as H100, or a list like [H100, H200]")
    book = shape_book()
    accels = tuple(dict.fromkeys(book.canonical_accelerator(a)
                                 for a in _strings(doc["accelerator"], f"{where}accelerator")))
    known = book.accelerators()
    if not accels:
        raise InputError(f"{where}accelerator", "names no GPU; give one such as H100, or a list like [H100, H200]")
    for a in accels:
        if a not in known:
            raise InputError(f"{where}accelerator",
                             f"unknown accelerator {shown(a)}; known: {', '.join(sorted(known))}")

    gpus, hours = job_size(doc, where=where)

    capacity = doc.get("capacity", "any")
    if capacity not in CAPACITY_CHOICES:
        raise InputError(f"{where}capacity", f"must be spot, on-demand, reserved or any, got {shown(capacity)}")

    gpus_per_node = None
    if doc.get("gpus_per_node") is not None:
        gpus_per_node = int(_number(doc["gpus_per_node"], f"{where}gpus_per_node", minimum=1, integer=True,
                                    maximum=MAX_COUNT))
        sizes = sorted({n for a in accels for n in book.node_sizes(a)})
        if gpus_per_node not in sizes:
            raise InputError(f"{where}gpus_per_node", f"no {'/'.join(accels)} shape has {gpus_per_node} GPUs per node; "
                             f"use one of {', '.join(map(str, sizes))}")
    speed = _speed(doc.get("speed"), f"{where}speed", book)
    # A job no single node can hold is rendered as a JobSet, whose pod names are stricter (k8snames).
    largest = largest_node(accels, gpus_per_node, gpus, book)
    if gpus > largest and (problem := jobset_name_problem(name, -(-gpus // largest))):
        raise InputError(f"{where}name", problem)

    data = _section(doc, "data", {"dataset", "outputs_gb", "throughput_gbps"}, where)
    dataset = None
    ds = _section(data, "dataset", {"uri", "size_gb", "region"}, f"{where}data.")
    if ds:
        uri = ds.get("uri")
        if not isinstance(uri, str) or "://" not in uri:
            raise InputError(f"{where}data.dataset.uri", "must be an s3:// or gs:// URI")
        scheme = uri.split("://", 1)[0].lower()
        if scheme not in _SCHEMES:
            raise InputError(f"{where}data.dataset.uri", f"scheme {shown(scheme)} is not supported; use s3:// or gs://")
        region = ds.get("region")
        if not isinstance(region, str) or not region:
            raise InputError(f"{where}data.dataset.region",
                             "is required: the region the dataset lives in, e.g. us-east-1")
        if ds.get("size_gb") is None:
            raise InputError(f"{where}data.dataset.size_gb", "is required: the dataset size in GB")
        home = _SCHEMES[scheme]
        if region not in known_regions()[home]:
            other = region_cloud(region)
            hint = (f"{region} is an {other.upper()} region, but a {scheme}:// dataset lives in {home.upper()}"
                    if other else f"{_names([region])} is not a known {home.upper()} region")
            raise InputError(f"{where}data.dataset.region", f"{hint}; give the bucket's {home.upper()} region "
                             f"(e.g. {'us-east-1' if home == 'aws' else 'us-central1'}); a new region goes in "
                             "placement/data/regions.yaml")
        dataset = Dataset(uri=uri, size_gb=_number(ds["size_gb"], f"{where}data.dataset.size_gb", maximum=MAX_GB),
                          region=region, cloud=home)
    outputs_gb = _number(data.get("outputs_gb", 0), f"{where}data.outputs_gb", maximum=MAX_GB)
    if outputs_gb and dataset is None:
        raise InputError(f"{where}data.outputs_gb",
                         "needs data.dataset: outputs are copied to the dataset's home region")
    throughput = _throughput(data.get("throughput_gbps"), f"{where}data.throughput_gbps")

    ck = _section(doc, "checkpoint", {"interval_minutes", "size_gb", "write_gbps", "destination", "filesystem",
                                      "keep", "retention_days"}, where)
    ck_keep = None if ck.get("keep") is None else int(_number(ck["keep"], f"{where}checkpoint.keep", minimum=1,
                                                               integer=True, maximum=MAX_COUNT))
    ck_retention = None if ck.get("retention_days") is None else _number(
        ck["retention_days"], f"{where}checkpoint.retention_days", minimum=0, maximum=36_500)
    raw_interval = ck.get("interval_minutes", "auto")
    if isinstance(raw_interval, str) and raw_interval != "auto":
        raise InputError(f"{where}checkpoint.interval_minutes", f"must be a number of minutes or auto, got "
                         f"{shown(raw_interval)}")
    interval = None if raw_interval == "auto" else _number(
        raw_interval, f"{where}checkpoint.interval_minutes", minimum=0, strict=True, maximum=MAX_RATE)
    ck_size = None if ck.get("size_gb") is None else _number(ck["size_gb"], f"{where}checkpoint.size_gb",
                                                             maximum=MAX_GB)
    ck_gbps = None if ck.get("write_gbps") is None else _number(ck["write_gbps"], f"{where}checkpoint.write_gbps",
                                                                strict=True, maximum=MAX_RATE)
    destination = ck.get("destination", "object-store")
    if destination not in DESTINATIONS:
        raise InputError(f"{where}checkpoint.destination", f"must be one of {', '.join(DESTINATIONS)}, got "
                         f"{shown(destination)}")
    fs = _section(ck, "filesystem", {"capacity_gb", "throughput_mbps_per_tib"}, f"{where}checkpoint.")
    if fs and destination == "object-store":
        raise InputError(f"{where}checkpoint.filesystem", "needs checkpoint.destination fsx-lustre or managed-lustre")
    fs_gb = None if fs.get("capacity_gb") is None else _number(
        fs["capacity_gb"], f"{where}checkpoint.filesystem.capacity_gb", strict=True, maximum=MAX_GB)
    fs_tier = None if fs.get("throughput_mbps_per_tib") is None else _number(
        fs["throughput_mbps_per_tib"], f"{where}checkpoint.filesystem.throughput_mbps_per_tib", strict=True,
        maximum=MAX_RATE)
    spot = _section(doc, "spot", {"interruptions_per_hour", "restart_minutes", "replacement_minutes"}, where)
    rate = _number(spot.get("interruptions_per_hour", 0.05), f"{where}spot.interruptions_per_hour", maximum=MAX_RATE)
    restart = _number(spot.get("restart_minutes", 15), f"{where}spot.restart_minutes", maximum=MAX_RATE)
    replacement = None if spot.get("replacement_minutes") is None else _number(
        spot["replacement_minutes"], f"{where}spot.replacement_minutes", maximum=MAX_RATE)
    faults = _section(doc, "faults", {"per_gpu_hour"}, where)
    fault_rate = None if faults.get("per_gpu_hour") is None else _number(
        faults["per_gpu_hour"], f"{where}faults.per_gpu_hour", maximum=MAX_RATE)
    workload = doc.get("workload", "llm")
    if workload not in WORKLOADS:
        raise InputError(f"{where}workload", f"must be one of {', '.join(WORKLOADS)}, got {shown(workload)}")
    model = _section(doc, "model", {"parameters_b", "training", "sequence_length", "micro_batch",
                                    "activation_checkpointing"}, where)
    params = None if model.get("parameters_b") is None else _number(
        model["parameters_b"], f"{where}model.parameters_b", strict=True, maximum=MAX_GB)
    if model and params is None:
        raise InputError(f"{where}model.parameters_b", "is required with model: the parameter count in billions")
    training = model.get("training", "full")
    if training not in TRAINING:
        raise InputError(f"{where}model.training", f"must be {' or '.join(TRAINING)}, got {shown(training)}")
    seq_len = int(_number(model.get("sequence_length", 2048), f"{where}model.sequence_length", minimum=1,
                          integer=True, maximum=MAX_COUNT))
    micro = int(_number(model.get("micro_batch", 1), f"{where}model.micro_batch", minimum=1, integer=True,
                        maximum=MAX_COUNT))
    act_ckpt = model.get("activation_checkpointing", False)
    if not isinstance(act_ckpt, bool):
        raise InputError(f"{where}model.activation_checkpointing", f"must be true or false, got {shown(act_ckpt)}")
    require_fabric = doc.get("require_fabric", False)
    if not isinstance(require_fabric, bool):
        raise InputError(f"{where}require_fabric", f"must be true or false, got {shown(require_fabric)}")

    clouds = _section(doc, "clouds", {"allow", "deny"}, where)
    regions = _section(doc, "regions", {"allow", "deny"}, where)
    zones = _section(doc, "zones", {"allow", "deny", "opt_in"}, where)
    allow_clouds = _clouds(clouds.get("allow"), f"{where}clouds.allow")
    deny_clouds = _clouds(clouds.get("deny"), f"{where}clouds.deny")
    if set(allow_clouds or CLOUDS) <= set(deny_clouds):
        which = "clouds.allow lets in" if allow_clouds else "there is"
        named = ", ".join(sorted(set(allow_clouds or CLOUDS)))
        raise InputError(f"{where}clouds.deny", f"denies every cloud {which} ({named}), so nothing can run; drop it "
                         "from clouds.deny or clouds.allow")
    warnings: list[str] = []
    allow_regions = _regions(regions.get("allow"), f"{where}regions.allow", allow_clouds, warnings, required=True)
    deny_regions = _regions(regions.get("deny"), f"{where}regions.deny", allow_clouds, warnings, required=False)
    opt_in = _strings(zones.get("opt_in"), f"{where}zones.opt_in")
    for z in opt_in:
        if not needs_opt_in("aws", z):
            warnings.append(f"{where}zones.opt_in: {z} is a regular zone; only Local and Wavelength Zones need "
                            "opting in")
    deadline = doc.get("deadline_hours")
    delay = doc.get("usd_per_hour_of_delay")
    max_usd = doc.get("max_usd_per_hour")
    priority, priority_value = _priority(doc.get("priority", "production"), f"{where}priority")
    team = doc.get("team")
    if team is not None:
        if not isinstance(team, str):
            raise InputError(f"{where}team", f"must be a namespace name, got {shown(team)}")
        if problem := dns1123_label_problem(team):
            raise InputError(f"{where}team", f"{problem} (a namespace name)")
    image = doc.get("image", JobSpec.image)
    if not isinstance(image, str) or not image:
        raise InputError(f"{where}image", "must be a container image reference")
    command = doc.get("command", [])
    if isinstance(command, str):
        command = ["/bin/sh", "-c", command]
    if not isinstance(command, list) or not all(isinstance(c, str) for c in command):
        raise InputError(f"{where}command", "must be a string or a list of strings")

    return new_job(
        name=name, accelerators=accels, gpus=gpus, hours=hours, capacity=capacity, dataset=dataset,
        outputs_gb=outputs_gb, checkpoint_interval_minutes=interval, interruptions_per_hour=rate,
        interruptions_from_job="interruptions_per_hour" in spot,
        restart_minutes=restart,
        allow_clouds=allow_clouds,
        deny_clouds=deny_clouds,
        allow_regions=allow_regions,
        deny_regions=deny_regions,
        max_usd_per_hour=None if max_usd is None else _number(max_usd, f"{where}max_usd_per_hour", strict=True,
                                                                          maximum=MAX_RATE),
        priority=priority, priority_value=priority_value, team=team, image=image, command=tuple(command),
        gpus_per_node=gpus_per_node, speed=speed,
        allow_zones=_zones(zones.get("allow"), f"{where}zones.allow", warnings),
        deny_zones=_strings(zones.get("deny"), f"{where}zones.deny"),
        opt_in_zones=opt_in, throughput_gbps=throughput,
        deadline_hours=None if deadline is None else _number(deadline, f"{where}deadline_hours", strict=True,
                                                                        maximum=MAX_HOURS),
        usd_per_hour_of_delay=0.0 if delay is None else _number(delay, f"{where}usd_per_hour_of_delay",
                                                                          maximum=MAX_RATE),
        workload=workload, parameters_b=params, training=training, require_fabric=require_fabric,
        sequence_length=seq_len, micro_batch=micro, activation_checkpointing=act_ckpt, checkpoint_keep=ck_keep,
        checkpoint_retention_days=ck_retention,
        checkpoint_size_gb=ck_size, checkpoint_write_gbps=ck_gbps, checkpoint_destination=destination,
        filesystem_capacity_gb=fs_gb, filesystem_mbps_per_tib=fs_tier, faults_per_gpu_hour=fault_rate,
        spot_replacement_minutes=replacement, earliest_start=_earliest(doc.get("earliest_start"), where),
        warnings=tuple(warnings),
    )


# Every field of a JobSpec in order with its default (None for those without one, which new_job requires).
_JOB_FIELDS_DEFAULTS: dict[str, Any] = {f.name: None if f.default is MISSING else f.default for f in fields(JobSpec)}
_JOB_REQUIRED = frozenset(f.name for f in fields(JobSpec) if f.default is MISSING)
if any(f.default_factory is not MISSING for f in fields(JobSpec)) or hasattr(JobSpec, "__post_init__"):
    raise TypeError("new_job copies defaults and runs no __post_init__: JobSpec has a default_factory or one")


def new_job(**values: Any) -> JobSpec:
    """``JobSpec(**values)`` without the frozen dataclass's ``__init__`` (one ``object.__setattr__`` per field, ~50
    of them: a sixth of :func:`parse_job`, which the dispatcher runs per Workload shape of a pass): the same fields in
    the same order in the instance ``__dict__`` (the defaults for those not given), so equal, hashed and shown alike.
    TypeError for a name that is not a field, or a field without a default left out."""
    if not values.keys() <= _JOB_FIELDS_DEFAULTS.keys() or not values.keys() >= _JOB_REQUIRED:
        raise TypeError(f"new_job: unknown fields {sorted(values.keys() - _JOB_FIELDS_DEFAULTS.keys())}, missing "
                        f"{sorted(_JOB_REQUIRED - values.keys())}")
    job: JobSpec = object.__new__(JobSpec)
    d = job.__dict__
    d.update(_JOB_FIELDS_DEFAULTS)
    d.update(values)
    return job


def job_with(job: JobSpec, **changes: Any) -> JobSpec:
    """``dataclasses.replace(job, **changes)`` without its introspection and the generated ``__init__`` (as
    :func:`new_job`; the dispatcher copies jobs per Workload): the same fields in the same order, ``changes`` set. The
    caller vouches for the values (a name and size parse_job's own checks passed). TypeError for a name that is not
    a field."""
    if not changes.keys() <= _JOB_FIELDS_DEFAULTS.keys():
        raise TypeError(f"job_with: unknown fields {sorted(changes.keys() - _JOB_FIELDS_DEFAULTS.keys())}")
    copy: JobSpec = object.__new__(JobSpec)
    d = copy.__dict__
    d.update(job.__dict__)
    d.update(changes)
    return copy


def _job_label(doc: Any, index: int) -> str:
    """How a batch's error names a job: by its name (``jobs[train-7b].hours``) when it has a plain one, else by
    its place in the list, from 0 (``jobs[5].hours``)."""
    name = doc.get("name") if isinstance(doc, Mapping) else None
    if isinstance(name, str) and _LABEL.fullmatch(name.strip()) and not name.strip().isdigit():
        return name.strip()
    return str(index)


_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


def _earliest(value: Any, where: str) -> float | str | None:
    """``earliest_start``: hours from --now (a number >= 0) or an ISO-8601 time (kept as text: the time it is
    read against, --now, is the command's)."""
    if value is None:
        return None
    if isinstance(value, str):
        from placement.model.reservations import parse_time

        parse_time(value, f"{where}earliest_start", "", blank=", or a number of hours from --now")
        return value.strip()
    if hasattr(value, "isoformat"):  # YAML reads an unquoted timestamp as a datetime
        return str(value.isoformat())
    return _number(value, f"{where}earliest_start", maximum=MAX_HOURS)


def parse_batch(doc: Any) -> tuple[JobSpec, ...]:
    """A batch file: a mapping with a ``jobs:`` list of job specs; job names must be unique."""
    if not isinstance(doc, Mapping) or not isinstance(doc.get("jobs"), list) or not doc["jobs"]:
        raise InputError("jobs", "must be a non-empty list of job specs (the file is a mapping with a jobs: key)")
    _unknown_keys(doc, BATCH_FIELDS, "")
    jobs = tuple(parse_job(j, where=f"jobs[{_job_label(j, i)}].") for i, j in enumerate(doc["jobs"]))
    seen: set[str] = set()
    for i, job in enumerate(jobs):
        if job.name in seen:
            raise InputError(f"jobs[{i}].name", f"duplicate job name {job.name!r}; names must be unique")
        seen.add(job.name)
    return jobs
