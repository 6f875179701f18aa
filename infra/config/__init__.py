"""Stack configuration: parsed once, typed and validated, before any resource is registered.

Every key lives in the ``gpufleet`` namespace (``gpufleet:nodePools`` in ``stacks/Pulumi.<stack>.yaml``)
and is declared with its type and description in ``Pulumi.yaml``. Machine shapes come from
``placement/data/shapes.yaml``, the same data the placement CLI reads.

No module of this package imports a Pulumi SDK at import time, so it can be unit-tested and reused by
``scripts/preview`` and ``placement submit``; :func:`from_pulumi` reads the live stack config.

One module per concern, each section parsed by its ``parse_<section>``:

- :mod:`~infra.config.stack`: the entry point (:func:`parse`, :func:`from_pulumi`, :func:`load_stack_file`,
  the checks across a hub and its worker stacks); re-exported here;
- :mod:`~infra.config.fields`: the shared field parsers and :class:`ConfigError`;
- :mod:`~infra.config.cluster` (``cluster``, EKS versions), :mod:`~infra.config.network` (``network``, CIDR
  rules), :mod:`~infra.config.pools` (``nodePools``), :mod:`~infra.config.storage` (``checkpoint``,
  ``training``), :mod:`~infra.config.kueue` (``kueue``), :mod:`~infra.config.hub` (``hub``),
  :mod:`~infra.config.dispatch` (``hub.dispatch``), :mod:`~infra.config.link` (``hub.workers``,
  ``hub.vpn``, ``cluster.hubStack``, ``cluster.hubPrivateLink``), :mod:`~infra.config.tags` (``tags``).

Imports point down: ``stack`` imports the section modules; ``hub`` imports ``dispatch``, ``link`` and
``network``; ``cluster`` imports ``link`` and ``network``; every module imports ``fields``, which imports
only :mod:`placement.errors`.
"""

from infra.config.fields import ConfigError
from infra.config.stack import (
    KEYS,
    StackConfig,
    check_hub_stack,
    check_worker_stacks,
    from_pulumi,
    load_stack_file,
    parse,
)

__all__ = [
    "KEYS",
    "ConfigError",
    "StackConfig",
    "check_hub_stack",
    "check_worker_stacks",
    "from_pulumi",
    "load_stack_file",
    "parse",
]
