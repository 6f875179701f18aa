"""CrossGuard entry point: ``pulumi preview --policy-pack infra/policy`` runs this file.

Pulumi starts it with the policy pack directory as the program, so the repository root (two levels up) is put on
``sys.path`` for ``infra`` and ``placement`` to import even when gpufleet is not pip-installed.
"""

import io
import sys
from pathlib import Path

# The engine reads the analyzer's port from our stdout: a line that must not wait in a pipe buffer, however the
# interpreter was started. pulumi_policy writes it to sys.stdout.buffer without a flush and then serves forever,
# so stdout gets an unbuffered binary layer, as `python -u` gives it.
try:
    sys.stdout.flush()
    sys.stdout = io.TextIOWrapper(io.FileIO(sys.stdout.fileno(), "w", closefd=False), encoding="utf-8",
                                  line_buffering=True, write_through=True)
except (OSError, ValueError):  # no file descriptor behind stdout (an embedding host): leave it as it is
    pass

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from pulumi_policy import EnforcementLevel, PolicyPack  # noqa: E402

from infra.policy.pack import PACK_NAME, install_secret_marker, policies  # noqa: E402

install_secret_marker()

PolicyPack(
    PACK_NAME,
    enforcement_level=EnforcementLevel.MANDATORY,
    policies=policies(),
    description="gpufleet: encrypted private storage, IMDSv2, GPU taints, complete GPU fabrics, no public admin "
                "ingress, secret kubeconfigs, owner and cost-center tags, a hub that reaches its workers.",
)
