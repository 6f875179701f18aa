"""The dispatcher's reliability findings of issue 30: a hub that trickles its kubeconfig-Secret answers never keeps a
``--once`` pass past ``--pass-timeout-seconds``; a worker kubeconfig with a key given twice names the key; a hub
output whose ``dispatcher`` is not one of the dispatcher names is refused naming the output."""

from __future__ import annotations

import time
from typing import Any

import pytest
import yaml
from dispatchfleet import Fleet
from kubefake import secret

from placement.dispatch.controller import worker_problems
from placement.errors import InputError
from placement.fleet.stacks import parse_stacks

SECRETS = ("", "v1", "secrets")


@pytest.mark.parametrize(("worker_s", "pass_s", "bound"), [(30.0, 2.0, "--pass-timeout-seconds (2 s)"),
                                                          (1.0, 8.0, "--worker-timeout-seconds (1 s)")])
def test_a_hub_that_trickles_a_kubeconfig_secret_never_keeps_the_pass_past_its_deadline(
        fleet: Fleet, worker_s: float, pass_s: float, bound: str) -> None:
    good = fleet.submit("good")
    slow = "aws-use1-p5"
    fleet.controller("warm", lease=None, dry_run=True).run_once()  # the catalog and the engine's data, loaded once
    started = time.monotonic()
    fleet.controller("base", lease=None, dry_run=True).run_once()
    baseline = time.monotonic() - started
    fleet.hub.stalls[f"/secrets/gpufleet-dispatch-{slow}"] = "trickle"  # a byte a second, never the whole answer
    c = fleet.controller("solo", lease=None, dry_run=True, pass_timeout_s=pass_s, worker_timeout_s=worker_s)
    started = time.monotonic()
    result = c.run_once()
    took = time.monotonic() - started
    # The deadline, a pass's own work and the loopback's scheduling noise; not the trickle's two minutes.
    assert took <= baseline + min(worker_s, pass_s) + 2.5
    problems = "\n".join(worker_problems(c))
    assert f"{slow}: kubeconfig Secret not read within {bound}" in problems
    if worker_s < pass_s:  # time was left for the other workers: they are still decided
        (d,) = [d for d in result.decisions if d.workload.name == good]
        assert d.action == "nominate" and d.clusters and d.clusters[0] != slow


def test_a_worker_kubeconfig_with_a_key_given_twice_names_the_key(fleet: Fleet) -> None:
    key = "gcp-usc1-a3mega"
    text = yaml.safe_dump(fleet.workers[key].kubeconfig())
    doubled = text.replace("  user:\n", "  user:\n    token: second\n", 1)
    assert doubled != text
    fleet.hub.delete(SECRETS, "kueue-system", f"gpufleet-dispatch-{key}")
    fleet.hub.create(SECRETS, secret(f"gpufleet-dispatch-{key}", "kueue-system", {"kubeconfig": doubled}))
    good = fleet.submit("good")
    c = fleet.controller("solo", lease=None, dry_run=True)
    result = c.run_once()
    (problem,) = [p for p in worker_problems(c) if p.startswith(key)]
    assert "token" in problem and "twice" in problem and "not a kubeconfig" not in problem
    assert "second" not in problem  # the key, never its value
    (d,) = [d for d in result.decisions if d.workload.name == good]
    assert d.action == "nominate" and d.clusters[0] != key


def _hub(dispatcher: Any) -> dict[str, Any]:
    return {"hub": {"role": "hub", "cloud": "aws", "region": "us-east-1", "dispatcher": dispatcher,
                    "workers": {"aws-use1-p5": "p5"}, "kueue": {"localQueues": []}}}


@pytest.mark.parametrize("value", [["External"], 1, "external", ""])
def test_a_hub_dispatcher_output_that_is_no_dispatcher_name_is_refused_naming_the_output(value: Any) -> None:
    with pytest.raises(InputError) as err:
        parse_stacks(_hub(value), "outputs.json")
    assert "hub.dispatcher" in str(err.value) and "External" in str(err.value)


@pytest.mark.parametrize("value", ["External", "AllAtOnce", "Incremental", None])
def test_a_hub_dispatcher_output_that_names_a_dispatcher_is_read(value: Any) -> None:
    stacks = parse_stacks(_hub(value), "outputs.json")
    (hub,) = stacks.hubs
    assert hub.dispatcher == (value or "AllAtOnce")
