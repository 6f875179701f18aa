#!/usr/bin/env python3
"""Write placement/examples/stacks-outputs.json: the outputs of every stacks/Pulumi.<stack>.yaml, run under
Pulumi mocks (infra/mockrun.py), in the shape `pulumi stack output --json --show-secrets` exports them, one
entry per stack. `placement submit --stacks placement/examples/stacks-outputs.json --dry-run` then works with
no deployed stack. The values are mock values (endpoints, tokens, account IDs): for trying the CLI only.
Beside it, placement/examples/fleet.json: the dispatcher's fleet file (ConfigMap gpufleet-fleet) of the
example hub's workers, built from those outputs as the hub stack builds it (`placement dispatch --fleet`).

Usage: scripts/example_outputs.py [--check]   (--check: exit 1 when the file differs from what the stacks give)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _venv  # noqa: E402

OUTPUT = _venv.ROOT / "placement" / "examples" / "stacks-outputs.json"
FLEET = OUTPUT.parent / "fleet.json"


def render() -> str:
    """The file's text: every stack's outputs, stacks and keys sorted, so a diff shows what changed."""
    from infra.preview import PreviewError, StackRunner, discover_stacks

    runner = StackRunner()
    doc = {}
    for name, path in discover_stacks(_venv.ROOT).items():
        try:
            doc[name] = runner.run(path).outputs
        except PreviewError as exc:
            raise SystemExit(f"example_outputs: stack {name}: {exc}") from None
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def fleet(outputs_text: str) -> str:
    """fleet.json of the example hub: its workers' outputs without secrets (infra.k8s.dispatcher.fleet_document)."""
    from infra.k8s.dispatcher import fleet_document

    doc = json.loads(outputs_text)
    hubs = [s for s in doc.values() if s.get("role") == "hub"]
    workers = sorted({key for hub in hubs for key in hub.get("workers", {})})
    return fleet_document({key: doc[key] for key in workers}) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 on a difference")
    args = parser.parse_args()
    _venv.ensure("pulumi", "yaml", extra="infra")
    text = render()
    files = {OUTPUT: text, FLEET: fleet(text)}
    if args.check:
        stale = [path for path, body in files.items()
                 if not path.exists() or path.read_text(encoding="utf-8") != body]
        for path in stale:
            print(f"example_outputs: {path.relative_to(_venv.ROOT)} is out of date with stacks/; run "
                  "`scripts/example_outputs.py`", file=sys.stderr)
        if stale:
            return 1
        print(f"example_outputs: {', '.join(str(p.relative_to(_venv.ROOT)) for p in files)} are up to date")
        return 0
    for path, body in files.items():
        path.write_text(body, encoding="utf-8")
        print(f"example_outputs: wrote {path.relative_to(_venv.ROOT)} ({body.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
