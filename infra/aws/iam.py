"""IAM policy documents shared by the AWS components, rendered as JSON strings."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pulumi

from infra.config import ConfigError

# IAM's default quota on a role's trust policy, counted without white space (raisable to 4096 on request).
TRUST_POLICY_MAX_CHARS = 2048


def service_trust_policy(service: str) -> str:
    """Trust policy letting an AWS service (``eks.amazonaws.com``, ``ec2.amazonaws.com``) assume a role."""
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}],
    })


def pod_identity_trust_policy() -> str:
    """Trust policy of a role assumed through EKS Pod Identity (the agent also tags the session)."""
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"Service": "pods.eks.amazonaws.com"},
                       "Action": ["sts:AssumeRole", "sts:TagSession"]}],
    })


def irsa_trust_document(oidc_provider_arn: str, issuer_url: str,
                        service_accounts: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """The IRSA trust policy as a dict: only the ``(namespace, name)`` service accounts may assume the role.

    ``issuer_url`` is the cluster's OIDC issuer (``https://oidc.eks...``); the condition keys use it without
    the scheme. Several subjects go into one ``StringEquals`` list, which IAM matches as any-of.
    """
    if not service_accounts:
        raise ValueError("an IRSA role needs at least one service account")
    host = issuer_url.removeprefix("https://")
    subjects = [f"system:serviceaccount:{ns}:{sa}" for ns, sa in service_accounts]
    return {
        "Version": "2012-10-17",
        "Statement": [{
            "Effect": "Allow",
            "Principal": {"Federated": oidc_provider_arn},
            "Action": "sts:AssumeRoleWithWebIdentity",
            "Condition": {"StringEquals": {
                f"{host}:sub": subjects[0] if len(subjects) == 1 else subjects,
                f"{host}:aud": "sts.amazonaws.com",
            }},
        }],
    }


def irsa_trust_policy(oidc_provider_arn: pulumi.Input[str], issuer_url: pulumi.Input[str],
                      service_accounts: Sequence[tuple[str, str]]) -> pulumi.Output[str]:
    """:func:`irsa_trust_document` as JSON, once the provider ARN and issuer are known."""
    accounts = list(service_accounts)
    return pulumi.Output.all(oidc_provider_arn, issuer_url).apply(
        lambda a: json.dumps(irsa_trust_document(str(a[0]), str(a[1]), accounts)))


def check_irsa_trust_size(region: str, service_accounts: Sequence[tuple[str, str]], field: str) -> None:
    """Raise :class:`ConfigError` on ``field`` when the IRSA trust policy for ``service_accounts`` could exceed
    IAM's trust policy quota (:data:`TRUST_POLICY_MAX_CHARS`), before anything is created.

    The OIDC provider ARN and issuer are unknown until the cluster exists, so the longest forms they take
    (GovCloud partition, China DNS suffix, 32-character issuer ID) stand in for them.
    """
    host = f"oidc.eks.{region}.amazonaws.com.cn/id/{'0' * 32}"
    arn = f"arn:aws-us-gov:iam::000000000000:oidc-provider/{host}"
    size = len(json.dumps(irsa_trust_document(arn, f"https://{host}", service_accounts), separators=(",", ":")))
    if size > TRUST_POLICY_MAX_CHARS:
        raise ConfigError(field, f"{len(service_accounts)} namespaces make the training role's IRSA trust policy "
                          f"up to {size} characters, over IAM's default quota of {TRUST_POLICY_MAX_CHARS}; "
                          "split the teams over more clusters")
