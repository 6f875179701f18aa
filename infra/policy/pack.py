"""The CrossGuard wiring of :mod:`infra.policy.checks`: one Pulumi policy per check, all mandatory.

``infra/policy/__main__.py`` serves these with ``pulumi_policy.PolicyPack`` for
``pulumi preview --policy-pack infra/policy``. Kept apart from ``__main__`` because constructing a
``PolicyPack`` starts the analyzer server and never returns; tests import :func:`policies` instead.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from infra.policy import checks

PACK_NAME = "gpufleet"
STACK_TYPE = "pulumi:pulumi:Stack"
# Top-level property names whose values arrived as Pulumi secrets (see install_secret_marker).
SECRET_KEYS_FIELD = "__gpufleetSecretKeys"
_SIG_KEY = "4dabf18193072939515e22adb298388d"
_SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"

DESCRIPTIONS: Mapping[str, str] = {
    checks.IMDSV2: "Launch templates require IMDSv2 (metadataOptions.httpTokens = required).",
    checks.S3_PROTECTED: "S3 buckets are encrypted, versioned and block all public access.",
    checks.GCS_PROTECTED: "GCS buckets enforce public access prevention, uniform access, versioning or soft delete.",
    checks.GPU_TAINT: "GPU node pools carry the nvidia.com/gpu NoSchedule taint.",
    checks.EFA_INTERFACES: "EFA node groups put one EFA interface on every network card of the shape.",
    checks.GCP_GPU_NETWORKS: "GKE GPU node pools attach every GPU VPC / RDMA subnet of the machine type.",
    checks.PUBLIC_INGRESS: "No ingress from 0.0.0.0/0 to SSH; none from a public range to the Kubernetes API unless "
                           "the stack config lists it (publicAccessCidrs with publicAccess, or hubCidrs).",
    checks.KUBECONFIG_SECRET: "Kubeconfig stack outputs are secrets.",
    checks.REQUIRED_TAGS: "Taggable resources carry owner and cost-center tags/labels.",
    checks.HUB_REACHES_WORKERS: "A MultiKueue hub's egress CIDRs are authorised on every worker's API endpoint.",
    checks.STATEFUL_PROTECTED: "File systems, buckets, Namespaces and PersistentVolumes are protected unless "
                               "gpufleet:allowReplace lists them.",
    checks.STATEFUL_REPLACE: "A change replacing a file system, bucket, node group or Namespace is acknowledged in "
                             "gpufleet:allowReplace (scripts/preview --base, which sees the diff).",
}


def install_secret_marker() -> None:
    """Let stack policies see which stack outputs are secrets.

    pulumi_policy unwraps secret values before policies run, so a plain-text kubeconfig output and a secret one
    look the same. This wraps its deserializer to record the names of top-level secret properties under
    ``SECRET_KEYS_FIELD``; the values themselves stay as pulumi_policy delivers them.
    """
    import pulumi_policy.policy as pp

    original = pp.deserialize_properties
    if getattr(original, "_gpufleet_marker", False):
        return

    def marking(props: dict[str, Any], proxy_secrets: bool = False) -> dict[str, Any]:
        out = original(props, proxy_secrets)
        secret = sorted(k for k, v in props.items() if isinstance(v, dict) and v.get(_SIG_KEY) == _SECRET_SIG)
        if secret:
            out[SECRET_KEYS_FIELD] = secret
        return out

    marking._gpufleet_marker = True  # type: ignore[attr-defined]
    pp.deserialize_properties = marking


def stack_cluster_config() -> Mapping[str, Any]:
    """The stack's raw ``gpufleet:cluster`` config; the Pulumi CLI hands policy packs the stack config.

    Empty when absent (then no CIDR is allowed to reach the API from the internet).
    """
    import pulumi

    try:
        value = pulumi.Config("gpufleet").get_object("cluster")
    except Exception:  # noqa: BLE001 - a malformed value must not disable the policy; fall back to strict
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return value if isinstance(value, Mapping) else {}


def _plain(value: Any) -> Any:
    """A plain copy of pulumi_policy's proxied props; values unknown during preview become None."""
    from pulumi_policy.proxy import UnknownValueError

    if isinstance(value, Mapping):
        out = {}
        for key in value:
            try:
                out[key] = _plain(value[key])
            except UnknownValueError:
                out[key] = None
        return out
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        items = []
        for i in range(len(value)):
            try:
                items.append(_plain(value[i]))
            except UnknownValueError:
                items.append(None)
        return items
    return value


def from_policy_resource(resource: Any) -> checks.Resource:
    """A :class:`checks.Resource` from a CrossGuard ``PolicyResource``, keyed by URN, linked by property deps."""
    deps = {key: frozenset(d.urn for d in found) for key, found in (resource.property_dependencies or {}).items()}
    return checks.Resource(type=resource.resource_type, name=resource.name, props=_plain(resource.props),
                           key=resource.urn, deps=deps)


def _resource_policy(rule: str, check: Callable[[str, Mapping[str, Any]], list[str]]) -> Any:
    from pulumi_policy import ResourceValidationPolicy

    def validate(args: Any, report_violation: Callable[..., None]) -> None:
        for message in check(args.resource_type, args.props):
            report_violation(message, None)

    return ResourceValidationPolicy(name=rule, description=DESCRIPTIONS[rule], validate=validate)


def _public_ingress_policy() -> Any:
    from pulumi_policy import ResourceValidationPolicy

    def validate(args: Any, report_violation: Callable[..., None]) -> None:
        cluster = stack_cluster_config()
        if checks.hub_stack_of(cluster):
            return  # judged with the hub's exported egress by _public_ingress_with_hub_policy
        for message in checks.check_public_ingress(args.resource_type, args.props,
                                                   checks.allowed_public_cidrs(cluster),
                                                   checks.allowed_api_cidrs(cluster)):
            report_violation(message, None)

    return ResourceValidationPolicy(name=checks.PUBLIC_INGRESS, description=DESCRIPTIONS[checks.PUBLIC_INGRESS],
                                    validate=validate)


def _public_ingress_with_hub_policy() -> Any:
    """``no-public-admin-ingress`` for a worker with ``gpufleet:cluster.hubStack``: the same check, also allowing
    the egress CIDRs its StackReference read from that hub (only a stack policy sees that resource)."""
    from pulumi_policy import StackValidationPolicy

    def validate(args: Any, report_violation: Callable[..., None]) -> None:
        cluster = stack_cluster_config()
        hub_stack = checks.hub_stack_of(cluster)
        if not hub_stack:
            return
        resources = [from_policy_resource(r) for r in args.resources]
        hub = checks.allowed_api_cidrs(cluster) | checks.hub_egress_cidrs(resources, hub_stack)
        for r in resources:
            for message in checks.check_public_ingress(r.type, r.props, checks.allowed_public_cidrs(cluster), hub):
                report_violation(message, r.key)

    return StackValidationPolicy(name=f"{checks.PUBLIC_INGRESS}-via-hub-stack",
                                 description=DESCRIPTIONS[checks.PUBLIC_INGRESS], validate=validate)


def _stack_policy(name: str, rule: str, check: Callable[[Sequence[checks.Resource]], list[checks.Violation]]) -> Any:
    from pulumi_policy import StackValidationPolicy

    def validate(args: Any, report_violation: Callable[..., None]) -> None:
        resources = [from_policy_resource(r) for r in args.resources]
        for violation in check(resources):
            report_violation(violation.message, violation.resource)

    return StackValidationPolicy(name=name, description=DESCRIPTIONS[rule], validate=validate)


def _kubeconfig_policy() -> Any:
    from pulumi_policy import StackValidationPolicy

    def validate(args: Any, report_violation: Callable[..., None]) -> None:
        for r in args.resources:
            if r.resource_type != STACK_TYPE:
                continue
            names = [k for k in r.props if k != SECRET_KEYS_FIELD]
            secret = r.props.get(SECRET_KEYS_FIELD) or ()
            for message in checks.check_kubeconfig_secret(names, list(secret)):
                report_violation(message, r.urn)

    return StackValidationPolicy(name=checks.KUBECONFIG_SECRET, description=DESCRIPTIONS[checks.KUBECONFIG_SECRET],
                                 validate=validate)


def _reachability_policy() -> Any:
    """The hub's ``reachability`` stack output (the hub's egress CIDRs next to each worker's exported
    ``apiAccess``, read through StackReference) checked like ``scripts/preview`` checks it."""
    from pulumi_policy import StackValidationPolicy

    def validate(args: Any, report_violation: Callable[..., None]) -> None:
        for r in args.resources:
            if r.resource_type != STACK_TYPE:
                continue
            for violation in checks.check_hub_reachability(_plain(r.props)):
                report_violation(violation.message, r.urn)

    return StackValidationPolicy(name=checks.HUB_REACHES_WORKERS,
                                 description=DESCRIPTIONS[checks.HUB_REACHES_WORKERS], validate=validate)


def stack_allow_replace() -> frozenset[str]:
    """The stack's ``gpufleet:allowReplace`` (empty when absent or malformed)."""
    import pulumi

    try:
        value = pulumi.Config("gpufleet").get_object("allowReplace")
    except Exception:  # noqa: BLE001 - a malformed value acknowledges nothing
        return frozenset()
    return checks.allow_replace_of({"allowReplace": value})


def _stateful_protected_policy() -> Any:
    """Every stateful resource protected (its ``protect`` option, as CrossGuard sees it) unless acknowledged: a
    real `pulumi preview` cannot see a diff, but Pulumi refuses to replace a protected resource."""
    from pulumi_policy import StackValidationPolicy

    def validate(args: Any, report_violation: Callable[..., None]) -> None:
        allowed = stack_allow_replace()
        items = [(r.name, r.resource_type, bool(getattr(r.opts, "protect", False))) for r in args.resources]
        by_name = {r.name: r.urn for r in args.resources}
        for violation in checks.check_stateful_protected(items, allowed):
            report_violation(violation.message, by_name.get(violation.resource))

    return StackValidationPolicy(name=checks.STATEFUL_PROTECTED, description=DESCRIPTIONS[checks.STATEFUL_PROTECTED],
                                 validate=validate)


def policies() -> list[Any]:
    """Every gpufleet policy as a pulumi_policy ``Policy`` (resource policies first, then stack policies)."""
    out = [_resource_policy(rule, check) for rule, check in checks.RESOURCE_CHECKS.items()]
    out.append(_public_ingress_policy())
    out.append(_public_ingress_with_hub_policy())
    out.append(_stack_policy(checks.S3_PROTECTED, checks.S3_PROTECTED, checks.check_s3_buckets))
    out.append(_stack_policy(checks.EFA_INTERFACES, checks.EFA_INTERFACES, checks.check_efa_interfaces))
    out.append(_stack_policy(f"{checks.GPU_TAINT}-via-launch-template", checks.GPU_TAINT,
                             checks.check_gpu_taints_via_launch_template))
    out.append(_kubeconfig_policy())
    out.append(_reachability_policy())
    out.append(_stateful_protected_policy())
    return out
