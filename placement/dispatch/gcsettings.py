"""The garbage collector's settings of a dispatcher process: ``placement dispatch`` applies :func:`tune_gc` at
start, and each pass decides inside :func:`deciding`.

A pass keeps what it makes (a score per Workload and worker, every Decision) beside the informers' caches (tens of
thousands of dicts and lists). At CPython's default first-generation threshold (700 container objects) a pass
over 1,000 Workloads and 100 workers runs some 300 young collections, whose promotions trigger older ones that
scan the caches again: about a fifth of the pass (``scripts/bench_dispatch.py`` prints the targets with and
without this setting). Nothing here frees less: cyclic garbage is still collected, in larger batches.

Even at that threshold, the young collections that fall inside a pass walk what it has made so far, all of it
alive until the decisions are carried out: two or three of them cost 0.03-0.06 s of a 0.3 s pass at 20 workers.
:func:`deciding` moves that walk after the decisions are known, to the carry-out (which waits on the API server
anyway): the collector resumes there and runs at its next allocation, over the same objects, so the CPU a pass
takes is unchanged but no Workload waits for it (``scripts/bench_dispatch.py`` prints that collection's time
beside each target).
"""

from __future__ import annotations

import gc
from contextlib import AbstractContextManager

from placement.console import paused_gc

# Container objects allocated (net of those freed) between two young collections. 50,000 of them are a few MB
# at most, held a little longer; a pass then runs about 5 young collections instead of 300.
GEN0_THRESHOLD = 50_000


def tune_gc() -> tuple[int, int, int]:
    """Raise the collector's first-generation threshold to :data:`GEN0_THRESHOLD` (the older generations' stay
    as they are); return the thresholds it replaced, for a caller that restores them (the benchmark)."""
    before = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, before[1], before[2])
    return before


def deciding() -> AbstractContextManager[None]:
    """No cyclic collection while a pass reads its snapshots and decides; the collector resumes on leaving (a
    nested use leaves it off): :func:`placement.console.paused_gc`, the one-shot commands' pause. Reference counting
    still frees everything without a cycle inside, and what a pass makes is bounded by its Workloads and workers, so
    the collection it defers is one pass's worth."""
    return paused_gc()
