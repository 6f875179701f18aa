"""The hub → worker path: disjoint address ranges (config), the hub's egress read by the worker (hubStack)."""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
from collections.abc import Iterator
from pathlib import Path

import pulumi
import pytest
import yaml

from infra import mockrun
from infra.config import ConfigError, load_stack_file, parse
from infra.config.stack import range_overlaps
from infra.hub_link import egress_cidrs, with_hub_egress
from infra.outputs import public_endpoint_cidrs

REPO = Path(__file__).resolve().parents[2]
STACKS = REPO / "stacks"


def stacks_copy(tmp_path: Path, **edits: dict[str, str]) -> Path:
    """The example stacks under ``tmp_path``, ``edits`` merged into ``gpufleet:network`` of the named stacks."""
    out = tmp_path / "stacks"
    shutil.copytree(STACKS, out)
    for stack, network in edits.items():
        path = out / f"Pulumi.{stack}.yaml"
        doc = yaml.safe_load(path.read_text())
        doc["config"]["gpufleet:network"].update(network)
        path.write_text(yaml.safe_dump(doc))
    return out


def test_hub_refuses_workers_whose_ranges_overlap_naming_both(tmp_path: Path) -> None:
    """Issue 20: aws-use1-p5's 10.0.0.0/16 held gcp-usc1-a3mega's primary subnet 10.0.0.0/20."""
    stacks = stacks_copy(tmp_path, **{"gcp-usc1-a3mega": {"vpcCidr": "10.0.0.0/20"}})
    with pytest.raises(ConfigError) as err:
        load_stack_file(str(stacks / "Pulumi.hub.yaml"))
    message = str(err.value)
    assert message.startswith("gpufleet:hub.workers[3]: ") and "\n" not in message
    assert "10.0.0.0/20 (gpufleet:network.vpcCidr of stack gcp-usc1-a3mega)" in message
    assert "10.0.0.0/16 (gpufleet:network.vpcCidr of stack aws-use1-p5)" in message
    # GKE pods ranges are routed in the VPC too.
    stacks = stacks_copy(tmp_path / "pods", **{"gcp-euw4-a3high": {"podsCidr": "10.64.0.0/14"}})
    with pytest.raises(ConfigError, match=r"10\.64\.0\.0/14 \(gpufleet:network\.podsCidr of stack gcp-euw4-a3high\)"):
        load_stack_file(str(stacks / "Pulumi.hub.yaml"))


def test_a_private_hub_egress_range_counts_and_service_ranges_do_not() -> None:
    hub = load_stack_file(str(STACKS / "Pulumi.hub.yaml"))
    worker = load_stack_file(str(STACKS / "Pulumi.aws-use1-p5.yaml"))
    private_hub = dataclasses.replace(hub, hub=dataclasses.replace(hub.hub, egress_cidrs=("10.0.16.0/20",)))
    (line,) = range_overlaps({"hub": private_hub, "aws-use1-p5": worker})
    assert "10.0.0.0/16 (gpufleet:network.vpcCidr of stack aws-use1-p5)" in line
    assert "10.0.16.0/20 (gpufleet:hub.egressCidrs[0] of stack hub)" in line
    # Every AWS example shares the EKS service range: virtual, never routed between networks.
    workers = {s: load_stack_file(str(STACKS / f"Pulumi.{s}.yaml")) for s in ("aws-use1-p5", "aws-usw2-p4d")}
    assert len({w.network.services_cidr for w in workers.values()}) == 1
    assert range_overlaps(workers) == []


def test_worker_authorises_what_its_hub_exports() -> None:
    worker = load_stack_file(str(STACKS / "Pulumi.aws-use1-p5.yaml"))
    linked, warnings = with_hub_egress(worker, ("203.0.113.10/32",))
    assert warnings == [] and linked.cluster.hub_cidrs == ("203.0.113.10/32",)
    assert public_endpoint_cidrs(linked) == ["203.0.113.10/32"] and linked.cluster.public_access
    # No output yet (workers come up before the hub): nothing is opened, and EKS never sees an empty allow-list,
    # which it would read as the whole internet.
    unlinked, warnings = with_hub_egress(worker, None)
    assert not unlinked.cluster.public_access and unlinked.cluster.hub_cidrs == ()
    assert any("exports no egressCidrs yet" in w for w in warnings)
    assert any("public API endpoint stays off" in w for w in warnings)
    # A hub that egresses privately is warned about: only a VPN or peering carries that.
    _, warnings = with_hub_egress(worker, ("10.200.0.0/20",))
    assert any("private ranges only" in w for w in warnings)


def test_hub_output_never_opens_the_world() -> None:
    assert egress_cidrs(["203.0.113.7", "0.0.0.0/0", "::/0", "fd00::/8", "nonsense", "203.0.113.7/32"]) == (
        "203.0.113.7/32",)
    assert egress_cidrs(None) is None and egress_cidrs("203.0.113.7/32") is None


def test_worker_program_reads_the_hub_stack_under_mocks() -> None:
    hub_egress = list(load_stack_file(str(STACKS / "Pulumi.hub.yaml")).hub.egress_cidrs)
    saved = dict(mockrun.STACK_REFERENCE_OUTPUTS)
    mockrun.STACK_REFERENCE_OUTPUTS["org/gpufleet/hub"] = {"egressCidrs": ["198.51.100.20/32"]}
    try:
        run = mockrun.run_stack(str(STACKS / "Pulumi.aws-usw2-p4d.yaml"))
    finally:
        mockrun.STACK_REFERENCE_OUTPUTS.clear()
        mockrun.STACK_REFERENCE_OUTPUTS.update(saved)
    (ref,) = run.of_type("pulumi:pulumi:StackReference")
    assert ref.inputs["name"] == "org/gpufleet/hub"
    (eks,) = run.of_type("aws:eks/cluster:Cluster")
    # What the hub stack exports now, not what its file said.
    assert eks.inputs["vpcConfig"]["publicAccessCidrs"] == ["198.51.100.20/32"] != hub_egress
    assert run.outputs["hubLink"] == {"hubStack": "org/gpufleet/hub", "privateLink": "none", "addressRanges": [
        {"key": "gpufleet:network.vpcCidr", "cidr": "10.1.0.0/16"}]}


def test_hub_stack_and_private_link_are_checked() -> None:
    base = yaml.safe_load((STACKS / "Pulumi.aws-usw2-p4d.yaml").read_text())["config"]
    raw = {k.split(":", 1)[1]: v for k, v in base.items()}
    for cluster, key in (({"hubStack": "hub"}, "gpufleet:cluster.hubStack"),
                         ({"hubStack": "org/gpufleet/hub", "hubPrivateLink": "vpn"}, "gpufleet:cluster.hubPrivateLink"),
                         ({"publicAccess": True}, "gpufleet:cluster.publicAccessCidrs")):
        with pytest.raises(ConfigError) as err:
            parse({**raw, "cluster": cluster}, stack="t")
        assert str(err.value).startswith(key + ": ") and "\n" not in str(err.value)
    cfg = parse({**raw, "cluster": {"publicAccess": False, "hubStack": "org/gpufleet/hub",
                                    "hubPrivateLink": "external"}}, stack="t")
    assert (cfg.cluster.hub_stack, cfg.cluster.hub_private_link) == ("org/gpufleet/hub", "external")
    # Issue 28: a private path with the public endpoint on carries nothing (the hub dials the public endpoint).
    with pytest.raises(ConfigError, match=r"^gpufleet:cluster\.publicAccess: must be false with hubPrivateLink"):
        parse({**raw, "cluster": {"publicAccess": True, "hubStack": "org/gpufleet/hub",
                                  "hubPrivateLink": "external"}}, stack="t")


# ------------------------------------------------------------------------------------------- issue 28


@contextlib.contextmanager
def hub_outputs(stack: str, outputs: dict[str, object]) -> Iterator[None]:
    saved = dict(mockrun.STACK_REFERENCE_OUTPUTS)
    mockrun.STACK_REFERENCE_OUTPUTS[stack] = outputs
    try:
        yield
    finally:
        mockrun.STACK_REFERENCE_OUTPUTS.clear()
        mockrun.STACK_REFERENCE_OUTPUTS.update(saved)


def failed_run(monkeypatch: pytest.MonkeyPatch, stack_file: str, **override: object) -> tuple[str, list[str]]:
    """The one-line error of a stack program that must fail, and the types it registered before failing."""
    runs: list[mockrun.RunResult] = []

    class Capturing(mockrun.RunResult):
        def __init__(self) -> None:
            super().__init__()
            runs.append(self)

    monkeypatch.setattr(mockrun, "RunResult", Capturing)
    with pytest.raises(pulumi.RunError) as err:
        mockrun.run_stack(stack_file, config_override=dict(override))
    message = str(err.value)
    assert message.startswith("invalid stack config: gpufleet:") and "\n" not in message, message
    return message, [r.type for r in runs[-1].resources]


AWS_WORKER = str(STACKS / "Pulumi.aws-usw2-p4d.yaml")
GCP_WORKER = str(STACKS / "Pulumi.gcp-usc1-a3mega.yaml")
HUB = {"role": "hub", "egressCidrs": ["203.0.113.10/32"], "vpnWorkers": [], "workerRanges": {}}


def test_61_hub_ranges_are_refused_at_the_worker_before_anything_is_declared(monkeypatch: pytest.MonkeyPatch
                                                                             ) -> None:
    egress = [f"198.51.100.{i}/32" for i in range(61)]
    with hub_outputs("org/gpufleet/hub", {**HUB, "egressCidrs": egress}):
        message, registered = failed_run(monkeypatch, AWS_WORKER)
    assert "gpufleet:cluster.hubStack: " in message and "61 inbound rules" in message
    assert registered == ["pulumi:pulumi:StackReference"]  # only the reference the check needs


def test_overlapping_workers_are_refused_at_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    other = {"aws-use1-p5": [{"key": "gpufleet:network.vpcCidr", "cidr": "10.1.128.0/17"}],
             "aws-usw2-p4d": [{"key": "gpufleet:network.vpcCidr", "cidr": "10.1.0.0/16"}]}  # itself: not compared
    with hub_outputs("org/gpufleet/hub", {**HUB, "workerRanges": other}):
        message, registered = failed_run(monkeypatch, AWS_WORKER)
    assert message.startswith("invalid stack config: gpufleet:network.vpcCidr: 10.1.0.0/16 overlaps 10.1.128.0/17")
    assert "worker stack aws-use1-p5" in message and registered == ["pulumi:pulumi:StackReference"]


def test_a_worker_stack_as_hub_stack_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # In this project: the stack file says it is a worker; refused before the reference is registered.
    message, registered = failed_run(monkeypatch, AWS_WORKER, cluster={
        "publicAccess": True, "hubStack": "org/gpufleet/aws-use1-p5"})
    assert "gpufleet:cluster.hubStack: names stack 'aws-use1-p5'" in message and registered == []
    # Another project's stack: its exported role says so.
    with hub_outputs("acme/other/trainer", {"role": "worker"}):
        message, registered = failed_run(monkeypatch, AWS_WORKER, cluster={
            "publicAccess": True, "hubStack": "acme/other/trainer"})
    assert "gpufleet:cluster.hubStack: names stack acme/other/trainer" in message
    assert registered == ["pulumi:pulumi:StackReference"]


def test_the_halves_of_the_internet_are_refused() -> None:
    base = yaml.safe_load((STACKS / "Pulumi.aws-usw2-p4d.yaml").read_text())["config"]
    raw = {k.split(":", 1)[1]: v for k, v in base.items()}
    halves = ["0.0.0.0/1", "128.0.0.0/1"]
    with pytest.raises(ConfigError) as err:
        parse({**raw, "cluster": {"publicAccess": True, "publicAccessCidrs": halves}}, stack="t")
    assert str(err.value).startswith("gpufleet:cluster.publicAccessCidrs: together cover 4,294,967,296 public "
                                     "addresses (0.0.0.0/0)")
    hub = yaml.safe_load((STACKS / "Pulumi.hub.yaml").read_text())["config"]
    raw_hub = {k.split(":", 1)[1]: v for k, v in hub.items()}
    with pytest.raises(ConfigError, match=r"^gpufleet:hub\.egressCidrs: together cover .*more than a /8"):
        parse({**raw_hub, "hub": {**raw_hub["hub"], "egressCidrs": ["11.0.0.0/8", "12.0.0.0/16"]}}, stack="hub")
    # A /8 is the most one list may open; private ranges do not count.
    parse({**raw_hub, "hub": {**raw_hub["hub"], "egressCidrs": ["11.0.0.0/8", "10.0.0.0/8"]}}, stack="hub")


def test_hub_egress_halves_are_refused_at_the_worker_too(monkeypatch: pytest.MonkeyPatch) -> None:
    with hub_outputs("org/gpufleet/hub", {**HUB, "egressCidrs": ["0.0.0.0/1", "128.0.0.0/1"]}):
        message, registered = failed_run(monkeypatch, AWS_WORKER)
    assert "together cover" in message and "0.0.0.0/0" in message and registered == ["pulumi:pulumi:StackReference"]


def test_gcp_reservation_names_and_ranges_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    base = yaml.safe_load((STACKS / "Pulumi.gcp-use4-a4.yaml").read_text())["config"]
    raw = {k.split(":", 1)[1]: v for k, v in base.items()}
    pool = raw["nodePools"][0]
    for good in ("a4-b200-block-1", "projects/owner-proj/reservations/a4-b200",
                 "projects/owner-proj/reservations/a4-b200/reservationBlocks/block-7"):
        parse({**raw, "nodePools": [{**pool, "reservation": good}]}, stack="t")
    for bad in ("My Reservation!", "1abc", "a" * 64, "ends-", "projects/x/reservations/Bad"):
        with pytest.raises(ConfigError, match=r"^gpufleet:nodePools\[0\]\.reservation: .*not a Compute Engine"):
            parse({**raw, "nodePools": [{**pool, "reservation": bad}]}, stack="t")
    for network, key in (({"podsCidr": raw["network"]["vpcCidr"]}, "podsCidr"),
                         ({"servicesCidr": raw["network"]["podsCidr"]}, "servicesCidr")):
        with pytest.raises(ConfigError, match=rf"^gpufleet:network\.{key}: .* overlaps"):
            parse({**raw, "network": {**raw["network"], **network}}, stack="t")
    # Under the program: nothing is declared, not even the hub's StackReference.
    message, registered = failed_run(monkeypatch, GCP_WORKER, nodePools=[
        {**yaml.safe_load(Path(GCP_WORKER).read_text())["config"]["gpufleet:nodePools"][0],
         "capacity": "RESERVATION", "reservation": "My Reservation!"}])
    assert "reservation" in message and registered == []


def test_config_errors_register_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    for override in ({"cluster": {"publicAccess": True, "publicAccessCidrs": ["0.0.0.0/1", "128.0.0.0/1"],
                                  "hubStack": "org/gpufleet/hub"}},
                     {"network": {"vpcCidr": "10.1.0.0/16", "servicesCidr": "10.1.0.0/20"}}):
        _, registered = failed_run(monkeypatch, AWS_WORKER, **override)
        assert registered == [], override


def test_a_vpn_worker_authorises_the_hubs_private_range_on_an_enforced_private_endpoint() -> None:
    egress = ["203.0.113.10/32", "10.200.0.0/20"]
    with hub_outputs("org/gpufleet/hub", {**HUB, "egressCidrs": egress, "vpnWorkers": ["gcp-usc1-a3mega"]}):
        run = mockrun.run_stack(GCP_WORKER, config_override={"cluster": {
            "publicAccess": False, "hubStack": "org/gpufleet/hub", "hubPrivateLink": "vpn"}})
    (gke,) = run.of_type("gcp:container/cluster:Cluster")
    networks = gke.inputs["masterAuthorizedNetworksConfig"]
    assert [c["cidrBlock"] for c in networks["cidrBlocks"] if c["displayName"].startswith("hub-")] == ["10.200.0.0/20"]
    assert networks["privateEndpointEnforcementEnabled"] is True
    assert gke.inputs["privateClusterConfig"]["enablePrivateEndpoint"] is True
    assert run.outputs["apiAccess"]["controlPlane"] == "psc"
    assert run.outputs["apiAccess"]["privateEndpointEnforced"] is True
    # A hub that builds no VPN to it: refused at the worker.
    with hub_outputs("org/gpufleet/hub", {**HUB, "egressCidrs": egress, "vpnWorkers": []}), \
            pytest.raises(pulumi.RunError, match=r"gpufleet:cluster\.hubPrivateLink: is vpn but hub stack"):
            mockrun.run_stack(GCP_WORKER, config_override={"cluster": {
                "publicAccess": False, "hubStack": "org/gpufleet/hub", "hubPrivateLink": "vpn"}})
