"""placement/model/contract.py (issue 39): one definition of what submit writes and its readers read. Its helpers
read back what they format, "unknown" is absent, hostile values are warnings (never an exception), and the
definition agrees with the code on both sides and with docs/trainer-contract.md."""

from __future__ import annotations

import ast
import datetime as dt
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.model import contract as c

ROOT = Path(__file__).resolve().parents[3]
HOME = "s3://ckpt-bucket/checkpoints/llm"


def test_the_module_is_stdlib_only() -> None:
    """The trainer imports it in its pod: nothing from placement/, nothing third-party."""
    tree = ast.parse((ROOT / "placement" / "model" / "contract.py").read_text(encoding="utf-8"))
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 0}
    assert names - {"__future__"} <= set(sys.stdlib_module_names)


@pytest.mark.parametrize("gb", [140.5, 980.0, 9.800000000000001, 0.0, 1e6, None])
def test_checkpoint_annotations_read_back(gb: float | None) -> None:
    ann = c.checkpoint_annotations(HOME, "aws", "us-east-1", gb)
    assert (c.CHECKPOINT_GB in ann) is (gb is not None)  # unknown is absent, never "" or 0
    found, warnings = c.read_checkpoint(ann, {"aws": {"us-east-1"}})
    assert warnings == () and found is not None
    assert (found.home, found.cloud, found.region) == (HOME, "aws", "us-east-1")
    assert found.gb == (pytest.approx(gb, rel=1e-14) if gb is not None else None)


def test_no_home_writes_nothing_and_reads_as_none() -> None:
    assert c.checkpoint_annotations(None, "aws", "us-east-1", 10.0) == {}
    assert c.read_checkpoint({}) == (None, ())
    # Empty is unknown, as absent is.
    assert c.read_checkpoint({c.CHECKPOINT_HOME: HOME, c.CHECKPOINT_REGION: "aws:us-east-1", c.CHECKPOINT_GB: ""}) == (
        c.Checkpoint(HOME, "aws", "us-east-1", None), ())
    _, (why,) = c.read_checkpoint({c.CHECKPOINT_GB: "12"})
    assert why.startswith(c.CHECKPOINT_GB) and "ignored" in why


@pytest.mark.parametrize(("name", "value"), [
    (c.CHECKPOINT_REGION, "aws-us-east-1"), (c.CHECKPOINT_REGION, "azure:eastus"), (c.CHECKPOINT_REGION, 7),
    (c.CHECKPOINT_REGION, "aws:Us East"), (c.CHECKPOINT_HOME, "s3://a b"), (c.CHECKPOINT_HOME, "x" * 2000),
    (c.CHECKPOINT_HOME, ["s3://a"]),
])
def test_a_malformed_home_or_region_is_a_warning_naming_it_and_no_home(name: str, value: Any) -> None:
    ann = {**c.checkpoint_annotations(HOME, "aws", "us-east-1", 10.0), name: value}
    found, (why,) = c.read_checkpoint(ann)
    assert found is None and why.startswith(name) and "x" * 100 not in why


def test_a_region_not_in_the_data_is_named() -> None:
    found, (why,) = c.read_checkpoint(c.checkpoint_annotations(HOME, "aws", "mars-1", None), {"aws": {"us-east-1"}})
    assert found is None and "'mars-1' is not a known aws region" in why


def test_group_and_workers() -> None:
    assert c.read_fabric_group("tcpxo") == ("tcpxo", None)
    assert c.read_fabric_group("rdma2") == ("rdma2", None)  # a newer submit's fabric: kept (no pool has it)
    assert c.read_fabric_group(None) == (None, None)
    group, why = c.read_fabric_group({"efa": 1})
    assert group is None and why is not None and why.startswith(c.FABRIC_GROUP)
    keys = ("aws-use1-p5", "gcp-usc1-a3mega")
    assert c.read_workers(c.workers_text(keys)) == (keys, None)
    for bad in (7, "a,,B_c", ","):
        workers, why = c.read_workers(bad)
        assert workers is None and why is not None and why.startswith(c.WORKERS)


def test_the_job_spec_reads_back_and_only_it_is_an_error() -> None:
    doc = {"name": "j", "accelerator": "H100", "gpus": 8, "hours": 1, "future_field": {"x": 1}}
    assert c.read_job_spec_text(c.job_spec_text(doc)) == (doc, None)
    read = c.read_annotations({c.JOB_SPEC: "{nope", c.CHECKPOINT_GB: "lots", c.WORKERS: 3})
    assert read.job_spec is None and read.job_spec_error is not None and read.job_spec_error.startswith(c.JOB_SPEC)
    assert [w.split(":")[0] for w in read.warnings] == [c.WORKERS, c.CHECKPOINT_GB]
    assert c.read_annotations({c.JOB_SPEC: ""}).job_spec_error is None  # empty: absent
    assert c.read_annotations(None) == c.JobAnnotations()


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from([a.name for a in c.ANNOTATIONS] + ["x/y"]),
                       st.one_of(st.text(max_size=50), st.integers(), st.none(), st.floats(), st.lists(st.text()),
                                 st.dictionaries(st.text(max_size=5), st.integers())), max_size=8))
def test_hostile_annotations_never_raise(ann: dict[str, Any]) -> None:
    read = c.read_annotations(ann, {"aws": {"us-east-1"}, "gcp": {"us-central1"}})
    assert all(isinstance(w, str) and len(w) < 400 for w in read.warnings)
    if read.checkpoint is not None and read.checkpoint.gb is not None:
        assert 0 <= read.checkpoint.gb <= c.MAX_CHECKPOINT_GB


def test_the_deadline_reads_back() -> None:
    when = dt.datetime(2026, 11, 27, 13, 0, tzinfo=dt.UTC)
    assert c.deadline_text(when) == "2026-11-27T13:00:00Z" and c.parse_deadline(c.deadline_text(when)) == when
    for bad in ("tomorrow", "2026-11-27T13:00:00"):
        with pytest.raises(ValueError, match="2026-11-27T13:00:00Z|end it with Z"):
            c.parse_deadline(bad)


def test_the_definition_agrees_with_both_sides() -> None:
    from placement.fleet import durable, manifests
    from placement.model.jobspec import WORKLOADS
    from placement.trainer import settings as trainer

    assert tuple(WORKLOADS) == c.WORKLOADS
    assert min(manifests.GRACE_SECONDS.values()) == c.DEFAULT_GRACE_SECONDS
    assert manifests.RETRY_EXIT_CODE == trainer.DEFAULT_RETRY_EXIT_CODE == c.RETRY_EXIT_CODE
    assert durable.DEFAULT_KEEP == trainer.DEFAULT_KEEP and durable.METRICS_PORT == trainer.DEFAULT_METRICS_PORT
    assert {e.name for e in c.ANNOTATIONS if e.required} == {c.JOB_SPEC}
    from placement.fleet.choose import SINGLE_NODE
    from placement.model.shapes import shape_book

    assert c.SINGLE_NODE == SINGLE_NODE
    assert {s.fabric for s in shape_book().shapes.values() if s.fabric != "none"} <= set(c.FABRIC_GROUPS)
    for group in c.REQUIRED_TOGETHER:
        for name in group:
            assert set(c.annotation(name).together) == set(group) - {name}


def test_docs_name_every_variable_submit_writes() -> None:
    text = (ROOT / "docs" / "trainer-contract.md").read_text(encoding="utf-8")
    kube = (ROOT / "docs" / "kueue-hub.md").read_text(encoding="utf-8")
    missing = [e.name for e in c.ENV if f"`{e.name}`" not in text and f"`{e.name}`" not in kube]
    assert not missing, missing
    missing = [e.name for e in c.ANNOTATIONS if f"`{e.name}`" not in kube]
    assert not missing, missing
