"""gpufleet's mandatory policies: plain check functions (:mod:`infra.policy.checks`) and their CrossGuard pack.

Run the pack with ``pulumi preview --policy-pack infra/policy``; ``scripts/preview`` runs the same checks on
the mocked resources of every stack. See docs/ci-previews.md.
"""
