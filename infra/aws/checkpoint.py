"""Checkpoint storage: a durable, versioned, KMS-encrypted S3 bucket, an optional FSx for Lustre tier in the GPU
zone linked to it, and the IRSA role training pods use to reach both (trusted by the training service account
of every namespace in ``cfg.training_namespaces``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws

from infra.aws.iam import irsa_trust_policy
from infra.aws.layout import resource_tags
from infra.config import StackConfig
from infra.config.storage import FSX_DEPLOYMENT_TYPE
from infra.protect import stateful

# Lustre: 988 for LNet, 1018-1023 for the file servers (AWS FSx for Lustre VPC security guide).
LUSTRE_PORTS = ((988, 988), (1018, 1023))
FSX_LUSTRE_VERSION = "2.15"
DRA_EVENTS = ["NEW", "CHANGED", "DELETED"]
INCOMPLETE_UPLOAD_DAYS = 7


def homes_noncurrent_days() -> int:
    """Days a replaced checkpoint under the homes is kept: placement/data/bill.yaml's
    ``checkpoint.noncurrent_version_days``, what the plans bill (whole days, at least 1: S3's unit)."""
    from placement.model.bill import bill_book

    return max(1, math.ceil(bill_book().noncurrent_version_days))


@dataclass(frozen=True)
class CheckpointStoreArgs:
    """Inputs of :class:`CheckpointStore`.

    ``bucket``: the bucket name (see ``layout.bucket_name``). ``gpu_subnet_id``: the primary GPU zone's subnet
    (FSx lives next to the GPUs). ``oidc_provider_arn``/``oidc_issuer``: the cluster's IRSA identity provider.
    """

    cfg: StackConfig
    stack: str
    account_id: str
    partition: str
    bucket: str
    vpc_id: pulumi.Input[str]
    vpc_cidr: str
    gpu_subnet_id: pulumi.Input[str]
    oidc_provider_arn: pulumi.Input[str]
    oidc_issuer: pulumi.Input[str]
    # Per worker key, the training role ARN of another AWS worker of the same hub: read/write on this bucket's
    # checkpoint prefix and use of its key, so a job re-routed between them resumes from its home.
    peers: Mapping[str, str] = field(default_factory=dict)


def peer_sid(key: str) -> str:
    """A policy statement id for worker ``key`` (Sids take letters and digits only): stable per worker."""
    return "Peer" + "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", key) if part)


def key_policy(account_id: str, partition: str, region: str, peers: Mapping[str, str] | None = None) -> str:
    """Key policy of the checkpoint key: IAM policies of the account decide, plus FSx's S3 data-repository roles.

    FSx reaches a linked bucket through a per-file-system service-linked role
    (``AWSServiceRoleForFSxS3Access_fs-...``) whose policy cannot be edited, so the key itself must let it use
    the key, and only through S3.
    """
    root = f"arn:{partition}:iam::{account_id}:root"
    fsx_roles = (f"arn:{partition}:iam::{account_id}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/"
                 "AWSServiceRoleForFSxS3Access_*")
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "AccountIamPolicies", "Effect": "Allow", "Principal": {"AWS": root}, "Action": "kms:*",
             "Resource": "*"},
            {"Sid": "FsxDataRepositoryViaS3", "Effect": "Allow", "Principal": {"AWS": "*"},
             "Action": ["kms:Decrypt", "kms:GenerateDataKey*", "kms:DescribeKey"], "Resource": "*",
             "Condition": {"StringEquals": {"aws:PrincipalAccount": account_id,
                                            "kms:ViaService": f"s3.{region}.amazonaws.com"},
                           "ArnLike": {"aws:PrincipalArn": fsx_roles}}},
            # The hub's other workers' training roles (their own account's IAM policies say nothing of this key).
            *({"Sid": peer_sid(k), "Effect": "Allow", "Principal": {"AWS": arn},
               "Action": ["kms:Decrypt", "kms:GenerateDataKey", "kms:DescribeKey"], "Resource": "*",
               "Condition": {"StringEquals": {"kms:ViaService": f"s3.{region}.amazonaws.com"}}}
              for k, arn in sorted((peers or {}).items())),
        ],
    })


def training_policy(bucket_arn: str, prefix: str, key_arn: str) -> str:
    """Read/write on ``bucket/prefix/*`` only, listing only under the prefix, and use of the bucket's key."""
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "ListCheckpointPrefix", "Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": [bucket_arn],
             "Condition": {"StringLike": {"s3:prefix": [prefix, f"{prefix}/*"]}}},
            {"Sid": "ReadWriteCheckpoints", "Effect": "Allow",
             "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload",
                        "s3:ListMultipartUploadParts"],
             "Resource": [f"{bucket_arn}/{prefix}/*"]},
            {"Sid": "UseCheckpointKey", "Effect": "Allow",
             "Action": ["kms:Decrypt", "kms:GenerateDataKey", "kms:DescribeKey"], "Resource": [key_arn]},
        ],
    })


def deny_insecure_transport(bucket_arn: str) -> str:
    """Bucket policy refusing every request that does not use TLS."""
    return bucket_policy(bucket_arn, "", {})


def bucket_policy(bucket_arn: str, prefix: str, peers: Mapping[str, str]) -> str:
    """The bucket's one policy: refuse every request that does not use TLS, and let the training role of each
    peer worker (``peers``: worker key → role ARN) list, read, write and delete under ``prefix`` only. One
    statement pair per peer, its Sid from the worker key, so a worker joining changes no other statement."""
    statements: list[dict[str, Any]] = [
        {"Sid": "DenyInsecureTransport", "Effect": "Deny", "Principal": "*", "Action": "s3:*",
         "Resource": [bucket_arn, f"{bucket_arn}/*"], "Condition": {"Bool": {"aws:SecureTransport": "false"}}}]
    for key, arn in sorted(peers.items()):
        sid = peer_sid(key)
        statements += [
            {"Sid": f"{sid}List", "Effect": "Allow", "Principal": {"AWS": arn}, "Action": "s3:ListBucket",
             "Resource": bucket_arn, "Condition": {"StringLike": {"s3:prefix": [prefix, f"{prefix}/*"]}}},
            {"Sid": f"{sid}ReadWrite", "Effect": "Allow", "Principal": {"AWS": arn},
             "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload",
                        "s3:ListMultipartUploadParts"],
             "Resource": f"{bucket_arn}/{prefix}/*"}]
    return json.dumps({"Version": "2012-10-17", "Statement": statements})


class CheckpointStore(pulumi.ComponentResource):
    """The checkpoint bucket (versioned, SSE-KMS with a rotating customer-managed key and bucket key, public access
    blocked, TLS only, noncurrent versions expired), optionally FSx for Lustre PERSISTENT_2 with a data repository
    association importing and exporting every change, and the training service account's IRSA role.
    """

    bucket_name: pulumi.Output[str]
    bucket_arn: pulumi.Output[str]
    key_arn: pulumi.Output[str]
    checkpoint_uri: pulumi.Output[str]
    filesystem: pulumi.Output[dict[str, Any]] | None
    training_role_arn: pulumi.Output[str]

    def __init__(self, name: str, args: CheckpointStoreArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:aws:CheckpointStore", name, None, opts)
        cfg, ck = args.cfg, args.cfg.checkpoint
        child = pulumi.ResourceOptions(parent=self)

        def tags(part: str) -> dict[str, str]:
            return resource_tags(cfg, args.stack, f"{name}-{part}")

        if ck.kms_key:
            self.key_arn = pulumi.Output.from_input(ck.kms_key)
        else:
            key = aws.kms.Key(f"{name}-key", description=f"checkpoints of {cfg.cluster_name}",
                              enable_key_rotation=True, deletion_window_in_days=30,
                              policy=key_policy(args.account_id, args.partition, cfg.region, args.peers),
                              tags=tags("key"),
                              opts=child)
            aws.kms.Alias(f"{name}-key", name=f"alias/{cfg.cluster_name}-checkpoints", target_key_id=key.key_id,
                          opts=child)
            self.key_arn = key.arn

        bucket = aws.s3.Bucket(f"{name}-bucket", bucket=args.bucket, tags=tags("bucket"),
                               opts=stateful(cfg, f"{name}-bucket", child))
        self.bucket_name = bucket.bucket
        self.bucket_arn = bucket.arn
        pab = aws.s3.BucketPublicAccessBlock(f"{name}-public-access", bucket=bucket.id, block_public_acls=True,
                                             block_public_policy=True, ignore_public_acls=True,
                                             restrict_public_buckets=True, opts=child)
        versioning = aws.s3.BucketVersioning(
            f"{name}-versioning", bucket=bucket.id,
            versioning_configuration=aws.s3.BucketVersioningVersioningConfigurationArgs(status="Enabled"), opts=child)
        aws.s3.BucketServerSideEncryptionConfiguration(
            f"{name}-sse", bucket=bucket.id,
            rules=[aws.s3.BucketServerSideEncryptionConfigurationRuleArgs(
                apply_server_side_encryption_by_default=aws.s3.
                BucketServerSideEncryptionConfigurationRuleApplyServerSideEncryptionByDefaultArgs(
                    sse_algorithm="aws:kms", kms_master_key_id=self.key_arn),
                # One data key per bucket instead of one KMS call per object: checkpoints write many shards.
                bucket_key_enabled=True)],
            opts=child)
        aws.s3.BucketPolicy(f"{name}-policy", bucket=bucket.id,
                            policy=bucket.arn.apply(lambda arn: bucket_policy(arn, ck.prefix, args.peers)),
                            opts=pulumi.ResourceOptions(parent=self, depends_on=[pab]))
        aws.s3.BucketLifecycleConfiguration(
            f"{name}-lifecycle", bucket=bucket.id,
            rules=[aws.s3.BucketLifecycleConfigurationRuleArgs(
                id="expire-noncurrent-versions", status="Enabled",
                filter=aws.s3.BucketLifecycleConfigurationRuleFilterArgs(prefix=""),
                noncurrent_version_expiration=aws.s3.BucketLifecycleConfigurationRuleNoncurrentVersionExpirationArgs(
                    noncurrent_days=ck.noncurrent_version_days),
                abort_incomplete_multipart_upload=aws.s3.
                BucketLifecycleConfigurationRuleAbortIncompleteMultipartUploadArgs(
                    days_after_initiation=INCOMPLETE_UPLOAD_DAYS)),
                # The homes (one directory per job under the prefix): a replaced checkpoint is kept a short,
                # documented time, the days placement/data/bill.yaml bills (issue 36); S3 applies the shorter of
                # two overlapping expirations.
                aws.s3.BucketLifecycleConfigurationRuleArgs(
                    id="expire-replaced-checkpoints", status="Enabled",
                    filter=aws.s3.BucketLifecycleConfigurationRuleFilterArgs(prefix=f"{ck.prefix}/"),
                    noncurrent_version_expiration=aws.s3.
                    BucketLifecycleConfigurationRuleNoncurrentVersionExpirationArgs(
                        noncurrent_days=homes_noncurrent_days()))],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[versioning]))
        self.checkpoint_uri = pulumi.Output.concat("s3://", bucket.bucket, "/", ck.prefix)

        self.filesystem = None
        if ck.filesystem.kind == "fsx":
            self.filesystem = self._fsx(name, args, bucket, tags)

        # Training jobs run in the team namespaces (where the LocalQueues are); the add-ons create the
        # service account in each of them, annotated with this role.
        sa = cfg.training.service_account
        role = aws.iam.Role(
            f"{name}-training",
            assume_role_policy=irsa_trust_policy(args.oidc_provider_arn, args.oidc_issuer,
                                                 [(ns, sa) for ns in cfg.training_namespaces]),
            description=f"training pods (service account {sa} of the team namespaces): "
                        f"read/write {args.bucket}/{ck.prefix}",
            tags=tags("training"), opts=child)
        aws.iam.RolePolicy(f"{name}-training", role=role.id,
                           policy=pulumi.Output.all(bucket.arn, self.key_arn).apply(
                               lambda a: training_policy(a[0], ck.prefix, a[1])),
                           opts=child)
        self.training_role_arn = role.arn

        self.register_outputs({
            "bucket": self.bucket_name,
            "kmsKeyArn": self.key_arn,
            "checkpointUri": self.checkpoint_uri,
            "filesystem": self.filesystem,
            "trainingRoleArn": self.training_role_arn,
        })

    def _fsx(self, name: str, args: CheckpointStoreArgs, bucket: aws.s3.Bucket,
             tags: Any) -> pulumi.Output[dict[str, Any]]:
        """FSx for Lustre in the GPU subnet, linked to ``s3://bucket/prefix/`` in both directions."""
        cfg, ck = args.cfg, args.cfg.checkpoint
        child = pulumi.ResourceOptions(parent=self)
        sg = aws.ec2.SecurityGroup(f"{name}-fsx", vpc_id=args.vpc_id,
                                   description="FSx for Lustre: Lustre ports from the VPC", tags=tags("fsx"),
                                   opts=child)
        for low, high in LUSTRE_PORTS:
            aws.vpc.SecurityGroupIngressRule(f"{name}-fsx-in-{low}", security_group_id=sg.id, ip_protocol="tcp",
                                             from_port=low, to_port=high, cidr_ipv4=args.vpc_cidr,
                                             description=f"Lustre {low}-{high} from the VPC",
                                             tags=tags(f"fsx-in-{low}"), opts=child)
        # File servers talk to each other and answer clients anywhere in the VPC.
        aws.vpc.SecurityGroupEgressRule(f"{name}-fsx-out", security_group_id=sg.id, ip_protocol="-1",
                                        cidr_ipv4=args.vpc_cidr, description="all traffic within the VPC",
                                        tags=tags("fsx-out"), opts=child)
        fs = aws.fsx.LustreFileSystem(
            f"{name}-fsx",
            deployment_type=FSX_DEPLOYMENT_TYPE,
            file_system_type_version=FSX_LUSTRE_VERSION,
            storage_type="SSD",
            storage_capacity=ck.filesystem.capacity_gb,
            per_unit_storage_throughput=ck.filesystem.throughput_mbps_per_tib,
            subnet_ids=args.gpu_subnet_id,  # a single subnet: PERSISTENT_2 file systems live in one AZ
            security_group_ids=[sg.id],
            kms_key_id=self.key_arn,
            data_compression_type="LZ4",
            # S3 is the durable copy: no FSx backups to pay for, none taken on delete.
            automatic_backup_retention_days=0,
            skip_final_backup=True,
            tags=tags("fsx"),
            opts=stateful(cfg, f"{name}-fsx", child),
        )
        aws.fsx.DataRepositoryAssociation(
            f"{name}-dra",
            file_system_id=fs.id,
            file_system_path=f"/{ck.prefix}",
            data_repository_path=pulumi.Output.concat("s3://", bucket.bucket, "/", ck.prefix, "/"),
            batch_import_meta_data_on_create=True,
            s3=aws.fsx.DataRepositoryAssociationS3Args(
                auto_import_policy=aws.fsx.DataRepositoryAssociationS3AutoImportPolicyArgs(events=DRA_EVENTS),
                auto_export_policy=aws.fsx.DataRepositoryAssociationS3AutoExportPolicyArgs(events=DRA_EVENTS)),
            tags=tags("dra"),
            opts=child,
        )
        return pulumi.Output.all(fs.id, fs.dns_name, fs.mount_name, bucket.bucket).apply(lambda a: {
            "kind": "fsx",
            "id": a[0],
            "dnsName": a[1],
            "mountName": a[2],
            "path": f"/{ck.prefix}",
            "zone": cfg.gpu_zone,
            "capacityGb": ck.filesystem.capacity_gb,
            # The throughput tier (MB/s per TiB): placement submit prices checkpoint writes from size and tier.
            "throughputMbpsPerTib": ck.filesystem.throughput_mbps_per_tib,
            # Where the data repository association keeps the files: the home of every job's checkpoints.
            "dataRepositoryPath": f"s3://{a[3]}/{ck.prefix}/",
        })
