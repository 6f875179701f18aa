"""Issue 25 item 2: a job the hub re-routes to another worker of the same cloud reads its checkpoint home there.

The hub exports each worker's checkpoint bucket and training identity (``workerCheckpoints``); every worker with
``cluster.hubStack`` grants the training identities of the other same-cloud workers read/write on its own
bucket (AWS: statements in the bucket's one policy and its key's policy; GCP: one BucketIAMMember per peer),
named by the peer's worker key so a worker joining changes no existing grant.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from infra import mockrun
from infra.config import load_stack_file
from infra.hub_link import HubView, checkpoint_peers
from infra.k8s.hub import worker_checkpoint
from infra.outputs import api_access_output, hub_link_output, node_pool_output, training_service_account_output

REPO = Path(__file__).resolve().parents[2]
STACKS = REPO / "stacks"
HUB = "org/gpufleet/hub"
AWS_A, AWS_B, AWS_C = "aws-use1-p5", "aws-usw2-p4d", "aws-use2-p5en-cb"
GCP_A, GCP_B = "gcp-usc1-a3mega", "gcp-euw4-a3high"


def role(key: str) -> str:
    return f"arn:aws:iam::123456789012:role/{key}-training"


def google_sa(key: str) -> str:
    return f"{key}-trainer@proj-{key}.iam.gserviceaccount.com"


def entry(key: str) -> dict[str, str]:
    """A worker's entry of the hub's ``workerCheckpoints`` output."""
    if key.startswith("aws"):
        return {"cloud": "aws", "bucket": f"{key}-ckpt", "trainingIdentity": role(key)}
    return {"cloud": "gcp", "bucket": f"{key}-ckpt", "trainingIdentity": google_sa(key)}


def hub_outputs(*keys: str) -> dict[str, Any]:
    return {"role": "hub", "egressCidrs": ["203.0.113.10/32"], "vpnWorkers": [], "workerRanges": {},
            "workerCheckpoints": {k: entry(k) for k in keys}}


@contextlib.contextmanager
def hub_exports(outputs: dict[str, Any]) -> Iterator[None]:
    saved = dict(mockrun.STACK_REFERENCE_OUTPUTS)
    mockrun.STACK_REFERENCE_OUTPUTS[HUB] = outputs
    try:
        yield
    finally:
        mockrun.STACK_REFERENCE_OUTPUTS.clear()
        mockrun.STACK_REFERENCE_OUTPUTS.update(saved)


def run_worker(key: str, outputs: dict[str, Any] | None, **override: Any) -> mockrun.RunResult:
    """Worker stack ``key`` run under mocks with its hub exporting ``outputs`` (None: the local hub file)."""
    path = str(STACKS / f"Pulumi.{key}.yaml")
    if outputs is None:
        return mockrun.run_stack(path, config_override=override or None)
    with hub_exports(outputs):
        return mockrun.run_stack(path, config_override=override or None)


def aws_policies(run: mockrun.RunResult) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The statements of the checkpoint bucket's policy and of the checkpoint key's policy."""
    (policy,) = [r for r in run.of_type("aws:s3/bucketPolicy:BucketPolicy") if r.name.endswith("-ckpt-policy")]
    (key,) = [r for r in run.of_type("aws:kms/key:Key") if r.name.endswith("-ckpt-key")]
    return json.loads(policy.inputs["policy"])["Statement"], json.loads(key.inputs["policy"])["Statement"]


def principals(statements: list[dict[str, Any]]) -> set[str]:
    return {s["Principal"]["AWS"] for s in statements
            if isinstance(s.get("Principal"), dict) and s["Principal"].get("AWS", "").endswith("-training")}


def peer_grants(run: mockrun.RunResult) -> dict[str, dict[str, Any]]:
    """GCP: the checkpoint bucket's IAM members that are not the worker's own training account, by name."""
    return {r.name: r.inputs for r in run.of_type("gcp:storage/bucketIAMMember:BucketIAMMember")
            if "-peer-" in r.name}


def test_two_aws_workers_grant_each_other_and_nothing_else() -> None:
    outputs = hub_outputs(AWS_A, AWS_B, GCP_A)
    for own, peer in ((AWS_A, AWS_B), (AWS_B, AWS_A)):
        bucket_statements, key_statements = aws_policies(run_worker(own, outputs))
        # The peer's role only: not this worker's own (its IAM policy already covers it), not a Google account.
        assert principals(bucket_statements) == {role(peer)}
        actions = {a for s in bucket_statements if s.get("Principal") == {"AWS": role(peer)}
                   for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
        assert {"s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:ListBucket"} <= actions
        # Still the one policy resource, with its TLS-only statement kept.
        assert bucket_statements[0]["Sid"] == "DenyInsecureTransport"
        # SSE-KMS: without the key the peer reads ciphertext it cannot decrypt.
        assert principals(key_statements) == {role(peer)}


def test_two_gcp_workers_grant_each_other_object_admin() -> None:
    outputs = hub_outputs(GCP_A, GCP_B, AWS_A)
    for own, peer in ((GCP_A, GCP_B), (GCP_B, GCP_A)):
        grants = peer_grants(run_worker(own, outputs))
        assert [g["member"] for g in grants.values()] == [f"serviceAccount:{google_sa(peer)}"]
        (name,) = grants
        assert name.endswith(f"-peer-{peer}") and grants[name]["role"] == "roles/storage.objectAdmin"


def test_a_third_worker_changes_no_existing_grant() -> None:
    two = peer_grants(run_worker(GCP_A, hub_outputs(GCP_A, GCP_B)))
    # A third GCP worker key sorting before the others: a list index would rename the existing grant.
    three = peer_grants(run_worker(GCP_A, {**hub_outputs(GCP_A, GCP_B), "workerCheckpoints": {
        **hub_outputs(GCP_A, GCP_B)["workerCheckpoints"],
        "gcp-aaa-first": {"cloud": "gcp", "bucket": "b", "trainingIdentity": "first@p.iam.gserviceaccount.com"}}}))
    assert set(two) < set(three) and all(three[n] == two[n] for n in two)
    # AWS: same policy resource; every existing statement kept word for word.
    before, _ = aws_policies(run_worker(AWS_A, hub_outputs(AWS_A, AWS_B)))
    after, _ = aws_policies(run_worker(AWS_A, hub_outputs(AWS_A, AWS_B, AWS_C)))
    assert all(s in after for s in before) and principals(after) == {role(AWS_B), role(AWS_C)}


def test_a_worker_without_a_hub_grants_nothing_new() -> None:
    doc = yaml.safe_load((STACKS / f"Pulumi.{AWS_B}.yaml").read_text())["config"]["gpufleet:cluster"]
    alone = {**{k: v for k, v in doc.items() if k != "hubStack"}, "publicAccess": False}
    bucket_statements, key_statements = aws_policies(run_worker(AWS_B, hub_outputs(AWS_A, AWS_B), cluster=alone))
    assert [s["Sid"] for s in bucket_statements] == ["DenyInsecureTransport"]
    assert principals(key_statements) == set()
    gdoc = yaml.safe_load((STACKS / f"Pulumi.{GCP_B}.yaml").read_text())["config"]["gpufleet:cluster"]
    galone = {**{k: v for k, v in gdoc.items() if k != "hubStack"}, "publicAccess": False}
    assert peer_grants(run_worker(GCP_B, hub_outputs(GCP_A, GCP_B), cluster=galone)) == {}
    # A hub that exports no workerCheckpoints yet (the local example hub): nothing either.
    assert peer_grants(run_worker(GCP_B, None)) == {}


def test_checkpoint_peers_is_pure_and_skips_malformed_entries() -> None:
    hub = HubView.of({"workerCheckpoints": {
        "a": entry("aws-x"), "b": {"cloud": "aws", "bucket": "", "trainingIdentity": role("b")},
        "c": "junk", "d": {"cloud": "azure", "bucket": "x", "trainingIdentity": "y"}, "me": entry("aws-me")}})
    assert checkpoint_peers(hub, "org/gpufleet/me", "aws") == {"a": role("aws-x")}
    assert checkpoint_peers(hub, "org/gpufleet/me", "gcp") == {}
    assert checkpoint_peers(None, "me", "aws") == {}


def test_the_hub_exports_each_workers_bucket_and_training_identity() -> None:
    hub_path = str(STACKS / "Pulumi.hub.yaml")
    hub_cfg = load_stack_file(hub_path)
    saved = dict(mockrun.STACK_REFERENCE_OUTPUTS)
    expected: dict[str, Any] = {}
    for stack in hub_cfg.hub.workers:
        key = stack.rsplit("/", 1)[-1]
        cfg = load_stack_file(str(STACKS / f"Pulumi.{key}.yaml"))
        out: dict[str, Any] = {
            "cloud": cfg.cloud, "region": cfg.region, "clusterName": cfg.cluster_name,
            "kubeconfig": json.dumps({"apiVersion": "v1", "kind": "Config", "current-context": "c",
                                      "clusters": [{"name": "c", "cluster": {"server": "https://x.example",
                                                                             "certificate-authority-data": "Y2E="}}],
                                      "contexts": [{"name": "c", "context": {"cluster": "c", "user": "c"}}],
                                      "users": [{"name": "c", "user": {"token": "t"}}]}),
            "nodePools": [node_pool_output(p) for p in cfg.node_pools],
            "checkpointUri": f"{'s3' if cfg.cloud == 'aws' else 'gs'}://{key}-ckpt/checkpoints",
            "checkpointFilesystem": None, "trainingServiceAccount": training_service_account_output(cfg),
            "apiAccess": api_access_output(cfg), "hubLink": hub_link_output(cfg),
            "checkpointBucket": f"{key}-ckpt"}
        if cfg.cloud == "aws":
            out["trainingRoleArn"] = role(key)
        else:
            out["project"] = cfg.project
            out["gpuNetworks"] = {p.name: [f"vpc{i + 1}" for i in range(p.shape.gpu_vpcs)] for p in cfg.node_pools}
            out["trainingGoogleServiceAccount"] = google_sa(key)
        mockrun.STACK_REFERENCE_OUTPUTS[stack] = out
        expected[key] = entry(key)
    try:
        run = mockrun.run_stack(hub_path, config_override={"hub": {
            **yaml.safe_load(Path(hub_path).read_text())["config"]["gpufleet:hub"],
            "dispatcher": "AllAtOnce", "dispatch": None}})
    finally:
        mockrun.STACK_REFERENCE_OUTPUTS.clear()
        mockrun.STACK_REFERENCE_OUTPUTS.update(saved)
    assert run.outputs["workerCheckpoints"] == expected
    # What a worker reads back is what the hub wrote.
    assert {k: p.training_identity for k, p in HubView.of(run.outputs).worker_checkpoints.items()} == {
        k: e["trainingIdentity"] for k, e in expected.items()}


def test_a_worker_not_up_yet_is_left_out_of_the_export() -> None:
    assert worker_checkpoint("aws", None, None, None) is None
    assert worker_checkpoint("gcp", "b", role("x"), None) is None
    assert worker_checkpoint("gcp", "b", None, "sa@p.iam.gserviceaccount.com") == {
        "cloud": "gcp", "bucket": "b", "trainingIdentity": "sa@p.iam.gserviceaccount.com"}
