"""Print the ``gpufleet:network.subnetCidrs`` that keep an existing AWS stack's subnets where they are.

Usage: ``pulumi stack export --file state.json && python -m infra.aws.pin_subnets state.json``

Reads the stack's exported state (the file ``pulumi stack export`` wrote, nothing else) and prints, as YAML to
paste under ``gpufleet:network``, each subnet the stack manages keyed by its Pulumi name's suffix
(``<cluster>-net-public-<zone ID>`` → ``public-<zone ID>``, ``-private-<zone ID>``, ``-gpu-<zone>``) with the CIDR
it has. A stack created before the fixed subnet layout (docs/aws.md, "Keeping an existing stack's subnets") keeps
them with it: the program builds each pinned subnet with its pinned CIDR. Exit 2 with one line on a file that is
not a stack export or holds no gpufleet subnet.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

SUBNET_TYPE = "aws:ec2/subnet:Subnet"
# The Network component's subnet names (infra/aws/network.py): <cluster>-net-<kind>-<zone>.
SUBNET_NAME = re.compile(r"^.+-net-(public|private|gpu)-([a-z0-9-]+)$")


class PinError(Exception):
    """A file that cannot be read as a stack export: printed as one line, exit 2."""


def subnet_pins(export: Mapping[str, Any]) -> dict[str, str]:
    """``{"<kind>-<zone>": cidr}`` of every gpufleet subnet in a ``pulumi stack export`` document."""
    deployment = export.get("deployment") if isinstance(export, Mapping) else None
    resources = deployment.get("resources") if isinstance(deployment, Mapping) else None
    if not isinstance(resources, list):
        raise PinError("not a `pulumi stack export` file: no deployment.resources")
    pins: dict[str, str] = {}
    for res in resources:
        if not isinstance(res, Mapping) or res.get("type") != SUBNET_TYPE:
            continue
        name = str(res.get("urn", "")).rsplit("::", 1)[-1]
        m = SUBNET_NAME.match(name)
        state = res.get("outputs") or res.get("inputs") or {}
        cidr = state.get("cidrBlock") if isinstance(state, Mapping) else None
        if m and isinstance(cidr, str):
            pins[f"{m.group(1)}-{m.group(2)}"] = cidr
    if not pins:
        raise PinError("the export holds no gpufleet subnet (aws:ec2/subnet:Subnet named <cluster>-net-<kind>-<zone>)")
    return dict(sorted(pins.items()))


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or args[0] in ("-h", "--help"):
        print(__doc__.strip().splitlines()[2])
        return 0 if args and args[0] in ("-h", "--help") else 2
    try:
        with open(args[0], encoding="utf-8") as fh:
            doc = json.load(fh)
        pins = subnet_pins(doc)
    except (OSError, ValueError, PinError) as exc:
        print(f"pin_subnets: {args[0]}: {exc}".splitlines()[0], file=sys.stderr)
        return 2
    sys.stdout.write(yaml.safe_dump({"subnetCidrs": pins}, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
