"""Issue 35 item 3: the trainer reads its home across clouds through fsspec with the federated credentials, for
real on loopback. S3: a first run with the home cloud's own keys is stopped; the resume runs with nothing but
AWS_ROLE_ARN + AWS_WEB_IDENTITY_TOKEN_FILE (a signed service-account token, as GKE projects it), exchanged by
botocore with moto's STS AssumeRoleWithWebIdentity. GCS: the resume runs on "EKS" (its IRSA identity from moto's
STS) with the external_account configuration submit renders, its token_url pointed at a loopback token exchange,
against a GCS bucket on loopback that answers only the federated token. Both reach the uninterrupted final loss."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from placement.fleet.federation import external_account_config
from placement.fleet.stacks import Federation
from placement.model import contract

from .conftest import SMALL, base_env, trainer
from .federation_fakes import ACCESS_TOKEN, google_loopback, service_account_token
from .test_resume import SEED, STEPS, sigterm_at

ROLE = "arn:aws:iam::123456789012:role/aws-use1-p5-ckpt-federation-peer-gke-a"
AUDIENCE = "//iam.googleapis.com/projects/123/locations/global/workloadIdentityPools/gpufleet/providers/aws-eks"


@pytest.fixture(scope="module")
def final(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    cfg = tmp_path_factory.mktemp("cfg") / "model.yaml"
    cfg.write_text(SMALL, encoding="utf-8")
    proc = trainer("--steps", str(STEPS), "--seed", str(SEED), "--config", str(cfg), env=base_env())
    assert proc.returncode == 0, proc.stderr
    return cfg, proc.stdout.splitlines()[-1]


def _stop_then_resume(home: str, cfg: Path, first: dict[str, str], second: dict[str, str]) -> str:
    args = ["--steps", str(STEPS), "--seed", str(SEED), "--config", str(cfg), "--checkpoint-every", "50"]
    common = {"GPUFLEET_CHECKPOINT_DIR": home, "GPUFLEET_RETRY_EXIT_CODE": "75", "GPUFLEET_GRACE_SECONDS": "30"}
    rc, _, err = sigterm_at(60, args, base_env(**common, **first))
    assert rc == 75, err[-2000:]
    resumed = trainer(*args, env=base_env(**common, **second), timeout=120)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed from {home}/step-" in resumed.stderr
    return resumed.stdout.splitlines()[-1]


def test_gke_resumes_an_s3_home_through_sts_web_identity(moto_s3: dict[str, str], final: tuple[Path, str],
                                                         tmp_path: Path) -> None:
    cfg, uninterrupted = final
    token = tmp_path / "token"
    token.write_text(service_account_token(), encoding="utf-8")
    federated = {"AWS_ENDPOINT_URL": moto_s3["AWS_ENDPOINT_URL"], "AWS_DEFAULT_REGION": "us-east-1",
                 contract.ENV_AWS_ROLE_ARN: ROLE, contract.ENV_AWS_WEB_IDENTITY_TOKEN_FILE: str(token),
                 contract.ENV_AWS_ROLE_SESSION_NAME: "gpufleet-llm"}
    home = f"s3://ckpt/xcloud-{tmp_path.name}"
    assert _stop_then_resume(home, cfg, moto_s3, federated) == uninterrupted
    # The resume had no key of its own: only the role, the token file and the endpoint.
    assert not {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} & set(federated)
    # The trainer publishes its progress beside the checkpoints, in the annotations' form (the dispatcher's input).
    import boto3

    s3 = boto3.client("s3", endpoint_url=moto_s3["AWS_ENDPOINT_URL"], region_name="us-east-1",
                      aws_access_key_id="testing", aws_secret_access_key="testing")
    body = s3.get_object(Bucket="ckpt", Key=f"xcloud-{tmp_path.name}/{contract.PROGRESS_FILE}")["Body"].read()
    progress, warnings = contract.read_progress(json.loads(body))
    assert warnings == () and progress is not None and progress.last_step == STEPS
    assert progress.steps_per_hour is not None and progress.steps_per_hour > 0


def test_eks_resumes_a_gcs_home_through_an_external_account(moto_s3: dict[str, str], final: tuple[Path, str],
                                                            tmp_path: Path) -> None:
    cfg, uninterrupted = final
    with google_loopback() as (base, seen):
        config = tmp_path / "credentials.json"
        doc = external_account_config(Federation("gcp", AUDIENCE), token_url=f"{base}/v1/token")
        config.write_text(json.dumps(doc), encoding="utf-8")
        token = tmp_path / "eks-token"
        token.write_text(service_account_token(issuer="https://oidc.eks.us-east-1.amazonaws.com/id/ABC"),
                         encoding="utf-8")
        # The loopback bucket speaks GCS's JSON API only: gcsfs's bucket-type probe (gRPC storage control) off.
        gcs = {"STORAGE_EMULATOR_HOST": base, "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}
        # EKS: its training role by IRSA (moto's STS), then Google's token exchange for the bucket.
        eks = {**gcs, "AWS_ENDPOINT_URL": moto_s3["AWS_ENDPOINT_URL"], "AWS_REGION": "us-east-1",
               contract.ENV_AWS_ROLE_ARN: "arn:aws:iam::123456789012:role/aws-use1-p5-training",
               contract.ENV_AWS_WEB_IDENTITY_TOKEN_FILE: str(token),
               contract.ENV_GOOGLE_APPLICATION_CREDENTIALS: str(config)}
        home = f"gs://gcp-home/checkpoints/{tmp_path.name}"
        assert _stop_then_resume(home, cfg, eks, eks) == uninterrupted
        assert seen.exchanges and seen.exchanges[0]["audience"] == AUDIENCE
        assert seen.exchanges[0]["subject_token_type"] == "urn:ietf:params:aws:token-type:aws4_request"
        assert seen.unauthorised == 0 and any(n.endswith("/manifest.json") for _, n in seen.objects)
    assert ACCESS_TOKEN not in json.dumps(seen.exchanges)
