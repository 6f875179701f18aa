"""Messages a new user meets first (issue 30): each names the field, the value and the fix, at a precision that
reads right: unknown zones, unterminated quotes, a catalog given for the wrong cloud, the job file and the batch
job named, durations and deadlines."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from factories import run, write

HEAD = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,AvailabilityZone\n"
ROW = "p5.48xlarge,H100,8,192,2048,98.32,40.1,us-east-1,use1-az4\n"
JOB = {"name": "train-7b", "accelerator": "H100", "gpus": 8, "hours": 2}


def error_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.startswith("placement: error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_zones_allow_naming_no_offered_zone_is_refused_naming_it(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    job = write(tmp_path, "job.yaml", {**JOB, "zones": {"allow": ["use1-az66"]}})
    code, out, err = run(capsys, "plan", job)
    line = error_line(err)
    assert code == 2 and out == "" and "zones.allow" in line and "use1-az66" in line and "use1-az6" in line


def test_zones_allow_naming_one_unoffered_zone_warns_and_plans(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    job = write(tmp_path, "job.yaml", {**JOB, "zones": {"allow": ["use1-az66", "use1-az4"]}})
    code, out, err = run(capsys, "plan", job)
    assert code == 0 and "use1-az4" in out
    assert any("zones.allow" in x and "use1-az66" in x for x in err.splitlines() if "warning" in x)


def test_plan_batch_names_the_job_whose_zones_allow_names_no_offered_zone(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    batch = write(tmp_path, "b.yaml", {"jobs": [{**JOB, "name": "a"},
                                                {**JOB, "zones": {"allow": ["use1-az66"]}}]})
    code, _, err = run(capsys, "plan-batch", batch)
    assert code == 2 and "jobs[train-7b].zones.allow" in error_line(err)


@pytest.mark.parametrize(("text", "line"), [
    (HEAD + '"' + ROW, "line 2"),  # the only row opens a quote it never closes
    (HEAD + ROW.replace("H100", '"H100'), "line 2"),
    (HEAD + ROW + ROW.replace("use1-az4", '"use1-az6').rstrip("\n"), "line 3"),  # the last row, no newline
    ('"' + HEAD + ROW, "header"),
])
def test_an_unterminated_quote_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str,
                                        line: str) -> None:
    csv_path = write(tmp_path, "aws.csv", text)
    code, out, err = run(capsys, "plan", write(tmp_path, "job.yaml", JOB), "--catalog", f"aws={csv_path}")
    msg = error_line(err)
    assert code == 2 and out == "" and line in msg and "quote" in msg and "no GPU rows" not in msg


def test_quotes_that_close_are_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = HEAD + ROW.replace("H100", '"H100"') + ROW.replace("use1-az4", '"use1-az6"').rstrip("\n")
    csv_path = write(tmp_path, "aws.csv", text)
    code, _, err = run(capsys, "plan", write(tmp_path, "job.yaml", JOB), "--catalog", f"aws={csv_path}")
    assert code == 0 and "error" not in err


def test_a_gcp_catalog_given_as_aws_names_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   data_file) -> None:  # type: ignore[no-untyped-def]
    gcp = data_file("gcp_vms_sample.csv")
    code, _, err = run(capsys, "plan", write(tmp_path, "job.yaml", JOB), "--catalog", f"aws={gcp}")
    line = error_line(err)
    assert code == 2 and "--catalog aws=" in line and f"--catalog gcp={gcp}" in line


def test_a_gcp_region_in_an_aws_catalog_names_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv_path = write(tmp_path, "aws.csv", HEAD + "g9.2xlarge,L4,1,8,32,1.2,,us-central1,us-central1-a\n")
    code, _, err = run(capsys, "plan", write(tmp_path, "job.yaml", JOB), "--catalog", f"aws={csv_path}")
    assert code == 2 and "--catalog aws=" in error_line(err)


@pytest.mark.parametrize("command", ["plan", "submit"])
def test_a_job_spec_error_starts_with_its_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               command: str) -> None:
    job = write(tmp_path, "job.yaml", {**JOB, "hours": -2})
    argv = [command, job] + (["--stacks", write(tmp_path, "s.json", "{}")] if command == "submit" else [])
    code, _, err = run(capsys, *argv)
    assert code == 2 and error_line(err).startswith(f"placement: error: {job}: hours: ")


def test_a_batch_error_names_the_job(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    jobs = [{**JOB, "name": f"j{i}"} for i in range(5)] + [{**JOB, "hours": "x"}]
    batch = write(tmp_path, "b.yaml", {"jobs": jobs})
    code, _, err = run(capsys, "plan-batch", batch)
    assert code == 2 and error_line(err).startswith(f"placement: error: {batch}: jobs[train-7b].hours: ")


def test_a_batch_job_without_a_usable_name_is_named_by_its_place(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    batch = write(tmp_path, "b.yaml", {"jobs": [JOB, {**JOB, "name": ["x"], "hours": 1}]})
    code, _, err = run(capsys, "plan-batch", batch)
    assert code == 2 and "jobs[1].name" in error_line(err)


def test_checkpoint_times_read_at_a_sensible_precision(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = write(tmp_path, "job.yaml", {**JOB, "capacity": "spot", "checkpoint": {"size_gb": 0.01}})
    code, out, _ = run(capsys, "plan", job)
    text = " ".join(out.split())  # the run line is wrapped; the interval's why follows the write time (issue 36)
    (phrase,) = re.findall(r"checkpoint every ([^;)]*)[;)]", text)
    assert code == 0 and " 0 min" not in f" {phrase}" and "(0 s" not in phrase, phrase
    every, write_time = re.fullmatch(r"([\d.,]+ (?:s|min|h)) \(([\d.,]+ s) to write", phrase).groups()  # type: ignore[union-attr]
    assert float(write_time.split()[0]) > 0 and float(every.split()[0]) > 0


@pytest.mark.parametrize(("minutes", "text"), [(0.0001, "0.006 s"), (0.05, "3.0 s"), (0.5, "30 s"),
                                               (1.6, "1.6 min"), (25, "25 min"), (150, "2.5 h")])
def test_duration_text(minutes: float, text: str) -> None:
    from placement.commands.render import duration_text

    assert duration_text(minutes) == text


@pytest.mark.parametrize(("ready", "deadline"), [(49.859, 49.829), (49.83, 49.829), (49.86, 48.0), (100.04, 100.0),
                                                 (2.0001, 2.0)])
def test_a_missed_deadline_reads_later_than_the_deadline_at_one_precision(ready: float, deadline: float) -> None:
    from placement.model.jobspec import parse_job
    from placement.plan.job import deadline_reason

    job = parse_job({**JOB, "deadline_hours": deadline})
    reason = deadline_reason(job, ready)
    assert reason is not None
    shown_ready, shown_deadline = re.fullmatch(r"ready in ([\d.]+) h, after deadline_hours ([\d.]+)", reason).groups()  # type: ignore[union-attr]
    assert float(shown_ready) > float(shown_deadline), reason
    decimals = [len(x.split(".")[1]) if "." in x else 0 for x in (shown_ready, shown_deadline)]
    assert decimals[1] in (0, decimals[0]), reason  # a whole deadline as written, else the same decimals


@pytest.mark.parametrize("argv", [
    ["plan", "placement/examples/job.yaml", "http://alice:s3cr3t@host:9090"],
    ["calibrate", "--samples", "https://alice:s3cr3t@host/export.json"],
    ["plan", "https://host/job.yaml?token=s3cr3t"],
])
def test_no_error_line_prints_a_credential_of_a_url(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 38: every error line passes through one printer that cuts credentials from URLs, wherever the URL
    came from (a stray argument, a path the user typed)."""
    from placement.commands.main import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "s3cr3t" not in err and "***" in err and "Traceback" not in err


def test_a_warning_never_prints_a_credential_of_a_url(capsys: pytest.CaptureFixture[str]) -> None:
    from placement.commands.common import warn

    warn(["live: gcp billing: no answer from https://bob:s3cr3t@proxy:3128/v1?key=abc"])
    err = capsys.readouterr().err
    assert "s3cr3t" not in err and "abc" not in err and err.count("\n") == 1
