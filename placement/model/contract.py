"""What ``placement submit`` writes on a job and what reads it back: the one definition both sides use. Pure,
standard library only (the trainer imports it in its pod).

Writers: :mod:`placement.fleet.manifests` and :mod:`placement.fleet.durable` (through ``placement submit``).
Readers: the hub's dispatcher (:mod:`placement.dispatch.snapshot`, :mod:`placement.dispatch.move`), ``placement
report`` (:mod:`placement.commands.report`) and the trainer (:mod:`placement.trainer.settings`, the pod's environment).

**Annotations** on the Job/JobSet (:data:`ANNOTATIONS` lists each with its unit, when it is written and who reads
it). Every job ``submit`` renders carries :data:`JOB_SPEC`; through the hub also :data:`FABRIC_GROUP` and
:data:`WORKERS`; a job whose planned worker exports a checkpoint location :data:`CHECKPOINT_HOME` and
:data:`CHECKPOINT_REGION`, which are **required together** (:data:`REQUIRED_TOGETHER`), and
:data:`CHECKPOINT_GB` only when one checkpoint's size is known (from ``checkpoint.size_gb`` or
``model.parameters_b``).

**Unknown** is absent: ``submit`` leaves out what it does not know (never ``""``, ``0`` or ``unknown``), and a
reader takes an empty value as absent too. Only the job spec is required where it is read (the dispatcher and
``report`` price the job from it; one that cannot be read is never guessed). Every other annotation is
**optional**: a reader takes a missing one as unknown, and a malformed one (a tenant writes these: it is hostile
input) as unknown with a warning naming the annotation and what it was read as; it never refuses the job for it.
An unknown checkpoint size is valid: the move of the job's progress is then priced as unknown.

**Environment** of the trainer container (:data:`ENV`): the ``GPUFLEET_*`` variables (docs/trainer-contract.md),
the torchrun-style rendezvous variables and the checkpoint storage's. Absent or empty is unknown: the trainer
takes the default this module names (:data:`RETRY_EXIT_CODE`, :data:`DEFAULT_GRACE_SECONDS`, ...).

Units: GB are 10^9 bytes, durations whole seconds, times RFC 3339 UTC (``2026-11-27T13:00:00Z``), a region
``CLOUD:REGION`` (``aws:us-east-1``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import json
import math
import re
import sys
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

# ----------------------------------------------------------------------------------------------- annotations

JOB_SPEC = "gpufleet.io/job-spec"  # the job's YAML mapping as compact JSON (fields unknown here travel along)
FABRIC_GROUP = "gpufleet.io/fabric-group"  # efa | tcpx | tcpxo | rdma | single-node (submit --via-hub)
WORKERS = "gpufleet.io/workers"  # comma-separated MultiKueueCluster names of the group (submit --via-hub)
CHECKPOINT_HOME = "gpufleet.io/checkpoint-home"  # the durable home's URI, s3://... or gs://...
CHECKPOINT_REGION = "gpufleet.io/checkpoint-region"  # where the home is: CLOUD:REGION
CHECKPOINT_GB = "gpufleet.io/checkpoint-gb"  # one checkpoint, GB (10^9 bytes); absent: unknown
PLACEMENT = "gpufleet.io/placement"  # cloud/zone/instance type/capacity of the plan (for people)
STACK = "gpufleet.io/stack"  # the stack of the chosen cluster (direct submit; for people)
POOL = "gpufleet.io/pool"  # the chosen pool (direct submit; for people)
CLUSTER = "gpufleet.io/cluster"  # on a storage object (ConfigMap, PV/PVC): the worker it is created on
# The job's progress, as the trainer publishes it (its home's gpufleet-progress.json, PROGRESS_FILE): what a move
# that cannot resume throws away (the dispatcher prices it, issue 35).
LAST_DURABLE_STEP = "gpufleet.io/last-durable-step"  # the step of the newest durable checkpoint (whole number)
STEPS_PER_HOUR = "gpufleet.io/steps-per-hour"  # training steps per wall hour measured (a number > 0)
JOB_LABEL = "gpufleet.io/job"  # label on the job and its pods: the job's name

# Annotations the home needs together: with one and not the other the home is unknown.
REQUIRED_TOGETHER: tuple[tuple[str, ...], ...] = ((CHECKPOINT_HOME, CHECKPOINT_REGION),)

CLOUDS = ("aws", "gcp")
MAX_STEP = 10**12  # far above any training run's steps, low enough that every price stays finite
MAX_STEPS_PER_HOUR = 1e9
FABRIC_GROUPS = ("efa", "tcpx", "tcpxo", "rdma", "single-node")
SINGLE_NODE = "single-node"
MAX_CHECKPOINT_GB = 1e6  # a petabyte: far above any checkpoint, low enough that every price stays finite
MAX_URI = 1024
MAX_NUMBER_TEXT = 32  # characters of a number annotation read (a longer one is malformed, never parsed)

# -------------------------------------------------------------------------------------------- environment

ENV_JOB = "GPUFLEET_JOB"
ENV_TEAM = "GPUFLEET_TEAM"
ENV_WORKLOAD = "GPUFLEET_WORKLOAD"
ENV_ACCELERATOR = "GPUFLEET_ACCELERATOR"
ENV_NODES = "GPUFLEET_NODES"
ENV_GPUS_PER_NODE = "GPUFLEET_GPUS_PER_NODE"
ENV_DATASET_URI = "GPUFLEET_DATASET_URI"
ENV_CHECKPOINT_DIR = "GPUFLEET_CHECKPOINT_DIR"
ENV_CHECKPOINT_CACHE_DIR = "GPUFLEET_CHECKPOINT_CACHE_DIR"
ENV_CHECKPOINT_DESTINATION = "GPUFLEET_CHECKPOINT_DESTINATION"
ENV_CHECKPOINT_TIER = "GPUFLEET_CHECKPOINT_TIER"
ENV_CHECKPOINT_KEEP = "GPUFLEET_CHECKPOINT_KEEP"
ENV_CHECKPOINT_INTERVAL_SECONDS = "GPUFLEET_CHECKPOINT_INTERVAL_SECONDS"
ENV_DEADLINE = "GPUFLEET_DEADLINE"
ENV_GRACE_SECONDS = "GPUFLEET_GRACE_SECONDS"
ENV_RETRY_EXIT_CODE = "GPUFLEET_RETRY_EXIT_CODE"
ENV_MAX_RESTARTS = "GPUFLEET_MAX_RESTARTS"
ENV_METRICS_PORT = "GPUFLEET_METRICS_PORT"
# Read by the reference trainer, never written by submit.
ENV_METRICS_ADDR = "GPUFLEET_METRICS_ADDR"
ENV_PEER_TIMEOUT_SECONDS = "GPUFLEET_PEER_TIMEOUT_SECONDS"
ENV_FINISHED_FILE = "GPUFLEET_FINISHED_FILE"  # set by the launcher (python -m placement.trainer.launch)
# torchrun-style rendezvous.
ENV_MASTER_ADDR = "MASTER_ADDR"
ENV_MASTER_PORT = "MASTER_PORT"
ENV_NNODES = "NNODES"
ENV_NODE_RANK = "NODE_RANK"
ENV_NPROC_PER_NODE = "NPROC_PER_NODE"
# The worker's checkpoint storage: its bucket (through the hub, from ConfigMap gpufleet-checkpoint) and the mount.
ENV_CHECKPOINT_URI = "CHECKPOINT_URI"
ENV_MOUNTED_CHECKPOINT_DIR = "CHECKPOINT_DIR"
# Federation (issue 35): a pod whose checkpoint home is in the other cloud reaches it with its own cluster's
# service-account token, exchanged there: on GKE for an AWS role (botocore's web identity provider reads these two),
# on EKS for a Google federated token (google-auth's external_account credential configuration, a mounted file).
ENV_AWS_ROLE_ARN = "AWS_ROLE_ARN"
ENV_AWS_WEB_IDENTITY_TOKEN_FILE = "AWS_WEB_IDENTITY_TOKEN_FILE"
ENV_AWS_ROLE_SESSION_NAME = "AWS_ROLE_SESSION_NAME"
ENV_GOOGLE_APPLICATION_CREDENTIALS = "GOOGLE_APPLICATION_CREDENTIALS"

# Defaults the trainer takes for an absent variable (a local run), and the values submit renders.
RETRY_EXIT_CODE = 75  # EX_TEMPFAIL (sysexits.h): "a peer is gone, restart the gang"
DEFAULT_GRACE_SECONDS = 15  # the shortest grace submit renders (GCP Spot's 30 s notice, halved by GKE)
DEFAULT_INTERVAL_SECONDS = 1800  # the interval submit renders when the plan priced none
DEFAULT_CHECKPOINT_KEEP = 3
DEFAULT_METRICS_PORT = 9400
WORKLOADS = ("llm", "diffusion", "vision", "recommendation")  # GPUFLEET_WORKLOAD (the job spec's workload)
DESTINATIONS = ("fsx", "managed-lustre", "filestore", "s3", "gcs", "local")  # GPUFLEET_CHECKPOINT_DESTINATION

Reader = Literal["dispatch", "report", "trainer", "people"]


@dataclass(frozen=True)
class Entry:
    """One annotation or variable of the contract: ``name``; ``form`` its unit or syntax; ``written`` when submit
    writes it; ``unknown`` what unknown looks like; ``readers`` who reads it; ``required`` whether a reader may
    refuse a job without it (only the job spec); ``together`` the names it is only meaningful with."""

    name: str
    form: str
    written: str
    unknown: str
    readers: tuple[Reader, ...]
    required: bool = False
    together: tuple[str, ...] = ()


ABSENT = "absent (an empty value reads the same)"

ANNOTATIONS: tuple[Entry, ...] = (
    Entry(JOB_SPEC, "the job spec's YAML mapping as compact JSON", "every job", "never unknown: required where read",
          ("dispatch", "report"), required=True),
    Entry(FABRIC_GROUP, "|".join(FABRIC_GROUPS), "--via-hub", f"{ABSENT}: any fabric", ("dispatch",)),
    Entry(WORKERS, "comma-separated MultiKueueCluster names", "--via-hub",
          f"{ABSENT}: every worker of the Workload's MultiKueueConfig", ("dispatch",)),
    Entry(CHECKPOINT_HOME, "URI (s3://bucket/path, gs://bucket/path), one line", "the planned worker exports "
          "checkpointUri", f"{ABSENT}: no home, no move priced", ("dispatch",), together=(CHECKPOINT_REGION,)),
    Entry(CHECKPOINT_REGION, "CLOUD:REGION (aws:us-east-1, gcp:us-central1)", "with checkpoint-home",
          f"{ABSENT}: the home is unknown", ("dispatch",), together=(CHECKPOINT_HOME,)),
    Entry(CHECKPOINT_GB, f"GB (10^9 bytes), a number from 0 to {MAX_CHECKPOINT_GB:g}", "with checkpoint-home, "
          "when checkpoint.size_gb or model.parameters_b gives the size",
          f"{ABSENT}: the size is unknown (a move priced as unknown)", ("dispatch",)),
    Entry(PLACEMENT, "CLOUD/ZONE/INSTANCE_TYPE/CAPACITY", "every job", ABSENT, ("people",)),
    Entry(STACK, "stack name", "direct", ABSENT, ("people",)),
    Entry(POOL, "pool name", "direct", ABSENT, ("people",)),
    Entry(CLUSTER, "MultiKueueCluster name (on storage objects)", "--via-hub", ABSENT, ("people",)),
    Entry(LAST_DURABLE_STEP, f"whole number from 0 to {MAX_STEP}", "never by submit: from the trainer's "
          "gpufleet-progress.json in the home", f"{ABSENT}: how far the job got is unknown (a move that cannot "
          "resume is priced as unknown)", ("dispatch",), together=(STEPS_PER_HOUR,)),
    Entry(STEPS_PER_HOUR, f"steps per wall hour, a number above 0 up to {MAX_STEPS_PER_HOUR:g}", "with "
          "last-durable-step", f"{ABSENT}: the lost hours are unknown", ("dispatch",), together=(LAST_DURABLE_STEP,)),
)

ENV: tuple[Entry, ...] = (
    Entry(ENV_JOB, "the job's name", "every pod", "local", ("trainer",)),
    Entry(ENV_TEAM, "namespace", "every pod", ABSENT, ("trainer",)),
    Entry(ENV_WORKLOAD, "|".join(WORKLOADS), "every pod", "llm", ("trainer",)),
    Entry(ENV_ACCELERATOR, "accelerator name", "every pod", ABSENT, ("trainer",)),
    Entry(ENV_NODES, "nodes (whole number)", "every pod", "1", ("trainer",)),
    Entry(ENV_GPUS_PER_NODE, "GPUs per node (whole number)", "every pod", ABSENT, ("trainer",)),
    Entry(ENV_DATASET_URI, "URI", "with a dataset", f"{ABSENT}: no dataset", ("trainer",)),
    Entry(ENV_CHECKPOINT_DIR, "path or URI", "with a checkpoint location", f"{ABSENT}: no checkpoints",
          ("trainer",)),
    Entry(ENV_CHECKPOINT_CACHE_DIR, "path", "with a mounted filesystem", f"{ABSENT}: no cache", ("trainer",)),
    Entry(ENV_CHECKPOINT_DESTINATION, "|".join(DESTINATIONS), "with a checkpoint home", ABSENT, ("trainer",)),
    Entry(ENV_CHECKPOINT_TIER, "MB/s per TiB", "with a checkpoint home", f"{ABSENT}: no filesystem",
          ("trainer",)),
    Entry(ENV_CHECKPOINT_KEEP, "checkpoints (whole number >= 1)", "every pod", str(DEFAULT_CHECKPOINT_KEEP),
          ("trainer",)),
    Entry(ENV_CHECKPOINT_INTERVAL_SECONDS, "seconds", "every pod", str(DEFAULT_INTERVAL_SECONDS), ("trainer",)),
    Entry(ENV_DEADLINE, "RFC 3339 UTC", "with deadline_hours", f"{ABSENT}: no deadline", ("trainer",)),
    Entry(ENV_GRACE_SECONDS, "seconds", "every pod", str(DEFAULT_GRACE_SECONDS), ("trainer",)),
    Entry(ENV_RETRY_EXIT_CODE, "exit code 1..255", "every pod", str(RETRY_EXIT_CODE), ("trainer",)),
    Entry(ENV_MAX_RESTARTS, "restarts (whole number)", "every pod", f"{ABSENT}: not said", ("trainer",)),
    Entry(ENV_METRICS_PORT, "TCP port (0: no metrics)", "every pod", str(DEFAULT_METRICS_PORT), ("trainer",)),
    Entry(ENV_METRICS_ADDR, "address", "never (the trainer's own)", "0.0.0.0", ("trainer",)),
    Entry(ENV_PEER_TIMEOUT_SECONDS, "seconds", "never (the trainer's own)", "60", ("trainer",)),
    Entry(ENV_FINISHED_FILE, "path", "never (the launcher sets it)", ABSENT, ("trainer",)),
    Entry(ENV_MASTER_ADDR, "host", "every pod", ABSENT, ("trainer",)),
    Entry(ENV_MASTER_PORT, "port", "every pod", ABSENT, ("trainer",)),
    Entry(ENV_NNODES, "nodes (whole number)", "every pod", f"{ABSENT}: {ENV_NODES}", ("trainer",)),
    Entry(ENV_NODE_RANK, "0..NNODES-1 (a JobSet pod's completion index)", "every pod", "0", ("trainer",)),
    Entry(ENV_NPROC_PER_NODE, "processes per node", "every pod", ABSENT, ("trainer",)),
    Entry(ENV_CHECKPOINT_URI, "URI of the worker's bucket", "the worker exports checkpointUri", ABSENT,
          ("trainer",)),
    Entry(ENV_MOUNTED_CHECKPOINT_DIR, "path of the mounted checkpoint volume", "with a mounted volume", ABSENT,
          ("trainer",)),
    Entry(ENV_AWS_ROLE_ARN, "IAM role ARN", "on GKE, a home in S3", f"{ABSENT}: the pod's own identity",
          ("trainer",), together=(ENV_AWS_WEB_IDENTITY_TOKEN_FILE,)),
    Entry(ENV_AWS_WEB_IDENTITY_TOKEN_FILE, "path of a projected service-account token", "with AWS_ROLE_ARN",
          ABSENT, ("trainer",), together=(ENV_AWS_ROLE_ARN,)),
    Entry(ENV_AWS_ROLE_SESSION_NAME, "session name", "with AWS_ROLE_ARN", ABSENT, ("trainer",)),
    Entry(ENV_GOOGLE_APPLICATION_CREDENTIALS, "path of an external_account credential configuration",
          "on EKS, a home in GCS", f"{ABSENT}: the pod's own identity", ("trainer",)),
)


def annotation(name: str) -> Entry:
    """The :data:`ANNOTATIONS` entry of ``name`` (KeyError when the contract has none)."""
    return _BY_NAME[name]


_BY_NAME = {e.name: e for e in (*ANNOTATIONS, *ENV)}

# --------------------------------------------------------------------------------------------- the writer


def job_spec_text(doc: Mapping[str, Any]) -> str:
    """The :data:`JOB_SPEC` value: the job's YAML mapping as compact JSON, keys sorted (fields this version does
    not know travel along; a value JSON has no form for, such as a date, as its text)."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str)


def number_text(value: float) -> str:
    """A number annotation's text, to 15 significant digits (``140.5``, ``980``, ``9.8``): reads back within
    10^-14 of ``value``."""
    return f"{float(value):.15g}"


def region_text(cloud: str, region: str) -> str:
    """The :data:`CHECKPOINT_REGION` value, ``aws:us-east-1``."""
    return f"{cloud}:{region}"


def checkpoint_annotations(home: str | None, cloud: str, region: str, gb: float | None) -> dict[str, str]:
    """The ``gpufleet.io/checkpoint-*`` annotations of a job homed at ``home`` (None: no home, none written) in
    ``cloud``/``region``, one checkpoint ``gb`` GB (None: unknown, :data:`CHECKPOINT_GB` left out)."""
    if not home:
        return {}
    out = {CHECKPOINT_HOME: home, CHECKPOINT_REGION: region_text(cloud, region)}
    if gb is not None:
        out[CHECKPOINT_GB] = number_text(gb)
    return out


def workers_text(keys: Iterable[str]) -> str:
    """The :data:`WORKERS` value: the group's MultiKueueCluster names, comma-separated."""
    return ",".join(keys)


def deadline_text(when: dt.datetime) -> str:
    """``GPUFLEET_DEADLINE``: ``when`` (aware) as RFC 3339 UTC to the second, ``2026-11-27T13:00:00Z``."""
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def tier_text(tier: float) -> str:
    """``GPUFLEET_CHECKPOINT_TIER``: MB/s per TiB (left out when there is no filesystem: unknown)."""
    return f"{tier:g}"


# --------------------------------------------------------------------------------------------- the readers

_REGION = re.compile(r"[a-z][a-z0-9-]{0,62}")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_GROUP = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def _given(annotations: Mapping[str, Any], name: str) -> Any:
    """The value of ``name``, None when absent or empty (the contract's unknown)."""
    value = annotations.get(name)
    return None if value is None or value == "" else value


def _shown(value: Any) -> str:
    """A tenant's value in a warning: its first 40 characters, or its type (never the data at length)."""
    if isinstance(value, str):
        return repr(value[:40]) + ("..." if len(value) > 40 else "")
    return f"a {type(value).__name__}"


def read_job_spec_text(value: Any) -> tuple[dict[str, Any] | None, str | None]:
    """``(document, None)`` from a :data:`JOB_SPEC` value, or ``(None, why)``: not a string, not JSON (or nested
    too deeply to read), not a JSON object. Never raises. The fields themselves are the job spec parser's."""
    if not isinstance(value, str):
        return None, f"{JOB_SPEC}: not a string"
    # A text opening with as many '[' as the recursion limit is refused as nested too deeply without parsing it: on
    # CPython 3.11 json.loads refuses it so after nesting as deep (hundreds of thousands of instructions, on every
    # dispatcher pass that reads it); a later CPython, whose C parser has a limit of its own, may read a shallower one
    # as a list, which is no job spec either.
    limit = sys.getrecursionlimit()
    if value[:1] == "[" and value.count("[", 0, limit) == limit:
        return None, f"{JOB_SPEC}: nested too deeply to read"
    try:
        doc = json.loads(value)
    except RecursionError:
        return None, f"{JOB_SPEC}: nested too deeply to read"
    except ValueError as exc:
        return None, f"{JOB_SPEC}: not JSON ({str(exc)[:80]})"
    if not isinstance(doc, dict):
        return None, f"{JOB_SPEC}: not a JSON object"
    return doc, None


def read_gb(value: Any) -> tuple[float | None, str | None]:
    """``(GB, None)`` from a :data:`CHECKPOINT_GB` value, ``(None, None)`` when absent (unknown), or ``(None, why)``
    when malformed (read as unknown)."""
    if value is None or value == "":
        return None, None
    size = math.nan
    if isinstance(value, str) and len(value) <= MAX_NUMBER_TEXT:
        try:  # not contextlib.suppress: read once per Workload of every dispatcher pass, and ~5x dearer
            size = float(value)
        except ValueError:
            size = math.nan
    if not math.isfinite(size) or not 0 <= size <= MAX_CHECKPOINT_GB:
        return None, (f"{CHECKPOINT_GB}: {_shown(value)} is not a number of GB from 0 to {MAX_CHECKPOINT_GB:g} "
                      "(such as 140.5); read as unknown")
    return size, None


@dataclass(frozen=True)
class Checkpoint:
    """A job's checkpoint home as its annotations name it: ``home`` (URI) in ``cloud``/``region``, one checkpoint
    ``gb`` GB (None: unknown)."""

    home: str
    cloud: str
    region: str
    gb: float | None = None


def read_checkpoint(annotations: Mapping[str, Any], regions: Mapping[str, Collection[str]] | None = None
                    ) -> tuple[Checkpoint | None, tuple[str, ...]]:
    """The job's :class:`Checkpoint` from its annotations (None: it names no home, or not one that can be read) and
    the warnings of what was read as unknown, each starting with the annotation's name. ``regions`` (cloud ->
    region names) refuses a region no cloud has. Hostile data: never raises, never refuses the job.

    The home needs :data:`CHECKPOINT_HOME` and :data:`CHECKPOINT_REGION` together; :data:`CHECKPOINT_GB` is
    optional (absent: the size is unknown)."""
    get = annotations.get
    home, where, gb = get(CHECKPOINT_HOME), get(CHECKPOINT_REGION), get(CHECKPOINT_GB)
    if home is None and where is None and gb is None:  # the common case of a job without a home: at once
        return None, ()
    home, where, gb = (None if home == "" else home), (None if where == "" else where), (None if gb == "" else gb)
    if home is None and where is None:
        extra = (f"{CHECKPOINT_GB}: without {CHECKPOINT_HOME}; ignored",) if gb is not None else ()
        return None, extra
    unknown = "the checkpoint home is unknown (a move of the job's progress is not priced)"
    if home is None or where is None:
        missing, given = (CHECKPOINT_HOME, CHECKPOINT_REGION) if home is None else (CHECKPOINT_REGION, CHECKPOINT_HOME)
        return None, (f"{missing}: missing beside {given} (placement submit writes both); {unknown}",)
    if not isinstance(home, str) or len(home) > MAX_URI or any(map(str.isspace, home)):
        return None, (f"{CHECKPOINT_HOME}: {_shown(home)} is not a URI such as s3://bucket/path (one line, at most "
                      f"{MAX_URI} characters); {unknown}",)
    problem = _region_problem(where, regions)
    if problem:
        return None, (f"{CHECKPOINT_REGION}: {problem}; {unknown}",)
    cloud, _, region = str(where).partition(":")
    size, why = read_gb(gb)
    return Checkpoint(home=home, cloud=cloud, region=region, gb=size), ((why,) if why else ())


def _region_problem(value: Any, regions: Mapping[str, Collection[str]] | None) -> str | None:
    problem = _region_syntax(value) if isinstance(value, str) else (
        f"{_shown(value)} is not CLOUD:REGION, such as aws:us-east-1 or gcp:us-central1")
    if problem is None and regions is not None:
        cloud, _, region = value.partition(":")
        if region not in regions.get(cloud, ()):
            return f"{_shown(region)} is not a known {cloud} region (placement/data/regions.yaml)"
    return problem


@functools.lru_cache(maxsize=1024)  # a fleet has few regions; tenants write these, so bounded
def _region_syntax(value: str) -> str | None:
    if value.count(":") != 1:
        return f"{_shown(value)} is not CLOUD:REGION, such as aws:us-east-1 or gcp:us-central1"
    cloud, _, region = value.partition(":")
    if cloud not in CLOUDS:
        return f"cloud {_shown(cloud)} is not one of {', '.join(CLOUDS)}"
    if not _REGION.fullmatch(region):
        return f"{_shown(region)} is not a region name"
    return None


def read_fabric_group(value: Any) -> tuple[str | None, str | None]:
    """``(group, None)`` from a :data:`FABRIC_GROUP` value (a name this version does not know is kept: no pool has
    that fabric), ``(None, None)`` when absent, ``(None, why)`` when malformed (read as absent: any fabric)."""
    if value is None or value == "" or value in FABRIC_GROUPS:
        return value or None, None
    if not isinstance(value, str) or not _GROUP.fullmatch(value):
        return None, f"{FABRIC_GROUP}: {_shown(value)} is not a fabric group ({', '.join(FABRIC_GROUPS)}); ignored"
    return value, None


def read_workers(value: Any) -> tuple[tuple[str, ...] | None, str | None]:
    """``(names, None)`` from a :data:`WORKERS` value, ``(None, None)`` when absent, ``(None, why)`` when
    malformed (read as absent: the Workload's MultiKueueConfig alone says which workers may take it)."""
    if value is None or value == "":
        return None, None
    names = _worker_names(value) if isinstance(value, str) and len(value) <= 64 * 1024 else None
    if names is not None:
        return names, None
    return None, (f"{WORKERS}: {_shown(value)} is not a comma-separated list of MultiKueueCluster names; ignored "
                  "(any worker of the Workload's MultiKueueConfig)")


@functools.lru_cache(maxsize=1024)  # Workloads of one group repeat the same list; tenants write these: bounded
def _worker_names(value: str) -> tuple[str, ...] | None:
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    if names and all(len(n) <= 253 and _DNS_SUBDOMAIN.fullmatch(n) for n in names):
        return names
    return None


PROGRESS_FILE = "gpufleet-progress.json"  # in the home: the trainer's progress (:func:`progress_doc`)
PROGRESS_SCHEMA = "gpufleet.progress/v1"


@dataclass(frozen=True)
class Progress:
    """How far a job got, as the trainer publishes it: ``last_step`` the step of its newest durable checkpoint,
    ``steps_per_hour`` training steps per wall hour (None: unknown). ``hours`` is the work a restart from step 0
    throws away: ``last_step / steps_per_hour`` (None when the rate is unknown)."""

    last_step: int
    steps_per_hour: float | None = None

    @property
    def hours(self) -> float | None:
        if self.last_step == 0:
            return 0.0
        return None if self.steps_per_hour is None else self.last_step / self.steps_per_hour


def progress_annotations(progress: Progress) -> dict[str, str]:
    """The :data:`LAST_DURABLE_STEP` / :data:`STEPS_PER_HOUR` annotations of ``progress`` (the rate left out when
    unknown)."""
    out = {LAST_DURABLE_STEP: str(progress.last_step)}
    if progress.steps_per_hour is not None:
        out[STEPS_PER_HOUR] = number_text(progress.steps_per_hour)
    return out


def progress_doc(progress: Progress, job: str) -> dict[str, Any]:
    """The trainer's :data:`PROGRESS_FILE`: the schema, the job and its annotations' values (the same text)."""
    return {"schema": PROGRESS_SCHEMA, "job": job, **progress_annotations(progress)}


def read_progress(annotations: Mapping[str, Any]) -> tuple[Progress | None, tuple[str, ...]]:
    """The job's :class:`Progress` from its annotations (or from a :func:`progress_doc`, whose keys are the same),
    None when it names none or a malformed step, and the warnings of what was read as unknown. Hostile data:
    never raises."""
    step, rate = _given(annotations, LAST_DURABLE_STEP), _given(annotations, STEPS_PER_HOUR)
    if step is None and rate is None:
        return None, ()
    if step is None:
        return None, (f"{STEPS_PER_HOUR}: without {LAST_DURABLE_STEP}; ignored",)
    last = -1
    if isinstance(step, str) and len(step) <= MAX_NUMBER_TEXT and step.isdigit():
        last = int(step)
    if not 0 <= last <= MAX_STEP:
        return None, (f"{LAST_DURABLE_STEP}: {_shown(step)} is not a whole number of steps from 0 to {MAX_STEP}; "
                      "read as unknown (a move that cannot resume is priced as unknown)",)
    if rate is None:
        return Progress(last), ()
    per_hour = math.nan
    if isinstance(rate, str) and len(rate) <= MAX_NUMBER_TEXT:
        with contextlib.suppress(ValueError):
            per_hour = float(rate)
    if not math.isfinite(per_hour) or not 0 < per_hour <= MAX_STEPS_PER_HOUR:
        return Progress(last), (f"{STEPS_PER_HOUR}: {_shown(rate)} is not a number of steps per hour above 0 (such "
                                "as 1200); read as unknown",)
    return Progress(last, per_hour), ()


class JobAnnotations(NamedTuple):
    """What a job's annotations say, read by :func:`read_annotations`: ``job_spec`` (the document; None when
    absent or unreadable, ``job_spec_error`` then says why when it was there), ``group``, ``workers``,
    ``checkpoint`` (None: unknown), ``progress`` (None: unknown) and ``warnings``: each optional annotation that
    was malformed and read as unknown, starting with its name. (A named tuple: one is made per Workload of every
    dispatcher pass.)"""

    job_spec: dict[str, Any] | None = None
    job_spec_error: str | None = None
    group: str | None = None
    workers: tuple[str, ...] | None = None
    checkpoint: Checkpoint | None = None
    warnings: tuple[str, ...] = ()
    progress: Progress | None = None


def read_annotations(annotations: Any, regions: Mapping[str, Collection[str]] | None = None, *,
                     job_spec: bool = True) -> JobAnnotations:
    """Every annotation the dispatcher and ``report`` read from a job, as :class:`JobAnnotations`. Hostile data:
    never raises; only an unreadable job spec is an error, every other problem a warning. ``job_spec`` False: all
    but the job spec (the caller read it already), ``job_spec`` and ``job_spec_error`` then None."""
    if type(annotations) is not dict and not isinstance(annotations, Mapping):
        return JobAnnotations(warnings=("metadata.annotations: not a mapping; read as none",)
                              if annotations is not None else ())
    spec = _given(annotations, JOB_SPEC) if job_spec else None
    doc, error = read_job_spec_text(spec) if spec is not None else (None, None)
    group, why_group = read_fabric_group(annotations.get(FABRIC_GROUP))
    workers, why_workers = read_workers(annotations.get(WORKERS))
    checkpoint, warnings = read_checkpoint(annotations, regions)
    if why_group or why_workers:
        warnings = tuple(w for w in (why_group, why_workers) if w) + warnings
    progress, why_progress = read_progress(annotations) if LAST_DURABLE_STEP in annotations or \
        STEPS_PER_HOUR in annotations else (None, ())
    return JobAnnotations(doc, error, group, workers, checkpoint, warnings + why_progress, progress)


def parse_deadline(text: str) -> dt.datetime:
    """``GPUFLEET_DEADLINE`` as an aware time; ValueError naming the fix when it is not RFC 3339 with a zone."""
    try:
        when = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text.strip()!r} is not RFC 3339; set it like 2026-11-27T13:00:00Z") from None
    if when.tzinfo is None:
        raise ValueError(f"{text.strip()!r} has no time zone; end it with Z")
    return when
