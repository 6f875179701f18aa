"""The garbage collector's settings of a dispatcher process: ``placement dispatch`` applies :func:`tune_gc` at start.

A pass keeps what it makes (a score per Workload and worker, every Decision) beside the informers' caches (tens of
thousands of dicts and lists). At CPython's default first-generation threshold (700 container objects) a pass
over 1,000 Workloads and 100 workers runs some 300 young collections, whose promotions trigger older ones that
scan the caches again: about a fifth of the pass (``scripts/bench_dispatch.py`` prints the targets with and
without this setting). Nothing here frees less: cyclic garbage is still collected, in larger batches.
"""

from __future__ import annotations

import gc

# Container objects allocated (net of those freed) between two young collections. 50,000 of them are a few MB
# at most, held a little longer; a pass then runs about 5 young collections instead of 300.
GEN0_THRESHOLD = 50_000


def tune_gc() -> tuple[int, int, int]:
    """Raise the collector's first-generation threshold to :data:`GEN0_THRESHOLD` (the older generations' stay
    as they are); return the thresholds it replaced, for a caller that restores them (the benchmark)."""
    before = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, before[1], before[2])
    return before
