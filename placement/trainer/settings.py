"""What the trainer is told: the ``GPUFLEET_*`` variables ``placement submit`` sets, and the model
configuration file (``--config``). Pure: parsing and validation only, standard library only. The variables'
names, forms and defaults are :mod:`placement.model.contract`'s, which ``submit`` writes them with.

A bad value is a :class:`SettingsError` naming the variable (or field) and the fix; the CLI prints it on one
line and exits 2.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from placement.model import contract as c

# The contract's defaults (docs/trainer-contract.md), used when a variable is absent (a local run).
DEFAULT_RETRY_EXIT_CODE = c.RETRY_EXIT_CODE  # EX_TEMPFAIL
DEFAULT_GRACE_SECONDS = float(c.DEFAULT_GRACE_SECONDS)  # the shortest grace submit renders (GCP Spot)
DEFAULT_INTERVAL_SECONDS = float(c.DEFAULT_INTERVAL_SECONDS)
DEFAULT_KEEP = c.DEFAULT_CHECKPOINT_KEEP
DEFAULT_METRICS_PORT = c.DEFAULT_METRICS_PORT
DEFAULT_PEER_TIMEOUT_SECONDS = 60.0
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
    rank: int = 0  # NODE_RANK: this pod's index in the gang
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
    try:
        value = int(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw!r} is not an integer; set it to a whole number") from None
    if value < lo or (hi is not None and value > hi):
        span = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        raise SettingsError(f"{name}={value} is out of range; set it to {span}")
    return value


def _float(env: Mapping[str, str], name: str, default: float, lo: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw!r} is not a number; set it to seconds, e.g. 90") from None
    if not math.isfinite(value) or value < lo:
        raise SettingsError(f"{name}={raw} is out of range; set it to a number >= {lo:g}")
    return value


def retry_exit_code(env: Mapping[str, str]) -> int:
    """``GPUFLEET_RETRY_EXIT_CODE`` (1..255; 0 would make a lost peer look like success), default 75."""
    code = _int(env, c.ENV_RETRY_EXIT_CODE, DEFAULT_RETRY_EXIT_CODE, 1, 255)
    assert code is not None
    return code


def grace_seconds(env: Mapping[str, str]) -> float:
    """``GPUFLEET_GRACE_SECONDS``: seconds between SIGTERM and SIGKILL, default 15."""
    return _float(env, c.ENV_GRACE_SECONDS, DEFAULT_GRACE_SECONDS, 0.0)


def from_env(env: Mapping[str, str]) -> TrainerEnv:
    """Parse the trainer's variables (absent ones take the contract's defaults). Raises SettingsError."""
    workload = env.get(c.ENV_WORKLOAD, "").strip() or "llm"
    if workload not in WORKLOADS:
        raise SettingsError(f"{c.ENV_WORKLOAD}={workload!r} is unknown; set it to one of {', '.join(WORKLOADS)}")
    deadline = None
    raw_deadline = env.get(c.ENV_DEADLINE, "").strip()
    if raw_deadline:
        try:
            deadline = c.parse_deadline(raw_deadline)
        except ValueError as exc:
            raise SettingsError(f"{c.ENV_DEADLINE}={exc}") from None
    for name in (c.ENV_CHECKPOINT_DIR, c.ENV_CHECKPOINT_CACHE_DIR):
        if "$(" in env.get(name, ""):  # Kubernetes leaves $(VAR) as is when VAR is not defined
            raise SettingsError(f"{name}={env[name]!r} has an unexpanded $(...) reference; define the variable "
                                "it names (the worker's checkpoint ConfigMap) or set a path or URI")
    nodes = _int(env, c.ENV_NNODES, None, 1) or _int(env, c.ENV_NODES, 1, 1) or 1
    rank = _int(env, c.ENV_NODE_RANK, 0, 0) or 0
    if rank >= nodes:
        raise SettingsError(f"{c.ENV_NODE_RANK}={rank} is not below {c.ENV_NNODES}={nodes}; set {c.ENV_NODE_RANK} "
                            f"to 0..{nodes - 1}")
    port = _int(env, c.ENV_METRICS_PORT, DEFAULT_METRICS_PORT, 0, 65535)
    keep = _int(env, c.ENV_CHECKPOINT_KEEP, DEFAULT_KEEP, 1)
    return TrainerEnv(
        job=env.get(c.ENV_JOB, "").strip() or "local",
        team=env.get(c.ENV_TEAM, "").strip(),
        workload=workload,
        accelerator=env.get(c.ENV_ACCELERATOR, "").strip(),
        nodes=nodes,
        gpus_per_node=_int(env, c.ENV_GPUS_PER_NODE, 0, 0) or 0,
        rank=rank,
        checkpoint_dir=env.get(c.ENV_CHECKPOINT_DIR, "").strip().rstrip("/"),
        checkpoint_cache_dir=env.get(c.ENV_CHECKPOINT_CACHE_DIR, "").strip().rstrip("/"),
        checkpoint_destination=env.get(c.ENV_CHECKPOINT_DESTINATION, "").strip(),
        checkpoint_tier=env.get(c.ENV_CHECKPOINT_TIER, "").strip(),
        interval_s=_float(env, c.ENV_CHECKPOINT_INTERVAL_SECONDS, DEFAULT_INTERVAL_SECONDS, 0.0),
        keep=keep if keep is not None else DEFAULT_KEEP,
        grace_s=grace_seconds(env),
        retry_exit_code=retry_exit_code(env),
        max_restarts=_int(env, c.ENV_MAX_RESTARTS, None, 0),
        deadline=deadline,
        dataset_uri=env.get(c.ENV_DATASET_URI, "").strip(),
        metrics_port=port if port is not None else DEFAULT_METRICS_PORT,
        metrics_addr=env.get(c.ENV_METRICS_ADDR, "").strip() or "0.0.0.0",  # noqa: S104
        peer_timeout_s=_float(env, c.ENV_PEER_TIMEOUT_SECONDS, DEFAULT_PEER_TIMEOUT_SECONDS, 0.1),
        finished_file=env.get(c.ENV_FINISHED_FILE, "").strip(),
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
            raise SettingsError(f"{where}: unknown field {key!r}; known: {', '.join(sorted(known))}")
    schema = data.get("schema", CONFIG_SCHEMA)
    if schema != CONFIG_SCHEMA:
        raise SettingsError(f"{where}: schema {schema!r} is not {CONFIG_SCHEMA}; set schema: {CONFIG_SCHEMA}")
    values: dict[str, Any] = {}
    for name, (lo, hi) in _LIMITS.items():
        if name in data:
            v = data[name]
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise SettingsError(f"{where}: {name}: {v!r} is not a whole number in {lo}..{hi}; fix the field")
            values[name] = v
    if "lr" in data:
        lr = data["lr"]
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0 < lr < 10:
            raise SettingsError(f"{where}: lr: {lr!r} is not a learning rate in (0, 10); fix the field")
        values["lr"] = float(lr)
    if "workload" in data:
        w = data["workload"]
        if w not in WORKLOADS:
            raise SettingsError(f"{where}: workload: {w!r} is unknown; set one of {', '.join(WORKLOADS)}")
        values["workload"] = w
    return ModelConfig(**values)
