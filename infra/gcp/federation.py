"""EKS → GCS: the training roles of a hub's EKS workers reach this GCP worker's checkpoint home through Workload
Identity Federation (issue 35; docs/kueue-hub.md#checkpoints-across-clouds).

Made only when the hub has EKS workers (keyed by worker key, never by position: a worker joining adds its own):

* ``<name>-pool``: one Workload Identity pool for this worker's checkpoint home;
* ``<name>-aws-<key>``: per EKS peer, an AWS provider of the pool for the peer's account ID, with an attribute
  condition that admits only the peer's training role (``attribute.aws_role``, the default AWS mapping's
  ``arn:aws:sts::<account>:assumed-role/<role>``): another role of that account gets no token;
* ``<name>-objects-<key>``: ``roles/storage.objectAdmin`` on the checkpoint bucket for that principal set (direct
  principal access: no service account to impersonate, no key), with an IAM condition that limits it to objects
  under the checkpoint prefix (and the bucket itself, for listing, which IAM evaluates on the bucket).

The pod presents a signed AWS ``GetCallerIdentity`` request (google-auth's ``aws1`` credential source) and gets a
federated token for the bucket (:mod:`placement.fleet.federation` renders its credential configuration).
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi
import pulumi_gcp as gcp

OBJECT_ADMIN = "roles/storage.objectAdmin"


@dataclass(frozen=True)
class EksPeer:
    """An EKS worker of the hub: its AWS ``account_id`` and the ARN of its training IRSA ``role_arn``."""

    account_id: str
    role_arn: str

    @property
    def assumed_role(self) -> str:
        """What the default AWS attribute mapping makes of a session of the role: ``attribute.aws_role``."""
        partition = self.role_arn.split(":")[1]
        role_name = self.role_arn.rsplit("/", 1)[-1]
        return f"arn:{partition}:sts::{self.account_id}:assumed-role/{role_name}"


@dataclass(frozen=True)
class GcsFederationArgs:
    """Inputs of :class:`GcsFederation`: ``project``, the ``cluster_name`` (names the pool), the peers (worker key
    -> :class:`EksPeer`), this worker's ``bucket`` name and checkpoint ``prefix``."""

    project: str
    cluster_name: str
    peers: Mapping[str, EksPeer]
    bucket: pulumi.Input[str]
    prefix: str
    labels: Mapping[str, str] = field(default_factory=dict)


def short_id(text: str, limit: int = 32) -> str:
    """A pool or provider ID (4-32 of ``[a-z0-9-]``, starting with a letter): ``text`` cleaned, and when too long
    cut with a digest of the whole, so two long names never meet."""
    clean = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-") or "gpufleet"
    if not clean[0].isalpha():
        clean = "g" + clean
    if len(clean) <= limit:
        return clean.ljust(4, "0")
    digest = hashlib.sha256(text.encode()).hexdigest()[:6]
    return f"{clean[:limit - 7].rstrip('-')}-{digest}"


def _entry(provider_name: str) -> dict[str, str]:
    """A ``federation`` output entry: the audience of the pool provider named ``provider_name``."""
    return {"audience": f"//iam.googleapis.com/{provider_name}"}


def principal_set(pool: str, role: str) -> str:
    """The members of pool ``pool`` (its resource name) whose ``attribute.aws_role`` is ``role``."""
    return f"principalSet://iam.googleapis.com/{pool}/attribute.aws_role/{role}"


def prefix_condition(bucket: str, prefix: str) -> str:
    """The IAM condition: objects under ``prefix/`` of ``bucket``, or the bucket itself (listing)."""
    return (f'resource.name.startsWith("projects/_/buckets/{bucket}/objects/{prefix}/") || '
            f'resource.name == "projects/_/buckets/{bucket}"')


class GcsFederation(pulumi.ComponentResource):
    """The pool, one AWS provider and one bucket binding per EKS peer (module docstring). ``entries``: the
    ``federation`` output, peer key -> ``{audience}``."""

    def __init__(self, name: str, args: GcsFederationArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:gcp:GcsFederation", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.pool = gcp.iam.WorkloadIdentityPool(
            f"{name}-pool", workload_identity_pool_id=short_id(f"gpufleet-{args.cluster_name}"), project=args.project,
            display_name=short_id(f"ckpt {args.cluster_name}", 32),
            description=f"EKS workers of the hub reaching the checkpoint homes of {args.cluster_name}", opts=child)
        self.providers: dict[str, gcp.iam.WorkloadIdentityPoolProvider] = {}
        self.grants: dict[str, gcp.storage.BucketIAMMember] = {}
        self.entries: dict[str, pulumi.Output[dict[str, str]]] = {}
        for key, peer in sorted(args.peers.items()):
            provider = gcp.iam.WorkloadIdentityPoolProvider(
                f"{name}-aws-{key}", project=args.project,
                workload_identity_pool_id=self.pool.workload_identity_pool_id,
                workload_identity_pool_provider_id=short_id(f"aws-{key}"),
                display_name=short_id(f"aws {key}", 32),
                description=f"the training role of EKS worker {key}",
                aws=gcp.iam.WorkloadIdentityPoolProviderAwsArgs(account_id=peer.account_id),
                attribute_condition=f'attribute.aws_role == "{peer.assumed_role}"', opts=child)
            member = self.pool.name.apply(functools.partial(principal_set, role=peer.assumed_role))
            grant = gcp.storage.BucketIAMMember(
                f"{name}-objects-{key}", bucket=args.bucket, role=OBJECT_ADMIN, member=member,
                condition=gcp.storage.BucketIAMMemberConditionArgs(
                    title=short_id(f"homes of {key}", 100), description="checkpoint homes only",
                    expression=pulumi.Output.from_input(args.bucket).apply(
                        lambda b: prefix_condition(b, args.prefix))), opts=child)
            self.providers[key], self.grants[key] = provider, grant
            self.entries[key] = provider.name.apply(_entry)
        self.register_outputs({"federation": self.entries})
