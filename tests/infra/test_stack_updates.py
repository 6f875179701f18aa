"""Routine stack updates never destroy work (issue 25, item 4): the network layout does not move with node counts
or the pool list, the GKE worker's Kubernetes provider keeps its cluster across the hub bring-up's two passes,
stateful resources are protected, and takeovers work with the locked pulumi-kubernetes.

Mocked program runs are slow (20 s a stack on a loaded machine), so the layout tests use the planners that the
Network components take their CIDRs from, and the mocked runs build only what each test reads.
"""

from __future__ import annotations

import copy
import ipaddress
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra import mockrun
from infra.aws.layout import Zone, plan_subnets, system_slot
from infra.config import ConfigError, parse
from infra.gcp.plan import plan_gpu_networks

STACKS = Path(__file__).resolve().parents[2] / "stacks"
WORKERS = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in STACKS.glob("Pulumi.*.yaml")
                 if p.name != "Pulumi.hub.yaml")


def _raw(stack: str) -> dict[str, Any]:
    doc = yaml.safe_load((STACKS / f"Pulumi.{stack}.yaml").read_text())
    return {k.split(":", 1)[1]: v for k, v in doc["config"].items() if k.startswith("gpufleet:")}


def _cidrs(raw: dict[str, Any], stack: str) -> dict[str, str]:
    """Every subnet CIDR the stack's program declares, by subnet: AWS public/private slots of the system AZs the
    region offers and the GPU subnets; GCP the primary subnet and every GPU subnet."""
    cfg = parse(raw, stack=stack)
    if cfg.cloud == "aws":
        plan = plan_subnets(cfg)
        zones = mockrun._aws_zones(cfg.region)
        out = {f"gpu-{z}": c for z, c in plan.gpu.items()}
        for zone_id in zones["zoneIds"]:
            slot = system_slot(Zone(name="", zone_id=zone_id))
            out[f"public-{zone_id}"], out[f"private-{zone_id}"] = plan.public[slot], plan.private[slot]
        return out
    gpu = plan_gpu_networks(cfg)
    return {"subnet": cfg.network.vpc_cidr, **{s.subnet_name: s.cidr for v in gpu.vpcs for s in v.subnets},
            "psa": str(gpu.psa_cidr)}


@pytest.mark.parametrize("stack", WORKERS)
def test_doubling_every_pools_max_nodes_moves_no_subnet(stack: str) -> None:
    raw = _raw(stack)
    before = _cidrs(raw, stack)
    doubled = copy.deepcopy(raw)
    for pool in doubled["nodePools"]:
        pool["maxNodes"] = 2 * pool["maxNodes"]
    assert _cidrs(doubled, stack) == before


def test_adding_a_pool_in_another_zone_or_dropping_one_moves_no_subnet() -> None:
    raw = _raw("aws-use1-p5")
    before = _cidrs(raw, "aws-use1-p5")
    more = copy.deepcopy(raw)
    more["nodePools"].insert(0, {"name": "h100-b", "instanceType": "p5.48xlarge", "capacity": "SPOT", "minNodes": 0,
                                 "maxNodes": 8, "zone": "use1-az4"})
    after = _cidrs(more, "aws-use1-p5")
    assert {k: v for k, v in after.items() if k in before} == before
    assert after["gpu-use1-az4"] not in before.values()
    fewer = copy.deepcopy(raw)
    fewer["nodePools"] = fewer["nodePools"][1:]
    assert _cidrs(fewer, "aws-use1-p5") == before


def test_gpu_subnets_of_a_vpc_never_overlap_the_system_ones() -> None:
    plan = plan_subnets(parse({**_raw("aws-use1-p5"), "nodePools": [
        {"name": f"p{i}", "instanceType": "p5.48xlarge", "capacity": "SPOT", "minNodes": 0, "maxNodes": 1,
         "zone": f"use1-az{i}"} for i in range(1, 7)]}))
    blocks = [ipaddress.ip_network(c) for c in (*plan.gpu.values(), *plan.public, *plan.private)]
    assert all(not a.overlaps(b) for i, a in enumerate(blocks) for b in blocks[i + 1:])
    assert all(b.subnet_of(ipaddress.ip_network("10.0.0.0/16")) for b in blocks)  # type: ignore[arg-type]


def test_a_zone_whose_pools_outgrow_their_subnet_names_the_key() -> None:
    raw = copy.deepcopy(_raw("aws-use1-p5"))
    raw["nodePools"][0]["maxNodes"] = 200
    with pytest.raises(ConfigError, match=r"nodePools\[1\]\.maxNodes"):
        plan_subnets(parse(raw))


def test_two_spellings_of_one_slot_are_refused() -> None:
    raw = copy.deepcopy(_raw("aws-use1-p5"))
    raw["nodePools"][0]["zone"] = "us-east-1f"  # slot 6, as use1-az6 is
    with pytest.raises(ConfigError, match="share GPU subnet slot"):
        plan_subnets(parse({**raw, "gpuZone": "use1-az6"}))


# ------------------------------------------------------------------ the GKE provider's cluster


@pytest.fixture
def hub_exports() -> Iterator[dict[str, dict[str, Any]]]:
    saved = dict(mockrun.STACK_REFERENCE_OUTPUTS)
    try:
        yield mockrun.STACK_REFERENCE_OUTPUTS
    finally:
        mockrun.STACK_REFERENCE_OUTPUTS.clear()
        mockrun.STACK_REFERENCE_OUTPUTS.update(saved)


async def _gcp_worker_only() -> None:
    """The GCP worker program up to its cluster and provider (the add-ons under it are not what is compared)."""
    from infra.gcp import build
    from infra.hub_link import resolve
    from infra.program import load_config

    build(await resolve(load_config()))


def _provider_server(run: mockrun.RunResult) -> tuple[str, Any]:
    (provider,) = [r for r in run.resources if r.type == "pulumi:providers:kubernetes"]
    kubeconfig = provider.inputs["kubeconfig"]
    if isinstance(kubeconfig, dict):  # a secret, as the mock monitor hands it over
        kubeconfig = kubeconfig["value"]
    doc = json.loads(kubeconfig)
    return doc["clusters"][0]["cluster"]["server"], provider


def test_gke_provider_keeps_its_server_across_the_two_pass_bring_up(hub_exports: dict[str, Any]) -> None:
    stack = str(STACKS / "Pulumi.gcp-usc1-a3mega.yaml")
    hub_exports["org/gpufleet/hub"] = {"role": "hub"}  # first pass: the hub is not up, so the public endpoint stays off
    first = mockrun.run_stack(stack, program=_gcp_worker_only)
    hub_exports["org/gpufleet/hub"] = {"egressCidrs": ["198.51.100.20/32"]}
    second = mockrun.run_stack(stack, program=_gcp_worker_only)
    (c1,) = first.of_type("gcp:container/cluster:Cluster")
    (c2,) = second.of_type("gcp:container/cluster:Cluster")
    assert c1.inputs["privateClusterConfig"]["enablePrivateEndpoint"] is True
    assert c2.inputs["privateClusterConfig"]["enablePrivateEndpoint"] is False  # the public endpoint turned on
    server1, _ = _provider_server(first)
    server2, provider = _provider_server(second)
    assert server1 == server2 and server1.endswith(".gke.goog")
    # Issue 37: the DNS endpoint takes the provider's traffic in both passes, the private one included (IAM-gated);
    # Kubernetes tokens, which nothing sends it, are refused there.
    for cluster in (c1, c2):
        dns = cluster.inputs["controlPlaneEndpointsConfig"]["dnsEndpointConfig"]
        assert dns["allowExternalTraffic"] is True and dns["enableK8sTokensViaDns"] is False
    assert provider.inputs.get("enableServerSideApply") in (True, "true")
    # Keyed to the cluster's unique identity (its DNS endpoint), not its name; the hub reads it from the output.
    host = server2.removeprefix("https://")
    assert provider.inputs["clusterIdentifier"] == f"gke:{host}" == second.outputs["clusterIdentity"]


def test_a_private_gke_worker_behind_a_private_link_is_reachable_by_its_own_provider(
        hub_exports: dict[str, Any]) -> None:
    """Issue 37: with publicAccess false and the hub over a private link, the stack's provider still reaches the
    cluster from outside its VPC: the DNS endpoint takes external (IAM-authenticated) traffic."""
    hub_exports["org/gpufleet/hub"] = {"role": "hub"}
    run = mockrun.run_stack(str(STACKS / "Pulumi.gcp-usc1-a3mega.yaml"), program=_gcp_worker_only,
                            config_override={"cluster": {**_raw("gcp-usc1-a3mega")["cluster"], "publicAccess": False,
                                                         "hubPrivateLink": "external"}})
    (cluster,) = run.of_type("gcp:container/cluster:Cluster")
    assert cluster.inputs["privateClusterConfig"]["enablePrivateEndpoint"] is True
    assert cluster.inputs["controlPlaneEndpointsConfig"]["dnsEndpointConfig"]["allowExternalTraffic"] is True
    server, _ = _provider_server(run)
    assert server.endswith(".gke.goog")


# ------------------------------------------------------------------ protected state, provider options


@pytest.fixture(scope="module")
def aws_run() -> mockrun.RunResult:
    """The whole aws-use1-p5 program (FSx, bucket, team Namespaces, checkpoint PVs) under mocks, once."""
    return mockrun.run_stack(str(STACKS / "Pulumi.aws-use1-p5.yaml"))


STATEFUL = ("aws:s3/bucket:Bucket", "aws:fsx/lustreFileSystem:LustreFileSystem", "kubernetes:core/v1:Namespace",
            "kubernetes:core/v1:PersistentVolume")


def test_file_systems_buckets_namespaces_and_volumes_are_protected_and_retained(aws_run: mockrun.RunResult) -> None:
    for typ in STATEFUL:
        found = aws_run.of_type(typ)
        assert found, typ
        for r in found:
            assert r.protect and r.retain_on_delete, (typ, r.name)


def test_worker_provider_adopts_existing_objects_and_keeps_its_identity(aws_run: mockrun.RunResult) -> None:
    (provider,) = aws_run.of_type("pulumi:providers:kubernetes")
    # pulumi-kubernetes >= 4.29 refuses to create an object that exists unless upsertExistingObjects is set: the
    # JobSet CRD an earlier Helm install made and the PV/PVC an older `placement submit` made are taken over.
    assert provider.inputs.get("upsertExistingObjects") in (True, "true")
    assert provider.inputs.get("enableServerSideApply") in (True, "true")
    # Issue 37: keyed to the cluster's unique identity (its OIDC issuer), not its name.
    assert str(provider.inputs.get("clusterIdentifier")).startswith("eks:https://oidc.")
    ref = f"{provider.urn}::{provider.name}-id"
    crd = [r for r in aws_run.resources if r.type == "kubernetes:yaml/v2:ConfigFile" and "jobset-crd" in r.name]
    assert crd and all(r.provider == ref for r in crd)
    for typ in ("kubernetes:core/v1:PersistentVolume", "kubernetes:core/v1:PersistentVolumeClaim"):
        assert all(r.provider == ref for r in aws_run.of_type(typ)), typ


def test_allow_replace_lifts_protect_but_keeps_the_old_one(hub_exports: dict[str, Any]) -> None:
    hub_exports["org/gpufleet/hub"] = {"role": "hub"}
    bucket = "gpufleet-usc1-a3mega-checkpoints-bucket"
    run = mockrun.run_stack(str(STACKS / "Pulumi.gcp-usc1-a3mega.yaml"), program=_gcp_worker_only,
                            config_override={"allowReplace": [bucket]})
    (found,) = run.of_type("gcp:storage/bucket:Bucket")
    assert found.name == bucket and not found.protect and found.retain_on_delete


@pytest.mark.parametrize("value, key", [("x", "allowReplace"), ([""], "allowReplace[0]"),
                                        (["a b"], "allowReplace[0]"), (["a", "a"], "allowReplace[1]")])
def test_allow_replace_is_validated(value: Any, key: str) -> None:
    with pytest.raises(ConfigError, match=rf"gpufleet:{key.replace('[', '.').replace(']', '.')}"):
        parse({**_raw("aws-use1-p5"), "allowReplace": value})


def test_managed_lustre_is_exported_to_the_bucket_by_a_cron_job(hub_exports: dict[str, Any]) -> None:
    from infra.gcp import lustre_sync
    from infra.replace import uncovered

    hub_exports["org/gpufleet/hub"] = {"role": "hub"}
    run = mockrun.run_stack(str(STACKS / "Pulumi.gcp-usc1-a3mega.yaml"), program=_gcp_worker_only,
                            config_override={"checkpoint": {"prefix": "checkpoints", "filesystem": {
                                "kind": "lustre", "capacityGb": 18000, "throughputMbpsPerTib": 1000}}})
    assert not uncovered(r.type for r in run.resources)  # the REPLACE table knows every type registered
    (lustre,) = run.of_type("gcp:lustre/instance:Instance")
    assert lustre.protect and lustre.retain_on_delete
    (cron,) = run.of_type("kubernetes:batch/v1:CronJob")
    spec = cron.inputs["spec"]
    assert spec["schedule"] == lustre_sync.SCHEDULE and spec["concurrencyPolicy"] == "Forbid"
    pod = spec["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    # Issue 37: the image by digest; the run exports complete checkpoints only (infra/gcp/lustre_export.py).
    assert container["image"] == lustre_sync.IMAGE and "@sha256:" in container["image"]
    assert container["command"] == ["python", "-c", lustre_sync.EXPORT_SCRIPT]
    env = {e["name"]: e["value"] for e in container["env"]}
    (bucket,) = run.of_type("gcp:storage/bucket:Bucket")
    assert (env["BUCKET"], env["PREFIX"]) == (bucket.inputs["name"], "checkpoints")
    assert env["INSTANCE"] == f"projects/{lustre.inputs['project']}/locations/us-central1-a/instances/" \
                              f"{lustre.inputs['instanceId']}"
    # It reads the file system read-only, through a claim of its own.
    (volume,) = pod["volumes"]
    assert volume["persistentVolumeClaim"] == {"claimName": lustre_sync.CLAIM, "readOnly": True}
    assert container["volumeMounts"][0]["readOnly"] is True
    # The export identity: a custom role with the export permission only (not roles/lustre.admin).
    (role,) = run.of_type("gcp:projects/iAMCustomRole:IAMCustomRole")
    assert role.inputs["permissions"] == ["lustre.instances.exportData"]
    grants = [r for r in run.of_type("gcp:projects/iAMMember:IAMMember") if "-lustre-sync-" in r.name]
    assert [g.inputs["role"] for g in grants] == [f"projects/{role.inputs['project']}/roles/{role.inputs['roleId']}"]
    assert all("lustre.admin" not in str(r.inputs.get("role")) for r in run.resources)
    # The service agent's bucket access waits for the agent itself (a ServiceIdentity), not the first instance.
    (agent,) = run.of_type("gcp:projects/serviceIdentity:ServiceIdentity")
    assert agent.inputs["service"] == "lustre.googleapis.com"
    (binding,) = [r for r in run.of_type("gcp:storage/bucketIAMMember:BucketIAMMember")
                  if "gcp-sa-lustre" in str(r.inputs.get("member"))]
    assert binding.inputs["role"] == "roles/storage.objectUser" and run.depends_on(binding, agent)
    (provider,) = run.of_type("pulumi:providers:kubernetes")
    assert cron.provider is not None and cron.provider.startswith(provider.urn)


def test_a_gcp_pool_of_another_network_shape_moves_no_gpu_subnet() -> None:
    raw = _raw("gcp-use4-a4")  # RDMA pools: a gVNIC network and eight RDMA subnets
    before = _cidrs(raw, "gcp-use4-a4")
    more = copy.deepcopy(raw)
    more["nodePools"].append({"name": "a3mega", "instanceType": "a3-megagpu-8g", "capacity": "SPOT", "minNodes": 0,
                              "maxNodes": 2, "zone": "us-east4-b"})
    after = _cidrs(more, "gcp-use4-a4")  # adds eight GPUDirect VPCs
    assert {k: v for k, v in after.items() if k in before} == before
    assert len(after) == len(before) + 8
