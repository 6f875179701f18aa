"""IAM policy documents shared by the AWS components, rendered as JSON strings."""

from __future__ import annotations

import json
from typing import Any

import pulumi


def service_trust_policy(service: str) -> str:
    """Trust policy letting an AWS service (``eks.amazonaws.com``, ``ec2.amazonaws.com``) assume a role."""
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}],
    })


def irsa_trust_policy(oidc_provider_arn: pulumi.Input[str], issuer_url: pulumi.Input[str],
                      namespace: str, service_account: str) -> pulumi.Output[str]:
    """Trust policy for IAM Roles for Service Accounts: only ``namespace/service_account`` may assume the role.

    ``issuer_url`` is the cluster's OIDC issuer (``https://oidc.eks...``); the condition keys use it without
    the scheme.
    """

    def render(args: list[Any]) -> str:
        arn, issuer = str(args[0]), str(args[1])
        host = issuer.removeprefix("https://")
        return json.dumps({
            "Version": "2012-10-17",
            "Statement": [{
                "Effect": "Allow",
                "Principal": {"Federated": arn},
                "Action": "sts:AssumeRoleWithWebIdentity",
                "Condition": {"StringEquals": {
                    f"{host}:sub": f"system:serviceaccount:{namespace}:{service_account}",
                    f"{host}:aud": "sts.amazonaws.com",
                }},
            }],
        })

    return pulumi.Output.all(oidc_provider_arn, issuer_url).apply(render)
