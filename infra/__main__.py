"""Entry point `pulumi up` runs (Pulumi.yaml: ``main: infra/``): the program is async (``pulumi.run``), so a
worker can await its hub's outputs before it declares anything (infra/program.py)."""

import pulumi

from infra.program import program

if not hasattr(pulumi, "run"):  # pulumi.run, the async entry point, is in the SDK uv.lock pins (3.272)
    raise pulumi.RunError(f"the gpufleet program needs a Pulumi Python SDK with pulumi.run (this one is "
                          f"{getattr(pulumi, '__version__', 'older')}); `./scripts/test` installs the locked one")
pulumi.run(program)
