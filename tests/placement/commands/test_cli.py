"""The placement CLI end to end (in-process): JSON contract, exit codes, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from placement.commands.main import main

EXAMPLES = Path(__file__).resolve().parents[3] / "placement" / "examples"


# A plan as of a day after the embedded catalog's date: no "catalog over a week old" warning line.
FRESH = ("--now", "2026-11-02")


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
        # issue 27 added the bill's other lines (fields are only added)
        assert set(c["cost"]) == {"compute_usd", "egress_usd", "delay_usd", "total_usd", "nat_usd",
                                  "checkpoint_storage_usd", "checkpoint_requests_usd"}
        assert set(c["quota"]) >= {"key", "needed", "headroom"}
        assert c["quota"]["headroom"] is None  # no quota data given
        assert c["cost"]["delay_usd"] == 0  # the job sets no usd_per_hour_of_delay
        assert c["cost"]["total_usd"] == pytest.approx(
            c["cost"]["compute_usd"] + c["cost"]["egress_usd"] + c["cost"]["nat_usd"]
            + c["cost"]["checkpoint_storage_usd"] + c["cost"]["checkpoint_requests_usd"], abs=1e-3)
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


def test_real_skypilot_snapshot_loads_and_plans(data_file, capsys):
    aws, gcp = data_file("catalog-snapshot/aws_vms.csv"), data_file("catalog-snapshot/gcp_vms.csv")
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
            "SpotPrice,Region,AvailabilityZone\np5.48xlarge,H100,8,192,2048,abc,,us-east-1,use1-az4\n",
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
        "import sys, placement.commands.main as c\n"
        "try:\n    c.main(['--help'])\nexcept SystemExit:\n    pass\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('boto3', 'botocore', 'google', 'pulumi', 'highspy',"
        " 'yaml')]\nprint(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


# ----------------------------------------------------------------------------- issue 11: inputs that must not pass

BASE = {"name": "x", "accelerator": "H100", "gpus": 8, "hours": 1}
NEW_BAD_JOBS = [
    (dict(BASE, accelerator=[]), "accelerator:"),
    (dict(BASE, data={"dataset": {"uri": "gs://b/d", "size_gb": 1, "region": "us-east-1"}}), "data.dataset.region:"),
    (dict(BASE, data={"dataset": {"uri": "s3://b/d", "size_gb": 1, "region": "us-east1"}}), "data.dataset.region:"),
    (dict(BASE, data={"dataset": {"uri": "s3://b/d", "size_gb": 1, "region": "us-east-9"}}), "data.dataset.region:"),
    (dict(BASE, regions={"allow": ["us-east-7", "eu-nowhere-1"]}), "regions.allow:"),
    (dict(BASE, clouds={"allow": ["aws"]}, regions={"allow": ["us-central1"]}), "regions.allow:"),
    ({"jobs": [BASE]}, "use `placement plan-batch`"),
    (dict(BASE, speed={"H900": 0.5}), "speed.H900:"),
    (dict(BASE, speed={"A100": 0}), "speed.A100:"),
    (dict(BASE, gpus_per_node=3), "gpus_per_node:"),
    (dict(BASE, capacity="reserved-ish"), "capacity:"),
    (dict(BASE, deadline_hours=0), "deadline_hours:"),
    (dict(BASE, usd_per_hour_of_delay=-1), "usd_per_hour_of_delay:"),
    (dict(BASE, data={"throughput_gbps": {"warp": 10}}), "data.throughput_gbps.warp:"),
    (dict(BASE, zones={"maybe": ["use1-az1"]}), "zones.maybe:"),
]


@pytest.mark.parametrize(("doc", "needle"), NEW_BAD_JOBS)
def test_inputs_that_should_not_pass_exit_2_naming_the_field(tmp_path, capsys, doc, needle):
    code, out, err = run(capsys, "plan", write(tmp_path, "j.yaml", doc))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert needle in err


def test_dataset_region_error_says_which_cloud_the_region_belongs_to(tmp_path, capsys):
    doc = dict(BASE, data={"dataset": {"uri": "gs://b/d", "size_gb": 1, "region": "us-east-1"}})
    _, _, err = run(capsys, "plan", write(tmp_path, "j.yaml", doc))
    assert "us-east-1 is an AWS region, but a gs:// dataset lives in GCP" in err


QUOTA_HEAD = "cloud,region,quota,limit,usage\n"


def test_quota_usage_above_limit_is_zero_headroom_with_one_warning_line(tmp_path, capsys):
    # Real after a quota is lowered below what runs: no room, not bad input (issue 18).
    q = write(tmp_path, "q.csv", QUOTA_HEAD + "aws,us-east-1,L-417A185B,400,0\naws,us-east-1,L-C4BD4855,192,384\n")
    code, out, err = run(capsys, "plan", write(tmp_path, "j.yaml", JOB), "--quotas", q, "--json",
                         "--all-candidates", *FRESH)
    assert code == 0 and err.count("\n") == 1 and "Traceback" not in err
    assert "usage (row 2): quota L-C4BD4855 in aws us-east-1: usage 384 is above its limit 192" in err
    spot = [c for c in json.loads(out)["candidates"]
            if c["quota"]["key"] == "L-C4BD4855" and c["region"] == "us-east-1"]
    assert spot and all(c["quota"]["headroom"] == 0 and c["feasible"] is False for c in spot)


def test_unknown_quota_key_warns_on_one_line_and_still_plans(tmp_path, capsys):
    q = write(tmp_path, "q.csv", QUOTA_HEAD + "aws,us-east-1,L-417A185B,400,0\naws,us-east-1,L-TYPO1234,96,0\n"
                                              "gcp,us-central1,PREEMPTIBLE_NVIDIA_T4_GPUS,8,0\n")
    code, out, err = run(capsys, "plan", write(tmp_path, "j.yaml", JOB), "--quotas", q, "--json", *FRESH)
    assert code == 0 and json.loads(out)["chosen"]
    assert err.count("\n") == 1 and err.startswith("placement: warning:")
    assert "'L-TYPO1234' is not a known aws GPU quota" in err and "row 2" in err


def test_regions_allow_with_some_unknown_names_warns(tmp_path, capsys):
    doc = dict(JOB, regions={"allow": ["us-east-1", "us-est-2"]})
    code, out, err = run(capsys, "plan", write(tmp_path, "j.yaml", doc), "--json", *FRESH)
    assert code == 0
    assert err.count("\n") == 1 and "regions.allow: us-est-2 is not a known region" in err
    assert {c["region"] for c in json.loads(out)["candidates"]} == {"us-east-1"}


# ----------------------------------------------------------------------------- provenance, JSON additions


def test_catalog_provenance_reports_the_sources_actually_used(tmp_path, capsys):
    head = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,AvailabilityZone\n"
    aws = write(tmp_path, "aws.csv", head + "p5.48xlarge,H100,8,192,2048,50,20,us-east-1,use1-az1\n")
    gcp = write(tmp_path, "gcp.csv", head + "a3-highgpu-8g,H100,8,208,1872,60,25,us-central1,us-central1-a\n")
    code, out, _ = run(capsys, "plan", write(tmp_path, "j.yaml", JOB), "--catalog", f"aws={aws}",
                       "--catalog", f"gcp={gcp}", "--json")
    cat = json.loads(out)["catalog"]
    assert "embedded" not in cat["source"] and cat["as_of"] != "2026-11-01"
    assert cat["source"] == f"{aws}+{gcp}"
    assert cat["clouds"]["aws"]["source"] == "csv" and cat["clouds"]["aws"]["path"] == aws
    assert cat["clouds"]["gcp"]["path"] == gcp and cat["clouds"]["gcp"]["offers"] == 1
    assert cat["clouds"]["aws"]["modified"]  # the file's date: the only hint of its age
    code, out, _ = run(capsys, "plan", write(tmp_path, "j.yaml", JOB), "--catalog", f"gcp={gcp}")
    assert f"catalog: aws embedded as of 2026-11-01, gcp {gcp} (file modified " in out


def test_every_candidate_carries_the_new_fields(tmp_path, capsys):
    code, out, _ = run(capsys, "plan", write(tmp_path, "j.yaml", dict(JOB, gpus=12)), "--json", "--all-candidates")
    doc = json.loads(out)
    assert "cheaper_unconfirmed" in doc
    for c in doc["candidates"]:
        for key in ("gpus_per_node", "billed_gpus", "idle_gpus", "hours", "transfer_hours", "ready_hours",
                    "interruptions_per_hour"):
            assert key in c, key
        assert c["billed_gpus"] == c["nodes"] * c["gpus_per_node"]
        assert c["idle_gpus"] == c["billed_gpus"] - 12
        assert c["ready_hours"] is None or c["ready_hours"] >= c["transfer_hours"] + c["hours"] - 1e-3
        assert (c["interruptions_per_hour"] > 0) == (c["capacity"] == "spot")


def test_cheaper_unconfirmed_in_json(tmp_path, capsys):
    q = write(tmp_path, "q.csv", QUOTA_HEAD + "aws,us-west-2,L-417A185B,768,0\n")
    job = dict(JOB, capacity="on-demand", clouds={"allow": ["aws"]})
    code, out, _ = run(capsys, "plan", write(tmp_path, "j.yaml", job), "--quotas", q, "--json")
    doc = json.loads(out)
    assert doc["chosen"]["feasible"] is True and doc["chosen"]["region"] == "us-west-2"
    cheaper = doc["cheaper_unconfirmed"]
    assert cheaper["feasible"] is None
    assert cheaper["cost"]["total_usd"] < doc["chosen"]["cost"]["total_usd"]
    assert cheaper["saves_usd"] == pytest.approx(doc["chosen"]["cost"]["total_usd"] - cheaper["cost"]["total_usd"],
                                                 abs=1e-3)
    assert cheaper["request"] == {"cloud": "aws", "region": cheaper["region"], "quota": "L-417A185B",
                                  "unit": "vcpu", "amount": 384}
    assert "quota is unknown" in doc["why"]


def test_egress_allowance_flag(tmp_path, capsys):
    job = dict(JOB, clouds={"allow": ["gcp"]}, capacity="on-demand")
    _, out, _ = run(capsys, "plan", write(tmp_path, "j.yaml", job), "--json")
    _, out100, _ = run(capsys, "plan", write(tmp_path, "j.yaml", job), "--json", "--egress-allowance-gb", "100")
    assert json.loads(out)["chosen"]["cost"]["egress_usd"] - json.loads(out100)["chosen"]["cost"]["egress_usd"] == \
        pytest.approx(100 * 0.09, abs=1e-3)
    code, out, err = run(capsys, "plan", write(tmp_path, "j.yaml", job), "--egress-allowance-gb", "500")
    assert code == 2 and "--egress-allowance-gb" in err and err.count("\n") == 1


# ----------------------------------------------------------------------------- reservations

RES_HEAD = "cloud,region,zone,instance_type,count,usd_per_hour,ends\n"


def test_reservations_file_adds_reserved_candidates(tmp_path, capsys):
    res = write(tmp_path, "r.csv", RES_HEAD + "aws,us-east-1,use1-az4,p5.48xlarge,2,0,2026-12-01T00:00:00Z\n"
                                              "aws,us-east-1,use1-az6,p5.48xlarge,1,0,\n")
    args = ["plan", write(tmp_path, "j.yaml", JOB), "--reservations", res, "--json", "--all-candidates",
            "--now", "2026-11-20T00:00:00Z"]
    code, out, _ = run(capsys, *args)
    doc = json.loads(out)
    assert code == 0
    chosen = doc["chosen"]
    assert chosen["capacity"] == "reserved" and chosen["zone"] == "use1-az4" and chosen["feasible"] is True
    assert chosen["reservation"] == {"id": "r.csv:1", "kind": "file", "source": res, "count": 2, "usd_per_hour": 0.0,
                                     "ends": "2026-12-01T00:00:00Z"}
    small = [c for c in doc["candidates"] if c.get("reservation", {}).get("id") == "r.csv:2"]
    assert small and small[0]["excluded_reason"] == "reservation r.csv:2: needs 2 nodes, 1 free"
    # planned 8 hours before it ends, the 10-hour job no longer fits in the first reservation
    code, out, _ = run(capsys, *args[:-1], "2026-11-30T16:00:00Z")
    doc = json.loads(out)
    assert doc["chosen"]["capacity"] != "reserved"
    ended = [c for c in doc["candidates"] if c.get("reservation", {}).get("id") == "r.csv:1"]
    assert "before the job is ready" in ended[0]["excluded_reason"]


BAD_RESERVATIONS = [
    (RES_HEAD + "azure,eastus,1,ND96,1,0,\n", "cloud (row 1)"),
    (RES_HEAD + "aws,us-east-1,use1-az4,p9.huge,1,0,\n", "instance_type (row 1)"),
    (RES_HEAD + "aws,us-east-1,usw2-az1,p5.48xlarge,1,0,\n", "zone (row 1)"),
    (RES_HEAD + "aws,us-east-1,use1-az4,p5.48xlarge,0,0,\n", "count (row 1)"),
    (RES_HEAD + "aws,us-east-1,use1-az4,p5.48xlarge,1.5,0,\n", "count (row 1)"),
    (RES_HEAD + "aws,us-east-1,use1-az4,p5.48xlarge,1,-3,\n", "usd_per_hour (row 1)"),
    (RES_HEAD + "aws,us-east-1,use1-az4,p5.48xlarge,1,0,next week\n", "ends (row 1)"),
    ("cloud,region,zone,instance_type,count\naws,us-east-1,use1-az4,p5.48xlarge,1\n", "usd_per_hour"),
]


@pytest.mark.parametrize(("text", "needle"), BAD_RESERVATIONS)
def test_bad_reservation_files_exit_2_naming_the_field(tmp_path, capsys, text, needle):
    code, out, err = run(capsys, "plan", write(tmp_path, "j.yaml", JOB), "--reservations",
                         write(tmp_path, "r.csv", text))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err and needle in err


def test_bad_now_exits_2(tmp_path, capsys):
    code, _, err = run(capsys, "plan", write(tmp_path, "j.yaml", JOB), "--now", "tomorrow")
    assert code == 2 and "--now" in err and err.count("\n") == 1


# ----------------------------------------------------------------------------- plan-batch exit code


def test_plan_batch_exits_1_when_some_jobs_are_not_placed(tmp_path, capsys):
    q = write(tmp_path, "q.csv", QUOTA_HEAD + "".join(
        f"aws,{r},{k},0,0\n" for r in ("us-east-1", "us-east-2", "us-west-2") for k in ("L-417A185B", "L-C4BD4855")))
    jobs = {"jobs": [dict(JOB, name="fits", accelerator="A100", clouds={"allow": ["aws"]}),
                     dict(JOB, name="stuck", clouds={"allow": ["aws"]}, regions={"allow": ["us-east-1"]})]}
    code, out, _ = run(capsys, "plan-batch", write(tmp_path, "b.yaml", jobs), "--quotas", q, "--json")
    doc = json.loads(out)
    assert code == 1
    assert [j["placed"] for j in doc["jobs"]] == [True, False]  # the partial plan is still shown
    code, out, _ = run(capsys, "plan-batch", write(tmp_path, "b.yaml", jobs), "--quotas", q)
    assert code == 1 and "placed 1/2" in out
    code, _, _ = run(capsys, "plan-batch", write(tmp_path, "b.yaml", {"jobs": jobs["jobs"][:1]}), "--quotas", q)
    assert code == 0


def test_plan_batch_json_on_stdout_is_only_the_document():
    """HiGHS prints a banner from C++ straight to stdout; the JSON a script reads must be the whole stdout."""
    res = subprocess.run([sys.executable, "-m", "placement", "plan-batch", str(EXAMPLES / "batch.yaml"),
                          "--quotas", str(EXAMPLES / "quotas.csv"), "--json"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["kind"] == "batch"
    assert "HiGHS" not in res.stderr


# ----------------------------------------------------------------------------- issue 14: paths, output, strict JSON


@pytest.mark.parametrize("flag", ["job", "--catalog", "--quotas", "--reservations"])
@pytest.mark.parametrize("bad", ["dir", "under-a-file", "too-long", "nul"])
def test_odd_paths_on_every_flag_exit_2_naming_the_flag(tmp_path, capsys, flag, bad):
    (tmp_path / "f.txt").write_text("x")
    path = {"dir": str(tmp_path), "under-a-file": str(tmp_path / "f.txt" / "x"),
            "too-long": str(tmp_path / ("n" * 5000)), "nul": str(tmp_path / "a\0b")}[bad]
    job = write(tmp_path, "j.yaml", JOB)
    argv = ["plan", path] if flag == "job" else ["plan", job, flag, f"aws={path}" if flag == "--catalog" else path]
    code, _, err = run(capsys, *argv)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert (flag if flag != "job" else "job spec") in err and len(err) < 300


def _cli(*argv: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "placement", *argv], capture_output=True, text=True,
                          timeout=120, check=False, **kw)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
@pytest.mark.parametrize("fmt", [[], ["--json"]])
def test_a_full_disk_is_one_line_not_a_traceback(tmp_path, fmt):
    job = write(tmp_path, "j.yaml", JOB)
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "placement", "plan", job, *fmt, *FRESH], stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=120, check=False)
    assert proc.returncode == 2
    assert proc.stderr == "placement: error: cannot write the output: No space left on device\n"


def test_a_closed_pipe_exits_quietly(tmp_path):
    job = write(tmp_path, "j.yaml", JOB)
    proc = subprocess.Popen([sys.executable, "-m", "placement", "plan", job, "--all-candidates", "--json", *FRESH],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0 and err == ""


def test_mip_gap_without_a_bound_is_null_in_strict_json():
    from placement.commands.render import batch_doc
    from placement.model.catalog import embedded_catalog
    from placement.plan.batch import BatchResult

    doc = batch_doc(BatchResult((), float("inf"), "highs", "time limit", {}, gap=float("inf")), embedded_catalog())
    assert doc["solver"]["mip_gap"] is None and doc["total_usd"] is None
    json.dumps(doc, allow_nan=False)


def _strict(text: str):
    def refuse(name: str):
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_infinite_catalog_prices_never_reach_the_json(tmp_path, capsys):
    head = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,AvailabilityZone\n"
    csv = write(tmp_path, "aws.csv", head + "p5.48xlarge,H100,8,192,2048,inf,1e999,us-east-1,use1-az4\n")
    code, out, err = run(capsys, "plan", write(tmp_path, "j.yaml", JOB), "--catalog", f"aws={csv}", "--json")
    assert code == 2 and out == "" and "Price (line 2)" in err
    code, out, _ = run(capsys, "plan", write(tmp_path, "j.yaml", JOB), "--json", "--all-candidates")
    _strict(out)


def test_a_gcp_catalog_given_as_aws_is_refused(tmp_path, capsys, data_file):
    gcp = data_file("gcp_vms_sample.csv")
    code, out, err = run(capsys, "plan", write(tmp_path, "j.yaml", JOB), "--catalog", f"aws={gcp}")
    assert code == 2 and out == "" and "line 2" in err and "GCP" in err.upper()


def test_a_cloud_given_twice_to_catalog_is_refused(tmp_path, capsys):
    head = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,AvailabilityZone\n"
    a = write(tmp_path, "a.csv", head + "p5.48xlarge,H100,8,192,2048,98,40,us-east-1,use1-az4\n")
    code, _, err = run(capsys, "plan", write(tmp_path, "j.yaml", JOB), "--catalog", f"aws={a}", "--catalog", f"aws={a}")
    assert code == 2 and "aws is given twice" in err


@pytest.mark.parametrize("value", ["nan", "inf", "0"])
def test_time_limit_must_be_a_finite_positive_number(tmp_path, capsys, value):
    batch = write(tmp_path, "b.yaml", {"jobs": [JOB]})
    code, _, err = run(capsys, "plan-batch", batch, "--time-limit", value)
    assert code == 2 and "--time-limit" in err
