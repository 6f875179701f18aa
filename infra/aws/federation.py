"""GKE → S3: the training service accounts of a hub's GKE workers reach this AWS worker's checkpoint home by web
identity federation (issue 35; docs/kueue-hub.md#checkpoints-across-clouds).

Per GKE peer worker (keyed by its worker key, never by position, so a worker joining adds only its own):

* ``<name>-oidc-<key>``: an IAM OIDC identity provider for the peer cluster's service-account issuer
  (``https://container.googleapis.com/v1/projects/<p>/locations/<l>/clusters/<c>``), client ID
  ``sts.amazonaws.com`` (the audience of the pod's projected token). Google's issuer certificate chains to a CA
  IAM trusts on its own, so no thumbprint is pinned (one would go stale with Google's rotation).
* ``<name>-peer-<key>``: a role whose trust admits ``sts:AssumeRoleWithWebIdentity`` from that provider only for
  the peer's training service accounts (``sub`` one of ``system:serviceaccount:<namespace>:<account>``, ``aud``
  ``sts.amazonaws.com``), at most an hour a session;
* ``<name>-peer-<key>-policy``: its inline policy: list under the checkpoint prefix, get/put/delete and multipart
  clean-up on ``prefix/*``, and the bucket's KMS key through S3 only. Nothing else.

IAM OIDC providers are unique per URL in an account: two AWS workers of one account federating the same GKE
worker would both create it. Keep one AWS worker per account in a hub with GKE workers (docs).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

AUDIENCE = "sts.amazonaws.com"
MAX_SESSION_SECONDS = 3600


@dataclass(frozen=True)
class GkePeer:
    """A GKE worker of the hub: its service-account ``issuer`` URL and the ``subjects`` of its training service
    accounts (``system:serviceaccount:<namespace>:<name>``)."""

    issuer: str
    subjects: tuple[str, ...]


@dataclass(frozen=True)
class S3FederationArgs:
    """Inputs of :class:`S3Federation`: the peers (worker key -> :class:`GkePeer`), this worker's ``bucket_arn``,
    checkpoint ``prefix`` and ``key_arn``, its ``partition`` and ``region`` (S3's KMS ViaService) and tags."""

    peers: Mapping[str, GkePeer]
    bucket_arn: pulumi.Input[str]
    key_arn: pulumi.Input[str]
    prefix: str
    partition: str
    region: str
    tags: Mapping[str, str] = field(default_factory=dict)


def issuer_host_path(issuer: str) -> str:
    """The issuer as IAM names it in condition keys and provider ARNs: without ``https://``."""
    return issuer.removeprefix("https://")


def trust_policy(provider_arn: str, issuer: str, subjects: Sequence[str]) -> str:
    """Trust of a peer's role: its cluster's provider, only its training service accounts, only our audience."""
    host = issuer_host_path(issuer)
    return json.dumps({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": {"Federated": provider_arn}, "Action": "sts:AssumeRoleWithWebIdentity",
        "Condition": {"StringEquals": {f"{host}:aud": AUDIENCE, f"{host}:sub": sorted(subjects)}}}]})


def access_policy(bucket_arn: str, prefix: str, key_arn: str, region: str) -> str:
    """Read/write under the checkpoint prefix of this worker's bucket and its key through S3: least privilege."""
    return json.dumps({"Version": "2012-10-17", "Statement": [
        {"Sid": "ListHomes", "Effect": "Allow", "Action": "s3:ListBucket", "Resource": bucket_arn,
         "Condition": {"StringLike": {"s3:prefix": [prefix, f"{prefix}/*"]}}},
        {"Sid": "ReadWriteHomes", "Effect": "Allow",
         "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload",
                    "s3:ListMultipartUploadParts"], "Resource": f"{bucket_arn}/{prefix}/*"},
        {"Sid": "CheckpointKey", "Effect": "Allow", "Action": ["kms:Decrypt", "kms:GenerateDataKey", "kms:DescribeKey"],
         "Resource": key_arn, "Condition": {"StringEquals": {"kms:ViaService": f"s3.{region}.amazonaws.com"}}},
    ]})


def _entry(role_arn: str) -> dict[str, str]:
    """A ``federation`` output entry: the audience of the pod's token and the role it assumes."""
    return {"audience": AUDIENCE, "roleArn": role_arn}


class S3Federation(pulumi.ComponentResource):
    """One OIDC provider and one role per GKE peer (module docstring). ``entries``: the ``federation`` output,
    peer key -> ``{audience, roleArn}``."""

    def __init__(self, name: str, args: S3FederationArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:aws:S3Federation", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.providers: dict[str, aws.iam.OpenIdConnectProvider] = {}
        self.roles: dict[str, aws.iam.Role] = {}
        self.entries: dict[str, pulumi.Output[dict[str, str]]] = {}
        for key, peer in sorted(args.peers.items()):
            provider = aws.iam.OpenIdConnectProvider(
                f"{name}-oidc-{key}", url=peer.issuer, client_id_lists=[AUDIENCE],
                tags={**args.tags, "gpufleet.io/peer": key}, opts=child)
            role = aws.iam.Role(
                f"{name}-peer-{key}", description=f"checkpoint homes for the training pods of GKE worker {key}",
                assume_role_policy=provider.arn.apply(
                    functools.partial(trust_policy, issuer=peer.issuer, subjects=peer.subjects)),
                max_session_duration=MAX_SESSION_SECONDS, tags={**args.tags, "gpufleet.io/peer": key}, opts=child)
            aws.iam.RolePolicy(
                f"{name}-peer-{key}-policy", role=role.id,
                policy=pulumi.Output.all(args.bucket_arn, args.key_arn).apply(
                    lambda v: access_policy(v[0], args.prefix, v[1], args.region)), opts=child)
            self.providers[key], self.roles[key] = provider, role
            self.entries[key] = role.arn.apply(_entry)
        self.register_outputs({"federation": self.entries})
