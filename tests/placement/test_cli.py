"""The placement CLI end to end (in-process): JSON contract, exit codes, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from placement.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "placement" / "examples"


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def write(tmp_path, name, doc):
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    return str(path)


JOB = {
    "name": "t",
    "accelerator": "H100",
    "gpus": 16,
    "hours": 10,
    "data": {"dataset": {"uri": "s3://b/d", "size_gb": 500, "region": "us-east-1"}, "outputs_gb": 50},
}


def test_plan_json_contract(tmp_path, capsys):
    code, out, _ = run(capsys, "plan", write(tmp_path, "j.yaml", JOB), "--json", "--top", "5")
    assert code == 0
    doc = json.loads(out)
    assert doc["schema"] == "gpufleet.placement/v1"
    assert doc["chosen"] == doc["candidates"][0]
    assert len(doc["candidates"]) == 5
    for c in doc["candidates"]:
        for key in (
            "cloud",
            "region",
            "zone",
            "instance_type",
            "nodes",
            "capacity",
            "usd_per_hour",
            "cost",
            "quota",
            "feasible",
        ):
            assert key in c
        assert c["capacity"] in ("spot", "on-demand")
        assert set(c["cost"]) == {"compute_usd", "egress_usd", "total_usd"}
        assert set(c["quota"]) >= {"key", "needed", "headroom"}
        assert c["quota"]["headroom"] is None  # no quota data given
        assert c["cost"]["total_usd"] == pytest.approx(c["cost"]["compute_usd"] + c["cost"]["egress_usd"], abs=1e-3)
    totals = [c["cost"]["total_usd"] for c in doc["candidates"]]
    assert totals == sorted(totals)


def test_plan_table_and_why(tmp_path, capsys):
    code, out, _ = run(capsys, "plan", write(tmp_path, "j.yaml", JOB))
    assert code == 0
    assert "instance x nodes" in out and "why:" in out


def test_quotas_make_known_feasible_win_and_infeasible_listed(tmp_path, capsys):
    q = "cloud,region,quota,limit,usage\naws,us-east-1,L-417A185B,400,0\naws,us-east-1,L-C4BD4855,0,0\n"
    job = dict(JOB, clouds={"allow": ["aws"]})
    code, out, _ = run(
        capsys,
        "plan",
        write(tmp_path, "j.yaml", job),
        "--quotas",
        write(tmp_path, "q.csv", q),
        "--json",
        "--all-candidates",
    )
    doc = json.loads(out)
    assert doc["chosen"]["feasible"] is True
    assert doc["chosen"]["region"] == "us-east-1" and doc["chosen"]["capacity"] == "on-demand"
    assert doc["chosen"]["quota"] == {"key": "L-417A185B", "unit": "vcpu", "needed": 384, "headroom": 400}
    spot_east = [
        c
        for c in doc["candidates"]
        if c["region"] == "us-east-1" and c["capacity"] == "spot" and c["instance_type"] == "p5.48xlarge"
    ]
    assert spot_east and all(c["feasible"] is False and "quota L-C4BD4855" in c["excluded_reason"] for c in spot_east)


def test_quotas_yaml_is_accepted(tmp_path, capsys):
    rows = [{"cloud": "aws", "region": "us-east-1", "quota": "L-417A185B", "limit": 1000, "usage": 0}]
    code, out, _ = run(
        capsys,
        "plan",
        write(tmp_path, "j.yaml", JOB),
        "--quotas",
        write(tmp_path, "q.yaml", rows),
        "--json",
        "--all-candidates",
    )
    assert code == 0
    doc = json.loads(out)
    assert any(c["quota"]["headroom"] == 1000 for c in doc["candidates"])


def test_nothing_feasible_exits_1(tmp_path, capsys):
    job = dict(JOB, max_usd_per_hour=0.01)
    code, out, _ = run(capsys, "plan", write(tmp_path, "j.yaml", job), "--json")
    assert code == 1
    assert json.loads(out)["chosen"] is None


def test_skypilot_catalog_replaces_that_cloud(tmp_path, capsys):
    csv = (
        "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,AvailabilityZone,Extra\n"
        "p5.48xlarge,H100,8,192,2048,1.00,,xx-test-1,xxt1-az1,ignored\n"
        "m5.large,,,2,8,0.1,0.05,xx-test-1,xxt1-az1,\n"
    )
    code, out, _ = run(
        capsys,
        "plan",
        write(tmp_path, "j.yaml", dict(JOB, capacity="spot")),
        "--catalog",
        f"aws={write(tmp_path, 'vms.csv', csv)}",
        "--json",
        "--all-candidates",
    )
    doc = json.loads(out)
    aws = [c for c in doc["candidates"] if c["cloud"] == "aws"]
    assert {c["region"] for c in aws} == {"xx-test-1"}  # embedded AWS offers replaced
    assert all(c["feasible"] is False and "not offered as spot" in c["excluded_reason"] for c in aws)
    assert any(c["cloud"] == "gcp" for c in doc["candidates"])


def test_real_skypilot_snapshot_loads_and_plans(shared_file, capsys):
    aws, gcp = shared_file("catalog-snapshot/aws_vms.csv"), shared_file("catalog-snapshot/gcp_vms.csv")
    code, out, _ = run(
        capsys, "offers", "--accelerator", "H100", "--catalog", f"aws={aws}", "--catalog", f"gcp={gcp}", "--json"
    )
    assert code == 0
    doc = json.loads(out)
    types = {o["instance_type"] for o in doc["offers"]}
    assert {"p5.48xlarge", "a3-highgpu-8g", "a3-megagpu-8g"} <= types  # H100-MEGA maps to H100


def test_offers_filters(capsys):
    code, out, _ = run(capsys, "offers", "--accelerator", "h200", "--cloud", "gcp", "--capacity", "on-demand", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["offers"]
    assert all(o["cloud"] == "gcp" and o["accelerator"] == "H200" and o["usd_per_hour"] for o in doc["offers"])


def test_plan_batch_json(tmp_path, capsys):
    code, out, _ = run(
        capsys, "plan-batch", str(EXAMPLES / "batch.yaml"), "--quotas", str(EXAMPLES / "quotas.csv"), "--json"
    )
    assert code == 0
    doc = json.loads(out)
    assert doc["schema"] == "gpufleet.placement/v1" and doc["solver"]["status"] == "Optimal"
    assert [j["job"] for j in doc["jobs"]] == ["pretrain-a", "pretrain-b", "finetune-c", "eval-d"]
    assert doc["total_usd"] == pytest.approx(
        sum(j["chosen"]["cost"]["total_usd"] for j in doc["jobs"] if j["chosen"]), abs=0.01
    )
    assert "greedy" in doc


BAD_JOBS = [
    ({"accelerator": "H100", "gpus": 8, "hours": 1}, "name"),
    ({"name": "x", "gpus": 8, "hours": 1}, "accelerator"),
    ({"name": "x", "accelerator": "H999", "gpus": 8, "hours": 1}, "accelerator"),
    ({"name": "x", "accelerator": "H100", "gpus": 0, "hours": 1}, "gpus"),
    ({"name": "x", "accelerator": "H100", "gpus": 2.5, "hours": 1}, "gpus"),
    ({"name": "x", "accelerator": "H100", "gpus": 8, "hours": -1}, "hours"),
    ({"name": "x", "accelerator": "H100", "gpus": 8, "hours": 1, "capacity": "cheap"}, "capacity"),
    (
        {
            "name": "x",
            "accelerator": "H100",
            "gpus": 8,
            "hours": 1,
            "data": {"dataset": {"uri": "ftp://a", "size_gb": 1, "region": "r"}},
        },
        "data.dataset.uri",
    ),
    (
        {
            "name": "x",
            "accelerator": "H100",
            "gpus": 8,
            "hours": 1,
            "data": {"dataset": {"uri": "s3://a", "size_gb": 1}},
        },
        "data.dataset.region",
    ),
    ({"name": "x", "accelerator": "H100", "gpus": 8, "hours": 1, "data": {"outputs_gb": 5}}, "data.outputs_gb"),
    (
        {"name": "x", "accelerator": "H100", "gpus": 8, "hours": 1, "spot": {"interruptions_per_hour": "often"}},
        "spot.interruptions_per_hour",
    ),
    (
        {"name": "x", "accelerator": "H100", "gpus": 8, "hours": 1, "checkpoint": {"interval_minutes": 0}},
        "checkpoint.interval_minutes",
    ),
    ({"name": "x", "accelerator": "H100", "gpus": 8, "hours": 1, "clouds": {"allow": ["azure"]}}, "clouds.allow"),
    ({"name": "x", "accelerator": "H100", "gpus": 8, "hours": 1, "gpu": 3}, "gpu"),
    ({"name": "x", "accelerator": "H100", "gpus": 8, "hours": 1, "max_usd_per_hour": 0}, "max_usd_per_hour"),
    ("just a string", "job"),
]


@pytest.mark.parametrize(("doc", "field"), BAD_JOBS)
def test_bad_job_specs_exit_2_naming_the_field(tmp_path, capsys, doc, field):
    code, out, err = run(capsys, "plan", write(tmp_path, "j.yaml", doc))
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{field}:" in err


BAD_FLAGS = [
    (["plan", "missing.yaml"], "missing.yaml"),
    (["plan", "{job}", "--top", "0"], "--top"),
    (["plan", "{job}", "--top", "x"], "--top"),
    (["plan", "{job}", "--catalog", "azure=x.csv"], "--catalog"),
    (["plan", "{job}", "--catalog", "aws={bad_csv}"], "Price"),
    (["plan", "{job}", "--catalog", "aws={no_cols}"], "AcceleratorName"),
    (["plan", "{job}", "--quotas", "{bad_quota}"], "limit"),
    (["plan", "{job}", "--quotas", "{no_header}"], "cloud"),
    (["plan", "{broken_yaml}"], "not valid YAML"),
    (["plan-batch", "{job}"], "jobs"),
    (["plan-batch", "{dup_batch}"], "jobs[1].name"),
    (["offers", "--accelerator", "Z80"], "--accelerator"),
    (["frobnicate"], "invalid choice"),
]


@pytest.mark.parametrize(("argv", "needle"), BAD_FLAGS)
def test_bad_flags_and_files_exit_2_with_one_line(tmp_path, capsys, argv, needle):
    files = {
        "job": write(tmp_path, "j.yaml", JOB),
        "bad_csv": write(
            tmp_path,
            "bad.csv",
            "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,"
            "SpotPrice,Region,AvailabilityZone\np5.48xlarge,H100,8,192,2048,abc,,r,z\n",
        ),
        "no_cols": write(tmp_path, "nocols.csv", "InstanceType,Price\np5.48xlarge,1\n"),
        "bad_quota": write(tmp_path, "q.csv", "cloud,region,quota,limit,usage\naws,us-east-1,L-417A185B,lots,0\n"),
        "no_header": write(tmp_path, "q2.csv", "region,quota,limit,usage\nus-east-1,L-417A185B,1,0\n"),
        "broken_yaml": write(tmp_path, "broken.yaml", "name: [unclosed\n"),
        "dup_batch": write(tmp_path, "b.yaml", {"jobs": [dict(JOB), dict(JOB)]}),
    }
    code, out, err = run(capsys, *[a.format(**files) for a in argv])
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert needle in err


def test_console_script_help_imports_no_cloud_sdk():
    code = (
        "import sys, placement.cli as c\n"
        "try:\n    c.main(['--help'])\nexcept SystemExit:\n    pass\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('boto3', 'botocore', 'google', 'pulumi', 'highspy',"
        " 'yaml')]\nprint(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"
