"""Issue 35 item 2: credentials by destination. A job sent through the hub whose group spans both clouds carries,
for each member of the other cloud than its home, what its stack federated: on GKE a projected service-account
token (audience sts.amazonaws.com) with AWS_ROLE_ARN / AWS_WEB_IDENTITY_TOKEN_FILE, on EKS an external_account
credential configuration (a ConfigMap) with GOOGLE_APPLICATION_CREDENTIALS. Never a Secret, never a key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from siblings import sibling

from placement.fleet import federation as fd
from placement.fleet.stacks import Federation, parse_cluster
from placement.model import contract

_h = sibling(__file__, "test_submit.py")
AUDIENCE = "//iam.googleapis.com/projects/123/locations/global/workloadIdentityPools/gpufleet/providers/aws"


def _federated(stack: str, peers: tuple[str, ...]) -> dict[str, Any]:
    out = _h.outputs(stack)
    if out["cloud"] == "aws":
        out["federation"] = {p: {"audience": fd.AWS_AUDIENCE, "roleArn": f"arn:aws:iam::123456789012:role/{p}"}
                             for p in peers}
    else:
        out["federation"] = {p: {"audience": AUDIENCE} for p in peers}
    return out


def _submit(tmp_path: Path, capsys: pytest.CaptureFixture[str], federate: bool) -> dict[str, Any]:
    aws = [s for s in _h.WORKERS if s.startswith("aws")]
    gcp = [s for s in _h.WORKERS if s.startswith("gcp")]
    docs: dict[str, Any] = {s: _federated(s, tuple(gcp if s in aws else aws) if federate else ()) for s in _h.WORKERS}
    docs["hub"] = _h.hub_outputs("External")
    job, _ = _h.job_file(tmp_path, gpus=8)
    code, out, err = _h.run(capsys, "submit", job, "--stacks", _h.write(tmp_path, "s.json", docs), "--dry-run",
                            "--json", "--via-hub")
    assert code == 0, err
    return json.loads(out)


def test_a_group_across_clouds_carries_each_destinations_credentials_and_no_secret(tmp_path, capsys) -> None:
    result = _submit(tmp_path, capsys, federate=True)
    home = result["chosen"]["stack"]
    home_cloud = "aws" if home.startswith("aws") else "gcp"
    workers = result["chosen"]["group"]["workers"]
    others = [w for w in workers if not w.startswith(home_cloud)]
    assert others, home  # the single-node group spans both clouds
    docs = result["manifest"]
    assert not [d for d in docs if d["kind"] == "Secret"]
    fed = {(d["metadata"]["annotations"]["gpufleet.io/cluster"], d["metadata"]["name"]): d for d in docs
           if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("gpufleet-federation-")}
    job = "llm-ft"
    for w in others:
        env = fed[(w, fd.env_configmap(job))]["data"]
        if home_cloud == "aws":  # a GKE member reaches S3 with its own token, exchanged for the home's role
            assert env[contract.ENV_AWS_ROLE_ARN] == f"arn:aws:iam::123456789012:role/{w}"
            assert env[contract.ENV_AWS_WEB_IDENTITY_TOKEN_FILE] == fd.TOKEN_FILE
        else:  # an EKS member reaches GCS through an external_account configuration
            assert env[contract.ENV_GOOGLE_APPLICATION_CREDENTIALS] == f"{fd.CONFIG_DIR}/{fd.CONFIG_KEY}"
            config = json.loads(fed[(w, fd.config_configmap(job))]["data"][fd.CONFIG_KEY])
            assert config["type"] == "external_account" and config["audience"] == AUDIENCE
            assert config["credential_source"]["environment_id"] == "aws1"
            assert "private_key" not in json.dumps(config) and "client_secret" not in config
    # Nothing for members of the home's own cloud (the stacks grant them the bucket).
    assert not [k for k in fed if k[0].startswith(home_cloud)]
    pod = _h.pod_of(docs[-1])
    (container,) = pod["spec"]["containers"]
    assert {"configMapRef": {"name": fd.env_configmap(job), "optional": True}} in container["envFrom"]
    names = {v["name"]: v for v in pod["spec"]["volumes"]}
    if home_cloud == "aws":
        (source,) = names[fd.TOKEN_VOLUME]["projected"]["sources"]
        assert source["serviceAccountToken"]["audience"] == "sts.amazonaws.com"
    else:
        assert names[fd.CONFIG_VOLUME]["configMap"]["optional"] is True
    # The credential environment is never on the container itself: a worker of the home's cloud keeps its own.
    assert not {e["name"] for e in container["env"]} & {contract.ENV_AWS_ROLE_ARN,
                                                         contract.ENV_GOOGLE_APPLICATION_CREDENTIALS}


def test_a_member_without_federation_is_warned_of(tmp_path, capsys) -> None:
    result = _submit(tmp_path, capsys, federate=False)
    assert not [d for d in result["manifest"] if d["metadata"]["name"].startswith("gpufleet-federation-")]
    assert any("restarts from step 0" in w and "exports no federation" in w for w in result["warnings"])


def test_the_external_account_configuration_names_impersonation_when_given() -> None:
    doc = fd.external_account_config(Federation("gcp", AUDIENCE, service_account="ckpt@p.iam.gserviceaccount.com"))
    assert doc["service_account_impersonation_url"].endswith("ckpt@p.iam.gserviceaccount.com:generateAccessToken")
    assert doc["subject_token_type"] == "urn:ietf:params:aws:token-type:aws4_request"
    cl = parse_cluster("g", {"cloud": "gcp", "region": "us-central1", "clusterName": "c", "nodePools": [],
                             "federation": {"a": fd.federation_entry(Federation("gcp", AUDIENCE))}}, "f")
    assert cl.federation["a"].audience == AUDIENCE


def test_an_eks_peer_of_a_gcs_home_gets_a_credential_configuration_and_an_optional_mount() -> None:
    home = parse_cluster("g", {**_h.outputs("gcp-usc1-a3mega"), "federation": {"aws-use1-p5": {"audience": AUDIENCE}}},
                         "f")
    peer = parse_cluster("aws-use1-p5", _h.outputs("aws-use1-p5"), "f")
    r = fd.reach(home, "aws-use1-p5", peer)
    assert r is not None and r.access is not None and fd.reach(home, "g2", home) is None
    env, config = fd.objects(home, r, "team-a", "llm")
    assert [env["kind"], config["kind"]] == ["ConfigMap", "ConfigMap"]
    assert env["data"] == {contract.ENV_GOOGLE_APPLICATION_CREDENTIALS: f"{fd.CONFIG_DIR}/{fd.CONFIG_KEY}"}
    assert json.loads(config["data"][fd.CONFIG_KEY])["token_url"] == fd.GOOGLE_STS_TOKEN_URL
    volumes, mounts, env_from = fd.pod_parts("llm", "gcp")
    assert volumes[0]["configMap"] == {"name": fd.config_configmap("llm"), "optional": True}
    assert mounts[0]["mountPath"] == fd.CONFIG_DIR and env_from[0]["configMapRef"]["optional"] is True
