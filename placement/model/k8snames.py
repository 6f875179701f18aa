"""Kubernetes naming rules for the objects ``placement submit`` renders, with the reason a name breaks them.

Pure. The rules are those of the API server and of the JobSet webhook (kubernetes-sigs/jobset v0.12.0,
``pkg/webhooks/jobset_webhook.go``): a JobSet's longest pod name, ``<jobset>-<replicatedJob>-<jobIndex>-
<podIndex>`` plus the 5-character random suffix the webhook allows for, must be a DNS-1035 label.
"""

from __future__ import annotations

import re

from placement.errors import shown

MAX_LABEL = 63
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
POD_SUFFIX = 6  # "-abcde": the random suffix the JobSet webhook adds before checking the pod name


def _charset_problem(name: str) -> str | None:
    bad = sorted({c for c in name if not (c.islower() and c.isascii() or c.isdigit() and c.isascii() or c == "-")})
    if bad:
        listed = " ".join(repr(c) for c in bad[:5])
        return f"{shown(name)} has {listed}: only lower-case letters, digits and '-' are allowed"
    return None


def dns1123_label_problem(name: str) -> str | None:
    """Why ``name`` is not a DNS-1123 label (namespaces, Jobs, label values we set), or None."""
    if len(name) <= MAX_LABEL and _DNS1123_LABEL.fullmatch(name):
        return None  # at once for a good name (the dispatcher checks one per Workload of a pass); else why not
    if not name:
        return "is empty: give a name of lower-case letters, digits and '-'"
    if problem := _charset_problem(name):
        return problem
    if len(name) > MAX_LABEL:
        return f"is {len(name)} characters long; at most {MAX_LABEL}"
    if not _DNS1123_LABEL.fullmatch(name):
        return f"{shown(name)} must start and end with a letter or digit"
    return None


def job_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a ``batch/v1`` Job, or None. A Job's name is a DNS-1123 subdomain that also
    goes into its pods' ``job-name`` label (at most 63 characters); we keep to a DNS-1123 label."""
    return dns1123_label_problem(name)


def jobset_max_name_length(nodes: int, replicated_job: str = "node", replicas: int = 1) -> int:
    """The longest JobSet name the webhook accepts for one replicated job of ``replicas`` Indexed Jobs of
    ``nodes`` pods each."""
    fixed = len(f"-{replicated_job}-{replicas - 1}-{nodes - 1}") + POD_SUFFIX
    return MAX_LABEL - fixed


def jobset_name_problem(name: str, nodes: int, replicated_job: str = "node") -> str | None:
    """Why ``name`` cannot name a JobSet of ``nodes`` pods (replicated job ``replicated_job``, one replica), or
    None: its pod names must be DNS-1035 labels (start with a letter, at most 63 characters)."""
    if problem := dns1123_label_problem(name):
        return problem
    if not name[0].isalpha():
        return (f"{shown(name)} starts with a digit; a multi-node job is a JobSet, whose pod names must be "
                "DNS-1035 labels (starting with a letter)")
    limit = jobset_max_name_length(nodes, replicated_job)
    if len(name) > limit:
        return (f"is {len(name)} characters long; a JobSet of {nodes} nodes allows at most {limit} (its pod names "
                f"{name[:8]}...-{replicated_job}-0-{nodes - 1}-xxxxx must fit in {MAX_LABEL})")
    return None
