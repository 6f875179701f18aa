"""Credentials by destination: what a pod needs to reach its checkpoint home from a worker of the other cloud
(issue 35; docs/kueue-hub.md#checkpoints-across-clouds). Pure: stack outputs in, Kubernetes objects out.

The home's worker exports, per peer worker of the other cloud, what its stack federated for it
(:class:`placement.fleet.stacks.Federation`). For a job sent through the hub, ``placement submit`` creates on each
such peer, next to the job's other storage objects:

* **GKE peer, S3 home**: ConfigMap ``gpufleet-federation-<job>`` with ``AWS_ROLE_ARN`` (the role the home's stack
  made for that peer), ``AWS_WEB_IDENTITY_TOKEN_FILE`` (the pod's projected service-account token, audience the
  home's OIDC provider client ID, ``sts.amazonaws.com``), ``AWS_ROLE_SESSION_NAME`` and the home's region
  (``AWS_REGION``, ``AWS_DEFAULT_REGION``): botocore's web identity provider (s3fs) exchanges the token with STS.
* **EKS peer, GCS home**: ConfigMap ``gpufleet-federation-<job>`` with ``GOOGLE_APPLICATION_CREDENTIALS`` and
  ConfigMap ``gpufleet-federation-<job>-config`` with ``credentials.json``, an ``external_account`` credential
  configuration (:func:`external_account_config`): the audience of the home's Workload Identity pool provider,
  Google's STS token URL and the AWS credential source, ``environment_id`` ``aws1``. It holds no secret.

The job's pod template is the same on every worker (MultiKueue copies it): it reads the first ConfigMap with
``envFrom`` (optional: absent on a worker of the home's cloud), mounts the second (optional) and a projected
service-account token (:func:`pod_parts`). No long-lived key is created, and nothing goes in a Secret. A re-route
by ``placement dispatch`` to any member of the job's group finds its objects there already.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from placement.fleet.stacks import ClusterStack, Federation
from placement.model import contract

AWS_AUDIENCE = "sts.amazonaws.com"  # the client ID the home's IAM OIDC providers list (the IRSA convention)
TOKEN_VOLUME = "gpufleet-federation-token"
TOKEN_DIR = "/var/run/secrets/gpufleet.io/federation"
TOKEN_FILE = f"{TOKEN_DIR}/token"
TOKEN_SECONDS = 3600  # the projected token's lifetime; the kubelet renews it at 80%
CONFIG_VOLUME = "gpufleet-federation-config"
CONFIG_DIR = "/etc/gpufleet/federation"
CONFIG_KEY = "credentials.json"
GOOGLE_STS_TOKEN_URL = "https://sts.googleapis.com/v1/token"
AWS4_REQUEST = "urn:ietf:params:aws:token-type:aws4_request"
# What `gcloud iam workload-identity-pools create-cred-config --aws` writes (google-auth's aws.Credentials reads
# them: the region from the metadata server unless AWS_REGION is set, the caller identity signed for that region).
AWS_REGION_URL = "http://169.254.169.254/latest/meta-data/placement/availability-zone"
AWS_CREDENTIALS_URL = "http://169.254.169.254/latest/meta-data/iam/security-credentials"
AWS_VERIFICATION_URL = "https://sts.{region}.amazonaws.com?Action=GetCallerIdentity&Version=2011-06-15"


def env_configmap(job: str) -> str:
    """The ConfigMap whose keys become the pod's credential environment."""
    return f"gpufleet-federation-{job}"


def config_configmap(job: str) -> str:
    """The ConfigMap holding the ``external_account`` credential configuration (EKS peers only)."""
    return f"gpufleet-federation-{job}-config"


def external_account_config(access: Federation, token_url: str = GOOGLE_STS_TOKEN_URL) -> dict[str, Any]:
    """The ``external_account`` credential configuration an EKS pod reaches a GCS home with: the pool provider's
    ``audience``, the AWS subject token type, ``token_url`` and the ``aws1`` credential source; with
    ``service_account_impersonation_url`` when the home's stack grants a service account instead of the principal."""
    doc: dict[str, Any] = {
        "universe_domain": "googleapis.com",
        "type": "external_account",
        "audience": access.audience,
        "subject_token_type": AWS4_REQUEST,
        "token_url": token_url,
        "credential_source": {"environment_id": "aws1", "region_url": AWS_REGION_URL, "url": AWS_CREDENTIALS_URL,
                              "regional_cred_verification_url": AWS_VERIFICATION_URL},
    }
    if access.service_account:
        doc["service_account_impersonation_url"] = (
            "https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/"
            f"{access.service_account}:generateAccessToken")
    return doc


@dataclass(frozen=True)
class Reach:
    """How a job homed on ``home`` reaches it from ``peer`` (worker ``key``): ``access`` the home's federation for
    it, None when there is none (then the job restarts from step 0 there)."""

    key: str
    peer: ClusterStack
    access: Federation | None


def reach(home: ClusterStack, key: str, peer: ClusterStack) -> Reach | None:
    """None when ``peer`` is in the home's cloud (the stacks grant same-cloud peers the bucket), else its
    :class:`Reach`."""
    if peer.cloud == home.cloud:
        return None
    return Reach(key, peer, home.federation.get(key))


def objects(home: ClusterStack, r: Reach, ns: str, job: str) -> list[dict[str, Any]]:
    """The ConfigMaps to create on peer ``r`` for ``job`` homed on ``home`` (none without federation)."""
    access = r.access
    if access is None:
        return []
    meta = {"namespace": ns, "labels": {"app.kubernetes.io/managed-by": "gpufleet", contract.JOB_LABEL: job}}
    c = contract
    if access.cloud == "aws":
        assert access.role_arn is not None
        data = {c.ENV_AWS_ROLE_ARN: access.role_arn, c.ENV_AWS_WEB_IDENTITY_TOKEN_FILE: TOKEN_FILE,
                c.ENV_AWS_ROLE_SESSION_NAME: f"gpufleet-{job}"[:64],
                "AWS_REGION": home.region, "AWS_DEFAULT_REGION": home.region}
        return [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": env_configmap(job), **meta},
                 "data": data}]
    config = json.dumps(external_account_config(access), indent=2, sort_keys=True)
    return [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": env_configmap(job), **meta},
             "data": {c.ENV_GOOGLE_APPLICATION_CREDENTIALS: f"{CONFIG_DIR}/{CONFIG_KEY}"}},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": config_configmap(job), **meta},
             "data": {CONFIG_KEY: config}}]


def pod_parts(job: str, home_cloud: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """``(volumes, volume mounts, envFrom entries)`` for a pod whose home is in ``home_cloud`` and that may land
    on the other cloud: all optional, so the same template runs on a worker of either cloud. An S3 home needs the
    projected token (audience :data:`AWS_AUDIENCE`); a GCS home the credential configuration."""
    env_from = [{"configMapRef": {"name": env_configmap(job), "optional": True}}]
    if home_cloud == "aws":
        volume = {"name": TOKEN_VOLUME, "projected": {"sources": [{"serviceAccountToken": {
            "audience": AWS_AUDIENCE, "expirationSeconds": TOKEN_SECONDS, "path": "token"}}]}}
        return [volume], [{"name": TOKEN_VOLUME, "mountPath": TOKEN_DIR, "readOnly": True}], env_from
    volume = {"name": CONFIG_VOLUME, "configMap": {"name": config_configmap(job), "optional": True}}
    return [volume], [{"name": CONFIG_VOLUME, "mountPath": CONFIG_DIR, "readOnly": True}], env_from


def warning(r: Reach, home: ClusterStack) -> str | None:
    """What submit says of a peer the home's stack federates nothing for."""
    if r.access is not None:
        return None
    return (f"{r.key} ({r.peer.cloud}) cannot reach the job's {home.cloud} home: {home.stack} exports no "
            f"federation for it (docs/kueue-hub.md#checkpoints-across-clouds); a job moved there restarts from "
            "step 0")


def federation_entry(access: Federation) -> Mapping[str, str]:
    """The ``federation`` output's entry of ``access`` (the form :func:`placement.fleet.stacks.parse_cluster`
    reads)."""
    out = {"audience": access.audience}
    if access.role_arn:
        out["roleArn"] = access.role_arn
    if access.service_account:
        out["serviceAccount"] = access.service_account
    return out
