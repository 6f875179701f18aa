"""``gpufleet:checkpoint`` and ``gpufleet:training``: where checkpoints are kept and who may reach them.

Owns :class:`CheckpointConfig` (the durable bucket: key prefix, versions kept, KMS key), its optional fast
filesystem tier next to the GPUs (:class:`FilesystemConfig`: FSx for Lustre sizes the API accepts, GCP Lustre or
Filestore), and :class:`TrainingConfig`, the Kubernetes service account training pods run as, which the stack
binds to the checkpoint identity (AWS IRSA role, GCP Workload Identity).

May import: the standard library, :mod:`placement.errors` and :mod:`infra.config.fields`; no Pulumi SDK.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from infra.config.fields import _NAME, ConfigError, _int, _key, _mapping, _opt_str, _str, _unknown_keys
from placement.errors import shown

# The FSx for Lustre deployment type the stack creates (infra/aws/checkpoint.py), SSD storage.
FSX_DEPLOYMENT_TYPE = "PERSISTENT_2"
# Storage capacities FSx for Lustre accepts at create, per SSD deployment type (CreateFileSystem
# StorageCapacity, FSx API reference): the listed first sizes, then multiples of the step, in GB (GiB).
FSX_SSD_CAPACITY: Mapping[str, tuple[tuple[int, ...], int]] = {
    "PERSISTENT_2": ((1200, 2400), 2400),
    "PERSISTENT_1": ((1200, 2400), 2400),
    "SCRATCH_2": ((1200, 2400), 2400),
    "SCRATCH_1": ((1200, 2400), 3600),
}


def fsx_capacity_valid(deployment_type: str, capacity_gb: int) -> bool:
    """Whether FSx for Lustre creates an SSD file system of ``deployment_type`` with ``capacity_gb`` GB."""
    first, step = FSX_SSD_CAPACITY[deployment_type]
    return capacity_gb in first or (capacity_gb > 0 and capacity_gb % step == 0)


def fsx_valid_sizes(deployment_type: str) -> str:
    """The sizes of :func:`fsx_capacity_valid` in words, for error messages."""
    first, step = FSX_SSD_CAPACITY[deployment_type]
    after = [n * step for n in range(1, 4) if n * step > max(first)][:2]
    return f"{', '.join(map(str, first))}, then multiples of {step} GB ({', '.join(map(str, after))}, ...)"


@dataclass(frozen=True)
class FilesystemConfig:
    """Fast checkpoint tier next to the GPUs: AWS ``fsx`` (Lustre), GCP ``lustre`` or ``filestore``."""

    kind: Literal["none", "fsx", "lustre", "filestore"] = "none"
    capacity_gb: int = 1200
    throughput_mbps_per_tib: int = 250


@dataclass(frozen=True)
class CheckpointConfig:
    """Durable checkpoint bucket plus the optional filesystem tier."""

    prefix: str = "checkpoints"
    noncurrent_version_days: int = 30
    soft_delete_days: int = 7
    kms_key: str | None = None
    filesystem: FilesystemConfig = field(default_factory=FilesystemConfig)


@dataclass(frozen=True)
class TrainingConfig:
    """The Kubernetes service account training pods run as, bound to the stack's checkpoint identity
    (AWS IRSA role, GCP Workload Identity service account).

    The stack creates ServiceAccount ``service_account`` in every namespace of
    :attr:`StackConfig.training_namespaces`: each Kueue team namespace (``kueue.teams``, where the
    LocalQueues are and ``placement submit`` puts jobs) plus ``namespace``. ``namespace`` has no
    LocalQueue, so GPU jobs are not admitted there; it is for tools that need the checkpoints without
    going through Kueue (conversion, evaluation, notebooks). The cloud identity trusts exactly these
    ``<namespace>/<service_account>`` pairs and nothing else.
    """

    namespace: str = "training"
    service_account: str = "trainer"


def parse_checkpoint(value: Any, cloud: str, gpu_zone: str | None) -> CheckpointConfig:
    """``gpufleet:checkpoint`` of a ``cloud`` stack: the bucket and the filesystem tier (which needs ``gpu_zone``,
    the stack's ``gpufleet:gpuZone``)."""
    ck = _mapping(value, "checkpoint")
    _unknown_keys(ck, {"prefix", "noncurrentVersionDays", "softDeleteDays", "kmsKey", "filesystem"}, "checkpoint")
    fs = _mapping(ck.get("filesystem"), "checkpoint.filesystem")
    _unknown_keys(fs, {"kind", "capacityGb", "throughputMbpsPerTib"}, "checkpoint.filesystem")
    fs_kind = _str(fs.get("kind", "none"), "checkpoint.filesystem.kind")
    fs_allowed = ("none", "fsx") if cloud == "aws" else ("none", "lustre", "filestore")
    if fs_kind not in fs_allowed:
        raise ConfigError(_key("checkpoint.filesystem.kind"), f"must be one of {', '.join(fs_allowed)} on {cloud}")
    if fs_kind != "none" and not gpu_zone:
        raise ConfigError(
            _key("gpuZone"),
            f"is required when checkpoint.filesystem.kind is {fs_kind} (the filesystem lives in the GPU zone)",
        )
    capacity_gb = _int(fs.get("capacityGb", 1200), "checkpoint.filesystem.capacityGb", minimum=1)
    if fs_kind == "fsx" and not fsx_capacity_valid(FSX_DEPLOYMENT_TYPE, capacity_gb):
        raise ConfigError(_key("checkpoint.filesystem.capacityGb"),
                          f"{capacity_gb} is not a size FSx for Lustre {FSX_DEPLOYMENT_TYPE} SSD accepts: "
                          f"{fsx_valid_sizes(FSX_DEPLOYMENT_TYPE)}")
    throughput = _int(fs.get("throughputMbpsPerTib", 250), "checkpoint.filesystem.throughputMbpsPerTib", minimum=1)
    if fs_kind == "fsx" and throughput not in (125, 250, 500, 1000):
        raise ConfigError(_key("checkpoint.filesystem.throughputMbpsPerTib"), "must be 125, 250, 500 or 1000")
    prefix = _str(ck.get("prefix", "checkpoints"), "checkpoint.prefix").strip("/")
    # Object keys are at most 1024 bytes (S3, GCS); the prefix leaves room for the run and step names.
    if not prefix or len(prefix.encode()) > 256 or prefix != prefix.strip():
        raise ConfigError(_key("checkpoint.prefix"), "must be a key prefix such as checkpoints: at most 256 bytes, "
                                                     f"no leading or trailing spaces, got {shown(prefix)}")
    checkpoint = CheckpointConfig(
        prefix=prefix,
        noncurrent_version_days=_int(
            ck.get("noncurrentVersionDays", 30), "checkpoint.noncurrentVersionDays", minimum=1
        ),
        soft_delete_days=_int(ck.get("softDeleteDays", 7), "checkpoint.softDeleteDays", minimum=0),
        kms_key=_opt_str(ck.get("kmsKey"), "checkpoint.kmsKey"),
        filesystem=FilesystemConfig(
            kind=fs_kind,  # type: ignore[arg-type]
            capacity_gb=capacity_gb,
            throughput_mbps_per_tib=throughput,
        ),
    )
    return checkpoint


def parse_training(value: Any) -> TrainingConfig:
    """``gpufleet:training``: the namespace and service account training pods run as (see :class:`TrainingConfig`)."""
    tr = _mapping(value, "training")
    _unknown_keys(tr, {"namespace", "serviceAccount"}, "training")
    training = TrainingConfig(
        namespace=_str(tr.get("namespace", "training"), "training.namespace"),
        service_account=_str(tr.get("serviceAccount", "trainer"), "training.serviceAccount"),
    )
    # Both name Kubernetes objects (a Namespace, a ServiceAccount) and appear in IAM subjects.
    if not _NAME.fullmatch(training.namespace):
        raise ConfigError(_key("training.namespace"), f"{shown(training.namespace)} is not a valid namespace name")
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", training.service_account):
        raise ConfigError(
            _key("training.serviceAccount"),
            f"{shown(training.service_account)} is not a valid service account name (a DNS-1123 label)",
        )
    return training
