"""The shipped data (shapes, catalog, egress) checked against the pinned public reference data in tests/data."""

from __future__ import annotations

import csv
import re
from importlib import resources

import pytest
import yaml

from placement.errors import InputError
from placement.model.catalog import embedded_catalog, parse_skypilot_csv
from placement.model.egress import egress_book, transfer_rate
from placement.model.shapes import parse_shapes, shape_book

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


def test_gcp_boot_disk_is_hyperdisk_on_a3_ultra_and_a4_only():
    book = shape_book()
    # A3 Ultra and A4 attach Hyperdisk only; a pd-balanced boot disk fails at node creation.
    for s in book.for_cloud("gcp"):
        series = s.name.rsplit("-", 1)[0]
        assert s.boot_disk == ("hyperdisk-balanced" if series in ("a3-ultragpu", "a4-highgpu") else "pd-balanced")


def test_unknown_boot_disk_is_rejected_naming_the_field():
    doc = yaml.safe_load(resources.files("placement.data").joinpath("shapes.yaml").read_text())
    row = next(r for r in doc["shapes"] if r["name"] == "a4-highgpu-8g")
    row["gcp"]["boot_disk"] = "pd-extreme"
    with pytest.raises(InputError) as err:
        parse_shapes(doc)
    assert "gcp.boot_disk" in err.value.field


def test_embedded_catalog_covers_eight_regions_per_cloud_and_known_shapes():
    cat = embedded_catalog()
    for cloud in ("aws", "gcp"):
        assert len({o.region for o in cat.offers if o.cloud == cloud}) >= 8
    assert {o.instance_type for o in cat.offers} >= REQUIRED
    assert cat.as_of >= "2026-01-01"


@pytest.mark.parametrize("cloud", ["aws", "gcp"])
def test_shapes_agree_with_public_catalog(data_file, cloud):
    cat = parse_skypilot_csv(data_file(f"catalog-snapshot/{cloud}_vms.csv").read_text(), cloud, "snapshot")
    book = shape_book()
    rows = {r["InstanceType"]: r for r in csv.DictReader(data_file(f"catalog-snapshot/{cloud}_vms.csv").open())}
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


def test_aws_inter_region_rates_match_public_transfer_matrix(data_file):
    regions = {o.region for o in embedded_catalog().offers if o.cloud == "aws"}
    book = egress_book()
    compared = 0
    with data_file("catalog-snapshot/aws_transfer_costs.csv").open() as fh:
        for row in csv.DictReader(fh):
            if row["src"] in regions and row["dst"] in regions:
                assert transfer_rate(book, "aws", row["src"], "aws", row["dst"]) == pytest.approx(float(row["cost"])), (
                    row
                )
                compared += 1
    assert compared > 100


def test_aws_internet_first_tier_matches_public_transfer_matrix(data_file):
    regions = {o.region for o in embedded_catalog().offers if o.cloud == "aws"}
    aws = egress_book().aws
    with data_file("catalog-snapshot/aws_transfer_costs.csv").open() as fh:
        for row in csv.DictReader(fh):
            if row["src"] in regions and row["dst"] == "internet":
                first = aws.internet_first_tier_by_source.get(row["src"], aws.internet_tiers[0][1])
                assert first == pytest.approx(float(row["cost"])), row["src"]


def test_every_accelerator_has_a_cited_speed_relative_to_h100():
    book = shape_book()
    assert book.accelerators() <= set(book.speeds)
    assert book.speeds["H100"] == 1.0
    for accel in book.accelerators():
        assert book.speeds[accel] > 0 and len(book.speed_sources[accel]) > 20, accel
    # the figures follow their cited basis: dense BF16 relative to H100's 989 TFLOPS
    assert book.speeds["A100"] == pytest.approx(312 / 989, abs=0.002)
    assert book.speeds["B200"] == pytest.approx(2250 / 989, abs=0.01)


@pytest.mark.parametrize(("change", "field"), [
    (lambda d: d["accelerators"].pop("L4"), "accelerators.L4"),
    (lambda d: d["accelerators"]["H100"].update(speed=1.1), "accelerators.H100.speed"),
    (lambda d: d["accelerators"]["A100"].update(speed=0), "accelerators.A100.speed"),
    (lambda d: d["accelerators"]["B200"].update(source=""), "accelerators.B200.source"),
])
def test_shape_data_speed_section_is_validated_at_load(change, field):
    import copy
    from importlib import resources

    import yaml

    from placement.errors import InputError
    from placement.model.shapes import parse_shapes

    doc = yaml.safe_load(resources.files("placement.data").joinpath("shapes.yaml").read_text())
    bad = copy.deepcopy(doc)
    change(bad)
    with pytest.raises(InputError) as err:
        parse_shapes(bad)
    assert err.value.field == field
    assert parse_shapes(doc).speeds  # the shipped file itself loads


def test_aws_regions_match_botocore_endpoint_data():
    import json
    import os

    botocore = pytest.importorskip("botocore")
    from placement.model.zones import known_regions

    with open(os.path.join(os.path.dirname(botocore.__file__), "data", "endpoints.json")) as fh:
        partitions = {p["partition"]: set(p["regions"]) for p in json.load(fh)["partitions"]}
    assert known_regions()["aws"] == partitions["aws"] | partitions["aws-cn"] | partitions["aws-us-gov"]


def test_every_catalog_region_is_a_known_region(data_file):
    from placement.model.zones import known_regions

    regions = known_regions()
    for o in embedded_catalog().offers:
        assert o.region in regions[o.cloud], (o.cloud, o.region)
    for cloud in ("aws", "gcp"):
        with data_file(f"catalog-snapshot/{cloud}_vms.csv").open() as fh:
            assert {r["Region"] for r in csv.DictReader(fh)} <= regions[cloud]
    assert not regions["aws"] & regions["gcp"]


def test_known_quota_keys_cover_the_public_reference_lists(data_file):
    book = shape_book()
    with data_file("reference/aws_ec2_gpu_quota_codes.csv").open() as fh:
        for row in csv.DictReader(fh):
            assert book.known_quota_key("aws", row["quota_code"]), row["quota_code"]
    # machine_types holds unquoted brace lists (a2-highgpu-{1,2,4,8}g): take the metric names themselves
    metrics = set(re.findall(r"\b(?:PREEMPTIBLE_|COMMITTED_)?NVIDIA_\w+?_GPUS\b|\bGPUS_ALL_REGIONS\b",
                             data_file("reference/gcp_gpu_quota_metrics.csv").read_text()))
    assert len(metrics) > 30
    for metric in metrics:
        assert book.known_quota_key("gcp", metric), metric
    assert not book.known_quota_key("aws", "NVIDIA_H100_GPUS") and not book.known_quota_key("gcp", "L-417A185B")


def test_local_and_wavelength_zones_are_recognised():
    from placement.model.zones import needs_opt_in, zone_kind

    assert zone_kind("aws", "use1-atl2-az1") == zone_kind("aws", "us-east-1-atl-2a") == "local-zone"
    assert zone_kind("aws", "use1-wl1-bos-wlz1") == zone_kind("aws", "us-east-1-wl1-bos-wlz-1") == "wavelength-zone"
    for regular in ("use1-az1", "us-east-1a", "apne1-az4", "us-gov-west-1a"):
        assert not needs_opt_in("aws", regular), regular
    assert not needs_opt_in("gcp", "us-central1-a")
    # the public catalog does list Local Zone rows: they are what the opt-in keeps out
    assert any(needs_opt_in(o.cloud, o.zone) for o in embedded_catalog().offers)
