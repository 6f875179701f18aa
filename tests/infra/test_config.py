"""Stack config: declared in Pulumi.yaml, every example stack valid, bad values named by key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from infra.config import KEYS, ConfigError, load_stack_file, parse

REPO = Path(__file__).resolve().parents[2]
STACKS = sorted((REPO / "stacks").glob("Pulumi.*.yaml"))

BASE = {"cloud": "aws", "region": "us-east-1", "gpuZone": "use1-az6",
        "nodePools": [{"name": "p5", "instanceType": "p5.48xlarge", "capacity": "SPOT", "maxNodes": 2}],
        "tags": {"owner": "ml-platform", "cost-center": "cc-1"}}


def test_every_key_is_declared_in_the_project_file():
    doc = yaml.safe_load((REPO / "Pulumi.yaml").read_text())
    declared = set(doc["config"]) | {k.split(":", 1)[1] for k in doc["template"]["config"]}
    assert set(KEYS) <= declared
    for key, decl in doc["config"].items():
        assert decl.get("type") in ("string", "integer", "boolean", "array") and decl.get("description"), key


@pytest.mark.parametrize("path", STACKS, ids=lambda p: p.name)
def test_example_stacks_parse(path):
    cfg = load_stack_file(str(path))
    assert cfg.tags["owner"] and cfg.tags["cost-center"]


def test_valid_config_round_trips():
    cfg = parse(BASE, stack="t")
    (pool,) = cfg.node_pools
    assert pool.shape.name == "p5.48xlarge" and pool.capacity_kind == "spot" and pool.zone == "use1-az6"
    assert cfg.cluster_name == "gpufleet-t"
    assert cfg.cluster.operator_cidrs == () and cfg.cluster.hub_cidrs == ()  # nothing authorised by default


def _with(path: str, value):
    raw = yaml.safe_load(yaml.safe_dump(BASE))
    node = raw
    *head, last = path.split(".")
    for part in head:
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    node[int(last) if last.isdigit() else last] = value
    return raw


BAD = [
    ("cloud", "azure", "gpufleet:cloud"),
    ("gpuZone", "use2-az1", "gpufleet:gpuZone"),
    ("nodePools.0.instanceType", "p9.huge", "gpufleet:nodePools[0].instanceType"),
    ("nodePools.0.minNodes", 3, "gpufleet:nodePools[0].minNodes"),
    ("nodePools.0.maxNodes", 0, "gpufleet:nodePools[0].maxNodes"),
    ("nodePools.0.capacity", "CAPACITY_BLOCK", "gpufleet:nodePools[0].reservation"),
    ("nodePools.0.capacity", "RESERVATION", "gpufleet:nodePools[0].capacity"),
    ("nodePools.0.instanceType", "g6e.xlarge", "gpufleet:nodePools[0].maxNodes"),
    ("tags.owner", "", "gpufleet:tags.owner"),
    ("cluster.publicAccess", True, "gpufleet:cluster.publicAccessCidrs"),
    ("cluster.kubernetesVersion", "latest", "gpufleet:cluster.kubernetesVersion"),
    ("checkpoint.filesystem", {"kind": "fsx", "capacityGb": 1000}, "gpufleet:checkpoint.filesystem.capacityGb"),
    ("kueue.flavorOrder", ["spot"], "gpufleet:kueue.flavorOrder"),
    ("network.vpcCidr", "10.0.0.0/33", "gpufleet:network.vpcCidr"),
    ("colour", "blue", "gpufleet:colour"),
    ("training.namespace", "Training", "gpufleet:training.namespace"),
    ("training.serviceAccount", "trainer_1", "gpufleet:training.serviceAccount"),
    ("cluster.hubCidrs", ["0.0.0.0/0"], "gpufleet:cluster.hubCidrs"),
    ("cluster.hubCidrs", ["fd00::/8"], "gpufleet:cluster.hubCidrs"),
    ("cluster.hubCidrs", "10.200.0.0/20", "gpufleet:cluster.hubCidrs"),
    ("cluster.hubCidrs", ["10.200.0.0/33"], "gpufleet:cluster.hubCidrs"),
    ("cluster.operatorCidrs", ["0.0.0.0/0"], "gpufleet:cluster.operatorCidrs"),
    ("cluster.operatorCidrs", ["fd00::/8"], "gpufleet:cluster.operatorCidrs"),
    ("cluster.operatorCidrs", ["vpn"], "gpufleet:cluster.operatorCidrs"),
    ("cluster.amiReleaseVersion", "latest", "gpufleet:cluster.amiReleaseVersion"),
    ("cluster.amiReleaseVersion", "1.32.9-20251120", "gpufleet:cluster.amiReleaseVersion"),
    ("hub.egressCidrs", ["not-a-cidr"], "gpufleet:hub.egressCidrs"),
    ("hub.dispatch.replicas", 0, "gpufleet:hub.dispatch.replicas"),
    ("hub.dispatch.admissionDeadlineSeconds", 0, "gpufleet:hub.dispatch.admissionDeadlineSeconds"),
    ("hub.dispatch.waitUsdPerGpuHour", -1, "gpufleet:hub.dispatch.waitUsdPerGpuHour"),
    ("hub.dispatch.waitUsdPerGpuHour", "cheap", "gpufleet:hub.dispatch.waitUsdPerGpuHour"),
    ("hub.dispatch.resources", {"requests": {"gpu": "1"}}, "gpufleet:hub.dispatch.resources.requests.gpu"),
    ("hub.dispatch.resources", {"requests": {"cpu": "lots"}}, "gpufleet:hub.dispatch.resources.requests.cpu"),
    ("hub.dispatch.resources", {"claims": []}, "gpufleet:hub.dispatch.resources.claims"),
    ("hub.dispatch.colour", "blue", "gpufleet:hub.dispatch.colour"),
    ("hub.dispatch.image", "two words", "gpufleet:hub.dispatch.image"),
]


@pytest.mark.parametrize(("path", "value", "key"), BAD, ids=[b[0] + "=" + str(b[1]) for b in BAD])
def test_bad_values_name_the_key(path, value, key):
    with pytest.raises(ConfigError) as err:
        parse(_with(path, value), stack="t")
    assert str(err.value).startswith(key + ":")


def test_fsx_needs_a_gpu_zone():
    raw = _with("checkpoint.filesystem", {"kind": "fsx"})
    del raw["gpuZone"]
    raw["nodePools"][0]["zone"] = "use1-az6"
    with pytest.raises(ConfigError, match="^gpufleet:gpuZone:"):
        parse(raw, stack="t")


def test_training_namespaces_are_the_teams_plus_training_namespace_once():
    cfg = parse(_with("kueue", {"teams": ["team-a", "team-b"]}), stack="t")
    assert cfg.training_namespaces == ("team-a", "team-b", "training")
    raw = _with("kueue", {"teams": ["team-a", "team-b"]})
    raw["training"] = {"namespace": "team-b", "serviceAccount": "trainer"}
    assert parse(raw, stack="t").training_namespaces == ("team-a", "team-b")


HUB = {"role": "hub", "cloud": "aws", "region": "us-east-1", "tags": BASE["tags"],
       "hub": {"workers": ["org/gpufleet/w1", "org/gpufleet/w2"], "egressCidrs": ["10.200.0.0/20", "203.0.113.7"]}}


def _hub(**changes):
    raw = yaml.safe_load(yaml.safe_dump(HUB))
    raw["hub"].update(changes)
    return raw


def test_hub_reachability_and_dispatch_defaults():
    cfg = parse(HUB, stack="hub")
    # Normalised CIDRs: a bare address is its /32.
    assert cfg.hub.egress_cidrs == ("10.200.0.0/20", "203.0.113.7/32")
    assert cfg.hub.dispatcher == "AllAtOnce" and cfg.hub.dispatch.image is None
    assert (cfg.hub.dispatch.replicas, cfg.hub.dispatch.admission_deadline_seconds,
            cfg.hub.dispatch.wait_usd_per_gpu_hour, cfg.hub.dispatch.resources) == (2, 300, 2.0, None)
    assert cfg.hub.dispatch.live is False and cfg.hub.dispatch.service_account_annotations == {}
    worker = parse(_with("cluster", {"hubCidrs": ["10.200.0.0/20", "10.200.0.0/20"]}), stack="t")
    assert worker.cluster.hub_cidrs == ("10.200.0.0/20",)
    assert parse(BASE, stack="t").cluster.hub_cidrs == ()


def test_hub_needs_egress_cidrs():
    raw = _hub()
    del raw["hub"]["egressCidrs"]
    with pytest.raises(ConfigError) as err:
        parse(raw, stack="hub")
    assert str(err.value).startswith("gpufleet:hub.egressCidrs: is required on a hub")
    assert "gpufleet:cluster.hubCidrs" in str(err.value)


def test_external_dispatcher_builds_its_image_unless_given_one():
    built = parse(_hub(dispatcher="External"), stack="hub").hub.dispatch
    assert built.image is None and built.platform == "linux/amd64"
    assert parse(_hub(dispatcher="External", dispatch={"platform": "linux/arm64"}),
                 stack="hub").hub.dispatch.platform == "linux/arm64"
    for dispatch, key in (({"platform": "windows/amd64"}, "platform"),
                          ({"image": "ghcr.io/acme/placement:1.0", "platform": "linux/arm64"}, "platform")):
        with pytest.raises(ConfigError) as err:
            parse(_hub(dispatcher="External", dispatch=dispatch), stack="hub")
        assert str(err.value).startswith(f"gpufleet:hub.dispatch.{key}: ") and "\n" not in str(err.value)
    cfg = parse(_hub(dispatcher="External", dispatch={
        "image": "ghcr.io/acme/placement:1.0", "replicas": 3, "admissionDeadlineSeconds": 120,
        "waitUsdPerGpuHour": "0.5", "resources": {"requests": {"cpu": "250m", "memory": "256Mi"},
                                                  "limits": {"memory": "1Gi"}}}), stack="hub")
    d = cfg.hub.dispatch
    assert (d.image, d.replicas, d.admission_deadline_seconds, d.wait_usd_per_gpu_hour) == (
        "ghcr.io/acme/placement:1.0", 3, 120, 0.5)
    assert d.resources == {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}


def test_live_prices_and_the_dispatchers_cloud_identity():
    role = "arn:aws:iam::123456789012:role/gpufleet-dispatch"
    cfg = parse(_hub(dispatcher="External", dispatch={
        "image": "ghcr.io/acme/placement:1.0", "live": True,
        "serviceAccountAnnotations": {"eks.amazonaws.com/role-arn": role,
                                      "iam.gke.io/gcp-service-account": "dispatch@p.iam.gserviceaccount.com"}}),
        stack="hub")
    assert cfg.hub.dispatch.live is True
    assert cfg.hub.dispatch.service_account_annotations == {
        "eks.amazonaws.com/role-arn": role, "iam.gke.io/gcp-service-account": "dispatch@p.iam.gserviceaccount.com"}
    for dispatch, key, needle in (
            ({"live": "yes"}, "gpufleet:hub.dispatch.live", "true or false"),
            ({"serviceAccountAnnotations": ["eks.amazonaws.com/role-arn"]},
             "gpufleet:hub.dispatch.serviceAccountAnnotations", "mapping"),
            ({"serviceAccountAnnotations": {"Bad_Prefix/role": "x"}},
             "gpufleet:hub.dispatch.serviceAccountAnnotations.Bad_Prefix/role", "DNS subdomain"),
            ({"serviceAccountAnnotations": {"a/" + "n" * 64: "x"}},
             "gpufleet:hub.dispatch.serviceAccountAnnotations.a/" + "n" * 64, "at most 63"),
            ({"serviceAccountAnnotations": {"iam.gke.io/gcp-service-account": 42}},
             "gpufleet:hub.dispatch.serviceAccountAnnotations.iam.gke.io/gcp-service-account", "must be a string")):
        with pytest.raises(ConfigError) as err:
            parse(_hub(dispatcher="External", dispatch={"image": "i:1", **dispatch}), stack="hub")
        assert str(err.value).startswith(key + ":") and needle in str(err.value) and "\n" not in str(err.value)


def _reference_sections() -> dict[str, str]:
    """docs/stack-config.md by ``## key`` section: the full reference of every structured key."""
    text = (REPO / "docs" / "stack-config.md").read_text()
    return {part.split("\n", 1)[0].strip(): part for part in text.split("\n## ")[1:]}


def test_new_structured_keys_are_described_in_the_reference():
    described = _reference_sections()
    assert "hubCidrs" in described["cluster"]
    for key in ("egressCidrs", "dispatch", "image", "replicas", "admissionDeadlineSeconds", "waitUsdPerGpuHour",
                "resources", "live", "serviceAccountAnnotations"):
        assert key in described["hub"], key


def test_project_file_descriptions_are_one_line_summaries_pointing_at_the_reference():
    """Pulumi.yaml shows in `pulumi config` and editors: a summary per key, the detail in docs (issue 30)."""
    doc = yaml.safe_load((REPO / "Pulumi.yaml").read_text())
    sections = _reference_sections()
    for key, decl in doc["template"]["config"].items():
        name = key.split(":", 1)[1]
        text = decl["description"]
        assert "\n" not in text and len(text) <= 200, (key, len(text))
        assert f"docs/stack-config.md#{name.lower()}" in text and name in sections, key
    for key, decl in doc["config"].items():
        assert len(decl["description"]) <= 200 and f"`{key}`" in sections["Scalar keys"], key


@pytest.mark.parametrize(("path", "value", "key"), [
    # GKE-only settings on an AWS stack are refused, not silently dropped.
    ("cluster.maintenance", {"exclusion": True}, "gpufleet:cluster.maintenance"),
    ("nodePools.0.capacity", "flex-start", "gpufleet:nodePools[0].capacity"),
])
def test_gke_only_settings_are_refused_on_aws(path, value, key):
    assert parse(BASE, stack="t").cloud == "aws"
    with pytest.raises(ConfigError) as err:
        parse(_with(path, value), stack="t")
    assert str(err.value).startswith(key + ":")


@pytest.mark.parametrize(("gb", "ok"), [(1200, True), (2400, True), (3600, False), (4800, True), (6000, False),
                                        (7200, True), (600, False), (1000, False)])
def test_fsx_capacity_follows_the_persistent_2_ssd_sizes(gb, ok):
    raw = _with("checkpoint.filesystem", {"kind": "fsx", "capacityGb": gb})
    if ok:
        assert parse(raw, stack="t").checkpoint.filesystem.capacity_gb == gb
        return
    with pytest.raises(ConfigError) as err:
        parse(raw, stack="t")
    message = str(err.value)
    assert message.startswith("gpufleet:checkpoint.filesystem.capacityGb:") and "\n" not in message
    assert "1200, 2400, then multiples of 2400" in message


def test_fsx_capacity_rules_per_ssd_deployment_type():
    from infra.config.storage import fsx_capacity_valid

    for kind in ("PERSISTENT_2", "PERSISTENT_1", "SCRATCH_2"):
        assert [g for g in range(1200, 12001, 1200) if fsx_capacity_valid(kind, g)] == [1200, 2400, 4800, 7200,
                                                                                        9600, 12000]
    assert [g for g in range(1200, 12001, 1200) if fsx_capacity_valid("SCRATCH_1", g)] == [1200, 2400, 3600, 7200,
                                                                                        10800]
