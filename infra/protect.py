"""Stateful resources survive every `pulumi up`: options for what holds data, and the Kubernetes providers' options.

File systems, buckets, Namespaces (with the jobs in them) and PersistentVolumes are ``protect``-ed, so Pulumi refuses
to delete or replace them, and ``retainOnDelete``, so even a replacement the stack config acknowledges
(``gpufleet:allowReplace``, validated by :func:`infra.config.stack.parse_allow_replace`) leaves the old one in the cloud
or the cluster instead of deleting its data: the operator moves what is needed and removes it by hand.

The worker's Kubernetes provider (:func:`k8s_provider_args`) keeps its identity across endpoint changes
(``clusterIdentifier``: pulumi-kubernetes replaces a provider, and everything under it, only when that changes)
and adopts objects that already exist (``upsertExistingObjects``: since pulumi-kubernetes 4.29 a create of an
existing object fails with AlreadyExists otherwise, so the JobSet CRD an earlier Helm install made and the
checkpoint PV/PVC an older ``placement submit`` made could never be taken over).
"""

from __future__ import annotations

from typing import Any

import pulumi

from infra.config import StackConfig

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


def k8s_provider_args(cluster_identifier: str) -> dict[str, Any]:
    """Keyword arguments of a worker's ``pulumi_kubernetes.Provider`` besides its kubeconfig."""
    return {"enable_server_side_apply": True, "upsert_existing_objects": True,
            "cluster_identifier": cluster_identifier}
