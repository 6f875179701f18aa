"""GCP stacks under Pulumi mocks: GPU networks shaped by the machine type, GKE, node pools, checkpoints.

One mocked run per ``stacks/Pulumi.gcp-*.yaml`` file (module-scoped), plus a few config overrides for
shapes and features the stack files do not use (A3 Ultra RDMA, Managed Lustre, Filestore, broken configs).
"""

from __future__ import annotations

import ipaddress
import json
import re
from pathlib import Path
from typing import Any

import pytest

from infra import mockrun
from infra.config import ConfigError, StackConfig, load_stack_file, parse
from infra.mockrun import Registered, RunResult, run_stack
from placement.model.shapes import shape_book

ROOT = Path(__file__).resolve().parents[2]
GCP_STACKS = sorted(str(p) for p in (ROOT / "stacks").glob("Pulumi.gcp-*.yaml"))
USC1 = str(ROOT / "stacks" / "Pulumi.gcp-usc1-a3mega.yaml")
EUW4 = str(ROOT / "stacks" / "Pulumi.gcp-euw4-a3high.yaml")

NETWORK = "gcp:compute/network:Network"
SUBNET = "gcp:compute/subnetwork:Subnetwork"
FIREWALL = "gcp:compute/firewall:Firewall"
CLUSTER = "gcp:container/cluster:Cluster"
NODE_POOL = "gcp:container/nodePool:NodePool"
BUCKET = "gcp:storage/bucket:Bucket"
PARAM_SET = "kubernetes:networking.gke.io/v1:GKENetworkParamSet"
GKE_NETWORK = "kubernetes:networking.gke.io/v1:Network"
GVNIC_MTU = 8244
RDMA_MTU = 8896  # A3 Ultra / A4: the RoCE VPC and, per the Cluster Toolkit blueprints, their gVNIC VPC
TAGS = {"owner": "ml-platform", "cost-center": "cc-4242"}
KMS_KEY = "projects/sec-prj/locations/us-central1/keyRings/ckpt/cryptoKeys/ckpt"

RDMA_OVERRIDE: dict[str, Any] = {
    "gpuZone": "us-central1-b",
    "nodePools": [{"name": "h200-res", "instanceType": "a3-ultragpu-8g", "capacity": "RESERVATION",
                   "reservation": "h200-block-1", "minNodes": 0, "desiredNodes": 2, "maxNodes": 4}],
    "checkpoint": {"kmsKey": KMS_KEY, "softDeleteDays": 14,
                   "filesystem": {"kind": "lustre", "capacityGb": 18000, "throughputMbpsPerTib": 500}},
}
FILESTORE_OVERRIDE: dict[str, Any] = {
    "nodePools": [{"name": "h100-spot", "instanceType": "a3-highgpu-8g", "capacity": "SPOT", "minNodes": 0,
                   "maxNodes": 4},
                  {"name": "a100-single", "instanceType": "a2-highgpu-1g", "capacity": "ON_DEMAND", "minNodes": 0,
                   "maxNodes": 1}],
    "checkpoint": {"filesystem": {"kind": "filestore", "capacityGb": 2048}},
    "cluster": {"publicAccess": True, "publicAccessCidrs": ["198.51.100.0/24"], "deletionProtection": False},
}


def _stack_cfg(path: str, override: dict[str, Any] | None = None) -> StackConfig:
    import yaml

    doc = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    raw = {k.split(":", 1)[1]: v for k, v in doc["config"].items() if k.startswith("gpufleet:")}
    raw.update(override or {})
    return parse(raw, stack=Path(path).name.removeprefix("Pulumi.").removesuffix(".yaml"))


@pytest.fixture(scope="module", params=GCP_STACKS, ids=lambda p: Path(p).stem.removeprefix("Pulumi."))
def stack(request: pytest.FixtureRequest) -> tuple[StackConfig, RunResult]:
    return load_stack_file(request.param), run_stack(request.param)


@pytest.fixture(scope="module")
def rdma() -> tuple[StackConfig, RunResult]:
    return _stack_cfg(USC1, RDMA_OVERRIDE), run_stack(USC1, config_override=RDMA_OVERRIDE)


@pytest.fixture(scope="module")
def filestore() -> tuple[StackConfig, RunResult]:
    return _stack_cfg(EUW4, FILESTORE_OVERRIDE), run_stack(EUW4, config_override=FILESTORE_OVERRIDE)


@pytest.fixture(scope="module", params=["stack", "rdma", "filestore"])
def any_run(request: pytest.FixtureRequest) -> tuple[StackConfig, RunResult]:
    if request.param == "stack":
        return load_stack_file(USC1), run_stack(USC1)
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


def _gpu_pools(result: RunResult) -> dict[str, Registered]:
    return {r.inputs["name"]: r for r in result.of_type(NODE_POOL) if r.inputs["name"] != "system"}


def _gpu_vpcs(result: RunResult) -> list[Registered]:
    return [r for r in result.of_type(NETWORK) if not r.name.endswith("-network-vpc")]


def _subnets_of(result: RunResult, vpc: Registered) -> list[Registered]:
    return [s for s in result.of_type(SUBNET) if s.inputs["network"] == f"{vpc.name}-id"]


def test_every_gcp_stack_file_is_covered() -> None:
    assert {Path(p).name for p in GCP_STACKS} >= {"Pulumi.gcp-usc1-a3mega.yaml", "Pulumi.gcp-euw4-a3high.yaml"}


# ---------------------------------------------------------------- GPU networks


def test_gpu_vpcs_and_node_nics_match_the_shape(stack: tuple[StackConfig, RunResult]) -> None:
    cfg, result = stack
    vpcs = _gpu_vpcs(result)
    rdma = any(p.shape.rdma_subnets for p in cfg.node_pools)
    needed = max(p.shape.gpu_vpcs for p in cfg.node_pools)
    assert needed > 0
    assert len(vpcs) == needed + (1 if rdma else 0)
    vpc_names = {v.inputs["name"] for v in vpcs}
    for vpc in vpcs:
        roce = "networkProfile" in vpc.inputs
        assert roce is (rdma and vpc.inputs["name"].endswith("-rdma"))
        # TCPX/TCPXO gVNIC VPCs 8244; the RDMA family's gVNIC and RoCE VPCs 8896.
        assert vpc.inputs["mtu"] == (RDMA_MTU if rdma else GVNIC_MTU)
        assert vpc.inputs["autoCreateSubnetworks"] is False
        want_subnets = max(p.shape.rdma_subnets for p in cfg.node_pools) if roce else 1
        assert len(_subnets_of(result, vpc)) == want_subnets
    pools = _gpu_pools(result)
    for pool in cfg.node_pools:
        nics = pools[pool.name].inputs["networkConfig"]["additionalNodeNetworkConfigs"]
        assert len(nics) == pool.shape.gpu_vpcs + pool.shape.rdma_subnets
        assert {n["network"] for n in nics} <= vpc_names
        assert len({n["subnetwork"] for n in nics}) == len(nics), "one NIC per GPU subnet"
        assert pools[pool.name].inputs["nodeConfig"]["gvnic"] == {"enabled": True}


def test_gpu_subnets_are_carved_from_the_gpu_base_without_overlap(stack: tuple[StackConfig, RunResult]) -> None:
    cfg, result = stack
    base = ipaddress.ip_network(cfg.network.gpu_cidr_base)
    primary = [ipaddress.ip_network(c) for c in (cfg.network.vpc_cidr, cfg.network.pods_cidr,
                                                  cfg.network.services_cidr)]
    gpu = [ipaddress.ip_network(s.inputs["ipCidrRange"]) for v in _gpu_vpcs(result) for s in _subnets_of(result, v)]
    assert gpu and all(n.subnet_of(base) for n in gpu)  # type: ignore[arg-type]
    assert not any(a.overlaps(b) for i, a in enumerate(gpu) for b in gpu[i + 1:])
    assert not any(a.overlaps(p) for a in gpu for p in primary)


def test_firewalls_allow_only_gpu_subnet_traffic(any_run: tuple[StackConfig, RunResult]) -> None:
    _, result = any_run
    gpu_cidrs = {s.inputs["ipCidrRange"] for v in _gpu_vpcs(result) for s in _subnets_of(result, v)}
    gvnic_vpcs = [v for v in _gpu_vpcs(result) if "networkProfile" not in v.inputs]
    rules = {r.inputs["network"]: r for r in result.of_type(FIREWALL)}
    for vpc in gvnic_vpcs:
        rule = rules[f"{vpc.name}-id"]
        assert rule.inputs["direction"] == "INGRESS"
        assert rule.inputs["allows"] == [{"protocol": "all"}]
        assert set(rule.inputs["sourceRanges"]) == {s.inputs["ipCidrRange"] for s in _subnets_of(result, vpc)}
        assert set(rule.inputs["sourceRanges"]) <= gpu_cidrs
    for rule in result.of_type(FIREWALL):
        assert "0.0.0.0/0" not in rule.inputs.get("sourceRanges", [])


def test_a3_ultra_gets_a_gvnic_vpc_and_a_roce_vpc_with_eight_subnets(rdma: tuple[StackConfig, RunResult]) -> None:
    cfg, result = rdma
    shape = shape_book().get("a3-ultragpu-8g")
    assert shape is not None and shape.rdma_subnets == 8 and shape.gpu_vpcs == 1
    vpcs = _gpu_vpcs(result)
    roce = [v for v in vpcs if "networkProfile" in v.inputs]
    gvnic = [v for v in vpcs if "networkProfile" not in v.inputs]
    assert len(gvnic) == shape.gpu_vpcs and len(roce) == 1
    assert all(v.inputs["mtu"] == RDMA_MTU for v in gvnic)
    assert roce[0].inputs["mtu"] == RDMA_MTU
    assert roce[0].inputs["networkProfile"] == "projects/gpufleet-dev/global/networkProfiles/us-central1-b-vpc-roce"
    assert len(_subnets_of(result, roce[0])) == shape.rdma_subnets
    nics = _gpu_pools(result)["h200-res"].inputs["networkConfig"]["additionalNodeNetworkConfigs"]
    assert len(nics) == shape.gpu_vpcs + shape.rdma_subnets
    assert sum(n["network"] == roce[0].inputs["name"] for n in nics) == shape.rdma_subnets
    # RoCE VPCs take no VPC firewall rules (only RDMA_ROCE_POLICY regional policies).
    assert all(r.inputs["network"] != f"{roce[0].name}-id" for r in result.of_type(FIREWALL))
    modes = sorted(p.inputs["spec"]["deviceMode"] for p in result.of_type(PARAM_SET))
    assert modes == ["NetDevice"] * shape.gpu_vpcs + ["RDMA"] * shape.rdma_subnets
    assert cfg.node_pools[0].zone == "us-central1-b"


def test_boot_disk_type_follows_the_machine_series(any_run: tuple[StackConfig, RunResult]) -> None:
    cfg, result = any_run
    pools = _gpu_pools(result)
    for pool in cfg.node_pools:
        want = "hyperdisk-balanced" if pool.shape.name in ("a3-ultragpu-8g", "a4-highgpu-8g") else "pd-balanced"
        assert pools[pool.name].inputs["nodeConfig"]["diskType"] == want == pool.shape.boot_disk


FLEX_OVERRIDE: dict[str, Any] = {
    "gpuZone": "us-central1-b",
    "nodePools": [{"name": "h200-flex", "instanceType": "a3-ultragpu-8g", "capacity": "flex-start", "maxNodes": 8}],
}


def test_flex_start_pool_is_queued_provisioning_from_zero() -> None:
    result = run_stack(USC1, config_override=FLEX_OVERRIDE)
    pool = _gpu_pools(result)["h200-flex"].inputs
    node = pool["nodeConfig"]
    assert pool["queuedProvisioning"] == {"enabled": True}
    assert node["flexStart"] is True and node.get("spot", False) is False
    assert node["reservationAffinity"] == {"consumeReservationType": "NO_RESERVATION"}
    assert pool["autoscaling"]["totalMinNodeCount"] == 0 and pool["autoscaling"]["totalMaxNodeCount"] == 8
    assert pool["autoscaling"]["locationPolicy"] == "ANY"
    assert pool["initialNodeCount"] == 0
    # GKE rejects COMPACT placement and auto-repair on queued flex-start pools.
    assert "placementPolicy" not in pool
    assert pool["management"] == {"autoRepair": False, "autoUpgrade": True}
    assert node["diskType"] == "hyperdisk-balanced"
    assert result.outputs["nodePools"][0]["capacityType"] == "FLEX_START"


def test_flex_start_needs_a_gke_version_that_has_it() -> None:
    from infra.gcp.plan import check_gcp_config

    for version, ok in (("1.31.6-gke.1020000", False), ("1.32.2-gke.1500000", False), ("1.32.2-gke.1652000", True),
                        ("1.33", True)):
        cfg = _stack_cfg(USC1, {**FLEX_OVERRIDE, "cluster": {"gkeVersion": version}})
        if ok:
            check_gcp_config(cfg)
        else:
            with pytest.raises(ConfigError) as err:
                check_gcp_config(cfg)
            assert err.value.field == "gpufleet:cluster.gkeVersion"
    # The same versions are fine without a flex-start pool.
    check_gcp_config(_stack_cfg(USC1, {"cluster": {"gkeVersion": "1.31.6-gke.1020000"}}))


@pytest.mark.parametrize(("pool", "key"), [
    ({"reservation": "h200-block-1"}, "nodePools[0].reservation"),
    ({"minNodes": 1}, "nodePools[0].minNodes"),
    ({"desiredNodes": 2}, "nodePools[0].desiredNodes"),
])
def test_flex_start_pool_rules(pool: dict[str, Any], key: str) -> None:
    override = {**FLEX_OVERRIDE, "nodePools": [{**FLEX_OVERRIDE["nodePools"][0], **pool}]}
    with pytest.raises(ConfigError) as err:
        _stack_cfg(USC1, override)
    assert err.value.field == f"gpufleet:{key}"


def test_single_node_shape_gets_no_gpu_networks_or_compact_placement(
        filestore: tuple[StackConfig, RunResult]) -> None:
    _, result = filestore
    pool = _gpu_pools(result)["a100-single"].inputs
    assert "networkConfig" not in pool and "placementPolicy" not in pool and "gvnic" not in pool["nodeConfig"]
    assert len(_gpu_vpcs(result)) == shape_book().get("a3-highgpu-8g").gpu_vpcs  # type: ignore[union-attr]


def test_gke_network_objects_per_gpu_subnet(any_run: tuple[StackConfig, RunResult]) -> None:
    _, result = any_run
    subnets = {s.inputs["name"]: s for v in _gpu_vpcs(result) for s in _subnets_of(result, v)}
    vpc_by_name = {v.inputs["name"]: v for v in _gpu_vpcs(result)}
    params = {p.inputs["metadata"]["name"]: p for p in result.of_type(PARAM_SET)}
    networks = {n.inputs["metadata"]["name"]: n for n in result.of_type(GKE_NETWORK)}
    assert len(params) == len(networks) == len(subnets)
    for name, p in params.items():
        spec = p.inputs["spec"]
        assert spec["vpcSubnet"] in subnets
        vpc = vpc_by_name[spec["vpc"]]
        assert spec["deviceMode"] == ("RDMA" if "networkProfile" in vpc.inputs else "NetDevice")
        assert networks[name].inputs["spec"] == {
            "type": "Device",
            "parametersRef": {"group": "networking.gke.io", "kind": "GKENetworkParamSet", "name": name}}
        assert p.provider is not None and "pulumi:providers:kubernetes" in p.provider
    # Pods name these networks; the stack exports them per pool.
    exported = {n for names in result.outputs["gpuNetworks"].values() for n in names}
    assert exported == set(params)


# ---------------------------------------------------------------- node pools and cluster


def test_gpu_pools_capacity_placement_and_zone(any_run: tuple[StackConfig, RunResult]) -> None:
    cfg, result = any_run
    pools = _gpu_pools(result)
    assert set(pools) == {p.name for p in cfg.node_pools}
    for pool in cfg.node_pools:
        inputs = pools[pool.name].inputs
        node = inputs["nodeConfig"]
        assert inputs["nodeLocations"] == [pool.zone]
        assert inputs["location"] == cfg.region
        # COMPACT only for multi-node spot/on-demand pools: never on a reservation (Cluster Toolkit gke-a4) or
        # flex-start pool.
        compact = pool.multi_node and pool.capacity in ("SPOT", "ON_DEMAND")
        assert (inputs.get("placementPolicy") == {"type": "COMPACT"}) is compact
        assert inputs["autoscaling"]["totalMinNodeCount"] == pool.min_nodes
        assert inputs["autoscaling"]["totalMaxNodeCount"] == pool.max_nodes
        assert inputs["initialNodeCount"] == pool.desired_nodes
        assert node["machineType"] == pool.shape.name
        assert node["guestAccelerators"] == [{
            "type": pool.shape.gke_accelerator, "count": pool.shape.gpus,
            "gpuDriverInstallationConfig": {"gpuDriverVersion": "DEFAULT"}}]
        assert node.get("spot", False) is (pool.capacity == "SPOT")
        if pool.capacity == "RESERVATION":
            assert node["reservationAffinity"] == {"consumeReservationType": "SPECIFIC_RESERVATION",
                                                   "key": "compute.googleapis.com/reservation-name",
                                                   "values": [pool.reservation]}
        else:
            assert "reservationAffinity" not in node
        if pool.shape.local_ssds:
            assert node["ephemeralStorageLocalSsdConfig"] == {"localSsdCount": pool.shape.local_ssds}
        assert node["labels"] == {"gpufleet.io/pool": pool.name, "gpufleet.io/gpu": pool.shape.accelerator,
                                  "gpufleet.io/capacity": pool.capacity_kind,
                                  "gpufleet.io/fabric": pool.shape.fabric}
        assert node["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"}]
        assert node["workloadMetadataConfig"] == {"mode": "GKE_METADATA"}
        assert TAGS.items() <= node["resourceLabels"].items()
    multi_zones = {p.zone for p in cfg.node_pools if p.multi_node}
    assert len(multi_zones) <= 1


def test_cluster_is_private_multinetwork_gke(stack: tuple[StackConfig, RunResult]) -> None:
    cfg, result = stack
    (cluster,) = result.of_type(CLUSTER)
    c = cluster.inputs
    assert c["datapathProvider"] == "ADVANCED_DATAPATH"
    assert c["enableMultiNetworking"] is True
    assert c["location"] == cfg.region
    assert c["workloadIdentityConfig"] == {"workloadPool": f"{cfg.project}.svc.id.goog"}
    assert c["releaseChannel"] == {"channel": cfg.cluster.release_channel}
    assert c["removeDefaultNodePool"] is True
    assert c["privateClusterConfig"]["enablePrivateNodes"] is True
    assert c["privateClusterConfig"]["enablePrivateEndpoint"] is (not cfg.cluster.public_access)
    assert c["addonsConfig"]["gcsFuseCsiDriverConfig"] == {"enabled": True}
    assert "lustreCsiDriverConfig" not in c["addonsConfig"]
    assert c["ipAllocationPolicy"] == {"clusterSecondaryRangeName": "pods", "servicesSecondaryRangeName": "services"}
    assert TAGS.items() <= c["resourceLabels"].items()
    assert c["deletionProtection"] is True
    system = [p for p in result.of_type(NODE_POOL) if p.inputs["name"] == "system"]
    assert len(system) == 1 and "guestAccelerators" not in system[0].inputs["nodeConfig"]


def test_node_upgrades_wait_behind_a_maintenance_exclusion(stack: tuple[StackConfig, RunResult]) -> None:
    cfg, result = stack
    (cluster,) = result.of_type(CLUSTER)
    policy = cluster.inputs["maintenancePolicy"]
    (exclusion,) = policy["maintenanceExclusions"]
    assert exclusion["exclusionOptions"]["scope"] == "NO_MINOR_OR_NODE_UPGRADES"
    assert exclusion["startTime"] == cfg.cluster.maintenance.exclusion_start
    # Exactly one of an end time and UNTIL_END_OF_SUPPORT.
    assert ("endTime" in exclusion) != ("endTimeBehavior" in exclusion["exclusionOptions"])
    assert "dailyMaintenanceWindow" in policy or "recurringWindow" in policy
    # A release channel forbids auto_upgrade=false: pools keep it on and the exclusion holds the upgrades.
    for pool in result.of_type(NODE_POOL):
        assert pool.inputs["management"]["autoUpgrade"] is True


def test_maintenance_window_and_dated_exclusion_from_config() -> None:
    override = {"cluster": {"maintenance": {
        "exclusionStart": "2026-03-01T00:00:00Z", "exclusionEnd": "2026-08-01T00:00:00Z",
        "window": {"start": "2026-03-07T02:00:00Z", "end": "2026-03-07T10:00:00Z",
                   "recurrence": "FREQ=WEEKLY;BYDAY=SA"}}}}
    (cluster,) = run_stack(USC1, config_override=override).of_type(CLUSTER)
    policy = cluster.inputs["maintenancePolicy"]
    assert policy["recurringWindow"] == {"startTime": "2026-03-07T02:00:00Z", "endTime": "2026-03-07T10:00:00Z",
                                         "recurrence": "FREQ=WEEKLY;BYDAY=SA"}
    (exclusion,) = policy["maintenanceExclusions"]
    assert exclusion["endTime"] == "2026-08-01T00:00:00Z"
    assert exclusion["exclusionOptions"] == {"scope": "NO_MINOR_OR_NODE_UPGRADES"}
    (off,) = run_stack(USC1, config_override={"cluster": {"maintenance": {"exclusion": False}}}).of_type(CLUSTER)
    assert off.inputs["maintenancePolicy"].get("maintenanceExclusions", []) == []


@pytest.mark.parametrize(("maintenance", "key"), [
    ({"exclusionEnd": "2026-12-31T00:00:00Z"}, "cluster.maintenance.exclusionEnd"),  # > 180 days
    ({"exclusionStart": "2026-01-01T00:00:00Z", "exclusionEnd": "2025-12-01T00:00:00Z"},
     "cluster.maintenance.exclusionEnd"),
    ({"exclusionStart": "tomorrow"}, "cluster.maintenance.exclusionStart"),
    ({"window": {"start": "2026-01-03T02:00:00Z", "end": "2026-01-03T04:00:00Z", "recurrence": "FREQ=DAILY"}},
     "cluster.maintenance.window.end"),
    ({"window": {"start": "2026-01-03T02:00:00Z", "end": "2026-01-03T08:00:00Z", "recurrence": "weekly"}},
     "cluster.maintenance.window.recurrence"),
    ({"exclusionScope": "NO_UPGRADES"}, "cluster.maintenance.exclusionScope"),
])
def test_bad_maintenance_config_names_the_key(maintenance: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as err:
        _stack_cfg(USC1, {"cluster": {"maintenance": maintenance}})
    assert err.value.field == f"gpufleet:{key}"


def test_gpu_health_dcgm_metrics_and_auto_repair(any_run: tuple[StackConfig, RunResult]) -> None:
    cfg, result = any_run
    (cluster,) = result.of_type(CLUSTER)
    monitoring = cluster.inputs["monitoringConfig"]
    assert "DCGM" in monitoring["enableComponents"]
    assert monitoring["managedPrometheus"]["enabled"] is True  # DCGM metrics go through it
    pools = _gpu_pools(result)
    for pool in cfg.node_pools:
        assert pools[pool.name].inputs["management"]["autoRepair"] is True


def test_public_endpoint_is_limited_to_the_configured_cidrs(filestore: tuple[StackConfig, RunResult]) -> None:
    _, result = filestore
    (cluster,) = result.of_type(CLUSTER)
    c = cluster.inputs
    assert c["privateClusterConfig"]["enablePrivateEndpoint"] is False
    assert c["privateClusterConfig"]["enablePrivateNodes"] is True
    assert [b["cidrBlock"] for b in c["masterAuthorizedNetworksConfig"]["cidrBlocks"]] == ["198.51.100.0/24"]
    assert c["deletionProtection"] is False
    assert result.outputs["apiAccess"] == {"privateEndpoint": True, "publicEndpoint": True,
                                           "publicAccessCidrs": ["198.51.100.0/24"], "hubCidrs": [],
                                           "operatorCidrs": [], "privateEndpointEnforced": False,
                                           "controlPlane": "psc"}
    assert c["addonsConfig"]["gcpFilestoreCsiDriverConfig"] == {"enabled": True}


def authorized(result: RunResult) -> list[str]:
    (cluster,) = result.of_type(CLUSTER)
    return [b["cidrBlock"] for b in cluster.inputs["masterAuthorizedNetworksConfig"]["cidrBlocks"]]


def test_hub_cidrs_are_master_authorized_networks(stack: tuple[StackConfig, RunResult]) -> None:
    cfg, result = stack
    # The example hub's NAT addresses, read from the hub stack (gpufleet:cluster.hubStack) by StackReference.
    egress = list(load_stack_file(str(Path(__file__).resolve().parents[2] / "stacks" / "Pulumi.hub.yaml"))
                  .hub.egress_cidrs)
    if cfg.cluster.hub_stack is None:
        pytest.skip(f"{cfg.cluster_name} is not a worker of the example hub")
    assert egress, "every example worker authorises the example hub"
    # The public endpoint, open to the hub's egress only.
    assert authorized(result) == egress
    (cluster,) = result.of_type(CLUSTER)
    assert cluster.inputs["privateClusterConfig"]["enablePrivateEndpoint"] is False
    assert cluster.inputs["privateClusterConfig"]["masterGlobalAccessConfig"] == {"enabled": True}
    assert result.outputs["apiAccess"] == {"privateEndpoint": True, "publicEndpoint": True,
                                           "publicAccessCidrs": [], "hubCidrs": egress,
                                           "operatorCidrs": list(cfg.cluster.operator_cidrs),
                                           # Issue 28: on the public path the private endpoint is not the hub's.
                                           "privateEndpointEnforced": False, "controlPlane": "psc"}


def test_public_endpoint_authorises_the_hub_once() -> None:
    cluster = {"publicAccess": True, "publicAccessCidrs": ["198.51.100.0/24"],
               "hubCidrs": ["198.51.100.0/24", "192.0.2.10/32", "10.200.0.0/20"]}
    result = run_stack(USC1, config_override={"cluster": cluster})
    assert authorized(result) == ["198.51.100.0/24", "192.0.2.10/32", "10.200.0.0/20"]


def test_operator_cidrs_are_master_authorized_networks_once() -> None:
    cluster = {"hubCidrs": ["10.200.0.0/20"], "operatorCidrs": ["172.20.0.0/16", "10.200.0.0/20"]}
    result = run_stack(USC1, config_override={"cluster": cluster})
    cfg_subnet = authorized(result)[0]
    # The private endpoint: the cluster subnet, the hub, then the operators' VPN range (the hub's range once).
    assert authorized(result) == [cfg_subnet, "10.200.0.0/20", "172.20.0.0/16"]
    assert result.outputs["apiAccess"]["operatorCidrs"] == ["172.20.0.0/16", "10.200.0.0/20"]


def test_network_has_private_google_access_router_and_nat(stack: tuple[StackConfig, RunResult]) -> None:
    cfg, result = stack
    primary = [s for s in result.of_type(SUBNET) if s.name.endswith("-network-subnet")]
    assert len(primary) == 1
    s = primary[0].inputs
    assert s["ipCidrRange"] == cfg.network.vpc_cidr and s["privateIpGoogleAccess"] is True
    assert {r["rangeName"]: r["ipCidrRange"] for r in s["secondaryIpRanges"]} == {
        "pods": cfg.network.pods_cidr, "services": cfg.network.services_cidr}
    (vpc,) = [n for n in result.of_type(NETWORK) if n.name.endswith("-network-vpc")]
    assert vpc.inputs["autoCreateSubnetworks"] is False
    assert len(result.of_type("gcp:compute/router:Router")) == 1
    (nat,) = result.of_type("gcp:compute/routerNat:RouterNat")
    assert nat.inputs["sourceSubnetworkIpRangesToNat"] == "ALL_SUBNETWORKS_ALL_IP_RANGES"


def test_every_gcp_resource_uses_the_explicit_provider(stack: tuple[StackConfig, RunResult]) -> None:
    cfg, result = stack
    (provider,) = result.of_type("pulumi:providers:gcp")
    assert provider.inputs["project"] == cfg.project and provider.inputs["region"] == cfg.region
    labels = provider.inputs["defaultLabels"]  # provider inputs arrive JSON-encoded
    assert TAGS.items() <= (json.loads(labels) if isinstance(labels, str) else labels).items()
    for r in result.resources:
        if r.type.startswith("gcp:"):
            assert r.provider is not None and "pulumi:providers:gcp" in r.provider, r.name


# ---------------------------------------------------------------- checkpoints and identity


def test_checkpoint_bucket_is_private_uniform_and_versioned(stack: tuple[StackConfig, RunResult]) -> None:
    cfg, result = stack
    (bucket,) = result.of_type(BUCKET)
    b = bucket.inputs
    assert b["publicAccessPrevention"] == "enforced"
    assert b["uniformBucketLevelAccess"] is True
    assert b["versioning"] == {"enabled": True}
    # Versioning and HNS are mutually exclusive on GCS; versioning wins (see infra/gcp/checkpoint.py).
    assert b["hierarchicalNamespace"] == {"enabled": False}
    assert b["softDeletePolicy"] == {"retentionDurationSeconds": cfg.checkpoint.soft_delete_days * 86400}
    assert b["location"] == cfg.region.upper()
    assert TAGS.items() <= b["labels"].items()
    assert "encryption" not in b
    delete = [r for r in b["lifecycleRules"] if r["action"]["type"] == "Delete"]
    assert delete[0]["condition"]["daysSinceNoncurrentTime"] == cfg.checkpoint.noncurrent_version_days
    # The homes under the prefix: the short time the plans bill, and soft delete's days billed after it
    # (placement/data/bill.yaml: the stacks set what the bill charges, issue 36).
    from placement.model.bill import bill_book

    book = bill_book()
    (homes,) = [r["condition"] for r in delete if r["condition"].get("matchesPrefixes")]
    assert homes == {"daysSinceNoncurrentTime": 1, "withState": "ARCHIVED",
                     "matchesPrefixes": [f"{cfg.checkpoint.prefix}/"]}
    from infra.config.storage import CheckpointConfig

    assert book.noncurrent_version_days == 1
    assert book.clouds["gcp"].soft_delete_days == CheckpointConfig().soft_delete_days
    assert result.outputs["checkpointUri"] == f"gs://{b['name']}/{cfg.checkpoint.prefix}"
    assert result.outputs["checkpointFilesystem"] is None


def test_training_identity_reaches_only_the_stack_bucket(any_run: tuple[StackConfig, RunResult]) -> None:
    cfg, result = any_run
    (bucket,) = result.of_type(BUCKET)
    # With Managed Lustre, its service agent also gets the bucket (infra/gcp/lustre_sync.py writes the exports).
    (access,) = [r for r in result.of_type("gcp:storage/bucketIAMMember:BucketIAMMember")
                 if "@gcp-sa-lustre." not in str(r.inputs.get("member"))]
    email = result.outputs["trainingGoogleServiceAccount"]
    assert access.inputs == {"bucket": bucket.inputs["name"], "role": "roles/storage.objectUser",
                             "member": f"serviceAccount:{email}"}
    # The Lustre export CronJob's own identity (infra/gcp/lustre_sync.py) is bound to its own namespace only.
    bindings = [b for b in result.of_type("gcp:serviceaccount/iAMMember:IAMMember")
                if "[gpufleet-lustre-sync/" not in b.inputs["member"]]
    trainer = [a for a in result.of_type("gcp:serviceaccount/account:Account") if a.name.endswith("-trainer")]
    assert len(trainer) == 1
    for wi in bindings:
        assert wi.inputs["role"] == "roles/iam.workloadIdentityUser"
        assert wi.inputs["serviceAccountId"] == trainer[0].name
    # Exactly the KSAs the add-ons create: one per team namespace, plus training.namespace.
    members = sorted(wi.inputs["member"] for wi in bindings)
    sa = cfg.training.service_account
    assert members == sorted(f"serviceAccount:{cfg.project}.svc.id.goog[{ns}/{sa}]"
                             for ns in cfg.training_namespaces)
    assert {f"serviceAccount:{cfg.project}.svc.id.goog[{team}/{sa}]" for team in cfg.kueue.teams} <= set(members)
    assert len(set(members)) == len(cfg.kueue.teams) + (cfg.training.namespace not in cfg.kueue.teams)
    # The binding that used to be the only one keeps its state through an alias (no delete of a shared member).
    legacy = [wi for wi in bindings if wi.inputs["member"].endswith(f"[{cfg.training.namespace}/{sa}]")]
    assert len(legacy) == 1
    assert email == f"{trainer[0].inputs['accountId']}@{cfg.project}.iam.gserviceaccount.com"
    for member in result.of_type("gcp:projects/iAMMember:IAMMember"):
        assert "storage" not in member.inputs["role"] and member.inputs["member"] != f"serviceAccount:{email}"


def test_training_ksa_in_every_team_namespace_names_the_google_service_account(
        any_run: tuple[StackConfig, RunResult]) -> None:
    cfg, result = any_run
    accounts = {r.inputs["metadata"]["namespace"]: r for r in result.of_type("kubernetes:core/v1:ServiceAccount")
                if r.inputs["metadata"]["name"] == cfg.training.service_account}
    assert set(accounts) == set(cfg.training_namespaces) and set(cfg.kueue.teams) <= set(accounts)
    namespaces = {r.inputs["metadata"]["name"] for r in result.of_type("kubernetes:core/v1:Namespace")}
    email = result.outputs["trainingGoogleServiceAccount"]
    (k8s_provider,) = result.of_type("pulumi:providers:kubernetes")
    for ns, ksa in accounts.items():
        assert ksa.inputs["metadata"]["annotations"] == {"iam.gke.io/gcp-service-account": email}
        assert ns in namespaces
        assert ksa.provider and ksa.provider.endswith(f"::{k8s_provider.name}::{k8s_provider.name}-id"), \
            "created on the cluster's provider"


def claims_by_namespace(result: RunResult) -> dict[str, tuple[dict, dict]]:
    """(PV spec, PVC spec) per namespace the stack put the checkpoint claim in."""
    pvs = {p.inputs["spec"]["claimRef"]["namespace"]: p.inputs["spec"]
           for p in result.of_type("kubernetes:core/v1:PersistentVolume")}
    return {c.inputs["metadata"]["namespace"]: (pvs[c.inputs["metadata"]["namespace"]], c.inputs["spec"])
            for c in result.of_type("kubernetes:core/v1:PersistentVolumeClaim")
            if c.inputs["metadata"]["name"] == "gpufleet-checkpoints"}


def test_lustre_and_filestore_are_claims_in_every_training_namespace(
        rdma: tuple[StackConfig, RunResult], filestore: tuple[StackConfig, RunResult]) -> None:
    cfg, result = rdma
    claims = claims_by_namespace(result)
    assert set(claims) == set(cfg.training_namespaces)
    (lustre,) = result.of_type("gcp:lustre/instance:Instance")
    for pv, _ in claims.values():
        assert pv["csi"]["driver"] == "lustre.csi.storage.gke.io"
        assert pv["csi"]["volumeHandle"] == f"{cfg.project}/{cfg.gpu_zone}/{lustre.inputs['instanceId']}"
        assert pv["csi"]["volumeAttributes"]["filesystem"] == lustre.inputs["filesystem"]
    assert result.outputs["checkpointFilesystem"]["claimName"] == "gpufleet-checkpoints"
    cfg, result = filestore
    claims = claims_by_namespace(result)
    assert set(claims) == set(cfg.training_namespaces)
    (instance,) = result.of_type("gcp:filestore/instance:Instance")
    share = instance.inputs["fileShares"]["name"]
    for pv, _ in claims.values():
        assert pv["csi"]["driver"] == "filestore.csi.storage.gke.io"
        assert pv["csi"]["volumeHandle"] == f"modeInstance/{cfg.gpu_zone}/{instance.inputs['name']}/{share}"
        assert pv["csi"]["volumeAttributes"]["volume"] == share


def test_lustre_tier_with_private_services_access_and_cmek(rdma: tuple[StackConfig, RunResult]) -> None:
    cfg, result = rdma
    (lustre,) = result.of_type("gcp:lustre/instance:Instance")
    assert lustre.inputs["location"] == cfg.gpu_zone
    assert lustre.inputs["capacityGib"] == "18000" and lustre.inputs["perUnitStorageThroughput"] == "500"
    assert lustre.inputs["network"].endswith("-network-vpc-id")
    (psa,) = result.of_type("gcp:compute/globalAddress:GlobalAddress")
    assert psa.inputs["purpose"] == "VPC_PEERING"
    psa_cidr = f"{psa.inputs['address']}/{int(psa.inputs['prefixLength'])}"
    assert ipaddress.ip_network(psa_cidr).subnet_of(ipaddress.ip_network(cfg.network.gpu_cidr_base))  # type: ignore[arg-type]
    (peering,) = result.of_type("gcp:servicenetworking/connection:Connection")
    assert peering.inputs["service"] == "servicenetworking.googleapis.com"
    lustre_fw = [r for r in result.of_type(FIREWALL) if r.inputs["sourceRanges"] == [psa_cidr]]
    assert len(lustre_fw) == 1 and lustre_fw[0].inputs["allows"] == [{"protocol": "tcp", "ports": ["988"]}]
    (cluster,) = result.of_type(CLUSTER)
    assert cluster.inputs["addonsConfig"]["lustreCsiDriverConfig"] == {"enabled": True}
    fs = result.outputs["checkpointFilesystem"]
    assert fs["kind"] == "lustre" and fs["zone"] == cfg.gpu_zone
    (bucket,) = result.of_type(BUCKET)
    assert bucket.inputs["encryption"] == {"defaultKmsKeyName": KMS_KEY}
    (kms,) = result.of_type("gcp:kms/cryptoKeyIAMMember:CryptoKeyIAMMember")
    assert kms.inputs["cryptoKeyId"] == KMS_KEY
    assert kms.inputs["member"].endswith("@gs-project-accounts.iam.gserviceaccount.com")
    assert bucket.inputs["softDeletePolicy"] == {"retentionDurationSeconds": 14 * 86400}


def test_filestore_tier_in_the_gpu_zone(filestore: tuple[StackConfig, RunResult]) -> None:
    cfg, result = filestore
    (fs,) = result.of_type("gcp:filestore/instance:Instance")
    assert fs.inputs["location"] == cfg.gpu_zone and fs.inputs["tier"] == "ZONAL"
    assert fs.inputs["fileShares"]["capacityGb"] == 2048
    assert fs.inputs["networks"][0]["connectMode"] == "PRIVATE_SERVICE_ACCESS"
    assert TAGS.items() <= fs.inputs["labels"].items()
    assert result.outputs["checkpointFilesystem"]["kind"] == "filestore"


# ---------------------------------------------------------------- outputs


def test_outputs_match_the_common_shape_and_kubeconfig_is_secret(stack: tuple[StackConfig, RunResult]) -> None:
    cfg, result = stack
    assert "kubeconfig" in result.secret_outputs
    kubeconfig = json.loads(result.outputs["kubeconfig"])
    assert kubeconfig["users"][0]["user"]["exec"]["command"] == "gke-gcloud-auth-plugin"
    assert kubeconfig["clusters"][0]["cluster"]["server"].startswith("https://")
    assert result.outputs["cloud"] == "gcp" and result.outputs["region"] == cfg.region
    assert result.outputs["clusterName"] == cfg.cluster_name
    assert [p["name"] for p in result.outputs["nodePools"]] == [p.name for p in cfg.node_pools]
    assert result.outputs["trainingServiceAccount"] == {"name": cfg.training.service_account,
                                                        "namespaces": list(cfg.training_namespaces)}
    (k8s_provider,) = result.of_type("pulumi:providers:kubernetes")
    assert "kubeconfig" in k8s_provider.inputs


# ---------------------------------------------------------------- invalid configs


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> list[RunResult]:
    """Every RunResult run_stack creates, so a failed run can still be inspected."""
    runs: list[RunResult] = []

    class Capturing(RunResult):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            runs.append(self)

    monkeypatch.setattr(mockrun, "RunResult", Capturing)
    return runs


def _pool(**kw: Any) -> list[dict[str, Any]]:
    return [{"name": "gpu", "instanceType": "a3-megagpu-8g", "capacity": "SPOT", "minNodes": 0, "maxNodes": 2, **kw}]


@pytest.mark.parametrize(("override", "key"), [
    ({"nodePools": _pool(instanceType="a3-foogpu-8g")}, "gpufleet:nodePools[0].instanceType"),
    ({"gpuZone": "europe-west4-b"}, "gpufleet:gpuZone"),
    ({"gpuZone": "us-central1-f", "nodePools": _pool()}, "gpufleet:nodePools[0].instanceType"),
    ({"nodePools": _pool(instanceType="a2-highgpu-8g", maxNodes=2)}, "gpufleet:nodePools[0].maxNodes"),
    ({"checkpoint": {"softDeleteDays": 3}}, "gpufleet:checkpoint.softDeleteDays"),
    ({"network": {"gpuCidrBase": "10.0.0.0/16", "vpcCidr": "10.0.0.0/20"}}, "gpufleet:network.gpuCidrBase"),
    ({"network": {"gpuCidrBase": "10.100.0.0/22"}}, "gpufleet:network.gpuCidrBase"),
    ({"checkpoint": {"filesystem": {"kind": "lustre", "capacityGb": 1200}}},
     "gpufleet:checkpoint.filesystem.capacityGb"),
    ({"gpuZone": None, "nodePools": [
        {"name": "u1", "instanceType": "a3-ultragpu-8g", "zone": "us-central1-b", "maxNodes": 1},
        {"name": "u2", "instanceType": "a4-highgpu-8g", "zone": "us-central1-b", "maxNodes": 1},
        {"name": "m1", "instanceType": "a3-megagpu-8g", "zone": "us-central1-c", "maxNodes": 1}]}, None),
], ids=["unknown-machine", "zone-not-in-region", "not-offered-in-zone", "multi-node-a2", "soft-delete-days",
        "gpu-cidr-overlap", "gpu-cidr-too-small", "lustre-too-small", "valid-mixed-fabrics"])
def test_invalid_config_fails_naming_the_key_before_any_resource(
        captured: list[RunResult], override: dict[str, Any], key: str | None) -> None:
    if key is None:  # control case: the same machinery accepts a valid config
        result = run_stack(USC1, config_override=override)
        assert result.of_type(NODE_POOL)
        return
    with pytest.raises(Exception, match=re.escape(key)):
        run_stack(USC1, config_override=override)
    # A read of the hub stack's outputs (gpufleet:cluster.hubStack) writes nothing.
    assert captured and [r for r in captured[-1].resources if r.type != "pulumi:pulumi:StackReference"] == []


def test_rdma_pools_in_two_zones_are_rejected() -> None:
    from infra.gcp.plan import plan_gpu_networks

    # Both offered per the catalog, each in its own zone: one RoCE VPC cannot serve both.
    raw = {"cloud": "gcp", "project": "p", "region": "europe-west4", "tags": TAGS,
           "nodePools": [{"name": "u1", "instanceType": "a3-ultragpu-8g", "zone": "europe-west4-a", "maxNodes": 1},
                         {"name": "u2", "instanceType": "a4-highgpu-8g", "zone": "europe-west4-b", "maxNodes": 1}]}
    cfg = parse(raw)
    with pytest.raises(ConfigError) as err:
        plan_gpu_networks(cfg)
    assert err.value.field == "gpufleet:nodePools[1].zone"


def test_a4_reservation_pool_has_no_compact_placement() -> None:
    """The Cluster Toolkit's gke-a4 example sets no placement policy on its reservation pool (Compute Engine
    refuses compact policies with reservations shared across projects)."""
    result = run_stack(str(ROOT / "stacks" / "Pulumi.gcp-use4-a4.yaml"))
    reserved = _gpu_pools(result)["b200-reserved"].inputs
    assert reserved["nodeConfig"]["reservationAffinity"]["consumeReservationType"] == "SPECIFIC_RESERVATION"
    assert reserved["autoscaling"]["totalMaxNodeCount"] > 1 and "placementPolicy" not in reserved


def test_gke_nodes_carry_the_fabric_label_like_eks_nodes() -> None:
    from infra.aws.gpu_nodes import pool_labels
    from infra.gcp.nodepool import node_labels

    aws = load_stack_file(str(ROOT / "stacks" / "Pulumi.aws-use1-p5.yaml")).node_pools[0]
    for path in GCP_STACKS:
        for pool in load_stack_file(path).node_pools:
            assert node_labels(pool)["gpufleet.io/fabric"] == pool.shape.fabric
    assert pool_labels(aws)["gpufleet.io/fabric"] == aws.shape.fabric == "efa"


@pytest.mark.parametrize(("tier", "good", "bad"), [
    (1000, [9000, 18000, 954000], [8999, 10000, 963000]),
    (500, [18000, 36000], [9000, 27000]),
    (250, [36000, 72000], [9000, 18000, 45000]),
    (125, [72000, 144000], [9000, 36000, 108000]),
])
def test_managed_lustre_size_follows_its_tier(tier: int, good: list[int], bad: list[int]) -> None:
    from infra.gcp.plan import check_gcp_config

    def cfg(size: int) -> StackConfig:
        return _stack_cfg(USC1, {"checkpoint": {"filesystem": {"kind": "lustre", "capacityGb": size,
                                                               "throughputMbpsPerTib": tier}}})

    for size in good:
        check_gcp_config(cfg(size))
    for size in bad:
        with pytest.raises(ConfigError) as err:
            check_gcp_config(cfg(size))
        assert err.value.field == "gpufleet:checkpoint.filesystem.capacityGb" and "\n" not in str(err.value)


def test_a_private_hub_path_asserts_a_psc_control_plane() -> None:
    """Issue 28: the VPN reaches a Private Service Connect control plane, not a VPC-peered one."""
    import pulumi

    from infra.gcp.cluster import control_plane_kind

    assert control_plane_kind(None, "vpn") == "psc" and control_plane_kind("", "external") == "psc"
    assert control_plane_kind("gke-n1234-peer", "none") == "peering"
    with pytest.raises(pulumi.RunError, match=r"^invalid stack config: gpufleet:cluster\.hubPrivateLink: is vpn"):
        control_plane_kind("gke-n1234-peer", "vpn")
