"""A ready stack file for a place no existing cluster covers: what ``placement submit`` prints (or writes with
``--write-stack FILE``) when it answers "needs a new stack", so the cheaper place it names is one ``pulumi up``
away. The file is a ``stacks/Pulumi.<stack>.yaml`` that ``scripts/preview`` and ``infra/config/`` accept: the
candidate's cloud, region and zone, one node pool of its machine type and capacity sized to the job (scaling from
zero), and the tags every stack needs. Pure: data in, text out (the CLI writes it)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from placement.model.jobspec import JobSpec
    from placement.plan.job import Candidate

GCP_PROJECT_PLACEHOLDER = "my-gcp-project"  # a valid project ID shape; the header says to set it
COST_CENTER_PLACEHOLDER = "set-me"


def stack_name(c: Candidate) -> str:
    """``<cloud>-<zone>-<machine family>``, lower-case letters, digits and '-' (``aws-use1-az4-p5``)."""
    o = c.offer
    family = o.instance_type.split(".")[0]
    raw = f"{o.cloud}-{o.zone}-{family}".lower()
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", raw)).strip("-")


def new_stack(job: JobSpec, c: Candidate) -> tuple[str, str] | None:
    """``(stack name, file text)`` for a stack running ``c``; None for a reserved candidate (its reservation is
    not a pool a new stack can declare without its ID and terms)."""
    if c.reservation is not None or c.capacity not in ("spot", "on-demand"):
        return None
    o = c.offer
    name = stack_name(c)
    cluster = ("gpufleet-" + name)[:40].rstrip("-")
    kind = "spot" if c.capacity == "spot" else "od"
    pool = re.sub(r"[^a-z0-9-]", "-", f"{o.shape.accelerator.lower()}-{kind}")[:40].strip("-")
    config: dict[str, Any] = {"gpufleet:cloud": o.cloud, "gpufleet:region": o.region}
    if o.cloud == "gcp":
        config["gpufleet:project"] = GCP_PROJECT_PLACEHOLDER
    config.update({
        "gpufleet:clusterName": cluster,
        "gpufleet:gpuZone": o.zone,
        "gpufleet:nodePools": [{"name": pool, "instanceType": o.instance_type,
                                "capacity": "SPOT" if c.capacity == "spot" else "ON_DEMAND",
                                "minNodes": 0, "maxNodes": c.nodes}],
        "gpufleet:tags": {"owner": job.team or "ml-platform", "cost-center": COST_CENTER_PLACEHOLDER},
    })
    what = f"gpufleet:project ({GCP_PROJECT_PLACEHOLDER}), " if o.cloud == "gcp" else ""
    head = (f"# Written by `placement submit` for job {job.name}: {o.instance_type} x{c.nodes} {c.capacity} in "
            f"{o.cloud} {o.zone}\n"
            f"# (${c.cost.total_usd:,.2f} for the job at catalog prices). The pool scales from zero to the job's "
            "node count.\n"
            f"# Save as: stacks/Pulumi.{name}.yaml\n"
            f"# Set: {what}gpufleet:tags cost-center ({COST_CENTER_PLACEHOLDER}), and what docs/{o.cloud}.md "
            "describes (checkpoint storage, hub link)\n"
            f"# Check: scripts/preview --stack {name}\n"
            f"# Create: pulumi stack init {name} && pulumi up\n")
    return name, head + yaml.safe_dump({"config": config}, sort_keys=False)
