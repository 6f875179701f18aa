"""The checkpoint filesystem as a Kubernetes volume: a static PersistentVolume bound to the claim
``gpufleet-checkpoints`` in one namespace. Pure: the stack's ``checkpointFilesystem`` output in, objects out.

Every worker stack with a filesystem tier creates these in each training namespace (``infra/k8s/storage.py``),
and ``placement submit`` mounts the claim by name. One PV per namespace, because a PV binds exactly one claim;
all of them point at the same filesystem. ``storageClassName: ""`` on both sides keeps the binding static: no
provisioner is asked to create a second filesystem. The CSI fields follow each driver's own static-provisioning
example and source:

* FSx for Lustre (``fsx.csi.aws.com``, kubernetes-sigs/aws-fsx-csi-driver): ``volumeHandle`` the file system ID,
  ``volumeAttributes`` ``dnsname`` and ``mountname``; mount option ``flock``.
* GKE Managed Lustre (``lustre.csi.storage.gke.io``): ``volumeHandle`` ``<project>/<zone>/<instance>``,
  ``volumeAttributes`` ``ip`` and ``filesystem`` (the node mounts ``<ip>@tcp:/<filesystem>``).
* GKE Filestore (``filestore.csi.storage.gke.io``): ``volumeHandle`` ``modeInstance/<zone>/<instance>/<share>``,
  ``volumeAttributes`` ``ip`` and ``volume`` (the share).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from placement.errors import InputError

CLAIM_NAME = "gpufleet-checkpoints"
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpufleet"}
FSX_CSI_DRIVER = "fsx.csi.aws.com"
LUSTRE_CSI_DRIVER = "lustre.csi.storage.gke.io"
FILESTORE_CSI_DRIVER = "filestore.csi.storage.gke.io"
KINDS = ("fsx", "lustre", "filestore")


def pv_name(cluster_name: str, namespace: str) -> str:
    """The PersistentVolume backing ``namespace``'s claim (cluster-scoped, so named per namespace)."""
    return f"{cluster_name}-ckpt-{namespace}"[:253]


def sub_path(fs: Mapping[str, Any]) -> str:
    """Where checkpoints live inside the volume: FSx's data-repository path (files there reach the bucket),
    else the volume's root."""
    return str(fs.get("path") or "").strip("/") if fs.get("kind") == "fsx" else ""


def _need(fs: Mapping[str, Any], key: str, where: str) -> str:
    value = fs.get(key)
    if not value:
        raise InputError(f"{where}.{key}", f"is required to mount a {fs.get('kind')} checkpoint filesystem")
    return str(value)


def _csi(fs: Mapping[str, Any], project: str | None, where: str) -> tuple[dict[str, Any], list[str]]:
    """The PV's ``csi`` source and mount options for filesystem output ``fs``."""
    kind = fs.get("kind")
    if kind == "fsx":
        return ({"driver": FSX_CSI_DRIVER, "volumeHandle": _need(fs, "id", where),
                 "volumeAttributes": {"dnsname": _need(fs, "dnsName", where),
                                      "mountname": _need(fs, "mountName", where)}}, ["flock"])
    if kind == "lustre":
        # Managed Lustre's mount point is "<ip>@tcp:/<filesystem>".
        ip = _need(fs, "mountPoint", where).split("@", 1)[0]
        if not project:
            raise InputError(f"{where}.project", "is required to name a Managed Lustre volume")
        handle = f"{project}/{_need(fs, 'zone', where)}/{_need(fs, 'instance', where)}"
        return ({"driver": LUSTRE_CSI_DRIVER, "volumeHandle": handle,
                 "volumeAttributes": {"ip": ip, "filesystem": _need(fs, "filesystem", where)}}, [])
    if kind == "filestore":
        # Filestore's mount point is "<ip>:/<share>".
        ip, _, share = _need(fs, "mountPoint", where).partition(":/")
        if not ip or not share:
            raise InputError(f"{where}.mountPoint", f"must look like <ip>:/<share>, got {fs.get('mountPoint')!r}")
        handle = f"modeInstance/{_need(fs, 'zone', where)}/{_need(fs, 'instance', where)}/{share}"
        return ({"driver": FILESTORE_CSI_DRIVER, "volumeHandle": handle,
                 "volumeAttributes": {"ip": ip, "volume": share}}, [])
    raise InputError(f"{where}.kind", f"must be one of {', '.join(KINDS)}, got {kind!r}")


def volume_objects(cluster_name: str, namespace: str, fs: Mapping[str, Any], *, project: str | None = None,
                   where: str = "checkpointFilesystem") -> tuple[dict[str, Any], dict[str, Any]]:
    """The PersistentVolume and the PersistentVolumeClaim :data:`CLAIM_NAME` in ``namespace``, bound to each
    other, for the filesystem output ``fs`` (``kind`` fsx | lustre | filestore). ``project`` (GCP) names the
    Managed Lustre instance; ``where`` prefixes the field named in errors."""
    csi, options = _csi(fs, project, where)
    capacity_gb = fs.get("capacityGb") or 1200
    if isinstance(capacity_gb, bool) or not isinstance(capacity_gb, (int, float)) or capacity_gb <= 0:
        raise InputError(f"{where}.capacityGb", f"must be a positive number of GB, got {capacity_gb!r}")
    storage = f"{int(capacity_gb)}Gi"
    name = pv_name(cluster_name, namespace)
    spec: dict[str, Any] = {"capacity": {"storage": storage}, "volumeMode": "Filesystem",
                            "accessModes": ["ReadWriteMany"], "persistentVolumeReclaimPolicy": "Retain",
                            "storageClassName": "", "claimRef": {"namespace": namespace, "name": CLAIM_NAME},
                            "csi": csi}
    if options:
        spec["mountOptions"] = options
    pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name, "labels": dict(MANAGED_BY)},
          "spec": spec}
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": CLAIM_NAME, "namespace": namespace, "labels": dict(MANAGED_BY)},
           "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": name,
                    "resources": {"requests": {"storage": storage}}}}
    return pv, pvc
