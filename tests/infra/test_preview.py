"""scripts/preview: per-stack resources, GPU capacity and cost from the catalog, the diff against a git ref,
exit codes, and the CI workflow that posts it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra import preview as pv
from infra.replace import uncovered
from placement.model.catalog import embedded_catalog

ROOT = Path(__file__).resolve().parents[2]
STACKS = sorted((ROOT / "stacks").glob("Pulumi.*.yaml"))
TAGS = {"owner": "ml-platform", "cost-center": "cc-1"}


def worker_stack(root: Path) -> str:
    """The first stack of ``root`` with GPU node pools (hubs have none)."""
    for path in sorted((root / "stacks").glob("Pulumi.*.yaml")):
        if (yaml.safe_load(path.read_text())["config"] or {}).get("gpufleet:nodePools"):
            return path.name.removeprefix("Pulumi.").removesuffix(".yaml")
    raise AssertionError(f"no worker stack in {root}/stacks")


def catalog_offer(cloud: str, itype: str, zone: str) -> Any:
    """The one catalog row for ``itype`` in ``zone`` (tests price by hand from it)."""
    rows = [o for o in embedded_catalog().offers if o.cloud == cloud and o.instance_type == itype and o.zone == zone]
    assert len(rows) == 1, (itype, zone, rows)
    return rows[0]


# ----------------------------------------------------------------------------------------------- real stacks


@pytest.fixture(scope="module")
def real() -> dict[str, Any]:
    """The preview document of every stack in stacks/ (one mocked run per stack)."""
    return pv.preview(pv.discover_stacks(ROOT))


def test_every_stack_file_is_previewed(real: dict[str, Any]) -> None:
    assert STACKS, "no stacks/Pulumi.*.yaml"
    assert set(real["stacks"]) == {p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in STACKS}


@pytest.mark.parametrize("stack_file", [p.name for p in STACKS])
def test_real_stack_preview(real: dict[str, Any], stack_file: str) -> None:
    name = stack_file.removeprefix("Pulumi.").removesuffix(".yaml")
    doc = real["stacks"][name]
    assert doc["error"] is None, doc["error"]
    assert doc["resourceCount"] == sum(doc["resources"].values()) > 0
    # Issue 37: the REPLACE table (infra/data/force_new.yaml) covers every type the stack registers.
    assert doc["replaceUnknownTypes"] == [] and not uncovered(doc["resources"])
    assert doc["violations"] == []
    config = yaml.safe_load((ROOT / "stacks" / stack_file).read_text())["config"]
    pools = config.get("gpufleet:nodePools") or []
    assert [p["name"] for p in doc["pools"]] == [p["name"] for p in pools]
    for want, got in zip(pools, doc["pools"], strict=True):
        assert (got["instanceType"], got["minNodes"], got["maxNodes"]) == (
            want["instanceType"], want.get("minNodes", 0), want.get("maxNodes", 1))
        assert got["pricedAs"] == ("spot" if want.get("capacity") == "SPOT" else "on-demand")
        assert got["usdPerNodeHour"] is not None, f"{got['name']} has no catalog price"
        assert got["cost"]["max"]["hour"] == pytest.approx(got["maxNodes"] * got["usdPerNodeHour"], abs=1e-3)
    assert doc["cost"]["max"]["month"] == pytest.approx(
        sum(p["maxNodes"] * p["usdPerNodeHour"] for p in doc["pools"]) * 730, abs=0.05)
    assert doc["gpus"]["max"] == sum(p["maxNodes"] * p["gpusPerNode"] for p in doc["pools"])


def test_text_and_markdown_reports_name_every_stack(real: dict[str, Any]) -> None:
    text, md = pv.render_text(real), pv.render_markdown(real)
    for name, doc in real["stacks"].items():
        assert f"== stack {name}" in text
        assert f"<!-- gpufleet-preview:{name} -->" in md
        for pool in doc["pools"]:
            assert pool["name"] in md and pv.usd(pool["cost"]["max"]["hour"]) in md


# ----------------------------------------------------------------------------------------------- hand-priced pools


def pool_program() -> None:
    """A stack program with no cloud resources: the validated config's pools as outputs, one tagged VPC."""
    import pulumi_aws as aws

    from infra.outputs import export_cluster
    from infra.program import load_config

    cfg = load_config()
    aws.ec2.Vpc("vpc", cidr_block=cfg.network.vpc_cidr, tags=dict(cfg.tags))
    export_cluster(cfg, cluster_name=cfg.cluster_name, kubeconfig="apiVersion: v1", checkpoint_uri="s3://b/c")


def write_stack(root: Path, name: str, region: str, pools: list[dict[str, Any]]) -> Path:
    path = root / "stacks" / f"Pulumi.{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"config": {"gpufleet:cloud": "aws", "gpufleet:region": region,
                                               "gpufleet:nodePools": pools, "gpufleet:tags": TAGS}}))
    return path


def test_pool_costs_are_nodes_times_catalog_price(tmp_path: Path) -> None:
    pools = [
        {"name": "spot", "instanceType": "p5.48xlarge", "capacity": "SPOT", "minNodes": 1, "maxNodes": 3,
         "zone": "use1-az6"},
        {"name": "od", "instanceType": "p4d.24xlarge", "capacity": "ON_DEMAND", "minNodes": 2, "maxNodes": 4,
         "zone": "use1-az6"},
        {"name": "block", "instanceType": "p5.48xlarge", "capacity": "CAPACITY_BLOCK",
         "reservation": "cr-0123456789abcdef0", "minNodes": 2, "maxNodes": 2, "zone": "use1-az6"},
    ]
    path = write_stack(tmp_path, "priced", "us-east-1", pools)
    doc = pv.preview({"priced": path}, program=pool_program)["stacks"]["priced"]
    assert doc["error"] is None and doc["violations"] == []
    assert doc["resources"] == {"aws:ec2/vpc:Vpc": 1}
    p5, p4d = catalog_offer("aws", "p5.48xlarge", "use1-az6"), catalog_offer("aws", "p4d.24xlarge", "use1-az6")
    assert p5.spot_price is not None and p5.price is not None and p4d.price is not None
    spot, od, block = doc["pools"]
    # Spot at the spot price; capacity blocks bill at the on-demand price.
    assert (spot["usdPerNodeHour"], spot["priceSource"], spot["pricedAs"]) == (p5.spot_price, "zone", "spot")
    assert (od["usdPerNodeHour"], od["pricedAs"]) == (p4d.price, "on-demand")
    assert (block["usdPerNodeHour"], block["pricedAs"]) == (p5.price, "on-demand")
    assert spot["cost"]["min"]["hour"] == pytest.approx(1 * p5.spot_price)
    assert spot["cost"]["max"]["month"] == pytest.approx(3 * p5.spot_price * 730, abs=0.01)
    min_hour = 1 * p5.spot_price + 2 * p4d.price + 2 * p5.price
    max_hour = 3 * p5.spot_price + 4 * p4d.price + 2 * p5.price
    assert doc["cost"]["min"]["hour"] == pytest.approx(min_hour, abs=1e-3)
    assert doc["cost"]["max"]["hour"] == pytest.approx(max_hour, abs=1e-3)
    assert doc["cost"]["min"]["month"] == pytest.approx(min_hour * 730, abs=0.01)
    assert doc["cost"]["max"]["month"] == pytest.approx(max_hour * 730, abs=0.01)
    assert doc["gpus"] == {"min": 5 * 8, "max": 9 * 8}


def test_pool_outside_the_catalog_zones_uses_the_regions_cheapest_zone(tmp_path: Path) -> None:
    # Zone names (us-east-1a) differ per account; the catalog keys AWS prices by zone ID.
    path = write_stack(tmp_path, "named", "us-east-1", [
        {"name": "spot", "instanceType": "p5.48xlarge", "capacity": "SPOT", "minNodes": 0, "maxNodes": 2,
         "zone": "us-east-1a"}])
    pool = pv.preview({"named": path}, program=pool_program)["stacks"]["named"]["pools"][0]
    rows = [o for o in embedded_catalog().offers if o.instance_type == "p5.48xlarge" and o.region == "us-east-1"
            and o.spot_price is not None]
    cheapest = min(rows, key=lambda o: (float(o.spot_price or 0), o.zone))
    assert (pool["usdPerNodeHour"], pool["priceSource"], pool["priceZone"]) == (cheapest.spot_price, "region",
                                                                                cheapest.zone)
    assert "region's cheapest zone" in pv.render_text(pv.preview({"named": path}, program=pool_program))


def test_pool_without_a_catalog_price_is_flagged(tmp_path: Path) -> None:
    # A zone the catalog offers the type in, but without an on-demand price (a pool where the catalog has no
    # offer at all is refused by the config parser).
    offer = next(o for o in embedded_catalog().offers if o.cloud == "aws" and o.price is None)
    path = write_stack(tmp_path, "unpriced", offer.region, [
        {"name": "gpu", "instanceType": offer.instance_type, "capacity": "ON_DEMAND", "minNodes": 0, "maxNodes": 1,
         "zone": offer.zone}])
    new = pv.preview({"unpriced": path}, program=pool_program)
    doc = new["stacks"]["unpriced"]
    assert doc["pools"][0]["usdPerNodeHour"] is None and doc["pools"][0]["priceSource"] == "none"
    assert doc["cost"]["unpricedPools"] == ["gpu"]
    assert "no catalog price" in pv.render_text(new).lower()
    assert "No catalog price" in pv.render_markdown(new)


# ----------------------------------------------------------------------------------------------- exit codes


def run_script(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "preview"), *args], cwd=cwd,
                          capture_output=True, text=True, check=False)


def test_unknown_stack_is_exit_2_with_one_line() -> None:
    done = run_script("--stack", "no-such-stack")
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "no-such-stack" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_bad_ref_is_exit_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert pv.main(["--stack", worker_stack(ROOT), "--base", "no-such-ref-8c1f"]) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and "no-such-ref-8c1f" in err


def test_mandatory_violation_is_exit_1_naming_resource_and_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    import infra.program

    def open_launch_template() -> None:
        import pulumi_aws as aws

        aws.ec2.LaunchTemplate("nodes-lt", metadata_options={"http_tokens": "optional"}, tags=TAGS)

    write_stack(tmp_path, "bad", "us-east-1", [{"name": "g", "instanceType": "g6.xlarge", "zone": "use1-az6"}])
    monkeypatch.setattr(infra.program, "main", open_launch_template)
    assert pv.main(["--root", str(tmp_path), "--format", "markdown"]) == 1
    captured = capsys.readouterr()
    assert "imdsv2-required" in captured.err and "nodes-lt" in captured.err
    assert "`imdsv2-required` on `nodes-lt`" in captured.out


def hub_and_worker(root: Path, linked: bool) -> str:
    """stacks/ under ``root``: the example hub dispatching to one example worker, which reads the hub's egress
    by StackReference (``linked``) or has neither that nor a public endpoint."""
    worker = "aws-usw2-p4d"
    (root / "stacks").mkdir(parents=True)
    doc = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{worker}.yaml").read_text())
    if not linked:
        doc["config"]["gpufleet:cluster"].pop("hubStack")
        doc["config"]["gpufleet:cluster"]["publicAccess"] = False
    (root / "stacks" / f"Pulumi.{worker}.yaml").write_text(yaml.safe_dump(doc))
    hub = yaml.safe_load((ROOT / "stacks" / "Pulumi.hub.yaml").read_text())
    hub["config"]["gpufleet:hub"]["workers"] = [f"org/gpufleet/{worker}"]
    (root / "stacks" / "Pulumi.hub.yaml").write_text(yaml.safe_dump(hub))
    return worker


def test_hub_that_cannot_reach_a_worker_fails_like_a_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    egress = yaml.safe_load((ROOT / "stacks" / "Pulumi.hub.yaml").read_text())["config"]["gpufleet:hub"]["egressCidrs"]
    worker = hub_and_worker(tmp_path / "bad", linked=False)
    assert pv.main(["--root", str(tmp_path / "bad"), "--stack", "hub"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == len(egress), err
    for line, cidr in zip(err, egress, strict=True):
        assert line.startswith(f"preview: hub: mandatory policy hub-reaches-workers violated by {worker} ")
        assert "gpufleet:cluster.hubStack" in line and cidr in line and "Traceback" not in line

    # The example worker reads the hub's NAT egress by StackReference into its public endpoint's allow-list.
    hub_and_worker(tmp_path / "good", linked=True)
    assert pv.main(["--root", str(tmp_path / "good"), "--stack", "hub"]) == 0


def test_broken_stack_program_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_stack(tmp_path, "broken", "us-east-1", [{"name": "g", "instanceType": "no-such-shape", "zone": "use1-az6"}])
    assert pv.main(["--root", str(tmp_path), "--format", "json"]) == 2
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert "nodePools[0].instanceType" in doc["stacks"]["broken"]["error"]
    assert "Traceback" not in captured.err



@pytest.mark.parametrize("text", ["config: [1, 2]\n", "- a list\n", "config:\n  gpufleet:region: [\n",
                                  "config: &a [*a]\n", "\x00\xff\n"])
def test_a_malformed_stack_file_fails_that_stack_alone_with_exit_2(tmp_path: Path, text: str,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 38: a malformed stack file is bad input (exit 2, not 1, the policy code), one line naming the file,
    no traceback; the other stacks are still previewed."""
    good = worker_stack(ROOT)
    shutil.copytree(ROOT / "stacks", tmp_path / "stacks")  # the worker's stack reference reads the hub's file
    (tmp_path / "stacks" / "Pulumi.bad.yaml").write_bytes(text.encode("latin-1"))
    assert pv.main(["--root", str(tmp_path), "--format", "json", "--stack", good, "--stack", "bad"]) == 2
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert doc["stacks"][good]["error"] is None and doc["stacks"][good]["pools"]
    assert "Pulumi.bad.yaml" in doc["stacks"]["bad"]["error"]
    assert "Traceback" not in captured.err and captured.err.strip().splitlines() == \
        [f"preview: stack bad failed: {doc['stacks']['bad']['error']}"]


# ----------------------------------------------------------------------------------------------- --base


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
                          capture_output=True, text=True, check=True)
    return done.stdout


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A copy of the project in a scratch git repo, four commits:

    HEAD~3 stacks only (no scripts/preview), HEAD~2 a scripts/preview that crashes, HEAD~1 the project,
    HEAD the project with one node pool added to one stack.
    """
    repo = tmp_path_factory.mktemp("history") / "repo"
    ignore = shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.egg-info", ".mypy_cache", ".ruff_cache",
                                    ".pytest_cache", ".hypothesis")
    shutil.copytree(ROOT / "stacks", repo / "stacks", ignore=ignore)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "stacks only")
    (repo / "scripts").mkdir()
    (repo / "scripts" / "preview").write_text("import sys\nsys.exit('preview crashed in the base')\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "broken preview")
    shutil.rmtree(repo / "scripts")
    shutil.copytree(ROOT, repo, ignore=ignore, dirs_exist_ok=True)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "project")

    stack = worker_stack(repo)
    path = repo / "stacks" / f"Pulumi.{stack}.yaml"
    doc = yaml.safe_load(path.read_text())
    first = doc["config"]["gpufleet:nodePools"][0]
    added = {"name": "preview-added", "instanceType": first["instanceType"], "capacity": "SPOT",
             "minNodes": 1, "maxNodes": 3}
    if first.get("zone"):
        added["zone"] = first["zone"]
    doc["config"]["gpufleet:nodePools"].append(added)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    git(repo, "commit", "-q", "-am", "add a node pool")
    zone = added.get("zone") or doc["config"]["gpufleet:gpuZone"]
    return {"repo": repo, "stack": stack, "pool": added, "cloud": doc["config"]["gpufleet:cloud"], "zone": zone}


def worktrees(repo: Path) -> list[str]:
    return [line for line in git(repo, "worktree", "list", "--porcelain").splitlines() if line.startswith("worktree ")]


def test_diff_against_a_ref_shows_the_added_pool_and_its_cost(history: dict[str, Any],
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    repo, stack, pool = history["repo"], history["stack"], history["pool"]
    code = pv.main(["--root", str(repo), "--stack", stack, "--base", "HEAD~1", "--format", "json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["base"]["commit"] == git(repo, "rev-parse", "HEAD~1").strip()
    d = doc["diff"][stack]
    offer = catalog_offer(history["cloud"], pool["instanceType"], history["zone"])
    assert [p["name"] for p in d["poolsAdded"]] == ["preview-added"] and d["poolsRemoved"] == []
    added = d["poolsAdded"][0]
    assert added["usdPerNodeHour"] == offer.spot_price
    assert d["cost"]["min.hour"]["change"] == pytest.approx(1 * offer.spot_price, abs=1e-3)
    assert d["cost"]["max.hour"]["change"] == pytest.approx(3 * offer.spot_price, abs=1e-3)
    assert d["cost"]["max.month"]["change"] == pytest.approx(3 * offer.spot_price * 730, abs=0.05)
    assert d["cost"]["max.hour"]["new"] - d["cost"]["max.hour"]["baseline"] == pytest.approx(3 * offer.spot_price,
                                                                                           abs=1e-3)
    assert d["resources"], "an added pool adds resources"
    assert worktrees(repo) == [f"worktree {repo}"]

    md = pv.render_markdown(doc, doc["base"])
    assert "| GPU nodes | baseline | new | change |" in md
    assert f"+{pv.usd(3 * offer.spot_price)}" in md
    assert "| preview-added |" in md and "| added |" in md


def test_the_text_says_zero_replacements_and_the_fleet_total(history: dict[str, Any],
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 38: a diff that replaces nothing says so ("replacements: 0"), and every preview ends with the fleet's
    total (text, markdown and JSON), against the baseline when there is one."""
    repo, stack = history["repo"], history["stack"]
    assert pv.main(["--root", str(repo), "--stack", stack, "--base", "HEAD~1", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    text, md = pv.render_text(doc, doc["base"]), pv.render_markdown(doc, doc["base"])
    assert "  replacements: 0 (pulumi up replaces or deletes nothing in this stack)" in text
    assert "== fleet total: 1 stack(s)" in text and "### gpufleet preview: fleet total" in md
    total = doc["total"]
    assert total["stacks"] == 1
    assert total["cost"]["max.hour"] == pytest.approx(doc["stacks"][stack]["cost"]["max"]["hour"], abs=0.01)
    assert total["change"]["max.hour"] == pytest.approx(doc["diff"][stack]["cost"]["max.hour"]["change"], abs=0.01)


def test_base_without_scripts_preview_has_no_stacks(history: dict[str, Any],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    repo, stack = history["repo"], history["stack"]
    assert pv.main(["--root", str(repo), "--stack", stack, "--base", "HEAD~3", "--format", "text"]) == 0
    out = capsys.readouterr().out
    assert "baseline" in out and "+ pool preview-added" in out
    assert worktrees(repo) == [f"worktree {repo}"]


def test_failing_base_preview_is_exit_2_and_the_worktree_is_removed(history: dict[str, Any],
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    repo, stack = history["repo"], history["stack"]
    assert pv.main(["--root", str(repo), "--stack", stack, "--base", "HEAD~2"]) == 2
    err = capsys.readouterr().err
    assert "preview crashed in the base" in err and err.strip().count("\n") == 0
    assert worktrees(repo) == [f"worktree {repo}"]



def test_a_base_whose_only_fault_is_a_malformed_stack_file_is_still_a_baseline(
        history: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 38: the base's stack file is malformed, the new one is fixed: the preview is the new stack's, with
    no baseline for it, exit 0 (it failed whole before). The base commit is made without touching the work tree."""
    import os

    repo, stack = history["repo"], history["stack"]
    env = {**os.environ, "GIT_INDEX_FILE": str(tmp_path / "index")}

    def plumb(*args: str, stdin: str | None = None) -> str:
        return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
                              input=stdin, env=env, capture_output=True, text=True, check=True).stdout.strip()

    plumb("read-tree", "HEAD~1")
    blob = plumb("hash-object", "-w", "--stdin", stdin="config: [not, a, mapping]\n")
    plumb("update-index", "--cacheinfo", f"100644,{blob},stacks/Pulumi.{stack}.yaml")
    base = plumb("commit-tree", plumb("write-tree"), "-p", "HEAD~1", "-m", "a malformed stack file")
    code = pv.main(["--root", str(repo), "--stack", stack, "--base", base, "--format", "json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    doc = json.loads(captured.out)
    assert f"Pulumi.{stack}.yaml" in doc["base"]["stacks"][stack]["error"]
    assert doc["stacks"][stack]["error"] is None and doc["stacks"][stack]["pools"]
    assert "Traceback" not in captured.err and worktrees(repo) == [f"worktree {repo}"]


# ----------------------------------------------------------------------------------------------- workflow


def test_workflow_runs_tests_then_previews_each_stack() -> None:
    wf = yaml.safe_load((ROOT / ".github" / "workflows" / "preview.yml").read_text())
    on = wf.get("on", wf.get(True))  # YAML 1.1 reads a bare `on` key as True
    assert {"infra/**", "stacks/**", "placement/data/**", "Pulumi.yaml"} <= set(on["pull_request"]["paths"])
    jobs = wf["jobs"]
    assert any("bash .ci/run" in str(s.get("run", "")) for s in jobs["test"]["steps"])
    preview = jobs["preview"]
    assert "test" in preview["needs"] and preview["permissions"]["id-token"] == "write"
    assert "fromJSON" in str(preview["strategy"]["matrix"]["include"])
    steps = {s.get("uses", "").split("@")[0]: s for s in preview["steps"] if "uses" in s}
    pulumi = steps["pulumi/actions"]
    assert pulumi["uses"].endswith("@v6") and pulumi["with"]["command"] == "preview"
    assert pulumi["with"]["comment-on-pr"] is True and pulumi["with"]["edit-pr-comment"] is True
    assert "matrix.stack" in pulumi["with"]["stack-name"]
    assert pulumi["env"]["PULUMI_ACCESS_TOKEN"] == "${{ secrets.PULUMI_ACCESS_TOKEN }}"
    aws = steps["aws-actions/configure-aws-credentials"]["with"]
    assert aws["role-to-assume"] == "${{ vars.AWS_PREVIEW_ROLE_ARN }}"
    gcp = steps["google-github-actions/auth"]["with"]
    assert gcp == {"workload_identity_provider": "${{ vars.GCP_WORKLOAD_IDENTITY_PROVIDER }}",
                   "service_account": "${{ vars.GCP_PREVIEW_SERVICE_ACCOUNT }}"}
    assert "header" in steps["marocchino/sticky-pull-request-comment"]["with"]
    script = " ".join(str(s.get("run", "")) for s in preview["steps"])
    assert "scripts/preview" in script and "--format markdown" in script and "--base" in script
    text = (ROOT / ".github" / "workflows" / "preview.yml").read_text()
    assert text.count("secrets.") == 1, "the Pulumi token is the only secret"


def test_stack_discovery_step_matches_the_stack_files(tmp_path: Path) -> None:
    wf = yaml.safe_load((ROOT / ".github" / "workflows" / "preview.yml").read_text())
    step = next(s for s in wf["jobs"]["stacks"]["steps"] if s.get("id") == "list")
    out = tmp_path / "github_output"
    subprocess.run([sys.executable, "-c", step["run"]], cwd=ROOT, env={"GITHUB_OUTPUT": str(out)}, check=True,
                   capture_output=True)
    rows = json.loads(out.read_text().split("=", 1)[1])
    assert [r["stack"] for r in rows] == [p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in STACKS]
    assert all(r["cloud"] in ("aws", "gcp") and r["region"] for r in rows)


def test_a_config_error_reads_as_pulumi_up_prints_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``invalid stack config: ...`` as `pulumi up` prints a RunError, without the exception class (issue 30)."""
    write_stack(tmp_path, "broken", "us-east-1", [{"name": "g", "instanceType": "no-such-shape", "zone": "use1-az6"}])
    assert pv.main(["--root", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert "invalid stack config: " in text and "RunError" not in text and "Traceback" not in text
    assert pv.main(["--root", str(tmp_path), "--format", "json"]) == 2
    assert json.loads(capsys.readouterr().out)["stacks"]["broken"]["error"].startswith("invalid stack config: ")
