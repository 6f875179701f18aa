"""The hub → worker path: disjoint address ranges (config), the hub's egress read by the worker (hubStack)."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
import yaml

from infra import mockrun
from infra.config import ConfigError, load_stack_file, parse, range_overlaps
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
