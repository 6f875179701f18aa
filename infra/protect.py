"""Stateful resources survive every `pulumi up`: options for what holds data, and the Kubernetes providers' options.

File systems, buckets, Namespaces (with the jobs in them) and PersistentVolumes are ``protect``-ed, so Pulumi refuses
to delete or replace them, and ``retainOnDelete``, so even a replacement the stack config acknowledges
(``gpufleet:allowReplace``, validated by :func:`infra.config.stack.parse_allow_replace`) leaves the old one in the cloud
or the cluster instead of deleting its data: the operator moves what is needed and removes it by hand.

Every Kubernetes provider the stacks make (:func:`k8s_provider_args`: a worker's own, the hub's, the hub's one per
worker) applies server-side and adopts objects that already exist (``upsertExistingObjects``: since
pulumi-kubernetes 4.29 a create of an existing object fails with AlreadyExists otherwise). Adopting applies without
force, so a field another manager owns with another value (Helm's JobSet CRD, a PV an older ``placement submit``
made) conflicts on the real `pulumi up` although the preview (which forces every create) passed: exactly the objects
the stacks take over carry ``pulumi.com/patchForce`` (:data:`PATCH_FORCE`, :func:`taken_over`,
:func:`patch_force_transform`); nothing else overrides another manager's fields.

A worker's provider is keyed to its cluster's unique identity (``clusterIdentifier``, :func:`cluster_identity`:
the GKE DNS endpoint or the EKS OIDC issuer, both new for a re-created cluster of the same name): pulumi-kubernetes
replaces a provider, and everything under it, when that changes, and never when only its kubeconfig does
(provider.go DiffConfig). Adding or removing an identifier replaces nothing by itself but does not stop a server
change in the same update from replacing it, and changing one replaces it: existing stacks take the identity in
steps (:data:`MIGRATIONS`, docs/gcp.md and docs/aws.md).
"""

from __future__ import annotations

from typing import Any

import pulumi

from infra.config import StackConfig
from infra.config.cluster import PROVIDER_MIGRATIONS

# The types to declare with stateful() (the stateful-protected policy checks them); STATEFUL_TYPES there lists
# what a replacement must acknowledge.
from infra.policy.checks import PROTECTED_TYPES as PROTECTED_TYPES  # noqa: E402


def stateful(cfg: StackConfig, name: str, opts: pulumi.ResourceOptions | None = None) -> pulumi.ResourceOptions:
    """``opts`` for the stateful resource ``name``: retained on delete always, protected unless
    ``gpufleet:allowReplace`` lists ``name`` (then `pulumi up` may replace it, and the old one is kept)."""
    extra = pulumi.ResourceOptions(protect=name not in cfg.allow_replace, retain_on_delete=True)
    return pulumi.ResourceOptions.merge(opts or pulumi.ResourceOptions(), extra)


def stateful_names(allow_replace: Any, name: str, opts: pulumi.ResourceOptions | None = None
                   ) -> pulumi.ResourceOptions:
    """:func:`stateful` for components that get ``gpufleet:allowReplace`` rather than the whole config."""
    extra = pulumi.ResourceOptions(protect=name not in tuple(allow_replace), retain_on_delete=True)
    return pulumi.ResourceOptions.merge(opts or pulumi.ResourceOptions(), extra)


# pulumi-kubernetes: force server-side apply conflicts on this object (provider/pkg/metadata/annotations.go).
PATCH_FORCE_ANNOTATION = "pulumi.com/patchForce"
PATCH_FORCE = {PATCH_FORCE_ANNOTATION: "true"}

# The one-update steps an existing stack takes towards the unique identity (gpufleet:cluster.providerMigration):
#   drop-name-identifier  stacks last updated with the name-based identifier (gcp:<project>:<region>:<name>,
#                         aws:<region>:<name>, hub-worker:<stack>): the identifier goes, the server stays;
#   keep-ip-endpoint      GKE stacks last updated before the DNS endpoint (no identifier, the IP endpoint): the
#                         identifier comes, the IP endpoint stays.
# The next update without the key sets what is left (the identifier, or the DNS endpoint), again alone.
MIGRATIONS = PROVIDER_MIGRATIONS


def provider_migration(cfg: StackConfig) -> str | None:
    """This update's step of ``gpufleet:cluster.providerMigration`` (None: the stack is where it should be)."""
    return cfg.cluster.provider_migration


def cluster_identity(kind: str, unique: str | None) -> str | None:
    """The ``clusterIdentifier`` of a cluster whose unique identity is ``unique`` (``gke``: its DNS endpoint host,
    ``eks``: its OIDC issuer URL, ``hub-worker``: a worker's exported ``clusterIdentity``); None until it is known."""
    return f"{kind}:{unique}" if unique else None


def k8s_provider_args(cluster_identifier: Any = None) -> dict[str, Any]:
    """Keyword arguments of a ``pulumi_kubernetes.Provider`` besides its kubeconfig: server-side apply, adopting
    existing objects, and ``clusterIdentifier`` when given (an ``Input[str]``)."""
    args: dict[str, Any] = {"enable_server_side_apply": True, "upsert_existing_objects": True}
    if cluster_identifier is not None:
        args["cluster_identifier"] = cluster_identifier
    return args


def taken_over(metadata: Any) -> Any:
    """``metadata`` (a mapping, or an Output of one) with :data:`PATCH_FORCE` among its annotations: for an object
    that may exist before the stack manages it, written by another field manager."""

    def add(meta: Any) -> Any:
        meta = dict(meta or {})
        meta["annotations"] = {**(meta.get("annotations") or {}), **PATCH_FORCE}
        return meta

    return metadata.apply(add) if isinstance(metadata, pulumi.Output) else add(metadata)


def patch_force_transform(kinds: tuple[str, ...]) -> Any:
    """A resource transform (``ResourceOptions(transforms=[...])``) that puts :data:`PATCH_FORCE` on the children
    of kind ``kinds`` a component registers (the JobSet CRD of a ``yaml/v2`` ConfigFile, which the provider
    registers itself: the engine runs transforms on the children of packaged components too)."""

    def transform(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
        if not args.custom or not any(args.type_.endswith(f":{kind}") for kind in kinds):
            return None
        props = dict(args.props)
        props["metadata"] = taken_over(props.get("metadata"))
        return pulumi.ResourceTransformResult(props=props, opts=args.opts)

    return transform
