"""CrossGuard entry point: ``pulumi preview --policy-pack infra/policy`` runs this file.

Pulumi starts it with the policy pack directory as the program, so the repository root (two levels up) is put on
``sys.path`` for ``infra`` and ``placement`` to import even when gpufleet is not pip-installed.
"""

import sys
from pathlib import Path

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
