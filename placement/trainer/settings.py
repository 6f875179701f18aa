"""What the trainer is told: the ``GPUFLEET_*`` variables ``placement submit`` sets, and the model
configuration file (``--config``). Pure: parsing and validation only, standard library only.

A bad value is a :class:`SettingsError` naming the variable (or field) and the fix; the CLI prints it on one
line and exits 2.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from placement.errors import shown
from placement.model import contract as c

# The contract's defaults (docs/trainer-contract.md), used when a variable is absent (a local run).
DEFAULT_RETRY_EXIT_CODE = c.RETRY_EXIT_CODE  # EX_TEMPFAIL
DEFAULT_GRACE_SECONDS = float(c.DEFAULT_GRACE_SECONDS)  # the shortest grace submit renders (GCP Spot)
DEFAULT_INTERVAL_SECONDS = float(c.DEFAULT_INTERVAL_SECONDS)
DEFAULT_KEEP = c.DEFAULT_CHECKPOINT_KEEP
DEFAULT_METRICS_PORT = c.DEFAULT_METRICS_PORT
DEFAULT_PEER_TIMEOUT_SECONDS = 60.0
# The longest grace period or peer timeout taken (115 days): every wait on it stays far below
# threading.TIMEOUT_MAX, and a timedelta of it is valid for torch.distributed.
MAX_SECONDS = 1e7
# BLAS and OpenMP pools: one thread per process unless the user set them. A process per GPU (torchrun) or a
# shared CPU otherwise runs a pool per process on every core: the NumPy trainer took 5-10 s for 50 steps that
# take 0.7 s with one thread (issue 38), which skews `placement profile` too.
BLAS_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
                    "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")
WORKLOADS = c.WORKLOADS


class SettingsError(ValueError):
    """A bad variable or configuration field: ``str()`` is the one-line message (names the field, the fix)."""


@dataclass(frozen=True)
class TrainerEnv:
    """The job as the pod's environment describes it (docs/trainer-contract.md#environment)."""

    job: str = "local"
    team: str = ""
    workload: str = "llm"
    accelerator: str = ""
    nodes: int = 1
    gpus_per_node: int = 0
    rank: int = 0  # this process's global rank in the gang (see ranks()); only rank 0 writes checkpoints
    world: int = 1  # processes in the gang
    local_rank: int = 0  # this process's index on its node (torchrun's LOCAL_RANK)
    local_world: int = 1  # processes on this node
    node_rank: int = 0  # this node's index in the gang
    rank_source: str = "alone"  # torchrun | NODE_RANK | JOB_COMPLETION_INDEX | alone
    checkpoint_dir: str = ""  # the durable home: a path or an s3:// / gs:// URI ("" = no checkpoints)
    checkpoint_cache_dir: str = ""  # optional fast local filesystem written first, synced to the home
    checkpoint_destination: str = ""  # fsx|managed-lustre|filestore|s3|gcs|local (a metric label)
    checkpoint_tier: str = ""  # e.g. "250" MB/s/TiB (a metric label)
    interval_s: float = DEFAULT_INTERVAL_SECONDS
    keep: int = DEFAULT_KEEP
    grace_s: float = DEFAULT_GRACE_SECONDS
    retry_exit_code: int = DEFAULT_RETRY_EXIT_CODE
    max_restarts: int | None = None
    deadline: dt.datetime | None = None
    dataset_uri: str = ""
    metrics_port: int = DEFAULT_METRICS_PORT
    metrics_addr: str = "0.0.0.0"  # noqa: S104 - a pod's metrics port is scraped from outside the pod
    peer_timeout_s: float = DEFAULT_PEER_TIMEOUT_SECONDS
    finished_file: str = ""  # set by the launcher: written after the final step
    outcome_dir: str = ""  # set by the launcher: each rank's outcome marker (placement.trainer.outcome)

    @property
    def writer(self) -> bool:
        """Whether this process writes the gang's checkpoints (global rank 0; every rank holds the same
        state)."""
        return self.rank == 0

    @property
    def destination(self) -> str:
        """The checkpoint destination label: the variable, else guessed from the home's scheme."""
        if self.checkpoint_destination:
            return self.checkpoint_destination
        scheme = self.checkpoint_dir.partition("://")[0] if "://" in self.checkpoint_dir else ""
        return {"s3": "s3", "gs": "gcs", "gcs": "gcs"}.get(scheme, "local" if self.checkpoint_dir else "")


def _int(env: Mapping[str, str], name: str, default: int | None, lo: int, hi: int | None = None) -> int | None:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    span = f"{lo}..{hi}" if hi is not None else f">= {lo}"
    # int() refuses more than 4300 digits (ValueError) before a range check could: both are the same line, and
    # the value is shown cut (a 5,000-digit value is not echoed whole).
    if len(raw) > 40 and raw.lstrip("+-").isdigit():
        raise SettingsError(f"{name}={shown(raw, 40)} is out of range; set it to {span}")
    try:
        value = int(raw)
    except ValueError:
        raise SettingsError(f"{name}={shown(raw, 40)} is not an integer; set it to a whole number {span}") from None
    if value < lo or (hi is not None and value > hi):
        raise SettingsError(f"{name}={value} is out of range; set it to {span}")
    return value


def _float(env: Mapping[str, str], name: str, default: float, lo: float, hi: float = math.inf) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    span = f"{lo:g}..{hi:g}" if hi < math.inf else f">= {lo:g}"
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name}={shown(raw, 40)} is not a number; set it to seconds, {span}") from None
    if not math.isfinite(value) or not lo <= value <= hi:
        raise SettingsError(f"{name}={shown(raw, 40)} is out of range; set it to seconds, {span}")
    return value


def retry_exit_code(env: Mapping[str, str]) -> int:
    """``GPUFLEET_RETRY_EXIT_CODE`` (1..255; 0 would make a lost peer look like success), default 75."""
    code = _int(env, "GPUFLEET_RETRY_EXIT_CODE", DEFAULT_RETRY_EXIT_CODE, 1, 255)
    assert code is not None
    return code


def grace_seconds(env: Mapping[str, str]) -> float:
    """``GPUFLEET_GRACE_SECONDS``: seconds between SIGTERM and SIGKILL, default 15 (at most
    :data:`MAX_SECONDS`)."""
    return _float(env, "GPUFLEET_GRACE_SECONDS", DEFAULT_GRACE_SECONDS, 0.0, MAX_SECONDS)


def one_blas_thread(env: Mapping[str, str]) -> dict[str, str]:
    """The variables of :data:`BLAS_THREAD_VARS` that ``env`` leaves unset (or blank), each set to ``"1"``:
    what to add to a process's environment before NumPy or PyTorch loads its BLAS."""
    return {name: "1" for name in BLAS_THREAD_VARS if not env.get(name, "").strip()}


@dataclass(frozen=True)
class Ranks:
    """Where this process stands in the gang (docs/trainer-contract.md#ranks)."""

    rank: int
    world: int
    local_rank: int
    local_world: int
    node_rank: int
    nodes: int
    source: str


def ranks(env: Mapping[str, str]) -> Ranks:
    """This process's ranks, from what the launcher in use sets, in this order:

    1. ``RANK`` and ``WORLD_SIZE`` (torchrun, and any ``torch.distributed`` ``env://`` launcher): the global
       rank and world size; ``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE`` on the node (default 0 and 1);
       ``GROUP_RANK`` (torchrun's node rank), else ``NODE_RANK``, else ``RANK // LOCAL_WORLD_SIZE``;
    2. ``NODE_RANK`` (one process per pod, as ``placement submit`` renders): rank = node rank, world =
       ``NNODES`` (else ``GPUFLEET_NODES``);
    3. ``JOB_COMPLETION_INDEX`` (an Indexed Job or a JobSet pod with nothing else): the same, from the index;
    4. none: a process alone (rank 0 of 1).
    Raises SettingsError naming the variable when a value is not a whole number or out of range."""
    nodes_set = _int(env, "NNODES", None, 1) or _int(env, "GPUFLEET_NODES", None, 1)
    if env.get("RANK", "").strip() or env.get("WORLD_SIZE", "").strip():
        world = _int(env, "WORLD_SIZE", None, 1)
        if world is None:
            raise SettingsError("RANK is set without WORLD_SIZE; set both (torchrun does) or neither")
        rank = _int(env, "RANK", 0, 0, world - 1) or 0
        local_world = _int(env, "LOCAL_WORLD_SIZE", 1, 1, world) or 1
        local_rank = _int(env, "LOCAL_RANK", 0, 0, local_world - 1) or 0
        nodes = _int(env, "GROUP_WORLD_SIZE", None, 1) or nodes_set or -(-world // local_world)
        node = _int(env, "GROUP_RANK", None, 0, nodes - 1)
        if node is None:
            node = _int(env, "NODE_RANK", None, 0, nodes - 1)
        if node is None:
            node = min(rank // local_world, nodes - 1)
        return Ranks(rank, world, local_rank, local_world, node, nodes, "torchrun")
    nodes = nodes_set or 1
    for name in ("NODE_RANK", "JOB_COMPLETION_INDEX"):
        if env.get(name, "").strip():
            node = _int(env, name, 0, 0) or 0
            if node >= nodes:
                raise SettingsError(f"{name}={node} is not below NNODES={nodes}; set {name} to 0..{nodes - 1}")
            return Ranks(node, nodes, 0, 1, node, nodes, name)
    return Ranks(0, 1, 0, 1, 0, nodes, "alone")


def from_env(env: Mapping[str, str]) -> TrainerEnv:
    """Parse the trainer's variables (absent ones take the contract's defaults). Raises SettingsError."""
    workload = env.get("GPUFLEET_WORKLOAD", "").strip() or "llm"
    if workload not in WORKLOADS:
        raise SettingsError(f"GPUFLEET_WORKLOAD={shown(workload, 40)} is unknown; set it to one of "
                            f"{', '.join(WORKLOADS)}")
    deadline = None
    raw_deadline = env.get("GPUFLEET_DEADLINE", "").strip()
    if raw_deadline:
        try:
            deadline = dt.datetime.fromisoformat(raw_deadline.replace("Z", "+00:00"))
        except ValueError:
            raise SettingsError(f"GPUFLEET_DEADLINE={shown(raw_deadline, 40)} is not RFC 3339; "
                                "set it like 2026-11-27T13:00:00Z") from None
        if deadline.tzinfo is None:
            raise SettingsError(f"GPUFLEET_DEADLINE={shown(raw_deadline, 40)} has no time zone; end it with Z")
    for name in ("GPUFLEET_CHECKPOINT_DIR", "GPUFLEET_CHECKPOINT_CACHE_DIR"):
        if "$(" in env.get(name, ""):  # Kubernetes leaves $(VAR) as is when VAR is not defined
            raise SettingsError(f"{name}={shown(env[name], 60)} has an unexpanded $(...) reference; define the "
                                "variable it names (the worker's checkpoint ConfigMap) or set a path or URI")
    r = ranks(env)
    port = _int(env, "GPUFLEET_METRICS_PORT", DEFAULT_METRICS_PORT, 0, 65535)
    keep = _int(env, "GPUFLEET_CHECKPOINT_KEEP", DEFAULT_KEEP, 1)
    return TrainerEnv(
        job=env.get("GPUFLEET_JOB", "").strip() or "local",
        team=env.get("GPUFLEET_TEAM", "").strip(),
        workload=workload,
        accelerator=env.get("GPUFLEET_ACCELERATOR", "").strip(),
        nodes=r.nodes,
        gpus_per_node=_int(env, "GPUFLEET_GPUS_PER_NODE", 0, 0) or 0,
        rank=r.rank,
        world=r.world,
        local_rank=r.local_rank,
        local_world=r.local_world,
        node_rank=r.node_rank,
        rank_source=r.source,
        checkpoint_dir=env.get("GPUFLEET_CHECKPOINT_DIR", "").strip().rstrip("/"),
        checkpoint_cache_dir=env.get("GPUFLEET_CHECKPOINT_CACHE_DIR", "").strip().rstrip("/"),
        checkpoint_destination=env.get("GPUFLEET_CHECKPOINT_DESTINATION", "").strip(),
        checkpoint_tier=env.get("GPUFLEET_CHECKPOINT_TIER", "").strip(),
        interval_s=_float(env, "GPUFLEET_CHECKPOINT_INTERVAL_SECONDS", DEFAULT_INTERVAL_SECONDS, 0.0),
        keep=keep if keep is not None else DEFAULT_KEEP,
        grace_s=grace_seconds(env),
        retry_exit_code=retry_exit_code(env),
        max_restarts=_int(env, "GPUFLEET_MAX_RESTARTS", None, 0),
        deadline=deadline,
        dataset_uri=env.get("GPUFLEET_DATASET_URI", "").strip(),
        metrics_port=port if port is not None else DEFAULT_METRICS_PORT,
        metrics_addr=env.get("GPUFLEET_METRICS_ADDR", "").strip() or "0.0.0.0",  # noqa: S104
        peer_timeout_s=_float(env, "GPUFLEET_PEER_TIMEOUT_SECONDS", DEFAULT_PEER_TIMEOUT_SECONDS, 0.1, MAX_SECONDS),
        finished_file=env.get("GPUFLEET_FINISHED_FILE", "").strip(),
        outcome_dir=env.get("GPUFLEET_OUTCOME_DIR", "").strip(),
    )


@dataclass(frozen=True)
class ModelConfig:
    """The model a run trains (``--config FILE.yaml``; docs/trainer-contract.md#model-configuration).

    A next-token MLP language model: ``vocab`` tokens embedded in ``hidden`` dimensions, ``layers`` hidden
    layers of ``hidden`` × ``hidden``, ``batch`` sequences of ``seq_len`` tokens per step, learning rate ``lr``
    (Adam). ``workload`` names the class its throughput is reported for: tokens/s for ``llm``, samples/s
    (sequences) for the others.
    """

    hidden: int = 64
    layers: int = 2
    seq_len: int = 32
    batch: int = 16
    vocab: int = 256
    lr: float = 0.01
    workload: str = ""  # "" = GPUFLEET_WORKLOAD

    @property
    def tokens_per_step(self) -> int:
        return self.batch * self.seq_len


CONFIG_SCHEMA = "gpufleet.trainer-config/v1"
_LIMITS: dict[str, tuple[int, int]] = {"hidden": (1, 65536), "layers": (0, 256), "seq_len": (2, 1 << 20),
                                       "batch": (1, 1 << 20), "vocab": (2, 1 << 22)}


def model_config(data: Any, where: str) -> ModelConfig:
    """A :class:`ModelConfig` from the parsed YAML mapping ``data`` (``where``: the file, for messages).
    Unknown fields and bad values raise SettingsError naming the field."""
    if data is None:
        return ModelConfig()
    if not isinstance(data, Mapping):
        raise SettingsError(f"{where}: the file must be a mapping of fields (hidden, layers, seq_len, batch, "
                            "vocab, lr, workload)")
    known = {f.name for f in fields(ModelConfig)} | {"schema"}
    for key in data:
        if key not in known:
            raise SettingsError(f"{where}: unknown field {shown(key, 40)}; known: {', '.join(sorted(known))}")
    schema = data.get("schema", CONFIG_SCHEMA)
    if schema != CONFIG_SCHEMA:
        raise SettingsError(f"{where}: schema {shown(schema, 40)} is not {CONFIG_SCHEMA}; set schema: {CONFIG_SCHEMA}")
    values: dict[str, Any] = {}
    for name, (lo, hi) in _LIMITS.items():
        if name in data:
            v = data[name]
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise SettingsError(f"{where}: {name}: {shown(v, 40)} is not a whole number in {lo}..{hi}; "
                                    "fix the field")
            values[name] = v
    if "lr" in data:
        lr = data["lr"]
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0 < lr < 10:
            raise SettingsError(f"{where}: lr: {shown(lr, 40)} is not a learning rate in (0, 10); fix the field")
        values["lr"] = float(lr)
    if "workload" in data:
        w = data["workload"]
        if w not in WORKLOADS:
            raise SettingsError(f"{where}: workload: {shown(w, 40)} is unknown; set one of {', '.join(WORKLOADS)}")
        values["workload"] = w
    return ModelConfig(**values)
