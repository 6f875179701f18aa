"""Entry point `pulumi up` runs (Pulumi.yaml: ``main: infra/``): the program is async (``pulumi.run``), so a
worker can await its hub's outputs before it declares anything (infra/program.py)."""

import pulumi

from infra.program import program

pulumi.run(program)
