"""Stack config values the clouds refuse or silently drop, refused at parse time with one line naming the key:
EKS versions past standard support, API allow-lists, GCP reservations on pools that ignore them, GKE
maintenance recurrences."""

from __future__ import annotations

import copy
import datetime
import ipaddress
from pathlib import Path
from typing import Any

import pytest
import yaml

import infra.config.cluster as cluster_config
from infra.aws.autoscaler import RELEASES
from infra.config import ConfigError, load_stack_file, parse
from infra.config.cluster import EKS_API_SG_INBOUND_RULES, eks_versions

STACKS = Path(__file__).resolve().parents[2] / "stacks"
ISSUE_DAY = datetime.date(2026, 11, 26)


def stack_raw(name: str) -> dict[str, Any]:
    doc = yaml.safe_load((STACKS / f"Pulumi.{name}.yaml").read_text())
    return {k.split(":", 1)[1]: v for k, v in doc["config"].items() if k.startswith("gpufleet:")}


AWS = stack_raw("aws-use1-p5")
GCP = stack_raw("gcp-use4-a4")


def with_cluster(base: dict[str, Any], **cluster: Any) -> dict[str, Any]:
    raw = copy.deepcopy(base)
    raw.setdefault("cluster", {}).update(cluster)
    return raw


def refused(raw: dict[str, Any], key: str) -> str:
    with pytest.raises(ConfigError) as err:
        parse(raw, stack="t")
    message = str(err.value)
    assert message.startswith(f"gpufleet:{key}:"), message
    assert "\n" not in message and len(message) < 400, message
    return message


@pytest.fixture
def on_issue_day(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_config, "today", lambda: ISSUE_DAY)


# ------------------------------------------------------------------------------------- EKS versions

def test_a_version_past_standard_support_is_refused_with_its_date(on_issue_day: None) -> None:
    message = refused(with_cluster(AWS, kubernetesVersion="1.33"), "cluster.kubernetesVersion")
    assert "2026-07-29" in message and "STANDARD" in message and "1.35" in message


def test_a_version_is_refused_the_day_after_its_standard_support_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    end = eks_versions()["1.34"].standard_end
    monkeypatch.setattr(cluster_config, "today", lambda: end)
    assert parse(with_cluster(AWS, kubernetesVersion="1.34"), stack="t").cluster.kubernetes_version == "1.34"
    monkeypatch.setattr(cluster_config, "today", lambda: end + datetime.timedelta(days=1))
    assert end.isoformat() in refused(with_cluster(AWS, kubernetesVersion="1.34"), "cluster.kubernetesVersion")


def test_a_version_not_in_the_table_is_refused(on_issue_day: None) -> None:
    assert "eks_versions.yaml" in refused(with_cluster(AWS, kubernetesVersion="1.29"), "cluster.kubernetesVersion")


def test_gke_stacks_do_not_judge_the_eks_table(on_issue_day: None) -> None:
    parse(with_cluster(GCP, kubernetesVersion="1.33"), stack="t")


def test_default_and_example_stacks_are_in_standard_support_with_an_autoscaler(on_issue_day: None) -> None:
    table = eks_versions()
    versions = {parse({k: v for k, v in AWS.items() if k != "cluster"}, stack="t").cluster.kubernetes_version}
    versions |= {load_stack_file(str(p)).cluster.kubernetes_version for p in STACKS.glob("Pulumi.aws-*.yaml")}
    for version in versions:
        assert table[version].standard_end >= ISSUE_DAY, version
        assert version in RELEASES, version  # the autoscaler's image is matched to the minor
    for minor, row in table.items():
        assert row.released < row.standard_end < row.extended_end, minor
        if row.standard_end >= ISSUE_DAY:
            assert minor in RELEASES, f"{minor} is in standard support but has no Cluster Autoscaler release"


# ---------------------------------------------------------------------------------- API allow-lists

def cidrs(n: int, base: str = "10.200.0.0/16") -> list[str]:
    return [str(net) for net in list(ipaddress.ip_network(base).subnets(new_prefix=28))[:n]]


def test_hub_cidrs_beyond_the_security_group_rule_limit_are_refused() -> None:
    parse(with_cluster(AWS, hubCidrs=cidrs(EKS_API_SG_INBOUND_RULES)), stack="t")
    message = refused(with_cluster(AWS, hubCidrs=cidrs(1000)), "cluster.hubCidrs")
    assert "1000" in message and str(EKS_API_SG_INBOUND_RULES) in message


def test_hub_and_operator_cidrs_count_together_once_each() -> None:
    hub = cidrs(40)
    # Operator CIDRs already in hubCidrs are one rule, not two.
    parse(with_cluster(AWS, hubCidrs=hub, operatorCidrs=hub[:30] + cidrs(20, "10.210.0.0/16")), stack="t")
    refused(with_cluster(AWS, hubCidrs=hub, operatorCidrs=cidrs(21, "10.210.0.0/16")), "cluster.hubCidrs")
    refused(with_cluster(AWS, hubCidrs=[], operatorCidrs=cidrs(61, "10.210.0.0/16")), "cluster.operatorCidrs")


@pytest.mark.parametrize("base", [AWS, GCP], ids=["aws", "gcp"])
@pytest.mark.parametrize("cidr", ["::/0", "2001:db8::/32", "fd00::/8", "0.0.0.0/0"])
def test_public_access_cidrs_take_ipv4_ranges_short_of_the_whole_internet(base: dict[str, Any], cidr: str) -> None:
    refused(with_cluster(base, publicAccess=True, publicAccessCidrs=["203.0.113.0/24", cidr]),
            "cluster.publicAccessCidrs")
    parse(with_cluster(base, publicAccess=True, publicAccessCidrs=["203.0.113.0/24"]), stack="t")


# ----------------------------------------------------------------------------------- reservations

@pytest.mark.parametrize("capacity", ["SPOT", "ON_DEMAND"])
def test_a_reservation_on_a_gcp_pool_that_would_drop_it_is_refused(capacity: str) -> None:
    raw = copy.deepcopy(GCP)
    raw["nodePools"][0]["capacity"] = capacity
    message = refused(raw, "nodePools[0].reservation")
    assert "RESERVATION" in message


# ------------------------------------------------------------------------------ maintenance windows

def with_recurrence(rule: str) -> dict[str, Any]:
    raw = copy.deepcopy(GCP)
    raw["cluster"]["maintenance"]["window"]["recurrence"] = rule
    return raw


@pytest.mark.parametrize("rule", ["FREQ=NEVER;BYDAY=XX", "FREQ=WEEKLY;BYDAY=XX", "FREQ=WEEKLY;BYDAY=SA,XX",
                                  "FREQ=HOURLY", "FREQ=WEEKLY", "FREQ=DAILY;INTERVAL=2", "FREQ=WEEKLY;BYDAY=1SA",
                                  "FREQ=WEEKLY;BYSETPOS=1;BYDAY=SA", "FREQ=MONTHLY;BYSETPOS=0;BYDAY=SA",
                                  "BYDAY=SA", "FREQ=DAILY;FREQ=WEEKLY", "FREQ=DAILY;COUNT=3", "FREQ=DAILY;"])
def test_a_recurrence_gke_refuses_is_refused(rule: str) -> None:
    refused(with_recurrence(rule), "cluster.maintenance.window.recurrence")


@pytest.mark.parametrize("rule", ["FREQ=DAILY", "FREQ=WEEKLY;BYDAY=SA,SU", "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR",
                                  "FREQ=MONTHLY;BYSETPOS=1;BYDAY=SA,SU", "FREQ=MONTHLY;BYDAY=-1SU"])
def test_recurrences_gke_takes_parse(rule: str) -> None:
    cfg = parse(with_recurrence(rule), stack="t")
    assert cfg.cluster.maintenance.window_recurrence == rule
