"""``placement refresh`` (issues 13 and 14): where it writes, what plan then uses, and that it never writes
what plan would refuse - through the real google clients against the GCP fake (conftest.py)."""

from __future__ import annotations

import copy
import io
import json
from contextlib import redirect_stderr, redirect_stdout
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from placement.commands.main import main

PROJECT = "fake-project"


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def refresh(*extra: str) -> tuple[int, str, str]:
    return run(["refresh", "--cloud", "gcp", "--gcp-project", PROJECT, "--timeout", "2", *extra])


@pytest.fixture
def gcp_everywhere(live_env: dict[str, Any]) -> dict[str, Any]:
    """The GCP fake offering H100s in every zone the embedded catalog lists for GCP (so nothing shrinks)."""
    from placement.model.catalog import embedded_catalog

    gcp = live_env["gcp"]
    saved = dict(gcp.zones)
    zones: dict[str, set[str]] = {}
    for o in embedded_catalog().offers:
        if o.cloud == "gcp" and o.shape.gke_accelerator:
            zones.setdefault(o.zone, set()).add(o.shape.gke_accelerator)
    gcp.zones.update({z: sorted(g) for z, g in zones.items()})
    yield live_env
    gcp.zones.clear()
    gcp.zones.update(saved)


def _package_catalog() -> bytes:
    return resources.files("placement.data").joinpath("catalog.json").read_bytes()


def _catalog_info(job: str, *extra: str) -> dict[str, Any]:
    code, out, err = run(["plan", job, "--json", *extra])
    assert code in (0, 1), err
    return json.loads(out)["catalog"]


def test_refresh_writes_the_user_data_dir_and_plan_prefers_the_newer(gcp_everywhere: dict[str, Any],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    env = gcp_everywhere
    data = env["tmp"] / "data"
    monkeypatch.setenv("GPUFLEET_DATA_DIR", str(data))
    package_before = _package_catalog()
    assert _catalog_info(env["job"])["source"] == "embedded"

    code, _, err = refresh()
    assert code == 0, err
    written = data / "catalog.json"
    assert written.is_file() and str(written) in err
    assert _package_catalog() == package_before  # never the installed package
    info = _catalog_info(env["job"])
    assert info["source"] == "refresh" and info["clouds"]["gcp"]["path"] == str(written)
    assert info["clouds"]["aws"]["source"] == "refresh"  # AWS rows kept from the embedded catalog, same file

    # An older refreshed file loses to the embedded catalog, and the plan says so.
    doc = json.loads(written.read_text())
    doc["as_of"] = "2000-01-01"
    written.write_text(json.dumps(doc))
    assert _catalog_info(env["job"])["source"] == "embedded"

    # --output still works and leaves the data directory alone.
    other = env["tmp"] / "other.json"
    code, _, err = refresh("--output", str(other))
    assert code == 0 and other.is_file() and json.loads(written.read_text())["as_of"] == "2000-01-01"


def test_refresh_refuses_a_catalog_that_lost_too_many_offers(gcp_everywhere: dict[str, Any],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    env = gcp_everywhere
    out = env["tmp"] / "catalog.json"
    code, _, err = refresh("--output", str(out))
    assert code == 0, err
    before = out.read_bytes()
    gcp = env["gcp"]
    gcp.zones.update({z: [] for z in list(gcp.zones) if not z.startswith("us-central1")})  # most zones gone
    code, _, err = refresh("--output", str(out))
    last = err.splitlines()[-1]
    assert code == 1 and last.startswith("placement refresh: error: the new catalog would keep only gcp")
    assert "--allow-shrink" in err and out.read_bytes() == before
    code, _, err = refresh("--output", str(out), "--allow-shrink")
    assert code == 0 and out.read_bytes() != before


@pytest.mark.parametrize("fault", ["html", "truncated"])
def test_an_unparseable_answer_is_a_failed_source_never_an_empty_one(gcp_everywhere: dict[str, Any],
                                                                    fault: str) -> None:
    env = gcp_everywhere
    out = env["tmp"] / "catalog.json"
    code, _, err = refresh("--output", str(out))
    assert code == 0, err
    before = json.loads(out.read_text())
    env["gcp"].faults.update({"acceleratorTypes": fault, "skus": fault})
    code, _, err = refresh("--output", str(out), "--allow-shrink")
    assert code == 1 and "no cloud answered" in err and "gcp all -: error" in err
    assert json.loads(out.read_text()) == before
    # Offerings unparseable, prices fine: the offers stay (an empty answer would have deleted them all).
    env["gcp"].faults.pop("skus")
    code, _, err = refresh("--output", str(out))
    assert code == 0, err
    from placement.model.catalog import embedded_catalog

    # Refresh reads the catalog in use (the embedded one: --output is elsewhere) and keeps all its offers.
    assert len(json.loads(out.read_text())["offers"]) == len(embedded_catalog().offers)


def test_refresh_never_writes_what_plan_refuses(gcp_everywhere: dict[str, Any],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    env = gcp_everywhere
    data = env["tmp"] / "data"
    monkeypatch.setenv("GPUFLEET_DATA_DIR", str(data))
    # Bad live values (a negative GPU price, an infinite one) are refused per row, so what is written parses.
    gcp = env["gcp"]
    saved = copy.deepcopy(gcp.skus)
    for sku in gcp.skus:
        if "H100 80GB GPU" in sku["description"]:
            rate = sku["pricingInfo"][0]["pricingExpression"]["tieredRates"][0]["unitPrice"]
            rate["units"], rate["nanos"] = "-5", 0
    try:
        code, _, err = refresh()
    finally:
        gcp.skus[:] = saved
    assert code == 0, err
    assert "refused" in err
    code, out, err = run(["plan", env["job"], "--json"])  # the refreshed catalog is what plan reads now
    assert code == 0, err
    assert json.loads(out)["catalog"]["source"] == "refresh"

    # And should the document somehow not parse, nothing is written.
    import placement.commands.refresh as refresh_mod

    real = refresh_mod.catalog_document

    def broken(*a: Any, **k: Any) -> dict[str, Any]:
        doc = real(*a, **k)
        doc["offers"][0]["price"] = -1.0
        return doc

    before = (data / "catalog.json").read_bytes()
    monkeypatch.setattr(refresh_mod, "catalog_document", broken)
    code, _, err = refresh()
    assert code == 1 and "does not parse" in err and err.count("error:") == 1
    assert (data / "catalog.json").read_bytes() == before


def test_a_corrupt_refreshed_catalog_is_a_one_line_error(live_env: dict[str, Any], tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFLEET_DATA_DIR", str(tmp_path / "d"))
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "catalog.json").write_text('{"schema": "gpufleet.catalog/v1", "offers": [{"cloud"')
    code, out, err = run(["plan", live_env["job"], "--json"])
    assert code == 2 and out == "" and err.count("\n") == 1 and "placement refresh" in err


def test_refresh_names_each_rows_source_and_date_and_flags_a_suspect_row(gcp_everywhere: dict[str, Any]) -> None:
    """Issue 36: a refreshed row names where its prices came from and when; one the clouds' own figures make
    suspect (here a spot GPU price above the on-demand one) carries a flag, so a plan that picks it says so."""
    import datetime as dt

    env = gcp_everywhere
    gcp = env["gcp"]
    saved = copy.deepcopy(gcp.skus)
    for sku in gcp.skus:
        if sku["description"].startswith("Nvidia H100 80GB GPU attached to Spot"):
            sku["pricingInfo"][0]["pricingExpression"]["tieredRates"][0]["unitPrice"].update(units="20", nanos=0)
    out = env["tmp"] / "catalog.json"
    try:
        code, _, err = refresh("--output", str(out))
    finally:
        gcp.skus[:] = saved
    assert code == 0, err
    doc = json.loads(out.read_text())
    today = dt.date.today().isoformat()
    assert "Cloud Billing Catalog API" in doc["row_sources"]["refresh-gcp"]
    live = [r for r in doc["offers"] if r.get("source") == "refresh-gcp"]
    assert live and all(r["as_of"] == today for r in live)
    a3 = [r for r in live if r["instance_type"] == "a3-highgpu-8g"]
    assert a3 and all(r["spot_price"] > r["price"] and r["flag"].startswith(f"placement refresh {today}: spot $")
                      for r in a3)
    kept = [r for r in doc["offers"] if r["cloud"] == "aws"]
    assert kept and all(r["source"] in doc["row_sources"] for r in kept)  # kept rows keep theirs
    flagged = parse_catalog_json_doc(doc)
    assert {o.price_flag is not None for o in flagged.offers
            if o.instance_type == "a3-highgpu-8g" and o.price_ref == "refresh-gcp"} == {True}


def parse_catalog_json_doc(doc: dict[str, Any]) -> Any:
    from placement.model.catalog import parse_catalog_json

    return parse_catalog_json(doc, source="refresh")


@pytest.mark.parametrize("where", ["a folder", "in a missing folder", "the user's own file"])
def test_refresh_checks_its_output_before_asking_a_cloud(where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 38: one rule for every output path: refresh --output never replaces a file that is not a catalog
    (before, any file was), and a bad path is one line before any cloud is asked."""
    import placement.live.runner as runner

    monkeypatch.setattr(runner, "fetch", lambda *a, **k: pytest.fail("a cloud was asked"))
    mine = tmp_path / "job.yaml"
    mine.write_text("name: mine\n")
    out = {"a folder": tmp_path, "in a missing folder": tmp_path / "nope" / "c.json",
           "the user's own file": mine}[where]
    assert main(["refresh", "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--output" in err[0] and mine.read_text() == "name: mine\n"
