"""Issue 28: the dispatcher image's build context, locked dependencies, pinned base and pull secret."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from infra.config import ConfigError, parse
from infra.config.dispatch import DispatchConfig
from infra.k8s.dispatch_image import DOCKERFILE, DOCKERIGNORE
from infra.k8s.dispatcher import deployment_spec

ROOT = Path(__file__).resolve().parents[2]


def _pattern(rule: str) -> re.Pattern[str]:
    """A .dockerignore pattern (Go filepath.Match plus ``**``) as a regex over slash-separated paths."""
    out, i = "", 0
    rule = rule.strip("/")
    while i < len(rule):
        if rule.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif rule.startswith("**", i):
            out, i = out + ".*", i + 2
        elif rule[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif rule[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(rule[i]), i + 1
    return re.compile(out)


def context_files() -> list[str]:
    """The checkout's files the build context keeps under placement/dispatch/Dockerfile.dockerignore (the last
    matching rule wins; a rule matching a directory covers what is below it)."""
    rules = [line.strip() for line in (ROOT / DOCKERIGNORE).read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    compiled = [(r.startswith("!"), _pattern(r.lstrip("!"))) for r in rules]
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files", "--cached", "--others", "--exclude-standard"],
                             capture_output=True, text=True, check=True).stdout.split()
    kept = []
    for path in tracked:
        parts = path.split("/")
        prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
        excluded = False
        for negate, pattern in compiled:
            if any(pattern.fullmatch(p) for p in prefixes):
                excluded = not negate
        if not excluded and (ROOT / path).is_file():
            kept.append(path)
    return kept


def test_build_context_is_only_what_the_image_copies() -> None:
    kept = context_files()
    assert kept and all(p.startswith("placement/") for p in kept), [p for p in kept if not p.startswith("placement/")]
    assert "placement/dispatch/requirements.txt" in kept and "placement/dispatch/decide.py" in kept
    assert not any(p.startswith(("tests/", "infra/", "docs/", "stacks/")) or p in ("uv.lock", "README.md")
                   for p in kept)
    dockerfile = (ROOT / DOCKERFILE).read_text()
    sources = [line.split()[1] for line in dockerfile.splitlines() if line.startswith("COPY ")]
    assert sources and all(any(k == s or k.startswith(s.rstrip("/") + "/") for k in kept) for s in sources), sources


def test_base_is_pinned_by_digest_and_dependencies_come_from_the_lock() -> None:
    dockerfile = (ROOT / DOCKERFILE).read_text()
    (base,) = [line for line in dockerfile.splitlines() if line.startswith("FROM ")]
    assert re.fullmatch(r"FROM [\w./:-]+@sha256:[0-9a-f]{64}", base), base
    assert "pip install --no-deps --require-hashes -r /tmp/requirements.txt" in dockerfile
    assert "pip install ." not in dockerfile and "pip install \"." not in dockerfile
    requirements = (ROOT / "placement" / "dispatch" / "requirements.txt").read_text()
    pins = re.findall(r"^([A-Za-z0-9_.-]+)==", requirements, re.M)
    assert {"kubernetes", "prometheus-client", "boto3", "pyyaml", "highspy"} <= {p.lower() for p in pins}
    assert all("--hash=sha256:" in block for block in requirements.split("==")[1:])
    done = subprocess.run([str(ROOT / "scripts" / "dispatch_requirements"), "--check"], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_the_image_program_runs_from_the_context_alone(tmp_path: Path) -> None:
    for path in context_files():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / path, tmp_path / path)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "GPUFLEET_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-m", "placement", "dispatch", "--help"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr


def _hub(**dispatch: object) -> dict[str, object]:
    import yaml

    raw = {k.split(":", 1)[1]: v
           for k, v in yaml.safe_load((ROOT / "stacks" / "Pulumi.hub.yaml").read_text())["config"].items()}
    return {**raw, "hub": {**raw["hub"], "dispatcher": "External", "dispatch": dispatch}}


def test_a_hub_that_is_not_eks_or_gke_pulls_with_a_secret() -> None:
    cfg = parse(_hub(imagePullSecret="dispatch-registry"), stack="hub")
    assert cfg.hub.dispatch.image_pull_secret == "dispatch-registry"
    spec = deployment_spec(cfg.hub.dispatch, "r.example/p@sha256:" + "a" * 64)
    assert spec["template"]["spec"]["imagePullSecrets"] == [{"name": "dispatch-registry"}]
    plain = deployment_spec(DispatchConfig(), "r.example/p@sha256:" + "a" * 64)
    assert "imagePullSecrets" not in plain["template"]["spec"]
    with pytest.raises(ConfigError, match=r"^gpufleet:hub\.dispatch\.imagePullSecret: "):
        parse(_hub(imagePullSecret="Not_A_Name"), stack="hub")
