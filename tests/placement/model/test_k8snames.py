"""Kubernetes naming rules of the objects submit renders (JobSet webhook v0.12.0, Job)."""

from __future__ import annotations

import re

import pytest

from placement.model.k8snames import dns1123_label_problem, jobset_max_name_length, jobset_name_problem

DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


@pytest.mark.parametrize("name, needle", [
    ("train\n", "'\\n'"), ("my_job", "'_'"), ("Train", "'T'"), ("-a", "start and end"),
    ("a-", "start and end"), ("a" * 64, "64 characters"), ("", "empty"),
])
def test_dns1123_label_problems_say_what_is_wrong(name, needle):
    problem = dns1123_label_problem(name)
    assert problem is not None and needle in problem


@pytest.mark.parametrize("nodes", [2, 10, 11, 128])
def test_jobset_names_fit_the_webhooks_longest_pod_name(nodes):
    limit = jobset_max_name_length(nodes)
    ok, long = "j" * limit, "j" * (limit + 1)
    assert jobset_name_problem(ok, nodes) is None
    pod = f"{ok}-node-0-{nodes - 1}-abcde"  # GenPodName + the 5-character suffix the webhook allows for
    assert len(pod) == 63 and DNS1035.fullmatch(pod)
    assert "at most" in (jobset_name_problem(long, nodes) or "")


def test_jobset_names_must_start_with_a_letter_jobs_need_not():
    assert "starts with a digit" in (jobset_name_problem("1st-run", 2) or "")
    assert dns1123_label_problem("1st-run") is None


def test_kueue_names_are_matched_in_full():
    from placement.model import kueue as ko

    with pytest.raises(ValueError):
        ko.worker_key("org/proj/aws-use1\n")
    with pytest.raises(ValueError):
        ko.local_queue_name("c", "team-a\n")
