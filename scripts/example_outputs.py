#!/usr/bin/env python3
"""Write placement/examples/stacks-outputs.json: the outputs of every stacks/Pulumi.<stack>.yaml, run under
Pulumi mocks (infra/mockrun.py), in the shape `pulumi stack output --json --show-secrets` exports them, one
entry per stack. `placement submit --stacks placement/examples/stacks-outputs.json --dry-run` then works with
no deployed stack. The values are mock values (endpoints, tokens, account IDs): for trying the CLI only.

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 on a difference")
    args = parser.parse_args()
    _venv.ensure("pulumi", "yaml", extra="infra")
    text = render()
    rel = OUTPUT.relative_to(_venv.ROOT)
    if args.check:
        if not OUTPUT.exists() or OUTPUT.read_text(encoding="utf-8") != text:
            print(f"example_outputs: {rel} is out of date with stacks/; run `scripts/example_outputs.py`",
                  file=sys.stderr)
            return 1
        print(f"example_outputs: {rel} is up to date")
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"example_outputs: wrote {rel} ({text.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
