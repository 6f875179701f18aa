"""The stack's checkpoint filesystem in every training namespace, as the claim ``gpufleet-checkpoints``.

The objects come from :func:`placement.model.checkpoint_volumes.volume_objects` (the same code ``placement submit``
knows the claim by). Their CSI drivers are installed by the cloud's stack: the FSx CSI driver Helm release
(:mod:`infra.aws.fsx_csi`) on AWS, the GKE Managed Lustre / Filestore CSI add-ons on GCP
(``infra/gcp/cluster.py``, enabled for the configured kind).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from pulumi import ResourceOptions

from infra.config import StackConfig
from infra.protect import stateful, taken_over
from placement.model.checkpoint_volumes import CLAIM_NAME, volume_objects


@dataclass(frozen=True)
class CheckpointVolumesArgs:
    """``filesystem`` is the stack's ``checkpointFilesystem`` output (a dict with ``kind``); ``namespaces`` the
    Namespace resources to put a claim in (their names are ``cfg.training_namespaces``)."""

    cfg: StackConfig
    filesystem: pulumi.Input[Mapping[str, Any]]
    namespaces: Sequence[k8s.core.v1.Namespace] = field(default_factory=tuple)


class CheckpointVolumes(pulumi.ComponentResource):
    """Per training namespace: a static PersistentVolume on the checkpoint filesystem and the claim
    ``gpufleet-checkpoints`` bound to it (``claim_name``)."""

    claim_name: str

    def __init__(self, name: str, args: CheckpointVolumesArgs, opts: ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:k8s:CheckpointVolumes", name, None, opts)
        cfg = args.cfg
        provider = opts.provider if opts else None
        fs = pulumi.Output.from_input(args.filesystem)
        self.claim_name = CLAIM_NAME
        self.volumes: list[k8s.core.v1.PersistentVolume] = []
        self.claims: list[k8s.core.v1.PersistentVolumeClaim] = []
        def render(namespace: str) -> pulumi.Output[tuple[dict[str, Any], dict[str, Any]]]:
            return fs.apply(lambda f: volume_objects(cfg.cluster_name, namespace, f, project=cfg.project))

        for ns, namespace in zip(cfg.training_namespaces, args.namespaces, strict=True):
            objs = render(ns)
            # An older `placement submit` created these two: the stack takes them over, forcing its fields
            # over the other field manager's (infra.protect.taken_over).
            pv = k8s.core.v1.PersistentVolume(
                f"{name}-pv-{ns}", metadata=taken_over(objs.apply(lambda o: o[0]["metadata"])),
                spec=objs.apply(lambda o: o[0]["spec"]),
                # Retain in Kubernetes terms too: the PV is never what deletes checkpoint data.
                opts=stateful(cfg, f"{name}-pv-{ns}", ResourceOptions(parent=self, provider=provider)))
            self.volumes.append(pv)
            self.claims.append(k8s.core.v1.PersistentVolumeClaim(
                f"{name}-pvc-{ns}", metadata=taken_over(objs.apply(lambda o: o[1]["metadata"])),
                spec=objs.apply(lambda o: o[1]["spec"]),
                # A claim is bound at once to its pre-created volume; nothing to wait for beyond that.
                opts=ResourceOptions(parent=self, provider=provider, depends_on=[namespace, pv])))
        self.register_outputs({"claimName": self.claim_name})
