"""What submit renders for torchrun (issue 34): torchrun's own variables (ranks per node = GPUs per node, the
nodes, the node rank, the static rendezvous on rank 0's pod through the JobSet's headless service), checked
against what torch's launcher reads (PET_<OPTION>, torch.distributed.argparse_util.env); and the warning, naming
the launcher, for a command that does not start with it."""

from __future__ import annotations

from typing import Any

import pytest
from factories import job, offer

from placement.fleet import manifests as m
from placement.fleet.choose import Existing
from placement.fleet.stacks import ClusterStack, Pool, Queue, TrainingAccount
from placement.plan.job import candidates

LAUNCHED = ["python", "-m", "placement.trainer.launch", "--", "torchrun", "train.py"]


def render(gpus: int, command: list[str]) -> tuple[dict[str, Any], list[str]]:
    j = job(name="tr", gpus=gpus, hours=10, capacity="spot", command=command)
    (c,) = [c for c in candidates(j, [offer("p5.48xlarge", "us-east-1")]) if c.capacity == "spot"]
    pool = Pool("p", c.offer.instance_type, "spot", c.offer.zone, 64)
    cl = ClusterStack(stack="s-aws", cloud="aws", region="r", cluster_name="c", pools=(pool,), kubeconfig=None,
                      checkpoint_uri="s3://b/ckpt", filesystem=None,
                      service_account=TrainingAccount("trainer", ("team-a",)), local_queues=(Queue("team-a", "q"),))
    objs, warnings = m.render(m.Target(job=j, candidate=c, existing=Existing(cl, pool, "team-a", "q")))
    return objs[-1], warnings


def env_of(obj: dict[str, Any]) -> dict[str, Any]:
    spec = obj["spec"]
    pod = spec["replicatedJobs"][0]["template"]["spec"]["template"] if obj["kind"] == "JobSet" else spec["template"]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in pod["spec"]["containers"][0]["env"]}


def test_torchrun_reads_the_gang_from_the_rendered_environment() -> None:
    obj, warnings = render(16, LAUNCHED)
    env = env_of(obj)
    name = obj["metadata"]["name"]
    headless = obj["spec"]["network"].get("subdomain", name)  # JobSet's default: the JobSet's own name
    assert env["PET_NNODES"] == "2" and env["PET_NPROC_PER_NODE"] == "8"
    assert env["PET_MASTER_ADDR"] == f"{name}-{m.REPLICATED_JOB}-0-0.{headless}" == env["MASTER_ADDR"]
    assert env["PET_MASTER_PORT"] == env["MASTER_PORT"] == str(m.MASTER_PORT)
    assert env["PET_NODE_RANK"] == env["NODE_RANK"] == {"fieldRef": {
        "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}
    assert not [w for w in warnings if "launcher" in w]
    one, _ = render(8, LAUNCHED)
    assert {k: v for k, v in env_of(one).items() if k.startswith("PET_")} == {
        "PET_NNODES": "1", "PET_NPROC_PER_NODE": "8", "PET_NODE_RANK": "0", "PET_MASTER_ADDR": "127.0.0.1",
        "PET_MASTER_PORT": str(m.MASTER_PORT)}


def test_torchrun_takes_its_options_from_those_variables() -> None:
    """The variables' names are torchrun's options (what its argparse ``env`` action reads), without PyTorch:
    each is PET_ and the option's dest in capitals."""
    options = {"PET_NNODES": "--nnodes", "PET_NPROC_PER_NODE": "--nproc-per-node", "PET_NODE_RANK": "--node-rank",
               "PET_MASTER_ADDR": "--master-addr", "PET_MASTER_PORT": "--master-port"}
    env = env_of(render(16, LAUNCHED)[0])
    for var, option in options.items():
        assert var in env and var == "PET_" + option.lstrip("-").replace("-", "_").upper()


@pytest.mark.parametrize(("command", "warned"), [
    (["torchrun", "--nnodes=2", "train.py"], True),
    (["python", "train.py"], True),
    (["python", "-m", "placement.trainer"], True),
    (LAUNCHED, False),
    (["/usr/bin/python3.11", "-m", "placement.trainer.launch", "--", "python", "train.py"], False),
    (["bash", "-c", "exec python3 -m placement.trainer.launch -- torchrun train.py"], False),
    (["bash", "-c", "torchrun train.py"], True),
])
def test_a_command_that_does_not_start_with_the_launcher_is_warned_naming_it(command: list[str],
                                                                             warned: bool) -> None:
    _, warnings = render(16, command)
    said = [w for w in warnings if "placement.trainer.launch" in w]
    assert bool(said) == warned
    if warned:
        assert len(said) == 1 and "tr" in said[0]
