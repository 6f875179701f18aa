"""``placement dispatch --once --live``: live prices through the real boto3 / google clients against the local
cloud fakes, deciding for a fake hub and its three workers (tests/dispatchfleet.py)."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
from dispatchfleet import Fleet

from placement.commands.main import main


def run(argv: list[str]) -> tuple[int, dict[str, Any], str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(argv)
    text = out.getvalue()
    return code, json.loads(text) if text.startswith("{") else {"text": text}, err.getvalue()


def costs(doc: dict[str, Any]) -> dict[str, float]:
    (d,) = doc["decisions"]
    return {s["worker"]: s["cost_usd"] for s in d["scores"] if s["fits"]}


@pytest.fixture
def fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    (tmp_path / "kube").mkdir()
    f = Fleet(tmp_path / "kube")
    yield f
    f.close()


def test_dispatch_prices_the_workers_with_live_spot_prices_and_asks_for_no_quota(live_env: dict[str, Any],
                                                                                  fleet: Fleet) -> None:
    fleet.submit("live", dataset={"uri": "s3://d/x", "region": "us-east-1", "size_gb": 500})
    base = ["dispatch", "--once", "--dry-run", "--json", "--kubeconfig", str(fleet.hub_kubeconfig),
            "--fleet", str(fleet.fleet_file), *live_env["args"]]
    code, catalog_doc, err = run(base)
    assert code == 0, err
    assert catalog_doc["prices"]["source"] == "catalog"
    assert live_env["aws"].count() == 0 and live_env["gcp"].count() == 0

    code, live_doc, err = run([*base, "--live", "--timeout", "3"])
    assert code == 0, err
    prices = live_doc["prices"]
    assert prices["source"] == "live" and 0 <= prices["age_s"] < 60
    assert prices["regions"] == {"aws/us-east-1": "live", "gcp/europe-west4": "live", "gcp/us-central1": "live"}
    before, after = costs(catalog_doc), costs(live_doc)
    assert set(before) == set(after) == {"aws-use1-p5", "gcp-usc1-a3mega", "gcp-euw4-a3high"}
    assert after["aws-use1-p5"] < before["aws-use1-p5"] / 100  # moto's spot price (0.00001 USD/h), not the CSV's 40
    assert after["gcp-euw4-a3high"] != before["gcp-euw4-a3high"]  # A3 High from the billing SKUs
    # Prices only: no Service Quotas, CloudWatch or regions.get calls (nor the IAM permissions they need).
    assert live_env["aws"].count("DescribeSpotPriceHistory") and live_env["aws"].count("DescribeInstanceTypeOfferings")
    assert not live_env["aws"].count("monitoring") and not live_env["gcp"].count("/regions/")
    assert not [c for c in live_env["stubs"].created if c[0] == "service-quotas"]


def test_dispatch_keeps_catalog_prices_where_a_cloud_fails_and_says_so(live_env: dict[str, Any],
                                                                       fleet: Fleet) -> None:
    fleet.submit("partial")
    live_env["gcp"].faults["acceleratorTypes"] = "403"  # GCP answers nothing usable: its regions stay on the catalog
    base = ["dispatch", "--once", "--dry-run", "--kubeconfig", str(fleet.hub_kubeconfig),
            "--fleet", str(fleet.fleet_file), *live_env["args"], "--live", "--timeout", "3"]
    code, _, err = run(base)
    assert code == 0, err
    assert "prices: live+catalog" in err
    assert "aws/us-east-1 live" in err and "gcp/us-central1 catalog" in err and "gcp/europe-west4 catalog" in err
