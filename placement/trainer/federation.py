"""The trainer's home across clouds (issue 35; docs/kueue-hub.md#checkpoints-across-clouds): the fsspec options
that reach a checkpoint home with the credentials ``placement submit`` rendered for the other cloud.

* ``s3://`` from GKE: nothing to do here. ``AWS_ROLE_ARN`` and ``AWS_WEB_IDENTITY_TOKEN_FILE`` are botocore's own
  web identity provider's (s3fs through aiobotocore): it calls ``AssumeRoleWithWebIdentity`` with the projected
  token and renews the session before it expires.
* ``gs://`` from EKS: ``GOOGLE_APPLICATION_CREDENTIALS`` names an ``external_account`` credential configuration
  whose credential source is AWS (``environment_id`` ``aws1``). google-auth would read the AWS credentials from
  the environment's keys or the EC2 metadata server; an EKS pod has neither (its IRSA identity is a web identity
  token). So the AWS side comes from botocore's credential chain instead (:class:`BotocoreSupplier`: IRSA, renewed)
  and the rest (audience, token URL, impersonation) from the configuration; gcsfs is handed those credentials.

Standard library at import; google-auth and botocore are imported only for such a home.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from placement.model import contract

GCS_SCOPE = "https://www.googleapis.com/auth/devstorage.read_write"


def _aws_external_account(env: Mapping[str, str]) -> dict[str, Any] | None:
    """The external_account configuration ``GOOGLE_APPLICATION_CREDENTIALS`` names, when its source is AWS."""
    path = env.get(contract.ENV_GOOGLE_APPLICATION_CREDENTIALS)
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.loads(f.read(1 << 20))
    except (OSError, ValueError):
        return None  # google-auth reads it again and says what is wrong with it
    source = doc.get("credential_source") if isinstance(doc, dict) else None
    if doc.get("type") != "external_account" or not isinstance(source, dict) or \
            not str(source.get("environment_id", "")).startswith("aws"):
        return None
    return doc


def storage_options(uri: str, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """fsspec options for the home ``uri``: ``{"token": credentials}`` for a ``gs://`` home reached from AWS
    through an external_account configuration (module docstring), else none (each filesystem's own chain)."""
    env = os.environ if env is None else env
    if not uri.startswith(("gs://", "gcs://")):
        return {}
    doc = _aws_external_account(env)
    if doc is None:
        return {}
    return {"token": aws_external_credentials(doc, env)}


def aws_external_credentials(doc: Mapping[str, Any], env: Mapping[str, str]) -> Any:
    """google-auth AWS external-account credentials for configuration ``doc`` whose AWS credentials and region come
    from botocore (:class:`BotocoreSupplier`)."""
    from google.auth import aws

    kwargs: dict[str, Any] = {}
    if doc.get("service_account_impersonation_url"):
        kwargs["service_account_impersonation_url"] = doc["service_account_impersonation_url"]
    return aws.Credentials(audience=doc["audience"], subject_token_type=doc["subject_token_type"],
                           token_url=doc.get("token_url") or "https://sts.googleapis.com/v1/token",
                           aws_security_credentials_supplier=BotocoreSupplier(env), scopes=[GCS_SCOPE],
                           universe_domain=doc.get("universe_domain") or "googleapis.com", **kwargs)


def BotocoreSupplier(env: Mapping[str, str]) -> Any:  # noqa: N802 (a class made on first use)
    """A google-auth ``AwsSecurityCredentialsSupplier`` giving the pod's AWS credentials and region as botocore
    resolves them (environment, web identity/IRSA, instance profile), re-read on each call: botocore caches and
    renews a web identity session itself. The class is made on first use (google-auth is imported only then)."""
    import botocore.session
    from google.auth import aws, exceptions

    class _Supplier(aws.AwsSecurityCredentialsSupplier):  # type: ignore[misc]
        def __init__(self) -> None:
            self._session = botocore.session.get_session()
            self._region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or \
                self._session.get_config_variable("region")

        def get_aws_security_credentials(self, context: Any, request: Any) -> Any:
            found = self._session.get_credentials()
            if found is None:
                raise exceptions.RefreshError("no AWS credentials for the external account (IRSA not set up?)")
            frozen = found.get_frozen_credentials()
            return aws.AwsSecurityCredentials(frozen.access_key, frozen.secret_key, frozen.token)

        def get_aws_region(self, context: Any, request: Any) -> str:
            if not self._region:
                raise exceptions.RefreshError("no AWS region for the external account: set AWS_REGION")
            return str(self._region)

    return _Supplier()
