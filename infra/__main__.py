"""Entry point `pulumi up` runs (Pulumi.yaml: ``main: infra/``)."""

from infra.program import main

main()
