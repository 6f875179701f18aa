"""A hub reading a worker stack whose outputs are missing or malformed stops with one line, never a traceback.

The outputs come through ``pulumi.StackReference`` after the hub's first resources exist, so this is a
``pulumi.RunError`` naming the worker stack and the output (the config-level checks of ``hub.workers`` run
before any resource; see test_config_bad_input.py).
"""

from __future__ import annotations

import asyncio
import copy
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from infra import mockrun
from infra.config import load_stack_file
from infra.k8s import kueue_objects as ko
from infra.outputs import node_pool_output

REPO = Path(__file__).resolve().parents[2]
HUB_STACK = REPO / "stacks" / "Pulumi.hub.yaml"
STACK = "org/gpufleet/aws-use1-p5"


def outputs_of(stack: str) -> dict[str, Any]:
    """The outputs the hub requires from a worker, built from its stack file."""
    cfg = load_stack_file(str(REPO / "stacks" / f"Pulumi.{stack.rsplit('/', 1)[-1]}.yaml"))
    kubeconfig = yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://c.example", "certificate-authority-data": "Y2E="}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}]})
    return {"cloud": cfg.cloud, "region": cfg.region, "clusterName": cfg.cluster_name, "kubeconfig": kubeconfig,
            "nodePools": [node_pool_output(p) for p in cfg.node_pools]}


GOOD = outputs_of(STACK)


def with_pool(**changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(GOOD)
    out["nodePools"][0].update(changes)
    return out


@pytest.mark.parametrize(("outputs", "what"), [
    ({**GOOD, "nodePools": None}, "nodePools is missing"),
    ({**GOOD, "nodePools": {"h100": {}}}, "nodePools is missing or not a list"),
    ({**GOOD, "nodePools": ["h100-spot"]}, "nodePools[0] is not a mapping"),
    ({**GOOD, "clusterName": None}, "clusterName"),
    ({**GOOD, "cloud": "azure"}, "cloud"),
    (with_pool(instanceType=None), "nodePools[0].instanceType"),
    (with_pool(instanceType="p9.huge"), "nodePools[0].instanceType"),
    (with_pool(name=None), "nodePools[0].name"),
    (with_pool(capacity="SPOT"), "nodePools[0].capacity"),
    (with_pool(maxNodes=None), "nodePools[0].maxNodes"),
    (with_pool(maxNodes=math.inf), "nodePools[0].maxNodes"),
    (with_pool(maxNodes=math.nan), "nodePools[0].maxNodes"),
    (with_pool(maxNodes=2.5), "nodePools[0].maxNodes"),
    (with_pool(maxNodes=True), "nodePools[0].maxNodes"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_malformed_outputs_name_the_worker_and_the_output(outputs: dict[str, Any], what: str) -> None:
    with pytest.raises(ValueError) as err:
        ko.worker_from_outputs(STACK, outputs)
    message = str(err.value)
    assert message.startswith(f"worker stack {STACK}: output {what}") and "\n" not in message


def test_outputs_as_stack_references_return_them_parse() -> None:
    # Numbers arrive as doubles through a StackReference: 4 is 4.0.
    worker = ko.worker_from_outputs(STACK, with_pool(maxNodes=4.0))
    assert worker.pools[0].max_nodes == 4 and isinstance(worker.pools[0].max_nodes, int)
    assert worker.key == "aws-use1-p5" and worker.cluster_name == GOOD["clusterName"]


@pytest.fixture
def worker_outputs() -> Iterator[dict[str, dict[str, Any]]]:
    hub = yaml.safe_load(HUB_STACK.read_text())["config"]["gpufleet:hub"]
    saved = dict(mockrun.STACK_REFERENCE_OUTPUTS)
    outputs = {stack: outputs_of(stack) for stack in hub["workers"]}
    mockrun.STACK_REFERENCE_OUTPUTS.update(outputs)
    yield outputs
    mockrun.STACK_REFERENCE_OUTPUTS.clear()
    mockrun.STACK_REFERENCE_OUTPUTS.update(saved)


def test_a_worker_without_its_pool_shapes_stops_the_hub_with_one_line(
        worker_outputs: dict[str, dict[str, Any]]) -> None:
    worker_outputs[STACK]["nodePools"] = [{"name": "h100-spot"}]
    try:
        with pytest.raises(pulumi.RunError) as err:
            mockrun.run_stack(str(HUB_STACK))
    finally:
        # The run stopped with registrations in flight: end them here, not as warnings when the loop is dropped.
        loop = asyncio.get_event_loop()
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    message = str(err.value)
    assert message.startswith(f"invalid worker stack outputs: worker stack {STACK}: output nodePools[0].instanceType")
    assert "\n" not in message
