"""The tables answer the first questions (issue 30): the quota need without --quotas and what to request, the
job's deadline and price of delay in the header, ready hours kept at 80 columns, plan-batch's cost split and
deadlines, a spot price not below on-demand never called the lowest, and submit's ready stack file."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from factories import run, write

REPO = Path(__file__).resolve().parents[3]
STACKS = str(REPO / "placement" / "examples" / "stacks-outputs.json")
JOB = {"name": "train-7b", "accelerator": "H100", "gpus": 64, "hours": 48}


def test_without_quotas_the_quota_column_shows_the_need_and_a_request_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    code, out, _ = run(capsys, "plan", write(tmp_path, "j.yaml", JOB))
    assert code == 0 and re.search(r"\b1536 vcpu / \?", out), out
    (line,) = [x for x in out.splitlines() if x.startswith("quota: ")]
    assert re.search(r"request 1,?536 vcpu of headroom on L-[0-9A-F]{8} in [a-z]+-[a-z]+-\d", line), line


def test_plan_batch_says_what_quota_to_request(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    batch = write(tmp_path, "b.yaml", {"jobs": [{**JOB, "name": "a", "gpus": 8, "hours": 2},
                                                {**JOB, "gpus": 16, "hours": 20}]})
    code, out, _ = run(capsys, "plan-batch", batch)
    assert code == 0 and [x for x in out.splitlines() if x.startswith("quota: ") and "request" in x], out
    assert " vcpu / ?" in out


def test_the_header_echoes_the_deadline_and_the_price_of_delay(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    job = write(tmp_path, "j.yaml", {**JOB, "deadline_hours": 60, "usd_per_hour_of_delay": 100})
    code, out, _ = run(capsys, "plan", job)
    head = out.split("\n#")[0] if "\n#" in out else out.splitlines()[0]
    assert code == 0 and "deadline_hours 60" in head and "$100.00/h" in head


@pytest.mark.parametrize("extra", [{"deadline_hours": 60}, {"usd_per_hour_of_delay": 100},
                                   {"deadline_hours": 60, "usd_per_hour_of_delay": 100}])
def test_at_80_columns_ready_hours_stay_when_the_job_has_a_deadline_or_prices_delay(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, extra: dict) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run(capsys, "plan", write(tmp_path, "j.yaml", {**JOB, **extra}))
    header = next(x for x in out.splitlines() if x.lstrip().startswith("#"))
    assert code == 0 and "ready in h" in header and max(map(len, out.splitlines())) <= 80, out


def test_plan_batch_splits_compute_egress_and_delay_and_shows_ready_hours_and_deadlines(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    batch = write(tmp_path, "b.yaml", {"jobs": [{**JOB, "name": "a", "gpus": 8, "hours": 2},
                                                {**JOB, "gpus": 16, "hours": 20, "deadline_hours": 30,
                                                 "usd_per_hour_of_delay": 50}]})
    code, out, _ = run(capsys, "plan-batch", batch)
    header = next(x for x in out.splitlines() if x.startswith("job "))
    for column in ("compute $", "egress $", "delay $", "total $", "ready at h", "due h"):
        assert column in header, header
    row = next(x for x in out.splitlines() if x.startswith("train-7b "))
    assert "30.0" in row
    monkeypatch.setenv("COLUMNS", "80")
    run(capsys, "plan-batch", batch)
    code, out, _ = run(capsys, "plan-batch", batch)
    header = next(x for x in out.splitlines() if x.startswith("job "))
    assert "ready at h" in header and max(map(len, out.splitlines())) <= 80, out


def test_a_spot_price_not_below_on_demand_is_never_called_the_lowest(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    head = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,AvailabilityZone\n"
    catalog = write(tmp_path, "aws.csv", head + "p5.48xlarge,H100,8,192,2048,50,50,us-east-1,use1-az4\n")
    quotas = write(tmp_path, "q.csv", "cloud,region,quota,limit,usage\naws,us-east-1,L-C4BD4855,10000,0\n")
    job = write(tmp_path, "j.yaml", {**JOB, "gpus": 8, "capacity": "spot", "clouds": {"allow": ["aws"]}})
    code, out, _ = run(capsys, "plan", job, "--catalog", f"aws={catalog}", "--quotas", quotas, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["chosen"]["spot_not_cheaper"] is True and doc["chosen"]["feasible"] is True
    assert "lowest total" not in doc["why"] and "not below on-demand" in doc["why"]


def test_submit_prints_a_ready_stack_file_for_the_cheaper_new_place(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    job = write(tmp_path, "j.yaml", {**JOB, "gpus": 16, "hours": 10})
    code, _, err = run(capsys, "submit", job, "--stacks", STACKS, "--dry-run")
    assert code == 0 and "a new stack in" in err
    text = err.split("(--write-stack FILE writes it):\n", 1)[1]
    assert yaml.safe_load(text)["config"]["gpufleet:nodePools"][0]["maxNodes"] == 2


def test_submit_writes_the_stack_file_that_preview_accepts_and_never_overwrites(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("pulumi")
    from infra import preview as pv

    job = write(tmp_path, "j.yaml", {**JOB, "gpus": 16, "hours": 10})
    out_file = tmp_path / "new.yaml"
    code, out, err = run(capsys, "submit", job, "--stacks", STACKS, "--dry-run", "--json", "--write-stack",
                         str(out_file))
    doc = json.loads(out)
    name = doc["new_stack"]["stack"]
    assert code == 0 and out_file.read_text() == doc["new_stack"]["file"]
    root = tmp_path / "root"
    (root / "stacks").mkdir(parents=True)
    (root / "stacks" / f"Pulumi.{name}.yaml").write_text(out_file.read_text())
    assert pv.main(["--root", str(root), "--stack", name]) == 0, capsys.readouterr()
    capsys.readouterr()
    before = out_file.read_text()
    code, out, err = run(capsys, "submit", job, "--stacks", STACKS, "--dry-run", "--write-stack", str(out_file))
    assert code == 2 and out == "" and "--write-stack" in err and out_file.read_text() == before


@pytest.mark.parametrize("cloud", ["aws", "gcp"])
def test_a_new_stack_file_for_either_cloud_is_accepted_by_preview(tmp_path: Path, cloud: str) -> None:
    pytest.importorskip("pulumi")
    from infra import preview as pv
    from placement.fleet.new_stack import new_stack
    from placement.model.catalog import embedded_catalog
    from placement.model.jobspec import parse_job
    from placement.plan.job import plan

    job = parse_job({**JOB, "gpus": 16, "hours": 10, "capacity": "on-demand", "clouds": {"allow": [cloud]}})
    chosen = plan(job, embedded_catalog().offers).chosen
    assert chosen is not None
    made = new_stack(job, chosen)
    assert made is not None
    name, text = made
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / f"Pulumi.{name}.yaml").write_text(text)
    assert pv.main(["--root", str(tmp_path), "--stack", name, "--format", "json"]) == 0
