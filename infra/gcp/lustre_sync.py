"""Managed Lustre as a cache of the checkpoint bucket: a CronJob on the cluster exports it to GCS.

Unlike an FSx data repository association, Managed Lustre has no standing link to a bucket: import and export
are API operations (``projects.locations.instances.exportData`` / ``importData``, Managed Lustre API v1), and
neither pulumi-gcp nor the API has a resource that repeats them. So the cluster runs one: a CronJob that calls
``exportData`` every :data:`SCHEDULE` from the filesystem root to ``gs://<bucket>/<prefix>/``, so that
``/checkpoints/<job>`` in a pod reaches the job's home ``gs://<bucket>/<prefix>/<job>/``. The call is made as a
Google service account (Workload Identity) allowed to start transfers; the transfer itself runs as the Managed
Lustre service agent, which gets object access to the bucket. A run while the previous export is still going is
skipped (``concurrencyPolicy: Forbid``), and an export refused because one is running counts as done.

Importing (a job resuming on this cluster from a home another cluster wrote) is the trainer's side: it reads the
home directly when the cache has no newer checkpoint (docs/trainer-contract.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from infra.gcp.plan import service_account_id

NAMESPACE = "gpufleet-lustre-sync"
SERVICE_ACCOUNT = "lustre-sync"
SCHEDULE = "*/5 * * * *"  # every five minutes: how far the home may lag the cache
IMAGE = "python:3.12-slim"
# Starting a transfer: lustre.instances.exportData (Managed Lustre's IAM roles: roles/lustre.admin carries it).
EXPORT_ROLE = "roles/lustre.admin"
# Python, standard library only: a token from the GKE metadata server (Workload Identity), one POST, a verdict.
EXPORT_SCRIPT = r"""
import json, os, sys, urllib.error, urllib.request
meta = urllib.request.Request(
    "http://metadata.google.internal/computeMetadata/v1/instance/service-accounts/default/token",
    headers={"Metadata-Flavor": "Google"})
token = json.load(urllib.request.urlopen(meta, timeout=10))["access_token"]
body = json.dumps({"lustrePath": {"path": "/"}, "gcsPath": {"uri": os.environ["GCS_URI"]}}).encode()
req = urllib.request.Request(
    "https://lustre.googleapis.com/v1/" + os.environ["INSTANCE"] + ":exportData", data=body, method="POST",
    headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
try:
    op = json.load(urllib.request.urlopen(req, timeout=30))
    print("export started:", op.get("name"))
except urllib.error.HTTPError as exc:
    if exc.code in (409, 429):  # a transfer is already running: it carries the newest files too
        print("export skipped: a transfer is running (HTTP %d)" % exc.code)
        sys.exit(0)
    print("export failed: HTTP %d %s" % (exc.code, exc.reason), file=sys.stderr)
    sys.exit(1)
"""


@dataclass(frozen=True)
class LustreSyncArgs:
    """``instance`` the Managed Lustre instance's full name (``projects/<p>/locations/<zone>/instances/<id>``);
    ``bucket`` the checkpoint bucket and ``prefix`` its checkpoint prefix; ``workload_pool_ready`` what must exist
    before a Workload Identity binding (the cluster)."""

    project: str
    cluster_name: str
    instance: pulumi.Input[str]
    bucket: pulumi.Input[str]
    prefix: str
    workload_pool_ready: Sequence[pulumi.Resource]
    labels: Mapping[str, str]


class LustreSync(pulumi.ComponentResource):
    """The export CronJob, its Namespace and ServiceAccount, the Google service account it acts as, and the
    bucket access of the Managed Lustre service agent. Created with the cluster's Kubernetes provider (``opts``)
    and ``gcp`` (the stack's Google provider)."""

    def __init__(self, name: str, args: LustreSyncArgs, gcp_provider: pulumi.ProviderResource,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:gcp:LustreSync", name, None, opts)
        g = pulumi.ResourceOptions(parent=self, provider=gcp_provider)
        k = pulumi.ResourceOptions(parent=self)
        gsa = gcp.serviceaccount.Account(f"{name}-gsa", account_id=service_account_id(args.cluster_name, "lsync"),
                                         project=args.project, display_name="Managed Lustre export to GCS", opts=g)
        gcp.projects.IAMMember(f"{name}-export", project=args.project, role=EXPORT_ROLE,
                               member=gsa.email.apply(lambda e: f"serviceAccount:{e}"), opts=g)
        gcp.serviceaccount.IAMMember(
            f"{name}-wi", service_account_id=gsa.name, role="roles/iam.workloadIdentityUser",
            member=f"serviceAccount:{args.project}.svc.id.goog[{NAMESPACE}/{SERVICE_ACCOUNT}]",
            opts=pulumi.ResourceOptions(parent=self, provider=gcp_provider,
                                        depends_on=list(args.workload_pool_ready)))
        # The transfer runs as Managed Lustre's service agent: it writes the objects.
        project = gcp.organizations.get_project_output(project_id=args.project,
                                                       opts=pulumi.InvokeOutputOptions(parent=self,
                                                                                       provider=gcp_provider))
        gcp.storage.BucketIAMMember(
            f"{name}-agent", bucket=args.bucket, role="roles/storage.objectAdmin",
            member=project.number.apply(lambda n: f"serviceAccount:service-{n}@gcp-sa-lustre.iam.gserviceaccount.com"),
            opts=g)
        labels = {"app.kubernetes.io/managed-by": "gpufleet"}
        ns = k8s.core.v1.Namespace(f"{name}-ns", metadata={"name": NAMESPACE, "labels": labels}, opts=k)
        k8s.core.v1.ServiceAccount(
            f"{name}-sa", metadata={"name": SERVICE_ACCOUNT, "namespace": NAMESPACE, "labels": labels,
                                    "annotations": {"iam.gke.io/gcp-service-account": gsa.email}},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[ns]))
        uri = pulumi.Output.concat("gs://", args.bucket, "/", args.prefix, "/")
        # Typed Any: mypy infers a nested literal against the SDK's union of TypedDicts exponentially (it ran
        # out of 24 GiB on this one).
        spec: Any = {"schedule": SCHEDULE, "concurrencyPolicy": "Forbid", "startingDeadlineSeconds": 240,
                  "successfulJobsHistoryLimit": 1, "failedJobsHistoryLimit": 3,
                  "jobTemplate": {"spec": {"backoffLimit": 1, "activeDeadlineSeconds": 120, "template": {"spec": {
                      "serviceAccountName": SERVICE_ACCOUNT, "restartPolicy": "Never",
                      "nodeSelector": {"iam.gke.io/gke-metadata-server-enabled": "true"},
                      "containers": [{"name": "export", "image": IMAGE, "command": ["python", "-c", EXPORT_SCRIPT],
                                      "env": [{"name": "INSTANCE", "value": args.instance},
                                              {"name": "GCS_URI", "value": uri}],
                                      "resources": {"requests": {"cpu": "50m", "memory": "64Mi"},
                                                    "limits": {"memory": "128Mi"}}}]}}}}}
        self.cron_job = k8s.batch.v1.CronJob(
            f"{name}-export", metadata={"name": "lustre-export", "namespace": NAMESPACE, "labels": labels},
            spec=spec, opts=pulumi.ResourceOptions(parent=self, depends_on=[ns]))
        self.register_outputs({"schedule": SCHEDULE, "gcsUri": uri})
