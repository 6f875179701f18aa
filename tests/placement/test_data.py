"""The shipped data (shapes, catalog, egress) checked against the public reference data in ../shared."""

from __future__ import annotations

import csv

import pytest

from placement.catalog import embedded_catalog, parse_skypilot_csv
from placement.egress import egress_book, transfer_rate
from placement.shapes import shape_book

REQUIRED = {
    "p4d.24xlarge",
    "p4de.24xlarge",
    "p5.48xlarge",
    "p5e.48xlarge",
    "p5en.48xlarge",
    "p6-b200.48xlarge",
    "g6e.48xlarge",
    "g6.48xlarge",
    "a2-highgpu-8g",
    "a2-ultragpu-8g",
    "a3-highgpu-8g",
    "a3-megagpu-8g",
    "a3-ultragpu-8g",
    "a4-highgpu-8g",
}


def test_every_required_shape_is_defined_with_quota_keys():
    book = shape_book()
    assert set(book.shapes) >= REQUIRED
    for s in book.shapes.values():
        assert s.quota.unit == ("vcpu" if s.cloud == "aws" else "gpu")
        assert s.quota.on_demand
        if s.cloud == "gcp":
            assert s.quota.spot == "PREEMPTIBLE_" + s.quota.on_demand
        if s.fabric == "efa":
            assert s.fabric_nics == s.network_cards >= 1
        if s.fabric in ("tcpx", "tcpxo"):
            assert s.gpu_vpcs == s.fabric_nics
        if s.fabric == "rdma":
            assert s.rdma_subnets == s.fabric_nics and s.gpu_vpcs == 1


def test_embedded_catalog_covers_eight_regions_per_cloud_and_known_shapes():
    cat = embedded_catalog()
    for cloud in ("aws", "gcp"):
        assert len({o.region for o in cat.offers if o.cloud == cloud}) >= 8
    assert {o.instance_type for o in cat.offers} >= REQUIRED
    assert cat.as_of >= "2026-01-01"


@pytest.mark.parametrize("cloud", ["aws", "gcp"])
def test_shapes_agree_with_public_catalog(shared_file, cloud):
    cat = parse_skypilot_csv(shared_file(f"catalog-snapshot/{cloud}_vms.csv").read_text(), cloud, "snapshot")
    book = shape_book()
    rows = {r["InstanceType"]: r for r in csv.DictReader(shared_file(f"catalog-snapshot/{cloud}_vms.csv").open())}
    checked = 0
    for name, shape in book.shapes.items():
        if shape.cloud != cloud or name not in rows:
            continue
        row = rows[name]
        assert shape.gpus == int(row["AcceleratorCount"]), name
        assert shape.vcpus == int(float(row["vCPUs"])), name
        assert shape.memory_gib == int(float(row["MemoryGiB"])), name
        assert shape.accelerator == book.canonical_accelerator(row["AcceleratorName"]), name
        checked += 1
    assert checked >= 10
    assert any(o.shape is book.get("p5.48xlarge") or o.shape is book.get("a3-megagpu-8g") for o in cat.offers)


def test_aws_inter_region_rates_match_public_transfer_matrix(shared_file):
    regions = {o.region for o in embedded_catalog().offers if o.cloud == "aws"}
    book = egress_book()
    compared = 0
    with shared_file("catalog-snapshot/aws_transfer_costs.csv").open() as fh:
        for row in csv.DictReader(fh):
            if row["src"] in regions and row["dst"] in regions:
                assert transfer_rate(book, "aws", row["src"], "aws", row["dst"]) == pytest.approx(float(row["cost"])), (
                    row
                )
                compared += 1
    assert compared > 100


def test_aws_internet_first_tier_matches_public_transfer_matrix(shared_file):
    regions = {o.region for o in embedded_catalog().offers if o.cloud == "aws"}
    aws = egress_book().aws
    with shared_file("catalog-snapshot/aws_transfer_costs.csv").open() as fh:
        for row in csv.DictReader(fh):
            if row["src"] in regions and row["dst"] == "internet":
                first = aws.internet_first_tier_by_source.get(row["src"], aws.internet_tiers[0][1])
                assert first == pytest.approx(float(row["cost"])), row["src"]
