"""``submit --via-hub`` checks before it creates (issue 21): every member's kubeconfig first, what a partial
submit left and how to remove it, the API server's annotation size limit, and hub outputs it cannot read."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from siblings import sibling

helpers: Any = sibling(__file__, "test_submit.py")
FakeKube, outputs, run, write = helpers.FakeKube, helpers.outputs, helpers.run, helpers.write
job_file = helpers.job_file


@pytest.fixture
def clusters(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    fakes = {"hub": FakeKube(), "aws-use1-p5": FakeKube(), "aws-use2-p5": FakeKube()}
    yield fakes
    for f in fakes.values():
        f.close()


def _stacks(tmp_path: Path, clusters: dict[str, Any], second_kubeconfig: Any = None) -> tuple[str, str]:
    docs = {"aws-use1-p5": outputs("aws-use1-p5", clusters["aws-use1-p5"].kubeconfig),
            "aws-use2-p5": {**helpers._second_p5(fsx=True),
                            "kubeconfig": second_kubeconfig or clusters["aws-use2-p5"].kubeconfig},
            "hub": helpers._hub_with({"aws-use2-p5": "gpufleet-aws-use2-p5"})}
    return (write(tmp_path, "stacks.json", docs),
            write(tmp_path, "hub.kubeconfig", yaml.safe_dump(clusters["hub"].kubeconfig)))


def test_an_unusable_member_kubeconfig_is_found_before_anything_is_created(tmp_path, capsys, clusters):
    broken = clusters["aws-use2-p5"].kubeconfig
    broken["users"][0]["user"] = {"exec": {"apiVersion": "client.authentication.k8s.io/v1",
                                           "command": str(tmp_path / "no-such-aws-cli")}}
    stacks, hub = _stacks(tmp_path, clusters, broken)
    job, _ = job_file(tmp_path)
    code, out, err = run(capsys, "submit", job, "--stacks", stacks, "--via-hub", "--kubeconfig", hub)
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "aws-use2-p5" in err and "nothing was created" in err
    assert all(not f.posts() for f in clusters.values())  # not on the first member either


def test_a_failure_part_way_says_what_it_created_and_how_to_remove_it(tmp_path, capsys, clusters):
    stacks, hub = _stacks(tmp_path, clusters)
    job, _ = job_file(tmp_path)
    first, second = "aws-use2-p5", "aws-use1-p5"  # the group's order: storage on the first, then the second
    clusters[second].raw["/configmaps"] = [(500, helpers._status(500, "InternalError", "etcd timed out"))]
    code, out, err = run(capsys, "submit", job, "--stacks", stacks, "--via-hub", "--kubeconfig", hub)
    assert code == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert clusters[first].posts() and not clusters["hub"].posts()
    assert f"created so far: {first}: ConfigMap team-a/" in err
    assert f"kubectl --kubeconfig <{first} kubeconfig> delete configmap -n team-a " in err
    assert "delete persistentvolume " in err and "a retry reuses them" in err


@pytest.mark.parametrize("dry_run", [True, False])
def test_an_annotation_over_the_api_limit_is_refused_before_any_request(tmp_path, capsys, clusters, dry_run):
    stacks, hub = _stacks(tmp_path, clusters)
    job, _ = job_file(tmp_path, command=["torchrun", "train.py", "--notes", "x" * 300_000])
    code, out, err = run(capsys, "submit", job, "--stacks", stacks, "--via-hub", "--kubeconfig", hub,
                         *(["--dry-run"] if dry_run else []))
    assert code == 2 and out == "" and "Traceback" not in err
    (line,) = err.strip().splitlines()
    assert "annotations total" in line and "256 KiB" in line
    assert all(not f.requests for f in clusters.values())


@pytest.mark.parametrize("value", [{"cluster": "x"}, 7, None, ["a"]])
def test_hub_outputs_with_a_worker_that_is_not_a_string_name_the_output(tmp_path, capsys, value):
    docs = {"aws-use1-p5": outputs("aws-use1-p5"), "hub": helpers._hub_with({"aws-use2-p5": value})}
    job, _ = job_file(tmp_path)
    code, out, err = run(capsys, "submit", job, "--stacks", write(tmp_path, "s.json", docs), "--via-hub",
                         "--dry-run")
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "hub.workers.aws-use2-p5" in err
