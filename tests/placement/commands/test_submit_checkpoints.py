"""``placement submit`` gives every job one durable checkpoint home and prices what the pod actually writes to
(issue 25, items 2 and 3): the env and annotations of the home, the interval for the mounted FSx tier, and the
restart budget of a job sent through the hub sized for the most interruption-prone pool its affinity admits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from siblings import sibling

from placement.fleet import durable, manifests
from placement.model.catalog import embedded_catalog
from placement.model.jobspec import parse_job
from placement.plan.job import candidates, checkpoint_write_hours

helpers: Any = sibling(__file__, "test_submit.py")

# The example: a 70B LoRA job, 16 H100s for 48 hours.
LORA = {"name": "lora-70b", "accelerator": "H100", "gpus": 16, "hours": 48, "team": "team-a", "priority": "burst",
        "command": ["python", "-m", "placement.trainer.launch", "--", "python", "train.py"],
        "model": {"parameters_b": 70, "training": "adapter"}, "clouds": {"allow": ["aws"]}}
TIER = 250


def _aws_p5(tier: int | None = TIER) -> dict[str, Any]:
    out = helpers.outputs("aws-use1-p5")
    fs = dict(out["checkpointFilesystem"], claimName="gpufleet-checkpoints")
    if tier is not None:
        fs["throughputMbpsPerTib"] = tier
    out["checkpointFilesystem"] = fs
    return out


def _submit(tmp_path: Path, capsys: pytest.CaptureFixture[str], stacks: dict[str, Any], job: dict[str, Any],
            *extra: str) -> dict[str, Any]:
    path, _ = helpers.job_file(tmp_path, **job)
    code, out, err = helpers.run(capsys, "submit", path, "--stacks", helpers.write(tmp_path, "s.json", stacks),
                                 "--dry-run", "--json", *extra)
    assert code == 0, err
    return json.loads(out)


def _env(result: dict[str, Any]) -> dict[str, Any]:
    (container,) = helpers.pod_of(result["manifest"][-1])["spec"]["containers"]
    return helpers.env_of(container)


def _offers(zone: str = "use1-az6") -> list[Any]:
    return [o for o in embedded_catalog().offers if (o.cloud, o.region, o.zone, o.instance_type) == (
        "aws", "us-east-1", zone, "p5.48xlarge")]


def test_the_interval_is_priced_for_the_mounted_fsx_tier(tmp_path, capsys):
    result = _submit(tmp_path, capsys, {"aws-use1-p5": _aws_p5()}, LORA)
    chosen = result["chosen"]
    base = {"name": "x", "accelerator": "H100", "gpus": 16, "hours": 48, **LORA}
    fsx = durable.Destination(kind="fsx", engine="fsx-lustre", capacity_gb=2400, tier=TIER, mounted=True)
    store = durable.Destination(kind="s3", engine="object-store")
    job_fsx = durable.priced_job(parse_job(base), fsx)
    on_fsx = next(c for c in candidates(job_fsx, _offers())
                  if c.capacity == chosen["capacity"] and c.nodes == chosen["nodes"])
    on_s3 = next(c for c in candidates(durable.priced_job(parse_job(base), store), _offers())
                 if c.capacity == chosen["capacity"] and c.nodes == chosen["nodes"])
    want = manifests.planned_interval_seconds(job_fsx, on_fsx)
    assert want != manifests.planned_interval_seconds(job_fsx, on_s3)  # the two destinations disagree
    assert _env(result)["GPUFLEET_CHECKPOINT_INTERVAL_SECONDS"] == str(want)
    ck = chosen["run"]["checkpoint"]
    assert ck["destination"] == "fsx" and ck["priced_as"] == "fsx-lustre" and ck["tier_mbps_per_tib"] == TIER
    assert ck["write_seconds"] == pytest.approx(checkpoint_write_hours(job_fsx, on_fsx.nodes) * 3600, rel=1e-3)
    assert ck["write_seconds"] > 10 * on_s3.checkpoint_write_minutes * 60  # ~18 s on FSx vs < 1 s to S3
    assert ck["overhead"] == pytest.approx(on_fsx.cost.spot_overhead, abs=1e-6)


def test_a_slower_tier_gives_a_longer_write(tmp_path, capsys):
    fast = _submit(tmp_path, capsys, {"aws-use1-p5": _aws_p5(1000)}, LORA)["chosen"]["run"]["checkpoint"]
    slow = _submit(tmp_path, capsys, {"aws-use1-p5": _aws_p5(125)}, LORA)["chosen"]["run"]["checkpoint"]
    assert slow["write_seconds"] == pytest.approx(8 * fast["write_seconds"], rel=1e-3)


def test_the_pod_is_told_its_home_cache_and_job(tmp_path, capsys):
    result = _submit(tmp_path, capsys, {"aws-use1-p5": _aws_p5()}, LORA)
    env = _env(result)
    home = f"{_aws_p5()['checkpointUri']}/lora-70b"
    assert env["GPUFLEET_CHECKPOINT_DIR"] == home
    assert env["GPUFLEET_CHECKPOINT_CACHE_DIR"] == "/checkpoints/lora-70b"
    assert env["GPUFLEET_CHECKPOINT_DESTINATION"] == "fsx" and env["GPUFLEET_CHECKPOINT_TIER"] == str(TIER)
    assert env["GPUFLEET_CHECKPOINT_KEEP"] == "3" and env["GPUFLEET_METRICS_PORT"] == "9400"
    assert env["GPUFLEET_TEAM"] == "team-a" and env["GPUFLEET_WORKLOAD"] == "llm"
    assert env["GPUFLEET_ACCELERATOR"] == "H100" and env["GPUFLEET_NODES"] == "2"
    assert env["GPUFLEET_GPUS_PER_NODE"] == "8"
    ann = result["manifest"][-1]["metadata"]["annotations"]
    assert ann[durable.HOME_ANNOTATION] == home and ann[durable.REGION_ANNOTATION] == "aws:us-east-1"
    assert float(ann[durable.GB_ANNOTATION]) == pytest.approx(durable.checkpoint_size_gb(parse_job(
        {"name": "x", "accelerator": "H100", "gpus": 16, "hours": 48, **LORA})))


def test_without_a_filesystem_the_home_is_the_bucket_and_there_is_no_cache(tmp_path, capsys):
    out = helpers.outputs("aws-use1-p5")
    out["checkpointFilesystem"] = None
    result = _submit(tmp_path, capsys, {"aws-use1-p5": out}, LORA)
    env = _env(result)
    assert env["GPUFLEET_CHECKPOINT_DIR"] == f"{out['checkpointUri']}/lora-70b"
    assert "GPUFLEET_CHECKPOINT_CACHE_DIR" not in env
    assert env["GPUFLEET_CHECKPOINT_DESTINATION"] == "s3" and "GPUFLEET_CHECKPOINT_TIER" not in env
    assert result["chosen"]["run"]["checkpoint"]["priced_as"] == "object-store"


def test_via_hub_restarts_are_sized_for_the_spot_pool_the_affinity_admits(tmp_path, capsys):
    # Spot reclaims so frequent that the plan picks the on-demand pool; the JobSet's affinity still admits the
    # group's spot pool, where a worker's flavor order (spot first on aws-use1-p5) would put it.
    job = {**LORA, "spot": {"interruptions_per_hour": 2, "restart_minutes": 15}}
    stacks = {"aws-use1-p5": _aws_p5(), "hub": helpers.hub_outputs("External")}
    result = _submit(tmp_path, capsys, stacks, job, "--via-hub")
    chosen = result["chosen"]
    assert chosen["capacity"] == "on-demand" and "h100-spot" in chosen["group"]["pools"]
    run = chosen["run"]
    assert "h100-spot spot" in run["restart_basis"]
    planned = next(c for c in candidates(parse_job({"name": "x", **job}), _offers())
                   if c.capacity == "on-demand" and c.nodes == chosen["nodes"])
    assert manifests.restart_budget(planned.expected_interruptions) == manifests.MIN_RESTARTS
    assert run["max_restarts"] > manifests.MIN_RESTARTS
    assert run["max_restarts"] == manifests.restart_budget(run["expected_interruptions"])
    js = result["manifest"][-1]
    assert js["spec"]["failurePolicy"]["maxRestarts"] == run["max_restarts"]
    env = _env(result)
    assert env["GPUFLEET_MAX_RESTARTS"] == str(run["max_restarts"])
    # One home, whichever worker admits it: the planned worker's bucket, written to directly (another worker's
    # FSx would sync to that worker's own bucket).
    assert env["GPUFLEET_CHECKPOINT_DIR"] == f"{_aws_p5()['checkpointUri']}/lora-70b"
    assert js["metadata"]["annotations"][durable.HOME_ANNOTATION] == env["GPUFLEET_CHECKPOINT_DIR"]


def test_the_trainer_metrics_port_is_named_and_annotated_for_scraping(tmp_path, capsys):
    """The trainer serves its metrics on GPUFLEET_METRICS_PORT; the pod names that port and carries the
    annotations a Prometheus `kubernetes-pods` job scrapes, so `placement calibrate`/`report` can read them."""
    result = _submit(tmp_path, capsys, {"aws-use1-p5": _aws_p5()}, LORA)
    pod = helpers.pod_of(result["manifest"][-1])
    (container,) = pod["spec"]["containers"]
    assert {"name": "metrics", "containerPort": 9400, "protocol": "TCP"} in container["ports"]
    ann = pod["metadata"]["annotations"]
    assert ann["prometheus.io/scrape"] == "true" and ann["prometheus.io/port"] == "9400"
