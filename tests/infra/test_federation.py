"""Issue 35 item 1: a hub with workers of both clouds gets identity federation both ways, made by the worker
stacks that own the checkpoint homes. GKE → S3: an IAM OIDC provider per GKE worker's issuer and a role per peer
trusting its training service accounts (sub and aud), read/write on the checkpoint prefix and the bucket's key.
EKS → GCS: a Workload Identity pool, an AWS provider per EKS peer (account ID, attribute condition on its training
role) and objectAdmin on the prefix (IAM condition) for that principal set. Keyed by worker key: a worker joining
changes no existing resource."""

from __future__ import annotations

import json
from typing import Any

from siblings import sibling

from infra import mockrun
from infra.aws.federation import trust_policy
from infra.gcp.federation import short_id
from infra.hub_link import HubView, cross_cloud_peers
from infra.k8s.hub import worker_checkpoint

_p = sibling(__file__, "test_checkpoint_peers.py")
AWS_A, AWS_B, GCP_A, GCP_B = _p.AWS_A, _p.AWS_B, _p.GCP_A, _p.GCP_B
OIDC = "aws:iam/openIdConnectProvider:OpenIdConnectProvider"
POOL = "gcp:iam/workloadIdentityPool:WorkloadIdentityPool"
POOL_PROVIDER = "gcp:iam/workloadIdentityPoolProvider:WorkloadIdentityPoolProvider"


def issuer(key: str) -> str:
    return f"https://container.googleapis.com/v1/projects/proj-{key}/locations/us-central1/clusters/{key}"


def entry(key: str) -> dict[str, Any]:
    out = _p.entry(key)
    if key.startswith("gcp"):
        out.update(issuer=issuer(key),
                   subjects=[f"system:serviceaccount:{ns}:trainer" for ns in ("team-a", "training")])
    return out


def hub(*keys: str) -> dict[str, Any]:
    return {**_p.hub_outputs(*keys), "workerCheckpoints": {k: entry(k) for k in keys}}


def made(run: mockrun.RunResult) -> dict[str, dict[str, Any]]:
    """Every federation resource by name, with its inputs."""
    return {r.name: r.inputs for r in run.resources if "-federation" in r.name}


def test_an_aws_home_trusts_each_gke_workers_training_accounts_and_nothing_more() -> None:
    run = _p.run_worker(AWS_A, hub(AWS_A, AWS_B, GCP_A, GCP_B))
    providers = {r.name: r.inputs for r in run.of_type(OIDC) if "-federation-" in r.name}
    assert sorted(p["url"] for p in providers.values()) == sorted([issuer(GCP_A), issuer(GCP_B)])
    assert all(p["clientIdLists"] == ["sts.amazonaws.com"] for p in providers.values())
    roles = {r.name: r.inputs for r in run.of_type("aws:iam/role:Role") if "-federation-peer-" in r.name}
    assert len(roles) == 2
    role = roles[next(n for n in roles if n.endswith(f"-peer-{GCP_A}"))]
    (statement,) = json.loads(role["assumeRolePolicy"])["Statement"]
    host = issuer(GCP_A).removeprefix("https://")
    assert statement["Action"] == "sts:AssumeRoleWithWebIdentity"
    assert statement["Condition"]["StringEquals"] == {
        f"{host}:aud": "sts.amazonaws.com",
        f"{host}:sub": ["system:serviceaccount:team-a:trainer", "system:serviceaccount:training:trainer"]}
    policies = {r.name: json.loads(r.inputs["policy"]) for r in run.of_type("aws:iam/rolePolicy:RolePolicy")
                if "-federation-peer-" in r.name}
    doc = policies[next(n for n in policies if f"-peer-{GCP_A}" in n)]
    actions = {a for s in doc["Statement"] for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    assert "s3:*" not in actions and "kms:*" not in actions and "s3:PutObject" in actions and "kms:Decrypt" in actions
    rw = next(s for s in doc["Statement"] if s["Sid"] == "ReadWriteHomes")
    assert rw["Resource"].endswith("/checkpoints/*")  # the home's prefix only
    fed = run.outputs["federation"]
    assert set(fed) == {GCP_A, GCP_B} and fed[GCP_A]["audience"] == "sts.amazonaws.com"
    assert fed[GCP_A]["roleArn"].startswith("arn:")
    # Nothing for the other AWS worker (the bucket policy grants it) and no GCP resources.
    assert not run.of_type(POOL)


def test_a_gcp_home_federates_each_eks_workers_training_role() -> None:
    run = _p.run_worker(GCP_A, hub(AWS_A, AWS_B, GCP_A, GCP_B))
    (pool,) = run.of_type(POOL)
    providers = {r.name: r.inputs for r in run.of_type(POOL_PROVIDER)}
    assert len(providers) == 2
    mine = providers[next(n for n in providers if n.endswith(f"-aws-{AWS_A}"))]
    assert mine["aws"] == {"accountId": "123456789012"}
    assert mine["attributeCondition"] == (
        f'attribute.aws_role == "arn:aws:sts::123456789012:assumed-role/{AWS_A}-training"')
    grants = {r.name: r.inputs for r in run.of_type("gcp:storage/bucketIAMMember:BucketIAMMember")
              if "-federation-objects-" in r.name}
    grant = grants[next(n for n in grants if n.endswith(f"-objects-{AWS_A}"))]
    assert grant["role"] == "roles/storage.objectAdmin"
    assert grant["member"].startswith("principalSet://iam.googleapis.com/")
    assert grant["member"].endswith(f"/attribute.aws_role/arn:aws:sts::123456789012:assumed-role/{AWS_A}-training")
    assert '/objects/checkpoints/")' in grant["condition"]["expression"]
    assert set(run.outputs["federation"]) == {AWS_A, AWS_B}
    assert run.outputs["serviceAccountIssuer"].startswith("https://container.googleapis.com/v1/projects/")
    assert not run.of_type(OIDC) or not [r for r in run.of_type(OIDC) if "-federation-" in r.name]
    assert not [r for r in run.resources if r.type == "gcp:serviceaccount/key:Key"]


def test_a_hub_of_one_cloud_makes_no_federation() -> None:
    assert made(_p.run_worker(AWS_A, hub(AWS_A, AWS_B))) == {}
    run = _p.run_worker(GCP_A, hub(GCP_A, GCP_B))
    assert made(run) == {} and "federation" not in run.outputs


def test_a_worker_joining_changes_no_existing_federation_resource() -> None:
    before = made(_p.run_worker(AWS_A, hub(AWS_A, GCP_A)))
    after = made(_p.run_worker(AWS_A, hub(AWS_A, GCP_A, GCP_B, "gcp-aaa-first")))
    assert before and set(before) < set(after) and all(after[n] == before[n] for n in before)
    before = made(_p.run_worker(GCP_A, hub(GCP_A, AWS_B)))
    after = made(_p.run_worker(GCP_A, hub(GCP_A, AWS_B, AWS_A, "aws-aaa-first")))
    assert before and set(before) < set(after) and all(after[n] == before[n] for n in before)


def test_the_hub_hands_on_the_gke_issuer_and_subjects_and_malformed_ones_are_dropped() -> None:
    e = worker_checkpoint("gcp", "b", None, "sa@p.iam.gserviceaccount.com", issuer(GCP_A),
                          {"name": "trainer", "namespaces": ["team-a"]})
    assert e is not None and e["subjects"] == ["system:serviceaccount:team-a:trainer"]
    view = HubView.of({"workerCheckpoints": {GCP_A: e, GCP_B: {**e, "issuer": "http://evil"}, AWS_A: entry(AWS_A)}})
    peers = cross_cloud_peers(view, f"org/p/{AWS_B}", "aws")
    assert set(peers) == {GCP_A}  # GCP_B's issuer is not https: not federated
    assert set(cross_cloud_peers(view, f"org/p/{GCP_B}", "gcp")) == {AWS_A}
    assert cross_cloud_peers(None, AWS_A, "aws") == {}


def test_ids_are_valid_and_trust_is_exact() -> None:
    assert short_id("gpufleet-" + "x" * 60) != short_id("gpufleet-" + "x" * 61)
    assert all(4 <= len(short_id(t)) <= 32 for t in ("a", "aws-" + "k" * 40, "9x"))
    doc = json.loads(trust_policy("arn:p", issuer(GCP_A), ["system:serviceaccount:b:t", "system:serviceaccount:a:t"]))
    assert doc["Statement"][0]["Principal"] == {"Federated": "arn:p"}
