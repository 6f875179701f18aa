"""Issue 28: the hub's HA VPN to GCP workers (one AWS gateway per hub VPC, 4-byte ASNs, one IKE algorithm set on
both sides) and the per-worker paths `hub-reaches-workers` checks, on the example documented in docs/kueue-hub.md."""

from __future__ import annotations

import copy
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra import mockrun
from infra.config import ConfigError, StackConfig, load_stack_file, parse
from infra.config import stack as config_stack
from infra.hub_link import with_hub_egress
from infra.k8s import kueue_objects as ko
from infra.outputs import api_access_output, hub_link_output, node_pool_output
from infra.policy.checks import check_hub_reachability

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "kueue-hub.md"
VPN_WORKERS = ["org/gpufleet/gcp-usc1-a3mega", "org/gpufleet/gcp-euw4-a3high"]
VGW = "aws:ec2/vpnGateway:VpnGateway"
CONNECTION = "aws:ec2/vpnConnection:VpnConnection"
CGW = "aws:ec2/customerGateway:CustomerGateway"
TUNNEL = "gcp:compute/vPNTunnel:VPNTunnel"


def documented(marker: str) -> dict[str, Any]:
    """The YAML block after ``<!-- vpn-example: <marker> -->`` in docs/kueue-hub.md."""
    text = DOC.read_text(encoding="utf-8")
    found = re.search(rf"<!-- vpn-example: {marker} -->\s*```yaml\n(.*?)```", text, re.S)
    assert found, f"docs/kueue-hub.md has no vpn-example: {marker} block"
    return dict(yaml.safe_load(found.group(1)))


def write_example(root: Path, hub_changes: dict[str, Any] | None = None) -> Path:
    """The example stacks under ``root``/stacks with the documented VPN example applied."""
    stacks = root / "stacks"
    shutil.copytree(REPO / "stacks", stacks)
    hub_path = stacks / "Pulumi.hub.yaml"
    doc = yaml.safe_load(hub_path.read_text())
    hub = dict(doc["config"]["gpufleet:hub"])
    hub.update(documented("hub")["gpufleet:hub"])
    hub.update({"dispatcher": "AllAtOnce"})
    hub.pop("dispatch", None)
    hub.update(hub_changes or {})
    doc["config"]["gpufleet:hub"] = hub
    hub_path.write_text(yaml.safe_dump(doc))
    for ref in VPN_WORKERS:
        path = stacks / f"Pulumi.{ref.rsplit('/', 1)[-1]}.yaml"
        wdoc = yaml.safe_load(path.read_text())
        wdoc["config"]["gpufleet:cluster"] = {**wdoc["config"].get("gpufleet:cluster", {}),
                                              **documented("worker")["gpufleet:cluster"]}
        path.write_text(yaml.safe_dump(wdoc))
    return stacks


def fabricate(cfg: StackConfig, hub_egress: tuple[str, ...]) -> dict[str, Any]:
    """A worker's outputs as the hub reads them, with the hub's egress of its path authorised."""
    linked, _ = with_hub_egress(cfg, hub_egress)
    out: dict[str, Any] = {
        "cloud": cfg.cloud, "region": cfg.region, "clusterName": cfg.cluster_name,
        "kubeconfig": yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": f"https://{cfg.cluster_name}.example",
                                                   "certificate-authority-data": "Y2E="}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            "users": [{"name": "u", "user": {"token": "t"}}]}),
        "nodePools": [node_pool_output(p) for p in cfg.node_pools],
        "apiAccess": {**api_access_output(linked), **({"controlPlane": "psc"} if cfg.cloud == "gcp" else {})},
        "hubLink": hub_link_output(linked),
    }
    if cfg.cloud == "gcp":
        out["project"] = cfg.project
    return out


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, StackConfig, dict[str, StackConfig]]]:
    stacks = write_example(tmp_path_factory.mktemp("vpn"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(config_stack, "_this_project", lambda: (stacks, "gpufleet"))
        hub = load_stack_file(str(stacks / "Pulumi.hub.yaml"))
        workers = {ref: load_stack_file(str(stacks / f"Pulumi.{ref.rsplit('/', 1)[-1]}.yaml"))
                   for ref in hub.hub.workers}
        yield stacks, hub, workers


def run_hub(stacks: Path, hub: StackConfig, workers: dict[str, StackConfig],
            override: dict[str, Any] | None = None) -> mockrun.RunResult:
    saved = dict(mockrun.STACK_REFERENCE_OUTPUTS)
    mockrun.STACK_REFERENCE_OUTPUTS.update({ref: fabricate(w, hub.hub.egress_cidrs) for ref, w in workers.items()})
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(config_stack, "_this_project", lambda: (stacks, "gpufleet"))
            return mockrun.run_stack(str(stacks / "Pulumi.hub.yaml"), config_override=override)
    finally:
        mockrun.STACK_REFERENCE_OUTPUTS.clear()
        mockrun.STACK_REFERENCE_OUTPUTS.update(saved)


@pytest.fixture(scope="module")
def vpn_run(example: tuple[Path, StackConfig, dict[str, StackConfig]]) -> mockrun.RunResult:
    return run_hub(*example)


def test_two_gcp_workers_share_one_gateway_on_the_hub_vpc(vpn_run: mockrun.RunResult) -> None:
    (vgw,) = vpn_run.of_type(VGW)
    assert (vgw.inputs["vpcId"], vgw.inputs["amazonSideAsn"]) == ("vpc-0123456789abcdef0", "64512")
    (propagation,) = vpn_run.of_type("aws:ec2/vpnGatewayRoutePropagation:VpnGatewayRoutePropagation")
    assert propagation.inputs == {"vpnGatewayId": f"{vgw.name}-id", "routeTableId": "rtb-0123456789abcdef0"}
    connections = vpn_run.of_type(CONNECTION)
    assert len(connections) == 2 * len(VPN_WORKERS)
    assert {c.inputs["vpnGatewayId"] for c in connections} == {f"{vgw.name}-id"}
    for ref in VPN_WORKERS:
        key = ko.worker_key(ref)
        mine = [t for t in vpn_run.of_type(TUNNEL) if t.name.startswith(f"gpufleet-hub-{key}-vpn-")]
        assert sorted((t.inputs["vpnGatewayInterface"], t.inputs["peerExternalGatewayInterface"]) for t in mine) \
            == [(0, 0), (0, 1), (1, 2), (1, 3)]
        peers = [p for p in vpn_run.of_type("gcp:compute/routerPeer:RouterPeer") if p.name.startswith(
            f"gpufleet-hub-{key}-vpn-")]
        assert {p.inputs["peerAsn"] for p in peers} == {64512} and len(peers) == 4


def test_one_phase1_and_one_phase2_algorithm_set_on_both_sides(vpn_run: mockrun.RunResult) -> None:
    for conn in vpn_run.of_type(CONNECTION):
        for t in (1, 2):
            assert conn.inputs[f"tunnel{t}IkeVersions"] == ["ikev2"]
            for phase in (1, 2):
                assert conn.inputs[f"tunnel{t}Phase{phase}EncryptionAlgorithms"] == ["AES256"]
                assert conn.inputs[f"tunnel{t}Phase{phase}IntegrityAlgorithms"] == ["SHA2-256"]
                assert conn.inputs[f"tunnel{t}Phase{phase}DhGroupNumbers"] == [14]
    for tunnel in vpn_run.of_type(TUNNEL):
        assert tunnel.inputs["ikeVersion"] == 2
        assert tunnel.inputs["cipherSuite"] == {
            "phase1": {"encryptions": ["AES-CBC-256"], "integrities": ["HMAC-SHA2-256-128"],
                       "prves": ["PRF-HMAC-SHA2-256"], "dhs": ["Group-14"]},
            "phase2": {"encryptions": ["AES-CBC-256"], "integrities": ["HMAC-SHA2-256-128"], "pfs": ["Group-14"]}}


def test_a_4_byte_google_asn_uses_the_extended_field(example: tuple[Path, StackConfig, dict[str, StackConfig]]
                                                     ) -> None:
    stacks, hub, workers = example
    vpn = {**documented("hub")["gpufleet:hub"]["vpn"], "googleAsn": 4200000001}
    section = {**yaml.safe_load((stacks / "Pulumi.hub.yaml").read_text())["config"]["gpufleet:hub"], "vpn": vpn}
    run = run_hub(stacks, hub, workers, override={"hub": section})
    cgws = run.of_type(CGW)
    assert len(cgws) == 2 * len(VPN_WORKERS)
    assert all(c.inputs.get("bgpAsnExtended") == "4200000001" and "bgpAsn" not in c.inputs for c in cgws)
    assert {r.inputs["bgp"]["asn"] for r in run.of_type("gcp:compute/router:Router")} == {4200000001}
    # A 2-byte ASN (the default 65534) stays in bgpAsn.
    assert {c.inputs.get("bgpAsn") for c in run_hub(stacks, hub, workers).of_type(CGW)} == {"65534"}


def test_an_existing_gateway_is_used_instead_of_created(example: tuple[Path, StackConfig, dict[str, StackConfig]]
                                                        ) -> None:
    stacks, hub, workers = example
    vpn = {**documented("hub")["gpufleet:hub"]["vpn"], "vpnGatewayId": "vgw-0a1b2c3d4e5f60789", "routeTableIds": []}
    section = {**yaml.safe_load((stacks / "Pulumi.hub.yaml").read_text())["config"]["gpufleet:hub"], "vpn": vpn}
    run = run_hub(stacks, hub, workers, override={"hub": section})
    assert run.of_type(VGW) == []
    assert {c.inputs["vpnGatewayId"] for c in run.of_type(CONNECTION)} == {"vgw-0a1b2c3d4e5f60789"}
    # The BGP peers use the existing gateway's own ASN, as EC2 describes it.
    assert {p.inputs["peerAsn"] for p in run.of_type("gcp:compute/routerPeer:RouterPeer")} == {64512}


def test_vpn_config_refusals() -> None:
    raw = {k.split(":", 1)[1]: v
           for k, v in yaml.safe_load((REPO / "stacks" / "Pulumi.hub.yaml").read_text())["config"].items()}
    good = {"vpcId": "vpc-0123456789abcdef0", "routeTableIds": ["rtb-0123456789abcdef0"], "workers": VPN_WORKERS}
    cases = [({**good, "vpnGatewayId": "vgw-x"}, "gpufleet:hub.vpn.vpnGatewayId"),
             ({**good, "vpnGatewayId": "vgw-0a1b2c3d4e5f60789", "amazonAsn": 64513}, "gpufleet:hub.vpn.amazonAsn")]
    many = [f"org/gpufleet/w{i}" for i in range(6)]
    cases.append(({**good, "workers": many}, "gpufleet:hub.vpn.workers"))
    for bad, key in cases:
        hub = {**raw["hub"], "workers": [*raw["hub"]["workers"], *(w for w in bad["workers"]
                                                                     if w not in raw["hub"]["workers"])], "vpn": bad}
        with pytest.raises(ConfigError) as err:
            parse({**raw, "hub": hub}, stack="hub")
        assert str(err.value).startswith(key + ": ") and "\n" not in str(err.value), str(err.value)


# ------------------------------------------------------------------------------------------- hub-reaches-workers


def test_the_documented_vpn_example_passes_hub_reaches_workers(vpn_run: mockrun.RunResult) -> None:
    assert check_hub_reachability(vpn_run.outputs) == []
    reach = vpn_run.outputs["reachability"]
    paths = {k: e["path"] for k, e in reach.items()}
    assert {k for k, p in paths.items() if p == "vpn"} == {ko.worker_key(r) for r in VPN_WORKERS}
    assert {p for k, p in paths.items() if k not in {ko.worker_key(r) for r in VPN_WORKERS}} == {"public"}
    assert vpn_run.outputs["vpnWorkers"] == sorted(ko.worker_key(r) for r in VPN_WORKERS)


def broken(outputs: dict[str, Any], worker: str, **changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(outputs)
    entry = out["reachability"][worker]
    for key, value in changes.items():
        part, _, field = key.partition("__")
        if field:
            entry[part][field] = value
        else:
            entry[part] = value
    return out


def test_each_broken_variant_fails_naming_the_worker_and_the_path(vpn_run: mockrun.RunResult) -> None:
    gcp, aws = ko.worker_key(VPN_WORKERS[0]), "aws-use1-p5"
    hub_range = "10.200.0.0/20"
    variants = {
        "public endpoint on": (gcp, "vpn", {"apiAccess__publicEndpoint": True}),
        "hub range not authorised": (gcp, "vpn", {"apiAccess__hubCidrs": []}),
        "enforcement off": (gcp, "vpn", {"apiAccess__privateEndpointEnforced": False}),
        "peered control plane": (gcp, "vpn", {"apiAccess__controlPlane": "peering"}),
        "no private egress": (gcp, "vpn", {"egressCidrs": ["203.0.113.10/32"]}),
        "no public egress": (aws, "public", {"egressCidrs": [hub_range]}),
        "public worker not authorised": (aws, "public", {"apiAccess__publicAccessCidrs": [],
                                                         "apiAccess__hubCidrs": []}),
        "no VPN built to it": (gcp, "vpn", {"vpn": False}),
    }
    for what, (worker, path, changes) in variants.items():
        found = check_hub_reachability(broken(vpn_run.outputs, worker, **changes))
        assert found, what
        assert all(v.resource == worker for v in found), (what, found)
        assert any(f"worker {worker} (path {path})" in v.message for v in found), (what, found)


def test_the_hub_refuses_a_vpn_its_worker_does_not_take(tmp_path: Path) -> None:
    """The hub's config and its worker stack files agree on each worker's path (checked when the hub loads)."""
    stacks = write_example(tmp_path)
    worker = stacks / "Pulumi.gcp-euw4-a3high.yaml"
    doc = yaml.safe_load(worker.read_text())
    doc["config"]["gpufleet:cluster"]["hubPrivateLink"] = "none"
    worker.write_text(yaml.safe_dump(doc))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(config_stack, "_this_project", lambda: (stacks, "gpufleet"))
        with pytest.raises(ConfigError, match=r"^gpufleet:hub\.workers\[4\]: gpufleet:hub\.vpn links worker stack "
                                              r"'gcp-euw4-a3high', whose gpufleet:cluster\.hubPrivateLink is none"):
            load_stack_file(str(stacks / "Pulumi.hub.yaml"))
    # A VPN path needs a private egress range on the hub.
    stacks = write_example(tmp_path / "public-only", hub_changes={"egressCidrs": ["203.0.113.10/32"]})
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(config_stack, "_this_project", lambda: (stacks, "gpufleet"))
        with pytest.raises(ConfigError, match=r"reached over a private link \(vpn\) but gpufleet:hub\.egressCidrs "
                                              r"lists no private range"):
            load_stack_file(str(stacks / "Pulumi.hub.yaml"))
