"""Checkpoint storage: a GCS bucket, an optional fast filesystem in the GPU zone, and the training identity.

Bucket choice (deliberate): the issue asks for both a hierarchical-namespace (HNS) bucket and object
versioning, and GCS does not allow both on one bucket (HNS buckets reject Object Versioning). A
checkpoint overwritten or deleted by a buggy job must be recoverable, so this bucket keeps a flat
namespace with versioning on, old versions expire after ``checkpoint.noncurrentVersionDays`` (after a day under
the checkpoint prefix, the jobs' homes: placement/data/bill.yaml's ``noncurrent_version_days``), and
soft delete (``checkpoint.softDeleteDays``) covers a deleted bucket object on top. HNS only speeds
up directory renames, which checkpoint writers (write-new-then-point) do not need.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_gcp as gcp

from infra.config.storage import CheckpointConfig, TrainingConfig
from infra.gcp.plan import bucket_name, service_account_id
from infra.protect import stateful_names as stateful

SECONDS_PER_DAY = 86400


def homes_noncurrent_days() -> int:
    """Days a replaced checkpoint under the homes is kept: placement/data/bill.yaml's
    ``checkpoint.noncurrent_version_days``, what the plans bill (whole days)."""
    from placement.model.bill import bill_book

    return max(0, math.ceil(bill_book().noncurrent_version_days))
LUSTRE_PORTS = ("988",)
LUSTRE_FSNAME = "ckpt"
FILESTORE_SHARE = "checkpoints"
PSA_SERVICE = "servicenetworking.googleapis.com"


@dataclass(frozen=True)
class CheckpointArgs:
    """Inputs of :class:`CheckpointStore`.

    ``zone`` is the GPU zone (filesystem location); ``vpc_id``/``vpc_name`` the primary VPC;
    ``psa_cidr`` the private services range for the filesystem (``None`` without one);
    ``workload_pool_ready`` the resources that must exist before the Workload Identity binding
    (the GKE cluster creates the ``<project>.svc.id.goog`` pool); ``namespaces`` the namespaces whose
    ``training.service_account`` may act as the training Google service account
    (``StackConfig.training_namespaces``).
    """

    project: str
    region: str
    zone: str | None
    cluster_name: str
    checkpoint: CheckpointConfig
    training: TrainingConfig
    vpc_id: pulumi.Input[str]
    vpc_name: pulumi.Input[str]
    psa_cidr: str | None
    workload_pool_ready: Sequence[pulumi.Resource]
    labels: Mapping[str, str]
    namespaces: Sequence[str]
    # gpufleet:allowReplace: the stateful resources here a `pulumi up` may replace (infra.protect).
    allow_replace: Sequence[str] = ()
    # Per worker key, the training Google service account of another GCP worker of the same hub: object access
    # on this bucket, so a job re-routed between them resumes from its home.
    peers: Mapping[str, str] = field(default_factory=dict)


class CheckpointStore(pulumi.ComponentResource):
    """GCS checkpoint bucket (+ Managed Lustre or Filestore) and a Google service account that the
    training Kubernetes service account impersonates, with object access to this bucket only.

    Exposes ``bucket``, ``uri`` (``gs://bucket/prefix``), ``filesystem`` (mount info or ``None``),
    ``service_account`` and ``service_account_email``.
    """

    def __init__(self, name: str, args: CheckpointArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:gcp:CheckpointStore", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        ck = args.checkpoint
        labels = dict(args.labels)

        bucket_deps: list[pulumi.Resource] = []
        encryption = None
        if ck.kms_key:
            # GCS encrypts with the key as its service agent, which needs encrypt/decrypt on it.
            agent = gcp.storage.get_project_service_account_output(
                project=args.project, opts=pulumi.InvokeOutputOptions(parent=self))
            bucket_deps.append(gcp.kms.CryptoKeyIAMMember(
                f"{name}-kms", crypto_key_id=ck.kms_key, role="roles/cloudkms.cryptoKeyEncrypterDecrypter",
                member=agent.email_address.apply(lambda e: f"serviceAccount:{e}"), opts=child))
            encryption = gcp.storage.BucketEncryptionArgs(default_kms_key_name=ck.kms_key)

        self.bucket = gcp.storage.Bucket(
            f"{name}-bucket", name=bucket_name(args.project, args.cluster_name), project=args.project,
            location=args.region.upper(), storage_class="STANDARD",
            uniform_bucket_level_access=True, public_access_prevention="enforced",
            versioning=gcp.storage.BucketVersioningArgs(enabled=True),
            # Off on purpose: HNS and object versioning are mutually exclusive on GCS (see module doc).
            hierarchical_namespace=gcp.storage.BucketHierarchicalNamespaceArgs(enabled=False),
            soft_delete_policy=gcp.storage.BucketSoftDeletePolicyArgs(
                retention_duration_seconds=ck.soft_delete_days * SECONDS_PER_DAY),
            lifecycle_rules=[
                gcp.storage.BucketLifecycleRuleArgs(
                    action=gcp.storage.BucketLifecycleRuleActionArgs(type="Delete"),
                    condition=gcp.storage.BucketLifecycleRuleConditionArgs(
                        days_since_noncurrent_time=ck.noncurrent_version_days, with_state="ARCHIVED")),
                # The homes (one directory per job under the prefix): a replaced checkpoint is kept a short,
                # documented time, what placement/data/bill.yaml bills (issue 36); soft delete then keeps it
                # checkpoint.softDeleteDays more (billed too: bill.yaml gcp.soft_delete_days).
                gcp.storage.BucketLifecycleRuleArgs(
                    action=gcp.storage.BucketLifecycleRuleActionArgs(type="Delete"),
                    condition=gcp.storage.BucketLifecycleRuleConditionArgs(
                        days_since_noncurrent_time=homes_noncurrent_days(), with_state="ARCHIVED",
                        matches_prefixes=[f"{ck.prefix}/"])),
                gcp.storage.BucketLifecycleRuleArgs(
                    action=gcp.storage.BucketLifecycleRuleActionArgs(type="AbortIncompleteMultipartUpload"),
                    condition=gcp.storage.BucketLifecycleRuleConditionArgs(age=7)),
            ],
            encryption=encryption,
            labels=labels,
            force_destroy=False,
            opts=stateful(args.allow_replace, f"{name}-bucket", pulumi.ResourceOptions(parent=self,
                                                                                        depends_on=bucket_deps)))
        self.uri: pulumi.Output[str] = self.bucket.name.apply(lambda b: f"gs://{b}/{ck.prefix}")

        self.filesystem: pulumi.Output[dict[str, Any]] | None = None
        kind = ck.filesystem.kind
        if kind != "none":
            assert args.zone is not None and args.psa_cidr is not None
            self.filesystem = self._filesystem(name, args, labels)

        # Training identity: a Google service account the training KSA impersonates via Workload Identity.
        self.service_account = gcp.serviceaccount.Account(
            f"{name}-trainer", account_id=service_account_id(args.cluster_name, "trainer"), project=args.project,
            display_name=f"Training jobs of {args.cluster_name} (Workload Identity)", opts=child)
        self.service_account_email: pulumi.Output[str] = self.service_account.account_id.apply(
            lambda a: f"{a}@{args.project}.iam.gserviceaccount.com")
        # One binding per namespace: the add-ons create the KSA in each, annotated with this account's email.
        self.workload_identity: list[gcp.serviceaccount.IAMMember] = []
        for ns in args.namespaces:
            # The binding of training.namespace used to be the only one, named without a suffix: the alias keeps
            # it in place, since creating the new name and deleting the old would remove the shared member.
            aliases = [pulumi.Alias(name=f"{name}-trainer-wi")] if ns == args.training.namespace else None
            self.workload_identity.append(gcp.serviceaccount.IAMMember(
                f"{name}-trainer-wi-{ns}", service_account_id=self.service_account.name,
                role="roles/iam.workloadIdentityUser",
                member=workload_identity_member(args.project, ns, args.training.service_account),
                opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.workload_pool_ready), aliases=aliases)))
        # Bucket-scoped only: no project-level storage role, so jobs cannot reach other buckets.
        self.bucket_access = gcp.storage.BucketIAMMember(
            f"{name}-trainer-objects", bucket=self.bucket.name, role="roles/storage.objectUser",
            member=self.service_account_email.apply(lambda e: f"serviceAccount:{e}"), opts=child)
        # Named by the peer's worker key, never by position: a worker joining or leaving the hub adds or removes
        # its own binding only.
        self.peer_access: dict[str, gcp.storage.BucketIAMMember] = {
            key: gcp.storage.BucketIAMMember(f"{name}-peer-{key}", bucket=self.bucket.name,
                                             role="roles/storage.objectAdmin", member=f"serviceAccount:{email}",
                                             opts=child)
            for key, email in sorted(args.peers.items())}

        self.register_outputs({"bucket": self.bucket.name, "uri": self.uri, "filesystem": self.filesystem,
                               "serviceAccount": self.service_account_email})

    def _filesystem(self, name: str, args: CheckpointArgs, labels: dict[str, str]) -> pulumi.Output[dict[str, Any]]:
        """Private services access range + peering, then Managed Lustre or zonal Filestore on it."""
        child = pulumi.ResourceOptions(parent=self)
        fs = args.checkpoint.filesystem
        assert args.psa_cidr is not None and args.zone is not None
        address, prefix = args.psa_cidr.split("/")
        psa_range = gcp.compute.GlobalAddress(
            f"{name}-psa", name=f"{args.cluster_name}-psa", project=args.project, purpose="VPC_PEERING",
            address_type="INTERNAL", address=address, prefix_length=int(prefix), network=args.vpc_id,
            labels=labels, opts=child)
        peering = gcp.servicenetworking.Connection(
            f"{name}-psa-peering", network=args.vpc_id, service=PSA_SERVICE,
            reserved_peering_ranges=[psa_range.name], opts=child)
        after_peering = pulumi.ResourceOptions(parent=self, depends_on=[peering])

        if fs.kind == "lustre":
            # Lustre servers call back into clients on TCP 988, so nodes must accept it from the service range.
            gcp.compute.Firewall(
                f"{name}-lustre-ingress", name=f"{args.cluster_name}-lustre", network=args.vpc_id,
                direction="INGRESS", source_ranges=[args.psa_cidr],
                allows=[gcp.compute.FirewallAllowArgs(protocol="tcp", ports=list(LUSTRE_PORTS))],
                description="Managed Lustre to GKE nodes", opts=child)
            self.lustre = gcp.lustre.Instance(
                f"{name}-lustre", instance_id=f"{args.cluster_name}-ckpt", project=args.project, location=args.zone,
                filesystem=LUSTRE_FSNAME, capacity_gib=str(fs.capacity_gb),
                per_unit_storage_throughput=str(fs.throughput_mbps_per_tib), network=args.vpc_id,
                description="gpufleet checkpoint tier", labels=labels,
                opts=stateful(args.allow_replace, f"{name}-lustre", after_peering))
            return pulumi.Output.all(self.lustre.instance_id, self.lustre.mount_point).apply(lambda a: {
                "kind": "lustre", "zone": args.zone, "instance": a[0], "filesystem": LUSTRE_FSNAME,
                "mountPoint": a[1], "capacityGb": fs.capacity_gb, "throughputMbpsPerTib": fs.throughput_mbps_per_tib,
                "csiDriver": "lustre.csi.storage.gke.io"})

        self.filestore = gcp.filestore.Instance(
            f"{name}-filestore", name=f"{args.cluster_name}-ckpt", project=args.project, location=args.zone,
            tier="ZONAL",
            file_shares=gcp.filestore.InstanceFileSharesArgs(name=FILESTORE_SHARE, capacity_gb=fs.capacity_gb),
            networks=[gcp.filestore.InstanceNetworkArgs(
                network=args.vpc_name, modes=["MODE_IPV4"], connect_mode="PRIVATE_SERVICE_ACCESS",
                reserved_ip_range=psa_range.name)],
            labels=labels, opts=stateful(args.allow_replace, f"{name}-filestore", after_peering))
        ip = self.filestore.networks.apply(_first_ip)
        return pulumi.Output.all(self.filestore.name, ip).apply(lambda a: {
            "kind": "filestore", "zone": args.zone, "instance": a[0],
            "mountPoint": f"{a[1]}:/{FILESTORE_SHARE}" if a[1] else None, "capacityGb": fs.capacity_gb,
            "csiDriver": "filestore.csi.storage.gke.io"})


def workload_identity_member(project: str, namespace: str, service_account: str) -> str:
    """The IAM member a Kubernetes service account acts as under GKE Workload Identity."""
    return f"serviceAccount:{project}.svc.id.goog[{namespace}/{service_account}]"


def _first_ip(networks: Sequence[Any] | None) -> str | None:
    """The first IPv4 address Filestore reports for its first network (``None`` until it is known)."""
    ips = networks[0].ip_addresses if networks else None
    return str(ips[0]) if ips else None
