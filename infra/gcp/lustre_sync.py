"""Managed Lustre as a cache of the checkpoint bucket: a CronJob on the cluster exports it to GCS.

Unlike an FSx data repository association, Managed Lustre has no standing link to a bucket: import and export
are API operations (``projects.locations.instances.exportData`` / ``importData``, Managed Lustre API v1), and
neither pulumi-gcp nor the API has a resource that repeats them. So the cluster runs one: a CronJob that, every
:data:`SCHEDULE`, exports each job's newest *complete* checkpoint (its manifest written, every file it lists at
its recorded size: :mod:`infra.gcp.lustre_export`) from ``/<job>/<step>/`` to the job's home
``gs://<bucket>/<prefix>/<job>/<step>/``; a checkpoint still being written is never copied. It reads the file
system through its own read-only claim, and only what it needs of Google Cloud:

* a Google service account (Workload Identity) with a custom role holding ``lustre.instances.exportData`` alone
  (:data:`EXPORT_PERMISSIONS`; ``roles/lustre.admin`` could delete the instance) and object metadata reads on the
  bucket (``roles/storage.objectViewer``: is a checkpoint home yet?);
* the transfer itself runs as Managed Lustre's service agent, which gets ``roles/storage.objectUser`` on the
  bucket (Managed Lustre's transfer guide). The agent exists only once the project has an instance, or once asked
  for: a ``ServiceIdentity`` for ``lustre.googleapis.com`` makes it (``services.generateServiceIdentity``) before
  the binding, so a first bring-up does not race the instance.

The image is pinned by digest (:data:`IMAGE`, the base image of the dispatcher's Dockerfile): a tag could move
under the job. A run while the previous one is still going is skipped (``concurrencyPolicy: Forbid``).

Importing (a job resuming on this cluster from a home another cluster wrote) is the trainer's side: it reads the
home directly when the cache has no newer checkpoint (docs/trainer-contract.md).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

import infra.gcp.lustre_export as lustre_export
from infra.gcp.plan import service_account_id
from infra.protect import stateful_names
from placement.model.checkpoint_volumes import volume_objects

NAMESPACE = "gpufleet-lustre-sync"
SERVICE_ACCOUNT = "lustre-sync"
CLAIM = "lustre-export-source"
MOUNT = "/checkpoints"
SCHEDULE = "*/5 * * * *"  # every five minutes: how far the home may lag the cache
# python:3.11-slim, the multi-platform index the dispatcher's image builds on (placement/dispatch/Dockerfile, which
# says how to move it); tests/infra/test_lustre_export.py keeps the two the same.
IMAGE = "python:3.11-slim@sha256:9c900dea9e8fb7e16277c179b555cc72d29a352dbc33cff48ad5a0412fd5bfc7"
# Starting a transfer, and nothing else (Managed Lustre's permission list: lustre.instances.exportData).
EXPORT_PERMISSIONS = ("lustre.instances.exportData",)
LUSTRE_SERVICE = "lustre.googleapis.com"
# What the service agent needs on the bucket to transfer in and out (Managed Lustre: transfer data to and from
# Cloud Storage, "Managed Lustre service agent permissions").
AGENT_ROLE = "roles/storage.objectUser"
# The export job's own reads of the bucket: whether a checkpoint's manifest is home yet.
HOME_CHECK_ROLE = "roles/storage.objectViewer"
# The run's source, as `python -c` takes it.
EXPORT_SCRIPT = inspect.getsource(lustre_export)


def export_role_id(cluster_name: str) -> str:
    """The custom role's ID: letters, digits, ``_`` and ``.``, 3 to 64 characters (IAM's roleId rule)."""
    return re.sub(r"[^A-Za-z0-9_.]", "_", f"{cluster_name}_lustre_export")[:64]


@dataclass(frozen=True)
class LustreSyncArgs:
    """``instance`` the Managed Lustre instance's full name (``projects/<p>/locations/<zone>/instances/<id>``);
    ``bucket`` the checkpoint bucket and ``prefix`` its checkpoint prefix; ``workload_pool_ready`` what must exist
    before a Workload Identity binding (the cluster); ``filesystem`` the stack's ``checkpointFilesystem``."""

    project: str
    cluster_name: str
    instance: pulumi.Input[str]
    bucket: pulumi.Input[str]
    prefix: str
    workload_pool_ready: Sequence[pulumi.Resource]
    labels: Mapping[str, str]
    # The stack's checkpointFilesystem output (kind lustre): the job mounts it read-only through its own claim.
    filesystem: pulumi.Input[Mapping[str, Any]]
    # gpufleet:allowReplace (its PersistentVolume is protected like every other).
    allow_replace: Sequence[str] = ()


class LustreSync(pulumi.ComponentResource):
    """The export CronJob, its Namespace and ServiceAccount, the Google service account it acts as, and the
    bucket access of the Managed Lustre service agent. Created with the cluster's Kubernetes provider (``opts``)
    and ``gcp`` (the stack's Google provider)."""

    def __init__(self, name: str, args: LustreSyncArgs, gcp_provider: pulumi.ProviderResource,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:gcp:LustreSync", name, None, opts)
        g = pulumi.ResourceOptions(parent=self, provider=gcp_provider)
        gsa = gcp.serviceaccount.Account(f"{name}-gsa", account_id=service_account_id(args.cluster_name, "lsync"),
                                         project=args.project, display_name="Managed Lustre export to GCS", opts=g)
        gsa_member = gsa.email.apply(lambda e: f"serviceAccount:{e}")
        role = gcp.projects.IAMCustomRole(
            f"{name}-export-role", project=args.project, role_id=export_role_id(args.cluster_name),
            title=f"gpufleet {args.cluster_name}: Managed Lustre export", stage="GA",
            description="Starts Managed Lustre exports to Cloud Storage; nothing else",
            permissions=list(EXPORT_PERMISSIONS), opts=g)
        gcp.projects.IAMMember(f"{name}-export", project=args.project, role=role.name, member=gsa_member, opts=g)
        gcp.storage.BucketIAMMember(f"{name}-home-check", bucket=args.bucket, role=HOME_CHECK_ROLE,
                                    member=gsa_member, opts=g)
        gcp.serviceaccount.IAMMember(
            f"{name}-wi", service_account_id=gsa.name, role="roles/iam.workloadIdentityUser",
            member=f"serviceAccount:{args.project}.svc.id.goog[{NAMESPACE}/{SERVICE_ACCOUNT}]",
            opts=pulumi.ResourceOptions(parent=self, provider=gcp_provider,
                                        depends_on=list(args.workload_pool_ready)))
        # The transfer runs as Managed Lustre's service agent: it writes the objects. The ServiceIdentity makes the
        # agent (it exists otherwise only after the project's first instance) and names it.
        self.agent = gcp.projects.ServiceIdentity(f"{name}-lustre-agent", project=args.project,
                                                  service=LUSTRE_SERVICE, opts=g)
        gcp.storage.BucketIAMMember(f"{name}-agent", bucket=args.bucket, role=AGENT_ROLE,
                                    member=self.agent.email.apply(lambda e: f"serviceAccount:{e}"), opts=g)
        labels = {"app.kubernetes.io/managed-by": "gpufleet"}
        ns = k8s.core.v1.Namespace(f"{name}-ns", metadata={"name": NAMESPACE, "labels": labels},
                                   opts=pulumi.ResourceOptions(parent=self))
        k8s.core.v1.ServiceAccount(
            f"{name}-sa", metadata={"name": SERVICE_ACCOUNT, "namespace": NAMESPACE, "labels": labels,
                                    "annotations": {"iam.gke.io/gcp-service-account": gsa.email}},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[ns]))
        # The file system, read-only, through a static volume of its own (a PersistentVolume binds one claim).
        objs = pulumi.Output.from_input(args.filesystem).apply(
            lambda fs: _readonly_volume(args.cluster_name, fs, args.project))
        pv = k8s.core.v1.PersistentVolume(
            f"{name}-pv", metadata=objs.apply(lambda o: o[0]["metadata"]), spec=objs.apply(lambda o: o[0]["spec"]),
            opts=stateful_names(args.allow_replace, f"{name}-pv", pulumi.ResourceOptions(parent=self)))
        pvc = k8s.core.v1.PersistentVolumeClaim(
            f"{name}-pvc", metadata=objs.apply(lambda o: o[1]["metadata"]), spec=objs.apply(lambda o: o[1]["spec"]),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[ns, pv]))
        uri = pulumi.Output.concat("gs://", args.bucket, "/", args.prefix, "/")
        env = [{"name": "INSTANCE", "value": args.instance}, {"name": "BUCKET", "value": args.bucket},
               {"name": "PREFIX", "value": args.prefix}, {"name": "MOUNT", "value": MOUNT}]
        # Typed Any: mypy infers a nested literal against the SDK's union of TypedDicts exponentially (it ran
        # out of 24 GiB on this one).
        spec: Any = {"schedule": SCHEDULE, "concurrencyPolicy": "Forbid", "startingDeadlineSeconds": 240,
                  "successfulJobsHistoryLimit": 1, "failedJobsHistoryLimit": 3,
                  "jobTemplate": {"spec": {"backoffLimit": 1, "activeDeadlineSeconds": 240, "template": {"spec": {
                      "serviceAccountName": SERVICE_ACCOUNT, "restartPolicy": "Never",
                      "nodeSelector": {"iam.gke.io/gke-metadata-server-enabled": "true"},
                      "volumes": [{"name": "checkpoints",
                                   "persistentVolumeClaim": {"claimName": CLAIM, "readOnly": True}}],
                      "containers": [{"name": "export", "image": IMAGE, "command": ["python", "-c", EXPORT_SCRIPT],
                                      "env": env,
                                      "volumeMounts": [{"name": "checkpoints", "mountPath": MOUNT, "readOnly": True}],
                                      # Root, to read what any job wrote; nothing it can write.
                                      "securityContext": {"allowPrivilegeEscalation": False,
                                                          "readOnlyRootFilesystem": True},
                                      "resources": {"requests": {"cpu": "50m", "memory": "64Mi"},
                                                    "limits": {"memory": "128Mi"}}}]}}}}}
        self.cron_job = k8s.batch.v1.CronJob(
            f"{name}-export", metadata={"name": "lustre-export", "namespace": NAMESPACE, "labels": labels},
            spec=spec, opts=pulumi.ResourceOptions(parent=self, depends_on=[ns, pvc]))
        self.register_outputs({"schedule": SCHEDULE, "gcsUri": uri, "image": IMAGE})


def _readonly_volume(cluster_name: str, fs: Mapping[str, Any], project: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The PersistentVolume and claim :data:`CLAIM` of the file system in :data:`NAMESPACE` (the pod mounts it
    read-only)."""
    pv, pvc = volume_objects(cluster_name, NAMESPACE, fs, project=project)
    pv["spec"] = {**pv["spec"], "claimRef": {"namespace": NAMESPACE, "name": CLAIM}}
    pvc["metadata"] = {**pvc["metadata"], "name": CLAIM}
    return pv, pvc
