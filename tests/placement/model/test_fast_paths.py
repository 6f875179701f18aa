"""The fast paths of issue 33 (a dispatch pass over 1,000 Workloads) answer as the slow code they skip: a good
DNS-1123 name by one match, a shape book's node sizes and accelerators made once, a JobSpec made without the frozen
dataclass's ``__init__``, a checkpoint home's whitespace found in C. Hostile names and values included."""

from __future__ import annotations

import dataclasses
from dataclasses import fields

import pytest

from placement.errors import shown
from placement.model import contract
from placement.model.jobspec import Dataset, JobSpec, job_with, new_job, parse_job
from placement.model.k8snames import _DNS1123_LABEL, MAX_LABEL, _charset_problem, dns1123_label_problem
from placement.model.shapes import shape_book

HOSTILE_NAMES = ["", "a", "a-b", "k8s", "0abc", "abc0", "a--b", "-a", "a-", "A", "aB", "ab_c", "a.b", "a b", "a\n",
                 "é", "ß", "ǅ", "\u0661\u0662", "a\u0661", "\uff41", "a" * 63, "a" * 64, "a" * 62 + "-", "-" * 70,
                 "j" + "\x00", "\u200b", "job-j123"]


def _slow_dns1123(name: str) -> str | None:
    """dns1123_label_problem as it was before its fast path (placement/model/k8snames.py)."""
    if not name:
        return "is empty: give a name of lower-case letters, digits and '-'"
    if problem := _charset_problem(name):
        return problem
    if len(name) > MAX_LABEL:
        return f"is {len(name)} characters long; at most {MAX_LABEL}"
    if not _DNS1123_LABEL.fullmatch(name):
        return f"{shown(name)} must start and end with a letter or digit"
    return None


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_dns1123_fast_path_answers_as_the_checks_it_skips(name: str) -> None:
    assert dns1123_label_problem(name) == _slow_dns1123(name)


def test_node_sizes_and_accelerators_made_once_are_the_shapes_own() -> None:
    book = shape_book()
    accelerators = {s.accelerator for s in book.shapes.values()}
    assert book.accelerators() == accelerators
    for a in [*sorted(accelerators), "NOPE", "", "h100"]:
        assert book.node_sizes(a) == sorted({s.gpus for s in book.shapes.values() if s.accelerator == a})
    # Callers get their own copies: changing one changes nothing in the book.
    book.accelerators().add("X")
    book.node_sizes(sorted(accelerators)[0]).append(999)
    assert book.accelerators() == accelerators
    assert 999 not in book.node_sizes(sorted(accelerators)[0])


def test_new_job_is_the_dataclass_made_by_its_init() -> None:
    values = {"name": "j", "accelerators": ("H100",), "gpus": 16, "hours": 6.0, "capacity": "spot",
              "dataset": Dataset("s3://d/x", 500.0, "us-east-1", "aws"), "deadline_hours": 30.0, "warnings": ("w",)}
    fast, slow = new_job(**values), JobSpec(**values)
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    assert list(fast.__dict__.items()) == list(slow.__dict__.items())  # every field, in order (the name first)
    assert list(fast.__dict__) == [f.name for f in fields(JobSpec)]
    with pytest.raises(TypeError):
        new_job(**values, warp_drive=True)
    with pytest.raises(TypeError):
        new_job(name="j", accelerators=("H100",), gpus=8)  # hours left out



def test_job_with_is_dataclasses_replace() -> None:
    job = new_job(name="j", accelerators=("H100",), gpus=16, hours=6.0, warnings=("w",))
    for changes in ({"name": "k"}, {"gpus": 8, "hours": 2.5}, {"dataset": None, "outputs_gb": 0.0}):
        fast, slow = job_with(job, **changes), dataclasses.replace(job, **changes)
        assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
        assert list(fast.__dict__.items()) == list(slow.__dict__.items())
    assert job.name == "j" and job.gpus == 16  # the original is left as it was
    with pytest.raises(TypeError):
        job_with(job, warp_drive=True)

def test_parse_job_makes_the_job_its_init_would() -> None:
    doc = {"name": "j1", "accelerator": ["H100", "H200"], "gpus": 32, "hours": 12, "priority": 700,
           "regions": {"allow": ["us-east-1", "mars-1"]}, "data": {"dataset": {"uri": "s3://d/x", "region":
                                                                              "us-east-1", "size_gb": 50}}}
    job = parse_job(doc)
    assert job == JobSpec(**{f.name: getattr(job, f.name) for f in fields(JobSpec)})
    assert job.priority == "burst" and job.priority_value == 700
    assert job.allow_regions == ("us-east-1", "mars-1") and job.warnings  # the unknown region still warned of
    assert list(job.__dict__) == [f.name for f in fields(JobSpec)]


@pytest.mark.parametrize("home", ["s3://b/p", "s3://b/p q", "s3://b/p\tq", "s3://b/\u2003p", "s3://b/p\x1c",
                                  "s3://b/p\u00a0", "s3://b/\u200bp", "gs://b/é"])
def test_a_home_with_whitespace_is_refused_as_before(home: str) -> None:
    found, warnings = contract.read_checkpoint({contract.CHECKPOINT_HOME: home,
                                                contract.CHECKPOINT_REGION: "aws:us-east-1"})
    assert (found is None) == any(c.isspace() for c in home)
    assert bool(warnings) == any(c.isspace() for c in home)
