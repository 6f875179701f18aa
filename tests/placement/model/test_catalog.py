"""Catalog parsing: every number finite, counts positive, prices non-negative, rows of the declared cloud."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from placement.errors import InputError
from placement.model.catalog import embedded_catalog, parse_catalog_json, parse_skypilot_csv

HEAD = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,AvailabilityZone\n"
P5 = "p5.48xlarge,H100,8,192,2048,98.32,40.1,us-east-1,use1-az4\n"
ADHOC = "g9.2xlarge,L4,1,8,32,1.2,0.5,us-east-1,use1-az4\n"
A3 = "a3-highgpu-8g,H100,8,208,1872,88.2,30.1,us-central1,us-central1-a\n"


def refused(text: str, cloud: str = "aws") -> str:
    with pytest.raises(InputError) as err:
        parse_skypilot_csv(HEAD + text, cloud, source="c.csv")
    return str(err.value)


@pytest.mark.parametrize("value", ["inf", "Infinity", "1e999", "nan", "-1", "1e308", "2000000"])
@pytest.mark.parametrize("column", ["Price", "SpotPrice"])
def test_prices_are_finite_and_not_negative(column, value):
    row = P5.replace("98.32" if column == "Price" else "40.1", value)
    assert refused(row).startswith(f"c.csv: {column} (line 2): must be")


@pytest.mark.parametrize("value", ["0", "-8", "0.5", "inf", "nan", "1e999", "x"])
@pytest.mark.parametrize("column", ["AcceleratorCount", "vCPUs"])
def test_counts_are_positive_whole_numbers(column, value):
    parts = ADHOC.strip().split(",")
    parts[2 if column == "AcceleratorCount" else 3] = value
    message = refused(",".join(parts) + "\n")
    assert message.startswith(f"c.csv: {column} (line 2): ")
    assert "must be" in message or "fractional-GPU instance" in message


def test_memory_is_finite():
    assert "MemoryGiB (line 2)" in refused(ADHOC.replace(",32,", ",inf,"))


def test_a_known_shape_with_another_gpu_count_is_refused():
    assert "has 8 GPUs per node" in refused(P5.replace(",8,192", ",4,192"))


def test_gcp_rows_given_as_aws_are_refused_row_named():
    message = refused(A3, "aws")
    assert message.startswith("c.csv: InstanceType (line 2)") and "gcp" in message
    adhoc_gcp = "g2-standard-4,L4,1,4,16,0.7,0.3,us-central1,us-central1-a\n"
    assert "machine type of GCP" in refused(adhoc_gcp, "aws")
    assert "Region (line 2)" in refused("g9.2xlarge,L4,1,8,32,1.2,0.5,us-central1,us-central1-a\n", "aws")
    assert "InstanceType (line 2)" in refused(P5, "gcp")


@pytest.mark.parametrize("zone", ["use2-az1", "us-east-2a", "us-central1-a", "use1-az4\n"])
def test_a_zone_of_another_region_is_refused(zone):
    assert "AvailabilityZone (line 2)" in refused(P5.replace("use1-az4", zone.strip() + ("x" if "\n" in zone else "")))


@pytest.mark.parametrize("zone", ["use1-az4", "us-east-1a", "use1-atl2-az1", "us-east-1-atl-2a", "us-east-1"])
def test_zone_ids_names_local_zones_and_region_rows_are_accepted(zone):
    cat = parse_skypilot_csv(HEAD + P5.replace("use1-az4", zone), "aws", source="c.csv")
    assert cat.offers[0].zone == zone


def test_duplicate_rows_different_prices_refused_same_prices_warned_and_kept_once():
    assert "listed twice with different prices" in refused(P5 + P5.replace("98.32", "90"))
    cat = parse_skypilot_csv(HEAD + P5 + P5, "aws", source="c.csv")
    assert len(cat.offers) == 1 and len(cat.warnings) == 1 and "listed twice" in cat.warnings[0]


def test_duplicate_columns_are_refused():
    with pytest.raises(InputError, match="'Price': column appears twice"):
        parse_skypilot_csv(HEAD.replace("\n", ",Price\n") + P5.replace("\n", ",1\n"), "aws", source="c.csv")


def test_the_embedded_catalog_passes_the_same_checks():
    text = resources.files("placement.data").joinpath("catalog.json").read_text(encoding="utf-8")
    assert len(parse_catalog_json(json.loads(text), "embedded").offers) == len(embedded_catalog().offers) > 0


def _doc(**row):
    base = {"cloud": "aws", "region": "us-east-1", "zone": "use1-az4", "instance_type": "p5.48xlarge",
            "price": 98.3, "spot_price": None}
    return {"schema": "gpufleet.catalog/v1", "offers": [{**base, **row}]}


@pytest.mark.parametrize("row, field", [
    ({"price": float("inf")}, "offers[0].price"), ({"spot_price": -1}, "offers[0].spot_price"),
    ({"price": True}, "offers[0].price"), ({"zone": "usw2-az1"}, "offers[0].zone"),
    ({"region": "us-central1", "zone": "us-central1-a"}, "offers[0].region"), ({"zone": 5}, "offers[0].zone"),
])
def test_catalog_json_rows_are_checked_like_csv_rows(row, field):
    with pytest.raises(InputError, match=f"^x: {field.replace('[', '.').replace(']', '.')}"):
        parse_catalog_json(_doc(**row), "x")


def test_malformed_csv_is_an_input_error_naming_the_line():
    with pytest.raises(InputError, match=r"^c.csv: line 2: is not valid CSV \(field larger than field limit"):
        parse_skypilot_csv(HEAD + P5.replace("98.32", '"' + "9" * 200_000 + '"'), "aws", source="c.csv")
    with pytest.raises(InputError, match=r"^c.csv: line 2: has more cells than the header's 9"):
        parse_skypilot_csv(HEAD + P5.replace("\n", ",extra\n"), "aws", source="c.csv")


def test_a_byte_order_mark_from_a_spreadsheet_is_ignored():
    assert len(parse_skypilot_csv("\ufeff" + HEAD + P5, "aws", source="c.csv").offers) == 1


# ----------------------------------------------------------------------------- remembered row checks


def test_rows_repeating_a_checked_machine_or_place_are_still_checked_in_full():
    # The first row checks p5.48xlarge and use1-az4; later rows reuse those results and each of their own
    # cells is still refused where it is wrong, naming its line.
    assert refused(P5 + P5.replace(",8,192", ",4,192")).startswith("c.csv: AcceleratorCount (line 3)")
    assert refused(P5 + P5.replace("use1-az4", "use2-az1")).startswith("c.csv: AvailabilityZone (line 3)")
    assert refused(P5 + P5.replace("98.32", "-1")).startswith("c.csv: Price (line 3)")
    assert refused(P5 + P5.replace("40.1", "nan")).startswith("c.csv: SpotPrice (line 3)")
    assert refused(ADHOC + ADHOC.replace("L4,1,", "L4,2,")).startswith("c.csv: AcceleratorCount (line 3)")
    assert "listed twice with different prices" in refused(P5 + P5.replace("98.32", "99"))


def test_blank_and_spaced_cells_read_as_before():
    rows = (P5.replace("40.1", " ") + "\n" + "m5.large, ,0,2,8,0.1,,us-east-1,use1-az4\n"
            + " p5.48xlarge ,H100, 8 ,192,2048, 98.32 ,,us-east-1,use1-az6\n")
    cat = parse_skypilot_csv(HEAD + rows, "aws", source="c.csv")
    assert [(o.instance_type, o.zone, o.price, o.spot_price) for o in cat.offers] == [
        ("p5.48xlarge", "use1-az4", 98.32, None), ("p5.48xlarge", "use1-az6", 98.32, None)]


def test_a_short_row_reads_its_missing_cells_as_blank():
    assert refused("g9.2xlarge,L4,1\n").startswith("c.csv: Region (line 2): is blank")


def test_an_unclosed_quote_is_named_at_the_line_it_opens():
    message = refused(P5 + 'p5.48xlarge,H100,8,192,2048,"98.32,40.1,us-east-1,use1-az6\n' + P5)
    assert message.startswith("c.csv: line 3: a quoted cell runs on to line 4") and "close the quote" in message



# ----------------------------------------------------------------------------- prices and their sources (issue 36)


def _embedded_doc() -> dict:
    return json.loads(resources.files("placement.data").joinpath("catalog.json").read_text(encoding="utf-8"))


def test_every_embedded_row_names_its_source_and_date():
    doc = _embedded_doc()
    refs = doc["row_sources"]
    for i, row in enumerate(doc["offers"]):
        assert row.get("source") in refs, f"offers[{i}] names no source of row_sources"
        assert len(row.get("as_of", "")) == 10, f"offers[{i}] has no date"
    for ref, text in refs.items():
        assert "20" in text and ("commit" in text or "API" in text), f"row source {ref} says neither when nor what"
    flagged = [o for o in embedded_catalog().offers if o.price_flag]
    assert flagged and all(o.price_ref == "gcp-skypilot" for o in flagged)  # only the unverified ones


# Billing-catalogue prices (Cloud Billing Catalog, 2026-07-30; issue 36's figures), USD per node-hour.
BILLING = {("a3-highgpu-8g", "us-central1"): 88.49, ("a3-highgpu-8g", "asia-northeast1"): 126.64,
           ("a3-megagpu-8g", "us-east5"): 94.07, ("a2-ultragpu-8g", "us-central1"): 40.55,
           ("a2-highgpu-8g", "europe-west4"): 29.98}


@pytest.mark.parametrize("machine, region", sorted(BILLING))
def test_gcp_prices_are_the_billing_catalogues_gpus_included(machine, region):
    prices = {o.price for o in embedded_catalog().offers if (o.instance_type, o.region) == (machine, region)}
    assert len(prices) == 1 and abs(prices.pop() / BILLING[(machine, region)] - 1) < 0.01


def test_the_embedded_catalog_is_internally_consistent():
    from placement.model.catalog import machine_medians, price_problem

    offers = embedded_catalog().offers
    medians = machine_medians(offers)
    assert [o for o in offers if not o.price_flag and price_problem(o, medians.get((o.cloud, o.instance_type)))] == []


def _two_regions(**row):
    rows = [{"cloud": "gcp", "region": r, "zone": f"{r}-a", "instance_type": "a3-highgpu-8g", "price": p,
             "spot_price": s} for r, p, s in (("us-east4", 88.56, 36.3), ("europe-west4", 112.54, 44.1),
                                              ("us-central1", 88.49, 50.6))]
    rows[2].update(row)
    return {"schema": "gpufleet.catalog/v1", "offers": rows}


@pytest.mark.parametrize("row, problem", [({"price": 43.07, "spot_price": 47.87}, "spot $47.87/h is above on-demand"),
                                          ({"price": 43.07, "spot_price": 20.0}, "0.49x the median $88.56/h"),
                                          ({"price": 200.0}, "1.78x the median $112.5/h")])
def test_the_embedded_check_refuses_a_suspect_row_without_a_flag(row, problem):
    with pytest.raises(InputError) as err:
        parse_catalog_json(_two_regions(**row), "embedded")
    assert str(err.value).startswith("embedded: offers[2]: gcp a3-highgpu-8g in us-central1-a: ")
    assert problem in str(err.value) and "give the row a flag" in str(err.value)
    flagged = parse_catalog_json(_two_regions(**row, flag="unverified: a test row"), "embedded")
    assert flagged.offers[2].price_flag == "unverified: a test row"


def test_a_refreshed_catalog_from_before_the_check_is_flagged_not_refused():
    cat = parse_catalog_json(_two_regions(price=43.07, spot_price=20.0), "refresh")
    assert cat.offers[2].price_flag.startswith("flagged on load: on-demand $43.07/h is 0.49x")
    assert [o.price_flag for o in cat.offers[:2]] == [None, None]


def test_a_row_naming_a_source_the_document_does_not_list_is_refused():
    doc = _two_regions(source="nowhere")
    doc["row_sources"] = {"gcp-billing": "the Cloud Billing Catalog, 2026-07-30"}
    with pytest.raises(InputError, match=r"offers\[2\]\.source: 'nowhere' is not an id of row_sources"):
        parse_catalog_json(doc, "x")


def test_new_offer_is_the_offer_the_dataclass_builds() -> None:
    """new_offer keeps only the six given fields in the instance and reads the others from the class: every
    default of Offer must stay a plain class attribute (no default_factory), and the result the same offer."""
    import dataclasses

    from placement.model.catalog import Offer, new_offer
    from placement.model.shapes import shape_book

    shape = shape_book().shapes["p5.48xlarge"]
    fast, slow = new_offer("aws", "us-east-1", "us-east-1a", shape, 98.32, None), Offer(
        "aws", "us-east-1", "us-east-1a", shape, 98.32, None)
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    assert dataclasses.asdict(fast) == dataclasses.asdict(slow)
    for f in dataclasses.fields(Offer):
        assert getattr(fast, f.name) == getattr(slow, f.name)
        if f.name not in ("cloud", "region", "zone", "shape", "price", "spot_price"):
            assert f.default_factory is dataclasses.MISSING and Offer.__dict__[f.name] == f.default
    assert dataclasses.replace(fast, price=1.0) == dataclasses.replace(slow, price=1.0)
