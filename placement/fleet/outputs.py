"""Reading stack outputs: an exported file (``--stacks``), the ``pulumi`` CLI (``--stack``) or the
dispatcher's fleet file. The only I/O of the fleet state; parsing is :mod:`placement.fleet.stacks`."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from typing import Any

from placement.errors import UsageError
from placement.fleet.errors import EXIT_BAD_INPUT, FleetError
from placement.fleet.stacks import ClusterStack, HubStack, Stacks, parse_fleet, parse_stacks

PULUMI_TIMEOUT_S = 120.0


def pulumi_outputs(stack: str) -> dict[str, Any]:
    """``pulumi stack output --stack NAME --json --show-secrets``; a one-line error when that fails."""
    cmd = ["pulumi", "stack", "output", "--stack", stack, "--json", "--show-secrets"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PULUMI_TIMEOUT_S, check=False)
    except FileNotFoundError:
        raise FleetError("--stack: the pulumi CLI is not on PATH; install it, or export the outputs and pass "
                         "--stacks FILE (see docs/kueue-hub.md#placement-submit)", EXIT_BAD_INPUT) from None
    except subprocess.TimeoutExpired:
        raise FleetError(f"--stack {stack}: `pulumi stack output` did not answer in {PULUMI_TIMEOUT_S:g} s") from None
    if proc.returncode != 0:
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        raise FleetError(f"--stack {stack}: `pulumi stack output` failed: {lines[-1] if lines else proc.returncode}",
                         EXIT_BAD_INPUT)
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise FleetError(f"--stack {stack}: `pulumi stack output --json` printed no JSON", EXIT_BAD_INPUT) from None
    if not isinstance(doc, dict):
        raise FleetError(f"--stack {stack}: `pulumi stack output --json` printed no mapping", EXIT_BAD_INPUT)
    return doc


def load_stacks(stacks_file: str | None, stack_names: Sequence[str]) -> Stacks:
    """The clusters and hubs of ``--stacks FILE`` and of every ``--stack NAME``; a stack given twice is refused."""
    from placement.files.readers import load_yaml

    if not stacks_file and not stack_names:
        raise UsageError("submit: pass --stacks FILE (exported outputs) or --stack NAME (repeatable)")
    clusters: list[ClusterStack] = []
    hubs: list[HubStack] = []
    if stacks_file:
        s = parse_stacks(load_yaml(stacks_file, "--stacks"), stacks_file)
        clusters += s.clusters
        hubs += s.hubs
    for name in stack_names:
        s = parse_stacks({name: pulumi_outputs(name)}, f"pulumi stack {name}")
        clusters += s.clusters
        hubs += s.hubs
    names = [c.stack for c in clusters] + [h.stack for h in hubs]
    dup = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if dup:
        raise UsageError(f"--stack: stack {dup!r} given twice")
    return Stacks(clusters=tuple(clusters), hubs=tuple(hubs))


def load_fleet(path: str) -> tuple[ClusterStack, ...]:
    """The fleet file (JSON, or YAML: JSON is YAML) mounted from ConfigMap ``gpufleet-fleet``."""
    from placement.files.readers import load_yaml

    return parse_fleet(load_yaml(path, "--fleet"), path)
