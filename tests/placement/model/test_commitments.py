"""placement/data/commitments.yaml: every figure names its source and date, the issue's figures where they apply,
and how a rates row refines a term."""

from __future__ import annotations

import datetime as dt
from importlib import resources

import pytest
import yaml

from placement.errors import InputError
from placement.model.commitments import commitment_book, with_rates


def _doc() -> dict:
    return yaml.safe_load(resources.files("placement.data").joinpath("commitments.yaml").read_text())


def test_every_term_and_rate_row_names_its_source_its_date_and_whether_it_was_read_there():
    doc = _doc()
    for row in [*doc["terms"], *doc["rates"]]:
        name = row.get("id") or f"{row['term']} {row['instance_type']}"
        assert row.get("source"), name
        assert "verified" in row, f"{name}: say whether the figure was read at its source"
        date = row.get("date")
        assert date, name
        dt.date.fromisoformat(str(date))
        if not row["verified"]:
            assert row.get("checked"), f"{name}: say what was found instead"
    for section in ("spot", "on_demand", "spot_nodes_without_quota"):
        assert doc["availability"][section].get("source"), section
    for cloud in ("aws", "gcp"):
        assert doc["quota_lead_weeks"][cloud].get("source") and doc["quota_lead_weeks"][cloud].get("note")


def test_the_figures_the_clouds_publish_where_they_apply():
    book = commitment_book()
    terms = {t.id: t for t in book.terms}
    # Capacity Blocks: the dated page's $39.33 for p5.48xlarge against $55.04 on demand, not 43 %
    cb = terms["aws-capacity-block"]
    assert cb.discount == pytest.approx(1 - 39.33 / 55.04, abs=0.001)
    p5 = book.figure(cb, "us-east-1", "p5.48xlarge", 55.04)
    assert p5.usd_per_node_hour == 39.33 and p5.discount == pytest.approx(0.2854, abs=1e-3) and p5.verified
    assert max(cb.durations_weeks) == 26 and cb.start_within_weeks == 8 and cb.max_nodes == 64
    # GCP resource commitments from the billing catalogue, per machine
    for term, machine, figure in (("gcp-cud-1y", "a3-highgpu-8g", 0.306), ("gcp-cud-1y", "a3-megagpu-8g", 0.312),
                                  ("gcp-cud-3y", "a3-highgpu-8g", 0.561), ("gcp-cud-3y", "a3-megagpu-8g", 0.564)):
        f = book.figure(terms[term], "us-central1", machine, 88.49)
        assert f.discount == pytest.approx(figure) and f.per_pool and f.verified, (term, machine)
    assert not terms["gcp-cud-1y"].guarantees_capacity  # commitments don't reserve zonal capacity
    # calendar-mode future reservations: 1 to 90 days, at the flex-start discount, capacity held
    fr = terms["gcp-future-reservation"]
    assert max(fr.durations_weeks) * 7 <= 90 and min(fr.durations_weeks) >= 1
    assert fr.discount > 0 and fr.guarantees_capacity
    # Savings Plans are spend over a family in a region, or over all compute; no capacity
    for tid, scope in (("aws-savings-plan-1y", "family-region"), ("aws-savings-plan-3y", "family-region"),
                       ("aws-compute-savings-plan-1y", "all")):
        assert terms[tid].spend and terms[tid].scope == scope and not terms[tid].guarantees_capacity


def test_a_rates_row_for_one_region_beats_one_for_every_region_which_beats_the_term():
    book = with_rates({"rates": [
        {"term": "gcp-cud-1y", "instance_type": "a3-highgpu-8g", "region": "us-east5", "discount": 0.4,
         "source": "our contract", "date": "2026-10-01"}]}, "rates.yaml")
    t = next(t for t in book.terms if t.id == "gcp-cud-1y")
    assert book.figure(t, "us-east5", "a3-highgpu-8g", 88.0).discount == 0.4
    assert book.figure(t, "us-central1", "a3-highgpu-8g", 88.0).discount == pytest.approx(0.306)
    own = book.figure(t, "us-central1", "a2-megagpu-16g-nope", 88.0)
    assert own.discount == t.discount and not own.per_pool


def test_the_shipped_file_refuses_a_term_given_twice():
    doc = _doc()
    doc["terms"].append(dict(doc["terms"][0]))
    from placement.model.commitments import parse_book

    with pytest.raises(InputError, match=r"terms\[\d+\]\.id.*twice"):
        parse_book(doc, "commitments.yaml")
