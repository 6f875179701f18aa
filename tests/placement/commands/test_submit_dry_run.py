"""``placement submit --dry-run`` on the shipped example stack outputs: which cluster each object goes to, and a
job without a command."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from placement.commands.main import main

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE_STACKS = str(ROOT / "placement" / "examples" / "stacks-outputs.json")
EXAMPLE_JOB = str(ROOT / "placement" / "examples" / "job.yaml")


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def documents_with_comments(stream: str) -> list[tuple[list[str], dict]]:
    """(comment lines above it, object) for each document of a YAML stream."""
    out = []
    for part in stream.split("\n---\n"):
        comments = [ln[2:] for ln in part.splitlines() if ln.startswith("# ")]
        out.append((comments, yaml.safe_load(part)))
    return out


def containers(obj):
    """Every container mapping anywhere in a Kubernetes object."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key == "containers":
                yield from value
            else:
                yield from containers(value)
    elif isinstance(obj, list):
        for value in obj:
            yield from containers(value)


def test_example_stack_outputs_make_submit_dry_run_work(capsys):
    code, out, err = run(capsys, "submit", EXAMPLE_JOB, "--stacks", EXAMPLE_STACKS, "--dry-run")
    assert code == 0, err
    docs = documents_with_comments(out)
    assert docs[-1][1]["kind"] in ("Job", "JobSet")
    header = " ".join(docs[0][0])
    assert "cluster gpufleet-" in header and "every object below" in header
    assert all(not comments for comments, _ in docs[1:])  # one cluster: one header


def test_via_hub_dry_run_says_which_cluster_each_object_goes_to(capsys):
    code, out, err = run(capsys, "submit", EXAMPLE_JOB, "--stacks", EXAMPLE_STACKS, "--dry-run", "--via-hub")
    assert code == 0, err
    docs = documents_with_comments(out)
    *storage, (hub_comments, job) = docs
    assert job["kind"] in ("Job", "JobSet") and "hub" in " ".join(hub_comments)
    assert storage and "worker" in " ".join(storage[0][0])
    stacks = json.loads(Path(EXAMPLE_STACKS).read_text())
    cluster = storage[0][1]["metadata"]["annotations"]["gpufleet.io/cluster"]
    assert f"cluster {stacks[cluster]['clusterName']}" in " ".join(storage[0][0])
    assert "ready for kubectl apply" not in err and "not one `kubectl apply` of the whole stream" in err


def test_via_hub_json_names_the_cluster_of_every_manifest_object(capsys):
    code, out, _ = run(capsys, "submit", EXAMPLE_JOB, "--stacks", EXAMPLE_STACKS, "--dry-run", "--via-hub", "--json")
    assert code == 0
    doc = json.loads(out)
    dest = doc["manifest_clusters"]
    assert len(dest) == len(doc["manifest"])
    assert dest[-1]["role"] == "hub" and dest[-1]["stack"] == "hub"
    assert {d["role"] for d in dest[:-1]} == {"worker"}
    for obj, d in zip(doc["manifest"][:-1], dest[:-1], strict=True):
        assert obj["metadata"]["annotations"]["gpufleet.io/cluster"] == d["worker"]


def test_job_without_command_runs_the_image_entrypoint_and_says_so(tmp_path, capsys):
    job = yaml.safe_load(Path(EXAMPLE_JOB).read_text())
    job.pop("command", None)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    code, out, err = run(capsys, "submit", str(path), "--stacks", EXAMPLE_STACKS, "--dry-run")
    assert code == 0
    assert "has no command: the container runs the image's own entrypoint" in err
    (training,) = [c for c in containers(documents_with_comments(out)[-1][1]) if c["image"] == job.get(
        "image", "nvcr.io/nvidia/pytorch:25.10-py3")]
    assert "command" not in training
    job["command"] = ["torchrun", "train.py"]
    path.write_text(yaml.safe_dump(job))
    code, out, err = run(capsys, "submit", str(path), "--stacks", EXAMPLE_STACKS, "--dry-run")
    assert code == 0 and "has no command" not in err
