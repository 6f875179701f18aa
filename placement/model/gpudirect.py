"""GKE GPUDirect versions, loaded from ``placement/data/gpudirect.yaml`` (shared with ``infra/``).

Pure data access, no cloud SDK: ``infra/`` reads the pinned installer URLs of a fabric, ``placement submit``
the RxDM sidecar image and the NCCL environment a training pod of that fabric needs.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from placement.errors import InputError
from placement.model.packaged import packaged_book

GPUDIRECT_FABRICS = ("tcpx", "tcpxo", "rdma")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
# A pinned image: a registry path and an explicit version tag (never latest) or a digest.
_IMAGE = re.compile(r"^[a-z0-9.-]+(/[a-z0-9._-]+)+(:v?[0-9][0-9A-Za-z._-]*|@sha256:[0-9a-f]{64})$")


@dataclass(frozen=True)
class Installer:
    """One of Google's manifests at one commit; ``url`` is what a cluster applies."""

    name: str
    commit: str
    path: str
    url: str


@dataclass(frozen=True)
class Fabric:
    """What a GKE GPUDirect fabric kind needs: installers on the cluster, and in each training pod the RxDM
    sidecar (``rxdm_image``, None for RDMA), ``NCCL_LIB_DIR`` and Google's env script to source before the
    user's command (None: ``nccl_env`` carries the settings)."""

    kind: str
    installers: tuple[Installer, ...]
    nccl_plugin: str
    rxdm_image: str | None
    nccl_lib_dir: str
    env_script: str | None
    nccl_env: Mapping[str, str] = field(default_factory=dict)
    source: str = ""


@dataclass(frozen=True)
class GpuDirectBook:
    """Every GPUDirect fabric kind, by the shape fabric names (``tcpx``, ``tcpxo``, ``rdma``)."""

    fabrics: Mapping[str, Fabric]

    def get(self, kind: str) -> Fabric | None:
        return self.fabrics.get(kind)


def _image(value: Any, where: str, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not _IMAGE.match(value):
        raise InputError(where, f"must be an image pinned to a version tag or digest, got {value!r}")
    return value


def parse_gpudirect(doc: Mapping[str, Any]) -> GpuDirectBook:
    """Build a :class:`GpuDirectBook` from the parsed YAML document; every field checked, named on error."""
    repo = doc.get("repository")
    if not isinstance(repo, str) or not repo.startswith("https://"):
        raise InputError("repository", "must be the https base URL of the manifests' repository")
    installers: dict[str, Installer] = {}
    for name, row in (doc.get("installers") or {}).items():
        where = f"installers.{name}"
        if not isinstance(row, Mapping):
            raise InputError(where, "must be a mapping with commit and path")
        commit, path = str(row.get("commit", "")), str(row.get("path", ""))
        if not _COMMIT.match(commit):
            raise InputError(f"{where}.commit", f"must be a full 40-digit commit SHA (not a branch), got {commit!r}")
        if not path.endswith(".yaml") or path.startswith("/") or ".." in path:
            raise InputError(f"{where}.path", f"must be a manifest path inside the repository, got {path!r}")
        installers[str(name)] = Installer(name=str(name), commit=commit, path=path,
                                          url=f"{repo.rstrip('/')}/{commit}/{path}")
    fabrics: dict[str, Fabric] = {}
    for kind, row in (doc.get("fabrics") or {}).items():
        where = f"fabrics.{kind}"
        if kind not in GPUDIRECT_FABRICS:
            raise InputError(where, f"must be one of {', '.join(GPUDIRECT_FABRICS)}")
        if not isinstance(row, Mapping):
            raise InputError(where, "must be a mapping")
        names = row.get("installers") or []
        unknown = [n for n in names if n not in installers]
        if not names or unknown:
            raise InputError(f"{where}.installers", f"must name installers listed under installers; unknown: {unknown}")
        lib_dir = row.get("nccl_lib_dir")
        if not isinstance(lib_dir, str) or not lib_dir.startswith("/"):
            raise InputError(f"{where}.nccl_lib_dir", "must be an absolute path in the pod")
        script = row.get("env_script")
        if script is not None and (not isinstance(script, str) or not script.startswith("/")):
            raise InputError(f"{where}.env_script", "must be an absolute path in the pod, or null")
        env = row.get("nccl_env") or {}
        if not isinstance(env, Mapping) or not all(isinstance(v, str) for v in env.values()):
            raise InputError(f"{where}.nccl_env", "must map NCCL variable names to strings (quote numbers)")
        if script is None and not env:
            raise InputError(f"{where}.nccl_env", "is required when the fabric has no env_script")
        fabrics[kind] = Fabric(
            kind=kind, installers=tuple(installers[n] for n in names),
            nccl_plugin=str(_image(row.get("nccl_plugin"), f"{where}.nccl_plugin")),
            rxdm_image=_image(row.get("rxdm_image"), f"{where}.rxdm_image", optional=True),
            nccl_lib_dir=lib_dir, env_script=script, nccl_env={str(k): v for k, v in env.items()},
            source=str(row.get("source") or ""))
    missing = [k for k in GPUDIRECT_FABRICS if k not in fabrics]
    if missing:
        raise InputError(f"fabrics.{missing[0]}", "is missing: every GKE GPUDirect fabric kind needs a row")
    return GpuDirectBook(fabrics=fabrics)


@functools.cache
def gpudirect_book() -> GpuDirectBook:
    """The table shipped with the package (cached; read once per process)."""
    return parse_gpudirect(packaged_book("gpudirect.yaml"))


def fabric(kind: str) -> Fabric:
    """The row of a GPUDirect fabric kind (``tcpx``, ``tcpxo``, ``rdma``); KeyError for any other."""
    row = gpudirect_book().get(kind)
    if row is None:
        raise KeyError(kind)
    return row
